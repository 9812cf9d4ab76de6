"""What the four preference trainers share on top of :class:`~comlrl.trainers.core.trainer.MultiAgentTrainerBase`:
pair collection, the learning hook, pair counters, and the schedule that gathers pairs and learns from them.

The schedule is an object the trainer owns as ``self.rounds`` (its class is the trainer's ``rounds_class``):
:class:`SingleCollection` for the base trainers (one collection, then the epochs) and
:class:`~comlrl.trainers.preference.rounds.PreferenceRounds` for the iterative ones. It runs the loop, names
the commit points and carries its own checkpoint payloads. It does not hold the trainer: it is built with a
:class:`~comlrl.trainers.preference.host.ScheduleHost` (:meth:`PreferenceTrainerBase.schedule_host`), the
values and callables it uses. Subclasses implement
:meth:`PreferenceTrainerBase.learn_from_pairs` (MADPO's loss, MARLHF's reward model and RL stage). The
constructor, sampling, evaluation, ``save_model`` and exact checkpoint / resume come from the core.

Sampling seeds: candidate j of (item, agent) in round r is drawn with
``derive_seed(derive_seed(seed, "candidates", r, item_index, agent), j)`` (round 0 for the base
trainers), evaluation uses the stream ``"eval"`` with the evaluation count as its step. Pair shuffles use
``derive_seed(seed, "shuffle", r, epoch)`` and random pair selection ``derive_seed(seed,
"pair_selection", r, item_index)``, so a resumed run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import logging
import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from comlrl.checkpoint import extra_dir
from comlrl.seeding import derive_seed
from comlrl.trainers.core.train_options import CheckpointPlan
from comlrl.trainers.core.trainer import MultiAgentTrainerBase
from comlrl.trainers.core.trainer_core import TrainerPart
from comlrl.trainers.preference.config import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl.trainers.preference.host import PairSampling, ScheduleHost
from comlrl.trainers.preference.pairs import build_preference_pairs
from comlrl.trainers.preference.records import PreferencePair, read_round, write_round

logger = logging.getLogger(__name__)

__all__ = ["PreferenceTrainerBase", "SingleCollection"]

_KNOWN_CONFIGS = (MADPOConfig, MADPOIterConfig, MARLHFConfig, MARLHFIterConfig)
PAIRS_PAYLOAD = "pairs"
PAIRS_FILE = "iteration_0001.json"


class SingleCollection(TrainerPart):
    """The base trainers' schedule: pairs among every training item's own candidates, collected once (round
    0, ``host.collect``: :meth:`PreferenceTrainerBase.collect_pairs`, logged), then ``host.learn``
    (``learn_from_pairs``) for ``num_train_epochs`` epochs; ``no_pairs`` says whether the collection gave no
    pair (the policies were then not updated). Commit points: ``checkpoint-0`` right after the collection
    (the pairs travel in the ``pairs`` payload), then one per epoch (``checkpoint-{epochs done}``);
    ``save_steps`` checkpoints inside an epoch resume at the batch their data cursor's ``in_epoch`` names."""

    comparator = None  # the pairs compare an item's own candidates
    takes_comparator = False
    last_stats = None

    def __init__(self, host: ScheduleHost, comparator: Any = None) -> None:
        if comparator is not None:
            raise TypeError("SingleCollection takes no `comparator` (only the iterative trainers compare with one)")
        self.host = host
        self.pairs: list[PreferencePair] | None = None

    def checkpoint_step(self) -> int:
        return int(self.host.data_cursor.get("epochs_done", 0))

    def run(self, plan: CheckpointPlan) -> None:
        host = self.host
        if not host.data_cursor.get("pairs_collected"):
            pairs = host.collect()
            if not pairs:
                self.no_pairs = True
                return
            host.data_cursor = {"pairs_collected": True, "epochs_done": 0}
            self.pairs = pairs
            host.commit(plan, 0, last=False, force=True)
        self.no_pairs = False
        epochs = host.args.num_train_epochs

        def epoch_end(done: int) -> None:
            host.flush_window()
            host.data_cursor = {"pairs_collected": True, "epochs_done": done}
            host.commit(plan, done, last=done == epochs)

        cursor = host.data_cursor
        host.learn(
            self.pairs,
            round_index=0,
            start_epoch=cursor["epochs_done"],
            start_batch=cursor.get("in_epoch", 0),
            on_epoch_end=epoch_end,
        )

    def payloads(self) -> dict[str, Callable[[Path], None]]:
        pairs = self.pairs
        if self.host.data_cursor.get("pairs_collected") and pairs is not None:
            return {PAIRS_PAYLOAD: lambda folder: write_round(folder / PAIRS_FILE, 1, pairs)}
        return {}

    def restore(self, checkpoint: Path) -> None:
        if self.host.data_cursor.get("pairs_collected"):
            self.pairs = read_round(extra_dir(checkpoint, PAIRS_PAYLOAD) / PAIRS_FILE).pairs


