"""NaN / inf in a loss, a reward or a log-prob, in every trainer family: the shared check (pure functions and
the counter), then per family one case that is skipped and counted while the run goes on (the counter in the
logged metrics, a warning naming what, where and which agent / role) and one that stops the run after
``max_nonfinite_losses_in_a_row`` in a row. Injection is by monkeypatching: the reward function, the model's
forward (a wrapper that returns logits holding +inf while a flag is up), or a loss function. Tiny models:
test-tiny and Plan-Path 4x4 with one turn."""

from __future__ import annotations

import functools
import logging
import math

import pytest
import torch

from comlrl.rl import finite_group_mask, is_finite, nonfinite_names
from comlrl.trainers.actor_critic import IACConfig, IACTrainer
from comlrl.trainers.core.nonfinite import NonFiniteError, NonFiniteGuard
from comlrl.trainers.online_rl import policy_learning
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer, MARLHFConfig, MARLHFTrainer
from comlrl.trainers.preference import reward_model as reward_model_module
from comlrl.trainers.preference.reward_model import JointRewardModel
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from pettingllms.trainer.at_grpo import ATGRPOTrainer
from pettingllms.trainer.at_grpo_config import ATGRPOConfig
from tests.helpers.trainer_helpers import madpo_values, plan_items, records, varied_reward, weights

NAN, INF = float("nan"), float("inf")
LIMIT = "max_nonfinite_losses_in_a_row"


# ---- the shared check --------------------------------------------------------------------------------


def test_nonfinite_names_lists_what_holds_nan_or_inf_and_ignores_masked_positions():
    logprobs = torch.tensor([[-1.0, -INF], [-0.5, -2.0]])
    mask = torch.tensor([[True, False], [True, True]])
    values = {"log-probs": logprobs, "advantages": torch.tensor([0.1, NAN]), "kl": None, "loss": 2.5}
    assert nonfinite_names(values, {"log-probs": mask}) == ["advantages"]  # -inf sits in padding
    assert nonfinite_names(values) == ["log-probs", "advantages"]
    assert nonfinite_names({"loss": INF, "x": -INF, "ok": 0.0, "t": torch.tensor(NAN)}) == ["loss", "x", "t"]
    assert is_finite(torch.zeros(2, 3)) and not is_finite(NAN)
    with pytest.raises(ValueError, match=r"`mask` must have shape \(2, 2\)"):
        is_finite(logprobs, torch.ones(3, dtype=torch.bool))


def test_finite_group_mask_drops_every_member_of_a_group_with_a_nonfinite_reward():
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        n = int(torch.randint(1, 12, (1,), generator=generator))
        groups = torch.randint(0, 4, (n,), generator=generator)
        rewards = torch.randn(n, generator=generator, dtype=torch.float64)
        poison = torch.rand(n, generator=generator) < 0.2
        rewards[poison] = torch.tensor([NAN, INF, -INF])[torch.arange(int(poison.sum())) % 3].double()
        keep, dropped = finite_group_mask(rewards, groups)
        # Independent computation, element by element.
        bad = sorted({int(groups[i]) for i in range(n) if not math.isfinite(float(rewards[i]))})
        assert dropped == bad
        assert keep.tolist() == [int(groups[i]) not in bad for i in range(n)]
    with pytest.raises(ValueError, match="1-D of one length"):
        finite_group_mask([1.0, 2.0], [0])
    with pytest.raises(TypeError, match="`group_ids` must hold integers"):
        finite_group_mask([1.0], [0.0])


