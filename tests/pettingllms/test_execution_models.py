"""End to end on the test-tiny model: every environment at every policy level, token in, token out."""

from __future__ import annotations

import pytest
import torch

from comlrl.scoring import completion_logprobs
from pettingllms.execution import (
    EngineConfig,
    PolicyConfig,
    RolloutEngine,
    build_policy,
    build_router,
    level_turn_order,
    tensorize,
)

ENVS = {
    "plan_path": {"rows": 4, "cols": 4, "wall_density": 0.2},
    "sokoban": {"rows": 5, "cols": 5, "num_boxes": 1},
    "sudoku": {"size": 4},
}
EXPECTED_POLICIES = {
    "L0": {"single": "single"},
    "L1": {"tool": "shared", "plan": "shared"},
    "L2": {"tool": "tool", "plan": "plan"},
    "L3": {"tool": "tool", "plan": "plan"},
}


def perturb_adapters(policy) -> None:
    """LoRA B starts at 0 (adapters equal the base); give each adapter its own non-zero weights."""
    generator = torch.Generator().manual_seed(0)
    for name in policy.policies:
        with torch.no_grad():
            for _, parameter in policy.named_trainable_parameters(name):
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


def run_level(
    env_name,
    level,
    model_path,
    k=2,
    problems=(0, 1),
    max_turns=2,
    sampling_mode="tree",
    order=("tool", "plan"),
):
    turn_order = level_turn_order(level, order)
    policy = build_policy(PolicyConfig(policy_level=level, model=model_path), turn_order)
    if level == "L2":
        perturb_adapters(policy)
    router = build_router(policy)
    config = EngineConfig(num_generations=k, max_completion_length=6, sampling_mode=sampling_mode, seed=1)
    env_config = {**ENVS[env_name], "turn_order": list(turn_order), "max_turns": max_turns}
    engine = RolloutEngine.from_registry(env_name, env_config, router, config)
    return policy, router, engine, engine.rollout(list(problems), step=0)


