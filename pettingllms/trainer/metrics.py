"""AT-GRPO's metrics: the rollout's rewards by run, agent role, turn and policy (:func:`rollout_metrics`),
one policy's update (:class:`UpdateStats`), and the per-step table printed under the progress bar
(:class:`StepTable`). Metric names are listed in :mod:`pettingllms.trainer.at_grpo`.

Success belongs to the team: an episode succeeds or fails as a whole, and only the agent whose action
ends it sees ``Sample.success`` set. So the ``success_rate`` of an agent role, a (role, turn) or a policy
is the team's success over the finished episodes that subset acted in (:func:`episode_successes`), never
the share of its own samples that ended an episode (0 by construction for an agent that cannot end one).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from comlrl.rl import PPOLossOutput, group_stats
from pettingllms.agents.failures import failure_counts
from pettingllms.execution import Sample
from pettingllms.trainer.grouping import member_table

__all__ = ["COLUMNS_HINT", "NOTHING_TO_LEARN", "StepTable", "UpdateStats", "credit_metrics", "episode_successes", "mean",
           "rollout_metrics"]


def mean(values: Sequence[float]) -> float:
    """The plain mean, 0 for no values."""
    return sum(values) / len(values) if values else 0.0


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0


def _episode(sample: Sample) -> tuple[int, int]:
    # env_index numbers a rollout's episodes: the problem in tree mode, the trajectory in independent mode.
    return sample.problem_id, sample.env_index


def episode_successes(samples: Sequence[Sample]) -> dict[tuple[int, int], bool]:
    """``{(problem_id, env_index): success}`` of every finished episode of one rollout.

    An episode ends at the selected sample whose step finished it (``selected and done``; tree mode: the
    branch that continued, independent mode: every sample); its ``success`` is the team's. An episode
    abandoned because every candidate of a decision was dropped has no such sample and is left out, as
    :attr:`~pettingllms.execution.RolloutBatch.success_rate` leaves it out.
    """
    return {_episode(s): bool(s.success) for s in samples if s.selected and s.done}


def _team_success(samples: Sequence[Sample], outcomes: Mapping[tuple[int, int], bool]) -> float:
    """The team's success rate over the finished episodes ``samples`` acted in (0 for none)."""
    episodes = {_episode(s) for s in samples} & outcomes.keys()
    return sum(outcomes[e] for e in episodes) / len(episodes) if episodes else 0.0


