"""Multi-turn preference learning: pairs from AT-GRPO's trees (``pettingllms.trainer.tree_pairs``) and the
``madpo_from_trees`` stage.

Checked: winner and loser come from the hand-computed mixed rewards of a scripted decision point (ties
dropped, the selection rules of comlrl), the pair keeps the exact sampled ids and only the acting agent's
entry differs between the sides; the round files round-trip (old files without ``turn`` / ``agent`` still
read) and the replay buffer draws only stored pairs; a non-acting agent's margin is exactly 0; pairs from
a real tree rollout are consistent with its groups; the hybrid pipeline runs from the CLI and its MADPO stage
moves the policy; misplaced stages are refused before the run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
import torch

from comlrl.trainers.preference.records import PreferencePair, RoundFile, write_round
from comlrl.trainers.preference.replay import PreferenceReplayBuffer
from pettingllms.config import ConfigError, load_config
from pettingllms.execution import EngineConfig, PolicyConfig, RolloutEngine, build_policy, build_router
from pettingllms.execution.samples import GroupKey, Sample
from pettingllms.pipeline import check_pipeline
from pettingllms.trainer.tree_pairs import decision_point_pairs, tree_pairs, write_step_pairs


def sample(candidate, reward, *, agent=1, turn=2, prompt=(5, 6, 7), mode="tree"):
    """One sibling of a decision point (the fields pairs read are set; the rest neutral)."""
    return Sample(
        problem_id=3, env_index=0, turn=turn, agent_index=agent, role="plan", candidate=candidate, policy="shared",
        policy_version=0, seed=None, prompt="p", response=f"answer {candidate}", prompt_ids=list(prompt),
        completion_ids=[10 + candidate, 20 + candidate], logprobs=[-1.0, -1.0], finish_reason="stop", action=None,
        parse_error=None, failure=None, feedback="", local_reward=0.0, global_reward=0.0, alpha=1.0,
        reward=reward + 0.25, done=False, success=False, group_key=GroupKey(3, turn, agent), mode=mode,
        group_reward=reward,
    )


def test_a_decision_point_gives_the_pairs_its_rewards_rank_with_the_sampled_ids():
    members = [sample(0, 0.5), sample(1, 1.0), sample(2, 0.5), sample(3, -1.0)]
    pairs = decision_point_pairs(random.sample(members, 4), 2, "the prompt")  # any order in
    # reward_gap: every strictly better (winner, loser), biggest gap first; the tie (0, 2) gives no pair
    assert [(p.winner_completions[1], p.loser_completions[1]) for p in pairs] == [
        ("answer 1", "answer 3"), ("answer 0", "answer 3"), ("answer 2", "answer 3"), ("answer 1", "answer 0"),
        ("answer 1", "answer 2"),
    ]
    first = pairs[0]
    assert (first.winner_reward, first.loser_reward, first.candidate_reward_mean) == (1.0, -1.0, 0.25)
    assert first.raw_rewards == [1.25, -0.75] and (first.turn, first.agent) == (2, 1)
    assert first.prompts == ["the prompt", "the prompt"] and first.prompt_token_ids == [[5, 6, 7], [5, 6, 7]]
    assert first.winner_token_ids == [[], [11, 21]] and first.loser_token_ids == [[], [13, 23]]
    assert first.winner_completions[0] == first.loser_completions[0] == ""  # the other agent did not act
    assert len(decision_point_pairs(members, 2, "p", pairs_per_group=2)) == 2
    shuffled = decision_point_pairs(members, 2, "p", pair_selection="random", rng=random.Random(0))
    assert sorted((p.winner_reward, p.loser_reward) for p in shuffled) == sorted((p.winner_reward, p.loser_reward) for p in pairs)
    assert decision_point_pairs([sample(0, 1.0), sample(1, 1.0)], 2, "p") == []  # all tied: nothing to prefer
    assert decision_point_pairs([sample(0, float("nan")), sample(1, 1.0)], 2, "p") == []  # a dropped group


def test_siblings_must_share_agent_and_prompt_and_trajectories_are_refused():
    with pytest.raises(ValueError, match=r"share one agent and one prompt"):
        decision_point_pairs([sample(0, 1.0), sample(1, 0.0, prompt=(9,))], 2, "p")
    with pytest.raises(ValueError, match=r"pairs from trees need tree rollouts .* got modes \['independent'\]"):
        tree_pairs([sample(0, 1.0, mode="independent")], 2, lambda s: "p")


def test_round_files_round_trip_old_files_still_read_and_the_buffer_draws_stored_pairs(tmp_path):
    pairs = decision_point_pairs([sample(0, 0.0), sample(1, 1.0), sample(2, 2.0)], 2, "prompt")
    for step in (1, 2, 3):
        write_step_pairs(tmp_path / "tree_pairs", step, pairs[: step])
    back = RoundFile(tmp_path / "tree_pairs" / "iteration_0003.json").load_all()
    for mine, theirs in zip(back, pairs):
        assert (mine.turn, mine.agent, mine.winner_token_ids, mine.loser_token_ids) == (
            theirs.turn, theirs.agent, theirs.winner_token_ids, theirs.loser_token_ids)
    old = dataclasses.replace(pairs[0], turn=None, agent=None)
    write_round(tmp_path / "old" / "iteration_0001.json", 1, [old])
    record = json.loads((tmp_path / "old" / "iteration_0001.json").read_text())["pairs"][0]
    assert "turn" not in record and "agent" not in record  # a one-turn pair's record is the public nine fields
    assert PreferencePair.from_record(record).turn is None
    buffer = PreferenceReplayBuffer(tmp_path / "replay", mode="lambda_decay", lam=0.5, sample_size=12, seed=1)
    for step in (1, 2, 3):
        buffer.add_round(RoundFile(tmp_path / "tree_pairs" / f"iteration_{step:04d}.json").load_all())
    drawn = buffer.sample()
    assert len(drawn) == 12 and all(p.to_record() in [q.to_record() for q in pairs] for p in drawn)


def test_a_non_acting_agent_s_margin_is_exactly_zero(tiny_model_path, tmp_path):
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
    from comlrl.trainers.preference.losses import madpo_agent_losses

    trainer = MADPOTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=lambda a, b: 0.0,
                           args=MADPOConfig(output_dir=str(tmp_path), disable_tqdm=True))
    pairs = decision_point_pairs([sample(0, 0.0), sample(1, 1.0)], 2, "prompt")
    margins = trainer.compute_margins(pairs)
    assert torch.equal(margins[0], torch.zeros(1)) and margins[1].requires_grad
    losses = madpo_agent_losses(margins, 0.1)
    assert torch.allclose(losses[1], -torch.nn.functional.logsigmoid(0.1 * margins[1]).mean())


def test_pairs_of_a_real_tree_rollout_follow_its_groups(tiny_model_path):
    policy = build_policy(PolicyConfig(policy_level="L1", model=tiny_model_path), ["tool", "plan"])
    engine = RolloutEngine.from_registry(
        "plan_path", {"rows": 4, "cols": 4, "turn_order": ["tool", "plan"], "max_turns": 2}, build_router(policy),
        EngineConfig(num_generations=3, max_completion_length=6, seed=0),
    )
    batch = engine.rollout(problem_ids=[0, 1], step=0)
    for s in batch.samples:  # rewards of an untrained model tie; give the candidates distinct ones
        s.group_reward = s.reward + 0.5 * s.candidate
    tokenizer = policy.handle("shared").tokenizer
    pairs = tree_pairs(batch.samples, 2, lambda s: tokenizer.decode(s.prompt_ids), pair_selection="all")
    groups = {}
    for s in batch.samples:
        groups.setdefault((s.group_key.problem_id, s.turn, s.agent_index), []).append(s)
    assert len(pairs) == sum(3 for members in groups.values())  # 3 strictly ordered pairs of 3 distinct rewards
    for pair in pairs:
        members = [m for (_, turn, agent), ms in groups.items() for m in ms if (turn, agent) == (pair.turn, pair.agent)]
        by_ids = {tuple(m.completion_ids): m for m in members}
        winner, loser = by_ids[tuple(pair.winner_token_ids[pair.agent])], by_ids[tuple(pair.loser_token_ids[pair.agent])]
        assert winner.group_reward > loser.group_reward and winner.group_key == loser.group_key
        assert pair.prompt_token_ids[pair.agent] == winner.prompt_ids == loser.prompt_ids


def test_misplaced_or_independent_madpo_from_trees_is_refused_before_the_run():
    with pytest.raises(ConfigError, match=r"stage `madpo_from_trees` \(madpo_from_trees\) learns from the trees .* follows sft"):
        check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny", "pipeline=[sft, madpo_from_trees]"]))
    with pytest.raises(ConfigError, match=r"needs tree sampling \(at_grpo.sampling_mode=tree\)"):
        check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny", "at_grpo.sampling_mode=independent",
                                                    "pipeline=[at_grpo, madpo_from_trees]"]))


@pytest.mark.slow
def test_the_hybrid_pipeline_runs_from_the_cli_and_its_madpo_stage_trains(tiny_model_path, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from pettingllms.cli import main
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from tests.helpers.bonus_trainer import add_candidate_bonus

    original = ATGRPOTrainer.generate_and_score  # an untrained model ties every group: give the candidates an order
    monkeypatch.setattr(ATGRPOTrainer, "generate_and_score", lambda self, ids, step: add_candidate_bonus(original(self, ids, step)))
    run = tmp_path / "run"
    code = main(["train", "plan_path/L1_hybrid", f"model.name={tiny_model_path}", f"run.output_dir={run}",
                 "run.progress=false", "sft.num_problems=4", "sft.num_train_epochs=1", "env.max_turns=2",
                 "rollout.num_generations=2", "rollout.max_completion_length=6", "at_grpo.max_steps=2",
                 "at_grpo.problems_per_step=2", "eval.num_instances=2", "madpo_from_trees.learning_rate=1e-2"])
    assert code == 0
    assert sorted(p.name for p in (run / "at_grpo" / "tree_pairs").glob("*.json")) == ["iteration_0001.json", "iteration_0002.json"]
    assert not (run / "at_grpo_2" / "tree_pairs").exists()  # the last at_grpo stage has no preference stage after it
    state = json.loads((run / "pipeline_state.json").read_text())
    folders = [e["folder"] for e in state["completed"]]
    assert folders == ["sft", "eval_before", "at_grpo", "madpo_from_trees", "at_grpo_2", "eval"]
    metrics = next(e["metrics"] for e in state["completed"] if e["folder"] == "madpo_from_trees")
    assert metrics["pairs"] > 0 and metrics["updates"] > 0
    before = load_file(run / "at_grpo" / "policies" / "shared" / "model.safetensors")
    after = load_file(run / "madpo_from_trees" / "policies" / "shared" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_the_stage_s_preference_reference_is_the_policy_it_got(tiny_model_path, tmp_path, monkeypatch):
    """``madpo_from_trees.preference_reference=initial``: the stage's reference is the policy the AT-GRPO stage
    left, so its first update sees every margin at exactly 0 (loss ln 2), and it still trains."""
    from safetensors.torch import load_file

    from pettingllms.cli import main
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from tests.helpers.bonus_trainer import add_candidate_bonus

    original = ATGRPOTrainer.generate_and_score
    monkeypatch.setattr(ATGRPOTrainer, "generate_and_score", lambda self, ids, step: add_candidate_bonus(original(self, ids, step)))
    run = tmp_path / "run"
    code = main(["train", "plan_path/L1", f"model.name={tiny_model_path}", f"run.output_dir={run}", "run.progress=false",
                 "pipeline=[at_grpo, madpo_from_trees]", "eval.before_training=false", "env.max_turns=2",
                 "rollout.num_generations=2", "rollout.max_completion_length=6", "at_grpo.max_steps=2",
                 "at_grpo.problems_per_step=2", "madpo_from_trees.learning_rate=1e-2",
                 "madpo_from_trees.preference_reference=initial", "madpo_from_trees.logging_steps=1"])
    assert code == 0
    logged = [json.loads(line) for line in (run / "madpo_from_trees" / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in logged if "loss" in r]
    assert len(updates) >= 2
    assert updates[0]["joint_margin"] == 0.0 and updates[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert any(r["joint_margin"] != 0.0 for r in updates[1:])
    before = load_file(run / "at_grpo" / "policies" / "shared" / "model.safetensors")
    after = load_file(run / "madpo_from_trees" / "policies" / "shared" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_a_stage_without_pairs_says_so(tiny_model_path, tmp_path, caplog):
    """The untrained model never parses, so every candidate of a decision point ties: no pair, and a warning."""
    from pettingllms.cli import main

    run = tmp_path / "run"
    with caplog.at_level("WARNING", logger="pettingllms.stages.madpo_from_trees"):
        code = main(["train", "plan_path/L1", f"model.name={tiny_model_path}", f"run.output_dir={run}",
                     "run.progress=false", "pipeline=[at_grpo, madpo_from_trees]", "eval.before_training=false",
                     "env.max_turns=1", "rollout.num_generations=2", "rollout.max_completion_length=6",
                     "at_grpo.max_steps=1", "at_grpo.problems_per_step=2"])
    assert code == 0
    state = json.loads((run / "pipeline_state.json").read_text())
    metrics = next(e["metrics"] for e in state["completed"] if e["folder"] == "madpo_from_trees")
    assert metrics["pairs"] == 0 and metrics["updates"] == 0
    assert "stage madpo_from_trees: the trees of 1 at_grpo step(s) in" in caplog.text
    assert "hold no preference pair (every decision point's candidates tied on reward)" in caplog.text
