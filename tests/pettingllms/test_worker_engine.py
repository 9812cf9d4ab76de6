"""The pieces of the Ray backend that need no Ray: sharding a step's problems, merging the shards' batches
into the batch one engine returns, and the weight sync's checks.

The merge is checked against the real thing: one engine over all problems versus fresh engines over the
shards (as EnvWorkers run them), on the test-tiny model and Plan-Path, in both sampling modes and for
evaluation batches.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from pettingllms.execution import EngineConfig, PolicyConfig, RolloutEngine, build_policy, build_router
from pettingllms.workers.engine import merge_worker_batches, shard_problem_ids
from pettingllms.workers.rollout_worker import install_weights, trainable_state

ENV = {"rows": 4, "cols": 4, "max_turns": 2, "turn_order": ["tool", "plan"]}


def test_shards_are_contiguous_in_order_and_balanced():
    assert shard_problem_ids([5, 6, 7, 8, 9], 2) == [(0, [5, 6, 7]), (3, [8, 9])]
    assert shard_problem_ids([5, 6, 7], 3) == [(0, [5]), (1, [6]), (2, [7])]
    assert shard_problem_ids([5, 6], 4) == [(0, [5]), (1, [6])]  # no empty calls
    assert shard_problem_ids(list(range(10)), 1) == [(0, list(range(10)))]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`num_workers` must be an integer >= 1"):
            shard_problem_ids([1], bad)


@pytest.fixture(scope="module")
def policy(tiny_model_path):
    torch.manual_seed(0)
    return build_policy(PolicyConfig(policy_level="L3", model=tiny_model_path), ["tool", "plan"])


def engine(policy, mode, k=2, seed=3):
    config = EngineConfig(num_generations=k, sampling_mode=mode, max_completion_length=6, seed=seed)
    return RolloutEngine.from_registry("plan_path", ENV, build_router(policy), config)


def fields(batch):
    """Everything a sample carries but its log-probs (float rounding of other batch shapes)."""
    return [
        (s.problem_id, s.env_index, s.turn, s.agent_index, s.candidate, s.policy, s.completion_ids, s.prompt_ids,
         s.group_reward, s.selected, s.success, s.group_key)
        for s in batch.samples
    ]


def assert_merged_equals_whole(whole, merged):
    assert fields(merged) == fields(whole)
    for a, b in zip(merged.samples, whole.samples):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    key = lambda o: (o.problem_id, o.trajectory)  # noqa: E731
    assert sorted(merged.outcomes, key=key) == sorted(whole.outcomes, key=key)
    assert merged.success_rate == whole.success_rate
    assert merged.dropped_samples == whole.dropped_samples and merged.failures == whole.failures


@pytest.mark.parametrize("mode", ["tree", "independent"])
def test_merging_shard_batches_gives_the_one_engine_batch(policy, mode):
    ids = [4, 9, 1, 7, 2]
    whole = engine(policy, mode).rollout(ids, step=2)
    shards = shard_problem_ids(ids, 2)
    parts = [(offset, engine(policy, mode).rollout(shard, step=2)) for offset, shard in shards]
    merged = merge_worker_batches(parts, step=2, mode=mode, trajectories_per_problem=2)
    assert_merged_equals_whole(whole, merged)
    # One call per policy per decision point per shard: twice the one engine's calls here.
    assert merged.generate_calls == 2 * whole.generate_calls
    assert merged.timings["generate_s"] == max(p.timings["generate_s"] for _, p in parts)


def test_merging_evaluation_shards_gives_the_one_engine_trajectories(policy):
    ids = [11, 12, 13]
    one = engine(policy, "tree")
    whole = asyncio.run(one.aevaluate_batch(ids, num_samples=2, temperature=1.0, step=5))
    parts = [(offset, asyncio.run(engine(policy, "tree").aevaluate_batch(shard, 2, 1.0, 5)))
             for offset, shard in shard_problem_ids(ids, 3)]
    assert_merged_equals_whole(whole, merge_worker_batches(parts, step=5, mode="independent", trajectories_per_problem=2))


def test_a_merge_refuses_batches_of_another_mode(policy):
    batch = engine(policy, "independent").rollout([1], step=0)
    with pytest.raises(ValueError, match="a worker's batch is in mode 'independent', expected 'tree'"):
        merge_worker_batches([(0, batch)], step=0, mode="tree", trajectories_per_problem=2)


def test_weight_sync_copies_in_place_sets_the_version_and_refuses_other_layouts(policy, tiny_model_path):
    other = build_policy(PolicyConfig(policy_level="L3", model=tiny_model_path), ["tool", "plan"])
    with torch.no_grad():
        for param in policy.trainable_parameters("tool"):
            param.add_(0.5)
    before = [p.data_ptr() for p in other.trainable_parameters("tool")]
    install_weights(other, "tool", trainable_state(policy, "tool"), version=7)
    assert other.version("tool") == 7 and other.version("plan") == 0
    assert [p.data_ptr() for p in other.trainable_parameters("tool")] == before  # optimizers stay valid
    for (_, a), (_, b) in zip(policy.named_trainable_parameters("tool"), other.named_trainable_parameters("tool")):
        assert torch.equal(a, b)
    state = trainable_state(policy, "tool")
    missing = dict(list(state.items())[1:])
    with pytest.raises(ValueError, match=r"weights for policy 'tool' do not match .*missing \['"):
        install_weights(other, "tool", missing, version=8)
    name = next(iter(state))
    with pytest.raises(ValueError, match=rf"{name} has shape \(1,\)"):
        install_weights(other, "tool", {**state, name: torch.zeros(1)}, version=8)
    assert other.version("tool") == 7
