"""Tree-structured sampling: the invariants the anchor implementation violates, pinned on all three games.

Each engine rollout is checked against an independent sequential replay: from the reset state, every
group's candidates are re-applied one by one to fresh copies of the state reached by the *selected*
candidates before it, and must reproduce the prompt, the reward parts, done and success the engine
recorded. That pins: every candidate saw the same state, rewards come from the copy that was stepped,
each agent's selection uses its own group, and the episode continues from the selected copy.
"""

from __future__ import annotations

import asyncio
import copy
import random
import re
import types
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comlrl.seeding import derive_seed
from pettingllms.execution import (
    EngineConfig,
    GroupKey,
    MixturePolicy,
    RolloutEngine,
    Router,
    ScriptedBackend,
    fresh_copies,
    select_branch,
    selection_rng,
)
from pettingllms.execution import engine as engine_module
from pettingllms.registry import make_agents, make_env
from pettingllms.scripted import OraclePolicy, RandomPolicy

CONFIGS = {
    "plan_path": {"rows": 5, "cols": 5, "wall_density": 0.2},
    "sokoban": {"rows": 6, "cols": 6, "num_boxes": 1},
    "sudoku": {"size": 4},
}
ORDERS = {"2-agents": ("tool", "plan"), "3-agents": ("tool", "tool", "plan")}


def env_config(env_name, order, **extra):
    return {**CONFIGS[env_name], "turn_order": list(order), "max_turns": 3, **extra}


def scripted_engine(env_name, order, policies, k=4, greedy=True, seed=0, **extra):
    backend = ScriptedBackend(policies)
    router = Router({role: role for role in dict.fromkeys(order)}, backend)
    config = EngineConfig(num_generations=k, greedy_selection=greedy, seed=seed)
    engine = RolloutEngine.from_registry(env_name, env_config(env_name, order, **extra), router, config)
    return engine, backend


def worse_plan_policies():
    """Random tool agent; a plan agent deliberately worse than the oracle (oracle 30 %, random 70 %)."""
    return {
        "tool": RandomPolicy(seed=1),
        "plan": MixturePolicy([OraclePolicy(), RandomPolicy(seed=2)], [0.3, 0.7]),
    }


def replay(env_name, order, batch, greedy=True):
    """Sequentially re-derive every sample of ``batch`` and check the engine's records against it."""
    groups = batch.groups()
    outcomes = {o.problem_id: o for o in batch.outcomes}
    problems = sorted({key.problem_id for key in groups})
    for pid in problems:
        env = make_env(env_name, env_config(env_name, order))
        agents = make_agents(env_name, order)
        asyncio.run(env.reset(pid))
        keys = sorted((k for k in groups if k.problem_id == pid), key=GroupKey.sort_key)
        for key in keys:
            assert (env.state.turn, env.state.position) == (key.turn, key.agent_index)
            group = groups[key]
            assert [s.candidate for s in group] == list(range(len(group)))
            states_before = env.snapshot()
            for sample in group:
                copy_env = env.clone()
                agent = copy.deepcopy(agents[key.agent_index])
                assert agent.update_from_env(key.turn, copy_env) == sample.prompt
                agent.update_from_model(sample.response)
                result = asyncio.run(copy_env.step_agent(agent))
                got = (result.local_reward, result.global_reward, result.reward, result.done, result.success)
                want = (sample.local_reward, sample.global_reward, sample.reward, sample.done, sample.success)
                assert got == want, f"{key} candidate {sample.candidate}: replay {got} != engine {want}"
            assert env.snapshot() == states_before  # stepping the copies left the parent alone
            (chosen,) = [s for s in group if s.selected]
            if greedy:
                assert chosen.reward == max(s.reward for s in group)  # its own group's rewards
            agent = copy.deepcopy(agents[key.agent_index])
            agent.update_from_env(key.turn, env)
            agent.update_from_model(chosen.response)
            asyncio.run(env.step_agent(agent))
        assert env.done
        assert outcomes[pid].success == env.success
        assert outcomes[pid].task_reward == env.task_reward


