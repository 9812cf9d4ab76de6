"""The learning benchmark's bookkeeping: its pipeline configs and their keys, equal-sample budgets, the run
folders read back, the table and targets."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import learning
from pettingllms.config import ConfigError
from pettingllms.pipeline import check_pipeline


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


def _cell(before, after, completions=100, seconds=60.0):
    return {"success_before": before, "success_after": after, "completions": completions, "seconds_total": seconds}


def test_table_means_and_targets_match_hand_computation():
    warm = {0: {"start_multi": 0.2, "start_single": 0.3, "start_single_tool": 0.1},
            1: {"start_multi": 0.4, "start_single": 0.1, "start_single_tool": 0.3}}
    cells = {
        ("grpo_l0_tool", 0): _cell(0.3, 0.4), ("grpo_l0_tool", 1): _cell(0.1, 0.2),
        ("at_grpo_l1", 0): _cell(0.2, 0.7, 90), ("at_grpo_l1", 1): _cell(0.4, 0.6, 110),
    }
    rows, table = learning.build_table([0, 1], warm, cells, ["grpo_l0_tool", "at_grpo_l1"])
    assert [r["mean"] for r in rows[:4]] == pytest.approx([0.3, 0.2, 0.2, 0.3])  # three starts, single with tool
    l1 = rows[4]
    assert math.isclose(l1["mean"], 0.65) and math.isclose(l1["gain"], 0.65 - 0.3) and l1["completions"] == 100
    assert "tool: simulate; plan: none" in table and "single: none" in table and "single: simulate" in table
    checks = learning.target_checks(rows)
    assert math.isclose(checks["at_grpo_l1"]["gain_over_multi_start"], 0.35)
    assert checks["at_grpo_l1"]["gain_met"] is True
    assert checks["at_grpo_l1"]["baseline"] == "grpo_l0_tool"  # the single agent with the team's tool
    assert math.isclose(checks["at_grpo_l1"]["margin_over_grpo_l0"], 0.65 - 0.3)
    assert checks["at_grpo_l1"]["margin_met"] is True
    assert "grpo_l0_tool" not in checks
    assert rows[0]["greedy_mean"] is None and "greedy mean" in table  # cells without greedy numbers
    # Standard errors over the seeds (sample sd / sqrt(n)): L1 0.7, 0.6 -> sd 0.0707, s.e. 0.05; the paired
    # margins over single-agent GRPO 0.3, 0.4 and gains over the start 0.5, 0.2 (s.e. 0.15).
    assert math.isclose(l1["se"], 0.05) and "| 70% | 60% | 65% ± 5.0 | +35 |" in table
    assert checks["at_grpo_l1"]["margin_per_seed"] == {0: pytest.approx(0.3), 1: pytest.approx(0.4)}
    assert math.isclose(checks["at_grpo_l1"]["margin_se"], 0.05)
    assert math.isclose(checks["at_grpo_l1"]["gain_se"], 0.15)
    # A row run on seed 0 alone is compared on seed 0: gain 0.7 - 0.2, margin 0.7 - 0.4 (not against the means
    # of both seeds' starts, 0.3, and of GRPO, 0.3).
    del cells[("at_grpo_l1", 1)]
    rows, _ = learning.build_table([0, 1], warm, cells, ["grpo_l0_tool", "at_grpo_l1"])
    one_seed = learning.target_checks(rows)["at_grpo_l1"]
    assert math.isclose(one_seed["gain_over_multi_start"], 0.5) and math.isclose(one_seed["margin_over_grpo_l0"], 0.3)
    assert one_seed["gain_se"] is None and one_seed["margin_per_seed"] == {0: pytest.approx(0.3)}
    # No seed shared with the baseline: no margin, rather than one between different seeds.
    del cells[("grpo_l0_tool", 0)]
    rows, _ = learning.build_table([0, 1], warm, cells, ["grpo_l0_tool", "at_grpo_l1"])
    assert learning.target_checks(rows)["at_grpo_l1"]["margin_over_grpo_l0"] is None


def test_standard_error_by_hand():
    # 0.2, 0.4, 0.9: mean 0.5, squared deviations 0.09 + 0.01 + 0.16 = 0.26, sd sqrt(0.26 / 2), s.e. sd / sqrt(3)
    assert learning.standard_error([0.2, 0.4, 0.9]) == pytest.approx(math.sqrt(0.13 / 3))
    assert learning.standard_error([0.5]) is None and learning.standard_error([]) is None


def test_table_reports_greedy_means_next_to_the_sampled_ones():
    warm = {0: {"start_multi": 0.2, "start_single": 0.3, "start_single_tool": 0.1, "start_multi_greedy": 0.1,
                "start_single_greedy": 0.5, "start_single_tool_greedy": 0.0}}
    cell = {**_cell(0.2, 0.4), "greedy_before": 0.1, "greedy_after": 0.25}
    rows, table = learning.build_table([0], warm, {("at_grpo_l1", 0): cell}, ["at_grpo_l1"])
    assert math.isclose(rows[0]["greedy_mean"], 0.1) and math.isclose(rows[1]["greedy_mean"], 0.5)
    assert math.isclose(rows[3]["greedy_mean"], 0.25) and math.isclose(rows[3]["mean"], 0.4)
    assert "| 40% | +20 | 25% |" in table


def test_rl_overrides_become_stage_keys_that_the_config_loader_checks():
    items = ["learning_rate=3e-4", "at_grpo_l1.rollout.num_generations=8", "grpo_l0.beta=0.1"]
    assert learning.rl_overrides(items, "at_grpo_l1") == ["at_grpo.learning_rate=3e-4", "rollout.num_generations=8"]
    assert learning.rl_overrides(items, "grpo_l0") == ["grpo.learning_rate=3e-4", "grpo.beta=0.1"]
    with pytest.raises(SystemExit, match="expected"):
        learning.rl_overrides(["lr"], "grpo_l0")
    with pytest.raises(ConfigError, match=r"unknown key `at_grpo.lr`"):
        learning.cell_config("at_grpo_l1", 0, [], ["lr=1"], Path("results"), "small")


def test_cells_are_pipeline_configs_with_a_step_cap_that_reaches_the_budget(tmp_path):
    config = learning.cell_config("at_grpo_l1", 2, [], [], tmp_path, "warm/policies/shared", budget_minutes=4)
    assert config["pipeline"] == ["at_grpo", "eval"] and config["policy"]["level"] == "L1"
    assert (config["run"]["seed"], config["model"]["name"]) == (2, "warm/policies/shared")
    stage = config["at_grpo"]
    # tree, 2 agents, K=4, 4 problems: at least 32 completions a step
    assert (stage["max_completions"], stage["max_steps"], stage["max_minutes"]) == (4500, math.ceil(4500 / 32), 8.0)
    assert config["run"]["output_dir"] == str(tmp_path / "cache" / "at_grpo_l1-seed2")
    grpo = learning.cell_config("grpo_l0", 0, [], ["max_completions=120"], tmp_path, "w")
    assert grpo["pipeline"] == ["grpo", "eval"] and grpo["grpo"]["max_steps"] == math.ceil(120 / 16)
    warm = learning.warm_start_config(0, ["env.rows=5"], tmp_path)
    assert warm["pipeline"] == ["sft", "eval"] and warm["sft"]["workflows"] == [["single"], ["tool", "plan"]]
    assert warm["env"]["rows"] == 5 and warm["eval"]["greedy"] is True


def test_settings_keys_follow_the_numbers_not_the_folders(tmp_path):
    config = learning.cell_config("at_grpo_l1", 0, [], [], tmp_path, "a")
    key = learning.cell_key(config, "at_grpo_l1", "warm")
    elsewhere = learning.cell_config("at_grpo_l1", 0, [], [], tmp_path / "other", "b", budget_minutes=20)
    assert learning.cell_key(elsewhere, "at_grpo_l1", "warm") == key  # folders and the time cap aside
    assert learning.cell_key(config, "at_grpo_l1", "another warm start") != key
    changed = learning.cell_config("at_grpo_l1", 0, [], ["rollout.greedy_branch=false"], tmp_path, "a")
    assert learning.cell_key(changed, "at_grpo_l1", "warm") != key
    warm = learning.warm_start_key(0, [], tmp_path)
    assert learning.warm_start_key(0, [], tmp_path / "x") == warm != learning.warm_start_key(1, [], tmp_path)
    assert learning.warm_start_key(0, ["sft.num_train_epochs=2"], tmp_path) != warm


def test_rl_history_reads_steps_and_curve_points_from_the_stage_metrics(tmp_path):
    import json

    records = [
        {"step": 1, "num_samples": 40.0, "dropped_samples": 2.0, "success_rate": 0.5, "reward": 0.1,
         "frac_reward_zero_std": 0.25, "parse_error_rate": 0.0, "completions/mean_length": 9.0, "time/step_s": 3.0,
         "policy/shared/loss": -0.1, "policy/shared/clip_ratio/region_mean": 0.0, "policy/shared/reward": 0.2},
        {"step": 1, "eval/success_rate": 0.3, "eval/greedy_success_rate": 0.2, "eval/completions": 42.0},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    history, points = learning.rl_history(path)
    assert history == [{"step": 1, "completions": 42, "success_rate": 0.5, "reward": 0.1, "frac_reward_zero_std": 0.25,
                        "parse_error_rate": 0.0, "mean_length": 9.0, "step_s": 3.0, "policy/shared/loss": -0.1}]
    assert points == [{"completions": 42, "success": 0.3, "greedy": 0.2}]


def test_math_arith_rows_name_their_tools_and_measure_the_margin_against_grpo_with_the_tool():
    bench = learning.MATH_ARITH
    warm = {0: {"start_multi": 0.2, "start_single": 0.0, "start_single_tool": 0.25}}
    cells = {("grpo_l0", 0): _cell(0.0, 0.02), ("grpo_l0_tool", 0): _cell(0.25, 0.5), ("at_grpo_l1", 0): _cell(0.2, 0.55)}
    rows, table = learning.build_table([0], warm, cells, ["grpo_l0", "grpo_l0_tool", "at_grpo_l1"], bench)
    assert [r["row"] for r in rows[:4]] == [s.label for s in bench.starts]
    assert "tool_generator: calculator; reasoning_generator: none" in table
    assert "| single agent, no tool, before RL (warm start) | single: none |" in table
    assert "| single-agent GRPO with the calculator (L0) | single: calculator |" in table
    checks = learning.target_checks(rows, bench)
    assert set(checks) == {"at_grpo_l1"} and checks["at_grpo_l1"]["baseline"] == "grpo_l0_tool"
    assert math.isclose(checks["at_grpo_l1"]["margin_over_grpo_l0"], 0.05) and checks["at_grpo_l1"]["margin_met"] is False
    assert math.isclose(checks["at_grpo_l1"]["gain_over_multi_start"], 0.35) and checks["at_grpo_l1"]["gain_met"] is True
    assert checks["at_grpo_l1"]["margins_over_other_baselines"] == {}  # the two-turn row was not run here
    # The single agent at the team's model calls is the target's baseline; at 2 turns it is reported beside it,
    # paired the same way: seeds 0, 1 -> (0.55 - 0.4, 0.6 - 0.3) = (0.15, 0.3), mean 0.225, s.e. 0.075.
    warm[1] = {"start_multi": 0.3, "start_single": 0.0, "start_single_tool": 0.2}
    cells |= {("at_grpo_l1", 1): _cell(0.3, 0.6), ("grpo_l0_tool_two_turns", 0): _cell(0.2, 0.4),
              ("grpo_l0_tool_two_turns", 1): _cell(0.1, 0.3)}
    rows, table = learning.build_table([0, 1], warm, cells, ["grpo_l0_tool", "grpo_l0_tool_two_turns", "at_grpo_l1"],
                                       bench)
    assert "| single-agent GRPO with the calculator, 2 turns (L0) | single: calculator |" in table
    other = learning.target_checks(rows, bench)["at_grpo_l1"]["margins_over_other_baselines"]["grpo_l0_tool_two_turns"]
    assert other["per_seed"] == {0: pytest.approx(0.15), 1: pytest.approx(0.3)}
    assert math.isclose(other["mean"], 0.225) and math.isclose(other["se"], 0.075)
    assert learning.MATH_ARITH.methods["grpo_l0_tool_two_turns"].overrides == ("env.single_tool=calculator",)
    assert "env.max_turns=4" in learning.MATH_ARITH.methods["grpo_l0_tool"].overrides


def test_math_arith_cells_run_the_math_configs_with_their_own_overrides(tmp_path):
    bench = learning.MATH_ARITH
    none = learning.cell_config("grpo_l0", 0, [], [], tmp_path, "warm", bench=bench)
    tool = learning.cell_config("grpo_l0_tool", 0, [], [], tmp_path, "warm", bench=bench)
    team = learning.cell_config("at_grpo_l3", 0, [], [], tmp_path, "warm", bench=bench)
    assert none["env"]["name"] == tool["env"]["name"] == "math" and none["env"]["turn_order"] == ["single"]
    assert (none["env"]["single_tool"], tool["env"]["single_tool"]) == ("none", "calculator")
    assert team["env"]["turn_order"] == ["tool_generator", "reasoning_generator"] and team["env"]["tool"] == "calculator"
    assert team["policy"]["level"] == "L3" and team["pipeline"] == ["at_grpo", "eval"]
    assert none["grpo"]["max_completions"] == team["at_grpo"]["max_completions"] == 4500  # equal RL samples
    warm = learning.warm_start_config(0, [], tmp_path, bench)
    assert warm["sft"]["workflows"] == [["single"], ["tool_generator", "reasoning_generator"]]
    assert learning.warm_start_key(0, [], tmp_path, bench) != learning.warm_start_key(0, [], tmp_path)


def test_summary_file_keeps_one_table_per_task():
    plan = {"benchmark": "learning", "table": "| plan |"}
    merged = learning.merged_summary(plan, "math/arith", {"table": "| math |"})  # the one-table layout migrates
    assert merged == {"benchmark": "learning", "tasks": {"plan_path": plan, "math/arith": {"table": "| math |"}}}
    again = learning.merged_summary(merged, "plan_path", {"table": "| new plan |"})
    assert again["tasks"]["plan_path"] == {"table": "| new plan |"} and again["tasks"]["math/arith"]["table"] == "| math |"
    assert learning.merged_summary(None, "plan_path", plan) == {"benchmark": "learning", "tasks": {"plan_path": plan}}


# ---- the preference rows (issue #22): MADPO from AT-GRPO's trees alone, and the hybrid ----------------------

def test_preference_rows_alternate_at_grpo_and_madpo_from_trees_at_the_same_budget(tmp_path):
    chunks = learning.PREFERENCE_CHUNKS
    for bench, rl, total in ((learning.PLAN_PATH, [], 4500), (learning.MATH_ARITH, ["max_completions=2400"], 2400)):
        alone = learning.cell_config("madpo_trees_l1", 0, [], rl, tmp_path, "warm", bench=bench)
        hybrid = learning.cell_config("hybrid_l1", 0, [], rl, tmp_path, "warm", bench=bench)
        l1 = learning.cell_config("at_grpo_l1", 0, [], rl, tmp_path, "warm", bench=bench)
        for config in (alone, hybrid):
            assert config["pipeline"] == ["at_grpo", "madpo_from_trees"] * chunks + ["eval"]
            assert config["policy"]["level"] == "L1" and config["at_grpo"]["max_completions"] * chunks == total
            assert config["at_grpo"]["max_steps"] == math.ceil(total / chunks / 32)  # a repeat's share at most
            assert config["madpo_from_trees"]["preference_replay_mode"] == "all_history"
            # everything else the AT-GRPO L1 row's: sampling, learning rate, evaluation
            for section in ("rollout", "eval", "env", "policy"):
                assert config[section] == l1[section]
            assert config["at_grpo"]["learning_rate"] == l1["at_grpo"]["learning_rate"] == 1e-4
            assert config["madpo_from_trees"]["learning_rate"] == 1e-4
        assert (alone["at_grpo"]["update_policy"], hybrid["at_grpo"]["update_policy"], l1["at_grpo"]["update_policy"]) == (
            False, True, True)
        last = learning.cell_config("hybrid_rl_last_l1", 0, [], rl, tmp_path, "warm", bench=bench)
        assert last["pipeline"] == ["at_grpo", "madpo_from_trees"] * (chunks - 1) + ["at_grpo", "eval"]
        assert last["at_grpo"]["max_completions"] * chunks == total and last["at_grpo"]["update_policy"] is True
        # the last at_grpo stage updates: no madpo_from_trees needed after it
        check_pipeline(learning.cell_config("hybrid_rl_last_l1", 0, [], rl, tmp_path, "small", bench=bench))
        assert l1["pipeline"] == ["at_grpo", "eval"] and l1["at_grpo"]["max_completions"] == total


def test_keys_leave_out_the_stage_sections_a_cell_does_not_run(tmp_path):
    def key(name, *task):
        return learning.cell_key(learning.cell_config(name, 0, list(task), [], tmp_path, "a"), name, "warm")

    assert key("at_grpo_l1", "madpo_from_trees.max_nonfinite_losses_in_a_row=3") == key("at_grpo_l1")
    assert key("hybrid_l1", "madpo_from_trees.max_nonfinite_losses_in_a_row=3") != key("hybrid_l1") != key("madpo_trees_l1")


def test_a_record_made_before_keys_were_added_still_counts_and_one_with_other_values_does_not(tmp_path):
    current = learning.cell_config("at_grpo_l1", 0, [], [], tmp_path, "unused")
    warm = tmp_path / "warmstart-seed0.json"
    warm.write_text(json.dumps({"settings_key": "w", "start_multi": 0.25, "start_single": 0.2}))
    key = learning.cell_key(current, "at_grpo_l1", "w")
    rekey = learning.cell_rekey(current, "at_grpo_l1", "w", warm)
    older = {k: dict(v) if isinstance(v, dict) else v for k, v in current.items()}
    del older["rollout"]["backend"], older["madpo_from_trees"]  # keys added since, at their current values
    older["model"]["name"] = "/elsewhere/warmstart-seed0/policies/shared"
    record = {"settings_key": "made-with-the-older-hash", "config": older,
              "warm_start": {"start_multi": 0.25, "start_single": 0.2, "model_dir": "/elsewhere"}}
    path = tmp_path / "at_grpo_l1-seed0.json"
    path.write_text(json.dumps(record))
    assert learning._job_done(path, key, rekey) and not learning._job_done(path, key)
    changed = {**record, "config": {**older, "rollout": {**older["rollout"], "temperature": 0.7}}}
    path.write_text(json.dumps(changed))
    assert not learning._job_done(path, key, rekey)  # a value that differs is another run
    path.write_text(json.dumps({**record, "warm_start": {**record["warm_start"], "start_multi": 0.3}}))
    assert not learning._job_done(path, key, rekey)  # from a warm start with other numbers
    path.write_text(json.dumps({**record, "warm_start": {**record["warm_start"], "start_single": 0.1}}))
    assert not learning._job_done(path, key, rekey)  # an evaluated start row the warm record does not list
    warm.write_text(json.dumps({"settings_key": "w", "start_multi": 0.25, "start_single": 0.2,
                                "start_rows": {"start_single": {"level": "L0", "overrides": ["env.max_turns=4"]}}}))
    assert learning._job_done(path, key, rekey)  # it does: its number changes with its overrides, the model stays
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "config"}))
    assert not learning._job_done(path, key, rekey)  # no config recorded: nothing to compare
    assert learning.with_added_keys({"a": {"b": 1}, "gone": 2}, {"a": {"b": 3, "c": 4}, "new": 5}) == {
        "a": {"b": 1, "c": 4}, "gone": 2, "new": 5}


def test_a_record_saved_with_earlier_key_names_still_counts(tmp_path):
    current = learning.cell_config("hybrid_l1", 0, [], [], tmp_path, "unused")
    warm = tmp_path / "warmstart-seed0.json"
    warm.write_text(json.dumps({"settings_key": "w", "start_multi": 0.25}))
    key = learning.cell_key(current, "hybrid_l1", "w")
    older = json.loads(json.dumps(current))
    older["sft"]["epochs"] = older["sft"].pop("num_train_epochs")  # the names before the rename
    trees = older["madpo_from_trees"]
    trees["agent_learning_rate"], trees["dpo_beta"] = trees.pop("learning_rate"), trees.pop("beta")
    trees["reference_kl_coef"] = 0.1  # a field MADPO never read, no key now
    path = tmp_path / "hybrid_l1-seed0.json"
    path.write_text(json.dumps({"settings_key": "older", "config": older, "warm_start": {"start_multi": 0.25}}))
    assert learning._job_done(path, key, learning.cell_rekey(current, "hybrid_l1", "w", warm))
    trees["dpo_beta"] = 0.2  # another value under the earlier name is another run
    path.write_text(json.dumps({"settings_key": "older", "config": older, "warm_start": {"start_multi": 0.25}}))
    assert not learning._job_done(path, key, learning.cell_rekey(current, "hybrid_l1", "w", warm))


def test_a_prompt_change_makes_new_keys_and_old_records_do_not_count(tmp_path, monkeypatch):
    # Prompt text is code: a record measured with older prompts must not be reused for the current ones.
    bench = learning.TASKS["math/arith"]
    current = learning.cell_config("at_grpo_l1", 0, [], [], tmp_path, "unused", bench=bench)
    assert learning.prompt_version(current) >= 2  # math's prompts lost the verdict (version 2)
    warm = tmp_path / "warmstart-seed0.json"
    warm.write_text(json.dumps({"settings_key": "w", "start_multi": 0.25}))
    key = learning.cell_key(current, "at_grpo_l1", "w")
    assert key != learning.cell_key(current, "at_grpo_l1", "w", prompts=1)
    record = {"settings_key": "older", "config": current, "warm_start": {"start_multi": 0.25}}
    path = tmp_path / "at_grpo_l1-seed0.json"
    path.write_text(json.dumps(record))  # no prompt_version: made with version 1
    rekey = learning.cell_rekey(current, "at_grpo_l1", "w", warm)
    assert not learning._job_done(path, key, rekey)
    path.write_text(json.dumps({**record, "prompt_version": learning.prompt_version(current)}))
    assert learning._job_done(path, key, rekey)  # the same config with the current prompts counts
    plan = learning.cell_config("at_grpo_l1", 0, [], [], tmp_path, "unused")
    assert learning.prompt_version(plan) == 1  # no PROMPT_VERSION: Plan-Path's records stay valid


def test_preference_cells_read_every_at_grpo_stage_and_compare_with_at_grpo_l1_per_seed(tmp_path):
    for folder, sizes in (("at_grpo", [40, 36]), ("at_grpo_2", [44])):
        (tmp_path / folder).mkdir()
        records = [{"step": i + 1, "num_samples": float(n), "dropped_samples": 0.0, "success_rate": 0.5, "reward": 0.1,
                    "frac_reward_zero_std": 0.0, "parse_error_rate": 0.0, "completions/mean_length": 9.0,
                    "time/step_s": 1.0} for i, n in enumerate(sizes)]
        records.append({"step": len(sizes), "eval/success_rate": 0.4, "eval/completions": float(sum(sizes))})
        (tmp_path / folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    history, points = learning.stage_histories(tmp_path, ["at_grpo", "at_grpo_2"])
    assert [(h["stage"], h["step"], h["completions"]) for h in history] == [
        ("at_grpo", 1, 40), ("at_grpo", 2, 36), ("at_grpo_2", 1, 44)]
    assert [p["completions"] for p in points] == [76, 120]  # counted over the run
    cells = {("at_grpo_l1", 0): _cell(0.2, 0.5), ("at_grpo_l1", 1): _cell(0.3, 0.4),
             ("hybrid_l1", 0): _cell(0.2, 0.45), ("madpo_trees_l1", 1): _cell(0.3, 0.3)}
    deltas = learning.paired_deltas(cells, [0, 1])
    assert set(deltas) == {"hybrid_l1", "madpo_trees_l1"}
    assert math.isclose(deltas["hybrid_l1"]["per_seed"][0], -0.05) and list(deltas["hybrid_l1"]["per_seed"]) == [0]
    assert math.isclose(deltas["madpo_trees_l1"]["mean"], -0.1)
    rows, _ = learning.build_table([0, 1], {0: {"start_multi": 0.2, "start_single": 0.1}}, cells,
                                   ["at_grpo_l1", "madpo_trees_l1", "hybrid_l1"])
    assert set(learning.target_checks(rows)) == {"at_grpo_l1"}  # the targets are AT-GRPO's ...
    cells[("hybrid_rl_last_l1", 0)] = _cell(0.2, 0.6)
    rows, _ = learning.build_table([0, 1], {0: {"start_multi": 0.2, "start_single": 0.1}}, cells,
                                   ["at_grpo_l1", "madpo_trees_l1", "hybrid_l1", "hybrid_rl_last_l1"])
    checks = learning.target_checks(rows)
    assert set(checks) == {"at_grpo_l1", "hybrid_rl_last_l1"}  # ... and the hybrid's that ends on AT-GRPO
    assert math.isclose(checks["hybrid_rl_last_l1"]["gain_over_multi_start"], 0.4)


def test_a_finished_cell_is_checked_again_after_its_warm_start_ran_again(tmp_path, monkeypatch):
    warm, cell = tmp_path / "warm.json", tmp_path / "cell.json"
    warm.write_text(json.dumps({"settings_key": "old", "start_multi": 0.2}))
    cell.write_text(json.dumps({"settings_key": "c"}))
    ran = []

    class Proc:  # the warm start "reruns" and its numbers change; nothing else runs
        pid = 0

        def __init__(self, cmd, **kwargs):
            ran.append(cmd[cmd.index("--seed") + 1] if "--seed" in cmd else cmd)
            if "warm_start" in cmd:
                warm.write_text(json.dumps({"settings_key": "w", "start_multi": 0.3}))
            else:
                cell.write_text(json.dumps({"settings_key": "c-now", "rerun": True}))

        def poll(self):
            return 0

    monkeypatch.setattr(learning.subprocess, "Popen", Proc)
    monkeypatch.setattr(learning.time, "sleep", lambda s: None)
    same_start = lambda record: "c-now" if json.loads(warm.read_text())["start_multi"] == 0.2 else None  # noqa: E731
    jobs = [learning.Job("warm", ["--job", "warm_start", "--seed", "0"], warm, "w"),
            learning.Job("cell", ["--job", "cell", "--seed", "0"], cell, "c-now", needs=["warm"], rekey=same_start)]
    assert jobs[1].done() and not jobs[0].done()
    learning.run_jobs(jobs, 1, 1, tmp_path / "logs")
    assert ran == ["0", "0"] and json.loads(cell.read_text())["rerun"]  # the cell ran after its warm start changed
    ran.clear()
    learning.run_jobs(jobs, 1, 1, tmp_path / "logs")
    assert ran == []  # both finished now


def test_percentages_keep_the_half_points_of_200_trajectories():
    assert [learning._pct(v) for v in (0.305, 0.4, 0.0, 0.995, None)] == ["30.5%", "40%", "0%", "99.5%", "—"]
    assert learning._pct_se(0.38, 0.0133) == "38% ± 1.3" and learning._pct_se(0.38, None) == "38%"


def _eval_result(success: float) -> dict:
    return {"eval": {"metrics": {"success_rate": success, "greedy_success_rate": success / 2}, "seconds": 1.0}}


def test_a_changed_start_row_is_measured_again_on_the_same_model_not_reused(tmp_path, monkeypatch):
    bench = learning.PLAN_PATH
    current = {s.key: learning.start_row_spec(s) for s in bench.starts[1:]}
    assert learning.stale_start_rows({"start_rows": current}, bench) == []
    assert [s.key for s in learning.stale_start_rows({}, bench)] == ["start_single", "start_single_tool"]
    changed = {**current, "start_single_tool": {"level": "L0", "overrides": ["env.max_turns=4"]}}
    assert [s.key for s in learning.stale_start_rows({"start_rows": changed}, bench)] == ["start_single_tool"]

    model = tmp_path / "model"
    model.mkdir()
    path = tmp_path / "warmstart-seed0.json"
    path.write_text(json.dumps({
        "seed": 0, "settings_key": learning.warm_start_key(0, [], tmp_path, bench), "model_dir": str(model),
        "start_multi": 0.2, "start_single": 0.05, "start_single_tool": 0.1, "start_rows": changed,
        "seconds": {"sft": 5.0}}))
    runs = []

    def fake_pipeline(config):
        runs.append(config)
        return _eval_result(0.4)

    monkeypatch.setattr(learning, "run_pipeline", fake_pipeline)
    record = learning.job_warm_start(0, [], tmp_path, bench)
    # Only the changed row ran: on the recorded model, with the row's overrides now, in the row's own folder.
    assert len(runs) == 1 and runs[0]["pipeline"] == ["eval"] and runs[0]["env"]["max_turns"] == 6
    assert runs[0]["model"]["name"] == str(model)
    assert runs[0]["run"]["output_dir"].endswith("warmstart-seed0-single-tool")
    assert (record["start_single_tool"], record["start_single_tool_greedy"]) == (0.4, 0.2)
    assert (record["start_multi"], record["start_single"]) == (0.2, 0.05)  # the model and other rows are kept
    assert record["start_rows"] == current and json.loads(path.read_text()) == record
    learning.job_warm_start(0, [], tmp_path, bench)
    assert len(runs) == 1  # nothing stale any more


def test_the_table_leaves_out_a_start_number_measured_with_other_overrides(tmp_path, capsys):
    bench = learning.PLAN_PATH
    current = {s.key: learning.start_row_spec(s) for s in bench.starts[1:]}
    changed = {**current, "start_single": {"level": "L0", "overrides": []}}
    (tmp_path / "warmstart-seed0.json").write_text(json.dumps({
        "seed": 0, "settings_key": learning.warm_start_key(0, [], tmp_path, bench), "model_dir": "m",
        "start_multi": 0.2, "start_single": 0.05, "start_single_greedy": 0.0, "start_single_tool": 0.1,
        "start_rows": changed}))
    args = argparse.Namespace(seeds=[0], methods=[], rl=[], budget_minutes=30.0, cells_parallel=1, threads=1)
    summary = learning.summarize(args, [], tmp_path, bench)
    rows = {row["start"]: row for row in summary["rows"] if row["start"]}
    assert rows["start_single"]["per_seed"] == {} and rows["start_single"]["mean"] is None
    assert rows["start_single_tool"]["per_seed"] == {0: 0.1} and rows["start_multi"]["per_seed"] == {0: 0.2}
    assert "[left out] start_single of seed 0" in capsys.readouterr().out


def test_the_benchmark_runs_the_warm_start_job_again_when_a_start_row_changed(tmp_path, monkeypatch, capsys):
    bench = learning.PLAN_PATH
    model = tmp_path / "model"
    model.mkdir()
    specs = {s.key: learning.start_row_spec(s) for s in bench.starts[1:]}
    record = {"seed": 0, "settings_key": learning.warm_start_key(0, [], tmp_path, bench), "model_dir": str(model),
              "start_multi": 0.2, "start_single": 0.05, "start_single_tool": 0.1}
    scheduled = []
    monkeypatch.setattr(learning, "run_jobs", lambda jobs, *a: scheduled.append({j.name: j.done() for j in jobs}))
    argv = ["--results", str(tmp_path), "--seeds", "0", "--methods", "at_grpo_l1", "--summary", str(tmp_path / "s.json")]
    for start_rows, to_run in ((specs, False), ({**specs, "start_single": {"level": "L0", "overrides": []}}, True)):
        (tmp_path / "warmstart-seed0.json").write_text(json.dumps({**record, "start_rows": start_rows}))
        assert learning.main(argv) == 0
        assert scheduled.pop()["warmstart-seed0"] is not to_run
    assert "[rerun] warmstart-seed0: start rows ['start_single'] changed" in capsys.readouterr().out
