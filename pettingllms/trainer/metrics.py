"""AT-GRPO's metrics: the rollout's rewards by run, agent role, turn and policy (:func:`rollout_metrics`),
one policy's update (:class:`UpdateStats`), and the per-step table printed under the progress bar
(:class:`StepTable`). Metric names are listed in :mod:`pettingllms.trainer.at_grpo`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from comlrl.rl import PPOLossOutput, group_stats
from pettingllms.execution import Sample
from pettingllms.trainer.grouping import member_table

__all__ = ["StepTable", "UpdateStats", "mean", "rollout_metrics"]


def mean(values: Sequence[float]) -> float:
    """The plain mean, 0 for no values."""
    return sum(values) / len(values) if values else 0.0


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0


def _sample_metrics(
    samples: Sequence[Sample], zero_std: Mapping[Hashable, bool], prefix: str
) -> dict[str, float]:
    out: dict[str, float] = {f"{prefix}num_samples": float(len(samples))}
    for part, attribute in (("reward", "reward"), ("global_reward", "global_reward"), ("local_reward", "local_reward")):
        average, std = _mean_std([getattr(s, attribute) for s in samples])
        out[f"{prefix}{part}_mean"] = average
        out[f"{prefix}{part}_std"] = std
    keys = {s.group_key for s in samples}
    out[f"{prefix}frac_reward_zero_std"] = sum(zero_std[k] for k in keys) / len(keys)
    out[f"{prefix}parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out[f"{prefix}success_rate"] = sum(bool(s.success) for s in samples) / len(samples)
    out[f"{prefix}completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    return out


def rollout_metrics(samples: Sequence[Sample], zero_std_atol: float = 1e-8) -> dict[str, float]:
    """Reward metrics of one rollout: the run totals, per agent role, per (role, turn) and per policy.

    ``reward``/``reward_std``/``frac_reward_zero_std`` are TRL's (mean member reward, mean within-group std,
    fraction of groups with std ``<= zero_std_atol``); the ``<part>_mean`` / ``<part>_std`` of
    ``reward`` (mixed), ``global_reward`` and ``local_reward`` are over samples (unbiased std, 0 for one
    sample); ``frac_reward_zero_std`` of a subset is over the groups its samples belong to.
    """
    table = member_table(samples)
    stats = group_stats(table.rewards, table.group_ids, zero_std_atol)
    zero_std = {key: bool(std <= zero_std_atol) for key, std in zip(table.group_keys, stats.std.tolist())}
    out = stats.as_metrics()
    out["num_samples"] = float(len(samples))
    out["parse_error_rate"] = sum(s.parse_error is not None for s in samples) / len(samples)
    out["completions/mean_length"] = sum(len(s.completion_ids) for s in samples) / len(samples)
    subsets: dict[str, list[Sample]] = {}
    for s in samples:
        subsets.setdefault(f"agent/{s.role}/", []).append(s)
        subsets.setdefault(f"agent/{s.role}/turn_{s.turn}/", []).append(s)
        subsets.setdefault(f"policy/{s.policy}/", []).append(s)
    for prefix in sorted(subsets):
        out.update(_sample_metrics(subsets[prefix], zero_std, prefix))
    for name in sorted({s.policy for s in samples}):
        sub = member_table([s for s in samples if s.policy == name])
        out.update(group_stats(sub.rewards, sub.group_ids, zero_std_atol).as_metrics(f"policy/{name}/"))
    return out


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


class StepTable:
    """The per-step table written under the progress bar: a header once, then one row per logged step
    (policy metrics averaged over ``policies``)."""

    def __init__(self, policies: Sequence[str]) -> None:
        self.policies = list(policies)
        self.header_printed = False

    def print_row(self, step: int, metrics: Mapping[str, float]) -> None:
        from tqdm.auto import tqdm

        def across(key: str) -> float:
            return mean([metrics[f"policy/{n}/{key}"] for n in self.policies if f"policy/{n}/{key}" in metrics])

        columns = [
            ("step", f"{step}", 6),
            ("success", f"{metrics['success_rate']:.3f}", 8),
            ("reward", f"{metrics['reward']:.3f}", 8),
            ("zero_std", f"{metrics['frac_reward_zero_std']:.2f}", 8),
            ("loss", f"{across('loss'):.4f}", 9),
            ("clip", f"{across('clip_ratio/region_mean'):.3f}", 7),
            ("kl", f"{across('approx_kl'):.4f}", 8),
            ("entropy", f"{across('entropy'):.3f}", 8),
            ("len", f"{metrics['completions/mean_length']:.1f}", 6),
            ("secs", f"{metrics['time/step_s']:.1f}", 6),
        ]
        if not self.header_printed:
            tqdm.write(" ".join(name.rjust(width) for name, _, width in columns))
            self.header_printed = True
        tqdm.write(" ".join(value.rjust(width) for _, value, width in columns))
