"""DPO's frozen reference for MADPO (``preference_reference="initial"``, our extension; the public margin is
reference-free).

With a reference the margin of agent i on a pair is ``(log π_i(w) − log π_ref,i(w)) − (log π_i(l) −
log π_ref,i(l))``: the policy's margin minus the reference's
(:func:`~comlrl.trainers.preference.losses.dpo_margins`), so a pair the
reference already ranks right pulls less than one it ranks wrong, and both completions' likelihoods are
measured against where they started instead of pushed without bound. The reference is a frozen copy of the
agents as the trainer got them (:class:`~comlrl.trainers.core.reference.ReferencePolicy`), taken once at
construction (in a pettingllms pipeline stage: at the stage's start) and saved once per fresh run into
``output_dir/preference_reference``, so a resumed run reloads exactly it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from comlrl.trainers.core.reference import ReferencePolicy
from comlrl.trainers.core.trainer_core import TrainerPart
from comlrl.trainers.preference.losses import pair_margins, sequence_logprob_sums

__all__ = ["REFERENCE_DIR", "PreferenceReference"]

logger = logging.getLogger(__name__)

REFERENCE_DIR = "preference_reference"


class PreferenceReference(TrainerPart):
    """The frozen initial agents of a MADPO trainer and their margins on a batch of pairs.

    Build it in the trainer's constructor (before any update); register it with ``trainer.add_part``.

    Args:
        policy: the trainer's policy, copied now.
        devices: where the copy lives (the config's ``reference_devices``).
        output_dir: the run's output folder (read when a fresh run starts: the copy is saved under it).
        data_parallel: the trainer's data-parallel group (rank 0 writes the copy).
    """

    state_key = "preference_reference"

    def __init__(
        self, policy: Any, devices: Any, *, output_dir: Callable[[], str | Path], data_parallel: Any
    ) -> None:
        self.reference = ReferencePolicy(policy, devices)
        self._output_dir = output_dir
        self._data_parallel = data_parallel
        self.snapshot: str | None = None

    @torch.no_grad()
    def margins(
        self,
        agent: str,
        prompts: Sequence[Sequence[int]],
        winners: Sequence[Sequence[int]],
        losers: Sequence[Sequence[int]],
        *,
        pad_token_id: int,
        exclude_last_token: bool,
    ) -> torch.Tensor:
        """The reference's ``log π_ref(w) − log π_ref(l)`` of ``agent`` on each pair (one padded forward)."""
        logprobs, mask = self.reference.token_logprobs(
            agent, list(prompts) + list(prompts), list(winners) + list(losers),
            pad_token_id=pad_token_id, exclude_last_token=exclude_last_token,
        )
        return pair_margins(sequence_logprob_sums(logprobs, mask), len(prompts))

    # ------------------------------------------------------------------------------------ checkpoints
    def on_fresh_run(self) -> None:
        path = Path(self._output_dir()) / REFERENCE_DIR
        self._data_parallel.rank_zero_writes(lambda: self.reference.save(path), None)
        self.snapshot = str(path)

    def state_dict(self) -> dict[str, Any]:
        return {"snapshot": self.snapshot}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.snapshot = state.get("snapshot")
        if self.snapshot is None:
            return
        if Path(self.snapshot).is_dir():
            self.reference.load_weights_(self.snapshot)
        else:
            logger.warning("preference reference snapshot %s is gone; the reference is the copy taken when the "
                           "trainer was built", self.snapshot)
