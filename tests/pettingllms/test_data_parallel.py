"""Data-parallel AT-GRPO, GRPO and SFT (:mod:`comlrl.distributed`, :mod:`pettingllms.trainer.step_view`): two ranks under
``accelerate launch --multi_gpu --num_processes 2`` (gloo on CPU) against one process over the same global
batch.

One launch runs every scenario of ``data_parallel_job.py`` (read its docstring); the one-process runs go
in this process. Compared:

- final weights within ``ATOL`` (see below), and every logged metric within a relative ``1e-6`` (success,
  rewards, counts, per-agent and per-policy metrics, the global gradient norm), the per-micro-batch update
  diagnostics (loss, entropy, approx_kl, ...: float32 over differently cut micro-batches) within ``1e-5``
  relative or ``1e-7`` absolute, except the timings and ``generate_calls`` (each rank makes its own calls
  per decision point: twice one process's);
- the two ranks end with bitwise equal weights (the summed gradient is the same on both), also when their
  shards hold different numbers of optimizer steps' rows (``uneven``);
- files come from rank 0 alone (one ``metrics.jsonl`` line per step, the transcripts one process writes);
  a checkpoint records the world size, resuming it on 2 ranks continues exactly, in one process it is an
  error naming both sizes.

``ATOL = 1e-3``: the data-parallel gradient equals one process's up to float summation order (relative
~1e-7), but AdamW's first step divides each gradient entry by its magnitude plus ``eps = 1e-8``, so an
entry near 1e-8 whose last bits differ moves by up to a fraction of the learning rate (1e-2); measured:
at most 1e-4. The gradient norm, compared at 1e-6, holds the sum-versus-mean check AdamW's scale
invariance would hide.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from comlrl.checkpoint import read_trainer_state
from tests.helpers.two_ranks import in_this_process, launch_two_ranks
from tests.pettingllms import data_parallel_job as job

pytestmark = pytest.mark.slow

ATOL = 1e-3
COMPARED = ["l1_tree", "l3_tree", "l1_grpo", "sft"]
SCENARIOS = ["l1_tree", "l1_resume", "l3_tree", "l1_grpo", "uneven", "sft"]
JOB = Path(__file__).with_name("data_parallel_job.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank folder)``, each holding a folder per scenario."""
    root = tmp_path_factory.mktemp("data-parallel")
    one, two = root / "one", root / "two"
    launch_two_ranks(JOB, [tiny_model_path, str(two), *SCENARIOS], timeout=240)
    in_this_process(job.main, [tiny_model_path, str(one), *COMPARED])
    return one, two


def weights(folder: Path, rank: int = 0) -> dict[str, list[torch.Tensor]]:
    return torch.load(folder / f"weights-rank{rank}.pt")


def history(folder: Path, rank: int = 0) -> list[dict]:
    """The run's returned records without timings (each rank times its own work)."""
    records = json.loads((folder / f"history-rank{rank}.json").read_text())
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


# Per-micro-batch update diagnostics: float32 sums over differently cut micro-batches.
UPDATE_METRICS = ("loss", "entropy", "approx_kl", "ratio_mean", "clip_ratio/", "kl", "staleness_mean")


def is_update_metric(key: str) -> bool:
    return key.startswith("policy/") and key.split("/", 2)[2].startswith(UPDATE_METRICS)


