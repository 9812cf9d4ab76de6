"""What a rollout produces: one :class:`Sample` per sampled completion, its training group, and tensors.

Groups. A sample's ``group_key`` says which samples its advantage is normalised against:

* tree sampling: ``GroupKey(problem_id, turn, agent_index)``, the K candidates one agent drew from one
  state. ``agent_index`` is the position in ``turn_order``, so a role that acts twice per turn
  (``[tool, tool, plan]``) has two groups per turn.
* independent sampling: ``GroupKey(problem_id, None, None)``, the K trajectories of one problem.

A group's *members* are its distinct ``candidate`` indices (tree: the candidate; independent: the
trajectory) and each member has one ``group_reward``: the step reward ``alpha * global + local`` in tree
mode (with credit across turns, ``credit_depth > 0``, its return over a short continuation:
:mod:`pettingllms.execution.continuation`), the trajectory's return (the same on every sample of the
trajectory) in independent mode.
:func:`member_rewards` returns exactly those numbers, so the trainer normalises over the K members and a
long trajectory does not count more than a short one.

Tensors. :func:`tensorize` pads each policy's samples once, in TRL's GRPO layout (prompts left-padded,
completions right-padded), with the rollout's log-probs as ``old_per_token_logps``; the trainer fills
``advantages``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

__all__ = [
    "GroupKey",
    "PolicyTensors",
    "ProblemOutcome",
    "RolloutBatch",
    "Sample",
    "group_samples",
    "member_rewards",
    "samples_by_policy",
    "tensorize",
    "trajectory_return",
    "TRAJECTORY_RETURNS",
]

#: How independent sampling scores a trajectory (see :func:`trajectory_return`).
TRAJECTORY_RETURNS: tuple[str, ...] = ("final", "sum")


class GroupKey(NamedTuple):
    """(problem, turn, agent slot) for tree groups; (problem, None, None) for trajectory groups."""

    problem_id: int
    turn: int | None
    agent_index: int | None

    def sort_key(self) -> tuple[int, int, int]:
        return (
            self.problem_id,
            -1 if self.turn is None else self.turn,
            -1 if self.agent_index is None else self.agent_index,
        )


def trajectory_return(step_rewards: Sequence[float], final_task_reward: float, mode: str = "final") -> float:
    """Return of one trajectory for independent (GRPO-baseline) sampling.

    ``"final"`` (default): the task (global) reward of the final state; for the games that is 1.0 when
    solved, else ``0.5 * progress``. Summing the games' global rewards would add a *level* once per step
    and pay an episode for lingering. ``"sum"``: the sum of every step's ``alpha * global + local``.
    """
    if mode == "final":
        return float(final_task_reward)
    if mode == "sum":
        return float(sum(step_rewards))
    raise ValueError(f"`trajectory_return` must be one of {list(TRAJECTORY_RETURNS)}, got {mode!r}")


@dataclass
class Sample:
    """One sampled completion of one agent at one decision point, with what its step produced.

    Token fields (``prompt_ids``, ``completion_ids``, ``logprobs``) come from the backend; they are empty
    for backends without token access (scripted policies, remote APIs). ``reward`` is
    ``alpha * global_reward + local_reward`` of the step on the copy this candidate was applied to.
    ``group_reward`` is the number the trainer groups (see the module docstring). ``selected`` marks the
    tree branch that continued (always True in independent mode, where every trajectory continues).
    ``state`` is the snapshot of the state right after the step
    (:func:`~pettingllms.execution.state_snapshots.state_snapshot`), taken only for episodes whose
    transcripts are written (else None).
    """

    problem_id: int
    env_index: int
    turn: int
    agent_index: int
    role: str
    candidate: int
    policy: str
    policy_version: int
    seed: int | None
    prompt: Any
    response: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    action: Any
    parse_error: str | None
    failure: str | None
    feedback: str
    local_reward: float
    global_reward: float
    alpha: float
    reward: float
    done: bool
    success: bool
    group_key: GroupKey
    mode: str
    selected: bool = False
    group_reward: float = 0.0
    trajectory_return: float | None = None
    state: dict[str, Any] | None = None

    @property
    def num_completion_tokens(self) -> int:
        return len(self.completion_ids)


@dataclass
class ProblemOutcome:
    """How one episode ended: the selected path (tree) or one trajectory (independent).

    ``dropped`` marks an episode cut short by an infrastructure failure (its outcome is not a result).
    """

    problem_id: int
    trajectory: int
    success: bool
    done: bool
    turns: int
    task_reward: float
    dropped: bool = False


@dataclass
class RolloutBatch:
    """Everything one engine call produced.

    ``calls_per_decision_point`` lists, per decision point ``(turn, agent_index)``, how many backend
    ``generate`` calls each policy received (the engine makes one per policy); the rounds of credit
    continuations are listed too, marked ``"continuation": depth``. ``continuation_completions`` counts
    the completions those continuations sampled (no training samples; 0 with ``credit_depth`` 0).
    ``timings`` holds seconds spent generating (``generate_s``), stepping environments (``env_s``) and in
    total (``total_s``).
    """

    step: int
    mode: str
    samples: list[Sample]
    outcomes: list[ProblemOutcome]
    generate_calls: int = 0
    calls_per_decision_point: list[dict[str, Any]] = field(default_factory=list)
    dropped_samples: int = 0
    continuation_completions: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def groups(self) -> dict[GroupKey, list[Sample]]:
        return group_samples(self.samples)

    def by_policy(self) -> dict[str, list[Sample]]:
        return samples_by_policy(self.samples)

    @property
    def success_rate(self) -> float:
        kept = [o for o in self.outcomes if not o.dropped]
        return sum(o.success for o in kept) / len(kept) if kept else 0.0

    def stats(self) -> dict[str, float]:
        """Flat scalar summary (for logs); per-agent metrics are the trainer's."""
        n = len(self.samples)
        points = sum("continuation" not in p for p in self.calls_per_decision_point)
        return {
            "samples": float(n),
            "dropped_samples": float(self.dropped_samples),
            "success_rate": self.success_rate,
            "parse_error_rate": sum(s.parse_error is not None for s in self.samples) / n if n else 0.0,
            "generate_calls": float(self.generate_calls),
            "decision_points": float(points),
            "max_calls_per_policy_per_decision_point": float(
                max((c for p in self.calls_per_decision_point for c in p["calls"].values()), default=0)
            ),
            **({"continuation_completions": float(self.continuation_completions)}
               if self.continuation_completions else {}),
            **{f"time/{k}": float(v) for k, v in self.timings.items()},
        }


