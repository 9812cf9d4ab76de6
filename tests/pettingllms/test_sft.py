"""The sft warm start: oracle demonstrations through the agent protocol, tokenization, loss, training."""

from __future__ import annotations

import asyncio

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.policy import MultiAgentPolicy
from comlrl.rollout.prompts import render_prompt
from pettingllms.registry import make_agents, make_env
from pettingllms.stages.sft import sft_stage
from pettingllms.trainer.demonstrations import (
    Demonstration,
    check_disjoint_seeds,
    detour_turns,
    make_demonstrations,
    seed_range,
)
from pettingllms.trainer.sft import (
    SFTWarmStartConfig,
    sft_loss,
    sft_warm_start,
    shuffled_batches,
    tokenize_demonstration,
    tokenize_demonstrations,
)

SMALL_PATH = {"rows": 3, "cols": 3, "wall_density": 0.0, "turn_order": ["tool", "plan"], "max_turns": 2}
TOOLS = {"tool": {"tools": ["simulate"]}}


def _demos(seeds=range(6), config=SMALL_PATH):
    return make_demonstrations("plan_path", config, seeds, agent_options=TOOLS)


def _snapshot(params):
    return [p.detach().clone() for p in params]


def _changed(before, params):
    return [not torch.equal(b, p.detach()) for b, p in zip(before, params)]


def _train(policy, demos, **overrides):
    kwargs = dict(num_train_epochs=2, learning_rate=1e-2, per_device_train_batch_size=4, seed=0, max_length=2048, progress=False)
    kwargs.update(overrides)
    return sft_warm_start(policy, demos, **kwargs)


# ---- demonstrations --------------------------------------------------------------------------------

def test_demonstrations_hold_the_agents_own_prompts_and_the_oracle_answers():
    seeds = range(3, 8)
    demos = _demos(seeds)
    assert set(demos) == {"tool", "plan"} and all(len(v) == len(seeds) for v in demos.values())
    for seed, tool_demo, plan_demo in zip(seeds, demos["tool"], demos["plan"]):
        assert isinstance(tool_demo, Demonstration)
        # rebuild the first decision independently: same prompt, and the answer is a shortest path
        env = make_env("plan_path", SMALL_PATH)
        tool, plan = make_agents("plan_path", ["tool", "plan"], TOOLS)
        asyncio.run(env.reset(seed))
        assert tool.update_from_env(0, env) == tool_demo.prompt
        path = env.oracle_answer(env.state)
        assert tool_demo.response == "simulate: " + " ".join(path)
        assert plan_demo.response == "#### " + " ".join(path)
        tool.update_from_model(tool_demo.response)
        asyncio.run(env.step_agent(tool))
        assert plan.update_from_env(0, env) == plan_demo.prompt  # sees the tool's report
        assert "Tool proposal: " + " ".join(path) in plan_demo.prompt[-1]["content"]
        plan.update_from_model(plan_demo.response)
        assert asyncio.run(env.step_agent(plan)).success


