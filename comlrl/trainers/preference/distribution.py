"""Reward distributions of the iterative rounds (``log_reward_distribution``): per round, a JSON file with
histograms of the raw rewards of every candidate and of the selected pairs, on both sides, over
``reward_func.reward_range``; and the summary metrics logged with the round."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from comlrl.atomic_io import atomic_write_json
from comlrl.trainers.preference.records import PreferencePair

__all__ = ["NUM_REWARD_BINS", "reward_histogram", "reward_range", "write_reward_distribution"]

NUM_REWARD_BINS = 16


def reward_histogram(
    values: Sequence[float], low: float, high: float, num_bins: int = NUM_REWARD_BINS
) -> list[int]:
    """Counts of ``values`` in ``num_bins`` equal bins over [low, high]; values outside fall in the edge
    bins, ``high`` in the last bin."""
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"`reward_range` must be finite with low < high, got ({low}, {high})")
    counts = [0] * num_bins
    width = (high - low) / num_bins
    for value in values:
        index = int((value - low) // width) if math.isfinite(value) else 0
        counts[min(max(index, 0), num_bins - 1)] += 1
    return counts


def reward_range(reward_func: Any) -> tuple[float, float]:
    """``reward_func.reward_range`` as ``(low, high)``, checked."""
    rng = getattr(reward_func, "reward_range", None)
    try:
        low, high = (float(v) for v in rng)
    except (TypeError, ValueError):
        raise ValueError(
            f"`log_reward_distribution=True` needs `reward_func.reward_range = (low, high)`, got {rng!r}"
        ) from None
    reward_histogram([], low, high)  # validates the range
    return low, high


def write_reward_distribution(
    directory: str | Path,
    round_index: int,
    current_raw: Sequence[float],
    comparator_raw: Sequence[float],
    pairs: Sequence[PreferencePair],
    low: float,
    high: float,
    *,
    write: bool = True,
) -> dict[str, float]:
    """Write ``directory/iteration_NNNN.json`` for one round (unless ``write`` is False: a data-parallel rank
    other than 0) and return the metrics logged with it."""
    edges = [low + (high - low) * i / NUM_REWARD_BINS for i in range(NUM_REWARD_BINS + 1)]

    def side(values: Sequence[float]) -> dict:
        return {
            "sample_count": len(values),
            "mean": mean_or_nan(values),
            "counts": reward_histogram(values, low, high),
            "raw_rewards": list(values),
        }

    selected_target = [p.target_raw_reward for p in pairs]
    selected_comparator = [p.comparator_raw_reward for p in pairs]
    payload = {
        "iteration": round_index,
        "reward_min": low,
        "reward_max": high,
        "num_bins": NUM_REWARD_BINS,
        "bin_edges": edges,
        "bin_centers": [(a + b) / 2 for a, b in zip(edges, edges[1:])],
        "candidate": {"target": side(current_raw), "comparator": side(comparator_raw)},
        "selected": {"target": side(selected_target), "comparator": side(selected_comparator)},
    }
    if write:
        atomic_write_json(Path(directory) / f"iteration_{round_index:04d}.json", payload)
    out = {}
    for ns, key in (
        ("iter/reward_distribution", "candidate"),
        ("iter/selected_reward_distribution", "selected"),
    ):
        out[f"{ns}/current_iteration"] = round_index
        out[f"{ns}/target_sample_count"] = payload[key]["target"]["sample_count"]
        out[f"{ns}/comparator_sample_count"] = payload[key]["comparator"]["sample_count"]
        out[f"{ns}/target_mean"] = payload[key]["target"]["mean"]
        out[f"{ns}/comparator_mean"] = payload[key]["comparator"]["mean"]
    out["iter/selected_reward_distribution/pair_count"] = len(pairs)
    return out


def mean_or_nan(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan
