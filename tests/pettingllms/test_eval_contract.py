"""The evaluation contract of ``pettingllms eval``: pass@k, scripted policies without a model, a run's own
config, mismatches and bad checkpoints as one-line errors, where the report goes, progress on stderr."""

from __future__ import annotations

import itertools
import json
import math
import random
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.cli import main
from pettingllms.config import load_config
from pettingllms.execution import EvalResult, ProblemOutcome
from pettingllms.execution.pass_at_k import (
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_intervals,
    pass_at_k_sizes,
    wilson_interval,
)
from pettingllms.stages.eval import eval_metrics, eval_summary, held_out_evaluations, scripted_router

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
# A tiny run: a warm start and one eval of 3 instances x 2 samples at temperature 1 (so pass@k is reported).
# The warm start (as in test_pipeline) makes the model write some parseable answers, so the eval's reward
# means depend on what was sampled and a reproduced eval is not all parse errors.
TINY_RUN = [
    "pipeline=[sft, eval]",
    "env.max_turns=1",
    "rollout.max_completion_length=16",
    "rollout.transcripts_rate=0.0",
    "sft.num_problems=12",
    "sft.num_train_epochs=6",
    "sft.learning_rate=1e-2",
    "eval.num_instances=3",
    "eval.num_samples=2",
    "eval.temperature=1.0",
]


# ---- pass@k (pure) -------------------------------------------------------------------------------------


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """The share of the k-subsets of n samples (the first c successes) that hold a success."""
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(i < c for i in subset) for subset in subsets), len(subsets))


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_share_of_k_subsets_holding_a_success(args):
    n, c, k = args
    assert pass_at_k(n, c, k) == float(brute_force_pass_at_k(n, c, k))


@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_is_monotone_in_k_and_pass_at_1_is_the_success_rate(args):
    n, c = args
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert values == sorted(values)
    assert values[0] == c / n
    assert values[-1] == (1.0 if c else 0.0)


@given(st.integers(1, 300))
def test_pass_at_k_sizes_are_the_powers_of_two_up_to_n_and_n(n):
    sizes = pass_at_k_sizes(n)
    assert sizes == sorted(set(sizes)) and sizes[-1] == n
    assert set(sizes) == {2**i for i in range(9) if 2**i <= n} | {n}


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match=r"`k` must be in \[1, n=4\], got 5"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match=r"`c` must be in \[0, n=4\], got 5"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="`num_samples` must be an integer >= 1"):
        pass_at_k_sizes(0)