def test_tool_candidates_put_the_oracle_path_among_random_calls_and_the_env_keeps_it():
    seeds = range(40)
    demos = make_demonstrations("plan_path", SMALL_PATH, seeds, agent_options=TOOLS, tool_candidates=3)
    assert demos == make_demonstrations("plan_path", SMALL_PATH, seeds, agent_options=TOOLS, tool_candidates=3)
    counts = set()
    for seed, tool_demo, plan_demo in zip(seeds, demos["tool"], demos["plan"]):
        env = make_env("plan_path", SMALL_PATH)
        tool, _plan = make_agents("plan_path", ["tool", "plan"], TOOLS)
        asyncio.run(env.reset(seed))
        path = " ".join(env.oracle_answer(env.state))
        lines = tool_demo.response.split("\n")
        counts.add(len(lines))
        assert all(line.startswith("simulate: ") for line in lines) and f"simulate: {path}" in lines
        tool.update_from_env(0, env)
        tool.update_from_model(tool_demo.response)
        assert asyncio.run(env.step_agent(tool)).local_reward == pytest.approx(1.0)  # the best call is kept
        assert plan_demo.response == f"#### {path}"
    assert counts == {1, 2, 3}
    accepting = make_demonstrations("plan_path", SMALL_PATH, seeds, agent_options=TOOLS, tool_candidates=3,
                                     accept_proposals=True)
    assert [d.response for d in accepting["tool"]] == [d.response for d in demos["tool"]]
    assert {d.response for d in accepting["plan"]} == {"#### proposal"}  # the proposal always solves here
    plain = _demos(seeds)
    assert all("\n" not in d.response for d in plain["tool"])  # default: the oracle's call alone
    with pytest.raises(ValueError, match="`tool_candidates` must be an integer >= 1"):
        make_demonstrations("plan_path", SMALL_PATH, seeds, agent_options=TOOLS, tool_candidates=0)
    with pytest.raises(ValueError, match="`tool_candidates` must be an integer >= 1"):
        SFTWarmStartConfig(tool_candidates=0)


def test_late_turn_fraction_records_later_turns_after_a_random_detour():
    config = {**SMALL_PATH, "max_turns": 3}
    seeds = range(30)
    plain = make_demonstrations("plan_path", config, seeds, agent_options=TOOLS)
    assert plain == make_demonstrations("plan_path", config, seeds, agent_options=TOOLS, late_turn_fraction=0.0)
    late = make_demonstrations("plan_path", config, seeds, agent_options=TOOLS, late_turn_fraction=1.0, detour_seed=3)
    assert late == make_demonstrations("plan_path", config, seeds, agent_options=TOOLS, late_turn_fraction=1.0,
                                       detour_seed=3)
    assert late != plain and late != make_demonstrations(
        "plan_path", config, seeds, agent_options=TOOLS, late_turn_fraction=1.0, detour_seed=4)

    def turn_of(demo):  # the tool prompt's turn counter
        return [line for line in demo.prompt[-1]["content"].splitlines() if line.startswith("Turn ")]

    assert {tuple(turn_of(d)) for d in plain["tool"]} == {tuple(turn_of(plain["tool"][0]))}  # every one from turn 1
    assert len({tuple(turn_of(d)) for d in late["tool"]}) > 1  # later turns too
    assert len(late["tool"]) < len(plain["tool"])  # a detour that solved the instance records nothing
    # detours: none at fraction 0, 1 .. max_turns - 1 turns otherwise, seeded by both seeds
    assert {detour_turns(s, 0.0, 3, 0) for s in range(50)} == {0}
    assert {detour_turns(s, 1.0, 3, 0) for s in range(50)} == {1, 2}
    assert detour_turns(7, 0.5, 3, 1) == detour_turns(7, 0.5, 3, 1)
    with pytest.raises(ValueError, match=r"`late_turn_fraction` must be in \[0, 1\]"):
        detour_turns(0, 1.5, 3, 0)


def test_single_agent_demonstrations_and_text_prompts():
    config = {**SMALL_PATH, "turn_order": ["single"]}
    demos = make_demonstrations("plan_path", config, range(3), agent_options={"single": {"prompt_style": "text"}})
    assert list(demos) == ["single"] and len(demos["single"]) == 3
    assert all(isinstance(d.prompt, str) and d.response.startswith("#### ") for d in demos["single"])


def test_unsolved_instances_are_an_error_or_skipped():
    config = {**SMALL_PATH, "max_answer_moves": 1}  # oracle paths longer than one move do not parse
    with pytest.raises(ValueError, match=r"oracle did not solve instance seed \d+"):
        make_demonstrations("plan_path", config, range(10), agent_options=TOOLS)
    demos = make_demonstrations("plan_path", config, range(10), agent_options=TOOLS, skip_failed=True)
    assert all(len(d.response.split()) == 2 for d in demos["plan"])  # "#### X": one-move instances only
    assert len(demos["plan"]) < 10


