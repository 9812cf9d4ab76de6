"""AT-GRPO's pure functions against hand computations: grouping, advantages, the loss, data order, metrics,
and the config's validation; and that :mod:`pettingllms.trainer.at_grpo` still exports each of them."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.execution import GroupKey, ProblemOutcome, RolloutBatch, Sample
from pettingllms.trainer import at_grpo
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from pettingllms.trainer.grouping import at_grpo_group_key, member_table, sample_advantages
from pettingllms.trainer.losses import at_grpo_loss
from pettingllms.trainer.metrics import episode_successes, rollout_metrics
from pettingllms.trainer.micro_batches import micro_batch_groups
from pettingllms.trainer.problems import draw_problem_ids, problem_order

EPS = 1e-4  # compute_advantages' default, added to the std


def make_sample(
    problem_id=0,
    turn=0,
    agent_index=0,
    candidate=0,
    group_reward=0.0,
    *,
    mode="tree",
    role=None,
    policy="shared",
    local_reward=None,
    global_reward=0.0,
    alpha=1.0,
    parse_error=None,
    success=False,
    length=3,
    key=None,
    env_index=0,
    selected=False,
    done=False,
) -> Sample:
    role = role or ("tool", "plan")[agent_index % 2]
    local = group_reward - alpha * global_reward if local_reward is None else local_reward
    if key is None:
        key = GroupKey(problem_id, turn, agent_index) if mode == "tree" else GroupKey(problem_id, None, None)
    return Sample(
        problem_id=problem_id,
        env_index=env_index,
        turn=turn,
        agent_index=agent_index,
        role=role,
        candidate=candidate,
        policy=policy,
        policy_version=0,
        seed=0,
        prompt="p",
        response="r",
        prompt_ids=[1, 2],
        completion_ids=list(range(length)),
        logprobs=[-1.0] * length,
        finish_reason="stop",
        action=None,
        parse_error=parse_error,
        failure=None,
        feedback="",
        local_reward=local,
        global_reward=global_reward,
        alpha=alpha,
        reward=alpha * global_reward + local,
        done=done,
        success=success,
        group_key=key,
        mode=mode,
        selected=selected,
        group_reward=group_reward,
    )


# ------------------------------------------------------------------------------------------- grouping


def test_group_key_is_problem_turn_agent_in_tree_mode_and_problem_in_independent_mode():
    tree = make_sample(problem_id=7, turn=2, agent_index=1, candidate=3)
    assert at_grpo_group_key(tree) == GroupKey(7, 2, 1)
    independent = make_sample(problem_id=7, turn=2, agent_index=1, candidate=3, mode="independent")
    assert at_grpo_group_key(independent) == GroupKey(7, None, None)


def test_group_key_does_not_merge_problems_as_the_anchor_does():
    # The anchor keys tree groups by problem_index // K, merging K problems into one group. Problems 0 and
    # 1 with K = 2 must stay two groups.
    samples = [make_sample(problem_id=p, candidate=c, group_reward=float(p)) for p in (0, 1) for c in (0, 1)]
    table = member_table(samples)
    assert len(table.group_keys) == 2
    # Both groups have equal rewards inside: merged, they would give non-zero advantages.
    assert sample_advantages(samples).abs().max() == 0


def test_member_table_rejects_a_sample_whose_group_key_disagrees_with_its_mode():
    wrong = make_sample(problem_id=3, turn=1, agent_index=0, key=GroupKey(1, 1, 0))
    with pytest.raises(ValueError, match=r"`group_key` \(1, 1, 0\), expected \(3, 1, 0\) for tree"):
        member_table([wrong])


# ------------------------------------------------------------------------------------------- advantages


def tree_batch():
    """Group (0,0,0): rewards 1, 0, 0.5; group (0,0,1): 2, 2, 2; group (1,0,0): -1, 1."""
    rewards = {(0, 0): [1.0, 0.0, 0.5], (0, 1): [2.0, 2.0, 2.0], (1, 0): [-1.0, 1.0]}
    return [
        make_sample(problem_id=p, agent_index=a, candidate=c, group_reward=r)
        for (p, a), values in rewards.items()
        for c, r in enumerate(values)
    ]


def test_tree_advantages_scaled_by_group_std_match_hand_computation():
    # Group 1: mean 0.5, unbiased std sqrt((0.25 + 0.25 + 0) / 2) = 0.5. Group 2: std 0 -> 0.
    # Group 3: mean 0, std sqrt((1 + 1) / 1) = sqrt(2).
    expected = [0.5 / (0.5 + EPS), -0.5 / (0.5 + EPS), 0.0, 0.0, 0.0, 0.0]
    expected += [-1 / (math.sqrt(2) + EPS), 1 / (math.sqrt(2) + EPS)]
    assert sample_advantages(tree_batch(), "group").tolist() == pytest.approx(expected, rel=1e-12)


def test_tree_advantages_without_scaling_are_reward_minus_group_mean():
    # Dr. GRPO: no division by the std.
    expected = [0.5, -0.5, 0.0, 0.0, 0.0, 0.0, -1.0, 1.0]
    assert sample_advantages(tree_batch(), "none").tolist() == pytest.approx(expected, abs=1e-12)
    assert sample_advantages(tree_batch(), False).tolist() == pytest.approx(expected, abs=1e-12)


def test_tree_advantages_scaled_by_batch_std_match_hand_computation():
    centred = [0.5, -0.5, 0.0, 0.0, 0.0, 0.0, -1.0, 1.0]
    std = math.sqrt(sum(x * x for x in centred) / (len(centred) - 1))
    expected = [x / (std + EPS) for x in centred]
    assert sample_advantages(tree_batch(), "batch").tolist() == pytest.approx(expected, rel=1e-12)


def test_independent_trajectories_count_once_whatever_their_length():
    # Problem 0: trajectory 0 ran 3 steps (return 1), trajectory 1 ran 1 step (return 0). The group mean is
    # over the 2 trajectories, 0.5, not over the 4 samples (0.75).
    samples = [
        make_sample(problem_id=0, turn=t, agent_index=t % 2, candidate=0, group_reward=1.0, mode="independent")
        for t in range(3)
    ]
    samples.append(make_sample(problem_id=0, candidate=1, group_reward=0.0, mode="independent"))
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert sample_advantages(samples).tolist() == pytest.approx([a, a, a, -a], rel=1e-12)
    assert sample_advantages(samples, "none").tolist() == pytest.approx([0.5, 0.5, 0.5, -0.5])


def test_a_trajectory_with_two_returns_is_an_error():
    samples = [
        make_sample(turn=0, candidate=0, group_reward=1.0, mode="independent"),
        make_sample(turn=1, candidate=0, group_reward=0.5, mode="independent"),
    ]
    with pytest.raises(ValueError, match="two `group_reward` values"):
        sample_advantages(samples)


@given(
    st.lists(
        st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=5),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["group", "none"]),
)
def test_member_advantages_have_zero_mean_in_every_group(groups, scale):
    samples = [
        make_sample(problem_id=g, candidate=c, group_reward=r)
        for g, rewards in enumerate(groups)
        for c, r in enumerate(rewards)
    ]
    advantages = sample_advantages(samples, scale)
    for g, rewards in enumerate(groups):
        values = [float(a) for a, s in zip(advantages, samples) if s.problem_id == g]
        assert sum(values) == pytest.approx(0.0, abs=1e-6 * max(1.0, max(abs(v) for v in values)))
        if scale == "none":
            mean = sum(rewards) / len(rewards)
            assert values == pytest.approx([r - mean for r in rewards], abs=1e-9)


# ------------------------------------------------------------------------------------------- the loss

LOGPS = [[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]]
OLD = [[-1.0, -2.3, -0.2], [-0.6, -1.2, 0.0]]
MASK = [[1, 1, 1], [1, 1, 0]]
ADV = [1.0, -2.0]


def hand_per_token(eps_low=0.2, eps_high=0.2):
    """-min(ρA, clip(ρ, 1-ε, 1+ε_high)A) per real token, by plain arithmetic."""
    out = []
    for row in range(2):
        values = []
        for t in range(3):
            if not MASK[row][t]:
                continue
            ratio = math.exp(LOGPS[row][t] - OLD[row][t])
            clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
            values.append(-min(ratio * ADV[row], clipped * ADV[row]))
        out.append(values)
    return out


def run_loss(config, logps=None, **kwargs):
    logps = torch.tensor(LOGPS, requires_grad=True) if logps is None else logps
    kwargs.setdefault("max_completion_length", 4)
    loss, out = at_grpo_loss(
        logps, torch.tensor(OLD), torch.tensor(ADV), torch.tensor(MASK), config=config, **kwargs
    )
    return logps, loss, out


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_loss_matches_hand_computation_for_each_loss_type(loss_type):
    rows = hand_per_token()
    # Token 1 of row 0 has ratio exp(0.3) = 1.35 > 1.2 with A > 0: clipped to 1.2. Row 1 token 0 has the
    # same ratio but A < 0, where the unclipped term is the minimum.
    assert rows[0][1] == pytest.approx(-1.2)
    assert rows[1][0] == pytest.approx(2.0 * math.exp(0.3))
    total = sum(sum(r) for r in rows)
    expected = {
        "grpo": (sum(rows[0]) / 3 + sum(rows[1]) / 2) / 2,
        "bnpo": total / 5,
        "dr_grpo": total / (2 * 4),  # B * max_completion_length
        "dapo": total / 10,  # num_items_in_batch: tokens of the whole optimizer step
    }[loss_type]
    config = ATGRPOConfig(loss_type=loss_type)
    _, loss, out = run_loss(config, num_items_in_batch=10)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert float(out.clip_ratio_high) == pytest.approx(1 / 5)
    assert float(out.clip_ratio_low) == 0.0
    assert float(out.clip_ratio_region) == pytest.approx(1 / 5)


def test_loss_gradient_is_zero_on_clipped_tokens_and_padding_and_minus_ratio_advantage_elsewhere():
    config = ATGRPOConfig(loss_type="bnpo")
    logps, loss, _ = run_loss(config)
    loss.backward()
    grad = logps.grad
    assert grad[0, 1] == 0.0 and grad[1, 2] == 0.0  # clipped token, padding
    # d/dlogp of -ρA / 5 is -ρA / 5.
    assert float(grad[0, 0]) == pytest.approx(-1.0 / 5)
    assert float(grad[0, 2]) == pytest.approx(-math.exp(-0.3) / 5, rel=1e-6)
    assert float(grad[1, 0]) == pytest.approx(2.0 * math.exp(0.3) / 5, rel=1e-6)


def test_epsilon_high_raises_only_the_upper_clip():
    rows = hand_per_token(eps_low=0.2, eps_high=0.4)
    assert rows[0][1] == pytest.approx(-math.exp(0.3))  # 1.35 < 1.4: no longer clipped
    _, loss, out = run_loss(ATGRPOConfig(loss_type="bnpo", epsilon_high=0.4))
    assert float(loss.detach()) == pytest.approx(sum(sum(r) for r in rows) / 5, rel=1e-6)
    assert float(out.clip_ratio_region) == 0.0


def test_the_micro_batch_loss_is_unscaled_the_update_engine_weighs_it():
    # The accumulation weight is micro_batch_weights' (tests/comlrl/test_update_engine.py), not the loss's.
    for loss_type in ("bnpo", "grpo", "dr_grpo", "dapo"):
        _, loss, out = run_loss(ATGRPOConfig(loss_type=loss_type), num_items_in_batch=10)
        assert loss is out.loss, loss_type
    with pytest.raises(TypeError, match="num_micro_batches"):
        run_loss(ATGRPOConfig(loss_type="bnpo"), num_micro_batches=2)


def test_beta_adds_the_k3_reference_kl_per_token():
    ref = [[-1.5, -2.0, -0.4], [-0.3, -1.0, 0.0]]
    config = ATGRPOConfig(loss_type="bnpo", beta=0.5)
    _, loss, out = run_loss(config, ref_logps=torch.tensor(ref))
    kl = [
        math.exp(ref[r][t] - LOGPS[r][t]) - (ref[r][t] - LOGPS[r][t]) - 1
        for r in range(2)
        for t in range(3)
        if MASK[r][t]
    ]
    ppo = sum(sum(r) for r in hand_per_token())
    assert float(loss.detach()) == pytest.approx((ppo + 0.5 * sum(kl)) / 5, rel=1e-6)
    assert float(out.kl) == pytest.approx(sum(kl) / 5, rel=1e-6)


def test_dual_clip_caps_negative_advantage_losses():
    # Row 1 token 0: ρA = -2.70; with dual clip c = 1.25 the loss is capped at -c·A = 2.5.
    _, loss, out = run_loss(ATGRPOConfig(loss_type="bnpo", dual_clip=1.25))
    rows = hand_per_token()
    rows[1][0] = 2.5
    assert float(loss.detach()) == pytest.approx(sum(sum(r) for r in rows) / 5, rel=1e-6)


# ------------------------------------------------------------------------------------------- data order


def test_problem_order_is_a_seeded_permutation_of_the_range_that_changes_per_epoch():
    first = problem_order((10, 30), seed=3, epoch=0)
    assert sorted(first) == list(range(10, 30))
    assert problem_order((10, 30), seed=3, epoch=0) == first
    assert problem_order((10, 30), seed=3, epoch=1) != first
    assert problem_order((10, 30), seed=4, epoch=0) != first


def test_draw_problem_ids_walks_the_epoch_order_and_never_straddles_two_epochs():
    cursor = {"epoch": 0, "index": 0}
    seen = []
    for _ in range(3):  # 3 draws of 3 from 10 seeds: 9 seeds of epoch 0
        ids, cursor = draw_problem_ids(cursor, 3, (0, 10), seed=1)
        assert len(set(ids)) == 3
        seen += ids
    assert seen == problem_order((0, 10), 1, 0)[:9]
    assert cursor == {"epoch": 0, "index": 9}
    ids, cursor = draw_problem_ids(cursor, 3, (0, 10), seed=1)  # 1 left: skip to epoch 1
    assert ids == problem_order((0, 10), 1, 1)[:3] and cursor == {"epoch": 1, "index": 3}
    with pytest.raises(ValueError, match=r"`problems_per_step` must be an integer in \[1, 10\]"):
        draw_problem_ids(cursor, 11, (0, 10), seed=1)


def test_micro_batch_groups_cover_every_row_once_in_groups_of_accumulation_steps():
    groups = micro_batch_groups(11, batch_size=3, accumulation_steps=2, seed=5)
    assert [[len(m) for m in g] for g in groups] == [[3, 3], [3, 2]]
    rows = torch.cat([m for g in groups for m in g]).tolist()
    assert sorted(rows) == list(range(11))
    assert [m.tolist() for g in micro_batch_groups(11, 3, 2, seed=5) for m in g] == [
        m.tolist() for g in groups for m in g
    ]


# ------------------------------------------------------------------------------------------- metrics


def test_rollout_metrics_per_agent_turn_and_policy_match_hand_computation():
    samples = [
        # problem 0, turn 0, tool: rewards 1 (global 0.5, local 0.5), 0 (global 0, local 0, parse error)
        make_sample(0, 0, 0, 0, 1.0, global_reward=0.5, role="tool", policy="tool", length=4),
        make_sample(0, 0, 0, 1, 0.0, role="tool", policy="tool", parse_error="bad", length=2),
        # problem 0, turn 0, plan: equal rewards 2, 2 (zero std)
        make_sample(0, 0, 1, 0, 2.0, global_reward=1.0, role="plan", policy="plan"),
        make_sample(0, 0, 1, 1, 2.0, global_reward=1.0, role="plan", policy="plan"),
        # problem 0, turn 1, tool: 3, 1
        make_sample(0, 1, 0, 0, 3.0, role="tool", policy="tool"),
        make_sample(0, 1, 0, 1, 1.0, role="tool", policy="tool"),
    ]
    m = rollout_metrics(samples)
    assert m["reward"] == pytest.approx(9 / 6)
    assert m["reward_std"] == pytest.approx((math.sqrt(0.5) + 0 + math.sqrt(2)) / 3)
    assert m["frac_reward_zero_std"] == pytest.approx(1 / 3)
    assert m["parse_error_rate"] == pytest.approx(1 / 6)
    assert m["agent/tool/turn_0/reward_mean"] == pytest.approx(0.5)
    assert m["agent/tool/turn_0/reward_std"] == pytest.approx(math.sqrt(0.5))
    assert m["agent/tool/turn_0/global_reward_mean"] == pytest.approx(0.25)
    assert m["agent/tool/turn_0/local_reward_mean"] == pytest.approx(0.25)
    assert m["agent/tool/turn_0/parse_error_rate"] == pytest.approx(0.5)
    assert m["agent/tool/turn_0/completions/mean_length"] == pytest.approx(3.0)
    assert m["agent/tool/turn_0/frac_reward_zero_std"] == 0.0
    assert m["agent/plan/turn_0/frac_reward_zero_std"] == 1.0
    assert m["agent/plan/turn_0/reward_std"] == 0.0
    assert m["agent/tool/reward_mean"] == pytest.approx(5 / 4)
    assert m["agent/tool/num_samples"] == 4.0
    assert m["policy/tool/reward"] == pytest.approx(5 / 4)
    assert m["policy/tool/frac_reward_zero_std"] == 0.0
    assert m["policy/plan/frac_reward_zero_std"] == 1.0
    assert not any(key.startswith("failures/") for key in m)  # no sample reported a failure


def test_model_failures_are_counted_per_label():
    samples = [dataclasses.replace(make_sample(0, 0, 0, c), failure=label)
               for c, label in enumerate(["parse_error", "verify_timeout", "verify_timeout", None])]
    m = rollout_metrics(samples)
    assert {k: v for k, v in m.items() if "failures/" in k and not k.startswith(("agent/", "policy/"))} == {
        "failures/parse_error": 1.0, "failures/verify_timeout": 2.0}


def test_agent_success_is_the_team_success_of_the_episodes_the_agent_acted_in():
    def step(problem, turn, agent, candidate, **kw):
        role = ("tool", "plan")[agent]
        return make_sample(problem, turn, agent, candidate, env_index=problem, role=role, policy=role, **kw)

    samples = [
        # problem 0: the plan agent's selected candidate solves it at turn 0
        step(0, 0, 0, 0, selected=True), step(0, 0, 0, 1),
        step(0, 0, 1, 0), step(0, 0, 1, 1, selected=True, done=True, success=True),
        # problem 1: fails at turn 1; an unselected plan candidate would have solved it (best-of-K aside,
        # a candidate's own success is not the episode's)
        step(1, 0, 0, 0, selected=True), step(1, 0, 1, 0, selected=True),
        step(1, 1, 0, 0, selected=True),
        step(1, 1, 1, 0, selected=True, done=True), step(1, 1, 1, 1, done=True, success=True),
        # problem 2: abandoned at turn 1 (every plan candidate dropped): no outcome, left out everywhere
        step(2, 0, 0, 0, selected=True), step(2, 0, 1, 0, selected=True), step(2, 1, 0, 0, selected=True),
        # problem 3: the tool agent's step ends it (failed) before the plan agent acts
        step(3, 0, 0, 0, selected=True, done=True),
    ]  # fmt: skip
    outcomes = [ProblemOutcome(0, 0, True, True, 1, 1.0), ProblemOutcome(1, 0, False, True, 2, 0.0),
                ProblemOutcome(2, 0, False, False, 1, 0.0, dropped=True), ProblemOutcome(3, 0, False, True, 1, 0.0)]
    team = RolloutBatch(step=1, mode="tree", samples=samples, outcomes=outcomes).success_rate
    assert team == pytest.approx(1 / 3)
    assert episode_successes(samples) == {(0, 0): True, (1, 1): False, (3, 3): False}
    m = rollout_metrics(samples)
    assert m["agent/tool/success_rate"] == pytest.approx(1 / 3)  # problems 0, 1, 3 finished: the team's rate
    assert m["agent/plan/success_rate"] == pytest.approx(1 / 2)  # problems 0 and 1
    assert m["policy/plan/success_rate"] == pytest.approx(1 / 2)
    assert m["agent/plan/turn_0/success_rate"] == pytest.approx(1 / 2)
    assert m["agent/plan/turn_1/success_rate"] == 0.0  # problem 1 only
    assert m["agent/tool/turn_1/success_rate"] == 0.0  # problem 1 (problem 2 has no outcome)

    # independent mode: every sample is on its trajectory (selected); env_index numbers the trajectories
    trajectories = [
        make_sample(5, 0, 0, 0, env_index=0, mode="independent", selected=True),
        make_sample(5, 0, 1, 0, env_index=0, mode="independent", selected=True, done=True, success=True),
        make_sample(5, 0, 0, 1, env_index=1, mode="independent", selected=True),
        make_sample(5, 0, 1, 1, env_index=1, mode="independent", selected=True, done=True),
    ]
    assert rollout_metrics(trajectories)["agent/tool/success_rate"] == pytest.approx(1 / 2)


@pytest.mark.parametrize("mode", ["tree", "independent"])
def test_every_agent_of_a_real_rollout_has_the_batchs_team_success(mode):
    # both agents act in every episode, so each has exactly the team's success (the tool agent never ends
    # an episode: the share of its own samples that did is 0)
    from pettingllms.execution import EngineConfig, RolloutEngine, Router
    from tests.pettingllms.test_execution_tree import ScriptedBackend, env_config, worse_plan_policies

    router = Router({"tool": "tool", "plan": "plan"}, ScriptedBackend(worse_plan_policies()))
    config = EngineConfig(num_generations=2, sampling_mode=mode, seed=0)
    env = env_config("plan_path", ("tool", "plan"), max_turns=2)  # short enough that some episodes fail
    batch = RolloutEngine.from_registry("plan_path", env, router, config).rollout(list(range(12)), step=1)
    assert 0 < batch.success_rate < 1
    m = rollout_metrics(batch.samples)
    assert m["agent/tool/success_rate"] == m["agent/plan/success_rate"] == batch.success_rate
    assert not any(s.success for s in batch.samples if s.role == "tool")


# ------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"loss_type": "ppo"}, "`loss_type` must be one of"),
        ({"scale_rewards": "std"}, "`scale_rewards` must be one of"),
        ({"sampling_mode": "beam"}, "`sampling_mode` must be one of"),
        ({"epsilon": -0.1}, "`epsilon` must be a finite number"),
        ({"epsilon_high": 0.0}, "`epsilon_high` must be a finite number"),
        ({"dual_clip": 1.0}, "`dual_clip` must be a finite number > 1.0"),
        ({"beta": float("nan")}, "`beta` must be a finite number"),
        ({"warmup_ratio": 1.5}, r"`warmup_ratio` must be"),
        ({"train_seed_range": (5, 6), "problems_per_step": 2}, "`train_seed_range` \\[5, 6\\] must"),
        ({"train_seed_range": (0,)}, "`train_seed_range` must be two integers"),
        ({"lr_scheduler_type": "warm"}, "`lr_scheduler_type` must be one of"),
        ({"report_to": "mlflow"}, "`report_to`"),
        ({"save_total_limit": 0}, "`save_total_limit` must be an integer >= 1"),
    ],
)
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        ATGRPOConfig(**overrides)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_generations": 0}, "`num_generations` must be an integer >= 1, got 0"),
        ({"temperature": 0.0}, r"`temperature` must be a finite number > 0.0, got 0.0"),
        ({"transcripts_rate": 1.5}, r"`transcripts_rate` must be"),
    ],
)
def test_generation_settings_are_checked_once_where_declared(overrides, message):
    from pettingllms.config.rollout_section import RolloutConfig

    with pytest.raises(ValueError, match=message):
        RolloutConfig(**overrides)
    assert "num_generations" not in {f.name for f in dataclasses.fields(ATGRPOConfig)}


def test_config_accepts_trl_boolean_scale_rewards_and_round_trips():
    config = ATGRPOConfig(scale_rewards=False, warmup_ratio=0.25, max_steps=10, train_seed_range=[0, 50])
    assert config.scale_rewards == "none" and config.num_warmup_steps == 3
    assert config.train_seed_range == [0, 50]
    assert ATGRPOConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"unknown ATGRPOConfig field\(s\) \['num_problems'\]"):
        ATGRPOConfig.from_dict({"num_problems": 4})


def test_config_doubles_as_a_command_line_through_hf_argument_parser():
    from transformers import HfArgumentParser

    from pettingllms.config.rollout_section import RolloutConfig

    config, rollout = HfArgumentParser((ATGRPOConfig, RolloutConfig)).parse_args_into_dataclasses(
        [
            "--train_seed_range", "5", "50",
            "--epsilon_high", "0.28",
            "--scale_rewards", "none",
            "--lr_scheduler_type", "linear",
            "--num_generations", "2",
        ]
    )  # fmt: skip
    assert config.train_seed_range == [5, 50] and config.epsilon_high == 0.28
    assert config.scale_rewards == "none" and config.lr_scheduler_type == "linear"
    assert rollout.num_generations == 2


def test_micro_batch_groups_keep_rows_with_one_key_together():
    keys = ["a", "b", "a", "c", "b", "a", "c", "b", "a"]
    groups = micro_batch_groups(len(keys), batch_size=4, accumulation_steps=1, seed=3, row_keys=keys)
    order = torch.cat([m for g in groups for m in g]).tolist()
    assert sorted(order) == list(range(len(keys)))
    runs = [keys[i] for j, i in enumerate(order) if j == 0 or keys[i] != keys[order[j - 1]]]
    assert sorted(runs) == ["a", "b", "c"]  # each key is one contiguous run
    plain = torch.cat([m for g in micro_batch_groups(len(keys), 4, 1, seed=3) for m in g]).tolist()
    assert [i for i in plain if keys[i] == "a"] == [i for i in order if keys[i] == "a"]  # shuffled within
    orders = {tuple(torch.cat([m for g in micro_batch_groups(9, 4, 1, seed=s, row_keys=keys) for m in g]).tolist())
              for s in range(8)}
    assert len(orders) > 1  # the key order follows the seed
    with pytest.raises(ValueError, match="`row_keys` must hold one key per row \\(9\\), got 2"):
        micro_batch_groups(9, 4, 1, seed=0, row_keys=["a", "b"])


def test_at_grpo_re_exports_the_pieces_from_their_modules():
    import comlrl.scoring
    from pettingllms.trainer import grouping, losses, metrics, micro_batches, problems

    homes = {
        grouping: ["MemberTable", "at_grpo_group_key", "member_table", "sample_advantages"],
        losses: ["at_grpo_loss"],
        metrics: ["rollout_metrics"],
        micro_batches: ["micro_batch_groups"],
        problems: ["MAX_SEED_RANGE", "draw_problem_ids", "problem_order"],
        comlrl.scoring: ["per_token_logps"],
    }
    exported = sorted(name for names in homes.values() for name in names)
    assert sorted(set(at_grpo.__all__) - {"ATGRPOTrainer"}) == exported
    for module, names in homes.items():
        for name in names:
            assert getattr(at_grpo, name) is getattr(module, name), name