@pytest.mark.parametrize("order_name", sorted(ORDERS))
@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_tree_rollout_matches_sequential_replay_of_the_selected_path(env_name, order_name):
    order = ORDERS[order_name]
    engine, _ = scripted_engine(env_name, order, worse_plan_policies())
    batch = engine.rollout(list(range(6)), step=3)
    assert batch.mode == "tree" and batch.dropped_samples == 0
    replay(env_name, order, batch)


@pytest.mark.parametrize("order_name", sorted(ORDERS))
@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_group_keys_are_unique_per_problem_turn_and_agent_slot(env_name, order_name):
    order = ORDERS[order_name]
    k = 4
    engine, _ = scripted_engine(env_name, order, worse_plan_policies(), k=k)
    batch = engine.rollout([5, 9, 11], step=0)
    seen = Counter((s.problem_id, s.turn, s.agent_index) for s in batch.samples)
    assert set(seen.values()) == {k}  # K candidates per (problem, turn, agent slot), never merged
    for key, group in batch.groups().items():
        assert {(s.problem_id, s.turn, s.agent_index) for s in group} == {tuple(key)}
        assert sorted(s.candidate for s in group) == list(range(k))
        assert {s.role for s in group} == {order[key.agent_index]}
        assert sum(s.selected for s in group) == 1
        # Every candidate of a group saw the same prompt.
        assert all(s.prompt == group[0].prompt for s in group)
    # With [tool, tool, plan] the two tool slots are separate groups.
    per_turn = Counter((s.problem_id, s.turn) for s in batch.samples)
    assert all(count == k * len(order) for key, count in per_turn.items() if key[1] == 0)


@pytest.mark.parametrize("order_name", sorted(ORDERS))
@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_later_agents_groups_have_varied_rewards_when_their_candidates_differ(env_name, order_name):
    """The anchor scored every later agent's candidates on copies of one object: identical rewards."""
    order = ORDERS[order_name]
    engine, _ = scripted_engine(env_name, order, worse_plan_policies(), k=4)
    batch = engine.rollout(list(range(8)), step=0)
    later = [g for key, g in batch.groups().items() if key.agent_index == len(order) - 1]
    differing = [g for g in later if len({s.response for s in g}) > 1]
    assert differing
    varied = [g for g in differing if len({s.reward for s in g}) > 1]
    # Different answers may earn the same reward (two random fills that change nothing), but most differ.
    assert len(varied) / len(differing) >= 0.5, (len(varied), len(differing))
    for group in later:
        if len({s.success for s in group}) > 1:  # a solving and a non-solving candidate
            assert len({s.reward for s in group}) > 1


def test_selection_is_each_agents_own_best_when_the_first_agent_ties():
    """All tool candidates tie (oracle); the plan agent's branch must still be the plan group's best."""
    policies = {
        "tool": OraclePolicy(),
        "plan": MixturePolicy([OraclePolicy(), RandomPolicy(seed=4)], [0.25, 0.75]),
    }
    engine, _ = scripted_engine("plan_path", ("tool", "plan"), policies, k=4)
    batch = engine.rollout(list(range(10)), step=0)
    for key, group in batch.groups().items():
        (chosen,) = [s for s in group if s.selected]
        assert chosen.reward == max(s.reward for s in group)
        if key.agent_index == 0:
            assert len({s.reward for s in group}) == 1
    # Whenever an oracle plan candidate existed the episode was solved in that turn.
    for key, group in batch.groups().items():
        if key.agent_index == 1 and any(s.success for s in group):
            assert [s for s in group if s.selected][0].success


