"""MARLHF and MARLHFIter on the test-tiny model: reward model then RL for every rl_algorithm, both oracle
settings, warm start, exact resume between rounds, and the reward-model source / device rules."""

from __future__ import annotations

import pytest

from comlrl.trainers.preference import (
    MARLHFConfig,
    MARLHFIterConfig,
    MARLHFIterTrainer,
    MARLHFTrainer,
)
from comlrl.trainers.preference.reward_model import JointRewardModel
from tests.helpers.trainer_helpers import (
    CountingReward,
    assert_same_run,
    changed_per_agent,
    plan_items,
    weights,
)

ITEMS = plan_items(3)
RL_ALGORITHMS = ["magrpo", "mareinforce", "marloo", "maremax", "maac", "iac"]


def tiny(**overrides):
    values = dict(
        max_new_tokens=4,
        temperature=1.0,
        top_p=1.0,
        agent_learning_rate=1e-2,
        reward_learning_rate=1e-3,
        reward_train_batch_size=2,
        reward_eval_fraction=0.34,
        num_generations=2,
        num_train_epochs=1,
        rollout_buffer_size=3,
        preference_num_candidates=3,
        preference_pairs_per_sample=2,
        logging_steps=1,
        eval_interval=0,
        disable_tqdm=True,
        seed=7,
    )
    values.update(overrides)
    return values


@pytest.mark.parametrize("rl_algorithm", RL_ALGORITHMS)
def test_marlhf_fits_the_reward_model_then_updates_every_agent_on_it(rl_algorithm, tiny_model_path, tmp_path):
    reward = CountingReward()
    extra = dict(critic_model_name=tiny_model_path) if rl_algorithm in ("maac", "iac") else {}
    args = MARLHFConfig(
        output_dir=str(tmp_path),
        rl_algorithm=rl_algorithm,
        reward_model_name=tiny_model_path,
        **tiny(),
        **extra,
    )
    trainer = MARLHFTrainer(
        agent_model=tiny_model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args
    )
    before = weights(trainer)
    trainer.train()
    assert all(changed_per_agent(before, weights(trainer)).values())
    # The task reward scored only the collection (3 items x 3 candidates); the RL stage used the reward model.
    assert reward.calls == 9
    assert isinstance(trainer.reward_model, JointRewardModel)
    history = trainer.metrics_logger.history
    fit = next(r for r in history if "reward_model/eval_accuracy" in r)
    assert 0.0 <= fit["reward_model/eval_accuracy"] <= 1.0 and fit["reward_model/eval_pairs"] >= 1
    rl = [r for r in history if "advantage_mean" in r]
    assert rl and all("turn_1/reward_mean" in r for r in rl)
    assert len(trainer.critics) == {"maac": 1, "iac": 2}.get(rl_algorithm, 0)
    # env_step counts the RL stage: num_generations per trained item (3 items, 1 epoch).
    assert trainer.env_step == 3 * 2


@pytest.mark.parametrize("scoring", ["task", "reward_model"])
def test_marlhf_iter_runs_end_to_end_with_either_oracle(scoring, tiny_model_path, tmp_path):
    reward = CountingReward()
    args = MARLHFIterConfig(
        output_dir=str(tmp_path),
        num_iterations=2,
        preference_scoring_reward=scoring,
        reward_model_name=tiny_model_path,
        comparator_num_candidates=3,
        reward_num_train_epochs=1,
        **tiny(),
    )
    trainer = MARLHFIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=reward,
        train_dataset=ITEMS,
        eval_dataset=ITEMS,
        args=args,
    )
    before = weights(trainer)
    trainer.train()
    assert all(changed_per_agent(before, weights(trainer)).values())
    per_round = 3 * (3 + 3)  # items x (current + comparator candidates)
    # Round 1 always uses the task reward; with scoring="reward_model" round 2 uses the fitted model.
    assert reward.calls == (2 * per_round if scoring == "task" else per_round)
    fits = [r for r in trainer.metrics_logger.history if "reward_model/loss" in r]
    assert len(fits) == 2 and all(r["reward_model/warm_start"] == 0.0 for r in fits)
    calls = reward.calls
    metrics = trainer.evaluate()
    assert reward.calls == calls + len(ITEMS)  # evaluation always scores with the task reward
    assert set(metrics) >= {"eval/turn_1/reward_mean", "eval/turn_1/expected_return"}


def test_reward_warm_start_continues_the_previous_rounds_model(tiny_model_path, tmp_path):
    args = MARLHFIterConfig(
        output_dir=str(tmp_path),
        num_iterations=2,
        reward_warm_start=True,
        reward_model_name=tiny_model_path,
        reward_num_train_epochs=1,
        **tiny(),
    )
    trainer = MARLHFIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=CountingReward(),
        train_dataset=ITEMS,
        args=args,
    )
    seen = []
    original = trainer.fit_reward_model

    def spy(pairs, *, round_index):
        previous = trainer.reward_model
        out = original(pairs, round_index=round_index)
        seen.append(previous is not None and trainer.reward_model is previous)
        return out

    trainer.fit_reward_model = spy
    trainer.train()
    assert seen == [False, True]
    fits = [
        r["reward_model/warm_start"] for r in trainer.metrics_logger.history if "reward_model/warm_start" in r
    ]
    assert fits == [0.0, 1.0]