def test_demonstration_seeds_must_not_be_held_out_seeds():
    with pytest.raises(ValueError, match=r"demonstration seeds and held-out seeds must be disjoint; both contain \[5\]"):
        make_demonstrations("plan_path", SMALL_PATH, range(6), held_out_seeds=range(5, 9))
    make_demonstrations("plan_path", SMALL_PATH, range(5), held_out_seeds=range(5, 9), agent_options=TOOLS)


@given(st.sets(st.integers(0, 40)), st.sets(st.integers(0, 40)), st.booleans())
def test_check_disjoint_seeds_raises_exactly_on_overlap(a, b, as_range):
    if as_range:  # contiguous ranges take the interval path
        a = range(min(a), max(a) + 1) if a else range(0)
        b = range(min(b), max(b) + 1) if b else range(0)
    shared = set(a) & set(b)
    if shared:
        with pytest.raises(ValueError, match=str(sorted(shared)[:5]).replace("[", r"\[").replace("]", r"\]")):
            check_disjoint_seeds(a, b)
    else:
        check_disjoint_seeds(a, b)


def test_seed_range():
    assert seed_range(10, 3) == range(10, 13)
    with pytest.raises(ValueError, match="`count` must be an integer >= 0"):
        seed_range(0, -1)


# ---- tokenization and loss -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from comlrl.models import load_tokenizer

    return load_tokenizer(tiny_model_path)


def test_tokenized_prompt_is_the_engines_and_response_ends_with_eos(tokenizer):
    demos = _demos(range(2))
    for prompt, response in demos["tool"] + [("Solve: 2+2\n", "#### 4")]:
        example = tokenize_demonstration(prompt, response, tokenizer, tokenizer.eos_token_id)
        assert list(example.prompt_ids) == render_prompt(prompt, tokenizer)
        assert example.completion_ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(list(example.completion_ids[:-1])) == response
    chat = demos["tool"][0].prompt
    rendered = tokenizer.decode(list(tokenize_demonstration(chat, "x", tokenizer, 0).prompt_ids))
    assert rendered.endswith("<|im_start|>assistant\n")  # generation prompt, as the rollout renders it


def test_tokenize_demonstrations_drops_and_counts_long_examples(tokenizer):
    demos = _demos(range(3))["plan"]
    lengths = [len(tokenize_demonstration(p, r, tokenizer, 0)) for p, r in demos]
    limit = sorted(lengths)[1]
    kept, dropped = tokenize_demonstrations(demos, tokenizer, 0, limit)
    assert len(kept) == sum(n <= limit for n in lengths) and dropped == sum(n > limit for n in lengths)


def test_sft_loss_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -7.0, -9.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert sft_loss(logprobs, mask).item() == pytest.approx((1 + 2 + 3) / 3)
    with pytest.raises(ValueError, match="selects no tokens"):
        sft_loss(logprobs, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="must match"):
        sft_loss(logprobs, mask[:, :2])


def test_loss_masks_prompt_tokens_like_hf_labels(tiny_model_path, tokenizer):
    """The loss equals HF's causal-LM loss with every prompt position labelled -100 (ignored)."""
    from comlrl.models import load_model
    from comlrl.scoring import completion_logprobs

    model = load_model(tiny_model_path)
    demos = _demos(range(2))
    rows = [tokenize_demonstration(p, r, tokenizer, tokenizer.eos_token_id) for p, r in demos["tool"] + demos["plan"]]
    logprobs, mask = completion_logprobs(
        model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], pad_token_id=tokenizer.pad_token_id
    )
    ours = sft_loss(logprobs, mask)
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids = list(r.prompt_ids) + list(r.completion_ids)
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, len(r.prompt_ids) : len(ids)] = torch.tensor(r.completion_ids)
        attention[i, : len(ids)] = 1
    with torch.no_grad():
        reference = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)


