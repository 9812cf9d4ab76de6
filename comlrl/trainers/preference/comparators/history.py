"""The ``history`` comparator source: the actors as they were ``comparator_history_k`` rounds ago.

Round ``r`` (1-based) builds its pairs before its own update, when the actors are the policy after
round ``r - 1``. Its comparator is the policy after round ``r - 1 - k`` ("after round 0" is the initial
policy, used until that index is positive): with ``u`` updates done, the policy after ``u - k`` of them.
So ``k = 1`` is the policy before the last round's update, never the current one (the public library's
snapshot indexing made ``k = 1`` the current policy).

Snapshots are CPU copies of each policy's trainable parameters (a LoRA policy: its adapter), taken once
per round in :meth:`HistoryComparator.end_round` and at construction (the initial policy); only those a
later round can still use are kept. :meth:`begin_round` copies the chosen snapshot into one persistent
frozen copy of the actors (on ``comparator_devices``), once per round, never per item.
:meth:`state_dict` returns the snapshots themselves (tensors), so a checkpoint restores them exactly.
"""

from __future__ import annotations

from typing import Any

import torch

from comlrl.rollout.hf import HFBackend
from comlrl.trainers.preference.comparators.base import ComparatorContext
from comlrl.trainers.preference.comparators.copy import PolicyShadow, comparator_model_devices
from comlrl.trainers.preference.comparators.current import (
    BackendComparator,
    check_policy_agents,
    check_state_name,
)

__all__ = ["HistoryComparator", "capture_trainable", "history_source_round", "snapshots_to_keep"]

Snapshot = dict[str, dict[str, torch.Tensor]]  # policy -> parameter name -> CPU tensor


def history_source_round(round_index: int, k: int) -> int:
    """The round whose end state round ``round_index`` (1-based) compares with: ``max(round_index - 1 - k,
    0)``, 0 being the initial policy (``round_index - 1`` rounds are done when round ``round_index``
    builds its pairs)."""
    if k < 1:
        raise ValueError(f"`comparator_history_k` must be >= 1, got {k}")
    if round_index < 1:
        raise ValueError(f"`round_index` must be >= 1 (rounds are 1-based), got {round_index}")
    return max(round_index - 1 - k, 0)


def snapshots_to_keep(stored: list[int], last_round: int, k: int) -> list[int]:
    """Snapshots still needed after ``last_round`` ended: those at or after round ``last_round + 1``'s
    source, the only rounds a later round can compare with."""
    first_needed = history_source_round(last_round + 1, k)
    return sorted(s for s in stored if s >= first_needed)


def capture_trainable(policy: Any) -> tuple[Snapshot, dict[str, int]]:
    """CPU copies of every policy's trainable parameters, and the policies' versions."""
    weights = {
        name: {key: p.detach().to("cpu", copy=True) for key, p in policy.named_trainable_parameters(name)}
        for name in policy.policies
    }
    return weights, {name: int(policy.version(name)) for name in policy.policies}


class HistoryComparator(BackendComparator):
    """``comparator_policy="history"`` (see the module docstring). Build it before the first update: its
    construction snapshots the initial policy."""

    name = "history"

    def __init__(self, context: ComparatorContext) -> None:
        super().__init__(context)
        check_policy_agents(context, max(self.slots) + 1)
        self.k = int(self.args.resolved_comparator_history_k)
        devices = comparator_model_devices(context.policy, self.args.comparator_devices)
        # The copy starts equal to the actors, i.e. to the initial policy (snapshot 0).
        self.shadow = PolicyShadow(context.policy, devices, copy_all=True)
        self.backend = HFBackend(self.shadow.handles)
        weights, versions = capture_trainable(context.policy)
        self.snapshots: dict[int, Snapshot] = {0: weights}
        self.versions: dict[int, dict[str, int]] = {0: versions}
        self.loaded: int | None = 0  # which snapshot the copy holds; None: unknown (after a restore)
        self.last_round = 0
        self.snapshot_loads = 0  # snapshots copied into the frozen copy so far (once per round at most)

    def policy_for(self, slot: int) -> str:
        return self.context.policy.policy_name(slot)

    @property
    def stored_rounds(self) -> list[int]:
        return sorted(self.snapshots)

    def begin_round(self, round_index: int) -> None:
        source = history_source_round(round_index, self.k)
        if source == self.loaded:
            return
        if source not in self.snapshots:
            raise RuntimeError(
                f"history comparator: round {round_index} needs the policy after round {source} "
                f"(comparator_history_k={self.k}), but only rounds {self.stored_rounds} are stored; "
                "end_round must run after every round's update"
            )
        self.shadow.load_parameters(self.snapshots[source], self.versions[source])
        self.loaded = source
        self.snapshot_loads += 1

    def end_round(self, round_index: int) -> None:
        weights, versions = capture_trainable(self.context.policy)
        self.snapshots[round_index] = weights
        self.versions[round_index] = versions
        self.last_round = round_index
        keep = set(snapshots_to_keep(list(self.snapshots), round_index, self.k))
        for stale in [s for s in self.snapshots if s not in keep]:
            del self.snapshots[stale]
            del self.versions[stale]

    def state_dict(self) -> dict:
        return {
            "name": self.name,
            "k": self.k,
            "last_round": self.last_round,
            "snapshots": {str(s): w for s, w in self.snapshots.items()},
            "versions": {str(s): dict(v) for s, v in self.versions.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        check_state_name(state, self.name)
        if int(state["k"]) != self.k:
            raise ValueError(
                f"`comparator_history_k` is {self.k} but the checkpoint's history comparator "
                f"used {state['k']}"
            )
        self.snapshots = {
            int(s): {p: {n: t.detach().to("cpu", copy=True) for n, t in w.items()} for p, w in ws.items()}
            for s, ws in state["snapshots"].items()
        }
        self.versions = {int(s): {p: int(v) for p, v in vs.items()} for s, vs in state["versions"].items()}
        self.last_round = int(state["last_round"])
        self.loaded = None

    def close(self) -> None:
        self.shadow.close()
        self.snapshots.clear()
        self.versions.clear()
        self.backend = None
