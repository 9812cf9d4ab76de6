"""Credit across turns for AT-GRPO's tree sampling: short continuations of every candidate.

Tree sampling scores a candidate by its own step: ``r_0 = alpha * G_0 + l_0``, where ``G_0`` is the global
(task) reward of the state right after the candidate's step and ``l_0`` its local reward
(:class:`~pettingllms.envs.base.StepResult`). A move whose value shows up only in later turns (a math
reasoner rejecting a wrong tool result pays only when the final answer is then right) ties with the moves
that do not have it, so its group teaches nothing about it.

With ``credit_depth = d > 0`` (:class:`~pettingllms.execution.EngineConfig`; the ``rollout`` section's
``credit_depth`` / ``credit_discount``), once the K candidates of a group are stepped and scored, every
candidate whose copy is not done is continued on a further copy of its environment by the current
policies, one sampled completion per agent step (``n = 1``, the rollout's sampling parameters), following
the turn order (the next agent of the same turn first, then the next turns), until the episode ends or
``d`` steps were taken. The candidate's training reward (its ``group_reward``, what the advantages compare)
is :func:`credit_return`::

    R = r_0 + sum_{j=1..m} gamma^j * g_j,     g_j = alpha * (G_j - G_{j-1})       (global_increments)

with ``G_j`` the global reward of the state after continuation step ``j`` (``G_0``: after the candidate's own
step), ``m <= d`` the continuation steps taken, ``gamma = credit_discount`` and ``alpha`` the environment's
weight of the global reward in ``r_0``.

Why an increment: ``G`` is the task reward *of a state* (a level: the games pay ``0.5 * progress`` on the
way), so adding ``G_j`` itself would pay a branch again at every step it lingers; the increment pays each
change once. With ``gamma = 1`` the sum telescopes to ``R = l_0 + alpha * G_m``: the candidate's own local
reward plus the weighted global reward of the state its branch reaches within ``d`` steps; ``gamma < 1``
weighs later changes less, ``gamma = 0`` gives ``R = r_0``. Why ``alpha``: ``r_0`` weighs the global reward by
``alpha``, so the increments carry the same weight and ``R`` stays in ``r_0``'s units (``alpha = 1``, the
default: ``g_j = G_j - G_{j-1}``). The continuation steps' local rewards belong to the agents that take those
steps, not to the candidate, and are not counted.

What does not change: the sample's ``reward`` (the immediate ``r_0``, which the branch selection still uses),
hence the selected path, the episode outcomes and every sample but its ``group_reward``. ``d = 0`` runs none
of this: samples and advantages are exactly those of plain tree sampling.

Batching: the candidates of one decision point all stand at the same position of the turn order, and each
continuation step advances a copy by one position, so at depth ``j`` every live continuation of every active
problem is at the same ``(turn, position)``: one request each (``n = 1``) in one ``generate`` call per
policy, through the engine's decision-point path (recorded in ``calls_per_decision_point`` with
``"continuation": j``).

Seeds: continuation step ``j`` of candidate ``c`` of problem ``p`` at ``(turn, agent)`` of ``step`` samples
with ``derive_seed(run_seed, "credit", step, p, turn, agent, c, j)`` (:func:`continuation_seed`): a run is
reproducible, a resumed one continues exactly, and no continuation depends on its batch partners.

Cost: continuation completions are sampled but are not training samples (no gradient on them). The batch
counts them (``RolloutBatch.continuation_completions``; the trainer logs ``rollout/continuation_completions``)
and the stages' completion budgets (``max_completions``) include them, so a learning comparison at equal
sampled completions charges a run for its continuations. Per decision point and problem at most ``K * d``.

Failures: a continuation step whose environment step fails for infrastructure (a crashed worker, a step
timeout) leaves the candidate's return undefined, so the candidate is dropped like one whose own step failed
(logged, counted in ``dropped_samples``, never selected). A model failure in a continuation step (a parse
error) is part of what the branch led to: it enters through the global reward only and is not counted in the
batch's ``failures`` (those count training samples).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from comlrl.rollout.types import Completion, SamplingParams
from comlrl.seeding import derive_seed
from pettingllms.agents.failures import InfrastructureError
from pettingllms.envs.base import StepResult

__all__ = ["continuation_seed", "continue_candidates", "credit_return", "global_increments"]

logger = logging.getLogger("pettingllms.execution")

#: ``decide(items, turn, agent_index, params, batch, depth)``: one completion and its step result for each
#: ``(problem_id, env, agent, seed)`` of ``items`` (the engine's decision-point path with ``n = 1``).
DecideSingle = Callable[
    [list[tuple[int, Any, Any, int]], int, int, SamplingParams, Any, int],
    Awaitable[list[tuple[Completion, StepResult | InfrastructureError]]],
]


# ---- the math ------------------------------------------------------------------------------------
def global_increments(start: float, after: Sequence[float], alpha: float) -> list[float]:
    """``g_j = alpha * (G_j - G_{j-1})`` for ``G_1.. = after`` and ``G_0 = start``: each continuation step's
    change of the global reward, weighted as the global part of a step reward is."""
    increments, previous = [], start
    for value in after:
        increments.append(alpha * (value - previous))
        previous = value
    return increments


def credit_return(reward: float, increments: Sequence[float], discount: float, depth: int) -> float:
    """``R = reward + sum_{j=1..m} discount**j * increments[j-1]``, ``m = min(depth, len(increments))``.

    ``reward`` is the candidate's own ``r_0``; fewer increments than ``depth`` is an episode that ended
    early. With no increments (or ``depth`` 0) ``R`` is ``reward`` itself.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"`depth` must be an integer >= 0, got {depth!r}")
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"`discount` must be in [0, 1], got {discount!r}")
    total = reward
    for j, increment in enumerate(increments[:depth], start=1):
        total += discount**j * increment
    return total


