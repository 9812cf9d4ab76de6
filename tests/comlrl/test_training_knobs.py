"""The training knobs every comlrl trainer shares (comlrl.trainers.core.optimization): gradient accumulation
equals one larger batch, the LR schedule is transformers' step by step, clipping bounds each policy's norm,
bf16 trains on CPU and fp16 there is refused, and save_steps checkpoints fall at the right optimizer steps,
are pruned by save_total_limit and resume bitwise from inside an epoch or a round."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from transformers import get_scheduler

from comlrl.trainers.actor_critic import IACConfig, IACTrainer
from comlrl.trainers.core.optimization import GradientSteps, TrainingKnobFields
from comlrl.trainers.core.training_knobs import OptimizerStepFields
from comlrl.trainers.preference import (
    MADPOConfig,
    MADPOIterConfig,
    MADPOIterTrainer,
    MADPOTrainer,
    MARLHFConfig,
    MARLHFIterConfig,
    MARLHFIterTrainer,
    MARLHFTrainer,
)
from comlrl.trainers.preference.reward_model import JointRewardModel, fit_reward_model
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from tests.helpers.trainer_helpers import (
    assert_same_run,
    madpo_values,
    plan_items,
    record_gradients,
    records,
    varied_reward,
    weights,
)

ITEMS = plan_items(4)


LR = 1e-2


def assert_close_weights(a, b, atol=0.05 * LR):
    """AdamW divides each gradient entry by its own running magnitude, so an entry whose true value is near
    its ``eps`` (1e-8) turns float32 rounding into a visible share of the learning rate: weights agree to
    a few percent of one step's size; the gradients themselves (``assert_same_gradients``) to float
    precision."""
    assert a.keys() == b.keys()
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst <= atol, worst


def assert_same_gradients(a, b, rtol=1e-4):
    assert [name for name, _ in a] == [name for name, _ in b] and a
    for (name, ga), (_, gb) in zip(a, b):
        assert float((ga - gb).norm()) <= rtol * float(ga.norm()), name


def madpo(tiny_model_path, out, cls=MADPOTrainer, config=MADPOConfig, **overrides):
    overrides.setdefault("num_train_epochs", 2)
    values = madpo_values(out, preference_num_candidates=4, preference_pairs_per_sample=3, max_new_tokens=5,
                          seed=3, **overrides)  # fmt: skip
    return cls(agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward, train_dataset=ITEMS,
               args=config(**values))  # fmt: skip


def magrpo(tiny_model_path, out, **overrides):
    values = dict(output_dir=str(out), num_turns=1, max_new_tokens=5, temperature=1.0, top_p=1.0,
                  agent_learning_rate=LR, num_generations=3, num_train_epochs=2, logging_steps=1,
                  eval_interval=0, disable_tqdm=True, seed=3, advantage_normalization=False)  # fmt: skip
    values.update(overrides)
    return MAGRPOTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward,
                         train_dataset=ITEMS, args=MAGRPOConfig(**values))  # fmt: skip


# ------------------------------------------------------------------------------------ the config fields


def test_the_knobs_default_to_the_public_behaviour_and_are_documented():
    cfg = MADPOConfig()
    assert (cfg.gradient_accumulation_steps, cfg.lr_scheduler_type, cfg.max_grad_norm) == (1, "constant", None)
    assert (cfg.warmup_steps, cfg.warmup_ratio, cfg.bf16, cfg.fp16, cfg.save_steps) == (0, 0.0, False, False, None)
    docs = TrainingKnobFields.__doc__ + OptimizerStepFields.__doc__  # the step knobs are its base's
    for name, f in TrainingKnobFields.__dataclass_fields__.items():
        assert f.metadata["help"].strip() and f"    {name} (`" in docs, name


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gradient_accumulation_steps": 0}, "`gradient_accumulation_steps` must be >= 1, got 0"),
        ({"lr_scheduler_type": "plateau"}, "`lr_scheduler_type` must be one of: constant, constant_with_warmup"),
        ({"warmup_ratio": 1.5}, "`warmup_ratio` must be in [0, 1], got 1.5"),
        ({"warmup_steps": -1}, "`warmup_steps` must be >= 0, got -1"),
        ({"max_grad_norm": -1.0}, "`max_grad_norm` must be >= 0 or None, got -1.0"),
        ({"save_steps": 0}, "`save_steps` must be >= 1 or None, got 0"),
        ({"bf16": True, "fp16": True}, "`bf16` and `fp16` are both True"),
        ({"lr_scheduler_type": "cosine_with_min_lr"}, "`lr_scheduler_type` 'cosine_with_min_lr' with `lr_scheduler_kwargs`=None"),
    ],
)  # fmt: skip
def test_bad_knobs_are_rejected_naming_the_field_and_value(kwargs, message):
    for cls in (MADPOConfig, MAGRPOConfig, IACConfig, MARLHFIterConfig):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
            cls(**kwargs)


def test_fp16_on_cpu_is_refused_before_training(tiny_model_path, tmp_path):
    with pytest.raises(ValueError, match=r"`fp16` needs a CUDA device .* the models are on cpu; use bf16=True"):
        madpo(tiny_model_path, tmp_path, fp16=True)


# ------------------------------------------------------------------------------------ accumulation


def test_accumulated_micro_batches_step_like_the_mean_gradient_of_all_their_rows():
    """An independent computation: SGD on a linear model, micro-batches of 3, 1 (skipped), 2 rows in one
    step of k = 3 versus one step on the mean loss over the 5 rows that went through."""
    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.randn(6)
    model, reference = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    steps = GradientSteps(SimpleNamespace(gradient_accumulation_steps=3), {"m": torch.optim.SGD(model.parameters(), lr=0.1)})
    for rows, keep in ((slice(0, 3), True), (slice(3, 4), False), (slice(4, 6), True)):
        steps.start_micro_batch()
        loss = ((model(x[rows]).squeeze(-1) - y[rows]) ** 2).mean()
        steps.backward(loss, len(y[rows]))
        stepped = steps.end_micro_batch(len(y[rows])) if keep else steps.discard_micro_batch()
    assert stepped and steps.global_step == 1
    kept = torch.tensor([0, 1, 2, 4, 5])
    mean_loss = ((reference(x[kept]).squeeze(-1) - y[kept]) ** 2).mean()
    mean_loss.backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_madpo_two_micro_batches_of_two_equal_one_batch_of_four(tiny_model_path, tmp_path):
    large = madpo(tiny_model_path, tmp_path / "large", train_batch_size=4)
    small = madpo(tiny_model_path, tmp_path / "small", train_batch_size=2, gradient_accumulation_steps=2)
    grads_large, grads_small = record_gradients(large), record_gradients(small)
    large.train()
    small.train()
    assert_same_gradients(grads_large, grads_small)
    assert len(large.rounds.pairs) == len(small.rounds.pairs) > 4  # several steps per epoch, a partial last
    assert large.gradient_steps.global_step == small.gradient_steps.global_step == 2 * math.ceil(len(large.rounds.pairs) / 4)
    assert small.updates_seen == 2 * math.ceil(len(small.rounds.pairs) / 2)  # micro-batches
    assert_close_weights(weights(large), weights(small))


def test_magrpo_accumulates_across_rollout_buffers_like_one_larger_buffer(tiny_model_path, tmp_path):
    large = magrpo(tiny_model_path, tmp_path / "large", rollout_buffer_size=4, train_batch_size=4)
    small = magrpo(tiny_model_path, tmp_path / "small", rollout_buffer_size=2, train_batch_size=2,
                   gradient_accumulation_steps=2)  # fmt: skip
    before = weights(large)
    grads_large, grads_small = record_gradients(large), record_gradients(small)
    large.train()
    small.train()
    assert_same_gradients(grads_large, grads_small)
    assert large.gradient_steps.global_step == small.gradient_steps.global_step == 2
    assert large.env_step == small.env_step == 2 * len(ITEMS) * 3
    assert any(not torch.equal(before[k], weights(large)[k]) for k in before)
    assert_close_weights(weights(large), weights(small))


def uneven_lengths(monkeypatch):
    """Completions scored as if they had ended early, at a length drawn from their own tokens (1 to all), so
    the micro-batches of a step hold different token counts (test-tiny rarely samples EOS)."""
    from comlrl.trainers.online_rl import policy_learning

    score = policy_learning._completion_logprobs

    def shortened(model, prompts, completions, pad, args):
        logprobs, mask = score(model, prompts, completions, pad, args)
        keep = torch.tensor([1 + sum(int(t) for t in c) % mask.shape[1] for c in completions])
        return logprobs, mask * (torch.arange(mask.shape[1])[None, :] < keep[:, None]).to(mask.dtype)

    monkeypatch.setattr(policy_learning, "_completion_logprobs", shortened)


def test_magrpo_dapo_accumulates_by_the_tokens_of_the_whole_step(tiny_model_path, tmp_path, monkeypatch):
    """TRL's dapo: Σ per-token losses / the optimizer step's tokens. Two micro-batches of unequal token
    counts (gradient_accumulation_steps=2) step with the gradient of one batch twice as large (whose dapo
    loss, one micro-batch in one process, is exactly that); weighing the micro-batches by rows would not."""
    uneven_lengths(monkeypatch)
    large = magrpo(tiny_model_path, tmp_path / "large", rollout_buffer_size=4, train_batch_size=4, loss_type="dapo")
    small = magrpo(tiny_model_path, tmp_path / "small", rollout_buffer_size=2, train_batch_size=2,
                   gradient_accumulation_steps=2, loss_type="dapo")  # fmt: skip
    tokens = []
    original = small.rl.agent_loss

    def counting(agent, samples, *args):
        out = original(agent, samples, *args)
        tokens.append(int(out.mask.sum()))
        return out

    small.rl.agent_loss = counting
    grads_large, grads_small = record_gradients(large), record_gradients(small)
    large.train()
    small.train()
    assert tokens[0] != tokens[2] and tokens[1] != tokens[3]  # each agent's two micro-batches of step 1
    assert large.gradient_steps.global_step == small.gradient_steps.global_step == 2
    assert_same_gradients(grads_large, grads_small)


def test_iac_and_its_critics_accumulate_like_one_larger_batch(tiny_model_path, tmp_path):
    def iac(out, **overrides):
        args = IACConfig(output_dir=str(out), num_turns=1, num_agents=2, max_new_tokens=4, num_train_epochs=1,
                         rollout_buffer_size=4, advantage_normalization=False, eval_interval=0, disable_tqdm=True,
                         agent_learning_rate=1e-2, critic_learning_rate=1e-2, seed=5, **overrides)  # fmt: skip
        return IACTrainer(agent_model=tiny_model_path, reward_func=varied_reward, train_dataset=ITEMS, args=args)

    large, small = iac(tmp_path / "large", train_batch_size=4), iac(tmp_path / "small", train_batch_size=1, gradient_accumulation_steps=4)
    grads_large, grads_small = record_gradients(large), record_gradients(small)
    large.train()
    small.train()
    assert_same_gradients(grads_large, grads_small)  # the agents' and the critics' optimizers
    assert small.gradient_steps.global_step == large.gradient_steps.global_step == 1
    assert_close_weights(weights(large), weights(small))
    for a, b in zip(large.critics, small.critics):
        assert_close_weights(a.trainable_state(), b.trainable_state())


def test_the_reward_model_fit_accumulates_like_one_larger_batch(tiny_model_path):
    pairs = [
        {"prompts": [f"p{i}", f"q{i}"], "winner_completions": [f"good {i}", "yes"], "loser_completions": ["bad", "no"]}
        for i in range(5)
    ]  # fmt: skip
    fitted, grads = [], []
    original = torch.optim.AdamW.step
    try:
        for batch, knobs in ((4, None), (2, SimpleNamespace(gradient_accumulation_steps=2))):
            model = JointRewardModel.from_source(tiny_model_path, seed=1)
            seen = []

            def step(self, *args, seen=seen, **kwargs):
                seen.append(torch.cat([p.grad.reshape(-1) for g in self.param_groups for p in g["params"] if p.grad is not None]).clone())
                return original(self, *args, **kwargs)

            torch.optim.AdamW.step = step
            fit_reward_model(model, pairs, epochs=2, batch_size=batch, lr=LR, seed=3, training=knobs)
            fitted.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            grads.append([("reward_model", g) for g in seen])
    finally:
        torch.optim.AdamW.step = original
    assert len(grads[0]) == 4  # 2 epochs of ceil(5 / 4) steps
    assert_same_gradients(*grads)
    assert_close_weights(*fitted)


# ------------------------------------------------------------------------------------ LR schedule, clipping


def expected_lrs(name, base, warmup, horizon, count):
    probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base)
    schedule = get_scheduler(name, probe, num_warmup_steps=warmup, num_training_steps=horizon)
    out = []
    for _ in range(count):
        out.append(probe.param_groups[0]["lr"])
        probe.step()
        schedule.step()
    return out


def watch_optimizers(trainer):
    """The learning rate and the gradient norm each policy's optimizer steps with."""
    seen = {name: [] for name in trainer.optimizers_by_policy}
    for name, optimizer in trainer.optimizers_by_policy.items():

        def hook(opt, args, kwargs, name=name):
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            seen[name].append((opt.param_groups[0]["lr"], norm))

        optimizer.register_step_pre_hook(hook)
    return seen


