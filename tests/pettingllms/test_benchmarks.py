"""Several evaluation benchmarks in one run (``eval.benchmarks``): what an entry may set and what it may not,
the configs each benchmark plays, ``eval_before``'s smaller count, the one-block-per-benchmark report and
its summary, and the contamination check on a planted overlap.

Data: the ``math_data_root`` fixture (conftest: every math fixture normalised) and, for the planted overlap,
a root of its own."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pettingllms.config import ConfigError, load_config, validate_config
from pettingllms.config.benchmarks import benchmark_configs, team_differences
from pettingllms.envs.math.data import read_jsonl, write_jsonl
from pettingllms.stages.contamination import check_contamination, contamination_report
from pettingllms.stages.eval import (
    EVAL_BEFORE_FOLDER,
    eval_plan,
    eval_summary,
    evaluate_benchmarks,
    scripted_router,
)

MATH_BENCHMARKS = ["eval.benchmarks={aime24: {dataset: aime24}, math500: {dataset: math500, num_instances: 2, "
                   "max_completion_length: 99}}"]


@pytest.fixture
def data(math_data_root, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", math_data_root)
    return Path(math_data_root)


def test_each_benchmark_plays_the_run_config_with_its_own_dataset_eval_and_generation_keys(data):
    config = load_config("math/gsm8k", ["env.data_dir=/somewhere/gsm8k", "env.level=Level 1", *MATH_BENCHMARKS])
    aime, math500 = benchmark_configs(config)
    assert (aime.name, math500.name) == ("aime24", "math500")
    # another dataset: its own folder and filters (the trained dataset's do not apply), the team unchanged
    assert aime.config["env"]["dataset"] == "aime24"
    assert aime.config["env"]["data_dir"] is None and aime.config["env"]["level"] is None
    assert aime.config["env"]["turn_order"] == config["env"]["turn_order"]
    assert aime.config["env"]["tool"] == "python" and aime.config["env"]["max_turns"] == config["env"]["max_turns"]
    assert math500.config["rollout"]["max_completion_length"] == 99
    assert aime.config["rollout"]["max_completion_length"] == config["rollout"]["max_completion_length"]
    assert math500.config["eval"]["num_instances"] == 2 and math500.config["eval"]["benchmarks"] == {}
    # without benchmarks: the run's own evaluation, unnamed
    (own,) = benchmark_configs(load_config("math/gsm8k"))
    assert own.name is None


@pytest.mark.parametrize(("entry", "pattern"), [
    ("{max_turns: 2}", r"`eval\.benchmarks\.b\.max_turns`: a benchmark plays the trained team, so `env\.max_turns` must "
                       r"be the run's .*may set num_instances, .*max_completion_length and the environment's evaluation "
                       r"fields \(.*dataset, .*split.*\)"),
    ("{tool: calculator}", r"`env\.tool` must be the run's"),
    ("{turn_order: [reasoning_generator]}", r"`env\.turn_order` must be the run's"),
    ("{datset: aime24}", r"unknown key `eval\.benchmarks\.b\.datset`; did you mean `eval\.benchmarks\.b\.dataset`\?"),
    ("[aime24]", r"`eval\.benchmarks\.b` must be a mapping of settings"),
])
def test_an_entry_that_changes_the_team_or_names_an_unknown_key_is_refused(data, entry, pattern):
    with pytest.raises(ConfigError, match=pattern):
        benchmark_configs(load_config("math/gsm8k", [f"eval.benchmarks={{b: {entry}}}"]))


def test_a_benchmark_past_its_split_or_missing_its_file_names_the_benchmark(data, tmp_path, monkeypatch):
    config = load_config("math/gsm8k", ["eval.benchmarks={aime24: {dataset: aime24, num_instances: 50}}"])
    with pytest.raises(ConfigError, match=r"`eval\.benchmarks\.aime24`: .*`eval\.seed_start` / `eval\.num_instances`"):
        validate_config(config)
    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path))
    with pytest.raises(ConfigError, match=r"`eval\.benchmarks\.aime24`: .*aime24"):
        eval_plan("eval", load_config("math/aime24", ["eval.benchmarks={aime24: {}}"]))


def test_eval_before_plays_at_most_before_training_instances_of_each_benchmark(data, tmp_path):
    config = load_config("math/gsm8k", ["eval.before_training_instances=2", *MATH_BENCHMARKS])
    full = {p.name: p.settings.num_instances for p in eval_plan("eval", config, tmp_path / "eval")}
    before = {p.name: p.settings.num_instances for p in eval_plan("eval", config, tmp_path / EVAL_BEFORE_FOLDER)}
    aime_count = len(read_jsonl(data / "math" / "aime24" / "test.jsonl"))
    assert full == {"aime24": aime_count, "math500": 2}
    assert before == {"aime24": min(2, aime_count), "math500": 2}
    with pytest.raises(ConfigError, match=r"`eval\.before_training_instances` must be an integer >= 1 or null, got 0"):
        eval_plan("eval", load_config("math/gsm8k", ["eval.before_training_instances=0"]))


def test_the_report_holds_a_block_per_benchmark_and_a_summary_line_each(data, tmp_path):
    config = load_config("math/gsm8k", [*MATH_BENCHMARKS, "eval.transcripts_rate=1.0", "env.tool=calculator"])
    plan = eval_plan("eval", config)
    metrics, report = evaluate_benchmarks(scripted_router(config, "oracle"), plan, policy_name="scripted:oracle",
                                          transcripts_dir=tmp_path)
    assert list(report["benchmarks"]) == ["aime24", "math500"] and report["headline"] == "aime24"
    aime_count = len(read_jsonl(data / "math" / "aime24" / "test.jsonl"))
    for name, count in (("aime24", aime_count), ("math500", 2)):
        block = report["benchmarks"][name]
        assert block["metrics"]["num_problems"] == count and block["seeds"] == [0, count]
        assert block["metrics"]["success_rate"] == 1.0  # the oracle answers every problem
        assert set(block["confidence_intervals"]) >= {"level", "pass@1"} and len(block["per_problem"]) == count
        assert block["env"] == f"math/{name}:test"
        assert metrics[f"{name}/success_rate"] == 1.0
        assert Path(block["transcripts"]) == tmp_path / name / "rollouts.jsonl"
    assert metrics["success_rate"] == report["benchmarks"]["aime24"]["metrics"]["success_rate"]
    json.dumps(report)
    lines = eval_summary(report).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"aime24 (math/aime24:test): success 1.000 on {aime_count} held-out instances")
    assert lines[1].startswith("math500 (math/math500:test): success 1.000 on 2 held-out instances")
    assert lines[1].endswith("| policy scripted:oracle")


def test_team_differences_ignore_the_evaluation_fields(data):
    trained = load_config("math/gsm8k")
    other = load_config("math/aime24")  # another dataset, split, folder, generation length: all evaluation's
    assert team_differences(other, trained) == []
    assert team_differences(load_config("math/aime24", ["env.max_turns=5", "env.tool=calculator"]), trained) == [
        "max_turns", "tool"]


def _planted_root(root: Path, data: Path, plant: bool) -> Path:
    """A data root with DAPO as training data and AIME 2024 to evaluate, one AIME statement planted (reworded
    only in case and spacing, under a DAPO id) into the training split when ``plant``."""
    train = read_jsonl(data / "math" / "dapo" / "test.jsonl")
    aime = read_jsonl(data / "math" / "aime24" / "test.jsonl")
    if plant:
        copied = dataclasses.replace(train[0], problem_id="dapo/planted", question=f"  {aime[1].question.upper()} ")
        train = [*train, copied]
    write_jsonl(root / "math" / "dapo" / "train.jsonl", [dataclasses.replace(p, split="train") for p in train])
    write_jsonl(root / "math" / "aime24" / "test.jsonl", aime)
    return root


def test_the_contamination_check_refuses_a_planted_overlap_unless_allowed(data, tmp_path, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", str(_planted_root(tmp_path / "clean", data, plant=False)))
    overrides = ["at_grpo.problems_per_step=2", "eval.benchmarks={aime24: {dataset: aime24}}"]
    clean = contamination_report(load_config("math/train_dapo", overrides))
    assert clean["checked"] and clean["total_overlapping"] == 0 and clean["sets"]["aime24"]["eval_problems"] > 0
    monkeypatch.setenv("PETTINGLLMS_DATA", str(_planted_root(tmp_path / "planted", data, plant=True)))
    aime = read_jsonl(data / "math" / "aime24" / "test.jsonl")
    with pytest.raises(ConfigError, match=rf"`eval\.allow_contamination` is false, but .*aime24.*dapo/planted.*"
                                          rf"{aime[1].problem_id}.*eval\.allow_contamination=true"):
        check_contamination(load_config("math/train_dapo", overrides))
    allowed = check_contamination(load_config("math/train_dapo", [*overrides, "eval.allow_contamination=true"]))
    assert allowed["total_overlapping"] == 1 and allowed["sets"]["aime24"]["exact"] == 1
    # nothing trains: nothing to compare
    assert contamination_report(load_config("math/aime24")) is None


def test_generated_tasks_say_the_check_does_not_apply():
    report = contamination_report(load_config("math/arith", ["model.name=test-tiny"]))
    assert report == {"checked": False, "reason": "the math training instances are generated from their seeds: no "
                                                  "statements to compare"}