def test_ties_are_broken_by_a_seeded_draw_not_by_position():
    policies = {"tool": OraclePolicy(), "plan": OraclePolicy()}
    engine, _ = scripted_engine("plan_path", ("tool", "plan"), policies, k=4, seed=11)
    first = engine.rollout(list(range(12)), step=2)
    chosen = [next(s.candidate for s in g if s.selected) for g in first.groups().values()]
    assert len(set(chosen)) > 1  # not always candidate 0
    for (key, group), index in zip(first.groups().items(), chosen):
        rewards = [s.reward for s in group]
        expected = select_branch(
            rewards, True, selection_rng(11, 2, key.problem_id, key.turn, key.agent_index)
        )
        assert index == expected
    again, _ = scripted_engine(
        "plan_path", ("tool", "plan"), {"tool": OraclePolicy(), "plan": OraclePolicy()}, k=4, seed=11
    )
    assert [s.selected for s in again.rollout(list(range(12)), step=2).samples] == [
        s.selected for s in first.samples
    ]


def test_non_greedy_selection_follows_a_random_branch():
    engine, _ = scripted_engine("plan_path", ("tool", "plan"), worse_plan_policies(), k=4, greedy=False)
    batch = engine.rollout(list(range(10)), step=0)
    replay("plan_path", ("tool", "plan"), batch, greedy=False)
    not_best = [
        g
        for g in batch.groups().values()
        if next(s for s in g if s.selected).reward < max(s.reward for s in g)
    ]
    assert not_best  # greedy would never pick these


def test_samples_do_not_depend_on_batch_partners():
    def run(ids):
        engine, _ = scripted_engine("sokoban", ("tool", "plan"), worse_plan_policies(), k=3, seed=5)
        batch = engine.rollout(ids, step=7)
        return [
            (s.turn, s.agent_index, s.candidate, s.response, s.reward, s.selected, s.seed)
            for s in batch.samples
            if s.problem_id == 4
        ]

    assert run([4]) == run([0, 1, 2, 3, 4, 5])
    for turn, agent_index, candidate, _, _, _, seed in run([4]):
        request_seed = derive_seed(5, "rollout", 7, 4, turn, agent_index)
        assert seed == derive_seed(request_seed, candidate)
    other_step, _ = scripted_engine("sokoban", ("tool", "plan"), worse_plan_policies(), k=3, seed=5)
    assert [s.response for s in other_step.rollout([4], step=8).samples] != [r[3] for r in run([4])]


def test_one_generate_call_per_policy_per_decision_point_with_n_equal_k():
    order = ("tool", "plan")
    engine, backend = scripted_engine("plan_path", order, worse_plan_policies(), k=3)
    seen_requests = []
    original = backend.generate

    def spy(requests, params=None):
        seen_requests.append([(r.policy, r.params.n, r.metadata["problem_id"]) for r in requests])
        return original(requests, params)

    backend.generate = spy
    batch = engine.rollout(list(range(5)), step=0)
    points = batch.calls_per_decision_point
    assert backend.generate_calls == len(points) == batch.generate_calls == engine.generate_calls
    assert all(p["calls"] == {order[p["agent_index"]]: 1} for p in points)
    for requests, point in zip(seen_requests, points):
        # One request per active problem, each asking for all K candidates at once.
        assert [n for _, n, _ in requests] == [3] * len(requests)
        assert len({pid for _, _, pid in requests}) == len(requests) == point["requests"]
    assert seen_requests[0] and len(seen_requests[0]) == 5
    assert sum(engine.router.calls.values()) == len(points)
    stats = batch.stats()
    assert stats["max_calls_per_policy_per_decision_point"] == 1.0
    assert stats["decision_points"] == stats["generate_calls"] == len(points)


# ---- copies share no mutable state -------------------------------------------------------------

_ATOMIC = (
    int,
    float,
    complex,
    str,
    bytes,
    bool,
    type(None),
    type,
    range,
    re.Pattern,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
)


def _frozen_dataclass(obj) -> bool:
    params = getattr(type(obj), "__dataclass_params__", None)
    return params is not None and params.frozen