@pytest.mark.parametrize(("schedule", "warmup"), [("linear", {"warmup_steps": 2}), ("cosine", {"warmup_ratio": 0.25})])
def test_madpo_learning_rates_are_transformers_schedule_step_by_step(schedule, warmup, tiny_model_path, tmp_path):
    trainer = madpo(tiny_model_path, tmp_path, train_batch_size=2, gradient_accumulation_steps=2, lr_scheduler_type=schedule, **warmup)
    seen = watch_optimizers(trainer)
    trainer.train()
    horizon = 2 * math.ceil(math.ceil(len(trainer.rounds.pairs) / 2) / 2)  # epochs x steps per epoch
    steps = warmup.get("warmup_steps") or math.ceil(warmup["warmup_ratio"] * horizon)
    want = expected_lrs(schedule, 1e-2, steps, horizon, horizon)
    for name, calls in seen.items():
        assert [lr for lr, _ in calls] == pytest.approx(want, rel=1e-12, abs=0), name
    logged = [r["learning_rate"] for r in records(trainer) if "learning_rate" in r]
    assert logged and all(lr <= 1e-2 for lr in logged)


def test_magrpo_warmup_ratio_schedule_spans_the_run(tiny_model_path, tmp_path):
    trainer = magrpo(tiny_model_path, tmp_path, rollout_buffer_size=1, train_batch_size=1,
                     lr_scheduler_type="constant_with_warmup", warmup_ratio=0.5)  # fmt: skip
    seen = watch_optimizers(trainer)
    trainer.train()
    horizon = 2 * len(ITEMS)
    assert [lr for lr, _ in seen["agent_0"]] == pytest.approx(expected_lrs("constant_with_warmup", 1e-2, 4, horizon, horizon))


