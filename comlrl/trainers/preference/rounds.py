"""The iterative preference loop of MADPOIter and MARLHFIter: an object the trainer owns as ``self.rounds``.

Round r of ``num_iterations`` (1-based), top to bottom:

1. ``comparator.begin_round(r)``;
2. per batch of items: the current agents sample ``preference_num_candidates`` joint responses (one
   generate call) and the comparator answers the same prompts with its candidates; both sides are scored
   by the oracle; candidate k of the current side meets the comparator's candidate k (only indices
   present on both sides), and every comparison with a clear winner becomes a pair. An item the comparator
   failed on is dropped and counted; more than ``comparator_api_max_failure_rate`` of the round's items
   failing stops the run;
3. the replay buffer stores the round (``iteration_NNNN.json`` + id sidecar) and draws the training pairs;
4. the trainer learns from them (``host.learn``: the trainer's ``learn_from_pairs``; MADPO:
   ``num_train_epochs`` epochs; MARLHF: reward model, then RL);
5. ``comparator.end_round(r)``; a checkpoint may be written (``train(checkpoint_dir=...)``).

The loop does not hold its trainer: it gets a :class:`~comlrl.trainers.preference.host.ScheduleHost` with the
config, the sampling and scoring (:class:`~comlrl.trainers.preference.host.PairSampling`), the learning step
and the bookkeeping it calls.

Data parallel (:mod:`comlrl.trainers.core.data_parallel`): step 2 runs on each rank's shard of the items
and every rank then takes all the pairs and counts in rank order; every rank holds the same replay buffer and
draws the same sample in step 3 (rank 0 writes the round files, reward distributions and policy snapshots).

A ``save_steps`` checkpoint inside a round (during step 4) keeps the round's training pairs (payload
``round_pairs``) and where learning stood (data cursor ``round_pairs``, ``epochs_done``, ``in_epoch``); a run
resumed from it goes on with step 4 there, then step 5.

Logged per round: ``iter/current_iteration``, ``iter/current_preference_pairs``,
``iter/total_preference_pairs``, ``iter/train_preference_pairs`` (the public names), and
``iter/failed_items``, ``iter/comparator_unparsed``, ``iter/tied_comparisons``,
``iter/current_reward_mean``, ``iter/comparator_reward_mean``, ``iter/current_win_rate``
(with ``log_reward_distribution`` also the distributions of :mod:`.distribution`).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from comlrl.atomic_io import atomic_write_json
from comlrl.checkpoint import extra_dir, read_json_object
from comlrl.seeding import derive_seed
from comlrl.trainers.core.oracle import OracleScores
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.core.train_options import CheckpointPlan
from comlrl.trainers.core.trainer_core import TrainerPart
from comlrl.trainers.preference.distribution import mean_or_nan, reward_range, write_reward_distribution
from comlrl.trainers.preference.host import ScheduleHost
from comlrl.trainers.preference.pairs import build_comparison_pairs
from comlrl.trainers.preference.records import (
    ROUND_FILE_RE,
    PreferencePair,
    RoundFile,
    RoundFileError,
    ensure_token_ids,
    list_round_files,
    read_round,
    round_file_name,
    sidecar_path,
    write_round,
)
from comlrl.trainers.preference.replay import PreferenceReplayBuffer

logger = logging.getLogger(__name__)

__all__ = ["PreferenceRounds", "RoundStats"]

REPLAY_PAYLOAD = "replay"
COMPARATOR_PAYLOAD = "comparator"
ROUND_PAIRS_PAYLOAD = "round_pairs"


@dataclass
class RoundStats:
    """What one round's collection saw (raw scores for the reward distributions)."""

    items: int = 0
    failed_items: int = 0
    unparsed: int = 0
    ties: int = 0
    current_wins: int = 0
    comparisons: int = 0
    current_processed: list[float] = field(default_factory=list)
    comparator_processed: list[float] = field(default_factory=list)
    current_raw: list[float] = field(default_factory=list)
    comparator_raw: list[float] = field(default_factory=list)
    last_error: str | None = None

    @staticmethod
    def merged(parts: list[RoundStats]) -> RoundStats:
        """The stats of the ranks' shards of one round (in rank order) as one process would have counted them."""
        out = RoundStats(items=parts[0].items)
        for part in parts:
            for name in ("failed_items", "unparsed", "ties", "current_wins", "comparisons"):
                setattr(out, name, getattr(out, name) + getattr(part, name))
            for name in ("current_processed", "comparator_processed", "current_raw", "comparator_raw"):
                getattr(out, name).extend(getattr(part, name))
            out.last_error = part.last_error or out.last_error
        return out


