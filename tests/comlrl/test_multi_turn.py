"""Multi-turn MAGRPO / IAC / MAAC: the public ``external_transition`` protocol, the rollout tree and its returns,
the actor-critic trajectories and their one-step targets, early termination, ``joint_mode`` aligned / cross,
``discount``, prompt passthrough, evaluation per turn and an exact resume, on the tiny model.

Returns and targets are checked against independent computations from the rewards the episodes recorded
(not against the module's own functions, which get their own hand-computed cases below)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from comlrl.rl import agent_candidate_returns, joint_indices, rewards_to_go, td_targets, tree_returns
from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

ITEMS = [{"prompt": f"Plan step {i}:"} for i in range(2)]


# ---- the pure functions, by hand --------------------------------------------------------------------------

def test_joint_actions_tree_returns_candidate_returns_and_td_targets_by_hand():
    assert joint_indices(2, 2, "aligned") == [(0, 0), (1, 1)]
    assert joint_indices(2, 2, "cross") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert joint_indices(1, 3, "cross") == [(0,), (1,), (2,)]
    with pytest.raises(ValueError, match=r"`joint_mode` must be one of \['aligned', 'cross'\], got 'diag'"):
        joint_indices(2, 2, "diag")
    # G_j = r_j + γ · mean(child j); a leaf slot keeps r_j
    assert tree_returns([1.0, 2.0], [[3.0, 5.0], None], 0.5) == [1.0 + 0.5 * 4.0, 2.0]
    assert tree_returns([1.0], [[2.0, math.nan]], 1.0)[0] != tree_returns([1.0], [[2.0, math.nan]], 1.0)[0]  # nan
    # cross: a candidate's return is the sum over the joint actions it is in
    joints = joint_indices(2, 2, "cross")
    assert agent_candidate_returns([1.0, 2.0, 3.0, 4.0], joints, 0, 2) == [3.0, 7.0]
    assert agent_candidate_returns([1.0, 2.0, 3.0, 4.0], joints, 1, 2) == [4.0, 6.0]
    assert td_targets([1.0, 2.0, 3.0], [0.5, 0.25, 99.0], 0.9) == [1.0 + 0.9 * 0.5, 2.0 + 0.9 * 0.25, 3.0]
    assert rewards_to_go([1.0, 2.0, 3.0]) == [6.0, 5.0, 3.0]


# ---- helpers ----------------------------------------------------------------------------------------------

class Transition:
    """The public transition signature; records every call and answers a prompt built from the responses."""

    def __init__(self):
        self.calls = []

    def __call__(self, prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
        self.calls.append(dict(prompt=prompt, agent_completions=list(agent_completions), num_agents=num_agents,
                               prompt_history=[list(h) for h in prompt_history_per_agent],
                               response_history=[list(h) for h in response_history_per_agent]))
        return [f"Revise ({len(c)} chars):" for c in agent_completions]


def length_reward(first, second):
    """A joint reward that differs between candidates (the untrained model's texts differ in length)."""
    return [float(len(first[0]) % 3) - 0.5 * float(len(second[0]) % 2)]


def magrpo(tmp_path, model, transition, **overrides):
    values = dict(output_dir=str(tmp_path / "magrpo"), num_generations=2, max_new_tokens=5, temperature=1.0,
                  top_p=1.0, agent_learning_rate=1e-2, num_train_epochs=1, rollout_buffer_size=2, logging_steps=1,
                  eval_interval=0, disable_tqdm=True, seed=5, early_termination_threshold=None)
    values.update(overrides)
    return MAGRPOTrainer(agent_model=model, num_agents=2, reward_func=length_reward, train_dataset=ITEMS,
                         eval_dataset=ITEMS, args=MAGRPOConfig(**values), external_transition=transition)


def weights(trainer):
    return {n: [p.detach().clone() for p in trainer.policy.trainable_parameters(n)] for n in trainer.policy.policies}


def moved(before, after):
    return all(any(not torch.equal(a, b) for a, b in zip(before[n], after[n])) for n in before)


def capture(monkeypatch, trainer):
    """Record the trees built (through the RL stage's host) and every training_step's arguments."""
    trees, steps = [], []
    build = trainer.rl.host.build_trees

    def recording_build(*args, **kwargs):
        roots = build(*args, **kwargs)
        trees.append(roots)
        return roots

    original = trainer.rl.training_step

    def recording_step(samples, rewards, where="", **kwargs):
        steps.append(dict(samples=list(samples), rewards=[list(r) for r in rewards], **kwargs))
        return original(samples, rewards, where, **kwargs)

    monkeypatch.setattr(trainer.rl, "host", dataclasses.replace(trainer.rl.host, build_trees=recording_build))
    monkeypatch.setattr(trainer.rl, "training_step", recording_step)
    return trees, steps


def expected_returns(node, discount):
    """Independent recursion: per joint action, its reward plus discount x the mean of its child's returns."""
    out = []
    for j, reward in enumerate(node.rewards):
        child = node.children[j]
        out.append(reward if child is None else reward + discount * sum(expected_returns(child, discount)) / len(child.rewards))
    return out


# ---- MAGRPO: the tree ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "discount"), [("aligned", 1.0), ("cross", 0.5)])
def test_magrpo_tree_calls_the_transition_per_joint_action_and_trains_on_the_tree_returns(
    mode, discount, tiny_model_path, tmp_path, monkeypatch
):
    transition = Transition()
    trainer = magrpo(tmp_path, tiny_model_path, transition, joint_mode=mode, discount=discount)
    trees, steps = capture(monkeypatch, trainer)
    before = weights(trainer)
    trainer.train()
    assert moved(before, weights(trainer))  # both agents' weights changed
    joints = 2 if mode == "aligned" else 4
    assert len(transition.calls) == len(ITEMS) * joints  # one child per joint action of every root
    for call in transition.calls:
        assert call["prompt"] in [item["prompt"] for item in ITEMS] and call["num_agents"] == 2
        assert [len(h) for h in call["prompt_history"]] == [1, 1] and [len(h) for h in call["response_history"]] == [1, 1]
        assert call["agent_completions"] == [h[-1] for h in call["response_history"]]
    (roots,) = trees
    for root in roots:
        children = [c for c in root.children if c is not None]
        assert len(children) == joints and all(c.turn == 1 and c.children == [None] * joints for c in children)
        for j, child in enumerate(root.children):  # the child's prompts are the transition's, formatted
            texts = [root.sample.candidates[a][root.joints[j][a]].text for a in range(2)]
            assert child.sample.prompts == [f"Revise ({len(t)} chars):" for t in texts]
        assert root.returns == pytest.approx(expected_returns(root, discount))
    # training_step got each node's per-agent returns: aligned the joint return, cross the candidate's sums
    turn_0 = [s for s in steps if s["turn"] == 0]
    got = [value for s in turn_0 for row in s["agent_returns"][1] for value in row]
    want = []
    for root in roots:
        returns = expected_returns(root, discount)
        want += [sum(v for v, joint in zip(returns, root.joints) if joint[1] == k) for k in range(2)]
    assert got == pytest.approx(want)
    records = [json.loads(line) for line in (tmp_path / "magrpo" / "metrics.jsonl").read_text().splitlines()]
    assert any("turn_1/reward_mean" in r for r in records) and any("turn_2/expected_return" in r for r in records)
    assert trainer.env_step == len(ITEMS) * joints * (1 + joints)  # every scored joint action is a step


def test_early_termination_ends_a_node_whose_mean_reward_passes_the_threshold(tiny_model_path, tmp_path, monkeypatch):
    transition = Transition()
    trainer = magrpo(tmp_path, tiny_model_path, transition, early_termination_threshold=-100.0)
    trees, steps = capture(monkeypatch, trainer)
    trainer.train()
    assert transition.calls == [] and {s["turn"] for s in steps} == {0}
    assert all(child is None for root in trees[0] for child in root.children)


def test_passthrough_sends_the_transition_s_prompts_as_they_are(tiny_model_path, tmp_path, monkeypatch):
    formatter = lambda item: f"[formatted] {item['prompt']}"  # noqa: E731
    args = MAGRPOConfig(output_dir=str(tmp_path / "p"), num_generations=2, max_new_tokens=4, num_train_epochs=1,
                        rollout_buffer_size=2, eval_interval=0, disable_tqdm=True, early_termination_threshold=None)
    for passthrough, prefix in ((False, "[formatted] Revise"), (True, "Revise")):
        trainer = MAGRPOTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=length_reward,
                                train_dataset=ITEMS, formatters=formatter, external_transition=Transition(),
                                args=MAGRPOConfig(**{**args.to_dict(), "external_prompt_passthrough": passthrough}))
        trees, _ = capture(monkeypatch, trainer)
        trainer.train()
        child = next(c for c in trees[0][0].children if c is not None)
        assert all(p.startswith(prefix) for p in child.sample.prompts), child.sample.prompts
        assert trees[0][0].sample.prompts[0].startswith("[formatted] Plan step")