def test_clipping_bounds_every_policy_s_gradient_norm(tiny_model_path, tmp_path):
    trainer = magrpo(tiny_model_path, tmp_path, rollout_buffer_size=2, train_batch_size=2, max_grad_norm=1e-3)
    seen = watch_optimizers(trainer)
    trainer.train()
    for name, calls in seen.items():
        assert calls and all(norm <= 1e-3 * (1 + 1e-4) for _, norm in calls), name
    logged = [r["grad_norm"] for r in records(trainer) if "grad_norm" in r]
    assert logged and max(logged) > 1e-3  # the norms before clipping: the clip was active


def test_bf16_autocast_trains_on_cpu(tiny_model_path, tmp_path):
    trainer = madpo(tiny_model_path, tmp_path, num_train_epochs=1, bf16=True)
    before = weights(trainer)
    trainer.train()
    after = weights(trainer)
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in after.values())
    assert any(not torch.equal(before[k], after[k]) for k in before) and trainer.nonfinite_losses_skipped == 0


# ------------------------------------------------------------------------------------ save_steps


def checkpoints(folder):
    found = sorted((int(p.name.split("-")[1]), p) for p in folder.glob("checkpoint-*"))
    return {step: json.loads((p / "trainer_state.json").read_text())["data_cursor"] for step, p in found}