def test_mean_pass_at_k_averages_problems_and_leaves_out_those_with_too_few_samples():
    # (4, 1): pass@2 = 1 - C(3,2)/C(4,2) = 1/2; (4, 0): 0; (1, 1): too few samples for k = 2.
    means = mean_pass_at_k([(4, 1), (4, 0), (1, 1)], [1, 2, 4])
    assert means["pass@1"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert means["pass@2"] == pytest.approx(0.25) and means["pass@4"] == pytest.approx(0.5)
    assert mean_pass_at_k([(1, 1)], [2]) == {}


def test_wilson_interval_matches_published_values_and_its_ends_are_exact():
    # 50 of 100: (0.4038, 0.5962), the textbook example; 0 of 10 and 20 of 20: closed forms n/(n + z^2).
    assert wilson_interval(0.5, 100) == pytest.approx((0.403832, 0.596168), abs=1e-6)
    z2 = 1.959963984540054**2
    assert wilson_interval(0.0, 10) == (0.0, pytest.approx(z2 / (10 + z2)))
    assert wilson_interval(1.0, 20) == (pytest.approx(20 / (20 + z2)), 1.0)
    assert wilson_interval(1.0, 164)[0] == pytest.approx(0.97711, abs=1e-5)
    with pytest.raises(ValueError, match="`n` must be an integer >= 1"):
        wilson_interval(0.5, 0)
    with pytest.raises(ValueError, match=r"`proportion` must be in \[0, 1\]"):
        wilson_interval(1.5, 3)


@given(st.integers(1, 500).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_wilson_interval_holds_the_proportion_and_narrows_with_more_problems(args):
    n, successes = args
    low, high = wilson_interval(successes / n, n)
    assert 0.0 <= low <= successes / n <= high <= 1.0
    low4, high4 = wilson_interval(successes / n, 4 * n)
    assert high4 - low4 < high - low


def test_wilson_intervals_cover_the_true_rate_about_95_percent_of_the_time():
    rng = random.Random(0)
    for rate, n in ((0.3, 40), (0.05, 164), (0.9, 60)):
        covered = 0
        for _ in range(2000):
            successes = sum(rng.random() < rate for _ in range(n))
            low, high = wilson_interval(successes / n, n)
            covered += low <= rate <= high
        assert 0.92 <= covered / 2000 <= 0.99, (rate, n, covered)


def test_pass_at_k_intervals_are_wilson_intervals_of_the_means():
    counts = [(4, 1), (4, 0), (4, 4), (2, 1)]
    intervals = pass_at_k_intervals(counts, [1, 4])
    means = mean_pass_at_k(counts, [1, 4])
    assert intervals["pass@1"] == pytest.approx(list(wilson_interval(means["pass@1"], 4)))
    assert intervals["pass@4"] == pytest.approx(list(wilson_interval(means["pass@4"], 3)))  # (2, 1) has too few


def test_eval_metrics_report_problems_and_pass_at_k_from_the_outcomes():
    def outcome(problem, trajectory, success, dropped=False):
        return ProblemOutcome(problem, trajectory, success, True, 1, float(success), dropped)

    outcomes = [outcome(7, t, t == 0) for t in range(4)] + [outcome(9, t, t < 3) for t in range(4)]
    outcomes.append(outcome(11, 0, True, dropped=True))  # a dropped trajectory counts nowhere
    result = EvalResult(4 / 8, {7: 0.25, 9: 0.75}, 8, 1, 1.0, outcomes)
    metrics = eval_metrics(result)
    assert metrics["success_rate"] == 0.5 and metrics["num_problems"] == 2.0 and metrics["dropped"] == 1.0
    expected = {k: (1 - math.comb(3, k) / math.comb(4, k) + 1 - math.comb(1, k) / math.comb(4, k)) / 2 for k in (1, 2, 4)}
    assert {k: metrics[f"pass@{k}"] for k in (1, 2, 4)} == pytest.approx(expected)
    assert metrics["pass@1"] == metrics["success_rate"]
    single = EvalResult(1.0, {7: 1.0}, 1, 0, 0.0, [outcome(7, 0, True)])
    assert not [k for k in eval_metrics(single) if k.startswith("pass@")]


def test_the_summary_line_states_every_setting():
    report = {
        "metrics": {"success_rate": 0.25, "pass@1": 0.25, "pass@2": 0.375, "greedy_success_rate": 0.5, "dropped": 2.0},
        "seeds": [10, 11], "num_samples": 2, "temperature": 0.7, "policy": "runs/x/policies",
    }
    assert eval_summary(report) == (
        "success 0.250 on 1 held-out instance (seeds 10..10) x 2 samples at temperature 0.7 | pass@2 0.375 | "
        "greedy success 0.500 | 2 trajectories dropped (infrastructure failures) | policy runs/x/policies"
    )


# ---- scripted policies: no model -----------------------------------------------------------------------


def scripted_eval(capsys, tmp_path, policy, *extra):
    """``pettingllms eval plan_path/L1 --policy POLICY`` with a model that does not exist: (code, report, out, err)."""
    code = main([
        "eval", "plan_path/L1", "--policy", policy, "model.name=/nonexistent/model", f"run.output_dir={tmp_path}",
        "eval.num_instances=20", *extra,
    ])
    out, err = capsys.readouterr()
    report_file = tmp_path / "eval_results.json"
    return code, json.loads(report_file.read_text()) if code == 0 else None, out, err


def test_the_oracle_solves_every_held_out_instance_without_loading_a_model(capsys, tmp_path):
    code, report, out, err = scripted_eval(capsys, tmp_path, "oracle", "--no-progress")
    assert code == 0, err
    assert report["metrics"]["success_rate"] == 1.0 and report["metrics"]["num_problems"] == 20.0
    assert report["per_problem"] == {str(seed): 1.0 for seed in range(1_000_000, 1_000_020)}
    assert report["policy"] == "scripted:oracle" and report["config"] == "plan_path/L1"
    assert (report["seeds"], report["num_samples"], report["temperature"]) == ([1_000_000, 1_000_020], 1, 0.0)
    assert out == (
        "success 1.000 on 20 held-out instances (seeds 1000000..1000019) x 1 sample, greedy | 95% interval "
        "0.839..1.000 | policy scripted:oracle"
        f" | report {tmp_path / 'eval_results.json'}\n"
    )
    assert err == ""  # --no-progress


def test_random_play_scores_far_below_the_oracle_and_reports_pass_at_k(capsys, tmp_path):
    code, report, out, _ = scripted_eval(capsys, tmp_path, "scripted:random", "eval.num_samples=4", "eval.temperature=1.0", "--no-progress")
    assert code == 0
    metrics = report["metrics"]
    assert metrics["success_rate"] <= 0.3
    # pass@k recomputed from the per-instance rates (4 samples each, none dropped)
    counts = [(4, round(rate * 4)) for rate in report["per_problem"].values()]
    for k in (1, 2, 4):
        assert metrics[f"pass@{k}"] == pytest.approx(sum(pass_at_k(n, c, k) for n, c in counts) / len(counts))
    assert metrics["pass@1"] == pytest.approx(metrics["success_rate"])
    low, high = report["confidence_intervals"]["pass@1"]
    assert (low, high) == pytest.approx(list(wilson_interval(metrics["success_rate"], 20)))
    assert report["confidence_intervals"]["pass@4"] == pytest.approx(list(wilson_interval(metrics["pass@4"], 20)))
    assert (f"x 4 samples at temperature 1.0 | 95% interval {low:.3f}..{high:.3f} | pass@4 {metrics['pass@4']:.3f} | "
            "policy scripted:random") in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan_path/L1", "--policy", "scripted:genius"],
         "PlanPathEnv declares no scripted policy 'genius' in `scripted_policies`, which `pettingllms eval --policy "
         "scripted:genius` needs; it declares: ['oracle', 'random']"),
        (["plan_path/L1", "--policy", "runs/x/policies"], "saved policies are evaluated with --checkpoint DIR"),
        (["--policy", "oracle"], "`--policy oracle` needs a CONFIG"),
        (["plan_path/L1"], "give exactly one of --checkpoint DIR"),
        (["plan_path/L1", "--policy", "oracle", "--checkpoint", "runs/x"], "; not both"),
    ],
    ids=["unknown-scripted", "not-a-scripted-name", "no-config", "neither", "both"],
)
def test_bad_policy_choices_exit_2_with_one_line(argv, message, capsys):
    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("pettingllms: error: ") and err.count("\n") == 1


