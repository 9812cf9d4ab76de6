"""Samples, groups and tensors; the router; policy levels from config; the scripted backend."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rollout.types import Completion, GenerationRequest, SamplingParams
from pettingllms.execution import (
    EnvContext,
    GroupKey,
    MixturePolicy,
    PolicyConfig,
    Router,
    Sample,
    ScriptedBackend,
    agent_policy_map,
    build_policy,
    group_samples,
    level_turn_order,
    member_rewards,
    reseed_scripted,
    tensorize,
    trajectory_return,
)
from pettingllms.scripted import OraclePolicy, RandomPolicy, RolePolicy


def make_sample(
    problem=0,
    turn=0,
    agent=0,
    candidate=0,
    policy="p",
    prompt=(5, 6),
    completion=(7,),
    reward=0.0,
    group_reward=None,
    key=None,
    logprobs=None,
):
    return Sample(
        problem_id=problem,
        env_index=0,
        turn=turn,
        agent_index=agent,
        role="r",
        candidate=candidate,
        policy=policy,
        policy_version=0,
        seed=None,
        prompt="x",
        response="y",
        prompt_ids=list(prompt),
        completion_ids=list(completion),
        logprobs=list(logprobs if logprobs is not None else [-0.5] * len(completion)),
        finish_reason="stop",
        action=None,
        parse_error=None,
        failure=None,
        feedback="",
        local_reward=reward,
        global_reward=0.0,
        alpha=1.0,
        reward=reward,
        done=False,
        success=False,
        group_key=key or GroupKey(problem, turn, agent),
        mode="tree",
        group_reward=reward if group_reward is None else group_reward,
    )


def test_trajectory_return_modes():
    assert trajectory_return([0.5, -1.0, 2.0], 0.25, "final") == 0.25
    assert trajectory_return([0.5, -1.0, 2.0], 0.25, "sum") == 1.5
    with pytest.raises(ValueError, match="`trajectory_return` must be one of"):
        trajectory_return([], 0.0, "mean")


def test_groups_are_ordered_and_member_rewards_are_one_per_member():
    samples = [
        make_sample(problem=1, turn=0, agent=1, candidate=1, reward=2.0),
        make_sample(problem=0, turn=1, agent=0, candidate=0, reward=1.0),
        make_sample(problem=1, turn=0, agent=1, candidate=0, reward=-1.0),
        make_sample(problem=0, key=GroupKey(0, None, None), candidate=3, group_reward=0.5, turn=2),
        make_sample(problem=0, key=GroupKey(0, None, None), candidate=3, group_reward=0.5, turn=0),
    ]
    groups = group_samples(samples)
    assert list(groups) == [GroupKey(0, None, None), GroupKey(0, 1, 0), GroupKey(1, 0, 1)]
    assert [s.candidate for s in groups[GroupKey(1, 0, 1)]] == [0, 1]
    assert member_rewards(samples) == {
        GroupKey(0, None, None): {3: 0.5},
        GroupKey(0, 1, 0): {0: 1.0},
        GroupKey(1, 0, 1): {0: -1.0, 1: 2.0},
    }
    bad = samples + [make_sample(problem=0, key=GroupKey(0, None, None), candidate=3, group_reward=0.7)]
    with pytest.raises(ValueError, match="member 3 has two `group_reward` values"):
        member_rewards(bad)


token_rows = st.lists(
    st.tuples(
        st.lists(st.integers(1, 50), min_size=1, max_size=6),
        st.lists(st.integers(1, 50), max_size=5),
        st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=6,
)


@given(token_rows)
def test_tensorize_pads_prompts_left_and_completions_right_per_policy(rows):
    samples = [
        make_sample(
            candidate=i,
            policy=policy,
            prompt=p,
            completion=c,
            logprobs=[-(j + 1) / 10 for j in range(len(c))],
            reward=float(i),
        )
        for i, (p, c, policy) in enumerate(rows)
    ]
    out = tensorize(samples, pad_token_id=0)
    assert set(out) == {policy for _, _, policy in rows}
    for policy, t in out.items():
        mine = [s for s in samples if s.policy == policy]
        assert t.samples == mine
        for i, s in enumerate(mine):
            p, c = s.prompt_ids, s.completion_ids
            assert t.prompt_ids[i, t.prompt_ids.shape[1] - len(p) :].tolist() == p
            assert t.prompt_ids[i, : t.prompt_ids.shape[1] - len(p)].eq(0).all()
            assert t.prompt_mask[i].tolist() == [0] * (t.prompt_ids.shape[1] - len(p)) + [1] * len(p)
            assert t.completion_ids[i, : len(c)].tolist() == c
            assert t.completion_mask[i].tolist() == [1] * len(c) + [0] * (t.completion_ids.shape[1] - len(c))
            assert t.old_per_token_logps[i, : len(c)].tolist() == pytest.approx(s.logprobs)
            assert t.old_per_token_logps[i, len(c) :].eq(0).all()
        assert t.rewards.tolist() == [s.group_reward for s in mine]
        assert t.advantages.eq(0).all() and t.advantages.shape == (len(mine),)
        assert t.attention_mask.shape == t.input_ids.shape


def test_tensorize_refuses_samples_without_token_ids():
    with pytest.raises(ValueError, match="has no token ids or misaligned `logprobs`"):
        tensorize([make_sample(prompt=(), completion=())], pad_token_id=0)


# ---- router ------------------------------------------------------------------------------------


class EchoBackend:
    """Answers each request with its policy name and candidate index; records each call's requests."""

    def __init__(self):
        self.calls = []

    def generate(self, requests, params=None):
        self.calls.append([r.policy for r in requests])
        n = lambda r: (r.params or params or SamplingParams()).n  # noqa: E731
        return [
            [Completion([], [], [], f"{r.policy}:{j}", "stop", r.policy) for j in range(n(r))]
            for r in requests
        ]