def test_save_steps_fall_inside_epochs_and_save_total_limit_prunes(tiny_model_path, tmp_path):
    trainer = madpo(tiny_model_path, tmp_path / "out", train_batch_size=1, save_steps=3, save_total_limit=2)
    trainer.train()  # no checkpoint keyword: only the save_steps checkpoints, in output_dir
    per_epoch, total = len(trainer.rounds.pairs), trainer.gradient_steps.global_step
    assert total == 2 * per_epoch
    due = [s for s in range(3, total + 1, 3)]
    kept = checkpoints(tmp_path / "out")
    assert sorted(kept) == due[-2:]
    for step, cursor in kept.items():  # written right after the step's batch
        epoch = (step - 1) // per_epoch
        assert cursor == {"pairs_collected": True, "epochs_done": epoch, "in_epoch": step - epoch * per_epoch}


def test_save_steps_add_to_the_epoch_checkpoints_and_name_them_by_optimizer_steps(tiny_model_path, tmp_path):
    trainer = madpo(tiny_model_path, tmp_path / "out", train_batch_size=2, save_steps=2)
    trainer.train(checkpoint_dir=tmp_path / "ck")
    per_epoch = math.ceil(len(trainer.rounds.pairs) / 2)
    want = {0, per_epoch, 2 * per_epoch} | set(range(2, 2 * per_epoch + 1, 2))
    assert set(checkpoints(tmp_path / "ck")) == want


