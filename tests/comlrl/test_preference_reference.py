"""``preference_reference="initial"``: MADPO's margin against a frozen copy of the initial agents (DPO's
reference; our extension, the public margin is reference-free). The pure margin function, the first update
(policy == reference: every margin exactly 0, the loss ln 2), margins after training against an independent
computation with a fresh trainer on the initial weights, exact resume with the saved reference, and the
config's checks."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comlrl.trainers.preference import MADPOConfig, MADPOIterConfig, MADPOTrainer, MARLHFConfig
from comlrl.trainers.preference.losses import dpo_margins, madpo_loss
from comlrl.trainers.preference.reference_margin import REFERENCE_DIR
from tests.helpers.trainer_helpers import (
    Interrupt,
    assert_same_run,
    crash_when_updates_seen,
    madpo_values,
    plan_items,
    records,
    varied_reward,
    weights,
)

ITEMS = plan_items(4)


def test_dpo_margins_subtract_the_reference_and_pass_no_gradient_to_it():
    policy = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    reference = torch.tensor([0.25, -3.0, 0.5], requires_grad=True)
    out = dpo_margins(policy, reference)
    assert torch.equal(out.detach(), torch.tensor([0.75, 1.0, 0.0]))
    out.sum().backward()
    assert torch.equal(policy.grad, torch.ones(3)) and reference.grad is None
    with pytest.raises(ValueError, match=r"`policy_margins` \(3,\) and `reference_margins` \(2,\) differ in shape"):
        dpo_margins(policy, reference[:2])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=1, max_size=8), st.floats(0.01, 2.0))
def test_a_policy_equal_to_its_reference_has_the_loss_ln2(margins, beta):
    m = torch.tensor([margins, margins[::-1]], dtype=torch.float64)
    assert madpo_loss(dpo_margins(m, m.clone()), beta).item() == pytest.approx(math.log(2), abs=1e-12)


def trainer(out, model, reference="initial", **overrides):
    args = MADPOConfig(**madpo_values(out, num_train_epochs=2, seed=4, preference_reference=reference, **overrides))
    return MADPOTrainer(agent_model=model, num_agents=2, reward_func=varied_reward, train_dataset=ITEMS, args=args)


def test_the_first_margins_are_zero_and_later_ones_are_measured_from_the_initial_agents(tiny_model_path, tmp_path):
    trained = trainer(tmp_path / "out", tiny_model_path)
    trained.train()
    first = next(r for r in records(trained) if "loss" in r)  # the first update's record
    assert first["joint_margin"] == 0.0 and first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first["preference_accuracy"] == 0.0
    assert (tmp_path / "out" / REFERENCE_DIR).is_dir()  # saved once, for a resume

    pairs = trained.rounds.pairs[:4]
    fresh = trainer(tmp_path / "fresh", tiny_model_path, reference="none")  # the initial weights, no reference
    with torch.no_grad():
        with_reference = trained.compute_margins(pairs)
        initial = fresh.compute_margins(pairs)
        reference, trained.preference_reference = trained.preference_reference, None
        policy_only = trained.compute_margins(pairs)
        trained.preference_reference = reference
    assert not torch.allclose(policy_only, initial, atol=1e-3)  # training moved the margins
    torch.testing.assert_close(with_reference, policy_only - initial, atol=1e-5, rtol=1e-5)
    # The reference itself never trained: its weights are the initial ones.
    start = weights(fresh)
    for name in trained.policy.policies:
        copied = dict(reference.reference.policy.named_trainable_parameters(name))
        for key, value in copied.items():
            assert torch.equal(value, start[f"{name}.{key}"]), key


def test_none_keeps_the_public_reference_free_margin(tiny_model_path, tmp_path):
    plain = trainer(tmp_path / "out", tiny_model_path, reference="none")
    assert plain.preference_reference is None
    plain.train()
    first = next(r for r in records(plain) if "loss" in r)
    assert first["joint_margin"] != 0.0 and not (tmp_path / "out" / REFERENCE_DIR).exists()


def test_a_resumed_run_reloads_the_saved_reference_and_ends_bitwise_equal(tiny_model_path, tmp_path):
    out_a, out_b = tmp_path / "a", tmp_path / "b"
    done = trainer(out_a, tiny_model_path)
    done.train(checkpoint_dir=out_a / "ck")

    crashed = trainer(out_b, tiny_model_path)
    steps_per_epoch = -(-len(done.rounds.pairs) // 2)
    crash_when_updates_seen(crashed, steps_per_epoch + 1)  # inside epoch 2
    with pytest.raises(Interrupt):
        crashed.train(checkpoint_dir=out_b / "ck")

    resumed = trainer(out_b, tiny_model_path)
    with torch.no_grad():  # a wrong reference, unless the resume reloads the saved one
        for p in resumed.preference_reference.reference.policy.models()[0].parameters():
            p.add_(0.5)
    resumed.train(resume_from_checkpoint=True, checkpoint_dir=out_b / "ck")
    assert_same_run(done, resumed, out_a, out_b)


def test_the_config_checks_the_value_and_says_where_it_has_no_effect():
    assert MADPOConfig(preference_reference=" Initial ").preference_reference == "initial"
    assert MADPOIterConfig().preference_reference == "none"
    with pytest.raises(ValueError, match="`preference_reference` must be one of: none, initial, got 'final'"):
        MADPOConfig(preference_reference="final")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MARLHFConfig(preference_reference="initial")
    assert any("`preference_reference='initial'` has no effect on MARLHF" in str(w.message) for w in caught)