def test_router_makes_one_call_per_policy_and_keeps_request_order():
    shared, other = EchoBackend(), EchoBackend()
    router = Router({"tool": "a", "plan": "b", "critic": "a"}, {"a": shared, "b": other})
    requests = [
        GenerationRequest("x", policy=p, params=SamplingParams(n=n))
        for p, n in [("a", 2), ("b", 1), ("a", 3), ("b", 2)]
    ]
    results, made = router.generate(requests)
    assert made == {"a": 1, "b": 1} and shared.calls == [["a", "a"]] and other.calls == [["b", "b"]]
    assert [[c.text for c in r] for r in results] == [
        ["a:0", "a:1"],
        ["b:0"],
        ["a:0", "a:1", "a:2"],
        ["b:0", "b:1"],
    ]
    assert router.policy_for("critic") == "a" and router.calls == {"a": 1, "b": 1}
    with pytest.raises(KeyError, match="no policy for role 'judge'"):
        router.policy_for("judge")
    with pytest.raises(ValueError, match=r"no backend for policy\(ies\) \['b'\]"):
        Router({"tool": "a", "plan": "b"}, {"a": shared})

    class Short(EchoBackend):
        def generate(self, requests, params=None):
            return [r[:1] for r in super().generate(requests, params)]

    with pytest.raises(RuntimeError, match="expected n=2"):
        Router({"tool": "a"}, Short()).generate(
            [GenerationRequest("x", policy="a", params=SamplingParams(n=2))]
        )


# ---- policy levels -----------------------------------------------------------------------------