class PreferenceRounds(TrainerPart):
    """The round loop (see the module docstring): holds the comparator, the replay buffer and the last
    round's :class:`RoundStats`, and learns through ``host.learn`` (the trainer's ``learn_from_pairs``).

    Args:
        host: what the loop uses of its trainer
            (:class:`~comlrl.trainers.preference.host.ScheduleHost`: config, data cursor, data-parallel group,
            sampling and scoring, learning step, logging and commit points).
        comparator: an object implementing
            :class:`~comlrl.trainers.preference.comparators.base.Comparator`; None builds one from the
            config's ``comparator_*`` fields on first use.

    Commit points: ``checkpoint-{rounds done}``. Payloads: the replay buffer's round files and state
    (``replay``) and the comparator's state (``comparator``).
    """

    takes_comparator = True

    def __init__(self, host: ScheduleHost, comparator: Any = None) -> None:
        self.host = host
        self._comparator = comparator
        self.replay_buffer: PreferenceReplayBuffer | None = None
        self.last_stats: RoundStats | None = None
        self.train_pairs: list[PreferencePair] | None = None  # the training pairs of the round in progress
        if host.args.log_reward_distribution:
            reward_range(host.reward_func)  # checked now, not after the first round

    # ------------------------------------------------------------------------------------ comparator
    @property
    def comparator(self) -> Any:
        """The comparator (built from the config on first use)."""
        if self._comparator is None:
            from comlrl.trainers.preference.comparators import build_comparator

            self._comparator = build_comparator(self.host.args, self.host.comparator_context())
        return self._comparator

    def _new_replay_buffer(self, *, resume: bool) -> PreferenceReplayBuffer:
        args = self.host.args
        return PreferenceReplayBuffer(
            args.resolved_preference_replay_dir,
            mode=args.preference_replay_mode,
            k=args.preference_replay_k,
            lam=args.preference_replay_lambda,
            sample_size=args.preference_replay_sample_size,
            seed=derive_seed(args.seed, "replay"),
            resume=resume,
            write=self.host.data_parallel.main,  # data parallel: rank 0 writes, every rank draws the same
        )

    # ------------------------------------------------------------------------------------ the loop
    def checkpoint_step(self) -> int:
        return int(self.host.data_cursor.get("rounds_done", 0))

    def run(self, plan: CheckpointPlan) -> None:
        host, args = self.host, self.host.args
        done = self.checkpoint_step()
        # Built before any update: the history source snapshots the initial policy.
        self.comparator  # noqa: B018
        if self.replay_buffer is None:
            self.replay_buffer = self._new_replay_buffer(resume=False)
        if done == 0 and args.saves_policy_snapshots and not self.round_in_progress:
            self._save_policy_snapshot("initial")
        total = args.num_iterations
        with host.progress_bar(total=total, desc="Rounds", unit="round") as bar:
            bar.update(done)
            for round_index in range(done + 1, total + 1):
                if self.round_in_progress:  # resumed from a save_steps checkpoint inside this round
                    self.learn_round(round_index)
                else:
                    self.run_round(round_index)
                host.data_cursor = {"rounds_done": round_index}
                host.commit(plan, round_index, last=round_index == total)
                bar.update(1)

    @property
    def round_in_progress(self) -> bool:
        """Whether the data cursor stands inside a round's learning (its pairs drawn, its update going on)."""
        return bool(self.host.data_cursor.get("round_pairs"))

    def on_fresh_run(self) -> None:
        self.replay_buffer = None
        self.train_pairs = None

    def run_round(self, round_index: int) -> None:
        """One round: compare, store, draw, learn (see the module docstring)."""
        host, args = self.host, self.host.args
        comparator = self.comparator
        comparator.begin_round(round_index)
        pairs, stats = self.collect_comparison_pairs(round_index)
        # Text without ids (a remote or centralized comparator) is tokenized once, before the round is
        # written, so its sidecar carries the ids to every later replay draw.
        ensure_token_ids(pairs, host.sampling.tokenizers(), append_eos=True)
        buffer = self.replay_buffer
        buffer.add_round(pairs)
        host.data_parallel.barrier()  # rank 0 wrote the round: the other ranks' draws may read it
        train_pairs = buffer.sample()
        ensure_token_ids(train_pairs, host.sampling.tokenizers(), append_eos=True)  # only files written elsewhere
        host.count_pairs(len(pairs), stats.ties)
        metrics = {
            "iter/current_iteration": round_index,
            "iter/current_preference_pairs": len(pairs),
            "iter/total_preference_pairs": sum(r.num_pairs for r in buffer.rounds),
            "iter/train_preference_pairs": len(train_pairs),
            "iter/failed_items": stats.failed_items,
            "iter/comparator_unparsed": stats.unparsed,
            "iter/tied_comparisons": stats.ties,
            "iter/current_reward_mean": mean_or_nan(stats.current_processed),
            "iter/comparator_reward_mean": mean_or_nan(stats.comparator_processed),
            "iter/current_win_rate": stats.current_wins / stats.comparisons
            if stats.comparisons
            else math.nan,
        }
        if args.log_reward_distribution:
            low, high = reward_range(host.reward_func)
            metrics.update(
                write_reward_distribution(
                    args.reward_distribution_dir,
                    round_index,
                    stats.current_raw,
                    stats.comparator_raw,
                    pairs,
                    low,
                    high,
                    write=host.data_parallel.main,
                )
            )
        host.log(metrics)
        self.last_stats = stats
        self.train_pairs = train_pairs
        host.data_cursor = {"rounds_done": round_index - 1, "round_pairs": True, "epochs_done": 0}
        self.learn_round(round_index)

    def learn_round(self, round_index: int) -> None:
        """Learn from the round's training pairs (from where the data cursor stands), then close the round."""
        host, args = self.host, self.host.args
        cursor = host.data_cursor

        def epoch_end(done: int) -> None:
            host.flush_window()
            cursor["epochs_done"] = done
            host.save_due_checkpoint()

        if self.train_pairs:
            host.learn(
                self.train_pairs,
                round_index=round_index,
                start_epoch=int(cursor.get("epochs_done", 0)),
                start_batch=int(cursor.get("in_epoch", 0)),
                on_epoch_end=epoch_end,
            )
        else:
            logger.warning(
                "round %d: no training pairs (all comparisons tied or failed); no update", round_index
            )
        host.flush_window()
        self.comparator.end_round(round_index)
        self.train_pairs = None
        if args.saves_policy_snapshots:
            self._save_policy_snapshot(f"iteration_{round_index:04d}")

    def _save_policy_snapshot(self, name: str) -> None:
        host = self.host
        folder = Path(host.args.policy_checkpoint_dir) / name
        host.data_parallel.rank_zero_writes(lambda: host.save_policy(folder), None)

    def collect_comparison_pairs(self, round_index: int) -> tuple[list[PreferencePair], RoundStats]:
        """This round's pairs of current-vs-comparator candidates over every training item, in order. Data
        parallel: each rank compares its shard of the items, then every rank takes all the pairs and stats."""
        host, args = self.host, self.host.args
        sampling, data_parallel = host.sampling, host.data_parallel
        items = sampling.items()
        comparator = self.comparator
        cmp_params = sampling.params(args.resolved_comparator_num_candidates)
        stats = RoundStats(items=len(items))
        limit = args.comparator_api_max_failure_rate * len(items)
        pairs: list[PreferencePair] = []
        first, stop = data_parallel.bounds(len(items))
        batches = sampling.batches(
            items[:stop],
            n=args.preference_num_candidates,
            stream="candidates",
            step=round_index,
            desc=f"Round {round_index} pairs",
            start=first,
        )
        for chunk, indices, samples in batches:
            # Under centralized collaboration the comparator gets the role prompts and writes the joint
            # response itself.
            if sampling.role_prompts is not None:
                prompts = [sampling.role_prompts(item) for item in chunk]
            else:
                prompts = [s.prompts for s in samples]
            outputs = comparator.sample(
                chunk, prompts, cmp_params, round_index=round_index, item_indices=indices
            )
            if len(outputs) != len(chunk):
                raise RuntimeError(
                    f"comparator {getattr(comparator, 'name', type(comparator).__name__)!r} returned "
                    f"{len(outputs)} outputs for {len(chunk)} items"
                )
            for sample, output in zip(samples, outputs):
                if output.error is not None:
                    stats.failed_items += 1
                    stats.last_error = output.error
                    logger.warning(
                        "round %d, item %d: comparator failed (%s); item dropped",
                        round_index,
                        sample.item_index,
                        output.error,
                    )
                    if data_parallel.size == 1:  # data parallel: checked once every rank is done
                        _check_failures(stats, limit, round_index, args)
                    continue
                stats.unparsed += int(output.num_unparsed)
                pairs += self._item_pairs(sample, output, round_index, stats)
        if data_parallel.size > 1:
            parts = data_parallel.gather((pairs, stats))
            pairs, stats = [p for part in parts for p in part[0]], RoundStats.merged([part[1] for part in parts])
            _check_failures(stats, limit, round_index, args)
        return pairs, stats

    def _item_pairs(
        self, sample: ItemSample, output: Any, round_index: int, stats: RoundStats
    ) -> list[PreferencePair]:
        sampling, args = self.host.sampling, self.host.args
        num_current = len(sample.candidates[0])
        candidates, same_tokenizer = output.candidates, bool(output.same_tokenizer)
        if sampling.role_prompts is not None:
            # The one actor writes joint responses, so it is compared with the comparator's joint text.
            candidates, same_tokenizer = [list(output.joint)], bool(output.joint_same_tokenizer)
        count = len(candidates[0]) if candidates else 0
        if candidates and len(candidates) != sampling.num_agents:
            raise RuntimeError(
                f"item {sample.item_index}: the comparator answered for {len(candidates)} agents, expected "
                f"{sampling.num_agents}"
            )
        indices = list(output.indices) if output.indices else list(range(count))
        if len(indices) != count or any(len(agent) != count for agent in candidates):
            raise RuntimeError(
                f"item {sample.item_index}: the comparator returned {len(indices)} indices for "
                f"{[len(agent) for agent in candidates]} candidates per agent"
            )
        current_scores = sampling.score(sample, f"round {round_index}, comparison (current)")
        if current_scores is None:  # a non-finite score: the item gives no pairs (counted, logged)
            return []
        stats.current_processed += current_scores.processed
        stats.current_raw += current_scores.raw
        keep = [j for j, k in enumerate(indices) if k < num_current]
        mine = [[agent[indices[j]] for j in keep] for agent in sample.candidates]
        theirs = [[agent[j] for j in keep] for agent in candidates] if candidates else [[] for _ in mine]
        mine_scores = OracleScores(
            raw=[current_scores.raw[indices[j]] for j in keep],
            processed=[current_scores.processed[indices[j]] for j in keep],
        )
        their_scores = sampling.score(sample, f"round {round_index}, comparison (comparator)", theirs)
        if their_scores is None:
            return []
        stats.comparator_processed += their_scores.processed
        stats.comparator_raw += their_scores.raw
        for cur, cmp in zip(mine_scores.processed, their_scores.processed):
            stats.ties += cur == cmp
            stats.comparisons += cur != cmp
            stats.current_wins += cur > cmp
        return build_comparison_pairs(
            sample.prompt_texts,
            mine,
            mine_scores,
            theirs,
            their_scores,
            pair_selection=args.pair_selection,
            pairs_per_sample=args.preference_pairs_per_sample,
            rng=random.Random(derive_seed(args.seed, "pair_selection", round_index, sample.item_index)),
            comparator_token_ids=same_tokenizer,
        )

    # ------------------------------------------------------------------------------------ checkpoints
    def payloads(self) -> dict:
        payloads = {}
        buffer = self.replay_buffer
        if buffer is not None:

            def write_replay(folder: Path) -> None:
                (folder / "rounds").mkdir()
                for path in buffer.files():
                    shutil.copy2(path, folder / "rounds" / path.name)
                atomic_write_json(folder / "state.json", buffer.state_dict())

            payloads[REPLAY_PAYLOAD] = write_replay
        comparator = self._comparator
        if comparator is not None:
            state = comparator.state_dict()

            def write_comparator(folder: Path) -> None:
                save_files = getattr(comparator, "save_files", None)
                if callable(save_files):
                    save_files(folder / "files")
                _write_state(folder, state)

            payloads[COMPARATOR_PAYLOAD] = write_comparator
        pairs = self.train_pairs
        if self.round_in_progress and pairs is not None:
            name = round_file_name(self.checkpoint_step() + 1)
            payloads[ROUND_PAIRS_PAYLOAD] = lambda folder: write_round(folder / name, self.checkpoint_step() + 1, pairs)
        return payloads

    def restore(self, checkpoint: Path) -> None:
        rounds_done = self.checkpoint_step()
        self.train_pairs = None
        if self.round_in_progress:
            folder = extra_dir(checkpoint, ROUND_PAIRS_PAYLOAD)
            self.train_pairs = read_round(folder / round_file_name(rounds_done + 1)).pairs
        replay_dir = Path(self.host.args.resolved_preference_replay_dir)
        try:
            source = extra_dir(checkpoint, REPLAY_PAYLOAD)
        except FileNotFoundError:
            source = None
        # The round files of this run beyond the checkpoint are about to be written again (data parallel:
        # rank 0 restored them before the other ranks read them).
        for path in list_round_files(replay_dir) if self.host.data_parallel.main else []:
            iteration = int(path.name[len("iteration_") : -len(".json")])
            if iteration > rounds_done or source is not None:
                sidecar_path(path).unlink(missing_ok=True)
                path.unlink()
        buffer = self._new_replay_buffer(resume=True)
        if source is not None and self.host.data_parallel.main:
            replay_dir.mkdir(parents=True, exist_ok=True)
            for path in sorted((source / "rounds").iterdir()):
                shutil.copy2(path, replay_dir / path.name)
        check_round_files(replay_dir)
        if source is not None:
            buffer.load_state_dict(read_json_object(source / "state.json"))
        self.replay_buffer = buffer
        try:
            folder = extra_dir(checkpoint, COMPARATOR_PAYLOAD)
        except FileNotFoundError:
            return
        comparator = self.comparator
        load_files = getattr(comparator, "load_files", None)
        if callable(load_files) and (folder / "files").exists():
            load_files(folder / "files")
        comparator.load_state_dict(_read_state(folder))