def assert_same_weights(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert len(a[name]) == len(b[name])
        for x, y in zip(a[name], b[name]):
            assert torch.allclose(x, y, rtol=0, atol=atol), f"policy {name!r}: max diff {(x - y).abs().max()}"


@pytest.mark.parametrize("scenario", COMPARED)
def test_two_ranks_train_as_one_process_over_the_same_global_batch(runs, scenario, tiny_model_path):
    one, two = runs
    assert_same_weights(weights(one / scenario), weights(two / scenario), ATOL)
    moved = weights(one / scenario)
    start = [p.detach() for p in job.sft_policy(tiny_model_path).trainable_parameters("shared")]  # all start so
    for name in moved:  # the tolerance is far below what training moved
        assert max(float((a - b).abs().max()) for a, b in zip(moved[name], start)) > 10 * ATOL
    ours, theirs = history(one / scenario), history(two / scenario)
    assert len(ours) == len(theirs) == (1 if scenario == "sft" else 2)
    for mine, other in zip(ours, theirs):
        assert mine.keys() == other.keys()
        keys = {k for k in mine if k != "generate_calls" and not is_update_metric(k)}
        assert scenario == "sft" or len(keys) > 40  # run, agent, (agent, turn) and policy metrics, the gradient norm included
        assert {k: other[k] for k in keys} == pytest.approx({k: mine[k] for k in keys}, rel=1e-6, abs=1e-9)
        update = {k for k in mine if is_update_metric(k)}
        assert {k: other[k] for k in update} == pytest.approx({k: mine[k] for k in update}, rel=1e-5, abs=1e-7)
        if scenario != "sft":
            assert other["generate_calls"] == 2 * mine["generate_calls"]
            assert mine["frac_reward_zero_std"] == 0.0  # the bonus gives every group a gradient
    if scenario != "sft":
        assert [r["policy/" + n + "/optimizer_steps"] for r in theirs for n in moved] == [1.0] * 2 * len(moved)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_ranks_end_with_the_same_weights_and_history(runs, scenario):
    _, two = runs
    assert_same_weights(weights(two / scenario, 0), weights(two / scenario, 1), atol=0)
    assert history(two / scenario, 0) == history(two / scenario, 1)


def test_the_uneven_shards_make_the_same_optimizer_steps_on_both_ranks(runs):
    _, two = runs
    # 3 problems: rank 0 rolls out 1, rank 1 two; in micro-batches of 4 rows, one per optimizer step,
    # rank 0 holds fewer steps' rows and joins rank 1's extra steps with zero gradients.
    # One process would make 6 steps over the 24 rows; the ranks make max(2, 4).
    records = history(two / "uneven")
    assert [r["num_samples"] for r in records] == [24.0, 24.0]
    assert [r["policy/shared/optimizer_steps"] for r in records] == [4.0, 4.0]
    assert [r["policy/shared/skipped_steps"] for r in records] == [0.0, 0.0]


def test_rank_zero_alone_writes_metrics_transcripts_and_checkpoints(runs):
    one, two = runs
    lines = (two / "l1_tree" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    transcripts = (two / "l1_tree" / "rollouts.jsonl").read_text().splitlines()
    assert transcripts == (one / "l1_tree" / "rollouts.jsonl").read_text().splitlines()
    assert sorted(p.name for p in (two / "l1_tree").iterdir() if p.name.startswith("checkpoint-")) == [
        "checkpoint-1", "checkpoint-2"
    ]
    extra = read_trainer_state(two / "l1_tree" / "checkpoint-1").extra
    assert extra["world_size"] == 2 and len(extra["engine_ranks"]) == 2
    assert "world_size" not in read_trainer_state(one / "l1_tree" / "checkpoint-1").extra


def test_a_resume_on_two_ranks_continues_exactly_and_on_one_process_is_an_error(runs, tiny_model_path, tmp_path):
    one, two = runs
    assert_same_weights(weights(two / "l1_resume"), weights(two / "l1_tree"), atol=0)
    assert history(two / "l1_resume") == history(two / "l1_tree")
    lines = (two / "l1_resume" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2]  # its own folder: the steps it ran, once
    values = job.at_grpo_values("l1_tree", tmp_path)
    trainer = job.BonusTrainer.from_flat(values, model=tiny_model_path, env_config=job.ENV)
    checkpoint = two / "l1_tree" / "checkpoint-1"
    with pytest.raises(ValueError, match=rf"checkpoint {checkpoint} was written by a run of world size 2; "
                                         r"this run has world size 1: resume on the same number of processes"):
        trainer.load_checkpoint(checkpoint)
