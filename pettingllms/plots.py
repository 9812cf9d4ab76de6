"""PNG plots of a run's metrics: success and reward per agent over steps (matplotlib, Agg backend).

>>> from pettingllms.plots import plot_metrics, plot_run
>>> plot_metrics("runs/plan_path_L1/at_grpo/metrics.jsonl", "runs/plan_path_L1/plots", "at_grpo")  # doctest: +SKIP
>>> plot_run("runs/plan_path_L1")   # every stage folder of a pipeline run  # doctest: +SKIP

Series are picked by metric name (those the trainers log):

- success: ``success_rate`` (the training rollouts), ``agent/<role>/success_rate``, ``eval/success_rate``;
- reward: ``reward`` (mean group-member reward), ``agent/<role>/reward_mean``, ``iter/current_reward_mean``;
- loss: ``sft/<policy>/loss``, ``policy/<name>/loss``.

A figure is written only when one of its series has at least two steps. :func:`plot_run` adds
``held_out_success.png``: the success of every eval stage of the run, in run order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["FIGURES", "plot_eval_summary", "plot_metrics", "plot_run", "read_metrics", "select_series"]

# figure name -> (y label, patterns of metric names; a pattern's group 1, if any, labels the series)
FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "success": (
        "success rate",
        (r"^success_rate$", r"^agent/([^/]+)/success_rate$", r"^eval/success_rate$"),
    ),
    "reward": (
        "reward",
        (r"^reward$", r"^agent/([^/]+)/reward_mean$", r"^iter/current_reward_mean$"),
    ),
    "loss": ("loss", (r"^sft/([^/]+)/loss$", r"^policy/([^/]+)/loss$")),
}


# Legend labels of the run-wide series (agent series are labelled by role).
LABELS = {
    "success_rate": "team (training rollouts)",
    "reward": "all agents",
    "eval/success_rate": "held-out eval",
    "iter/current_reward_mean": "current policy",
}


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl`` file (blank lines skipped)."""
    path = Path(path)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def select_series(records: Sequence[Mapping[str, float]], patterns: Sequence[str]) -> dict[str, tuple[list[float], list[float]]]:
    """``{label: (steps, values)}`` of every metric matching one of ``patterns``, in step order.

    A series is labelled by the pattern's first group (e.g. the agent role) when it has one, else by
    :data:`LABELS` or the metric name. Records without a ``step`` are skipped.
    """
    series: dict[str, tuple[list[float], list[float]]] = {}
    compiled = [re.compile(p) for p in patterns]
    for record in sorted((r for r in records if "step" in r), key=lambda r: r["step"]):
        for key, value in record.items():
            for pattern in compiled:
                match = pattern.match(key)
                if match:
                    label = match.group(1) if match.groups() else LABELS.get(key, key)
                    steps, values = series.setdefault(label, ([], []))
                    steps.append(float(record["step"]))
                    values.append(float(value))
                    break
    return series


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, target: Path) -> Path:
    """Write the figure to ``target`` atomically (a temporary file renamed into place)."""
    import matplotlib.pyplot as plt

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{target.name}")
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    tmp.replace(target)
    return target


def plot_metrics(metrics_path: str | Path, out_dir: str | Path, name: str) -> list[Path]:
    """Write ``out_dir/<name>_<figure>.png`` for each of :data:`FIGURES` with a series of two or more
    steps; returns the paths."""
    plt = _pyplot()
    records = read_metrics(metrics_path)
    out_dir = Path(out_dir)
    written: list[Path] = []
    for figure, (ylabel, patterns) in FIGURES.items():
        series = select_series(records, patterns)
        if not any(len(steps) > 1 for steps, _ in series.values()):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for label, (steps, values) in series.items():
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{name}: {ylabel}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        fig.tight_layout()
        written.append(_save(fig, out_dir / f"{name}_{figure}.png"))
    return written


def plot_eval_summary(run_dir: str | Path) -> Path | None:
    """``run_dir/plots/held_out_success.png``: a bar per finished eval stage (``pipeline_state.json``)."""
    run_dir = Path(run_dir)
    state_file = run_dir / "pipeline_state.json"
    if not state_file.is_file():
        return None
    state = json.loads(state_file.read_text(encoding="utf-8"))
    bars = [(e["folder"], e["metrics"]["success_rate"]) for e in state["completed"] if e["stage"] == "eval"]
    if not bars:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(3.0, 1.2 * len(bars) + 1.5), 4.0))
    names, values = [b[0] for b in bars], [b[1] for b in bars]
    ax.bar(names, values, color="tab:blue")
    for x, value in enumerate(values):
        ax.text(x, value + 0.01, f"{value:.2f}", ha="center", va="bottom")
    ax.set_ylim(0.0, max(1.0, max(values) + 0.1))
    ax.set_ylabel("held-out success rate")
    ax.set_title("success on held-out instances")
    fig.tight_layout()
    return _save(fig, run_dir / "plots" / "held_out_success.png")


def plot_run(run_dir: str | Path) -> list[Path]:
    """Plots of every stage folder of a pipeline run that holds a ``metrics.jsonl``, and the held-out
    success summary, into ``run_dir/plots``."""
    run_dir = Path(run_dir)
    written: list[Path] = []
    for metrics in sorted(run_dir.glob("*/metrics.jsonl")):
        if metrics.parent.name == "plots":
            continue
        written += plot_metrics(metrics, run_dir / "plots", metrics.parent.name)
    summary = plot_eval_summary(run_dir)
    return written + ([summary] if summary is not None else [])