def group_samples(samples: Iterable[Sample]) -> dict[GroupKey, list[Sample]]:
    """Samples by ``group_key``, groups in (problem, turn, agent) order, members by candidate."""
    groups: dict[GroupKey, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.group_key, []).append(sample)
    ordered = sorted(groups, key=GroupKey.sort_key)
    return {key: sorted(groups[key], key=lambda s: (s.candidate, s.turn, s.agent_index)) for key in ordered}


def member_rewards(samples: Iterable[Sample]) -> dict[GroupKey, dict[int, float]]:
    """``{group: {candidate: group_reward}}``: one reward per group member.

    Raises ``ValueError`` if two samples of one member disagree (a trajectory must carry one return).
    """
    out: dict[GroupKey, dict[int, float]] = {}
    for key, members in group_samples(samples).items():
        rewards: dict[int, float] = {}
        for sample in members:
            old = rewards.setdefault(sample.candidate, sample.group_reward)
            if old != sample.group_reward:
                raise ValueError(
                    f"group {tuple(key)} member {sample.candidate} has two `group_reward` values: "
                    f"{old} and {sample.group_reward}"
                )
        out[key] = rewards
    return out


def samples_by_policy(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for sample in samples:
        out.setdefault(sample.policy, []).append(sample)
    return out


@dataclass
class PolicyTensors:
    """One policy's samples, padded once (TRL GRPO field names).

    ``prompt_ids`` / ``prompt_mask`` ``[B, P]`` are left-padded, ``completion_ids`` /
    ``completion_mask`` / ``old_per_token_logps`` ``[B, C]`` right-padded (0 where masked);
    ``rewards`` ``[B]`` are the samples' ``group_reward``; ``advantages`` ``[B]`` is zeros for the
    trainer to fill. ``samples[i]`` is row ``i``.
    """

    policy: str
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    old_per_token_logps: torch.Tensor
    rewards: torch.Tensor
    advantages: torch.Tensor
    samples: list[Sample]

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)


def tensorize(samples: Sequence[Sample], pad_token_id: int | dict[str, int]) -> dict[str, PolicyTensors]:
    """Per policy, pad its samples' token ids and log-probs into :class:`PolicyTensors`.

    ``pad_token_id`` is one id or ``{policy: id}``. A sample without token ids (scripted or API backend)
    is an error naming it: tokenize its text before training on it.
    """
    out: dict[str, PolicyTensors] = {}
    for policy, rows in samples_by_policy(samples).items():
        pad = pad_token_id[policy] if isinstance(pad_token_id, dict) else int(pad_token_id)
        for s in rows:
            if not s.prompt_ids or len(s.logprobs) != len(s.completion_ids):
                raise ValueError(
                    f"sample (problem {s.problem_id}, turn {s.turn}, agent {s.agent_index}, candidate "
                    f"{s.candidate}) has no token ids or misaligned `logprobs` "
                    f"({len(s.completion_ids)} ids, {len(s.logprobs)} log-probs): tokenize its text first"
                )
        b = len(rows)
        p_width = max(len(s.prompt_ids) for s in rows)
        c_width = max(1, max(len(s.completion_ids) for s in rows))
        prompt_ids = torch.full((b, p_width), pad, dtype=torch.long)
        prompt_mask = torch.zeros((b, p_width), dtype=torch.long)
        completion_ids = torch.full((b, c_width), pad, dtype=torch.long)
        completion_mask = torch.zeros((b, c_width), dtype=torch.long)
        logps = torch.zeros((b, c_width), dtype=torch.float32)
        for i, s in enumerate(rows):
            p, c = len(s.prompt_ids), len(s.completion_ids)
            prompt_ids[i, p_width - p :] = torch.tensor(s.prompt_ids, dtype=torch.long)
            prompt_mask[i, p_width - p :] = 1
            if c:
                completion_ids[i, :c] = torch.tensor(s.completion_ids, dtype=torch.long)
                completion_mask[i, :c] = 1
                logps[i, :c] = torch.tensor(s.logprobs, dtype=torch.float32)
        out[policy] = PolicyTensors(
            policy=policy,
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion_ids,
            completion_mask=completion_mask,
            old_per_token_logps=logps,
            rewards=torch.tensor([s.group_reward for s in rows], dtype=torch.float32),
            advantages=torch.zeros(b, dtype=torch.float32),
            samples=list(rows),
        )
    return out
