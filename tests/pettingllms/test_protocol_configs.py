"""The shipped protocol configs (train on one dataset, evaluate on several) run end to end on the fixtures.

Each test normalises the public-schema fixtures with `pettingllms dataprocess`'s functions into a
``$PETTINGLLMS_DATA`` root, as a user would with real files, and runs the shipped config with the
``test-tiny`` preset, one training step and two instances per benchmark. The report must hold a block per
benchmark of the config, and ``contamination.json`` the comparison of the training statements with each.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pettingllms.config import ConfigError, load_config
from pettingllms.pipeline import Pipeline
from pettingllms.scripts.dataprocess import write_code_split, write_math_split
from tests.helpers.search_data import write_search_root

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CODE_SOURCES = {  # dataset -> {split: fixture file}
    "apps": {"train": "apps/train.jsonl", "test": "apps/test.jsonl"},
    "codecontests": {"train": "codecontests/train.jsonl", "test": "codecontests/test.jsonl"},
    "livecodebench": {"test": "livecodebench/test.jsonl"},
}
MATH_SOURCES = {
    "dapo": {"train": "dapo/dapo-math-17k.jsonl"}, "polaris": {"train": "polaris/polaris-data-53K.jsonl"},
    "aime24": {"test": "aime24/aime_2024_problems.jsonl"}, "aime25": {"test": "aime25/aime2025-I.jsonl"},
    "math500": {"test": "math500/test.jsonl"},
    "olympiadbench": {"test": "olympiadbench/OE_TO_maths_en_COMP/train-00000-of-00001.jsonl"},
}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("protocol-data")
    for dataset, splits in CODE_SOURCES.items():
        for split, name in splits.items():
            write_code_split(dataset, FIXTURES / "code" / name, split, output=root / "code" / dataset)
    for dataset, splits in MATH_SOURCES.items():
        for split, name in splits.items():
            write_math_split(dataset, FIXTURES / "math" / name, split, output=root / "math" / dataset)
    return write_search_root(root)


def _overrides(config_name: str, run_dir: Path) -> list[str]:
    config = load_config(config_name)
    small = [
        "model.name=test-tiny", f"run.output_dir={run_dir}", "run.progress=false", "run.report_to=none",
        "rollout.max_completion_length=8", "rollout.num_generations=2", "env.max_turns=1",
        "at_grpo.max_steps=1", "at_grpo.problems_per_step=2", "at_grpo.per_device_train_batch_size=2",
        "at_grpo.save_steps=0", "sft.num_problems=2", "sft.per_device_train_batch_size=2", "eval.before_training_instances=1",
    ]
    for name in config["eval"]["benchmarks"]:
        small += [f"eval.benchmarks.{name}.num_instances=2", f"eval.benchmarks.{name}.max_completion_length=8"]
    return small


# The CodeContests train fixture and the LiveCodeBench one share statements word for word (invented copies of
# the same easy problems, as the real sets share Codeforces / AtCoder problems): that run must be allowed.
OVERLAPPING = {"code/train_codecontests": "livecodebench"}


@pytest.fixture(scope="module")
def protocol_run(data_root, tiny_model_path, tmp_path_factory):
    """``run(config name) -> (config, PipelineResult, printed)``, each config run once per module."""
    runs: dict[str, tuple] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PETTINGLLMS_DATA", str(data_root))

        def run(config_name: str) -> tuple:
            if config_name not in runs:
                overrides = _overrides(config_name, tmp_path_factory.mktemp("run") / "run")
                overlapping = OVERLAPPING.get(config_name)
                if overlapping is not None:
                    with pytest.raises(ConfigError, match=rf"`eval\.allow_contamination` is false, but \d+ of 2 "
                                                          rf"{overlapping} problems overlap the \d+ training problems "
                                                          r"\(exact: codecontests/"):
                        Pipeline(load_config(config_name, overrides))
                    overrides.append("eval.allow_contamination=true")
                config = load_config(config_name, overrides)
                out = io.StringIO()
                runs[config_name] = (config, Pipeline(config, out=out, plots=False).run(), out.getvalue())
            return runs[config_name]

        yield run


@pytest.mark.parametrize("config_name", [
    "code/train_apps", "code/train_codecontests", "math/train_dapo", "math/train_polaris", "search/train_hotpotqa",
])
def test_a_protocol_config_trains_on_one_dataset_and_reports_every_benchmark(config_name, protocol_run):
    config, result, printed = protocol_run(config_name)
    names = list(config["eval"]["benchmarks"])
    assert len(names) >= 3
    assert result.stages["at_grpo"]["steps"] == 1.0  # it trained: one AT-GRPO step on the train split
    assert list(result.stages) == [folder for _, folder in Pipeline(config).plan]
    report = json.loads((result.run_dir / "eval" / "eval.json").read_text())
    assert list(report["benchmarks"]) == names and report["headline"] == names[0]
    for name in names:
        block = report["benchmarks"][name]
        assert block["metrics"]["num_problems"] == 2 and len(block["per_problem"]) == 2
        dataset = config["eval"]["benchmarks"][name].get("dataset", config["env"]["dataset"])
        assert block["env"].startswith(f"{config['env']['name']}/{dataset}:")
        assert 0.0 <= block["metrics"]["success_rate"] <= 1.0
    before = json.loads((result.run_dir / "eval_before" / "eval.json").read_text())
    assert [b["metrics"]["num_problems"] for b in before["benchmarks"].values()] == [1] * len(names)
    contamination = json.loads((result.run_dir / "contamination.json").read_text())
    assert contamination["checked"] and sorted(contamination["sets"]) == sorted(names)
    overlapping = OVERLAPPING.get(config_name)
    overlaps = {name for name, counts in contamination["sets"].items() if counts["overlapping"]}
    assert overlaps == ({overlapping} if overlapping else set())
    for name in names:
        assert f"{name}: success before " in printed


def test_a_finished_run_is_evaluated_again_on_its_benchmarks_or_on_another_config(protocol_run, data_root, tmp_path,
                                                                                  monkeypatch):
    from pettingllms.scripts.evaluate import evaluate
    from pettingllms.scripts.guard import UsageError

    monkeypatch.setenv("PETTINGLLMS_DATA", str(data_root))
    config, result, _ = protocol_run("code/train_apps")
    again = evaluate(checkpoint=result.run_dir, output=tmp_path / "again.json", overrides=["run.progress=false"])
    first = json.loads((result.run_dir / "eval" / "eval.json").read_text())
    assert list(again["benchmarks"]) == list(first["benchmarks"])
    assert {n: b["per_problem"] for n, b in again["benchmarks"].items()} == {
        n: b["per_problem"] for n, b in first["benchmarks"].items()}  # greedy: the same results
    # another config's benchmark: the team trained on APPS, evaluated on HumanEval (dataset, split, folder differ)
    humaneval = evaluate("code/humaneval", checkpoint=result.run_dir, output=tmp_path / "he.json",
                         overrides=["eval.num_instances=2", "run.progress=false", "rollout.max_completion_length=8",
                                    "env.max_turns=1"])
    assert humaneval["metrics"]["num_problems"] == 2 and humaneval["config"] == "code/humaneval"
    # a config whose team differs from the run's is refused, naming the key and what may differ
    changed = tmp_path / "changed.yaml"
    changed.write_text((result.run_dir / "config.yaml").read_text().replace("terminate_on: generated_tests",
                                                                            "terminate_on: turns"))
    with pytest.raises(UsageError, match=r"`env\.terminate_on` is 'turns' in .*changed\.yaml but 'generated_tests' in "
                                         r"the run .*: it is the trained team's .*may set .*dataset, split"):
        evaluate(changed, checkpoint=result.run_dir, output=tmp_path / "x.json")
