"""Data-parallel comlrl trainers (comlrl.trainers.core.data_parallel): two ranks under ``accelerate launch
--multi_gpu --num_processes 2`` (gloo on CPU) against one process over the same global batches.

One launch runs both scenarios of ``data_parallel_job.py`` (read its docstring); the one-process runs go in
this process. Compared: the gradient every optimizer step used (summed over ranks, divided by the global
rows) within a relative 1e-4 of its norm; the final weights within ``ATOL`` (AdamW divides each gradient
entry by its magnitude plus 1e-8, so float rounding in an entry near that size moves it by a share of the
learning rate); the counters (env_step counts every rank's joint responses); the two ranks end bitwise
equal. Rank 0 alone writes (one metrics.jsonl, the checkpoints, which record the world size); resuming such
a checkpoint in one process is an error naming both sizes; a config without a data-parallel mode (``use_vllm``)
is refused under a launcher before any model loads. The iterative trainers, MARLHF and multi-turn episodes:
``test_data_parallel_rounds.py``.
"""

from __future__ import annotations

import json

import pytest
import torch

from comlrl import distributed
from comlrl.trainers.core import data_parallel
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from tests.comlrl import data_parallel_job as job

ATOL = 0.05 * job.LR
SCENARIOS = ["madpo", "magrpo", "magrpo_dapo"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank folder)``, each holding a folder per scenario."""
    return job.one_and_two(tmp_path_factory.mktemp("comlrl-data-parallel"), tiny_model_path, SCENARIOS)


load = job.load


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_two_ranks_equal_one_process_over_the_same_global_batches(runs, scenario):
    one, two = (load(folder / scenario) for folder in runs)
    assert [name for name, _ in two["grads"]] == [name for name, _ in one["grads"]] and one["grads"]
    for (name, g1), (_, g2) in zip(one["grads"], two["grads"]):
        assert float((g1 - g2).norm()) <= 1e-4 * float(g1.norm()), name
    worst = max(float((one["weights"][k] - two["weights"][k]).abs().max()) for k in one["weights"])
    assert worst <= ATOL, worst
    assert two["counters"] == one["counters"]  # env_step, micro-batches, optimizer steps, pairs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_ranks_end_bitwise_equal_and_rank_zero_alone_writes(runs, scenario):
    _, two = runs
    rank0, rank1 = load(two / scenario, 0), load(two / scenario, 1)
    assert all(torch.equal(rank0["weights"][k], rank1["weights"][k]) for k in rank0["weights"])
    lines = (two / scenario / "metrics.jsonl").read_text().splitlines()
    one_lines = (runs[0] / scenario / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len(one_lines)  # one writer, the one-process number of records
    if scenario == "madpo":
        states = {p.name: json.loads((p / "trainer_state.json").read_text()) for p in (two / scenario).glob("checkpoint-*")}
        steps = rank0["counters"][2]
        assert sorted(states) == sorted(f"checkpoint-{s}" for s in range(1, steps + 1))  # save_steps=1
        assert all(s["extra"]["world_size"] == 2 for s in states.values())


def test_a_two_rank_checkpoint_does_not_resume_in_one_process(runs, tiny_model_path, tmp_path):
    _, two = runs
    trainer = job.build("madpo", tiny_model_path, tmp_path / "out")
    latest = max((two / "madpo").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    with pytest.raises(ValueError, match=r"written by a run of world size 2; this run has world size 1"):
        trainer.train(resume_from_checkpoint=latest)


def test_a_trainer_without_a_data_parallel_mode_is_refused_before_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(distributed, "init_distributed", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    with pytest.raises(ValueError, match=r"MAGRPOTrainer has no data-parallel mode yet \(use_vllm\), and this run "
                                         r"has world size 2"):  # fmt: skip
        MAGRPOTrainer(agent_model="no-such-model", num_agents=2, reward_func=job.reward,
                      args=MAGRPOConfig(output_dir=str(tmp_path), num_turns=1, use_vllm=True))  # fmt: skip
    assert data_parallel.DataParallel("X").size == 2  # a trainer that can: joins