def test_shuffled_batches_are_seeded_permutations():
    a = shuffled_batches(10, 4, torch.Generator().manual_seed(1))
    b = shuffled_batches(10, 4, torch.Generator().manual_seed(1))
    assert a == b and [len(x) for x in a] == [4, 4, 2]
    assert sorted(i for batch in a for i in batch) == list(range(10))


def test_config_validation_names_the_field():
    assert SFTWarmStartConfig(num_problems=3, seed_start=5).seeds == range(5, 8)
    for field, value in (("num_train_epochs", 0), ("per_device_train_batch_size", 1.5), ("learning_rate", 0), ("max_grad_norm", -1),
                         ("seed_start", -2), ("num_problems", True)):
        with pytest.raises(ValueError, match=f"`{field}` must be"):
            SFTWarmStartConfig(**{field: value})


# ---- training --------------------------------------------------------------------------------------

def test_shared_policy_trains_on_every_role_and_loss_decreases(tiny_model_path):
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    params = policy.trainable_parameters("shared")
    before = _snapshot(params)
    demos = _demos(range(6))
    metrics = _train(policy, demos, num_train_epochs=4)
    assert metrics["sft/shared/examples"] == 12 and metrics["sft/shared/dropped_too_long"] == 0
    assert metrics["sft/shared/steps"] == 4 * 3 == metrics["sft/steps"]
    assert policy.version("shared") == 12  # one bump per optimizer step
    assert metrics["sft/shared/loss_epoch4"] < metrics["sft/shared/loss_epoch1"] - 0.5
    assert metrics["sft/shared/loss_last"] < metrics["sft/shared/loss_first_step"] - 0.5
    assert metrics["sft/loss_last"] == metrics["sft/shared/loss_last"]
    assert all(_changed(before, params))


