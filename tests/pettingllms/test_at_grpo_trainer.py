"""The AT-GRPO trainer end to end on the test-tiny model and Plan-Path 4x4 (2 problems, K = 2, 8 tokens).

The untrained tiny model never writes a parseable answer, so every candidate of a group earns the same
parse-error reward and the advantages are all 0. Tests that need a learning signal add a reward bonus
through the trainer's ``generate_and_score`` override point (0.5 per candidate index: a different reward
for every member of every group, one value per independent trajectory).
"""

from __future__ import annotations

import json

import pytest
import torch

from comlrl.policy import MultiAgentPolicy
from comlrl.trainers.core.trainer_core import TrainerCore
from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.execution import EngineConfig, PolicyConfig, RolloutEngine, build_policy, build_router
from pettingllms.trainer.at_grpo import ATGRPOTrainer
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.bonus_trainer import BonusTrainer

ENV = {"rows": 4, "cols": 4}
POLICIES = {"L0": ["single"], "L1": ["shared"], "L2": ["tool", "plan"], "L3": ["tool", "plan"]}



def make_trainer(tmp_path, model_path, level="L1", cls=BonusTrainer, name="run", **overrides):
    values = dict(
        policy_level=level,
        max_turns=2,
        problems_per_step=2,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-2,
        per_device_train_batch_size=4,
        output_dir=str(tmp_path / name),
        disable_tqdm=True,
        seed=1,
    )
    values.update(overrides)
    return cls.from_flat(values, model=model_path, env_config=ENV)


