"""PNG plots of a run's metrics: success and reward per agent over steps (matplotlib, Agg backend).

>>> from pettingllms.plots import plot_metrics, plot_run
>>> plot_metrics("runs/plan_path_L1/at_grpo/metrics.jsonl", "runs/plan_path_L1/plots", "at_grpo")  # doctest: +SKIP
>>> plot_run("runs/plan_path_L1")   # every stage folder of a pipeline run  # doctest: +SKIP

Series are picked by metric name (those the trainers log):

- success: ``success_rate`` (the training rollouts: best-of-K in tree mode, labelled so by :func:`plot_run`),
  ``agent/<role>/success_rate`` (the team's success on the episodes that agent acted in, drawn only where
  it differs from the team's line: :func:`figure_series`), ``eval/success_rate``;
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

from comlrl.reporting import read_metrics  # re-exported: the plots read the same records

__all__ = [
    "FIGURES",
    "figure_series",
    "plot_eval_summary",
    "plot_metrics",
    "plot_run",
    "read_metrics",
    "select_series",
    "training_success_label",
]

TEAM_SUCCESS = r"^success_rate$"
AGENT_SUCCESS = r"^agent/([^/]+)/success_rate$"

# figure name -> (y label, patterns of metric names; a pattern's group 1, if any, labels the series)
FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "success": ("success rate", (TEAM_SUCCESS, AGENT_SUCCESS, r"^eval/success_rate$")),
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


def select_series(
    records: Sequence[Mapping[str, float]], patterns: Sequence[str], labels: Mapping[str, str] | None = None
) -> dict[str, tuple[list[float], list[float]]]:
    """``{label: (steps, values)}`` of every metric matching one of ``patterns``, in step order.

    A series is labelled by the pattern's first group (e.g. the agent role) when it has one, else by
    ``labels``, :data:`LABELS` or the metric name. Records without a ``step`` are skipped.
    """
    names = {**LABELS, **(labels or {})}
    series: dict[str, tuple[list[float], list[float]]] = {}
    compiled = [re.compile(p) for p in patterns]
    for record in sorted((r for r in records if "step" in r), key=lambda r: r["step"]):
        for key, value in record.items():
            for pattern in compiled:
                match = pattern.match(key)
                if match:
                    label = match.group(1) if match.groups() else names.get(key, key)
                    steps, values = series.setdefault(label, ([], []))
                    steps.append(float(record["step"]))
                    values.append(float(value))
                    break
    return series


def figure_series(
    records: Sequence[Mapping[str, float]], figure: str, labels: Mapping[str, str] | None = None
) -> dict[str, tuple[list[float], list[float]]]:
    """The series figure ``figure`` of :data:`FIGURES` draws (see :func:`select_series`).

    An agent's success is the team's on the episodes it acted in
    (:func:`pettingllms.trainer.metrics.episode_successes`), so an agent that acts in every episode repeats
    the team's line: its line is drawn only where it differs.
    """
    series = select_series(records, FIGURES[figure][1], labels)
    if figure == "success":
        team = next(iter(select_series(records, (TEAM_SUCCESS,), labels).values()), None)
        for role in select_series(records, (AGENT_SUCCESS,)):
            if series.get(role) == team:
                del series[role]
    return series


def training_success_label(config: Mapping, stage: str) -> str | None:
    """The legend label of RL stage ``stage``'s training success under resolved run ``config``: tree
    rollouts continue the best of K candidates at every decision, so their success is best-of-K. None for
    a stage that is not ``at_grpo`` / ``grpo``."""
    if stage not in ("at_grpo", "grpo"):
        return None
    from pettingllms.stages.at_grpo import at_grpo_config, rollout_config

    trainer, k = at_grpo_config(stage, config, ".", progress=False), rollout_config(config).num_generations
    if trainer.sampling_mode == "tree":
        return f"team, training rollouts (best-of-{k})"
    return f"team, training rollouts (mean of {k} trajectories)"


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


def plot_metrics(
    metrics_path: str | Path, out_dir: str | Path, name: str, labels: Mapping[str, str] | None = None
) -> list[Path]:
    """Write ``out_dir/<name>_<figure>.png`` for each of :data:`FIGURES` with a series of two or more
    steps (:func:`figure_series`; ``labels`` overrides :data:`LABELS`); returns the paths."""
    plt = _pyplot()
    records = read_metrics(metrics_path)
    out_dir = Path(out_dir)
    written: list[Path] = []
    for figure, (ylabel, _) in FIGURES.items():
        series = figure_series(records, figure, labels)
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


def _stage_labels(run_dir: Path) -> dict[str, dict[str, str]]:
    """``{folder: labels}`` of the run's RL stages, from its resolved config and plan (none if absent)."""
    from pettingllms.config.loader import RESOLVED_CONFIG_FILE, load_yaml_file

    state_file, config_file = run_dir / "pipeline_state.json", run_dir / RESOLVED_CONFIG_FILE
    if not (state_file.is_file() and config_file.is_file()):
        return {}
    config = load_yaml_file(config_file)
    out = {}
    for stage, folder in json.loads(state_file.read_text(encoding="utf-8"))["plan"]:
        label = training_success_label(config, stage)
        if label is not None:
            out[folder] = {"success_rate": label}
    return out


def plot_run(run_dir: str | Path) -> list[Path]:
    """Plots of every stage folder of a pipeline run that holds a ``metrics.jsonl``, and the held-out
    success summary, into ``run_dir/plots``."""
    run_dir = Path(run_dir)
    labels = _stage_labels(run_dir)
    written: list[Path] = []
    for metrics in sorted(run_dir.glob("*/metrics.jsonl")):
        if metrics.parent.name == "plots":
            continue
        name = metrics.parent.name
        written += plot_metrics(metrics, run_dir / "plots", name, labels.get(name))
    summary = plot_eval_summary(run_dir)
    return written + ([summary] if summary is not None else [])
