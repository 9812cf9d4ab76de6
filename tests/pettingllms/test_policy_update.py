"""One policy's update as its own object (:class:`PolicyUpdater`): on the rows a trainer step produced it
moves the same weights and reports the same metrics as the trainer; it reports non-finite steps as events
and leaves counting to the caller; a trainer given ``updaters`` uses them instead of its own.

Setup as ``test_at_grpo_trainer.py``: test-tiny model, Plan-Path 4x4, 2 problems, K = 2, 8 tokens, a reward
bonus per candidate index so the advantages are not all 0.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch

from comlrl.rl import LOSS_TYPES
from comlrl.trainers.core.optimization import GradientSteps, MicroBatchWeight, warmup_steps_for
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


# ------------------------------------------------------------------------------------ accumulation weighting


@pytest.fixture(scope="module")
def five_rows(tmp_path_factory, tiny_model_path):
    """Five rows of policy ``shared`` from one trainer step, of one completion length (so ``bnpo``'s token mean
    of a micro-batch is its row mean too)."""
    _, rows, _ = captured_step(tmp_path_factory.mktemp("rows"), tiny_model_path)
    lengths = rows.completion_mask.sum(-1).tolist()
    common = max(set(lengths), key=lengths.count)
    index = torch.tensor([i for i, n in enumerate(lengths) if n == common][:5])
    assert len(index) == 5
    tensors = {f.name: getattr(rows, f.name)[index] for f in dataclasses.fields(rows) if f.name not in ("policy", "samples")}
    return dataclasses.replace(rows, **tensors, samples=[rows.samples[i] for i in index.tolist()])


def spied_update(tmp_path, model_path, rows, name, **overrides):
    """A fresh updater's update of ``rows`` (one optimizer step): its result, the gradients it stepped on,
    the micro-batch weights it back-propagated with (and each micro-batch's rows), and the parameters after."""
    fresh = make_trainer(tmp_path, model_path, "L1", cls=ATGRPOTrainer, name=name, **overrides)
    updater = PolicyUpdater(fresh.config, fresh.policy, "shared", sampling=fresh.engine.config)
    params = fresh.policy.trainable_parameters("shared")
    grads, weights = [], []
    take, backward, end = updater.steps.take, updater.steps.backward, updater.steps.end_micro_batch

    def spy_take():
        grads.append([torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params])
        return take()

    def spy_backward(loss, rows=None, *, weight=None):
        weights.append(weight)
        return backward(loss, rows, weight=weight)

    def spy_end(rows=0):
        weights[-1] = (weights[-1], rows)
        return end(rows)

    updater.steps.take, updater.steps.backward, updater.steps.end_micro_batch = spy_take, spy_backward, spy_end
    result = updater.update(copy.deepcopy(rows), step=1)
    return result, grads, weights, [p.detach().clone() for p in params]


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo"])
def test_unequal_micro_batches_make_the_step_of_one_batch_of_all_rows(loss_type, five_rows, tmp_path, tiny_model_path):
    # 5 rows: one micro-batch of 5, or micro-batches of 3 and 2 in one step (k = 2). Each micro-batch weighs its
    # rows and the step divides by 5 (comlrl's rule), so the short one is not over-weighted as 1/k did.
    # adam_epsilon 1: AdamW's first step is about lr·g, so the parameters show the gradient's scale too.
    knobs = dict(loss_type=loss_type, adam_epsilon=1.0)
    one = spied_update(tmp_path, tiny_model_path, five_rows, "one", per_device_train_batch_size=5, **knobs)
    two = spied_update(tmp_path, tiny_model_path, five_rows, "two", per_device_train_batch_size=3,
                       gradient_accumulation_steps=2, **knobs)  # fmt: skip
    for result, _, _, _ in (one, two):
        assert result.events == [("finite",)]
    for got, want in zip(two[1][0], one[1][0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
    for got, want in zip(two[3], one[3]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)
    assert sorted(two[2], key=lambda w: w[1]) == [(MicroBatchWeight(n, n, "rows"), n) for n in (2.0, 3.0)]


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_the_same_loss_type_weighs_micro_batches_alike_in_both_packages(loss_type, five_rows, tmp_path, tiny_model_path):
    # pettingllms: PolicyUpdater's micro-batches of 3 and 2 rows; comlrl: GradientSteps.backward_policy of the
    # same micro-batches (an agent's rows and tokens).
    result, _, petting, _ = spied_update(tmp_path, tiny_model_path, five_rows, "p", loss_type=loss_type,
                                         per_device_train_batch_size=3, gradient_accumulation_steps=2)  # fmt: skip
    assert result.events == [("finite",)] and sorted(rows for _, rows in petting) == [2, 3]
    param = torch.nn.Parameter(torch.zeros(1))
    steps = GradientSteps(SimpleNamespace(gradient_accumulation_steps=2), {"m": torch.optim.SGD([param], lr=0.1)})
    steps.add_divisors("tokens/0")
    comlrl, backward = [], steps.backward
    steps.backward = lambda loss, rows=None, *, weight=None: comlrl.append(weight) or backward(loss, rows, weight=weight)
    length = int(five_rows.completion_mask.sum(-1)[0])
    for _, rows in petting:
        steps.start_micro_batch()
        steps.backward_policy(param.sum(), rows, loss_type=loss_type, policy_loss=param.sum(), tokens=rows * length)
        steps.end_micro_batch(rows)
    order, petting = [rows for _, rows in petting], [weight for weight, _ in petting]
    if loss_type == "dapo":  # the step's tokens: already in pettingllms' loss, divided after in comlrl
        assert petting == [MicroBatchWeight(1.0)] * 2
        assert comlrl == [MicroBatchWeight(rows * length, rows * length, "tokens/0") for rows in order]
    else:  # its rows, divided by the step's rows
        assert comlrl == petting == [MicroBatchWeight(rows, rows, "rows") for rows in order]
