"""Exact resume: a run interrupted after a commit point and resumed from its checkpoint ends with the same
weights (bitwise, CPU), the same metrics and the same replay files as an uninterrupted run."""

from __future__ import annotations

import pytest

from comlrl.trainers.preference import (
    MADPOConfig,
    MADPOIterConfig,
    MADPOIterTrainer,
    MADPOTrainer,
    OracleError,
)
from tests.helpers.trainer_helpers import (
    Interrupt,
    assert_same_run,
    crash_when_updates_seen,
    madpo_values,
    plan_items,
    varied_reward,
)

ITEMS = plan_items(3)


def make_reward(crash_when=None):
    """The task reward; ``crash_when()`` true makes it raise (a crash in the middle of a round)."""

    def reward(a, b):
        if crash_when is not None and crash_when():
            raise Interrupt("simulated crash")
        return varied_reward(a, b)

    return reward


@pytest.mark.parametrize(
    "options",
    [
        dict(
            comparator_policy="current", preference_replay_mode="lambda_decay", preference_replay_lambda=0.7
        ),
        dict(
            comparator_policy="history", preference_replay_mode="all_history", preference_replay_sample_size=5
        ),
    ],
    ids=["current-lambda", "history-all"],
)
def test_iterative_run_interrupted_after_round_2_of_4_resumes_exactly(options, tiny_model_path, tmp_path):
    def config(out):
        values = madpo_values(
            out,
            num_iterations=4,
            preference_num_candidates=3,
            max_new_tokens=5,
            num_train_epochs=2,
            logging_steps=3,
            eval_interval=3,
            eval_num_samples=2,
            seed=5,
        )
        return MADPOIterConfig(**values, **options)

    def trainer(out, reward):
        return MADPOIterTrainer(
            agent_model=tiny_model_path,
            num_agents=2,
            reward_func=reward,
            train_dataset=ITEMS,
            eval_dataset=ITEMS,
            args=config(out),
        )

    out_a, out_b = tmp_path / "a", tmp_path / "b"
    done = trainer(out_a, make_reward())
    done.train(checkpoint_dir=out_a / "ck")

    # The crash lands inside round 3 (while its pairs are scored), after checkpoint-2 was committed.
    holder = {}
    crashed = holder["t"] = trainer(out_b, make_reward(lambda: holder["t"].data_cursor.get("rounds_done") == 2))
    with pytest.raises(OracleError, match="simulated crash"):
        crashed.train(checkpoint_dir=out_b / "ck")
    assert (out_b / "ck" / "checkpoint-2").is_dir() and not (out_b / "ck" / "checkpoint-3").exists()

    resumed = trainer(out_b, make_reward())
    resumed.train(resume_from_checkpoint=out_b / "ck" / "checkpoint-2", checkpoint_dir=out_b / "ck")
    assert_same_run(done, resumed, out_a, out_b)
    for r in range(1, 5):
        name = f"iteration_{r:04d}.json"
        assert (out_a / "preference_replay" / name).read_bytes() == (
            out_b / "preference_replay" / name
        ).read_bytes()
    assert sorted(p.name for p in (out_b / "ck").iterdir() if p.name.startswith("checkpoint-")) == [
        f"checkpoint-{r}" for r in range(1, 5)
    ]


def test_base_run_interrupted_after_epoch_1_resumes_exactly(tiny_model_path, tmp_path):
    def trainer(out):
        args = MADPOConfig(
            **madpo_values(
                out,
                num_train_epochs=3,
                preference_pairs_per_sample=3,
                max_new_tokens=5,
                logging_steps=2,
                seed=3,
                pair_selection="random",
            )
        )
        return MADPOTrainer(
            agent_model=tiny_model_path,
            num_agents=2,
            reward_func=make_reward(),
            train_dataset=ITEMS,
            args=args,
        )

    out_a, out_b = tmp_path / "a", tmp_path / "b"
    done = trainer(out_a)
    done.train(checkpoint_dir=out_a / "ck", checkpoint_total_limit=2)
    assert sorted(p.name for p in (out_a / "ck").iterdir() if p.name.startswith("checkpoint-")) == [
        "checkpoint-2",
        "checkpoint-3",
    ]

    crashed = trainer(out_b)
    steps_per_epoch = -(-len(done.rounds.pairs) // 2)
    crash_when_updates_seen(crashed, steps_per_epoch + 1)  # inside epoch 2
    with pytest.raises(Interrupt):
        crashed.train(checkpoint_dir=out_b / "ck")

    resumed = trainer(out_b)
    resumed.train(resume_from_checkpoint=True, checkpoint_dir=out_b / "ck")  # the latest: checkpoint-1
    assert_same_run(done, resumed, out_a, out_b)


def test_resume_refuses_a_checkpoint_of_another_config(tiny_model_path, tmp_path):
    args = MADPOConfig(
        output_dir=str(tmp_path),
        num_train_epochs=1,
        preference_num_candidates=3,
        max_new_tokens=4,
        temperature=1.0,
        disable_tqdm=True,
    )
    first = MADPOTrainer(
        agent_model=tiny_model_path, reward_func=make_reward(), train_dataset=ITEMS, args=args
    )
    first.train(checkpoint_dir=tmp_path / "ck")
    other = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=make_reward(),
        train_dataset=ITEMS,
        args=MADPOConfig(**{**args.to_dict(), "dpo_beta": 0.3}),
    )
    with pytest.raises(ValueError, match="dpo_beta"):
        other.train(resume_from_checkpoint=tmp_path / "ck")
    with pytest.raises(FileNotFoundError, match="resume_from_checkpoint"):
        other.train(resume_from_checkpoint=tmp_path / "nowhere")