def test_guard_counts_resets_and_stops_at_the_limit_per_key(caplog):
    logged = []
    guard = NonFiniteGuard(3, on_count=logged.append)
    with caplog.at_level(logging.WARNING):
        guard.skip_step("loss of agent 1", "update 4")
        guard.drop_rewards(2, "item 7: [nan, 1.0]", "update 5")
        guard.empty_step("update 5")
    assert "non-finite loss of agent 1 at update 4: step skipped" in caplog.text
    assert "non-finite reward at update 5: 2 group(s) dropped (2 so far): item 7: [nan, 1.0]" in caplog.text
    assert logged[-1] == {"nonfinite_losses_skipped": 1.0, "nonfinite_rewards_dropped": 2.0}
    assert guard.in_a_row[None] == 2
    guard.finite_step()
    guard.skip_step("loss", "update 7", key="plan")  # another policy's streak is its own
    guard.skip_step("loss", "update 8")
    guard.skip_step("loss", "update 9")
    state = guard.state_dict()
    with pytest.raises(NonFiniteError, match=rf"3 non-finite steps in a row \(limit `{LIMIT}`=3\); the last: "
                       r"non-finite log-probs at update 10"):
        guard.skip_step("log-probs", "update 10")
    restored = NonFiniteGuard(3)
    restored.load_state_dict(state)
    assert restored.state_dict() == state and restored.in_a_row == {None: 2, "plan": 1}
    old = NonFiniteGuard(3)  # a checkpoint from before the reward counter
    old.load_state_dict({"nonfinite_losses_skipped": 4, "nonfinite_in_a_row": 1})
    assert old.metrics() == {"nonfinite_losses_skipped": 4.0, "nonfinite_rewards_dropped": 0.0}
    with pytest.raises(ValueError, match=f"`{LIMIT}` must be an integer >= 1, got 0"):
        NonFiniteGuard(0)


def test_every_family_has_the_setting_with_one_default_and_one_check():
    for cls in (MADPOConfig, MARLHFConfig, MAGRPOConfig, IACConfig, ATGRPOConfig):
        assert cls().max_nonfinite_losses_in_a_row == 10, cls
        with pytest.raises(ValueError, match=f"`{LIMIT}` must be .*>= 1, got 0"):
            cls(max_nonfinite_losses_in_a_row=0)


# ---- injection helpers ---------------------------------------------------------------------------------


class Poison:
    """While ``on``, every forward with gradients enabled (the training forwards; sampling runs under
    no_grad) of the wrapped models returns logits holding +inf, as a diverged model's would."""

    def __init__(self, *models):
        self.on = False
        for model in {id(m): m for m in models}.values():
            original = model.forward

            @functools.wraps(original)  # keeps the signature the scorer inspects
            def forward(*args, _original=original, **kwargs):
                out = _original(*args, **kwargs)
                if self.on and torch.is_grad_enabled():
                    out.logits = out.logits.masked_fill(torch.ones_like(out.logits, dtype=torch.bool), INF)
                return out

            model.forward = forward


def watch_steps(owner, name, poison=None, bad_calls=(), modules=()):
    """Wrap ``owner.<name>`` (one update): poison the calls numbered in ``bad_calls`` (from 1) and record
    ``(result, parameters before, parameters after)`` per call; ``modules`` adds their state (critics)."""
    calls = []
    step = getattr(owner, name)

    def snapshot():
        out = {k: v.clone() for k, v in weights(trainer_of(owner)).items()}
        for i, module in enumerate(modules):
            out.update({f"m{i}.{k}": v.detach().clone() for k, v in module.state_dict().items()})
        return out

    def wrapped(*args, **kwargs):
        if poison is not None:
            poison.on = len(calls) + 1 in bad_calls
        before = snapshot()
        result = step(*args, **kwargs)
        if poison is not None:
            poison.on = False
        calls.append((result, before, snapshot()))
        return result

    setattr(owner, name, wrapped)
    return calls


def trainer_of(owner):
    """What holds the policies: the trainer itself, or for its RL stage (``trainer.rl``) the stage's host."""
    return getattr(owner, "host", owner)


def unchanged(before, after):
    return all(torch.equal(before[k], after[k]) for k in before)


def changed(before, after):
    agents = {k.split(".")[0] for k in before if k.startswith("agent_")}
    return all(any(not torch.equal(before[k], after[k]) for k in before if k.startswith(a + ".")) for a in agents)


def max_logged(trainer, key):
    return max(r.get(key, 0) for r in records(trainer))


ITEMS = plan_items(3)


def online_args(cls, tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"), max_new_tokens=4, temperature=1.0, top_p=1.0, agent_learning_rate=1e-2,
        num_generations=2, num_train_epochs=1, rollout_buffer_size=3, train_batch_size=1, logging_steps=1,
        eval_interval=0, disable_tqdm=True, seed=3, num_turns=1,
    )  # fmt: skip
    if cls is IACConfig:
        values.update(num_agents=2, critic_learning_rate=1e-2, critic_type="v")
    values.update(overrides)
    return cls(**values)


