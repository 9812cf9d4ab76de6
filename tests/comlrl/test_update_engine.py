"""The update engine shared by every trainer (comlrl.trainers.core.optimization): the weighting rule per loss
type as one pure function, the AdamW constructor, the plain clip, dapo accumulated over micro-batches equal to
one large dapo batch (its own test against an independent computation), several divisors in one step, and
the ``nonfinite="step"`` mode pettingllms' updates use (a non-finite micro-batch or gradient norm skips the
step, every rank's reasons named)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from comlrl.rl import LOSS_TYPES, policy_gradient_loss
from comlrl.trainers.core.optimization import (
    GradientSteps,
    MicroBatchWeight,
    build_optimizer,
    clip_grad_norm,
    micro_batch_weights,
)

# ------------------------------------------------------------------------------------ the pure rules


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_one_weighting_rule_per_loss_type_in_both_packages(loss_type):
    # comlrl (GradientSteps.backward_policy) and AT-GRPO / GRPO (PolicyUpdater, which knows the step's tokens
    # before its first backward: num_items_in_batch) ask micro_batch_weights for the same micro-batch.
    comlrl = micro_batch_weights(loss_type, rows=3, tokens=17, divisor_suffix="/1")
    pettingllms = micro_batch_weights(loss_type, rows=3, tokens=17, num_items_in_batch=40)
    if loss_type == "dapo":  # the step's tokens: divided after (comlrl) or already in the loss (pettingllms)
        assert comlrl == MicroBatchWeight(17.0, 17.0, "tokens/1")
        assert pettingllms == MicroBatchWeight(1.0)
    else:  # the row-weighted mean: its rows, divided by the step's rows (every micro-batch's and rank's)
        assert comlrl == pettingllms == MicroBatchWeight(3.0, 3.0, "rows")
    assert micro_batch_weights(None, rows=5) == MicroBatchWeight(5.0, 5.0, "rows")  # DPO, Bradley–Terry, values


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_type": "mean"}, "`loss_type` must be one of"),
        ({"loss_type": "dapo"}, r"`tokens` \(the micro-batch's completion tokens\) must be >= 0 for dapo, got None"),
        ({"loss_type": "grpo", "rows": -1}, "`rows` must be >= 0, got -1"),
    ],
)
def test_bad_weighting_arguments_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        micro_batch_weights(**kwargs)


def test_build_optimizer_is_torch_s_adamw_with_its_defaults():
    params = [torch.nn.Parameter(torch.zeros(2))]
    mine = build_optimizer(params, learning_rate=1e-3)
    theirs = torch.optim.AdamW(params, lr=1e-3)
    assert isinstance(mine, torch.optim.AdamW)
    assert mine.param_groups[0].keys() == theirs.param_groups[0].keys()
    assert {k: v for k, v in mine.param_groups[0].items() if k != "params"} == {
        k: v for k, v in theirs.param_groups[0].items() if k != "params"
    }
    custom = build_optimizer(params, learning_rate=0.1, weight_decay=0.0, betas=(0.5, 0.6), eps=1e-3, foreach=True)
    group = custom.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"], group["eps"], group["foreach"]) == (0.1, 0.0, (0.5, 0.6), 1e-3, True)


def test_the_plain_clip_is_torch_s():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    a(torch.randn(4, 3)).sum().backward()
    for p, q in zip(a.parameters(), b.parameters()):
        q.grad = p.grad.clone()
    norm = clip_grad_norm(list(a.parameters()), 0.1)
    assert norm == float(torch.nn.utils.clip_grad_norm_(list(b.parameters()), 0.1))
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))
    assert clip_grad_norm([torch.nn.Parameter(torch.zeros(1))], math.inf) == 0.0  # no gradient: norm 0


# ------------------------------------------------------------------------------------ dapo over micro-batches

VOCAB, WIDTH = 5, 4


def batch(rows: int, lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A toy policy batch: one-hot contexts ``[rows, WIDTH, VOCAB]``, sampled tokens, a mask of the given
    completion lengths and one advantage per row."""
    generator = torch.Generator().manual_seed(seed)
    contexts = torch.nn.functional.one_hot(torch.randint(VOCAB, (rows, WIDTH), generator=generator), VOCAB).float()
    tokens = torch.randint(VOCAB, (rows, WIDTH), generator=generator)
    mask = (torch.arange(WIDTH)[None, :] < torch.tensor(lengths)[:, None]).long()
    advantages = torch.randn(rows, generator=generator)
    return contexts, tokens, mask, advantages