def test_progress_shows_on_stderr_and_changes_no_result(capsys):
    config = load_config("plan_path/L1", ["eval.num_instances=6", "eval.num_samples=3", "eval.temperature=1.0"])
    quiet = held_out_evaluations(scripted_router(config, "random"), config)["sampled"]
    assert capsys.readouterr().err == ""
    shown = held_out_evaluations(scripted_router(config, "random"), config, progress=True)["sampled"]
    err = capsys.readouterr().err
    assert "eval" in err and "18/18" in err and "traj" in err
    assert (shown.success_rate, shown.per_problem) == (quiet.success_rate, quiet.per_problem)


def test_the_progress_hook_sees_every_trajectory_finish():
    from pettingllms.execution import EngineConfig, RolloutEngine

    config = load_config("plan_path/L1")
    engine = RolloutEngine.from_registry(
        "plan_path", {"turn_order": ["tool", "plan"], "max_turns": 3}, scripted_router(config, "random"),
        EngineConfig(num_generations=1, sampling_mode="independent"),
    )
    calls = []
    result = engine.evaluate([3, 4, 5], num_samples=2, temperature=1.0, on_progress=lambda done, total: calls.append((len(done), total)))
    assert calls[-1] == (6, 6) and all(total == 6 for _, total in calls)
    assert [n for n, _ in calls] == sorted(n for n, _ in calls)  # finished counts only grow
    assert result.success_rate == engine.evaluate([3, 4, 5], num_samples=2, temperature=1.0).success_rate


# ---- checkpoints ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tiny_model_path, tmp_path_factory):
    """A finished tiny run (warm start, eval) and what its pipeline wrote."""
    run_dir = tmp_path_factory.mktemp("eval-contract") / "run"
    argv = ["train", "plan_path/L1", f"model.name={tiny_model_path}", f"run.output_dir={run_dir}", *TINY_RUN]
    assert main([*argv, "--no-progress"]) == 0
    return run_dir, json.loads((run_dir / "eval" / "eval.json").read_text())


def test_the_eval_stage_reports_problems_pass_at_k_and_its_settings(tiny_run):
    run_dir, stage = tiny_run
    assert stage["metrics"]["num_problems"] == 3.0 and "pass@2" in stage["metrics"]
    assert stage["policy"] == str(run_dir / "sft" / "policies")
    assert stage["config"] == str(run_dir / "config.yaml")
    assert (stage["seeds"], stage["num_samples"], stage["temperature"], stage["run_seed"]) == ([1000000, 1000003], 2, 1.0, 0)
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert state["completed"][-1]["metrics"] == stage["metrics"]


