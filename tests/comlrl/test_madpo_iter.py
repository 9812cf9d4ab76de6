"""MADPOIterTrainer: the round loop, comparator plumbing, replay files, failures and iter/* metrics."""

from __future__ import annotations

import json

import pytest
import torch

from comlrl.rollout import Completion
from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer, read_round
from comlrl.trainers.preference.comparators.base import ComparatorItemOutput
from comlrl.trainers.preference.distribution import reward_histogram
from tests.helpers.trainer_helpers import agent_snapshots as snapshot
from tests.helpers.trainer_helpers import madpo_values, plan_items
from tests.helpers.trainer_helpers import varied_reward as length_reward


def varied_reward(a, b):
    """The shared reward in a function of its own, so the ``reward_range`` below stays local to this file."""
    return length_reward(a, b)


varied_reward.reward_range = (0.0, 5.0)


def items(n=4):
    return plan_items(n)


def config(tmp_path, **overrides):
    return MADPOIterConfig(**madpo_values(tmp_path / "out", **{"num_iterations": 2, **overrides}))


def text(t: str) -> Completion:
    return Completion(prompt_token_ids=[], token_ids=[], logprobs=[], text=t, finish_reason="stop")


class ScriptedComparator:
    """A protocol-complete comparator answering with fixed texts (no token ids, like a remote model).

    ``fail`` lists item indices whose request fails; ``indices`` the candidate indices it answers with.
    """

    name = "scripted"

    def __init__(self, texts=("x", "a much longer answer", "mid size", "yy"), fail=(), indices=None):
        self.texts, self.fail, self.indices = list(texts), set(fail), indices
        self.events: list[tuple[str, int]] = []
        self.calls = 0

    def begin_round(self, round_index):
        self.events.append(("begin", round_index))

    def end_round(self, round_index):
        self.events.append(("end", round_index))

    def sample(self, items, agent_prompts, params, *, round_index, item_indices):
        self.calls += 1
        outputs = []
        for index, prompts in zip(item_indices, agent_prompts):
            assert len(prompts) == 2
            if index in self.fail:
                outputs.append(ComparatorItemOutput(error="HTTP 500 after 3 retries", same_tokenizer=False))
                continue
            chosen = self.indices if self.indices is not None else list(range(params.n))
            candidates = [[text(self.texts[k % len(self.texts)] + " " * a) for k in chosen] for a in range(2)]
            outputs.append(
                ComparatorItemOutput(candidates=candidates, indices=list(chosen), same_tokenizer=False)
            )
        return outputs

    def state_dict(self):
        return {"name": self.name, "calls": self.calls}

    def load_state_dict(self, state):
        self.calls = state["calls"]

    def close(self):
        pass


def test_rounds_update_every_agent_and_write_round_files(tiny_model_path, tmp_path):
    comparator = ScriptedComparator()
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(),
        args=config(tmp_path),
        comparator=comparator,
    )
    before = snapshot(trainer)
    trainer.train()
    for agent_before, agent_after in zip(before, snapshot(trainer)):
        assert all(not torch.equal(b, a) for b, a in zip(agent_before, agent_after))
    assert comparator.events == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)]
    assert comparator.calls == 2  # one call per batch of items per round
    replay = tmp_path / "out" / "preference_replay"
    rounds = [read_round(replay / f"iteration_{r:04d}.json") for r in (1, 2)]
    assert [r.iteration for r in rounds] == [1, 2]
    pair = rounds[0].pairs[0]
    assert pair.raw_rewards == [pair.winner_reward, pair.loser_reward]
    assert {pair.target_raw_reward, pair.comparator_raw_reward} == {pair.winner_reward, pair.loser_reward}
    # The comparator's side (text only) was tokenized once, with EOS, before the round was written, so the
    # sidecar holds its ids; the current side kept its sampled ids.
    eos = trainer.tokenizers[0].eos_token_id
    tok = trainer.tokenizers[0]
    for p in rounds[1].pairs:
        assert p.has_token_ids
        theirs = p.winner_token_ids if p.winner_reward == p.comparator_raw_reward else p.loser_token_ids
        text = p.winner_completions[0] if theirs is p.winner_token_ids else p.loser_completions[0]
        assert theirs[0] == tok.encode(text, add_special_tokens=False) + [eos]
    logged = [json.loads(line) for line in trainer.metrics_logger.path.read_text().splitlines()]
    iters = [r for r in logged if "iter/current_iteration" in r]
    assert [r["iter/current_iteration"] for r in iters] == [1, 2]
    assert [r["iter/total_preference_pairs"] for r in iters] == [
        len(rounds[0].pairs),
        len(rounds[0].pairs) + len(rounds[1].pairs),
    ]
    assert all(r["iter/train_preference_pairs"] == r["iter/current_preference_pairs"] for r in iters)


