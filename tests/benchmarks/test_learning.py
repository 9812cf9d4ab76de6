"""The learning benchmark's bookkeeping: equal-sample budgets, held-out checks, the table and targets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import learning


def test_completions_per_step_bounds_counts_decisions():
    # Tree, 2 agents, K=4, 3 problems, 3 turns: at least turn 0 (2 decisions), at most 6 decisions.
    assert learning.completions_per_step_bounds("tree", 2, 4, 3, 3) == (24, 72)
    # Independent single agent: K trajectories of 1..3 decisions each.
    assert learning.completions_per_step_bounds("independent", 1, 4, 3, 3) == (12, 36)
    with pytest.raises(ValueError, match="`sampling_mode`"):
        learning.completions_per_step_bounds("beam", 1, 4, 3, 3)
    with pytest.raises(ValueError, match="`k` must be >= 1"):
        learning.completions_per_step_bounds("tree", 2, 0, 3, 3)


@given(st.integers(1, 10_000), st.integers(1, 500))
def test_max_steps_for_budget_is_the_smallest_sufficient_count(budget, fewest):
    steps = learning.max_steps_for_budget(budget, fewest)
    assert steps * fewest >= budget
    assert (steps - 1) * fewest < budget


def test_check_heldout_rejects_overlap_and_names_the_range():
    eval_seeds = range(1_000_000, 1_000_050)
    learning.check_heldout({"train": [0, 100_000], "demos": range(0, 200)}, eval_seeds)
    with pytest.raises(AssertionError, match=r"train \[999990, 1000001\) overlaps .* \[1000000\]"):
        learning.check_heldout({"train": [999_990, 1_000_001]}, eval_seeds)


def _cell(before, after, completions=100, seconds=60.0):
    return {"success_before": before, "success_after": after, "completions": completions, "seconds_total": seconds}


def test_table_means_and_targets_match_hand_computation():
    warm = {0: {"start_multi": 0.2, "start_single": 0.3}, 1: {"start_multi": 0.4, "start_single": 0.1}}
    cells = {
        ("grpo_l0", 0): _cell(0.3, 0.4), ("grpo_l0", 1): _cell(0.1, 0.2),
        ("at_grpo_l1", 0): _cell(0.2, 0.7, 90), ("at_grpo_l1", 1): _cell(0.4, 0.6, 110),
    }
    rows, table = learning.build_table([0, 1], warm, cells, ["grpo_l0", "at_grpo_l1"])
    assert math.isclose(rows[0]["mean"], 0.3) and math.isclose(rows[1]["mean"], 0.2)
    l1 = rows[3]
    assert math.isclose(l1["mean"], 0.65) and math.isclose(l1["gain"], 0.65 - 0.3) and l1["completions"] == 100
    assert "tool: simulate; plan: none" in table and "single: none" in table
    checks = learning.target_checks(rows)
    assert math.isclose(checks["at_grpo_l1"]["gain_over_multi_start"], 0.35)
    assert checks["at_grpo_l1"]["gain_met"] is True
    assert math.isclose(checks["at_grpo_l1"]["margin_over_grpo_l0"], 0.65 - 0.3)
    assert checks["at_grpo_l1"]["margin_met"] is True
    assert "grpo_l0" not in checks
    assert rows[0]["greedy_mean"] is None and "greedy mean" in table  # cells without greedy numbers


def test_table_reports_greedy_means_next_to_the_sampled_ones():
    warm = {0: {"start_multi": 0.2, "start_single": 0.3, "start_multi_greedy": 0.1, "start_single_greedy": 0.5}}
    cell = {**_cell(0.2, 0.4), "greedy_before": 0.1, "greedy_after": 0.25}
    rows, table = learning.build_table([0], warm, {("at_grpo_l1", 0): cell}, ["at_grpo_l1"])
    assert math.isclose(rows[0]["greedy_mean"], 0.1) and math.isclose(rows[1]["greedy_mean"], 0.5)
    assert math.isclose(rows[2]["greedy_mean"], 0.25) and math.isclose(rows[2]["mean"], 0.4)
    assert "| 40% | +20 | 25% |" in table


def test_rl_overrides_apply_per_method_and_reject_unknown_keys():
    rls = learning.parse_rl_overrides(["learning_rate=3e-4", "at_grpo_l1.num_generations=8"],
                                      ["grpo_l0", "at_grpo_l1"])
    assert rls["grpo_l0"].learning_rate == 3e-4 and rls["grpo_l0"].num_generations == 4
    assert rls["at_grpo_l1"].num_generations == 8
    with pytest.raises(SystemExit, match="unknown key 'lr'"):
        learning.parse_rl_overrides(["lr=1"], ["grpo_l0"])


def test_cell_key_leaves_later_settings_out_at_their_defaults():
    import dataclasses

    task, rl = learning.TaskSettings(), learning.RLSettings()
    without = {k: v for k, v in dataclasses.asdict(rl).items() if k not in learning.KEY_OMITTED_DEFAULTS}
    recorded = learning.settings_hash({"method": "at_grpo_l1", "seed": 0, "task": dataclasses.asdict(task),
                                       "rl": without})
    assert learning.cell_key("at_grpo_l1", 0, task, rl) == recorded  # cells recorded before the setting match
    changed = dataclasses.replace(rl, greedy_selection=False)
    assert learning.cell_key("at_grpo_l1", 0, task, changed) != recorded
