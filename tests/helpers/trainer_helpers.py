"""Shared pieces of the tiny-trainer tests: prompts, a text-dependent task reward, weight snapshots and the
exact-resume comparison. Imported as ``from tests.helpers.trainer_helpers import ...``."""

from __future__ import annotations

import json

import torch

RESUME_COUNTERS = ("env_step", "updates_seen", "pairs_built", "pairs_skipped", "eval_count")


def plan_items(n: int) -> list[dict]:
    """``n`` distinct planning prompts."""
    return [{"prompt": f"Task {i}: write a short plan."} for i in range(n)]


def varied_reward(a, b) -> float:
    """Varies with the sampled texts of two agents, so non-tied pairs exist."""
    return float(len(a[0]) % 5) + 0.5 * float(len(b[0]) % 3)


class CountingReward:
    """``varied_reward`` that counts its calls (one per joint response scored)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, a, b):
        self.calls += 1
        return varied_reward(a, b)


def madpo_values(output_dir, **overrides) -> dict:
    """Keyword values for a small, fast MADPO/MADPOIter config writing to ``output_dir``."""
    values = dict(
        output_dir=str(output_dir),
        preference_num_candidates=4,
        preference_pairs_per_sample=2,
        max_new_tokens=6,
        temperature=1.0,
        top_p=1.0,
        agent_learning_rate=1e-2,
        train_batch_size=2,
        logging_steps=1,
        eval_interval=0,
        disable_tqdm=True,
    )
    values.update(overrides)
    return values


def weights(trainer) -> dict[str, torch.Tensor]:
    """A copy of every trainable parameter, keyed ``"<agent>.<parameter name>"``."""
    return {
        f"{name}.{k}": p.detach().clone()
        for name in trainer.policy.policies
        for k, p in trainer.policy.named_trainable_parameters(name)
    }


def agent_snapshots(trainer) -> list[list[torch.Tensor]]:
    """A copy of each agent's trainable parameters, one list per agent in policy order."""
    return [
        [p.detach().clone() for p in trainer.policy.trainable_parameters(n)] for n in trainer.policy.policies
    ]


def changed_per_agent(before, after) -> dict[str, bool]:
    """For two ``weights`` snapshots: whether any parameter of each agent differs."""
    return {
        agent: any(not torch.equal(before[k], after[k]) for k in before if k.startswith(agent + "."))
        for agent in {k.split(".")[0] for k in before}
    }


def records(trainer) -> list[dict]:
    """The trainer's metrics.jsonl, one dict per line."""
    return [json.loads(line) for line in trainer.metrics_logger.path.read_text().splitlines()]


def assert_same_run(done, resumed, out_done, out_resumed, *, critics: bool = False) -> None:
    """An uninterrupted and a resumed run agree bitwise: weights, metrics (memory and file) and counters;
    with ``critics`` also every critic's state."""
    a, b = weights(done), weights(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:3]
    assert done.metrics_logger.history == resumed.metrics_logger.history
    assert (out_done / "metrics.jsonl").read_bytes() == (out_resumed / "metrics.jsonl").read_bytes()
    for name in RESUME_COUNTERS:
        assert getattr(done, name) == getattr(resumed, name), name
    if critics:
        for c1, c2 in zip(done.critics, resumed.critics):
            s1, s2 = c1.state_dict(), c2.state_dict()
            assert all(torch.equal(s1[k], s2[k]) for k in s1)


class Interrupt(Exception):
    """A simulated crash."""


def crash_when_updates_seen(trainer, updates: int) -> None:
    """Make ``trainer``'s next ``training_step`` raise :class:`Interrupt` once ``updates`` updates are done."""
    original = trainer.training_step

    def crashing(batch, where=""):
        if trainer.updates_seen == updates:
            raise Interrupt("simulated crash")
        return original(batch, where)

    trainer.training_step = crashing


def record_gradients(trainer):
    """The gradient every optimizer steps with, per optimizer step, flattened."""
    seen = []
    for name, optimizer in trainer.gradient_steps.optimizers.items():

        def hook(opt, args, kwargs, name=name):
            grads = [p.grad.reshape(-1) for g in opt.param_groups for p in g["params"] if p.grad is not None]
            seen.append((name, torch.cat(grads).clone()))

        optimizer.register_step_pre_hook(hook)
    return seen
