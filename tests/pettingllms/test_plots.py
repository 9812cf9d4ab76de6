"""What the run's plots and per-step table say about success: the series the success figure draws, the
training line's label (best-of-K for tree rollouts) and the table's header."""

from __future__ import annotations

import json

import pytest

from pettingllms import plots
from pettingllms.config import load_config
from pettingllms.config.loader import save_resolved_config
from pettingllms.plots import figure_series, training_success_label
from pettingllms.trainer.metrics import COLUMNS_HINT, NOTHING_TO_LEARN, StepTable

TEAM = "team (training rollouts)"


def test_success_figure_drops_agent_lines_that_repeat_the_team_line():
    records = [
        {"step": 1, "success_rate": 0.25, "agent/tool/success_rate": 0.25, "agent/plan/success_rate": 0.25},
        {"step": 2, "success_rate": 0.5, "agent/tool/success_rate": 0.5, "agent/plan/success_rate": 0.75,
         "eval/success_rate": 0.3},
    ]  # fmt: skip
    series = figure_series(records, "success")
    # tool acted in every episode: the team's line; plan differs at step 2, so it is its own line
    assert series == {
        TEAM: ([1.0, 2.0], [0.25, 0.5]),
        "plan": ([1.0, 2.0], [0.25, 0.75]),
        "held-out eval": ([2.0], [0.3]),
    }
    labelled = figure_series(records, "success", {"success_rate": "team, training rollouts (best-of-4)"})
    assert list(labelled) == ["team, training rollouts (best-of-4)", "plan", "held-out eval"]
    # other figures keep every agent's series
    rewards = [{"step": 1, "reward": 1.0, "agent/tool/reward_mean": 1.0, "agent/plan/reward_mean": 2.0}]
    assert set(figure_series(rewards, "reward")) == {"all agents", "tool", "plan"}


def test_training_success_label_says_best_of_k_for_tree_rollouts():
    config = load_config("plan_path/quickstart")
    assert training_success_label(config, "at_grpo") == "team, training rollouts (best-of-4)"
    wide = load_config("plan_path/quickstart", ["rollout.num_generations=8"])
    assert training_success_label(wide, "at_grpo") == "team, training rollouts (best-of-8)"
    independent = load_config("plan_path/quickstart", ["at_grpo.sampling_mode=independent"])
    assert training_success_label(independent, "at_grpo") == "team, training rollouts (mean of 4 trajectories)"
    assert training_success_label(config, "sft") is None


def test_plot_run_labels_each_rl_stage_from_the_runs_config(tmp_path, monkeypatch):
    config = load_config("plan_path/quickstart")
    save_resolved_config(config, tmp_path)
    plan = [["sft", "sft"], ["eval", "eval_before"], ["at_grpo", "at_grpo"], ["eval", "eval"]]
    (tmp_path / "pipeline_state.json").write_text(json.dumps({"plan": plan, "completed": []}))
    for folder in ("sft", "at_grpo"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "metrics.jsonl").write_text('{"step": 1, "sft/shared/loss": 1.0}\n')
    calls = {}

    def record(path, out_dir, name, labels=None):
        calls[name] = labels
        return []

    monkeypatch.setattr(plots, "plot_metrics", record)
    plots.plot_run(tmp_path)
    assert calls == {"at_grpo": {"success_rate": "team, training rollouts (best-of-4)"}, "sft": None}


def test_step_table_header_says_training_success_is_best_of_k(capsys):
    table = StepTable(["shared"], sampling_mode="tree", num_generations=4)
    note, header, hint = table.header_lines()
    assert note == (
        "succ@bestK: training success; each decision keeps the best of K=4 candidates, so it runs above "
        "held-out (eval) success"
    )
    assert header.split() == ["step", "succ@bestK", "reward", "zero_std", "loss", "clip", "kl", "entropy", "len", "secs"]
    metrics = {
        "success_rate": 0.71, "reward": 0.5, "frac_reward_zero_std": 0.25, "policy/shared/loss": 0.01,
        "policy/shared/clip_ratio/region_mean": 0.0, "policy/shared/approx_kl": 0.001, "policy/shared/entropy": 1.5,
        "completions/mean_length": 12.0, "time/step_s": 3.2,
    }  # fmt: skip
    assert hint == COLUMNS_HINT and "zero_std: share of groups" in hint and "\"The step table\"" in hint
    table.print_row(1, metrics)
    table.print_row(2, metrics)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [note, header, hint] and len(lines) == 5  # the note, header and hint once
    assert lines[3].split()[:2] == ["1", "0.710"] and len(lines[3]) == len(header)
    # A step whose every group had one reward is said once, under its row, whatever follows.
    for step in (3, 4):
        table.print_row(step, {**metrics, "frac_reward_zero_std": 1.0, "policy/shared/loss": 0.0})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["3", "0.710", "0.500", "1.00"] and lines[2].split()[0] == "4" and len(lines) == 3
    assert lines[1] == f"step 3: {NOTHING_TO_LEARN} (said once; the zero_std column shows it for every step)"
    assert NOTHING_TO_LEARN == "no group had a reward difference: nothing to learn from at this step"

    grpo = StepTable(["shared"], sampling_mode="independent", num_generations=8)
    assert grpo.header_lines()[0] == "succ@train: training success, the mean over K=8 sampled trajectories per problem"
    unsized = StepTable(["shared"]).header_lines()[0]
    assert unsized.startswith("succ@bestK: training success; each decision keeps the best of K candidates")
    with pytest.raises(ValueError, match=r"`sampling_mode` must be one of \['tree', 'independent'\], got 'beam'"):
        StepTable(["shared"], sampling_mode="beam")
