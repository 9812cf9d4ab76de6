"""Data-parallel iterative preference rounds, MARLHF's reward-model fit and RL stage, and multi-turn episodes
(trees; trajectories with advantages whitened over the global batch) (comlrl.trainers.core.data_parallel): two ranks under ``accelerate launch --multi_gpu --num_processes 2`` (gloo
on CPU) against one process over the same global batches.

One launch runs the ``madpo_iter``, ``marlhf_iter``, ``multi_turn`` and ``maac_multi_turn`` scenarios of ``data_parallel_job.py``
(read its docstring) and, on two ranks, resumes MADPOIter from a checkpoint inside round 2; the one-process
runs go in this process. Compared: the first optimizer step of each agent within a relative 1e-5 (the same
samples, pairs and rows); every later step within a relative 2e-3 and the final weights within ``ATOL``
(AdamW divides each gradient entry by its magnitude plus 1e-8, so float rounding in an entry near that size
moves it by a share of the learning rate, and later steps start from those weights); MARLHF's fitted reward
head within 1e-5; the counters and the rounds' logged counts exactly, their reward means within a relative
1e-4; the round files byte for byte. The ranks end bitwise equal, rank 0 alone writes, and the resumed
two-rank run ends bitwise equal to the uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.comlrl import data_parallel_job as job

ATOL = 0.2 * job.LR
SCENARIOS = ["madpo_iter", "marlhf_iter", "multi_turn", "maac_multi_turn"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank folder)``, each holding a folder per scenario."""
    return job.one_and_two(tmp_path_factory.mktemp("comlrl-data-parallel-rounds"), tiny_model_path, SCENARIOS)


load = job.load


def records(folder: Path, prefixes: tuple[str, ...]) -> list[dict]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k.startswith(prefixes)} for r in lines if any(k.startswith(prefixes) for k in r)]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_two_ranks_equal_one_process_over_the_same_global_batches(runs, scenario):
    one, two = (load(folder / scenario) for folder in runs)
    assert two["counters"] == one["counters"]  # env_step, updates, optimizer steps, pairs
    assert [name for name, _ in two["grads"]] == [name for name, _ in one["grads"]] and one["grads"]
    first = {}
    for (name, g1), (_, g2) in zip(one["grads"], two["grads"]):
        gap = float((g1 - g2).norm()) / float(g1.norm())
        assert gap <= (2e-3 if name in first else 1e-5), (name, len(first), gap)
        first[name] = gap
    worst = max(float((one["weights"][k] - two["weights"][k]).abs().max()) for k in one["weights"])
    assert worst <= ATOL, worst
    if scenario == "marlhf_iter":  # the last round's reward model, fitted on two ranks' shards of its batches
        assert float((one["reward_head"] - two["reward_head"]).abs().max()) <= 1e-5


@pytest.mark.parametrize("scenario", ["madpo_iter", "marlhf_iter"])
def test_the_rounds_see_what_one_process_sees(runs, scenario):
    one, two = (folder / scenario for folder in runs)
    prefixes = ("iter/", "reward_model/")
    expected, got = records(one, prefixes), records(two, prefixes)
    assert [sorted(r) for r in got] == [sorted(r) for r in expected]
    for e, g in zip(expected, got):
        for key, value in e.items():
            exact = not key.endswith(("_mean", "loss", "accuracy"))
            assert g[key] == value if exact else g[key] == pytest.approx(value, rel=1e-4), key
    assert [r["iter/current_iteration"] for r in expected if "iter/current_iteration" in r] == [1, 2]
    if scenario == "madpo_iter":  # round 2's lambda_decay draw reads round 1's file: the same pairs everywhere
        files = sorted(p.name for p in (one / "preference_replay").iterdir())
        assert files == sorted(p.name for p in (two / "preference_replay").iterdir()) and len(files) == 4
        for name in files:
            assert (one / "preference_replay" / name).read_bytes() == (two / "preference_replay" / name).read_bytes()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_ranks_end_bitwise_equal_and_rank_zero_alone_writes(runs, scenario):
    one, two = (folder / scenario for folder in runs)
    rank0, rank1 = load(two, 0), load(two, 1)
    assert all(torch.equal(rank0["weights"][k], rank1["weights"][k]) for k in rank0["weights"])
    if scenario == "marlhf_iter":
        assert torch.equal(rank0["reward_head"], rank1["reward_head"])
    lines = (two / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len((one / "metrics.jsonl").read_text().splitlines())  # one writer
    if scenario == "madpo_iter":
        assert sorted(p.name for p in (two / "snapshots").iterdir()) == ["initial", "iteration_0001", "iteration_0002"]
        states = [json.loads((p / "trainer_state.json").read_text()) for p in two.glob("checkpoint-*")]
        assert len(states) == rank0["counters"][2]  # save_steps=1, inside the rounds
        assert all(s["extra"]["world_size"] == 2 for s in states)


def test_a_two_rank_run_resumed_inside_a_round_on_two_ranks_ends_bitwise_equal(runs):
    _, two = runs
    for rank in (0, 1):
        resumed = torch.load(two / "madpo_iter_resumed" / f"resumed{rank}.pt")
        uninterrupted = load(two / "madpo_iter", rank)["weights"]
        assert all(torch.equal(resumed[k], uninterrupted[k]) for k in uninterrupted)
