"""Whole pipelines as data-parallel jobs: ``pettingllms train`` under ``accelerate launch --multi_gpu
--num_processes 2`` (gloo on CPU) against the same pipeline in one process, and the stages that have no
data-parallel mode refused before a run starts.

One launch runs ``data_parallel_pipeline_job.py`` (read its docstring): the tiny pipeline (sft ->
eval_before -> at_grpo -> eval) uninterrupted, and again interrupted after AT-GRPO's first step and
resumed. The one-process reference runs in this process. Compared, with the tolerances of
``test_data_parallel.py`` (weights ``ATOL``, logged metrics a relative 1e-6, per-micro-batch update
diagnostics 1e-5; the job's config says why the runs are comparable at these): what rank 0 prints (rank 1 prints nothing), every ``metrics.jsonl`` (timings and
``generate_calls`` aside), the ``eval.json`` reports, the saved policies, and the run folders' file lists
(one ``config.yaml``, one ``pipeline_state.json``, one record per stage and step); an audit hook on rank 1
shows it wrote nothing in the run folders.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pettingllms.config import ConfigError, load_config
from pettingllms.pipeline import Pipeline, check_pipeline
from tests.helpers.two_ranks import launch_two_ranks
from tests.pettingllms import data_parallel_pipeline_job as job
from tests.pettingllms.test_data_parallel import ATOL, is_update_metric

JOB = Path(__file__).with_name("data_parallel_pipeline_job.py")
POLICY_FOLDERS = ("sft/policies", "at_grpo/policies", "policies")
STAGE_METRICS = ("metrics.jsonl", "sft/metrics.jsonl", "at_grpo/metrics.jsonl", "eval_before/metrics.jsonl",
                 "eval/metrics.jsonl")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank folder, what the one-process run printed)``."""
    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    root = tmp_path_factory.mktemp("data-parallel-pipeline")
    one, two = root / "one", root / "two"
    two.mkdir()
    launch_two_ranks(JOB, [tiny_model_path, str(two)], timeout=240)

    overrides = job.arguments(tiny_model_path, one / "full")[2:]  # without `train plan_path/L1`
    threads, generate_and_score = torch.get_num_threads(), ATGRPOTrainer.generate_and_score
    out = io.StringIO()
    try:
        torch.set_num_threads(1)
        ATGRPOTrainer.generate_and_score = job.with_candidate_bonus(generate_and_score)
        Pipeline(load_config("plan_path/L1", overrides), out=out).run()
    finally:
        ATGRPOTrainer.generate_and_score = generate_and_score
        torch.set_num_threads(threads)
    return one, two, out.getvalue()


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "shared" / "model.safetensors"))


def files(run_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())


def assert_records_match(ours: list[dict], theirs: list[dict]) -> None:
    """The same records, numbers within the data-parallel tolerance (timings and generate_calls aside)."""
    assert len(ours) == len(theirs)
    for mine, other in zip(ours, theirs):
        keys = {k for k in mine if not k.startswith("time/") and k != "generate_calls"}
        assert keys == {k for k in other if not k.startswith("time/") and k != "generate_calls"}
        plain = {k for k in keys if not is_update_metric(k)}
        assert {k: other[k] for k in plain} == pytest.approx({k: mine[k] for k in plain}, rel=1e-6, abs=1e-9)
        update = keys - plain
        assert {k: other[k] for k in update} == pytest.approx({k: mine[k] for k in update}, rel=1e-5, abs=1e-7)


def without_paths(text: str, run_dir: Path) -> str:
    return text.replace(str(run_dir), "RUN").replace(" (data-parallel over 2 processes)", "")


@pytest.mark.slow
def test_rank_zero_prints_what_one_process_prints_and_rank_one_prints_nothing(runs):
    one, two, printed = runs
    mine = (two / "printed-full-rank0.txt").read_text()
    summary = [line for line in printed.splitlines() if line.startswith("success before")]
    assert len(summary) == 1 and mine.splitlines().count(summary[0]) == 1
    assert "(data-parallel over 2 processes)" in mine.splitlines()[1]
    assert without_paths(mine, two / "full") == without_paths(printed, one / "full")
    for name in ("full", "interrupted", "resumed"):
        assert (two / f"printed-{name}-rank1.txt").read_text() == ""
    resumed = (two / "printed-resumed-rank0.txt").read_text()
    assert "[1/4] sft: done (resumed run)" in resumed and resumed.splitlines().count(summary[0]) == 1
    results = [json.loads((two / f"result-rank{r}.json").read_text()) for r in (0, 1)]
    assert results[0]["codes"] == {"full": 0, "interrupted": 130, "resumed": 0}
    assert results[1] == results[0]  # every rank evaluated alone and got the same numbers


@pytest.mark.slow
@pytest.mark.parametrize("run", ["full", "resumed"])
def test_the_run_folder_holds_one_process_s_files_written_once_by_rank_zero(runs, run):
    one, two, _ = runs
    assert files(two / run) == files(one / "full")
    assert json.loads((two / "writes-rank1.json").read_text()) == []
    for name in STAGE_METRICS:  # one record per stage and step: nothing logged twice
        assert [r["step"] for r in records(two / run / name)] == [r["step"] for r in records(one / "full" / name)]
    state, reference = (json.loads((d / "pipeline_state.json").read_text()) for d in (two / run, one / "full"))
    assert [e["folder"] for e in state["completed"]] == [e["folder"] for e in reference["completed"]]
    assert_records_match([e["metrics"] for e in reference["completed"]], [e["metrics"] for e in state["completed"]])
    assert load_config(two / run / "config.yaml")["run"]["output_dir"] == str(two / run)


