"""What the four preference trainers share on top of :class:`~comlrl.trainers.base.MultiAgentTrainerBase`:
pair collection of the base trainers, the learning hook, pair counters and the pairs' checkpoint payload.

Subclasses implement :meth:`PreferenceTrainerBase.learn_from_pairs` (MADPO's loss, MARLHF's reward model
and RL stage) and, for the iterative trainers, the round loop of :mod:`.iterative`. The constructor,
sampling, evaluation, ``save_model`` and exact checkpoint / resume come from the shared base.

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
from comlrl.trainers.base import (  # noqa: F401  (re-exported: the preference modules import them here)
    CentralizedCollaboration,
    CheckpointPlan,
    ItemSample,
    MultiAgentTrainerBase,
    write_json,
)
from comlrl.trainers.preference.config import (
    MADPOConfig,
    MADPOIterConfig,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl.trainers.preference.pairs import build_preference_pairs
from comlrl.trainers.preference.records import PreferencePair, read_round, write_round

logger = logging.getLogger(__name__)

__all__ = ["PreferenceTrainerBase"]

_KNOWN_CONFIGS = (MADPOConfig, MADPOIterConfig, MARLHFConfig, MARLHFIterConfig)
PAIRS_PAYLOAD = "pairs"
PAIRS_FILE = "iteration_0001.json"


class PreferenceTrainerBase(MultiAgentTrainerBase):
    """The preference trainers' base: the shared constructor (see
    :class:`~comlrl.trainers.base.MultiAgentTrainerBase` for the public keywords) plus pair collection."""

    config_class: type = MADPOConfig
    exact_config_types = _KNOWN_CONFIGS
    # Items whose candidates are sampled in one backend.generate call (the backend cuts micro-batches
    # by token budget, so this only bounds how many completions are held at once).
    generation_batch_items = 64

    def reset_counters(self) -> None:
        """Zero the run's counters (a fresh ``train()``)."""
        self.pairs_built = 0
        self.pairs_skipped = 0
        super().reset_counters()

    # ------------------------------------------------------------------------------------ base collection
    def collect_pairs(self, round_index: int = 0) -> list[PreferencePair]:
        """Pairs among every training item's own candidates (the base trainers), in dataset order."""
        items = self._require_train_items()
        args = self.args
        pairs: list[PreferencePair] = []
        rewards: list[float] = []
        with self._progress(total=len(items), desc="Collecting pairs", unit="item") as bar:
            for start in range(0, len(items), self.generation_batch_items):
                chunk = items[start : start + self.generation_batch_items]
                indices = list(range(start, start + len(chunk)))
                for sample in self.sample_items(
                    chunk, indices, n=args.preference_num_candidates, stream="candidates", step=round_index
                ):
                    scores = self.score(sample)
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
                bar.update(len(chunk))
        self._collection_reward_mean = sum(rewards) / len(rewards) if rewards else math.nan
        return pairs


    # ------------------------------------------------------------------------------------ learning hook
    def learn_from_pairs(
        self,
        pairs: list[PreferencePair],
        *,
        round_index: int,
        start_epoch: int = 0,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> None:
        """Train the agents on ``pairs`` (MADPO: ``num_train_epochs`` epochs of the joint-margin loss).
        ``on_epoch_end(epochs_done)`` is called after each epoch (the base trainers checkpoint there)."""
        raise NotImplementedError


    # ------------------------------------------------------------------------------------ train()
    def _run(self, plan: CheckpointPlan) -> None:
        """The base trainers: collect pairs once (round 0), then learn from them."""
        if self._cursor.get("pairs_collected"):
            pairs = self._restored_pairs
        else:
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
                self.no_pairs = True
                return
            self._cursor = {"pairs_collected": True, "epochs_done": 0}
            self._pairs = pairs
            self._commit(plan, 0, last=False, force=True)
        self.no_pairs = False
        self._pairs = pairs
        epochs = self.args.num_train_epochs

        def epoch_end(done: int) -> None:
            self._flush_window()
            self._cursor = {"pairs_collected": True, "epochs_done": done}
            self._commit(plan, done, last=done == epochs)

        self.learn_from_pairs(
            pairs, round_index=0, start_epoch=self._cursor["epochs_done"], on_epoch_end=epoch_end
        )

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

    def checkpoint_payloads(self) -> dict[str, Callable[[Path], None]]:
        """``{name: writer(folder)}`` payloads of a checkpoint (the base trainers keep their pairs)."""
        payloads = dict(super().checkpoint_payloads())
        pairs = getattr(self, "_pairs", None)
        if not self.iterative and self._cursor.get("pairs_collected") and pairs is not None:
            payloads[PAIRS_PAYLOAD] = lambda folder: write_round(folder / PAIRS_FILE, 1, pairs)
        return payloads

    def restore_payloads(self, checkpoint: Path) -> None:
        super().restore_payloads(checkpoint)
        if not self.iterative and self._cursor.get("pairs_collected"):
            self._restored_pairs = read_round(extra_dir(checkpoint, PAIRS_PAYLOAD) / PAIRS_FILE).pairs


def _tied_pairs(rewards: Sequence[float]) -> int:
    """Unordered candidate pairs with equal scores (dropped as ties)."""
    counts: dict[float, int] = defaultdict(int)
    for r in rewards:
        counts[r] += 1
    return sum(c * (c - 1) // 2 for c in counts.values())