def test_level_turn_orders_and_agent_policy_maps():
    assert level_turn_order("L0", ["tool", "plan"]) == ("single",)
    assert level_turn_order("L2", ["tool", "tool", "plan"]) == ("tool", "tool", "plan")
    assert agent_policy_map(PolicyConfig(policy_level="L1"), ["tool", "tool", "plan"]) == {
        "tool": "shared",
        "plan": "shared",
    }
    assert agent_policy_map(PolicyConfig(policy_level="L3"), ["tool", "plan"]) == {
        "tool": "tool",
        "plan": "plan",
    }
    mapping = {"tool": "coder", "plan": "coder", "critic": "judge"}
    assert (
        agent_policy_map(PolicyConfig(policy_level="L3", agent_policies=mapping), ["tool", "plan", "critic"])
        == mapping
    )
    with pytest.raises(ValueError, match=r"missing \['critic'\]"):
        agent_policy_map(
            PolicyConfig(policy_level="L3", agent_policies={"tool": "a", "plan": "b"}),
            ["tool", "plan", "critic"],
        )
    with pytest.raises(ValueError, match="policy_level L1 has one policy"):
        agent_policy_map(
            PolicyConfig(policy_level="L1", agent_policies={"tool": "a", "plan": "b"}), ["tool", "plan"]
        )
    with pytest.raises(ValueError, match="`policy_level` must be one of"):
        PolicyConfig(policy_level="L4")
    with pytest.raises(ValueError, match=r"unknown PolicyConfig field\(s\) \['lora_rank'\]"):
        PolicyConfig.from_dict({"lora_rank": 4})
    with pytest.raises(ValueError, match="`models` applies to policy_level L3 only"):
        PolicyConfig(policy_level="L1", models={"a": "tiny"})


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_three_agents_on_two_policies(level, tiny_model_path):
    mapping = {"tool": "coder", "plan": "coder", "critic": "judge"}
    config = PolicyConfig(
        policy_level=level,
        model=tiny_model_path,
        agent_policies=mapping,
        lora_r=2,
        lora_target_modules=["q_proj", "v_proj"],
    )
    policy = build_policy(config, ["tool", "plan", "critic"])
    assert [policy.policy_name(a) for a in ("tool", "plan", "critic")] == ["coder", "coder", "judge"]
    router = Router.from_policy(policy)
    assert router.agent_to_policy == mapping
    models = policy.models()
    assert len(models) == (1 if level == "L2" else 2)
    if level == "L3":
        coder, judge = (set(map(id, policy.trainable_parameters(p))) for p in ("coder", "judge"))
        assert coder and judge and not coder & judge
    else:
        assert policy.handle("judge").adapter == "judge"


# ---- scripted backend --------------------------------------------------------------------------


def test_scripted_backend_seeds_each_candidate_from_its_request():
    import asyncio

    from pettingllms.registry import make_agents, make_env

    env = make_env("plan_path", {"rows": 5, "cols": 5, "turn_order": ["plan"]})
    asyncio.run(env.reset(0))
    (agent,) = make_agents("plan_path", ["plan"])
    agent.update_from_env(0, env)
    context = EnvContext(agent, env)
    backend = ScriptedBackend({"plan": RandomPolicy(seed=0)})
    request = GenerationRequest(
        "x", policy="plan", seed=42, params=SamplingParams(n=5), metadata={"env_context": context}
    )
    other = GenerationRequest(
        "x", policy="plan", seed=7, params=SamplingParams(n=2), metadata={"env_context": context}
    )
    alone = backend.generate([request])[0]
    mixed = backend.generate([other, request, other])[1]
    assert [c.text for c in alone] == [c.text for c in mixed]
    assert len({c.text for c in alone}) > 1 and all(c.token_ids == [] for c in alone)
    assert backend.generate_calls == 2 and backend.requests_seen == [1, 3]
    with pytest.raises(ValueError, match="needs `request.metadata\\['env_context'\\]`"):
        backend.generate([GenerationRequest("x", policy="plan", seed=1)])
    with pytest.raises(KeyError, match="unknown policy 'tool'"):
        backend.generate([GenerationRequest("x", policy="tool", metadata={"env_context": context})])


def test_reseed_reaches_nested_scripted_policies():
    nested = RolePolicy(
        {"plan": MixturePolicy([RandomPolicy(1), OraclePolicy()], [0.5, 0.5], seed=3)},
        default=RandomPolicy(2),
    )
    reseed_scripted(nested, 99)
    first = (
        nested.policies["plan"].rng.random(),
        nested.policies["plan"].policies[0].rng.random(),
        nested.default.rng.random(),
    )
    reseed_scripted(nested, 99)
    second = (
        nested.policies["plan"].rng.random(),
        nested.policies["plan"].policies[0].rng.random(),
        nested.default.rng.random(),
    )
    assert first == second and len(set(first)) == 3


def test_mixture_policy_draws_with_its_weights_and_validates_them():
    class Constant:
        def __init__(self, text):
            self.text = text

        def respond(self, agent, env):
            return self.text

    mixture = MixturePolicy([Constant("a"), Constant("b")], [1.0, 3.0], seed=0)
    answers = [mixture.respond(None, None) for _ in range(4000)]
    assert abs(answers.count("b") / 4000 - 0.75) < 0.03
    with pytest.raises(ValueError, match="`weights` must be >= 0 with a positive sum"):
        MixturePolicy([Constant("a")], [0.0])