class PreferenceTrainerBase(MultiAgentTrainerBase):
    """The preference trainers' base: the shared constructor (see
    :class:`~comlrl.trainers.core.trainer.MultiAgentTrainerBase` for the public keywords) plus pair
    collection and the schedule ``self.rounds`` (an instance of ``rounds_class``, built with the
    ``comparator`` keyword, which only the iterative trainers take)."""

    config_class: type = MADPOConfig
    exact_config_types = _KNOWN_CONFIGS
    rounds_class: type = SingleCollection

    def __init__(self, *args: Any, comparator: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if comparator is not None and not getattr(self.rounds_class, "takes_comparator", True):
            raise TypeError(
                f"{type(self).__name__} takes no `comparator` (only the iterative trainers compare with one)"
            )
        self.rounds = self.add_part(self.rounds_class(self.schedule_host(), comparator=comparator))

    def schedule_host(self) -> ScheduleHost:
        """What the schedule ``self.rounds`` gets instead of the trainer (:mod:`.host`): the config, the data
        cursor and the data-parallel group, and the methods it calls, bound to this trainer."""
        return ScheduleHost(
            args=self.args,
            data_parallel=self.data_parallel,
            get_cursor=lambda: self.data_cursor,
            set_cursor=lambda cursor: setattr(self, "data_cursor", cursor),
            learn=self.learn_from_pairs,
            commit=self._commit,
            save_due_checkpoint=self.save_due_checkpoint,
            flush_window=self._flush_window,
            log=self._log,
            progress_bar=self.progress_bar,
            count_pairs=self._count_pairs,
            collect=self._collect_logged,
            sampling=PairSampling(
                items=self._require_train_items,
                batches=lambda items, **kwargs: self.sample_batches(items, self.generation_batch_items, **kwargs),
                params=self.sampling_params,
                score=self.score_finite,
                role_prompts=self.collaboration.role_prompts if self.collaboration is not None else None,
                tokenizers=lambda: self.tokenizers,
                num_agents=self.num_agents,
            ),
            comparator_context=self._comparator_context,
            save_policy=lambda folder: self.policy.save(folder),
            reward_func=self.reward_func,
        )

    @property
    def no_pairs(self) -> bool:
        """Whether the base trainers' collection gave no pair (the policies were not updated); set by
        ``train()``."""
        return self.rounds.no_pairs

    @property
    def comparator(self) -> Any:
        """The comparator of the iterative rounds (built from the config on first use); None for the base
        trainers, whose pairs compare an item's own candidates."""
        return self.rounds.comparator

    @property
    def last_round_stats(self) -> Any:
        """What the last iterative round's collection saw (:class:`~.rounds.RoundStats`); None before the
        first round and for the base trainers."""
        return self.rounds.last_stats

    def reset_counters(self) -> None:
        """Zero the run's counters (a fresh ``train()``)."""
        self.pairs_built = 0
        self.pairs_skipped = 0
        super().reset_counters()

    # ------------------------------------------------------------------------------------ base collection
    def _collect_logged(self) -> list[PreferencePair]:
        """:meth:`collect_pairs` of round 0, logged; warns when it gave no pair."""
        pairs = self.collect_pairs(round_index=0)
        self._log(
            {
                "pairs_built": self.pairs_built,
                "pairs_skipped": self.pairs_skipped,
                "turn_1/collection_reward_mean": self._collection_reward_mean,
            },
        )
        if not pairs:
            message = (
                f"{type(self).__name__}: no training item yielded a non-tied pair "
                f"({len(self.train_dataset)} items, "
                f"{self.args.preference_num_candidates} candidates each, "
                f"{self.pairs_skipped} tied comparisons); the policies were not updated"
            )
            logger.warning(message)
            if self.verbose:
                print(message)
        return pairs

    def _count_pairs(self, built: int, skipped: int) -> None:
        self.pairs_built += built
        self.pairs_skipped += skipped

    def _comparator_context(self) -> Any:
        """What a comparator built from the config gets of this trainer."""
        from comlrl.trainers.preference.comparators.base import ComparatorContext

        return ComparatorContext(
            policy=self.policy,
            backend=self.backend,
            args=self.args,
            output_dir=self.args.output_dir,
            seed=self.args.seed,
            tokenizers=self.tokenizers,
            centralized_adapter=self.centralized_adapter,
        )

    def collect_pairs(self, round_index: int = 0) -> list[PreferencePair]:
        """Pairs among every training item's own candidates (the base trainers), in dataset order. Data
        parallel: each rank samples and scores its shard of the items, then every rank takes all the pairs."""
        items = self._require_train_items()
        args = self.args
        pairs: list[PreferencePair] = []
        rewards: list[float] = []
        counted = (self.pairs_built, self.pairs_skipped)
        start, stop = self.data_parallel.bounds(len(items))
        batches = self.sample_batches(
            items[:stop],
            self.generation_batch_items,
            n=args.preference_num_candidates,
            stream="candidates",
            step=round_index,
            desc="Collecting pairs",
            start=start,
        )
        for _, _, samples in batches:
            for sample in samples:
                scores = self.score_finite(sample, f"round {round_index}, pair collection")
                if scores is None:  # a non-finite score: the item is dropped (counted, logged)
                    continue
                rewards += scores.processed
                built = build_preference_pairs(
                    sample.prompt_texts,
                    sample.candidates,
                    scores,
                    pair_selection=args.pair_selection,
                    pairs_per_sample=args.preference_pairs_per_sample,
                    rng=random.Random(
                        derive_seed(args.seed, "pair_selection", round_index, sample.item_index)
                    ),
                )
                self.pairs_built += len(built)
                self.pairs_skipped += _tied_pairs(scores.processed)
                pairs += built
        if self.data_parallel.size > 1:
            mine = (pairs, rewards, self.pairs_built - counted[0], self.pairs_skipped - counted[1])
            parts = self.data_parallel.gather(mine)
            pairs, rewards = [p for part in parts for p in part[0]], [r for part in parts for r in part[1]]
            self.pairs_built = counted[0] + sum(part[2] for part in parts)
            self.pairs_skipped = counted[1] + sum(part[3] for part in parts)
        self._collection_reward_mean = sum(rewards) / len(rewards) if rewards else math.nan
        return pairs

    # ------------------------------------------------------------------------------------ learning hook
    def learn_from_pairs(
        self,
        pairs: list[PreferencePair],
        *,
        round_index: int,
        start_epoch: int = 0,
        start_batch: int = 0,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> None:
        """Train the agents on ``pairs`` (MADPO: ``num_train_epochs`` epochs of the joint-margin loss), from
        epoch ``start_epoch`` and, in it, batch ``start_batch`` (MARLHF: rollout buffer) on a resume.
        ``on_epoch_end(epochs_done)`` is called after each epoch (the base trainers checkpoint there)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------ train()
    def _run(self, plan: CheckpointPlan) -> None:
        self.rounds.run(plan)

    def checkpoint_step(self) -> int:
        return self.rounds.checkpoint_step()

    # ------------------------------------------------------------------------------------ accounting
    def record_update(self, num_pairs: int, metrics: Mapping[str, float]) -> None:
        """Account one optimizer update on ``num_pairs`` pairs and log when ``logging_steps`` have passed."""
        self.record_step(self.args.environment_steps_per_pair * num_pairs, metrics)

    def _window_counters(self) -> dict[str, float]:
        counters = {"pairs_built": self.pairs_built, "pairs_skipped": self.pairs_skipped}
        return {**counters, **super()._window_counters()}

    # ------------------------------------------------------------------------------------ checkpoints
    def state_extra(self) -> dict[str, Any]:
        return {**super().state_extra(), "pairs_built": self.pairs_built, "pairs_skipped": self.pairs_skipped}

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        super().load_state_extra(extra)
        self.pairs_built = int(extra["pairs_built"])
        self.pairs_skipped = int(extra["pairs_skipped"])


def _tied_pairs(rewards: Sequence[float]) -> int:
    """Unordered candidate pairs with equal scores (dropped as ties)."""
    counts: dict[float, int] = defaultdict(int)
    for r in rewards:
        counts[r] += 1
    return sum(c * (c - 1) // 2 for c in counts.values())