class Crash(Exception):
    pass


def test_marlhf_iter_resumes_exactly_from_a_checkpoint_between_rounds(tiny_model_path, tmp_path):
    """maac with reference KL and the reward model as oracle: the checkpoint after round 1 carries the reward
    model (the next oracle), the critic and its optimizer; the reference reloads from its snapshot."""

    def trainer(out):
        args = MARLHFIterConfig(
            output_dir=str(out),
            num_iterations=3,
            rl_algorithm="maac",
            critic_model_name=tiny_model_path,
            reference_kl_enabled=True,
            reference_kl_coef=0.05,
            preference_scoring_reward="reward_model",
            reward_model_name=tiny_model_path,
            reward_num_train_epochs=1,
            eval_num_samples=2,
            **{**tiny(), "eval_interval": 2, "rollout_buffer_size": 2, "train_batch_size": 1},
        )
        return MARLHFIterTrainer(
            agent_model=tiny_model_path,
            num_agents=2,
            reward_func=CountingReward(),
            train_dataset=ITEMS,
            eval_dataset=ITEMS,
            args=args,
        )

    out_a, out_b = tmp_path / "a", tmp_path / "b"
    done = trainer(out_a)
    done.train(checkpoint_dir=out_a / "ck")

    crashed = trainer(out_b)
    original = crashed.fit_reward_model

    def crash_in_round_2(pairs, *, round_index):
        if round_index == 2:
            raise Crash("simulated crash")
        return original(pairs, round_index=round_index)

    crashed.fit_reward_model = crash_in_round_2
    with pytest.raises(Crash):
        crashed.train(checkpoint_dir=out_b / "ck")
    assert (out_b / "ck" / "checkpoint-1" / "extra" / "reward_model").is_dir()
    assert (out_b / "ck" / "checkpoint-1" / "extra" / "critics").is_dir()

    resumed = trainer(out_b)
    resumed.train(resume_from_checkpoint=out_b / "ck" / "checkpoint-1", checkpoint_dir=out_b / "ck")
    assert_same_run(done, resumed, out_a, out_b, critics=True)
    # The critic's optimizer kept its state across rounds: one step per update of all three rounds.
    steps = {int(s["step"]) for s in resumed.rl.critic_optimizers[0].state_dict()["state"].values()}
    assert steps == {resumed.updates_seen}


def test_marlhf_base_resumes_exactly_after_an_rl_epoch(tiny_model_path, tmp_path):
    def trainer(out):
        args = MARLHFConfig(
            output_dir=str(out), reward_model_name=tiny_model_path, **{**tiny(), "num_train_epochs": 2}
        )
        return MARLHFTrainer(
            agent_model=tiny_model_path,
            num_agents=2,
            reward_func=CountingReward(),
            train_dataset=ITEMS,
            args=args,
        )

    out_a, out_b = tmp_path / "a", tmp_path / "b"
    done = trainer(out_a)
    done.train(checkpoint_dir=out_a / "ck")
    assert (out_a / "ck" / "checkpoint-1" / "extra" / "reward_model").is_dir()
    assert not (out_a / "ck" / "checkpoint-0" / "extra" / "reward_model").exists()

    resumed = trainer(out_b)
    resumed.train(resume_from_checkpoint=out_a / "ck" / "checkpoint-1", checkpoint_dir=out_b / "ck")
    assert_same_run(done, resumed, out_a, out_b, critics=True)


def test_reward_model_source_and_device_rules(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    from comlrl.models import load_tokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.name_or_path = ""  # an object with no name (as if built in memory)
    tok = load_tokenizer(tiny_model_path)
    common = dict(agents=[model, model], tokenizer=tok, reward_func=CountingReward(), train_dataset=ITEMS)
    # Unnamed actor objects: the trainer is built (as in the public library) and train() asks for the
    # reward model's name before it generates or loads anything.
    unnamed = MARLHFTrainer(**common, args=MARLHFConfig(output_dir=str(tmp_path), **tiny()))
    assert unnamed.reward_model_source is None
    with pytest.raises(ValueError, match="`reward_model_name` must be set"):
        unnamed.train()
    assert unnamed.backend.generate_calls == 0 and unnamed.reward_model is None and unnamed.env_step == 0
    trainer = MARLHFTrainer(
        **common, args=MARLHFConfig(output_dir=str(tmp_path), reward_model_name=tiny_model_path, **tiny())
    )
    assert trainer.reward_model_source == tiny_model_path
    assert trainer.reward_model_device == "cpu"  # the first agent's device, never a hard-coded cuda:0
    named = MARLHFTrainer(
        agent_model=tiny_model_path,
        reward_func=CountingReward(),
        train_dataset=ITEMS,
        args=MARLHFConfig(output_dir=str(tmp_path), **tiny()),
    )
    assert named.reward_model_source == tiny_model_path
    with pytest.raises(ValueError, match="critic_model_name"):
        MARLHFTrainer(
            **common,
            args=MARLHFConfig(
                output_dir=str(tmp_path), rl_algorithm="maac", reward_model_name=tiny_model_path, **tiny()
            ),
        )