def logprobs(model: torch.nn.Linear, contexts: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(model(contexts), -1).gather(-1, tokens[..., None]).squeeze(-1)


def dapo_loss(model, contexts, tokens, mask, advantages) -> torch.Tensor:
    """dapo over this batch alone (its own tokens), as the RL stage computes a micro-batch's loss."""
    lp = logprobs(model, contexts, tokens)
    return policy_gradient_loss(lp, advantages, mask, loss_type="dapo", num_items_in_batch=mask.sum().clamp(min=1))


def accumulated_gradient(micro_batches, rule: str) -> list[torch.Tensor]:
    """The gradient one engine step of ``len(micro_batches)`` micro-batches gets: ``rule`` "dapo" (the
    engine's) or "rows" (the rule before: each micro-batch weighted by its rows)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(VOCAB, VOCAB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    seen = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append([p.grad.clone() for p in model.parameters()]))
    steps = GradientSteps(SimpleNamespace(gradient_accumulation_steps=len(micro_batches)), {"policy": optimizer})
    steps.add_divisors("tokens/0")
    for contexts, tokens, mask, advantages in micro_batches:
        steps.start_micro_batch()
        loss = dapo_loss(model, contexts, tokens, mask, advantages)
        if rule == "dapo":
            steps.backward_policy(loss, len(mask), loss_type="dapo", policy_loss=loss, tokens=float(mask.sum()))
        else:
            steps.backward(loss, len(mask))
        steps.end_micro_batch(len(mask))
    assert steps.global_step == 1 and len(seen) == 1
    return seen[0]


def test_dapo_accumulated_over_unequal_micro_batches_is_one_large_dapo_batch():
    """Two micro-batches of 2 rows with 7 and 3 completion tokens (gradient_accumulation_steps=2) step with
    the gradient of one 4-row batch's dapo loss: every per-token loss over the step's 10 tokens (computed
    here independently, by hand: the sum of masked per-token losses divided by 10)."""
    first, second = batch(2, [4, 3], seed=1), batch(2, [2, 1], seed=2)
    engine = accumulated_gradient([first, second], "dapo")
    torch.manual_seed(0)
    model = torch.nn.Linear(VOCAB, VOCAB)
    total = torch.zeros(())
    for contexts, tokens, mask, advantages in (first, second):
        per_token = -advantages[:, None] * logprobs(model, contexts, tokens)
        total = total + (per_token * mask).sum()
    (total / 10).backward()
    for got, want in zip(engine, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    old = accumulated_gradient([first, second], "rows")  # the rows-weighted rule the RL stage had
    assert any(not torch.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(old, engine))


def test_one_micro_batch_of_dapo_in_one_process_goes_back_as_it_is():
    torch.manual_seed(0)
    model = torch.nn.Linear(VOCAB, VOCAB)
    steps = GradientSteps(SimpleNamespace(), {"policy": torch.optim.SGD(model.parameters(), lr=0.0)})
    steps.add_divisors("tokens/0")
    contexts, tokens, mask, advantages = batch(3, [4, 1, 2], seed=3)
    steps.start_micro_batch()
    loss = dapo_loss(model, contexts, tokens, mask, advantages)
    steps.backward_policy(loss, 3, loss_type="dapo", policy_loss=loss, tokens=float(mask.sum()))
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    dapo_loss(model, contexts, tokens, mask, advantages).backward()
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))


def test_a_dapo_policy_loss_and_a_row_mean_value_loss_on_shared_weights_keep_their_own_divisors():
    """An IAC agent with a value head on its own model: the policy part divides by the step's tokens, the
    value part by the step's rows, although both reach the same weights."""
    micro = [(batch(2, [4, 1], seed=4), torch.tensor([0.5, -1.0])), (batch(1, [2], seed=5), torch.tensor([2.0]))]
    torch.manual_seed(0)
    model = torch.nn.Linear(VOCAB, VOCAB)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    seen = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append([p.grad.clone() for p in model.parameters()]))
    steps = GradientSteps(SimpleNamespace(gradient_accumulation_steps=2), {"policy": optimizer})
    steps.add_divisors("tokens/0")

    def value_loss(contexts, targets):
        return ((model(contexts[:, 0]).sum(-1) - targets) ** 2).mean()

    for (contexts, tokens, mask, advantages), targets in micro:
        steps.start_micro_batch()
        policy = dapo_loss(model, contexts, tokens, mask, advantages)
        value = 0.5 * value_loss(contexts, targets)
        steps.backward_policy(policy + value, len(mask), loss_type="dapo", policy_loss=policy,
                              tokens=float(mask.sum()), value_loss=value)  # fmt: skip
        steps.end_micro_batch(len(mask))
    policy_sum = sum(
        (-advantages[:, None] * logprobs(model, contexts, tokens) * mask).sum()
        for (contexts, tokens, mask, advantages), _ in micro
    )
    value_sum = sum(0.5 * ((model(c[:, 0]).sum(-1) - t) ** 2).sum() for (c, *_), t in micro)
    model.zero_grad()
    (policy_sum / 7 + value_sum / 3).backward()
    for got, p in zip(seen[0], model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-6, atol=1e-7)