def perturb_adapters(policy) -> None:
    """LoRA B starts at 0, so A gets no gradient at first; give adapters weights, as a warm start would."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name in policy.policies:
            for parameter in policy.trainable_parameters(name):
                parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


def snapshot(trainer) -> dict[str, list[torch.Tensor]]:
    return {n: [p.detach().clone() for p in trainer.policy.trainable_parameters(n)] for n in trainer.policy.policies}


def without_timings(record):
    return {k: v for k, v in record.items() if not k.startswith("time/")}


@pytest.mark.parametrize("level", ["L0", "L1", "L2", "L3"])
def test_every_trainable_parameter_of_every_policy_changes_after_one_step(level, tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, level)
    assert trainer.policy.policies == POLICIES[level]
    if level == "L2":
        perturb_adapters(trainer.policy)
        base = trainer.policy.handle("tool").model.get_base_model()
        frozen = {n: p.detach().clone() for n, p in base.named_parameters() if "lora_" not in n}
    before = snapshot(trainer)
    (metrics,) = trainer.train()
    for name in trainer.policy.policies:
        after = trainer.policy.trainable_parameters(name)
        unchanged = [i for i, (a, b) in enumerate(zip(before[name], after)) if torch.equal(a, b)]
        assert not unchanged, f"policy {name!r}: tensors {unchanged} did not change"
        steps = metrics[f"policy/{name}/optimizer_steps"]
        assert steps >= 1 and trainer.policy.version(name) == steps
        for key in ("loss", "clip_ratio/region_mean", "approx_kl", "entropy", "grad_norm", "staleness_mean"):
            assert f"policy/{name}/{key}" in metrics
    if level == "L2":  # the base is frozen: only adapters train
        for n, p in base.named_parameters():
            if n in frozen:
                assert torch.equal(p, frozen[n]), n
    roles = ["single"] if level == "L0" else ["tool", "plan"]
    for role in roles:
        for turn in (0, 1):
            for key in ("reward_mean", "global_reward_std", "local_reward_mean", "frac_reward_zero_std",
                        "parse_error_rate", "success_rate", "completions/mean_length"):
                assert f"agent/{role}/turn_{turn}/{key}" in metrics
    assert metrics["frac_reward_zero_std"] == 0.0  # the bonus separates every group's members
    for key in ("success_rate", "reward", "reward_std", "time/rollout_s", "time/update_s"):
        assert key in metrics
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]


def test_groups_with_equal_rewards_are_kept_with_zero_advantage_and_move_nothing(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer)
    before = snapshot(trainer)
    (metrics,) = trainer.train()
    assert metrics["frac_reward_zero_std"] == 1.0
    assert metrics["agent/tool/turn_0/frac_reward_zero_std"] == 1.0
    assert metrics["policy/shared/num_samples"] == 16.0  # kept: 2 problems x 2 turns x 2 roles x K=2
    assert metrics["policy/shared/optimizer_steps"] == 4.0
    for a, b in zip(before["shared"], trainer.policy.trainable_parameters("shared")):
        assert torch.equal(a, b)  # zero advantage, beta 0, weight decay 0: exactly no update


@pytest.mark.parametrize("level", ["L1", "L2"])
def test_training_scores_the_rollout_log_probs_exactly_on_policy(level, tmp_path, tiny_model_path):
    # One micro-batch per policy, scored before any update: ratio 1, nothing clipped. This checks that the
    # training forward (layout, positions, temperature, adapter) reproduces what the sampler recorded.
    trainer = make_trainer(tmp_path, tiny_model_path, level, per_device_train_batch_size=64, temperature=0.7)
    (metrics,) = trainer.train()
    for name in trainer.policy.policies:
        assert metrics[f"policy/{name}/optimizer_steps"] == 1.0
        assert metrics[f"policy/{name}/approx_kl"] < 1e-8
        assert metrics[f"policy/{name}/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert metrics[f"policy/{name}/clip_ratio/region_mean"] == 0.0
        assert metrics[f"policy/{name}/staleness_max"] == 0.0


def test_later_micro_batches_are_scored_by_newer_weights(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", per_device_train_batch_size=4, num_iterations=2)
    (metrics,) = trainer.train()
    # 16 rows in micro-batches of 4, two passes: 8 optimizer steps, the i-th scored i versions behind.
    assert metrics["policy/shared/optimizer_steps"] == 8.0
    assert metrics["policy/shared/staleness_max"] == 7.0
    assert metrics["policy/shared/staleness_mean"] == pytest.approx(3.5)
    assert metrics["policy/shared/approx_kl"] > 0.0


def test_reference_kl_is_zero_for_a_fresh_copy_and_positive_against_the_lora_base(tmp_path, tiny_model_path):
    shared = make_trainer(tmp_path, tiny_model_path, "L1", name="l1", beta=0.1, per_device_train_batch_size=64)
    (metrics,) = shared.train()
    assert metrics["policy/shared/kl"] < 1e-8  # the reference is the policy as it was at creation
    adapters = make_trainer(tmp_path, tiny_model_path, "L2", name="l2", beta=0.1, per_device_train_batch_size=64)
    perturb_adapters(adapters.policy)  # the reference of an adapter is the base with adapters disabled
    (metrics,) = adapters.train()
    assert metrics["policy/tool/kl"] > 1e-4 and metrics["policy/plan/kl"] > 1e-4


class RecordingTrainer(BonusTrainer):
    """Keeps each step's rollout batch for inspection."""

    def generate_and_score(self, problem_ids, step):
        batch = super().generate_and_score(problem_ids, step)
        self.batches = [*getattr(self, "batches", []), batch]
        return batch