@pytest.mark.parametrize("level", ["L0", "L1", "L2", "L3"])
@pytest.mark.parametrize("env_name", sorted(ENVS))
def test_rollouts_on_every_env_and_level_give_well_formed_samples(env_name, level, tiny_model_path):
    policy, router, engine, batch = run_level(env_name, level, tiny_model_path)
    assert router.agent_to_policy == EXPECTED_POLICIES[level]
    assert {s.policy for s in batch.samples} <= set(policy.policies)
    assert batch.samples and batch.dropped_samples == 0
    backend = router.backend_for(policy.policies[0])
    assert backend.generate_calls == len(batch.calls_per_decision_point) == batch.generate_calls
    for sample in batch.samples:
        handle = policy.handle(sample.policy)
        tokenizer = handle.tokenizer
        assert sample.policy == router.policy_for(sample.role)
        assert sample.policy_version == handle.version
        rendered = tokenizer.apply_chat_template(
            sample.prompt, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert sample.prompt_ids == list(rendered)
        assert 1 <= len(sample.completion_ids) == len(sample.logprobs) <= 6
        assert tokenizer.decode(sample.completion_ids, skip_special_tokens=True) == sample.response
        assert all(lp <= 0.0 for lp in sample.logprobs)
        assert sample.reward == pytest.approx(sample.alpha * sample.global_reward + sample.local_reward)
    for group in batch.groups().values():
        assert len({tuple(s.prompt_ids) for s in group}) == 1
    tensors = tensorize(batch.samples, {p: policy.handle(p).tokenizer.pad_token_id for p in policy.policies})
    for name, t in tensors.items():
        rows = len(t.samples)
        assert t.completion_ids.shape == t.completion_mask.shape == t.old_per_token_logps.shape
        assert t.prompt_ids.shape[0] == t.completion_ids.shape[0] == rows == t.advantages.shape[0]
        assert t.completion_mask.sum(1).tolist() == [len(s.completion_ids) for s in t.samples]
        assert t.prompt_mask.sum(1).tolist() == [len(s.prompt_ids) for s in t.samples]
        assert t.input_ids.shape[1] == t.prompt_ids.shape[1] + t.completion_ids.shape[1]
        with policy.activate(name) as handle:
            handle.model.eval()
            recomputed, mask = completion_logprobs(
                handle.model,
                [s.prompt_ids for s in t.samples],
                [s.completion_ids for s in t.samples],
                pad_token_id=handle.tokenizer.pad_token_id,
                temperature=1.0,
            )
        assert mask.long().tolist() == t.completion_mask.tolist()
        torch.testing.assert_close(recomputed, t.old_per_token_logps, atol=2e-4, rtol=0)


def test_lora_policies_sample_from_their_own_adapters(tiny_model_path):
    """With distinct adapters, the same prompt and seed give different log-probs per policy."""
    policy, router, engine, batch = run_level("plan_path", "L2", tiny_model_path, problems=(0,), max_turns=1)
    assert {s.policy for s in batch.samples} == {"tool", "plan"}
    tool_sample = next(s for s in batch.samples if s.policy == "tool")
    scores = {}
    for name in ("tool", "plan"):
        with policy.activate(name) as handle:
            scores[name], _ = completion_logprobs(
                handle.model, [tool_sample.prompt_ids], [tool_sample.completion_ids], pad_token_id=0
            )
    torch.testing.assert_close(scores["tool"][0], torch.tensor(tool_sample.logprobs), atol=2e-4, rtol=0)
    assert not torch.allclose(scores["tool"], scores["plan"], atol=1e-3)


def test_hf_generate_calls_equal_decision_points_and_samples_are_batch_independent(tiny_model_path):
    _, router, engine, batch = run_level(
        "sokoban", "L3", tiny_model_path, k=3, problems=(0, 1, 2), max_turns=2
    )
    assert all(sum(p["calls"].values()) == 1 for p in batch.calls_per_decision_point)
    assert router.backend_for("tool") is router.backend_for("plan")  # one HFBackend, one call per policy
    assert router.backend_for("tool").generate_calls == len(batch.calls_per_decision_point)
    _, _, _, alone = run_level("sokoban", "L3", tiny_model_path, k=3, problems=(2,), max_turns=2)
    together = [
        (s.turn, s.agent_index, s.candidate, s.completion_ids, s.reward)
        for s in batch.samples
        if s.problem_id == 2
    ]
    assert together == [
        (s.turn, s.agent_index, s.candidate, s.completion_ids, s.reward) for s in alone.samples
    ]


def test_independent_and_greedy_evaluation_with_a_model(tiny_model_path):
    _, _, engine, batch = run_level(
        "plan_path", "L1", tiny_model_path, k=2, sampling_mode="independent", max_turns=1
    )
    assert batch.mode == "independent" and {tuple(k) for k in batch.groups()} == {
        (0, None, None),
        (1, None, None),
    }
    result = engine.evaluate([50, 51], num_samples=2, temperature=0.0)
    assert result.num_trajectories == 4 and 0.0 <= result.success_rate <= 1.0
    # Greedy decoding: the K evaluation samples of a problem are identical.
    for problem in (50, 51):
        runs = [
            [s.completion_ids for s in result.samples if (s.problem_id, s.candidate) == (problem, t)]
            for t in range(2)
        ]
        assert runs[0] and runs[0] == runs[1]


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_three_distinct_roles_get_three_policies(level, tiny_model_path):
    """A workflow of three roles (tool, plan, then the single agent as a second planner)."""
    order = ("tool", "plan", "single")
    policy, router, engine, batch = run_level(
        "sudoku", level, tiny_model_path, problems=(0,), max_turns=1, order=order
    )
    assert router.agent_to_policy == {role: role for role in order}
    assert sorted(policy.policies) == sorted(order)
    assert [p["calls"] for p in batch.calls_per_decision_point] == [{role: 1} for role in order]
    assert {(s.role, s.policy) for s in batch.samples} == {(role, role) for role in order}
    assert len(batch.samples) == 3 * 2