def _sample_metrics(
    samples: Sequence[Sample],
    zero_std: Mapping[Hashable, bool],
    outcomes: Mapping[tuple[int, int], bool],
    prefix: str,
) -> dict[str, float]:
    out: dict[str, float] = {f"{prefix}num_samples": float(len(samples))}
    for part, attribute in (("reward", "reward"), ("global_reward", "global_reward"), ("local_reward", "local_reward")):
        average, std = _mean_std([getattr(s, attribute) for s in samples])
        out[f"{prefix}{part}_mean"] = average
        out[f"{prefix}{part}_std"] = std
    keys = {s.group_key for s in samples}
    out[f"{prefix}frac_reward_zero_std"] = sum(zero_std[k] for k in keys) / len(keys)
    out[f"{prefix}parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out[f"{prefix}success_rate"] = _team_success(samples, outcomes)
    out[f"{prefix}completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    return out


def rollout_metrics(samples: Sequence[Sample], zero_std_atol: float = 1e-8) -> dict[str, float]:
    """Reward metrics of one rollout: the run totals, per agent role, per (role, turn) and per policy.

    ``reward``/``reward_std``/``frac_reward_zero_std`` are TRL's (mean member reward, mean within-group std,
    fraction of groups with std ``<= zero_std_atol``); the ``<part>_mean`` / ``<part>_std`` of
    ``reward`` (mixed), ``global_reward`` and ``local_reward`` are over samples (unbiased std, 0 for one
    sample); ``frac_reward_zero_std`` of a subset is over the groups its samples belong to; a subset's
    ``success_rate`` is the team's over the finished episodes it acted in (:func:`episode_successes`).
    """
    table = member_table(samples)
    stats = group_stats(table.rewards, table.group_ids, zero_std_atol)
    zero_std = {key: bool(std <= zero_std_atol) for key, std in zip(table.group_keys, stats.std.tolist())}
    out = stats.as_metrics()
    out["num_samples"] = float(len(samples))
    out["parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out["completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    out.update(failure_counts(samples))
    outcomes = episode_successes(samples)
    subsets: dict[str, list[Sample]] = {}
    for s in samples:
        subsets.setdefault(f"agent/{s.role}/", []).append(s)
        subsets.setdefault(f"agent/{s.role}/turn_{s.turn}/", []).append(s)
        subsets.setdefault(f"policy/{s.policy}/", []).append(s)
    for prefix in sorted(subsets):
        out.update(_sample_metrics(subsets[prefix], zero_std, outcomes, prefix))
    for name in sorted({s.policy for s in samples}):
        sub = member_table([s for s in samples if s.policy == name])
        out.update(group_stats(sub.rewards, sub.group_ids, zero_std_atol).as_metrics(f"policy/{name}/"))
    return out


def credit_metrics(
    samples: Sequence[Sample], continuation_completions: int, zero_std_atol: float = 1e-8
) -> dict[str, float]:
    """The metrics of credit across turns (``credit_depth > 0``, :mod:`pettingllms.execution.continuation`).

    ``reward`` and ``frac_reward_zero_std`` then describe the returns ``R`` the advantages compare;
    ``reward_immediate`` / ``frac_reward_zero_std_immediate`` are the same statistics of the candidates' own
    step rewards (``Sample.reward``), i.e. what ``reward`` / ``frac_reward_zero_std`` are without credit, so
    runs with and without it compare; ``rollout/continuation_completions`` counts the completions the
    continuations sampled (no training samples). NaN rewards for a step without samples.
    """
    out = {"rollout/continuation_completions": float(continuation_completions)}
    if not samples:
        return {**out, "reward_immediate": math.nan, "frac_reward_zero_std_immediate": math.nan}
    table = member_table(samples)
    immediate = {(s.group_key, s.candidate): s.reward for s in samples}
    rewards = torch.tensor([immediate[member] for member in table.members], dtype=torch.float64)  # as member_table's
    stats = group_stats(rewards, table.group_ids, zero_std_atol).as_metrics()
    return {**out, "reward_immediate": stats["reward"], "frac_reward_zero_std_immediate": stats["frac_reward_zero_std"]}


@dataclass
class UpdateStats:
    """What one policy's update records: per micro-batch its loss, entropy and PPO-clip diagnostics and
    how many weight versions its samples lag; per optimizer step the gradient norm, or a skip."""

    losses: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    diagnostics: list[dict[str, float]] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    staleness: list[float] = field(default_factory=list)
    staleness_max: float = 0.0
    optimizer_steps: int = 0
    skipped_steps: int = 0

    def add_staleness(self, behind: torch.Tensor) -> None:
        """``behind``: per row, the weight versions between its sampling policy and the scoring one."""
        self.staleness.append(float(behind.mean()))
        self.staleness_max = max(self.staleness_max, float(behind.max()))

    def add_micro_batch(self, out: PPOLossOutput, entropy: torch.Tensor) -> None:
        self.losses.append(float(out.loss.detach()))
        self.entropies.append(float(entropy))
        self.diagnostics.append(out.as_metrics())

    def as_metrics(self, prefix: str, num_tokens: float) -> dict[str, float]:
        """The ``policy/<name>/`` update metrics (``prefix`` included); diagnostics averaged over
        micro-batches."""
        metrics = {
            f"{prefix}loss": mean(self.losses),
            f"{prefix}entropy": mean(self.entropies),
            f"{prefix}grad_norm": mean(self.grad_norms),
            f"{prefix}staleness_mean": mean(self.staleness),
            f"{prefix}staleness_max": self.staleness_max,
            f"{prefix}optimizer_steps": float(self.optimizer_steps),
            f"{prefix}skipped_steps": float(self.skipped_steps),
            f"{prefix}num_tokens": num_tokens,
        }
        for key in self.diagnostics[0] if self.diagnostics else ():
            if key != "loss":
                metrics[f"{prefix}{key}"] = mean([d[key] for d in self.diagnostics])
        return metrics


# What the table's training success measures, by sampling mode: (column header, the note printed once
# above the header; {k} is "K=4", or "K" when the table is not told). Tree rollouts keep the best of K
# candidates at each decision.
SUCCESS_NOTES = {
    "tree": (
        "succ@bestK",
        "succ@bestK: training success; each decision keeps the best of {k} candidates, so it runs above "
        "held-out (eval) success",
    ),
    "independent": (
        "succ@train",
        "succ@train: training success, the mean over {k} sampled trajectories per problem",
    ),
}


#: The line printed once under the table's header: what the columns mean, where the legend is.
COLUMNS_HINT = (
    "(zero_std: share of groups whose K candidates got one reward, which teach nothing; loss, clip, kl, entropy: "
    "the update; len: tokens per response; secs: the step; legend: docs/pettingllms.md, \"The step table\")"
)
#: Said once, under the first step in which every group had zero reward variance (``frac_reward_zero_std`` 1).
NOTHING_TO_LEARN = "no group had a reward difference: nothing to learn from at this step"


class StepTable:
    """The per-step table written under the progress bar: a note on the training success, a header and a
    hint on the columns once (:data:`COLUMNS_HINT`), then one row per logged step (policy metrics averaged over
    ``policies``), and once, under the first step whose every group had one reward for all its candidates,
    :data:`NOTHING_TO_LEARN` (its loss is 0: advantages are 0 everywhere).

    ``sampling_mode`` and ``num_generations`` (K) are the trainer's: they say what the training success
    column measures (best-of-K in tree mode)."""

    def __init__(
        self, policies: Sequence[str], sampling_mode: str = "tree", num_generations: int | None = None
    ) -> None:
        if sampling_mode not in SUCCESS_NOTES:
            raise ValueError(f"`sampling_mode` must be one of {list(SUCCESS_NOTES)}, got {sampling_mode!r}")
        self.policies = list(policies)
        self.sampling_mode = sampling_mode
        self.num_generations = num_generations
        self.header_printed = False
        self.nothing_to_learn_said = False
        success = SUCCESS_NOTES[sampling_mode][0]
        # (header, width) of every column, in row order
        self.columns = [
            ("step", 6), (success, 10), ("reward", 8), ("zero_std", 8), ("loss", 9), ("clip", 7), ("kl", 8),
            ("entropy", 8), ("len", 6), ("secs", 6),
        ]  # fmt: skip

    def header_lines(self) -> list[str]:
        """The note on the training success column, the column names, then the hint on the columns."""
        k = "K" if self.num_generations is None else f"K={self.num_generations}"
        note = SUCCESS_NOTES[self.sampling_mode][1].format(k=k)
        return [note, " ".join(name.rjust(width) for name, width in self.columns), COLUMNS_HINT]

    def row(self, step: int, metrics: Mapping[str, float]) -> str:
        """One logged step's row."""

        def across(key: str) -> float:
            names = [f"policy/{n}/{key}" for n in self.policies]
            return mean([metrics[name] for name in names if name in metrics])

        values = [
            f"{step}",
            f"{metrics['success_rate']:.3f}",
            f"{metrics['reward']:.3f}",
            f"{metrics['frac_reward_zero_std']:.2f}",
            f"{across('loss'):.4f}",
            f"{across('clip_ratio/region_mean'):.3f}",
            f"{across('approx_kl'):.4f}",
            f"{across('entropy'):.3f}",
            f"{metrics['completions/mean_length']:.1f}",
            f"{metrics['time/step_s']:.1f}",
        ]
        return " ".join(value.rjust(width) for value, (_, width) in zip(values, self.columns))

    def print_row(self, step: int, metrics: Mapping[str, float]) -> None:
        from tqdm.auto import tqdm

        if not self.header_printed:
            for line in self.header_lines():
                tqdm.write(line)
            self.header_printed = True
        tqdm.write(self.row(step, metrics))
        if metrics["frac_reward_zero_std"] >= 1.0 and not self.nothing_to_learn_said:
            tqdm.write(f"step {step}: {NOTHING_TO_LEARN} (said once; the zero_std column shows it for every step)")
            self.nothing_to_learn_said = True