def test_an_undeclared_divisor_is_refused():
    model = torch.nn.Linear(2, 1)
    steps = GradientSteps(SimpleNamespace(gradient_accumulation_steps=2), {"m": torch.optim.SGD(model.parameters(), lr=0.1)})
    with pytest.raises(ValueError, match=r"micro-batch divisor 'tokens/3' is not one of this engine's `divisors` \('rows',\)"):
        steps.backward(model(torch.ones(1, 2)).sum(), weight=micro_batch_weights("dapo", tokens=1, divisor_suffix="/3"))
    with pytest.raises(ValueError, match=r"this engine divides by \('rows',\): pass `rows` or a `weight`"):
        steps.backward(model(torch.ones(1, 2)).sum())


# ------------------------------------------------------------------------------------ nonfinite="step"


def step_engine(divisors=(), **knobs):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = build_optimizer(model.parameters(), learning_rate=0.1)
    steps = GradientSteps(SimpleNamespace(**knobs), {"p": optimizer}, divisors=divisors, nonfinite="step",
                          measure_grad_norm=True, auto_step=False)  # fmt: skip
    return model, steps


def test_step_mode_weighs_each_micro_batch_by_its_rows_and_measures_the_norm_without_clipping():
    model, steps = step_engine(("rows",), gradient_accumulation_steps=2)
    x = torch.randn(4, 3)
    reference = torch.nn.Linear(3, 1)
    reference.load_state_dict(model.state_dict())
    for part in (x[:3], x[3:]):  # unequal micro-batches: the step is the mean over all 4 rows
        steps.start_micro_batch()
        steps.backward(model(part).mean(), weight=micro_batch_weights("grpo", rows=len(part), num_items_in_batch=9))
        steps.end_micro_batch(len(part))
    assert steps.global_step == 0 and steps.prepare()  # the caller steps
    reference(x).mean().backward()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-6, atol=1e-7)
    want = float(torch.nn.utils.get_total_norm([p.grad for p in reference.parameters()]))
    assert steps.last_grad_norm == pytest.approx(want, rel=1e-6)
    assert steps.take() and steps.global_step == 1 and all(p.grad is None for p in model.parameters())


def test_step_mode_skips_the_whole_step_on_a_non_finite_micro_batch_or_gradient_norm():
    model, steps = step_engine()
    before = [p.detach().clone() for p in model.parameters()]
    steps.start_micro_batch()
    steps.backward(model(torch.ones(1, 3)).sum())
    steps.end_micro_batch()
    steps.start_micro_batch()
    steps.discard_micro_batch("log-probs, loss")
    assert not steps.prepare() and steps.last_skip == "log-probs, loss"
    assert all(p.grad is None for p in model.parameters())
    steps.start_micro_batch()
    steps.backward(model(torch.full((1, 3), math.inf)).sum())  # a finite loss cannot tell: the norm is inf
    steps.end_micro_batch()
    assert not steps.prepare() and steps.last_skip.startswith("gradient norm (")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_step_mode_names_every_rank_s_reason_and_sums_the_gradients():
    model, steps = step_engine()
    calls = []
    steps.any_rank_skips = lambda what: calls.append(what) or "loss (rank 1)"
    steps.start_micro_batch()
    steps.backward(model(torch.ones(1, 3)).sum())
    steps.end_micro_batch()
    assert not steps.prepare() and steps.last_skip == "loss (rank 1)" and calls == [None]
    summed = []
    steps.any_rank_skips = lambda what: None
    steps.all_reduce = lambda params, count: summed.append(len(params)) or count
    steps.start_micro_batch()
    steps.backward(model(torch.ones(1, 3)).sum())
    steps.end_micro_batch()
    assert steps.prepare() and summed == [2] and steps.last_skip is None


def test_step_mode_keeps_one_divisor():
    _, steps = step_engine()
    steps.add_divisors("rows")
    with pytest.raises(ValueError, match=r"`nonfinite='step'` keeps one divisor, has \('rows',\), got 'tokens/0'"):
        steps.add_divisors("tokens/0")
    with pytest.raises(ValueError, match="`nonfinite` must be one of"):
        GradientSteps(SimpleNamespace(), {}, nonfinite="never")


@pytest.mark.parametrize("sharded", [False, True])
def test_attach_engine_sums_the_rows_over_ranks_only_for_an_engine_that_divides(monkeypatch, sharded):
    # AT-GRPO's row-mean loss types divide by the step's rows of every rank (FSDP: the counts only, the
    # reduce-scatter sums the gradients); dapo and SFT (no divisor) sum no count, as before.
    from comlrl import distributed as dist
    from comlrl.trainers.core.data_parallel import attach_engine

    calls = []
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(dist, "all_reduce_sum", lambda values: calls.append("count") or [2 * float(v) for v in values])
    monkeypatch.setattr(dist, "all_reduce_gradients", lambda params: calls.append("grads"))
    for divisors, want in ((("rows",), 8.0), ((), 4.0)):
        model, steps = step_engine(divisors)
        attach_engine(steps, sharded=sharded, skips=False)
        calls.clear()
        if sharded and not divisors:
            assert steps.all_reduce is None
            continue
        assert steps.all_reduce(list(model.parameters()), 4.0) == want
        assert calls == (["grads"] if not sharded else []) + (["count"] if divisors else [])