def continuation_seed(
    run_seed: int, step: int, problem_id: int, turn: int, agent_index: int, candidate: int, depth: int
) -> int:
    """The request seed of continuation step ``depth`` (1-based) of ``candidate`` at ``(turn, agent_index)``."""
    return derive_seed(run_seed, "credit", step, problem_id, turn, agent_index, candidate, depth)


# ---- the continuations ---------------------------------------------------------------------------
@dataclass
class _Branch:
    """One candidate's continuation: its own copy and the global rewards ``G_0, G_1, ...`` it went through."""

    group: int
    candidate: int
    problem_id: int
    env: Any
    alpha: float
    globals_: list[float] = field(default_factory=list)
    failed: bool = False


async def continue_candidates(
    decide: DecideSingle,
    agents: Sequence[Any],
    config: Any,
    slots: Sequence[Any],
    decided: list[list[tuple[Completion, StepResult | InfrastructureError]]],
    *,
    step: int,
    turn: int,
    agent_index: int,
    params: SamplingParams,
    batch: Any,
) -> list[list[float | None]]:
    """The training reward ``R`` (:func:`credit_return`) of every candidate of one decision point.

    ``slots[g].envs[c]`` is candidate ``c``'s stepped copy in group ``g`` and ``decided[g][c]`` its
    ``(completion, result)``; ``agents`` are the engine's templates in turn order, ``config`` its
    :class:`~pettingllms.execution.EngineConfig` (``credit_depth``, ``credit_discount``, ``seed``). The copies
    are left as they are (the selected one continues the episode). Returns ``R`` per group and candidate,
    None for a dropped candidate; a candidate whose continuation failed for infrastructure is dropped here:
    its ``decided`` entry gets the error, for the engine to count.
    """
    depth, discount = config.credit_depth, config.credit_discount
    returns: list[list[float | None]] = [[None] * len(group) for group in decided]
    branches: list[_Branch] = []
    for g, (slot, group) in enumerate(zip(slots, decided)):
        for c, (_, result) in enumerate(group):
            if isinstance(result, BaseException):
                continue  # dropped already: the engine counts it
            returns[g][c] = result.reward
            if not result.done:
                env = slot.envs[c].clone()
                branches.append(_Branch(g, c, slot.problem_id, env, result.alpha, [result.global_reward]))
    live = branches
    for j in range(1, depth + 1):
        if not live:
            break
        position = (live[0].env.state.turn, live[0].env.state.position)
        items = []
        for branch in live:
            state = branch.env.state
            if (state.turn, state.position) != position:
                raise RuntimeError(
                    f"continuation {j} of problem {branch.problem_id} candidate {branch.candidate} is at turn "
                    f"{state.turn} position {state.position}, the others at turn {position[0]} position "
                    f"{position[1]}: the environment does not advance one position per step"
                )
            seed = continuation_seed(config.seed, step, branch.problem_id, turn, agent_index, branch.candidate, j)
            items.append((branch.problem_id, branch.env, copy.deepcopy(agents[position[1]]), seed))
        batch.continuation_completions += len(items)
        results = await decide(items, position[0], position[1], params, batch, j)
        still = []
        for branch, (_, result) in zip(live, results):
            if isinstance(result, InfrastructureError):
                logger.warning(
                    "problem %s, turn %s, agent %s, candidate %s: continuation step %s failed (%s); the "
                    "candidate's return is undefined and it is dropped",
                    branch.problem_id, turn, agent_index, branch.candidate, j, result,
                )
                completion = decided[branch.group][branch.candidate][0]
                decided[branch.group][branch.candidate] = (completion, result)
                returns[branch.group][branch.candidate] = None
                branch.failed = True
                continue
            branch.globals_.append(result.global_reward)
            if not result.done:
                still.append(branch)
        live = still
    for branch in branches:
        if not branch.failed:
            reward = returns[branch.group][branch.candidate]
            increments = global_increments(branch.globals_[0], branch.globals_[1:], branch.alpha)
            returns[branch.group][branch.candidate] = credit_return(reward, increments, discount, depth)
    return returns