def test_a_run_folder_alone_reproduces_the_runs_own_eval(tiny_run, tmp_path, capsys):
    run_dir, stage = tiny_run
    assert main(["eval", "--checkpoint", str(run_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    report = json.loads((run_dir / "eval_results.json").read_text())
    assert report["metrics"] == stage["metrics"] and report["per_problem"] == stage["per_problem"]
    assert report["config"] == str(run_dir / "config.yaml") and report["policy"] == str(run_dir / "policies")
    rate = stage["metrics"]["success_rate"]
    assert out.startswith(f"success {rate:.3f} on 3 held-out instances (seeds 1000000..1000002) x 2 samples at temperature 1.0 |")
    assert out.rstrip().endswith(f"| policy {run_dir / 'policies'} | report {run_dir / 'eval_results.json'}")
    # the comparison can fail: other sampling seeds sample other answers
    assert 0 < stage["metrics"]["agent/plan/parse_error_rate"] < 1
    other = tmp_path / "other.json"
    assert main(["eval", "--checkpoint", str(run_dir), "run.seed=1", "--output", str(other), "--no-progress"]) == 0
    assert json.loads(other.read_text())["metrics"] != stage["metrics"]


def test_a_folder_inside_a_run_uses_the_run_config_with_overrides_on_top(tiny_run, tmp_path):
    run_dir, stage = tiny_run
    output = tmp_path / "more.json"
    argv = ["eval", "--checkpoint", str(run_dir / "sft" / "policies"), "eval.num_instances=4", "--output", str(output)]
    assert main([*argv, "--no-progress"]) == 0
    report = json.loads(output.read_text())
    assert report["seeds"] == [1000000, 1000004] and report["num_samples"] == 2
    assert {k: report["per_problem"][k] for k in stage["per_problem"]} == stage["per_problem"]  # same first 3


def test_a_policies_folder_outside_a_run_needs_the_config_and_never_gets_the_report(tiny_run, tiny_model_path, tmp_path, capsys):
    run_dir, stage = tiny_run
    bare = tmp_path / "bare"
    shutil.copytree(run_dir / "policies", bare)
    assert main(["eval", "--checkpoint", str(bare)]) == 2
    assert "is not in a run folder" in capsys.readouterr().err
    out_dir = tmp_path / "reports"
    argv = ["eval", "plan_path/L1", "--checkpoint", str(bare), f"model.name={tiny_model_path}", f"run.output_dir={out_dir}", *TINY_RUN]
    assert main([*argv, "--no-progress"]) == 0
    assert json.loads((out_dir / "eval_results.json").read_text())["metrics"] == stage["metrics"]
    assert not (bare / "eval_results.json").exists()


@pytest.mark.parametrize(
    ("config", "extra", "message"),
    [
        ("sokoban/L1", [], "`env.name` is 'sokoban' in sokoban/L1 but 'plan_path' in the run"),
        ("plan_path/L2", ["env.max_turns=1"], "`policy.level` is 'L2' in plan_path/L2 but 'L1' in the run"),
        ("plan_path/L1", [], "`env.max_turns` is 3 in plan_path/L1 but 1 in the run"),
    ],
    ids=["environment", "level", "env-setting"],
)
def test_a_config_that_does_not_match_the_run_exits_2_naming_both_values(tiny_run, config, extra, message, capsys):
    run_dir, _ = tiny_run
    assert main(["eval", config, "--checkpoint", str(run_dir), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_saved_policies_of_another_level_or_roles_exit_2(tiny_run, tmp_path, capsys):
    run_dir, _ = tiny_run
    bare = tmp_path / "bare"
    shutil.copytree(run_dir / "policies", bare)
    assert main(["eval", "plan_path/L0", "--checkpoint", str(bare)]) == 2
    assert f"`policy.level` is L0 in plan_path/L0 but the checkpoint {bare} holds an L1 policy" in capsys.readouterr().err
    assert main(["eval", "plan_path/L1", "--checkpoint", str(bare), "env.turn_order=[plan, tool]"]) == 2
    assert "holds agents ['tool', 'plan'] but plan_path/L1 plays the roles ['plan', 'tool']" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["missing", "empty", "file"])
def test_a_checkpoint_that_is_not_saved_policies_exits_2_with_one_line(case, tmp_path, capsys):
    path = tmp_path / "nowhere"
    if case == "empty":
        path.mkdir()
    elif case == "file":
        path.write_text("x")
    assert main(["eval", "plan_path/L1", "--checkpoint", str(path)]) == 2
    err = capsys.readouterr().err
    expected = {"missing": "does not exist", "empty": "holds no saved policies", "file": "is a file"}[case]
    assert f"`--checkpoint` {path} {expected}" in err and err.count("\n") == 1


def test_a_run_folder_without_final_policies_names_the_saved_ones(tiny_run, tmp_path, capsys):
    run_dir, _ = tiny_run
    partial = tmp_path / "partial"
    shutil.copytree(run_dir, partial, ignore=lambda folder, names: ["policies"] if Path(folder) == run_dir else [])
    assert main(["eval", "--checkpoint", str(partial)]) == 2
    assert f"saved policies under it: {partial / 'sft' / 'policies'}" in capsys.readouterr().err


def test_the_installed_command_reports_a_bad_checkpoint_in_one_line(tmp_path):
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "pettingllms"), "eval", "--checkpoint", str(tmp_path / "nowhere")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"pettingllms: error: `--checkpoint` {tmp_path / 'nowhere'} does not exist\n"