@pytest.mark.slow
def test_two_ranks_log_and_evaluate_as_one_process(runs):
    one, two, _ = runs
    for name in STAGE_METRICS:
        assert_records_match(records(one / "full" / name), records(two / "full" / name))
    steps = records(two / "full" / "at_grpo" / "metrics.jsonl")
    assert [r["frac_reward_zero_std"] for r in steps] == [0.0, 0.0]  # the bonus gives every group a gradient
    assert [r["generate_calls"] for r in steps] == [2 * r["generate_calls"] for r in records(one / "full" / "at_grpo" / "metrics.jsonl")]
    for folder in ("eval_before", "eval"):
        mine, theirs = (json.loads((d / folder / "eval.json").read_text()) for d in (one / "full", two / "full"))
        assert {k: v for k, v in theirs.items() if k not in ("policy", "config")} == {
            k: v for k, v in mine.items() if k not in ("policy", "config")
        }
        assert theirs["config"] == str(two / "full" / "config.yaml")


@pytest.mark.slow
def test_two_ranks_train_the_policies_one_process_trains(runs):
    one, two, _ = runs
    for folder in POLICY_FOLDERS:
        mine, theirs = weights(one / "full" / folder), weights(two / "full" / folder)
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert torch.allclose(mine[key], theirs[key], rtol=0, atol=ATOL), f"{folder} {key}"
    sft, trained = weights(one / "full" / "sft" / "policies"), weights(one / "full" / "policies")
    # AT-GRPO moved the weights by more than the tolerance: the comparison above sees the update
    assert max(float((trained[k] - sft[k]).abs().max()) for k in sft) > ATOL


@pytest.mark.slow
def test_a_data_parallel_pipeline_resumed_on_the_same_world_size_ends_as_the_uninterrupted_one(runs):
    _, two, _ = runs
    for folder in POLICY_FOLDERS:
        mine, theirs = weights(two / "full" / folder), weights(two / "resumed" / folder)
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]  # noqa: E731
    for name in ("at_grpo/metrics.jsonl", "eval/metrics.jsonl"):
        assert strip(records(two / "resumed" / name)) == strip(records(two / "full" / name))
    assert json.loads((two / "resumed" / "eval" / "eval.json").read_text())["metrics"] == json.loads(
        (two / "full" / "eval" / "eval.json").read_text()
    )["metrics"]


# ---- stages without a data-parallel mode (no launch: the world size is faked) -------------------------------

@pytest.mark.parametrize("stage", ["madpo", "marlhf"])
def test_a_stage_without_a_data_parallel_mode_is_refused_before_the_run_starts(stage, monkeypatch, tmp_path):
    from comlrl import distributed

    config = load_config("plan_path/L1", [f"pipeline=[sft, {stage}, eval]", "model.name=test-tiny",
                                          f"run.output_dir={tmp_path / 'run'}"])
    check_pipeline(config)  # one process: fine
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    message = (rf"stage `{stage}` has no data-parallel mode yet, and this run has world size 2 \(accelerate launch / "
               r"torchrun\): run a pipeline with it in one process, without the launcher")
    with pytest.raises(ConfigError, match=message):
        Pipeline(config)
    assert not (tmp_path / "run").exists()
    # the data-parallel stages pass the same check
    check_pipeline(load_config("plan_path/L1", ["pipeline=[sft, at_grpo, eval]", "model.name=test-tiny"]))


def test_the_ray_backend_under_a_launcher_is_refused(monkeypatch):
    from comlrl import distributed

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    config = load_config("plan_path/L1", ["run.backend=ray", "model.name=test-tiny"])
    with pytest.raises(ConfigError, match=r"`run.backend` is 'ray' but this run has world size 2"):
        check_pipeline(config)


def test_rank_zero_alone_prepares_the_folder_and_the_other_ranks_take_its_outcome(monkeypatch, tmp_path):
    from comlrl import distributed

    run_dir = tmp_path / "run"
    pipeline = Pipeline(load_config("plan_path/L1", ["model.name=test-tiny", f"run.output_dir={run_dir}"]))
    sent, outcome = [], [None]

    def gather(obj):  # rank `distributed.rank()`'s view of a 2-rank all-gather, rank 0 sending outcome[0]
        sent.append(obj)
        return [obj, None] if distributed.rank() == 0 else [outcome[0], obj]

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "gather_objects", gather)
    # rank 0: a folder that holds a run is refused, and the refusal goes to the other ranks
    run_dir.mkdir()
    state = {"format": "pettingllms-pipeline", "version": 1, "plan": [], "completed": [{"stage": "sft", "folder": "sft"}]}
    (run_dir / "pipeline_state.json").write_text(json.dumps(state))
    with pytest.raises(ConfigError, match=r"already holds a pipeline run") as refused:
        pipeline._prepare_on_main()
    assert sent == [("config", str(refused.value), None)]
    # rank 1: never touches the folder; raises rank 0's error, or takes its stages done and resume switch
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    monkeypatch.setattr(Pipeline, "_prepare", lambda self: pytest.fail("rank 1 prepared the run folder"))
    outcome[0] = sent[0]
    with pytest.raises(ConfigError, match=r"already holds a pipeline run"):
        pipeline._prepare_on_main()
    outcome[0] = ("failed", "OSError: no space left on device", None)
    with pytest.raises(RuntimeError, match=rf"rank 0 failed to prepare the run folder {run_dir}: OSError: no space"):
        pipeline._prepare_on_main()
    outcome[0] = ("done", state["completed"], True)
    assert pipeline._prepare_on_main() == state["completed"] and pipeline.resume is True
    assert sent[1:] == [None, None, None]  # rank 1 sends nothing
    assert sorted(p.name for p in run_dir.iterdir()) == ["pipeline_state.json"]