def test_current_side_is_filtered_to_the_comparators_indices(tiny_model_path, tmp_path):
    comparator = ScriptedComparator(indices=[1, 3, 9])  # 9 is beyond the current side's 4 candidates
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(3),
        comparator=comparator,
        args=config(tmp_path, num_iterations=1, preference_pairs_per_sample=None, pair_selection="all"),
    )
    # Round 1 samples the current agents with these seeds before any update: the same candidates.
    samples = trainer.sample_items(items(3), [0, 1, 2], n=4, stream="candidates", step=1)
    pairs, stats = trainer.rounds.collect_comparison_pairs(1)
    assert stats.comparisons + stats.ties == 3 * 2  # indices 1 and 3 of each item
    allowed = {tuple(s.candidates[0][k].token_ids) for s in samples for k in (1, 3)}
    for pair in pairs:
        current_ids = (
            pair.winner_token_ids if pair.winner_reward == pair.target_raw_reward else pair.loser_token_ids
        )
        assert tuple(current_ids[0]) in allowed


def test_failed_items_are_dropped_and_too_many_stop_the_run(tiny_model_path, tmp_path):
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(4),
        comparator=ScriptedComparator(fail={2}),
        args=config(tmp_path / "a", num_iterations=1),
    )
    trainer.train()
    assert trainer.last_round_stats.failed_items == 1
    logged = [json.loads(x) for x in trainer.metrics_logger.path.read_text().splitlines()]
    assert [r["iter/failed_items"] for r in logged if "iter/failed_items" in r] == [1]

    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(4),
        comparator=ScriptedComparator(fail={0, 1, 3}),
        args=config(tmp_path / "b", num_iterations=1, comparator_api_max_failure_rate=0.5),
    )
    with pytest.raises(RuntimeError, match="comparator_api_max_failure_rate"):
        trainer.train()


def test_default_current_comparator_and_reward_distribution(tiny_model_path, tmp_path):
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(3),
        args=config(
            tmp_path,
            log_reward_distribution=True,
            preference_replay_mode="lambda_decay",
            preference_replay_lambda=0.8,
        ),
    )
    before = snapshot(trainer)
    trainer.train()
    assert trainer.comparator.name == "current"
    assert any(not torch.equal(b, a) for b, a in zip(before[0], snapshot(trainer)[0]))
    dist = json.loads((tmp_path / "out" / "reward_distributions" / "iteration_0002.json").read_text())
    assert dist["num_bins"] == 16 and len(dist["bin_edges"]) == 17
    assert dist["candidate"]["target"]["sample_count"] == 3 * 4
    assert sum(dist["candidate"]["comparator"]["counts"]) == 3 * 4
    logged = trainer.metrics_logger.history
    assert any("iter/reward_distribution/target_mean" in r for r in logged)


def test_log_reward_distribution_needs_a_reward_range(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match="reward_range"):
        MADPOIterTrainer(
            agent_model=tiny_model_path,
            reward_func=lambda a, b: 0.0,
            args=config(tmp_path, log_reward_distribution=True),
        )


def test_reward_histogram_clips_into_the_edge_bins():
    assert reward_histogram([-1.0, 0.0, 0.49, 0.5, 1.0, 7.0], 0.0, 1.0, num_bins=2) == [3, 3]
    with pytest.raises(ValueError, match="reward_range"):
        reward_histogram([0.0], 1.0, 1.0)


def test_iterative_trainer_needs_its_own_config(tiny_model_path, tmp_path):
    from comlrl.trainers.preference import MADPOConfig

    with pytest.raises(TypeError, match="MADPOIterConfig"):
        MADPOIterTrainer(
            agent_model=tiny_model_path, reward_func=varied_reward, args=MADPOConfig(output_dir=str(tmp_path))
        )


def test_a_fresh_run_refuses_a_replay_folder_of_another_run(tiny_model_path, tmp_path):
    kwargs = dict(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=items(2),
        args=config(tmp_path, num_iterations=1),
    )
    MADPOIterTrainer(comparator=ScriptedComparator(), **kwargs).train()
    with pytest.raises(FileExistsError, match="preference_replay_dir"):
        MADPOIterTrainer(comparator=ScriptedComparator(), **kwargs).train()


class HalvesAdapter:
    """Joint prompt: the role prompts joined; role 0 answers with the first half of the joint text."""

    def build_prompt(self, item, agent_prompts):
        return " | ".join(agent_prompts)

    def parse_completion(self, completion, item, num_agents):
        cut = len(completion) // 2
        return [completion[:cut], completion[cut:]]


def test_centralized_collaboration_rounds_compare_joint_responses(tiny_model_path, tmp_path):
    def reward(left, right):
        return float(len(left[0]) % 4) + float(len(right[0]) % 3)

    trainer = MADPOIterTrainer(
        agents=[tiny_model_path],
        num_agents=2,
        reward_func=reward,
        train_dataset=items(3),
        formatters=[lambda it: "plan " + it["prompt"], lambda it: "check " + it["prompt"]],
        centralized_comparator_adapter=HalvesAdapter(),
        args=config(tmp_path, collaboration_mode="centralized"),
    )
    assert trainer.args.comparator_generation_mode == "centralized"
    before = snapshot(trainer)
    trainer.train()
    assert any(not torch.equal(b, a) for b, a in zip(before[0], snapshot(trainer)[0]))
    pairs = read_round(tmp_path / "out" / "preference_replay" / "iteration_0001.json").pairs
    assert pairs and all(p.num_agents == 1 and p.has_token_ids for p in pairs)
    # Both sides are whole joint completions with their sampled ids (the comparator is the same model).
    joint_prompt = "plan Task 0: write a short plan. | check Task 0: write a short plan."
    assert pairs[0].prompts == [joint_prompt]