def online_trainer(model, family, tmp_path, reward=varied_reward, **overrides):
    if family == "magrpo":
        return MAGRPOTrainer(agent_model=model, num_agents=2, reward_func=reward, train_dataset=ITEMS,
                             args=online_args(MAGRPOConfig, tmp_path, **overrides))  # fmt: skip
    return IACTrainer(agent_model=model, reward_func=reward, train_dataset=ITEMS,
                      args=online_args(IACConfig, tmp_path, **overrides))  # fmt: skip


def nan_for(task_index):
    """``varied_reward``, but NaN for the item whose prompt is ``Task {task_index}`` (None: every item)."""

    def reward(a, b, batch_items=None):
        prompt = batch_items[0]["prompt"]
        if task_index is None or prompt.startswith(f"Task {task_index}:"):
            return NAN
        return varied_reward(a, b)

    return reward


# ---- reinforce (MAGRPO) and actor-critic (IAC) ----------------------------------------------------------


@pytest.mark.parametrize("family", ["magrpo", "iac"])
def test_online_rl_inf_logprobs_skip_one_update_without_touching_any_parameter(family, tmp_path, caplog, tiny_model_path):
    trainer = online_trainer(tiny_model_path, family, tmp_path)
    poison = Poison(trainer.policy.handle(0).model)
    calls = watch_steps(trainer.rl, "training_step", poison, bad_calls=(2,), modules=trainer.critics)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert [r is None for r, _, _ in calls] == [False, True, False]
    assert unchanged(calls[1][1], calls[1][2])  # agents and critics bitwise the same
    assert changed(calls[0][1], calls[0][2]) and changed(calls[2][1], calls[2][2])
    assert trainer.nonfinite_losses_skipped == 1 and trainer.updates_seen == 2
    assert all(trainer.policy.version(n) == 2 for n in trainer.policy.policies)
    assert max_logged(trainer, "nonfinite_losses_skipped") == 1
    assert "non-finite log-probs" in caplog.text and "of agent 0 at update 2 (round 0, epoch 0, item 1)" in caplog.text