def test_grpo_baseline_groups_whole_trajectories_per_problem(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L0", cls=RecordingTrainer, sampling_mode="independent")
    (metrics,) = trainer.train()
    (batch,) = trainer.batches
    assert batch.mode == "independent"
    problems = {s.problem_id for s in batch.samples}
    assert len(problems) == 2
    assert {s.group_key for s in batch.samples} == {(p, None, None) for p in problems}
    assert {s.candidate for s in batch.samples} == {0, 1}  # K = 2 trajectories per problem
    # Bonus 0 and 0.5 per trajectory: every group has spread, every sample has a non-zero advantage.
    assert metrics["frac_reward_zero_std"] == 0.0
    assert trainer.policy.version("single") == metrics["policy/single/optimizer_steps"] >= 1


@pytest.mark.slow
def test_resume_continues_exactly_like_the_uninterrupted_run(tmp_path, tiny_model_path):
    settings = dict(
        level="L2",
        max_steps=4,
        save_steps=2,
        transcript_rate=1.0,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=3,
        lr_scheduler_type="cosine",
        warmup_ratio=0.25,
    )
    straight = make_trainer(tmp_path, tiny_model_path, name="straight", save_total_limit=1, **settings)
    perturb_adapters(straight.policy)
    history = straight.train()
    assert [r["step"] for r in history] == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "straight").glob("checkpoint-*")) == ["checkpoint-4"]

    interrupted = make_trainer(tmp_path, tiny_model_path, name="resumed", **settings)
    perturb_adapters(interrupted.policy)
    for _ in range(3):  # step 3 runs past the checkpoint and is then rolled back
        interrupted.step()
    resumed = make_trainer(tmp_path, tiny_model_path, name="resumed", **settings)
    resumed_history = resumed.train(resume_from_checkpoint=True)

    for name in straight.policy.policies:
        for a, b in zip(straight.policy.trainable_parameters(name), resumed.policy.trainable_parameters(name)):
            assert torch.equal(a, b)
        assert straight.policy.version(name) == resumed.policy.version(name)
        state_a = straight.optimizers[name].state_dict()["state"]
        state_b = resumed.optimizers[name].state_dict()["state"]
        for key in state_a:
            for field in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(state_a[key][field], state_b[key][field])
        assert straight.schedulers[name].get_last_lr() == resumed.schedulers[name].get_last_lr()
    assert resumed.data_cursor == straight.data_cursor and resumed.global_step == 4
    assert [without_timings(r) for r in resumed_history] == [without_timings(r) for r in history]

    def read_jsonl(path):
        return [json.loads(line) for line in path.read_text().splitlines()]

    metrics_a = read_jsonl(tmp_path / "straight" / "metrics.jsonl")
    metrics_b = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert [without_timings(r) for r in metrics_b] == [without_timings(r) for r in metrics_a]
    transcripts_a = read_jsonl(tmp_path / "straight" / "rollouts.jsonl")
    assert read_jsonl(tmp_path / "resumed" / "rollouts.jsonl") == transcripts_a
    assert sorted({r["step"] for r in transcripts_a}) == [1, 2, 3, 4]