def test_a_bad_transition_is_an_error_naming_it(tiny_model_path, tmp_path):
    trainer = magrpo(tmp_path, tiny_model_path, lambda **kw: "one prompt for everyone")
    with pytest.raises(ValueError, match=r"External transition must return per-agent prompts: a list of 2, got str"):
        trainer.train()


# ---- actor-critic: trajectories and one-step targets ------------------------------------------------------

@pytest.mark.parametrize("cls", [IACTrainer, MAACTrainer], ids=["iac", "maac"])
def test_actor_critic_trajectories_train_on_one_step_targets(cls, tiny_model_path, tmp_path, monkeypatch):
    config = IACConfig if cls is IACTrainer else MAACConfig
    transition = Transition()
    args = config(output_dir=str(tmp_path / "ac"), num_agents=2, num_turns=3, max_new_tokens=4, temperature=1.0,
                  top_p=1.0, agent_learning_rate=1e-2, critic_learning_rate=1e-2, num_train_epochs=1,
                  rollout_buffer_size=2, train_batch_size=4, discount=0.8, early_termination_threshold=None,
                  eval_interval=0, disable_tqdm=True, seed=2, critic_model_name=tiny_model_path)
    trainer = cls(agent_model=tiny_model_path, reward_func=length_reward, train_dataset=ITEMS, args=args,
                  external_transition=transition)
    _, steps = capture(monkeypatch, trainer)
    before, critics = weights(trainer), [[p.detach().clone() for p in c.critic_parameters()] for c in trainer.critics]
    trainer.train()
    assert moved(before, weights(trainer))
    assert all(any(not torch.equal(a, b) for a, b in zip(old, c.critic_parameters())) for old, c in zip(critics, trainer.critics))
    assert len(transition.calls) == len(ITEMS) * 2  # after turns 1 and 2 of each item's one trajectory
    assert [s["turn"] for s in steps] == [0, 1, 2]
    # per turn t and item: target = r_t + 0.8 · V(h_{t+1}) (the last turn: r_t), V taken at collection
    by_turn = {s["turn"]: s for s in steps}
    for critic in range(len(trainer.critics)):
        for t in (0, 1, 2):
            step = by_turn[t]
            for i in range(len(ITEMS)):
                reward = step["rewards"][i][0]
                later = 0.8 * by_turn[t + 1]["old_values"][critic][i][0] if t < 2 else 0.0
                agent = critic if cls is IACTrainer else 0
                assert step["agent_returns"][agent][i][0] == pytest.approx(reward + later)


