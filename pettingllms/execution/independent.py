"""Independent sampling (the GRPO baseline) and evaluation: returns and success summaries.

Independent sampling plays K trajectories per problem from K separately reset environments; there are no
copies, so it also serves environments that cannot be copied. Every sample of a trajectory carries that
trajectory's return (:func:`~pettingllms.execution.samples.trajectory_return`, ``"final"`` task reward by
default) as ``group_reward``, and the K trajectories of a problem form one group that the trainer
normalises over (one reward per trajectory, see :func:`~pettingllms.execution.samples.member_rewards`).

Evaluation is independent sampling at a chosen temperature (0: greedy) whose result is the success rate:
the mean over every kept trajectory, i.e. success averaged over the K samples of each problem and then
over problems (all problems have K trajectories unless some were dropped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pettingllms.execution.samples import ProblemOutcome, Sample, trajectory_return

__all__ = ["EvalResult", "assign_returns", "summarize_eval"]


def assign_returns(samples: Sequence[Sample], final_task_reward: float, mode: str) -> float:
    """Set the return of one finished trajectory on each of its samples (``trajectory_return`` and
    ``group_reward``) and return it."""
    value = trajectory_return([s.reward for s in samples], final_task_reward, mode)
    for sample in samples:
        sample.trajectory_return = value
        sample.group_reward = value
    return value


@dataclass
class EvalResult:
    """Success of an evaluation: overall rate, per problem rate, and the trajectories it came from.

    ``dropped`` counts trajectories cut short by infrastructure failures (left out of every rate);
    ``samples`` are the kept trajectories' samples (for inspection; evaluation writes no transcripts).
    """

    success_rate: float
    per_problem: dict[int, float]
    num_trajectories: int
    dropped: int
    temperature: float
    outcomes: list[ProblemOutcome] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


def summarize_eval(
    outcomes: Sequence[ProblemOutcome], temperature: float, samples: Sequence[Sample] = ()
) -> EvalResult:
    """Per-problem mean success over its kept trajectories, and the mean over all kept trajectories."""
    kept = [o for o in outcomes if not o.dropped]
    per_problem: dict[int, list[bool]] = {}
    for outcome in kept:
        per_problem.setdefault(outcome.problem_id, []).append(outcome.success)
    rate = sum(o.success for o in kept) / len(kept) if kept else 0.0
    return EvalResult(
        success_rate=rate,
        per_problem={p: sum(v) / len(v) for p, v in sorted(per_problem.items())},
        num_trajectories=len(kept),
        dropped=len(outcomes) - len(kept),
        temperature=temperature,
        outcomes=list(outcomes),
        samples=list(samples),
    )
