"""The global random streams (Python ``random``, ``np.random``, torch) are seeded by a run's seed when the run
starts, and a resumed run gets them back as its checkpoint saved them.

``comlrl.seeding.seed_everything`` is called by the pipeline (``run.seed`` at the start, then a seed derived
for each stage) and by every trainer's fresh ``train()`` (``TrainerCore.on_fresh_run`` with the trainer's
``run_seed()``: ``args.seed``, or the AT-GRPO config's ``seed``). Our code draws only from named generators;
these streams are for code we do not control (a user's reward function, a library), which before drew from
fresh entropy in every process.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch

from comlrl.seeding import derive_seed, seed_everything


def draws() -> tuple[float, float, float]:
    """One draw from each global stream (what user code would see)."""
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def expected_draws(seed: int) -> tuple[float, float, float]:
    """The same three draws from private generators seeded with ``seed``: the independent computation."""
    return (
        random.Random(seed).random(),
        float(np.random.RandomState(seed % 2**32).rand()),
        float(torch.rand(1, generator=torch.Generator().manual_seed(seed % 2**64))),
    )


def scramble() -> None:
    """Move every global stream somewhere else, as earlier work in the process would."""
    random.seed(99991)
    np.random.seed(99991)
    torch.manual_seed(99991)
    draws()


@pytest.mark.parametrize("seed", [0, 7, -3, 2**32 + 5, 2**63 - 1, np.int64(12)])
def test_seed_everything_seeds_python_numpy_and_torch(seed):
    scramble()
    seed_everything(seed)
    assert draws() == expected_draws(int(seed))


@pytest.mark.parametrize("seed", [True, 1.5, "3", None])
def test_seed_everything_refuses_what_is_not_a_seed(seed):
    with pytest.raises(ValueError, match=r"`seed` must be an integer, got"):
        seed_everything(seed)


# ---------------------------------------------------------------------------------------- the pipeline
def pipeline_stage_draws(run_dir, model, seed: int, monkeypatch) -> tuple[float, float, float]:
    """The draws user code would make at the start of an ``eval`` stage of a pipeline run with ``run.seed``."""
    from pettingllms.config import load_config
    from pettingllms.pipeline import STAGE_RUNNERS, Pipeline

    seen = []

    def recording_eval(context):
        seen.append(draws())
        return {"success_rate": 0.0}

    monkeypatch.setitem(STAGE_RUNNERS, "eval", recording_eval)
    config = load_config("plan_path/L1", [
        f"model.name={model}", f"run.output_dir={run_dir}",
        "pipeline=[eval]", f"run.seed={seed}", "run.progress=false",
    ])
    scramble()
    Pipeline(config, out=io.StringIO(), plots=False).run()
    (drawn,) = seen
    return drawn


def test_a_pipeline_stage_starts_from_its_run_seed(tmp_path, tiny_model_path, monkeypatch):
    first = pipeline_stage_draws(tmp_path / "a", tiny_model_path, 5, monkeypatch)
    assert first == expected_draws(derive_seed(5, "stage", "eval"))
    assert pipeline_stage_draws(tmp_path / "b", tiny_model_path, 5, monkeypatch) == first
    other = pipeline_stage_draws(tmp_path / "c", tiny_model_path, 6, monkeypatch)
    assert all(a != b for a, b in zip(other, first))


# ---------------------------------------------------------------------------------------- the trainers
def madpo_iter(tmp_path, model, seed: int, name: str):
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer
    from tests.helpers.trainer_helpers import madpo_values, plan_items, varied_reward

    args = MADPOIterConfig(**madpo_values(tmp_path / name, num_iterations=2, preference_num_candidates=3,
                                          max_new_tokens=4, seed=seed))
    return MADPOIterTrainer(agent_model=model, num_agents=2, reward_func=varied_reward,
                            train_dataset=plan_items(2), args=args)


class _Stop(Exception):
    pass


def record_run_start(trainer, seen: list, *, stop: bool = False) -> None:
    """Draw from the global streams when ``train()`` hands over to the training loop (and, with ``stop``,
    end the call there)."""
    run = trainer._run

    def recording(plan):
        seen.append(draws())
        if stop:
            raise _Stop
        return run(plan)

    trainer._run = recording


def test_a_fresh_train_starts_from_the_trainer_seed(tmp_path, tiny_model_path):
    seen: list = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        trainer = madpo_iter(tmp_path, tiny_model_path, seed, name)
        record_run_start(trainer, seen, stop=True)
        scramble()
        with pytest.raises(_Stop):
            trainer.train()
    assert seen[0] == seen[1] == expected_draws(5)
    assert all(a != b for a, b in zip(seen[2], seen[0]))


def test_at_grpo_seeds_from_its_config(tmp_path, tiny_model_path):
    from pettingllms.config.rollout_section import RolloutConfig
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    config = ATGRPOConfig(problems_per_step=1, max_steps=1, output_dir=str(tmp_path / "at"), disable_tqdm=True, seed=17)
    rollout = RolloutConfig(num_generations=2, max_completion_length=4, transcripts_rate=0.0)
    trainer = ATGRPOTrainer(config, rollout=rollout, model=tiny_model_path,
                            env_config={"rows": 4, "cols": 4, "max_turns": 1})
    seen = []

    def step():
        seen.append(draws())
        trainer.global_step = config.max_steps
        return {"success_rate": 0.0, "reward": 0.0}

    trainer.step = step
    scramble()
    trainer.train()
    assert seen == [expected_draws(17)]


def test_a_resumed_run_gets_the_global_streams_its_checkpoint_saved(tmp_path, tiny_model_path):
    """Draws right after checkpoint-1 was written in the uninterrupted run equal the draws at the start of a
    run resumed from it (the global streams are in ``rng_state.json`` and restored last)."""
    done = madpo_iter(tmp_path, tiny_model_path, 9, "done")
    after_save: dict[int, tuple] = {}
    save = done.save_checkpoint

    def save_then_draw(*args, step=None, **kwargs):
        path = save(*args, step=step, **kwargs)
        after_save[step] = draws()  # moves the streams past what checkpoint-`step` holds
        return path

    done.save_checkpoint = save_then_draw
    done.train(checkpoint_dir=tmp_path / "done" / "ck")
    assert sorted(after_save) == [1, 2] and after_save[1] != after_save[2]

    resumed = madpo_iter(tmp_path, tiny_model_path, 9, "resumed")
    seen: list = []
    record_run_start(resumed, seen)
    scramble()
    resumed.train(resume_from_checkpoint=tmp_path / "done" / "ck" / "checkpoint-1",
                  checkpoint_dir=tmp_path / "resumed" / "ck")
    assert seen == [after_save[1]]
