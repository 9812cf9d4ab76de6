"""The narrow interface between a preference trainer and its schedule (``trainer.rounds``).

A schedule (:class:`~comlrl.trainers.preference.base.SingleCollection`,
:class:`~comlrl.trainers.preference.rounds.PreferenceRounds`) runs the loop that gathers pairs and learns from
them. It does not hold its trainer: the trainer hands it a :class:`ScheduleHost`
(:meth:`~comlrl.trainers.preference.base.PreferenceTrainerBase.schedule_host`), which carries exactly what a
schedule uses, as values and callables:

- the config (read only: the loop's own settings; the learning settings, e.g. ``dpo_beta``, stay with the
  learning code that reads them), the data-parallel group and the data cursor (read and replaced);
- the trainer's learning step on a list of pairs (``learn``: MADPO's epochs, MARLHF's reward model and RL);
- the trainer's bookkeeping at the loop's commit points (``commit``, ``save_due_checkpoint``, ``log``,
  ``flush_window``, ``progress_bar``, ``count_pairs``);
- for the base trainers, the one collection of pairs (``collect``); for the iterative ones the sampling and
  scoring of candidates (:class:`PairSampling`), the comparator's context and the policy snapshot writer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from comlrl.trainers.core.oracle import OracleScores
from comlrl.trainers.core.sampling import ItemSample

__all__ = ["PairSampling", "ScheduleHost"]


@dataclass(frozen=True)
class PairSampling:
    """Sampling and scoring of the training items, as a round's pair collection uses them.

    Attributes:
        items: the training items (an error when there are none).
        batches: ``batches(items, *, n, stream, step, desc, start)`` yields ``(batch, item indices, samples)``
            over consecutive batches of items from item ``start``, ``n`` candidates of every agent each.
        params: the sampling parameters for ``n`` candidates (``train()``'s overrides included).
        score: ``score(sample, where, candidates=None)``: the oracle's scores of an item's joint candidates,
            or None when one is non-finite (the item dropped, counted and logged under ``where``).
        role_prompts: the role prompts of an item under centralized collaboration (None without it).
        tokenizers: every agent's tokenizer, in agent order.
        num_agents: the agent count.
    """

    items: Callable[[], list[Any]]
    batches: Callable[..., Iterator[tuple[list[Any], list[int], list[ItemSample]]]]
    params: Callable[[int], Any]
    score: Callable[..., OracleScores | None]
    role_prompts: Callable[[Any], list[Any]] | None
    tokenizers: Callable[[], list[Any]]
    num_agents: int


@dataclass
class ScheduleHost:
    """What a preference schedule uses of its trainer (see the module docstring); ``data_cursor`` reads and
    replaces the trainer's data cursor."""

    args: Any
    data_parallel: Any
    get_cursor: Callable[[], dict[str, Any]]
    set_cursor: Callable[[dict[str, Any]], None]
    learn: Callable[..., None]
    commit: Callable[..., None]
    save_due_checkpoint: Callable[[], None]
    flush_window: Callable[[], None]
    log: Callable[[Mapping[str, Any]], None]
    progress_bar: Callable[..., Any]
    count_pairs: Callable[[int, int], None]
    collect: Callable[[], list[Any]] | None = None
    sampling: PairSampling | None = None
    comparator_context: Callable[[], Any] | None = None
    save_policy: Callable[[Path], None] | None = None
    reward_func: Any = None

    @property
    def data_cursor(self) -> dict[str, Any]:
        return self.get_cursor()

    @data_cursor.setter
    def data_cursor(self, cursor: dict[str, Any]) -> None:
        self.set_cursor(cursor)
