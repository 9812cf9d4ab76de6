"""One policy's update as its own object (:class:`PolicyUpdater`): on the rows a trainer step produced it
moves the same weights and reports the same metrics as the trainer; it reports non-finite steps as events
and leaves counting to the caller; a trainer given ``updaters`` uses them instead of its own.

Setup as ``test_at_grpo_trainer.py``: test-tiny model, Plan-Path 4x4, 2 problems, K = 2, 8 tokens, a reward
bonus per candidate index so the advantages are not all 0.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from comlrl.trainers.core.optimization import GradientSteps, warmup_steps_for
from pettingllms.trainer import policy_update
from pettingllms.trainer.at_grpo import ATGRPOTrainer
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from pettingllms.trainer.policy_update import PolicyUpdater, UpdateResult, engine_settings
from tests.helpers.bonus_trainer import BonusTrainer
from tests.pettingllms.test_at_grpo_trainer import make_trainer, snapshot


def captured_step(tmp_path, model_path, **overrides):
    """A trainer after one step, the rows its update of policy ``shared`` got (copied before the update),
    and the step's metrics."""
    trainer = make_trainer(tmp_path, model_path, "L1", name="trainer", **overrides)
    rows = {}
    update = trainer._update_policy

    def capture(name, tensors, step):
        rows[name] = copy.deepcopy(tensors)
        return update(name, tensors, step)

    trainer._update_policy = capture
    (metrics,) = trainer.train()
    return trainer, rows["shared"], metrics


def test_an_updater_on_its_own_moves_the_weights_and_reports_the_metrics_of_the_trainer_update(
    tmp_path, tiny_model_path
):
    # 16 rows in micro-batches of 4: 4 optimizer steps, so AdamW's state carries across steps too.
    trainer, rows, metrics = captured_step(tmp_path, tiny_model_path, per_device_train_batch_size=4)
    fresh = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer, name="fresh")
    updater = PolicyUpdater(fresh.config, fresh.policy, "shared", sampling=fresh.engine.config)
    assert updater.learning_rate() == metrics["policy/shared/learning_rate"]
    result = updater.update(rows, step=1)
    assert isinstance(result, UpdateResult)
    assert result.events == [("finite",)] * 4
    trained = {k: v for k, v in metrics.items() if k.startswith("policy/shared/") and not k.endswith("learning_rate")}
    update_keys = {"loss", "entropy", "grad_norm", "optimizer_steps", "skipped_steps", "num_tokens", "approx_kl"}
    assert update_keys <= {k.removeprefix("policy/shared/") for k in result.metrics}
    assert result.metrics == pytest.approx({k: trained[k] for k in result.metrics}, rel=0, abs=0)
    assert result.metrics["policy/shared/optimizer_steps"] == 4.0
    for a, b in zip(snapshot(trainer)["shared"], fresh.policy.trainable_parameters("shared")):
        assert torch.equal(a, b)
    assert fresh.policy.version("shared") == trainer.policy.version("shared") == 4
    assert fresh.nonfinite.losses_skipped == 0
    updater.scheduler_step()
    assert updater.learning_rate() == trainer.updaters["shared"].learning_rate()