def test_multi_turn_actor_critic_keeps_the_public_num_generations_rule():
    with pytest.raises(ValueError, match=r"Multi-turn IAC currently supports num_generations == 1"):
        IACConfig(num_turns=2, num_generations=2)
    with pytest.raises(ValueError, match=r"Multi-turn MAAC currently supports num_generations == 1"):
        MAACConfig(num_turns=2, num_generations=4)


# ---- evaluation and resume ----------------------------------------------------------------------------------

def test_evaluate_plays_every_turn_and_reports_per_turn_rewards_and_rewards_to_go(tiny_model_path, tmp_path):
    seen = {}

    def logger(agent_completions_turns, batch_items, prompts):
        seen.update(turns=agent_completions_turns, items=batch_items, prompts=prompts)
        return [{"turn_1/length": float(len(a[0]))} for a in agent_completions_turns[0]]

    def aggregator(metrics, num_turns):
        seen["num_turns"] = num_turns
        return {"turn_1/length": sum(m["turn_1/length"] for m in metrics) / len(metrics)}

    trainer = MAGRPOTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=length_reward, train_dataset=ITEMS,
                            eval_dataset=ITEMS, eval_logger=logger, eval_aggregator=aggregator,
                            external_transition=Transition(),
                            args=MAGRPOConfig(output_dir=str(tmp_path / "e"), num_turns=3, max_new_tokens=4,
                                              eval_num_samples=2, disable_tqdm=True, early_termination_threshold=-9.0))
    metrics = trainer.evaluate()
    assert seen["num_turns"] == 3 and len(seen["turns"]) == 2 and all(len(item) == 3 for item in seen["turns"][0])
    rewards = [[length_reward([seen["turns"][0][i][t]], [seen["turns"][1][i][t]])[0] for t in range(3)] for i in range(2)]
    for t in range(3):  # evaluation never stops early, whatever the threshold
        assert metrics[f"eval/turn_{t + 1}/reward_mean"] == pytest.approx(sum(r[t] for r in rewards) / 2)
        assert metrics[f"eval/turn_{t + 1}/expected_return"] == pytest.approx(sum(sum(r[t:]) for r in rewards) / 2)
    assert metrics["eval/turn_1/length"] == pytest.approx(sum(len(a[0]) for a in seen["turns"][0]) / 2)


def test_a_multi_turn_run_resumes_exactly(tiny_model_path, tmp_path):
    def run(folder, epochs, resume=None):
        trainer = magrpo(tmp_path / folder, tiny_model_path, Transition(), num_train_epochs=epochs)
        trainer.train(checkpoint_dir=str(tmp_path / folder / "ckpt"), resume_from_checkpoint=resume)
        return trainer

    whole = run("whole", 2)
    run("half", 1)
    resumed = run("half", 2, resume=str(tmp_path / "half" / "ckpt" / "checkpoint-1"))
    for name, values in weights(whole).items():
        assert all(torch.equal(a, b) for a, b in zip(values, weights(resumed)[name])), name