def mutable_ids(root) -> set[int]:
    """ids of every object reachable from ``root`` that could be mutated (containers and instances).

    Tuples, frozensets and frozen dataclasses are immutable themselves (they may be shared, e.g. a game's
    level), but whatever mutable object they hold is followed and counted.
    """
    seen, found, stack = set(), set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _ATOMIC):
            continue
        seen.add(id(obj))
        if isinstance(obj, (tuple, frozenset)):
            stack.extend(obj)
            continue
        if _frozen_dataclass(obj):
            stack.extend(vars(obj).values())
            continue
        found.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, set)):
            stack.extend(obj)
        if hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                stack.append(getattr(obj, name))
    return found


@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_copies_at_every_decision_point_share_no_mutable_object(env_name, monkeypatch):
    captured = []

    def capturing(env, agent, k):
        envs, agents = fresh_copies(env, agent, k)
        captured.append((env, agent, envs, agents))
        return envs, agents

    monkeypatch.setattr(engine_module, "fresh_copies", capturing)
    engine, _ = scripted_engine(env_name, ("tool", "tool", "plan"), worse_plan_policies(), k=3)
    engine.rollout([0, 1], step=0)
    assert len(captured) >= 6
    for parent, template, envs, agents in captured:
        graphs = [mutable_ids(e) | mutable_ids(a) for e, a in zip(envs, agents)]
        graphs.append(mutable_ids(parent) | mutable_ids(template))
        for i in range(len(graphs)):
            for j in range(i + 1, len(graphs)):
                shared = graphs[i] & graphs[j]
                assert not shared, f"copies {i} and {j} share {len(shared)} mutable objects"


@pytest.mark.parametrize("env_name", sorted(CONFIGS))
def test_mutating_one_copy_leaves_the_others_and_the_parent_unchanged(env_name):
    env = make_env(env_name, env_config(env_name, ("tool", "plan")))
    (tool, plan) = make_agents(env_name, ("tool", "plan"))
    asyncio.run(env.reset(3))
    tool.update_from_env(0, env)
    tool.update_from_model(RandomPolicy(seed=0).respond(tool, env))
    asyncio.run(env.step_agent(tool))  # a parent with non-empty tool reports and a proposal
    before = env.snapshot()
    envs, agents = fresh_copies(env, plan, 3)
    agents[0].update_from_env(1, envs[0])
    agents[0].update_from_model(OraclePolicy().respond(agents[0], envs[0]))
    asyncio.run(envs[0].step_agent(agents[0]))
    envs[1].state.tool_reports.clear()
    for value in vars(envs[1].state).values():
        if isinstance(value, list):
            value.append("mutated")
    assert envs[0].snapshot() != before
    assert envs[2].snapshot() == before and env.snapshot() == before
    assert agents[1].prompt is None and agents[2].prompt is None and plan.prompt is None


# ---- pure selection ----------------------------------------------------------------------------

rewards_lists = st.lists(
    st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 2.0])), min_size=1, max_size=8
).filter(lambda rs: any(r is not None for r in rs))


@given(rewards_lists, st.booleans(), st.integers(0, 2**31))
def test_select_branch_picks_a_surviving_best_candidate_deterministically(rewards, greedy, seed):
    index = select_branch(rewards, greedy, random.Random(seed))
    assert rewards[index] is not None
    if greedy:
        assert rewards[index] == max(r for r in rewards if r is not None)
    assert index == select_branch(rewards, greedy, random.Random(seed))


def test_select_branch_draws_ties_uniformly_and_rejects_all_dropped():
    rng = random.Random(0)
    counts = Counter(select_branch([1.0, 0.0, 1.0, 1.0], True, rng) for _ in range(3000))
    assert set(counts) == {0, 2, 3}
    assert all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts.values())
    with pytest.raises(ValueError, match="no surviving candidate"):
        select_branch([None, None], True, rng)
    with pytest.raises(ValueError, match="`k` must be >= 1"):
        fresh_copies(None, None, 0)