def test_a_non_finite_loss_is_an_event_and_changes_nothing_and_no_guard_counts_it(
    tmp_path, tiny_model_path, monkeypatch
):
    trainer, rows, _ = captured_step(tmp_path, tiny_model_path, per_device_train_batch_size=8)
    fresh = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer, name="fresh", per_device_train_batch_size=8)
    updater = PolicyUpdater(fresh.config, fresh.policy, "shared", sampling=fresh.engine.config)
    calls = []
    loss_fn = policy_update.at_grpo_loss

    def nan_first(*args, **kwargs):  # the first micro-batch of the first optimizer step
        loss, out = loss_fn(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan"), out) if len(calls) == 1 else (loss, out)

    monkeypatch.setattr(policy_update, "at_grpo_loss", nan_first)
    before = [p.detach().clone() for p in fresh.policy.trainable_parameters("shared")]
    result = updater.update(rows, step=3)
    # 16 rows in micro-batches of 8: two optimizer steps, the first skipped.
    assert result.events == [("skip", "loss", "step 3, policy 'shared', iteration 1, optimizer step 1"), ("finite",)]
    assert result.metrics["policy/shared/skipped_steps"] == 1.0
    assert result.metrics["policy/shared/optimizer_steps"] == 1.0
    assert fresh.policy.version("shared") == 1
    assert fresh.nonfinite.losses_skipped == 0 and fresh.nonfinite.in_a_row == {}
    assert any(not torch.equal(a, b) for a, b in zip(before, fresh.policy.trainable_parameters("shared")))


def test_a_single_process_update_needs_rows_and_a_kl_needs_a_reference(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer)
    updater = PolicyUpdater(trainer.config, trainer.policy, "shared", sampling=trainer.engine.config)
    with pytest.raises(ValueError, match=r"policy 'shared', step 2: `tensors` is None; a single process needs rows"):
        updater.update(None, step=2)
    config = copy.deepcopy(trainer.config)
    config.beta = 0.1
    with pytest.raises(ValueError, match=r"policy 'shared': `beta` is 0.1 > 0, so a `reference` policy is needed"):
        PolicyUpdater(config, trainer.policy, "shared", sampling=trainer.engine.config)


class CountingUpdater(PolicyUpdater):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.updates: list[int] = []

    def update(self, tensors, step):
        self.updates.append(step)
        return super().update(tensors, step)


def test_a_trainer_given_updaters_uses_them_and_their_optimizers_are_checkpointed(tmp_path, tiny_model_path):
    policies = make_trainer(tmp_path, tiny_model_path, "L3", cls=ATGRPOTrainer, name="policies", max_steps=2)
    given = {name: CountingUpdater(policies.config, policies.policy, name, sampling=policies.engine.config)
             for name in policies.policy.policies}
    trainer = BonusTrainer(policies.config, policy=policies.policy, engine=policies.engine, updaters=given)
    assert trainer.updaters == given
    assert all(trainer.optimizers[n] is given[n].optimizer for n in given)
    assert all(trainer.schedulers[n] is given[n].scheduler for n in given)
    trainer.train()
    assert {n: u.updates for n, u in given.items()} == {"tool": [1, 2], "plan": [1, 2]}
    assert all(given[n].optimizer.state for n in given)  # the given optimizers stepped
    with pytest.raises(ValueError, match=r"`updaters` lacks policies \['tool'\]; it must hold one per policy"):
        ATGRPOTrainer(policies.config, policy=policies.policy, engine=policies.engine, updaters={"plan": given["plan"]})


class SubmittingUpdater(PolicyUpdater):
    """An updater with the remote updaters' ``submit``: the trainer starts it early, collects it in
    ``update``; ``log`` (shared by the policies) records the order of the calls."""

    def __init__(self, *args, log, **kwargs):
        super().__init__(*args, **kwargs)
        self.log, self.submitted = log, None

    def submit(self, tensors, step):
        self.log.append(("submit", self.name, step))
        self.submitted = (tensors, step)

    def update(self, tensors, step):
        self.log.append(("update", self.name, step))
        assert self.submitted is not None and self.submitted[0] is tensors and self.submitted[1] == step
        return super().update(tensors, step)


def test_updaters_that_submit_get_every_policy_s_rows_before_the_first_update_is_collected(tmp_path, tiny_model_path):
    """The Ray path's concurrency seam: every policy's update is started before any is waited for (so
    UpdateWorkers on their own devices compute at the same time), and the result is the serial one's."""
    serial = make_trainer(tmp_path, tiny_model_path, "L3", name="serial", max_steps=2)
    serial.train()
    policies = make_trainer(tmp_path, tiny_model_path, "L3", cls=ATGRPOTrainer, name="policies", max_steps=2)
    log = []
    given = {name: SubmittingUpdater(policies.config, policies.policy, name, log=log, sampling=policies.engine.config)
             for name in policies.policy.policies}
    trainer = BonusTrainer(policies.config, policy=policies.policy, engine=policies.engine, updaters=given)
    trainer.train()
    for step in (1, 2):
        calls = [call for call in log if call[2] == step]
        assert sorted(calls[:2]) == [("submit", "plan", step), ("submit", "tool", step)]
        assert calls[2:] == [("update", "tool", step), ("update", "plan", step)]  # collected in policy order
    mine, theirs = snapshot(trainer), snapshot(serial)
    assert mine.keys() == theirs.keys()
    for name, values in theirs.items():
        assert all(torch.equal(a, b) for a, b in zip(mine[name], values)), name


# A step without an optimizer step still advances the LR schedule (one per rollout); torch warns about that.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_the_learning_rate_is_constant_by_default_as_in_every_trainer(tmp_path, tiny_model_path):
    from comlrl.trainers.reinforce import MAGRPOConfig

    assert ATGRPOConfig().lr_scheduler_type == "constant" == MAGRPOConfig().lr_scheduler_type
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer, max_steps=4)
    updater = trainer.updaters["shared"]
    rates = []
    for _ in range(4):
        rates.append(updater.learning_rate())
        updater.scheduler_step()
    assert rates == [trainer.config.learning_rate] * 4


def test_the_schedule_s_warm_up_is_the_engine_s_rule():
    for ratio, steps in ((0.25, 10), (0.1, 7), (0.0, 5), (1.0, 3)):
        config = ATGRPOConfig(warmup_ratio=ratio, max_steps=steps, lr_scheduler_type="linear", train_seed_range=[0, 50])
        assert warmup_steps_for(engine_settings(config), steps) == config.num_warmup_steps == math.ceil(ratio * steps)


def test_the_update_steps_through_the_engine(tmp_path, tiny_model_path):
    trainer = make_trainer(tmp_path, tiny_model_path, "L1", cls=ATGRPOTrainer)
    updater = trainer.updaters["shared"]
    assert isinstance(updater.steps, GradientSteps) and updater.steps.optimizers == {"shared": updater.optimizer}
    assert (updater.steps.nonfinite, updater.steps.measure_grad_norm, updater.steps.divisors) == ("step", True, ())
    taken = []
    take = updater.steps.take
    updater.steps.take = lambda: taken.append(1) or take()
    (metrics,) = trainer.train()
    assert len(taken) == metrics["policy/shared/optimizer_steps"] > 0