def test_lora_trains_only_the_agents_adapter(tiny_model_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    policy = MultiAgentPolicy.lora(tiny_model_path, ["tool", "plan"], lora)
    model = policy.handle("plan").model
    adapter_ids = {id(p) for agent in ("tool", "plan") for p in policy.trainable_parameters(agent)}
    base = [p for p in model.parameters() if id(p) not in adapter_ids]
    tool, plan = policy.trainable_parameters("tool"), policy.trainable_parameters("plan")
    snap_base, snap_tool, snap_plan = _snapshot(base), _snapshot(tool), _snapshot(plan)
    active = model.active_adapter
    demos = _demos(range(4))
    _train(policy, {"plan": demos["plan"]})  # the tool agent gets no demonstrations
    assert all(_changed(snap_plan, plan))  # two steps or more: LoRA A and B both move
    assert not any(_changed(snap_tool, tool)) and not any(_changed(snap_base, base))
    assert (policy.version("plan"), policy.version("tool")) == (2, 0)
    assert model.active_adapter == active
    _train(policy, demos)
    assert all(_changed(snap_tool, tool)) and not any(_changed(snap_base, base))


def test_per_agent_models_train_on_their_own_agents_demonstrations(tiny_model_path):
    policy = MultiAgentPolicy.per_agent({"tool": tiny_model_path, "plan": tiny_model_path})
    tool, plan = policy.trainable_parameters("tool"), policy.trainable_parameters("plan")
    snap_tool, snap_plan = _snapshot(tool), _snapshot(plan)
    metrics = _train(policy, {"tool": _demos(range(4))["tool"]})
    assert all(_changed(snap_tool, tool)) and not any(_changed(snap_plan, plan))
    assert metrics["sft/plan/examples"] == 0 and "sft/plan/loss_last" not in metrics
    assert policy.version("plan") == 0


def test_training_is_seeded_and_leaves_the_callers_rng_alone(tiny_model_path):
    demos = _demos(range(6))

    def run(seed):
        policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
        metrics = _train(policy, demos, seed=seed, per_device_train_batch_size=3, num_train_epochs=2)
        return metrics, [p.detach().clone() for p in policy.trainable_parameters("shared")]

    state = torch.get_rng_state()
    m1, w1 = run(0)
    assert torch.equal(torch.get_rng_state(), state)
    m2, w2 = run(0)
    m3, w3 = run(1)
    assert m1 == m2 and all(torch.equal(a, b) for a, b in zip(w1, w2))
    assert not all(torch.equal(a, b) for a, b in zip(w1, w3))  # another seed, another shuffle


def test_role_policies_let_a_shared_model_learn_a_role_it_does_not_play(tiny_model_path):
    demos = {**_demos(range(3)), **make_demonstrations("plan_path", {**SMALL_PATH, "turn_order": ["single"]}, range(3))}
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    roles = {"single": "shared", "tool": "shared", "plan": "shared"}
    metrics = _train(policy, demos, role_policies=roles)
    assert metrics["sft/shared/examples"] == 9
    # the order of role_policies is the order of the examples: the same as a policy that plays all three
    everyone = MultiAgentPolicy.shared(tiny_model_path, ["single", "tool", "plan"])
    assert _train(everyone, demos) == _train(MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"]), demos,
                                             role_policies=roles)
    with pytest.raises(ValueError, match=r"`role_policies` names policies \['other'\]"):
        _train(policy, demos, role_policies={**roles, "single": "other"})


def test_sft_stage_plays_every_workflow_and_trains_their_roles(tiny_model_path):
    from pettingllms.config import load_config
    from pettingllms.stages.sft import sft_demonstrations, sft_role_order, sft_settings

    overrides = ["env.rows=3", "env.cols=3", "sft.num_problems=3", "sft.num_train_epochs=1", "sft.per_device_train_batch_size=4",
                 "sft.workflows=[[single], [tool, plan]]"]
    config = load_config("plan_path/L1", overrides)
    settings = sft_settings("sft", config)
    assert sft_role_order(config, settings) == ["single", "tool", "plan"]
    assert sft_role_order(load_config("plan_path/L1"), sft_settings("sft", load_config("plan_path/L1"))) == ["tool", "plan"]
    demos = sft_demonstrations(config, settings)
    assert {role: len(items) for role, items in demos.items()} == {"single": 3, "tool": 3, "plan": 3}
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    assert sft_stage(policy, config, progress=False)["sft/shared/examples"] == 9


def test_input_errors_name_what_is_wrong(tiny_model_path):
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    with pytest.raises(ValueError, match=r"names agent\(s\) \['critic'\] that the policy lacks"):
        _train(policy, {"critic": [("hi", "there")]})
    with pytest.raises(ValueError, match="`num_train_epochs` must be an integer >= 1"):
        _train(policy, _demos(range(1)), num_train_epochs=0)
    metrics = _train(policy, _demos(range(2)), max_length=8)  # every example is longer: nothing trains
    assert metrics["sft/shared/dropped_too_long"] == 4 and metrics["sft/steps"] == 0
    assert policy.version("shared") == 0


def test_sft_stage_runs_from_a_config(tiny_model_path, tmp_path):
    from comlrl.reporting import MetricsLogger
    from pettingllms.config import ConfigError, load_config

    overrides = ["env.rows=3", "env.cols=3", "sft.num_problems=3", "sft.num_train_epochs=1", "sft.per_device_train_batch_size=4"]
    config = load_config("plan_path/L1", overrides)
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    logger = MetricsLogger(tmp_path, "none")
    metrics = sft_stage(policy, config, logger=logger, progress=False)
    assert metrics["sft/shared/examples"] == 6 and metrics["sft/steps"] == 2
    assert [r["step"] for r in logger.history] == [1, 2] and "sft/shared/loss" in logger.history[0]
    with pytest.raises(ValueError, match="must be disjoint"):
        sft_stage(policy, load_config("plan_path/L1", [*overrides, "eval.seed_start=2"]), progress=False)
    with pytest.raises(ConfigError, match="section `sft`: `num_train_epochs` must be an integer >= 1"):
        sft_stage(policy, load_config("plan_path/L1", [*overrides, "sft.num_train_epochs=0"]), progress=False)


# ---- learning (slow) -------------------------------------------------------------------------------

@pytest.mark.slow
def test_warm_start_teaches_the_small_model_plan_path(model_cache):
    """On 4x4 Plan-Path the ``small`` preset (random init) learns the answer format and a share of the
    paths from 200 oracle demonstrations (3 epochs, 75 optimizer steps, ~45 s on one thread).

    Measured (torch 2.13 CPU): every held-out first answer parses, 7/32 reach the goal, 1/32 is the
    oracle's path verbatim (others take another route or stop short); an untrained model parses none.
    """
    from comlrl.rollout.hf import HFBackend
    from comlrl.rollout.types import GenerationRequest, SamplingParams
    from pettingllms.envs.game_parsers import extract_final_answer, parse_move_answer
    from pettingllms.envs.plan_path.state import apply_moves

    config = {"rows": 4, "cols": 4, "wall_density": 0.2, "turn_order": ["single"], "max_turns": 3}
    held_out = range(50_000, 50_032)
    train = make_demonstrations("plan_path", config, range(200), held_out_seeds=held_out)
    policy = MultiAgentPolicy.single("small", ["single"])
    metrics = sft_warm_start(policy, train, num_train_epochs=3, learning_rate=2e-3, per_device_train_batch_size=8, seed=0,
                             max_length=1024, progress=False)
    assert metrics["sft/single/loss_last"] < 0.25 * metrics["sft/single/loss_first_step"]

    env = make_env("plan_path", config)
    (agent,) = make_agents("plan_path", ["single"])
    prompts, levels = [], []
    for seed in held_out:
        asyncio.run(env.reset(seed))
        prompts.append(agent.update_from_env(0, env))
        levels.append(env.state.level)
    outs = HFBackend(policy).generate(
        [GenerationRequest(prompt=p, policy="single", seed=0) for p in prompts],
        SamplingParams(temperature=0.0, max_new_tokens=24),
    )
    parsed, reached, exact = 0, 0, 0
    for out, level, demo in zip(outs, levels, make_demonstrations("plan_path", config, held_out)["single"]):
        text = out[0].text
        exact += text.strip() == demo.response
        try:
            moves = parse_move_answer(extract_final_answer(text), agent._answer_context())
        except Exception:
            continue
        parsed += 1
        reached += apply_moves(level, level.start, moves).reached
    n = len(held_out)
    print(f"held-out first answers: parsed {parsed}/{n}, reach the goal {reached}/{n}, exact {exact}/{n}")
    assert parsed >= 0.5 * n  # the format is learned
    # and some paths: an untrained model reaches none. This warm start reaches only 1 of 32 in one answer
    # (lists must end on the goal): the from-scratch model barely reads the board yet (see issue #8 notes).
    assert reached >= 1


def test_warm_start_steps_through_the_update_engine(tiny_model_path, monkeypatch):
    from comlrl.trainers.core import optimization

    norms = []
    take = optimization.GradientSteps.take
    monkeypatch.setattr(optimization.GradientSteps, "take", lambda self: norms.append(self.last_grad_norm) or take(self))
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    metrics = _train(policy, _demos(range(3)), num_train_epochs=1, max_grad_norm=0.0)
    assert len(norms) == metrics["sft/steps"] == 2 and all(n > 0 for n in norms)  # 6 examples, batches of 4


class _Recorder:
    """A logger that keeps what it is given."""

    def __init__(self):
        self.rows = []

    def log(self, row, step):
        self.rows.append((step, dict(row)))


def test_accumulating_two_batches_is_one_batch_of_both(tiny_model_path, monkeypatch):
    """k=2 over two batches of 3 is the step of one batch of 6: each batch's NLL weighted by its tokens and
    the step divided by the step's tokens (the same shuffled examples: one permutation, cut differently).
    Compared: the step's (clipped) gradients, its loss and norm (Adam's first update is about sign(g), so the
    weights would magnify float rounding of near-zero gradients)."""
    from comlrl.trainers.core import optimization

    grads = []
    take = optimization.GradientSteps.take
    monkeypatch.setattr(optimization.GradientSteps, "take", lambda self: grads.append(
        [p.grad.clone() for p in self._params()]) or take(self))  # fmt: skip
    demos = _demos(range(3))  # 6 examples
    rows = []
    for batch_size, k in ((3, 2), (6, 1)):
        policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
        logger = _Recorder()
        metrics = _train(policy, demos, num_train_epochs=1, per_device_train_batch_size=batch_size,
                         gradient_accumulation_steps=k, logger=logger)
        assert metrics["sft/shared/steps"] == metrics["sft/steps"] == 1 and policy.version("shared") == 1
        rows.append(logger.rows)
    assert len(grads) == 2 and [step for step, _ in rows[0]] == [step for step, _ in rows[1]] == [1]
    for key in ("sft/shared/loss", "sft/shared/grad_norm"):
        assert rows[0][0][1][key] == pytest.approx(rows[1][0][1][key], rel=1e-5)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_accumulation_groups_batches_per_epoch(tiny_model_path):
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    # 12 examples in batches of 4: 3 batches per epoch, k=2: steps of 2 and 1 batches, 2 per epoch.
    metrics = _train(policy, _demos(range(6)), num_train_epochs=2, gradient_accumulation_steps=2)
    assert metrics["sft/shared/steps"] == metrics["sft/steps"] == 4 == policy.version("shared")


def test_linear_schedule_sets_each_steps_rate_as_transformers_would(tiny_model_path, monkeypatch):
    from transformers import get_scheduler

    from comlrl.trainers.core import optimization

    rates = []
    take = optimization.GradientSteps.take
    monkeypatch.setattr(
        optimization.GradientSteps, "take", lambda self: rates.append(self.learning_rate()) or take(self)
    )
    policy = MultiAgentPolicy.shared(tiny_model_path, ["tool", "plan"])
    # 12 examples in batches of 4, 2 epochs: 6 optimizer steps, one of them warm-up.
    metrics = _train(policy, _demos(range(6)), num_train_epochs=2, learning_rate=1e-2,
                     lr_scheduler_type="linear", warmup_steps=1)
    horizon = int(metrics["sft/steps"])
    assert horizon == 6 == len(rates)
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-2)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=1, num_training_steps=horizon)
    expected = []
    for _ in range(horizon):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx(expected) and rates[0] == 0.0 and rates[1] == pytest.approx(1e-2)
    assert rates[1:] == sorted(rates[1:], reverse=True) and len(set(rates)) == horizon  # a new rate every step


def test_step_knobs_are_the_shared_optimizer_step_fields():
    from comlrl.trainers.core.training_knobs import OptimizerStepFields

    assert issubclass(SFTWarmStartConfig, OptimizerStepFields)
    config = SFTWarmStartConfig(lr_scheduler_type=" Cosine ", warmup_ratio=0.1, gradient_accumulation_steps=3)
    assert (config.lr_scheduler_type, config.max_grad_norm, config.gradient_accumulation_steps) == ("cosine", 1.0, 3)
    for field, value in (("gradient_accumulation_steps", 0), ("warmup_ratio", 2.0), ("lr_scheduler_type", "nope")):
        with pytest.raises(ValueError, match=f"`{field}` must be"):
            SFTWarmStartConfig(**{field: value})
    with pytest.raises(ValueError, match="lr_scheduler_kwargs"):
        SFTWarmStartConfig(lr_scheduler_type="linear", lr_scheduler_kwargs={"num_cycles": 2})