def test_save_model_and_evaluate(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L2")
    trainer.train()
    saved = trainer.save_model(tmp_path / "model")
    assert (saved / "at_grpo_config.json").is_file()
    assert sorted(p.name for p in (saved / "lora" / "adapters").iterdir()) == ["plan", "tool"]
    loaded = MultiAgentPolicy.load(saved)
    for name in trainer.policy.policies:
        for a, b in zip(trainer.policy.trainable_parameters(name), loaded.trainable_parameters(name)):
            assert torch.equal(a, b)
    heldout = [1_000_000, 1_000_001]
    metrics = trainer.evaluate(heldout, num_samples=2)
    assert metrics["eval/num_trajectories"] == 4.0
    assert 0.0 <= metrics["eval/success_rate"] <= 1.0
    assert trainer.last_eval.per_problem.keys() == set(heldout)
    assert trainer.log_history[-1]["eval/success_rate"] == metrics["eval/success_rate"]
    with pytest.raises(ValueError, match=r"`problem_ids` \[5\] lie in `train_seed_range`"):
        trainer.evaluate([5, 1_000_000])


def test_a_prebuilt_engine_is_the_sampling_the_trainer_scores(tmp_path, tiny_model_path):
    policy = build_policy(PolicyConfig(policy_level="L1", model=tiny_model_path), ["tool", "plan"])
    engine = RolloutEngine.from_registry(
        "plan_path", {**ENV, "max_turns": 2}, build_router(policy), EngineConfig(num_generations=2, temperature=0.7)
    )
    config = ATGRPOConfig(output_dir=str(tmp_path), disable_tqdm=True)
    trainer = ATGRPOTrainer(config, policy=policy, engine=engine)
    assert trainer.updaters["shared"].temperature == 0.7
    with pytest.raises(ValueError, match="give `engine` or `rollout`, not both"):
        ATGRPOTrainer(config, policy=policy, engine=engine, rollout=RolloutConfig())
    with pytest.raises(ValueError, match="`engine` was given without `policy`"):
        ATGRPOTrainer(config, engine=engine)


def test_workflow_settings_given_twice_must_agree(tmp_path, tiny_model_path):
    values = dict(max_turns=2, output_dir=str(tmp_path), disable_tqdm=True)
    with pytest.raises(ValueError, match=r"`max_turns` is 2 in the settings but 3 in `env_config`"):
        ATGRPOTrainer.from_flat(values, model=tiny_model_path, env_config={**ENV, "max_turns": 3})
    with pytest.raises(ValueError, match="`resume_from_checkpoint` is True but"):
        make_trainer(tmp_path, tiny_model_path, "L1", name="empty").train(resume_from_checkpoint=True)


@pytest.mark.parametrize("level", ["L1", "L2"])
def test_shared_prompt_update_equals_the_plain_update(level, tmp_path, tiny_model_path):
    # One micro-batch per policy, so the row order cannot matter: loss and gradient norm agree to float
    # rounding. Adam's first step moves every weight by about lr = 1e-2 whatever its gradient's size, so
    # where a gradient is near 0 rounding shows in the step: all but 0.1 % of weights agree to 1e-6.
    trained = {}
    for share in (True, False):
        trainer = make_trainer(tmp_path, tiny_model_path, level, name=f"share-{share}", share_prompts=share,
                               per_device_train_batch_size=64)
        if level == "L2":
            perturb_adapters(trainer.policy)
        (metrics,) = trainer.train()
        trained[share] = (snapshot(trainer), metrics)
    (shared, shared_metrics), (plain, plain_metrics) = trained[True], trained[False]
    for name in plain:
        for key in ("loss", "grad_norm", "entropy"):
            key = f"policy/{name}/{key}"
            assert shared_metrics[key] == pytest.approx(plain_metrics[key], rel=1e-5, abs=1e-7)
        differ = sum(int(((a - b).abs() > 1e-6).sum()) for a, b in zip(shared[name], plain[name]))
        total = sum(a.numel() for a in plain[name])
        assert differ <= total // 1000, f"{differ} of {total} weights differ"


def test_resume_accepts_a_folder_holding_checkpoints_and_rejects_one_without(tmp_path, tiny_model_path):
    from comlrl.checkpoint import CheckpointNotFoundError

    done = make_trainer(tmp_path, tiny_model_path, "L1", name="done", save_steps=1)
    done.train()
    again = make_trainer(tmp_path, tiny_model_path, "L1", name="again")
    history = again.train(resume_from_checkpoint=str(tmp_path / "done"))  # its latest checkpoint-N
    assert again.global_step == 1 and again.data_cursor == done.data_cursor
    assert [without_timings(r) for r in history] == [without_timings(r) for r in done.log_history]
    for a, b in zip(snapshot(done)["shared"], snapshot(again)["shared"]):
        assert torch.equal(a, b)
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CheckpointNotFoundError, match="`resume_from_checkpoint` .*no checkpoint at"):
        make_trainer(tmp_path, tiny_model_path, "L1", name="other").train(resume_from_checkpoint=str(tmp_path / "nothing"))


class AsideTrainer(BonusTrainer):
    """Logs a record straight through the metrics logger after every step, as a pipeline stage may."""

    def step(self):
        metrics = super().step()
        self.metrics_logger.log({"eval/aside": 1.0}, self.global_step)
        return metrics


def test_checkpoints_hold_the_trainers_own_records_and_state_in_the_core_layout(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", cls=AsideTrainer, max_steps=2, save_steps=1,
                           save_total_limit=1)
    assert isinstance(trainer, TrainerCore) and trainer.output_dir == tmp_path / "run"
    trainer.train()
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-2"]
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    assert list(state["extra"]) == ["engine", "config", "nonfinite"] and state["data_cursor"] == trainer.data_cursor
    assert state["extra"]["nonfinite"]["nonfinite_losses_skipped"] == 0
    assert (tmp_path / "run" / "checkpoint-2" / "optimizer-shared.pt").is_file()
    assert [r["step"] for r in state["log_history"]] == [1, 2]  # the records logged aside stay out
    assert len(trainer.metrics_logger.history) == 4

    resumed = make_trainer(tmp_path, tiny_model_path, "L1", cls=AsideTrainer, max_steps=2)
    loaded = resumed.load_checkpoint(tmp_path / "run")  # a folder holding checkpoints: its latest
    assert loaded.step == resumed.global_step == 2 and resumed.data_cursor == trainer.data_cursor
    assert resumed.log_history == state["log_history"]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 4  # nothing after step 2
    assert (resumed.save_model() / "at_grpo_config.json").is_file()  # default: output_dir