def test_madpo_resumed_from_a_checkpoint_inside_an_epoch_ends_bitwise_equal(tiny_model_path, tmp_path):
    done = madpo(tiny_model_path, tmp_path / "a", train_batch_size=1, save_steps=3, logging_steps=2,
                 lr_scheduler_type="linear", warmup_steps=2, gradient_accumulation_steps=1)  # fmt: skip
    done.train()
    inside = [s for s, cursor in checkpoints(tmp_path / "a").items() if cursor.get("in_epoch")]
    resumed = madpo(tiny_model_path, tmp_path / "b", train_batch_size=1, save_steps=3, logging_steps=2,
                    lr_scheduler_type="linear", warmup_steps=2)  # fmt: skip
    resumed.train(resume_from_checkpoint=tmp_path / "a" / f"checkpoint-{inside[0]}")
    assert_same_run(done, resumed, tmp_path / "a", tmp_path / "b")
    assert resumed.gradient_steps.global_step == done.gradient_steps.global_step


def test_magrpo_resumed_from_a_checkpoint_inside_an_epoch_ends_bitwise_equal(tiny_model_path, tmp_path):
    def run(out, **kw):
        return magrpo(tiny_model_path, out, rollout_buffer_size=1, train_batch_size=1, save_steps=3,
                      gradient_accumulation_steps=1, lr_scheduler_type="cosine", **kw)  # fmt: skip

    done = run(tmp_path / "a")
    done.train()
    assert checkpoints(tmp_path / "a")[3] == {"in_epoch": 3}  # 3 of the epoch's 4 rollout buffers
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=tmp_path / "a" / "checkpoint-3")
    a, b = weights(done), weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert done.metrics_logger.history == resumed.metrics_logger.history
    assert (tmp_path / "a" / "metrics.jsonl").read_bytes() == (tmp_path / "b" / "metrics.jsonl").read_bytes()
    assert (done.env_step, done.updates_seen) == (resumed.env_step, resumed.updates_seen)


@pytest.mark.parametrize("family", ["madpo", "marlhf"])
def test_iterative_run_resumed_from_a_checkpoint_inside_a_round_ends_bitwise_equal(family, tiny_model_path, tmp_path):
    def run(out):
        if family == "madpo":
            return madpo(tiny_model_path, out, cls=MADPOIterTrainer, config=MADPOIterConfig, num_iterations=2,
                         train_batch_size=1, save_steps=3, comparator_policy="history")  # fmt: skip
        args = MARLHFIterConfig(**madpo_values(out, num_iterations=2, preference_num_candidates=3, max_new_tokens=4,
                                               num_train_epochs=1, rollout_buffer_size=1, train_batch_size=1,
                                               num_generations=2, save_steps=3, seed=3,
                                               reward_model_name=tiny_model_path, reward_model_device="cpu"))  # fmt: skip
        return MARLHFIterTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward,
                                 train_dataset=ITEMS, args=args)  # fmt: skip

    done = run(tmp_path / "a")
    done.train()
    inside = sorted(s for s, c in checkpoints(tmp_path / "a").items() if c.get("round_pairs"))
    assert inside, checkpoints(tmp_path / "a")
    resumed = run(tmp_path / "b")
    resumed.train(resume_from_checkpoint=tmp_path / "a" / f"checkpoint-{inside[-1]}")
    assert_same_run(done, resumed, tmp_path / "a", tmp_path / "b")
    for r in (1, 2):
        name = f"iteration_{r:04d}.json"
        assert (tmp_path / "a" / "preference_replay" / name).read_bytes() == (
            tmp_path / "b" / "preference_replay" / name
        ).read_bytes()


def test_marlhf_resumed_from_a_checkpoint_inside_its_rl_stage_keeps_the_fitted_reward_model(tiny_model_path, tmp_path):
    def run(out):
        args = MARLHFConfig(**madpo_values(out, preference_num_candidates=3, max_new_tokens=4, num_train_epochs=1,
                                           rollout_buffer_size=1, train_batch_size=1, num_generations=2, save_steps=2,
                                           seed=3, reward_model_name=tiny_model_path, reward_model_device="cpu"))  # fmt: skip
        return MARLHFTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=varied_reward, train_dataset=ITEMS,
                             args=args)  # fmt: skip

    done = run(tmp_path / "a")
    done.train()
    assert checkpoints(tmp_path / "a")[2] == {"pairs_collected": True, "epochs_done": 0, "in_epoch": 2}
    assert (tmp_path / "a" / "checkpoint-2" / "extra" / "reward_model").is_dir()
    resumed = run(tmp_path / "b")
    fits = []
    resumed.fit_reward_model = lambda *a, **k: fits.append(a)  # a resume inside the RL stage does not refit
    resumed.train(resume_from_checkpoint=tmp_path / "a" / "checkpoint-2")
    assert not fits
    assert_same_run(done, resumed, tmp_path / "a", tmp_path / "b")