def test_magrpo_drops_an_item_with_a_nan_reward_and_trains_on_the_others(tmp_path, caplog, tiny_model_path):
    seen = []
    trainer = MAGRPOTrainer(
        agent_model=tiny_model_path, num_agents=2, reward_func=nan_for(1), train_dataset=ITEMS,
        args=online_args(MAGRPOConfig, tmp_path, train_batch_size=3), metrics_callback=lambda r: seen.extend(r),
    )  # fmt: skip
    before = weights(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert changed(before, weights(trainer)) and trainer.updates_seen == 1
    assert trainer.nonfinite.rewards_dropped == 1 and trainer.nonfinite_losses_skipped == 0
    assert max_logged(trainer, "nonfinite_rewards_dropped") == 1
    assert "non-finite reward at update 1" in caplog.text and "item 1: [nan, nan]" in caplog.text
    assert "`reward_func` returned nan on item 1, candidate 0: the item is dropped" in caplog.text
    # The update saw items 0 and 2 only; its reward mean is theirs, recomputed from the texts.
    assert sorted({r["item"]["prompt"][:6] for r in seen}) == ["Task 0", "Task 2"]
    expected = [varied_reward([r["completions"][0]], [r["completions"][1]]) for r in seen]
    update = next(r for r in records(trainer) if "turn_1/reward_mean" in r)
    assert update["turn_1/reward_mean"] == pytest.approx(sum(expected) / len(expected))
    assert trainer.env_step == 2 * 2  # two kept items, K = 2


def test_magrpo_stops_after_the_limit_of_updates_with_no_finite_reward(tmp_path, tiny_model_path):
    trainer = online_trainer(tiny_model_path, "magrpo", tmp_path, reward=nan_for(None), max_nonfinite_losses_in_a_row=2)
    before = weights(trainer)
    with pytest.raises(NonFiniteError, match=rf"2 non-finite steps in a row \(limit `{LIMIT}`=2\); the last: "
                       r"reward in every group at update 1 \(round 0, epoch 0, item 1\)"):
        trainer.train()
    assert unchanged(before, weights(trainer)) and trainer.nonfinite.rewards_dropped == 2


def test_iac_stops_after_the_limit_of_nonfinite_value_losses(tmp_path, monkeypatch, tiny_model_path):
    monkeypatch.setattr(policy_learning, "value_loss", lambda values, *a, **k: values.sum() * NAN)
    trainer = online_trainer(tiny_model_path, "iac", tmp_path, max_nonfinite_losses_in_a_row=2)
    before = weights(trainer)
    with pytest.raises(NonFiniteError, match=rf"limit `{LIMIT}`=2\); the last: non-finite value loss, loss of "
                       r"agent 0 at update 1 \(round 0, epoch 0, item 1\)"):
        trainer.train()
    assert unchanged(before, weights(trainer)) and trainer.nonfinite_losses_skipped == 2


# ---- preference: MADPO ------------------------------------------------------------------------------


def madpo(model, tmp_path, reward=varied_reward, **overrides):
    values = madpo_values(tmp_path / "out", num_train_epochs=1, train_batch_size=1, **overrides)
    return MADPOTrainer(agent_model=model, num_agents=2, reward_func=reward, train_dataset=plan_items(4),
                        args=MADPOConfig(**values))  # fmt: skip


def test_madpo_skips_inf_logprobs_and_drops_an_item_with_a_nan_reward(tmp_path, caplog, tiny_model_path):
    trainer = madpo(tiny_model_path, tmp_path, reward=nan_for(1))
    poison = Poison(trainer.policy.handle(1).model)
    calls = watch_steps(trainer, "training_step", poison, bad_calls=(2,))
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert calls[1][0] is None and unchanged(calls[1][1], calls[1][2])
    assert calls[0][0] is not None and changed(calls[0][1], calls[0][2])
    assert trainer.updates_seen == len(calls) - 1 == len(trainer.rounds.pairs) - 1
    assert not any(p.prompts[0].startswith("Task 1:") for p in trainer.rounds.pairs)
    assert trainer.nonfinite_losses_skipped == 1 and trainer.nonfinite.rewards_dropped == 1
    assert max_logged(trainer, "nonfinite_rewards_dropped") == 1 and max_logged(trainer, "nonfinite_losses_skipped") == 1
    assert "non-finite log-probs of agent 1, loss at update 2 (round 0, epoch 0)" in caplog.text
    assert "`reward_func` returned nan on item 1, candidate 0" in caplog.text


def test_madpo_stops_after_the_limit_of_items_with_nan_rewards(tmp_path, tiny_model_path):
    trainer = madpo(tiny_model_path, tmp_path, reward=nan_for(None), max_nonfinite_losses_in_a_row=2)
    with pytest.raises(NonFiniteError, match=rf"2 non-finite steps in a row \(limit `{LIMIT}`=2\); the last: "
                       r"reward in every group at round 0, pair collection"):
        trainer.train()
    assert trainer.nonfinite.rewards_dropped == 2 and trainer.updates_seen == 0


# ---- preference: MARLHF and its reward model ---------------------------------------------------------


def marlhf(model, tmp_path, **overrides):
    values = dict(
        output_dir=str(tmp_path / "out"), reward_model_name=model, max_new_tokens=4, temperature=1.0,
        top_p=1.0, agent_learning_rate=1e-2, reward_learning_rate=1e-3, reward_train_batch_size=1,
        reward_eval_fraction=0.34, num_generations=2, num_train_epochs=1, rollout_buffer_size=3,
        train_batch_size=3, preference_num_candidates=3, preference_pairs_per_sample=2, logging_steps=1,
        eval_interval=0, disable_tqdm=True, seed=7,
    )  # fmt: skip
    values.update(overrides)
    return MARLHFTrainer(agent_model=model, num_agents=2, reward_func=varied_reward, train_dataset=ITEMS,
                         args=MARLHFConfig(**values))  # fmt: skip


def test_marlhf_skips_a_nan_fit_step_and_drops_an_item_the_reward_model_scores_nan(tmp_path, monkeypatch, caplog, tiny_model_path):
    real_loss, real_score = reward_model_module.bradley_terry_loss, JointRewardModel.score
    fit_calls = []

    def loss_nan_first(chosen, rejected):
        fit_calls.append(1)
        return real_loss(chosen, rejected) * (NAN if len(fit_calls) == 1 else 1.0)

    def score_nan_first_item(self, prompts, responses, **kwargs):
        scores, truncated = real_score(self, prompts, responses, **kwargs)
        scores[:2] = NAN  # the first item's K = 2 joint responses
        return scores, truncated

    monkeypatch.setattr(reward_model_module, "bradley_terry_loss", loss_nan_first)
    monkeypatch.setattr(JointRewardModel, "score", score_nan_first_item)
    trainer = marlhf(tiny_model_path, tmp_path)
    before = weights(trainer)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    fit = next(r for r in records(trainer) if "reward_model/skipped_steps" in r)
    assert fit["reward_model/skipped_steps"] == 1 and fit["reward_model/steps"] >= 1
    assert trainer.nonfinite_losses_skipped == 1 and trainer.nonfinite.rewards_dropped == 1
    assert max_logged(trainer, "nonfinite_rewards_dropped") == 1
    assert changed(before, weights(trainer)) and trainer.env_step == 2 * 2  # items 1 and 2, K = 2
    assert "reward model step skipped: non-finite Bradley–Terry loss at epoch 1, step 1 of" in caplog.text
    assert "non-finite reward at update 1 (round 0, epoch 0, item 0): 1 group(s) dropped" in caplog.text


def test_marlhf_reward_model_fit_stops_after_the_limit(tmp_path, monkeypatch, tiny_model_path):
    monkeypatch.setattr(reward_model_module, "bradley_terry_loss", lambda c, r: (c - r).sum() * NAN)
    trainer = marlhf(tiny_model_path, tmp_path, max_nonfinite_losses_in_a_row=2)
    before = weights(trainer)
    with pytest.raises(NonFiniteError, match=rf"reward model fitting stopped: 2 non-finite steps in a row \(limit "
                       rf"`{LIMIT}`=2\), the last at epoch 1, step 2 of \d+: non-finite Bradley–Terry loss"):
        trainer.train()
    assert unchanged(before, weights(trainer))


def test_a_reward_model_fit_in_which_no_step_went_through_is_an_error(tiny_model_path):
    model = JointRewardModel.from_source(tiny_model_path)
    with torch.no_grad():
        model.head.weight.fill_(NAN)  # every reward NaN
    pair = {"prompts": ["p0", "p1"], "winner_completions": ["a", "b"], "loser_completions": ["c", "d"]}
    with pytest.raises(NonFiniteError, match=rf"all 3 steps had a non-finite loss \(`{LIMIT}`=5 was not reached"):
        reward_model_module.fit_reward_model(model, [pair] * 3, max_nonfinite_fraction=1.0, **{LIMIT: 5})
    with pytest.raises(NonFiniteError, match=rf"2 non-finite steps in a row \(limit `{LIMIT}`=2\), the last at "
                       r"epoch 1, step 2 of 3: non-finite winner rewards, loser rewards, Bradley–Terry loss"):
        reward_model_module.fit_reward_model(model, [pair] * 3, max_nonfinite_fraction=1.0, **{LIMIT: 2})


# ---- pettingllms: AT-GRPO -----------------------------------------------------------------------------


class NaNGroupTrainer(ATGRPOTrainer):
    """Candidate 1 of the groups chosen by ``bad`` gets a NaN reward (every group: ``bad`` = None)."""

    bad = None

    def generate_and_score(self, problem_ids, step):
        batch = super().generate_and_score(problem_ids, step)
        for sample in batch.samples:
            sample.group_reward += 0.5 * sample.candidate  # a learning signal (see test_at_grpo_trainer)
            if sample.candidate == 1 and (self.bad is None or self.bad(sample)):
                sample.group_reward = NAN
        return batch


def at_grpo(model, tmp_path, cls=NaNGroupTrainer, **overrides):
    values = dict(
        policy_level="L1", max_turns=1, problems_per_step=2, num_generations=2, max_completion_length=8,
        max_steps=1, learning_rate=1e-2, per_device_train_batch_size=2, output_dir=str(tmp_path / "run"),
        disable_tqdm=True, seed=1,
    )  # fmt: skip
    values.update(overrides)
    return cls.from_flat(values, model=model, env_config={"rows": 4, "cols": 4})


def shared_params(trainer):
    return [p.detach().clone() for p in trainer.policy.trainable_parameters("shared")]


def test_at_grpo_drops_a_nan_group_and_skips_an_optimizer_step_with_inf_logprobs(tmp_path, caplog, tiny_model_path):
    trainer = at_grpo(tiny_model_path, tmp_path)
    first = {}

    def bad(sample):  # one group: the first problem's tool decision
        first.setdefault("problem", sample.problem_id)
        return sample.problem_id == first["problem"] and sample.role == "tool"

    trainer.bad = bad
    poison = Poison(trainer.policy.handle("shared").model)
    entries = []
    accumulate = trainer._accumulate_gradients

    def watched(*args):
        entries.append(shared_params(trainer))
        poison.on = len(entries) == 1  # the first optimizer step's forward
        try:
            return accumulate(*args)
        finally:
            poison.on = False

    trainer._accumulate_gradients = watched
    with caplog.at_level(logging.WARNING):
        (metrics,) = trainer.train()
    # Rows: 2 problems x 2 roles x K=2 = 8, minus the dropped group's 2, in micro-batches of 2.
    assert metrics["num_samples"] == 6.0 and metrics["dropped_samples"] == 2.0
    assert metrics["nonfinite_rewards_dropped"] == 1.0 and metrics["nonfinite_losses_skipped"] == 1.0
    assert metrics["policy/shared/skipped_steps"] == 1.0 and metrics["policy/shared/optimizer_steps"] == 2.0
    assert all(torch.equal(a, b) for a, b in zip(entries[0], entries[1]))  # the skipped step changed nothing
    assert any(not torch.equal(a, b) for a, b in zip(entries[1], entries[2]))
    assert f"problem {first['problem']}, turn 0, roles ['tool']: rewards [" in caplog.text and "nan]" in caplog.text
    assert "non-finite log-probs, loss (rows of roles" in caplog.text
    assert "at step 1, policy 'shared', iteration 1, optimizer step 1: step skipped" in caplog.text


# A step without an optimizer step still advances the LR schedule (one per rollout); torch warns about that.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_at_grpo_stops_after_the_limit_of_steps_with_no_finite_reward(tmp_path, tiny_model_path):
    trainer = at_grpo(tiny_model_path, tmp_path, max_steps=3, max_nonfinite_losses_in_a_row=2)
    before = shared_params(trainer)
    with pytest.raises(NonFiniteError, match=rf"2 non-finite steps in a row of policy 'shared' \(limit `{LIMIT}`=2\); "
                       r"the last: reward in every group at step 2"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, shared_params(trainer)))
    assert [r["nonfinite_rewards_dropped"] for r in trainer.log_history] == [4.0]  # step 1: all 4 groups


def test_madpo_iter_drops_an_item_whose_comparison_scores_nan_and_finishes_its_rounds(tmp_path, caplog, tiny_model_path):
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer, read_round
    from tests.comlrl.test_madpo_iter import ScriptedComparator

    reward = nan_for(1)
    reward.reward_range = (0.0, 5.0)
    trainer = MADPOIterTrainer(agent_model=tiny_model_path, num_agents=2, reward_func=reward,
                               train_dataset=plan_items(4), comparator=ScriptedComparator(),
                               args=MADPOIterConfig(**madpo_values(tmp_path / "out", num_iterations=2)))  # fmt: skip
    with caplog.at_level(logging.WARNING):
        trainer.train()
    replay = tmp_path / "out" / "preference_replay"
    pairs = [p for r in (1, 2) for p in read_round(replay / f"iteration_{r:04d}.json").pairs]
    assert pairs and not any(p.prompts[0].startswith("Task 1:") for p in pairs)
    assert trainer.nonfinite.rewards_dropped == 2  # item 1, once in each comparison round
    assert "comparison (current)" in caplog.text