def _check_failures(stats: RoundStats, limit: float, round_index: int, args: Any) -> None:
    if stats.failed_items > limit:
        raise RuntimeError(
            f"round {round_index}: the comparator failed on {stats.failed_items} of {stats.items} items, more "
            f"than `comparator_api_max_failure_rate`={args.comparator_api_max_failure_rate}; last error: "
            f"{stats.last_error}"
        )


def _write_state(folder: Path, state: dict) -> None:
    try:
        atomic_write_json(folder / "state.json", state)
    except TypeError:
        import torch

        torch.save(state, folder / "state.pt")


def _read_state(folder: Path) -> dict:
    if (folder / "state.json").exists():
        return read_json_object(folder / "state.json")
    import torch

    return torch.load(folder / "state.pt", map_location="cpu", weights_only=True)


def check_round_files(folder: str | Path) -> list[Path]:
    """The round files of ``folder`` in order, after checking that they are rounds 1, 2, ... without a gap
    and that each is whole: with a sidecar, the sidecar's round number and the JSON file's size must be what
    was written (cheap: no record is parsed); without one, the whole file is read and checked. Raises
    :class:`~comlrl.trainers.preference.records.RoundFileError` naming the first bad file."""
    files = list_round_files(folder)
    for expected, path in enumerate(files, start=1):
        number = int(ROUND_FILE_RE.match(path.name).group(1))
        if number != expected:
            after = f"round {expected - 1}" if expected > 1 else "the start"
            raise RoundFileError(
                f"{path}: round {number} does not follow {after} (round files are numbered 1, 2, ... "
                f"without gaps; expected {round_file_name(expected)})"
            )
        if not sidecar_path(path).exists():
            read_round(path)
            continue
        ids = RoundFile(path)
        header = ids._header
        if int(header["iteration"]) != number:
            raise RoundFileError(f"{ids.sidecar}: describes round {header['iteration']} but sits beside {path.name}")
        size = path.stat().st_size
        if size != int(header["json_size"]):
            raise RoundFileError(
                f"{path}: is {size} bytes but was written with {header['json_size']} (its sidecar "
                f"{ids.sidecar.name} says so); it was edited or cut short after it was written"
            )
    return files
