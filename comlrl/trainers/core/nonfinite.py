"""Counting what a NaN or ±inf made a trainer skip, and stopping the run when it keeps happening.

Every trainer family (MADPO, MARLHF and its reward model, the MAGRPO family, IAC / MAAC, pettingllms'
AT-GRPO) follows one rule, with one setting, ``max_nonfinite_losses_in_a_row`` (default 10):

- a step whose loss is non-finite (a NaN / inf loss, log-prob, advantage, value or gradient norm; the
  check is :func:`comlrl.rl.nonfinite_names`) is skipped: no optimizer step, no parameter change. It is
  counted in ``nonfinite_losses_skipped`` and logged as a warning naming what was non-finite, the agent or
  policy and the step;
- a group holding a non-finite reward (an item's K joint responses, an AT-GRPO group) is dropped
  (:func:`comlrl.rl.finite_group_mask`), counted in ``nonfinite_rewards_dropped`` and logged; a step whose
  every group was dropped is a non-finite step;
- ``max_nonfinite_losses_in_a_row`` non-finite steps in a row (a finite step resets the count; AT-GRPO
  counts per policy, whose optimizer steps are separate) stop the run with :class:`NonFiniteError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

__all__ = ["NonFiniteError", "NonFiniteGuard", "SETTING"]

logger = logging.getLogger(__name__)

SETTING = "max_nonfinite_losses_in_a_row"


class NonFiniteError(RuntimeError, FloatingPointError):
    """Too many non-finite steps in a row (past ``max_nonfinite_losses_in_a_row``)."""


class NonFiniteGuard:
    """The run's non-finite counters and the in-a-row limit.

    Args:
        limit: ``max_nonfinite_losses_in_a_row`` (>= 1).
        on_count: called with :meth:`metrics` right after a count changes (before the limit may stop the
            run), e.g. to log the counters at once.

    ``in_a_row`` is kept per key (None for the comlrl trainers, whose updates step every agent together;
    the policy name for AT-GRPO).
    """

    def __init__(self, limit: int, on_count: Callable[[dict[str, float]], Any] | None = None) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"`{SETTING}` must be an integer >= 1, got {limit!r}")
        self.limit = limit
        self.on_count = on_count
        self.losses_skipped = 0
        self.rewards_dropped = 0
        self.in_a_row: dict[Hashable, int] = {}

    def metrics(self) -> dict[str, float]:
        """The run counters under their logged names."""
        return {
            "nonfinite_losses_skipped": float(self.losses_skipped),
            "nonfinite_rewards_dropped": float(self.rewards_dropped),
        }

    def skip_step(self, what: str, where: str, key: Hashable = None) -> None:
        """A step skipped because ``what`` (e.g. ``"log-probs of agent 1"``) was non-finite at ``where``."""
        self.losses_skipped += 1
        logger.warning(
            "non-finite %s at %s: step skipped, no parameter changed (%d skipped so far)",
            what,
            where,
            self.losses_skipped,
        )
        self._counted()
        self._streak(f"non-finite {what}", where, key)

    def drop_rewards(self, groups: int, what: str, where: str) -> None:
        """``groups`` groups dropped at ``where`` for a non-finite reward (``what`` says which)."""
        self.rewards_dropped += groups
        logger.warning(
            "non-finite reward at %s: %d group(s) dropped (%d so far): %s", where, groups, self.rewards_dropped, what
        )
        self._counted()

    def empty_step(self, where: str, key: Hashable = None) -> None:
        """A step (of ``key``'s policy) skipped because every one of its groups was dropped for a non-finite
        reward: no parameter changes, and it counts toward the in-a-row limit."""
        owner = "" if key is None else f" of policy {key!r}"
        logger.warning("no group%s with finite rewards left at %s: step skipped, no parameter changed", owner, where)
        self._streak("reward in every group", where, key)

    def finite_step(self, key: Hashable = None) -> None:
        """A step went through: the in-a-row count of ``key`` starts over."""
        self.in_a_row[key] = 0

    def _counted(self) -> None:
        if self.on_count is not None:
            self.on_count(self.metrics())

    def _streak(self, what: str, where: str, key: Hashable) -> None:
        count = self.in_a_row[key] = self.in_a_row.get(key, 0) + 1
        if count >= self.limit:
            owner = "" if key is None else f" of policy {key!r}"
            raise NonFiniteError(
                f"{count} non-finite steps in a row{owner} (limit `{SETTING}`={self.limit}); the last: {what} "
                f"at {where}. Check the learning rate, the dtype, the models' outputs and the reward function"
            )

    # ------------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The counters under flat keys (a comlrl checkpoint's ``nonfinite_in_a_row`` is the None key's)."""
        keyed = {str(k): v for k, v in self.in_a_row.items() if k is not None}
        return {
            "nonfinite_losses_skipped": self.losses_skipped,
            "nonfinite_rewards_dropped": self.rewards_dropped,
            "nonfinite_in_a_row": self.in_a_row.get(None, 0),
            **({"nonfinite_in_a_row_by_key": keyed} if keyed else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; counters a checkpoint written before them lacks start at 0."""
        self.losses_skipped = int(state.get("nonfinite_losses_skipped", 0))
        self.rewards_dropped = int(state.get("nonfinite_rewards_dropped", 0))
        self.in_a_row = {None: int(state.get("nonfinite_in_a_row", 0))}
        self.in_a_row.update({k: int(v) for k, v in state.get("nonfinite_in_a_row_by_key", {}).items()})
