"""The update engine of every trainer of comlrl and pettingllms: the optimizer (:func:`build_optimizer`, AdamW),
micro-batches into optimizer steps (:class:`GradientSteps`: accumulation, the LR schedule, clipping, bf16 /
fp16 autocast, non-finite skips, data-parallel gradient sums, FSDP's sharded norm, ``save_steps``).

The config fields are :class:`TrainingKnobFields` (transformers' ``TrainingArguments`` names and meanings;
the defaults keep the public CoMLRL behaviour: one micro-batch per step, a constant learning rate, no
clipping, float32, no checkpoints). A trainer drives :class:`GradientSteps` per micro-batch::

    steps.start_micro_batch()              # a group's first micro-batch clears every gradient
    with steps.autocast(): loss = ...      # forward passes in bf16 / fp16 when asked
    steps.backward(loss, rows)             # or backward(loss, weight=micro_batch_weights(...))
    steps.end_micro_batch(rows)            # or steps.discard_micro_batch(what) (a non-finite one)
    ...
    steps.flush()                          # the end of an epoch: a partial group steps too

The comlrl trainers let a group of ``gradient_accumulation_steps`` (k) micro-batches step by itself
(``apply_step``); pettingllms' AT-GRPO / GRPO update (:class:`~pettingllms.trainer.policy_update.PolicyUpdater`)
and its SFT warm start group their micro-batches themselves (``auto_step=False``) and call :meth:`prepare`
(gradients summed over ranks, divided, clipped; False when the step is skipped) then :meth:`take`.

**Accumulation: one weighting rule per loss type** (:func:`micro_batch_weights`), the same in both packages:
a micro-batch loss is back-propagated times a *weight*; with a *divisor* the step then divides the gradients
by the sum, over the step's micro-batches and the ranks, of what each micro-batch *counts*. The target: the
gradient of the loss of one batch as large as the whole step.

=====================================  ==========================================================================
loss type                              weight (comlrl trainers and pettingllms AT-GRPO / GRPO alike)
=====================================  ==========================================================================
``dapo``                               TRL's: Σ per-token losses / the step's tokens (every micro-batch's and
                                       rank's; comlrl per agent). comlrl (the step's size is known at its end):
                                       weight = its own tokens, divided by the step's tokens; AT-GRPO (known
                                       before): the loss's ``num_items_in_batch`` is the step's tokens, weight 1
``grpo``, ``bnpo`` / ``token``,        weight = rows, divided by the step's rows (every micro-batch's and
``dr_grpo``, ``sequence_sum``          rank's): the row-weighted mean of the micro-batch losses
DPO (MADPO), Bradley–Terry (reward     weight = rows, divided by the step's rows (comlrl only)
model), value losses (critics)
SFT negative log-likelihood            (pettingllms' warm start) one micro-batch per step, divided by the
                                       batch's tokens (every rank's)
=====================================  ==========================================================================

For ``grpo``, ``dr_grpo``, ``sequence_sum`` (a mean over rows) the step is exactly the gradient of the loss of
one batch of all its rows, whatever the micro-batches' row counts (an epoch's partial last batch, a rank's
shard, AT-GRPO's last micro-batch of a policy's rows, an FSDP filler: 0 rows); ``bnpo`` / ``token`` (a
micro-batch's token mean) is when the micro-batches' mean tokens per row agree. (AT-GRPO scaled each by
1/k before; with equal micro-batches that is the same step up to float rounding.)

With k = 1 in one process (``weighted`` False) a micro-batch's loss is back-propagated as it is (the
weights and the division cancel). A skipped micro-batch (``nonfinite="micro_batch"``, comlrl) adds nothing
(the others' gradients are kept) but holds its place in the group, so the groups stay those of the larger
batch; with ``nonfinite="step"`` (pettingllms) a non-finite micro-batch, or a non-finite gradient norm,
skips the whole optimizer step (:attr:`last_skip` says what).

**Data parallel.** Under a launcher the step first sums every parameter's gradient and each divisor's count
over the ranks (``all_reduce``, set by :meth:`comlrl.trainers.core.data_parallel.DataParallel.attach` or
:func:`comlrl.trainers.core.data_parallel.attach_engine`), so the division gives the global mean; a skip on
any rank skips on all (``any_rank`` per micro-batch, ``any_rank_skips`` per step). Under FSDP (``sharded``)
the reduce-scatter has already summed the gradients (``all_reduce`` sums only the counts) and the clipping
norm is that of the whole gradient over every rank's shards (:func:`clip_grad_norm`).

**LR schedule.** ``transformers.get_scheduler`` (:func:`build_lr_scheduler`) for every optimizer, over a
*phase* whose optimizer steps the trainer counts before it starts (:meth:`begin_phase`): the whole run of
MAGRPO / IAC / MAAC and of the base preference trainers after pair collection (MARLHF: its RL stage), one
round of the iterative ones. Warm-up is ``warmup_steps`` when > 0, else ``ceil(warmup_ratio · horizon)``
(transformers' rule, :func:`warmup_steps_for`). The schedule's state is its phase (horizon, warm-up, steps
done), kept in checkpoints, so a resumed run rebuilds the same schedulers. (AT-GRPO builds its scheduler
with the same function over ``max_steps`` and advances it once per training step itself.)

**Clipping.** With ``max_grad_norm`` > 0 each optimizer's parameters (one policy, or one critic) are
clipped to that norm; ``measure_grad_norm`` measures it without a limit otherwise; ``grad_norm`` is the
largest norm before clipping. **Precision.** ``bf16`` / ``fp16``: ``torch.autocast`` around the forward
passes (weights and optimizer states stay float32); fp16 adds loss scaling (``torch.amp.GradScaler``) and
needs CUDA.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from comlrl.rl.losses import LOSS_TYPES
from comlrl.trainers.core.trainer_core import TrainerPart
from comlrl.trainers.core.training_knobs import (
    LR_SCHEDULER_TYPES,
    TrainingKnobFields,
    build_lr_scheduler,
    warmup_steps_for,
)

__all__ = [
    "LR_SCHEDULER_TYPES",
    "GradientSteps",
    "MicroBatchWeight",
    "TrainingKnobFields",
    "accumulated_steps",
    "build_lr_scheduler",
    "build_optimizer",
    "clip_grad_norm",
    "epoch_micro_batches",
    "micro_batch_weights",
    "warmup_steps_for",
]


def accumulated_steps(micro_batches: int, k: int) -> int:
    """Optimizer steps of ``micro_batches`` consecutive micro-batches grouped by ``k`` (the last group may be
    partial)."""
    return -(-int(micro_batches) // int(k))


def epoch_micro_batches(num_items: int, buffer: int, batch: int, turns: int = 1, branch: int = 1) -> int:
    """Update batches of an online RL epoch over ``num_items`` items: per rollout buffer of ``buffer`` items,
    turn t holds ``items · branch^t`` rows (tree nodes; ``branch`` 1 for trajectories) cut into batches of
    ``batch`` (multi-turn: a bound, as if no episode ended early)."""
    micro = 0
    for start in range(0, num_items, buffer):
        rows = min(buffer, num_items - start)
        micro += sum(-(-(rows * branch**t) // batch) for t in range(turns))
    return micro


# ---------------------------------------------------------------------------------------- pure rules
@dataclass(frozen=True)
class MicroBatchWeight:
    """How one micro-batch's loss enters its optimizer step: back-propagated times ``weight``; with a
    ``divisor`` (``"rows"``, ``"tokens..."``) the step divides the gradients of that divisor by the sum of the
    ``count`` of its micro-batches (every rank's); None: ``weight`` already normalises (no division)."""

    weight: float
    count: float = 0.0
    divisor: str | None = None


def micro_batch_weights(
    loss_type: str | None,
    *,
    rows: float = 0,
    tokens: float | None = None,
    num_items_in_batch: float | None = None,
    divisor_suffix: str = "",
) -> MicroBatchWeight:
    """The weighting rule of the module docstring's table for one micro-batch (both packages).

    ``loss_type``: one of :data:`comlrl.rl.LOSS_TYPES`, or None for a loss that is a mean over the rows (DPO,
    Bradley–Terry, value losses). Every type but ``dapo``: weight ``rows``, divided by the step's rows.
    ``dapo`` with ``num_items_in_batch`` (the step's tokens over every rank, known before its first backward:
    pettingllms, whose loss already divides by it): weight 1, no division; without (comlrl): its loss
    (normalised by its own ``tokens``) times ``tokens``, divided by the step's tokens (divisor
    ``"tokens" + divisor_suffix``, one per agent)."""
    if loss_type is not None and loss_type not in LOSS_TYPES:
        raise ValueError(f"`loss_type` must be one of {LOSS_TYPES} (or None: a mean over rows), got {loss_type!r}")
    if loss_type == "dapo":
        if num_items_in_batch is not None:
            return MicroBatchWeight(1.0)
        if tokens is None or tokens < 0:
            raise ValueError(f"`tokens` (the micro-batch's completion tokens) must be >= 0 for dapo, got {tokens!r}")
        return MicroBatchWeight(float(tokens), float(tokens), "tokens" + divisor_suffix)
    if rows < 0:
        raise ValueError(f"`rows` must be >= 0, got {rows!r}")
    return MicroBatchWeight(float(rows), float(rows), "rows")


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    *,
    learning_rate: float,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    foreach: bool | None = None,
) -> torch.optim.AdamW:
    """The AdamW of every trainer (the defaults are torch's)."""
    return torch.optim.AdamW(params, lr=learning_rate, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach)


def clip_grad_norm(params: Sequence[torch.nn.Parameter], max_norm: float, *, sharded: bool = False) -> float:
    """Clip the gradients of ``params`` to ``max_norm`` (``inf``: measure only); returns their norm before
    clipping (0.0 without gradients). ``sharded`` (FSDP): the norm of the whole gradient over every rank's
    shards, the same on every rank (a collective)."""
    if not sharded:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = torch.nn.utils.get_total_norm(grads)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return float(total)


_DEFAULTS = {name: f.default for name, f in TrainingKnobFields.__dataclass_fields__.items()}
_NONFINITE = ("micro_batch", "step")
Grads = dict[int, tuple[torch.Tensor, torch.Tensor]]  # id(param) -> (param, its gradient)


class GradientSteps(TrainerPart):
    """Micro-batches into optimizer steps (see the module docstring): accumulation, clipping, the LR
    schedule, autocast, non-finite skips, data-parallel sums and the optimizer-step count.

    Args:
        settings: an object with the :class:`TrainingKnobFields` (a trainer config); a missing field takes
            its default.
        optimizers: ``{name: optimizer}`` (:func:`build_optimizer`); more with :meth:`add_optimizer` (critics).
        device_type: where the forward passes run (``"cpu"`` or ``"cuda"``): autocast's device.
        apply_step: what completes a group (default :meth:`step`); a trainer passes its own, which calls
            :meth:`step` and bumps its policies' versions.
        divisors: the divisors micro-batch weights may name (``()``: every weight already normalises); a
            trainer adds more with :meth:`add_divisors` (dapo's per-agent tokens).
        nonfinite: what :meth:`discard_micro_batch` drops: ``"micro_batch"`` (the group's others still step)
            or ``"step"`` (the whole optimizer step; a non-finite gradient norm skips it too).
        measure_grad_norm: measure the gradient norm at every step, also without clipping.
        sharded: the parameters are FSDP shards (the clipping norm is the whole gradient's).
        auto_step: a group of ``gradient_accumulation_steps`` micro-batches steps by itself (False: the
            caller calls :meth:`step`, or :meth:`prepare` and :meth:`take`).

    A :class:`~comlrl.trainers.core.trainer_core.TrainerPart`: ``global_step``, the phase of the LR schedule
    and the loss scaler travel in checkpoints under ``"optimization"``.
    """

    state_key = "optimization"

    def __init__(
        self,
        settings: Any,
        optimizers: Mapping[str, torch.optim.Optimizer],
        *,
        device_type: str = "cpu",
        apply_step: Callable[[], Any] | None = None,
        divisors: Sequence[str] = ("rows",),
        nonfinite: str = "micro_batch",
        measure_grad_norm: bool = False,
        sharded: bool = False,
        auto_step: bool = True,
    ) -> None:
        knob = lambda name: getattr(settings, name, _DEFAULTS[name])  # noqa: E731
        if nonfinite not in _NONFINITE:
            raise ValueError(f"`nonfinite` must be one of {_NONFINITE}, got {nonfinite!r}")
        self.settings = settings
        self.k = int(knob("gradient_accumulation_steps"))
        self.max_grad_norm = float(knob("max_grad_norm") or 0.0) or None
        self.save_steps = knob("save_steps")
        self.scheduled = knob("lr_scheduler_type") != "constant"
        self.dtype = torch.bfloat16 if knob("bf16") else torch.float16 if knob("fp16") else None
        if knob("fp16") and device_type != "cuda":
            raise ValueError(
                f"`fp16` needs a CUDA device (float16 autocast with loss scaling), but the models are on "
                f"{device_type}; use bf16=True on CPU"
            )
        self.device_type = device_type
        self.scaler = torch.amp.GradScaler("cuda") if knob("fp16") else None
        self.optimizers: dict[str, torch.optim.Optimizer] = dict(optimizers)
        self.apply_step = apply_step if apply_step is not None else self.step
        self.divisors: tuple[str, ...] = ()
        self.nonfinite, self.measure_grad_norm, self.sharded, self.auto_step = nonfinite, measure_grad_norm, sharded, auto_step
        self.add_divisors(*divisors)
        # Data parallel (set under a launcher): sum gradients and a count over ranks; whether any rank skipped
        # the current micro-batch; every rank's skip reasons of a step (None when none skipped).
        self.all_reduce: Callable[[list[torch.Tensor], float], float] | None = None
        self.any_rank: Callable[[bool], bool] | None = None
        self.any_rank_skips: Callable[[str | None], str | None] | None = None
        self.schedulers: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        """A fresh run: no steps, no phase, nothing pending."""
        self.global_step = 0
        self.phase: dict[str, int] | None = None
        self.save_due = False
        self.last_grad_norm: float | None = None
        self.last_skip: str | None = None
        self._clear_group()

    def _clear_group(self) -> None:
        self._micro = 0
        self._acc: dict[str | None, Grads] = {}  # the group's finished micro-batches, per divisor
        self._current: dict[str | None, Grads] = {}  # this micro-batch's, per divisor, set aside
        self._live: str | None = None  # the divisor of the gradients in `.grad` now
        self._counts: dict[str, float] = {}
        self._pending: dict[str, float] = {}  # this micro-batch's counts
        self._bad: list[str] = []

    def add_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        self.optimizers[name] = optimizer

    def add_divisors(self, *divisors: str) -> None:
        """Allow micro-batch weights with these divisors (every rank adds the same ones, in the same order)."""
        for divisor in divisors:
            if self.nonfinite == "step" and self.divisors and divisor not in self.divisors:
                raise ValueError(f"`nonfinite='step'` keeps one divisor, has {self.divisors}, got {divisor!r}")
            if divisor not in self.divisors:
                self.divisors = (*self.divisors, divisor)

    def _params(self) -> list[torch.Tensor]:
        """Every optimized parameter once (a value head's backbone may sit in two optimizers)."""
        return list({id(p): p for o in self.optimizers.values() for g in o.param_groups for p in g["params"]}.values())

    def _zero_grad(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------------------------ micro-batches
    @property
    def pending(self) -> bool:
        """Whether micro-batches of an unfinished group are waiting for their step."""
        return self._micro > 0

    @property
    def weighted(self) -> bool:
        """Whether micro-batch losses with a divisor are back-propagated times their weight and the step
        divides (accumulation, or data parallel); with neither the loss goes back as it is."""
        return self.k > 1 or self.all_reduce is not None

    @property
    def _set_aside(self) -> bool:
        """Whether each micro-batch's gradients are kept apart (to drop one alone, or to divide by divisor)."""
        return self.nonfinite == "micro_batch"

    def autocast(self) -> Any:
        """``torch.autocast`` in the config's precision around forward passes (a no-op in float32)."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def start_micro_batch(self) -> None:
        """Before a micro-batch's forward passes: a group's first clears every gradient."""
        if self._micro == 0:
            self._zero_grad()
            self._clear_group()

    def backward(self, loss: torch.Tensor, rows: float | None = None, *, weight: MicroBatchWeight | None = None) -> None:
        """Back-propagate a micro-batch's loss: with ``rows``, a mean over them (the ``"rows"`` rule); with
        ``weight``, :func:`micro_batch_weights`' rule; with neither, as it is (already normalised)."""
        if weight is None:
            weight = MicroBatchWeight(float(rows), float(rows), "rows") if rows is not None else MicroBatchWeight(1.0)
        key, factor = weight.divisor, weight.weight
        if key is not None:
            if key not in self.divisors:
                raise ValueError(f"micro-batch divisor {key!r} is not one of this engine's `divisors` {self.divisors}")
            self._pending[key] = float(weight.count)
            if not self.weighted:  # one process, one micro-batch per step: the loss as it is, one accumulation
                key, factor = self.divisors[0], 1.0
        elif self.divisors:
            raise ValueError(f"this engine divides by {self.divisors}: pass `rows` or a `weight` with a divisor")
        if factor != 1.0:
            loss = loss * factor
        if key != self._live and self._set_aside:
            self._put_aside()
        self._live = key
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def backward_policy(
        self,
        total: torch.Tensor,
        rows: float,
        *,
        loss_type: str,
        policy_loss: torch.Tensor,
        tokens: float,
        value_loss: torch.Tensor | None = None,
        agent: int | str = 0,
    ) -> None:
        """An agent's part of a micro-batch: ``total`` = its ``policy_loss`` of ``loss_type`` over ``rows``
        completions of ``tokens`` tokens, plus a weighted ``value_loss`` (a mean over the rows) when it has a
        critic, back-propagated by :func:`micro_batch_weights`: whole, times its rows, for the row-mean loss
        types (and in one process with k = 1); for ``dapo`` the policy loss times its tokens, divided by the
        agent's tokens of the step (divisor ``tokens/<agent>``, see :meth:`add_divisors`), the value loss
        times its rows."""
        if loss_type == "dapo" and self.weighted:
            self.backward(policy_loss, weight=micro_batch_weights("dapo", tokens=tokens, divisor_suffix=f"/{agent}"))
            if value_loss is not None:
                self.backward(value_loss, weight=micro_batch_weights(None, rows=rows))
        else:  # dapo in one process with k = 1 goes back as it is (its own tokens are the step's)
            self.backward(total, weight=micro_batch_weights(None if loss_type == "dapo" else loss_type, rows=rows))

    def _put_aside(self) -> None:
        """Move the gradients in ``.grad`` (of divisor ``_live``) into this micro-batch's set-aside ones."""
        grads = {id(p): (p, p.grad) for p in self._params() if p.grad is not None}
        for p, _ in grads.values():
            p.grad = None
        _merge(self._current.setdefault(self._live, {}), grads)

    def end_micro_batch(self, rows: float = 0) -> bool:
        """The micro-batch went through (``rows``: its rows, the ``"rows"`` divisor's count); completes the
        group when it is the k-th. Returns False when, under data parallel, another rank skipped its part of
        the micro-batch: then this rank drops its part too (one process would have skipped the whole)."""
        if self.any_rank is not None and self.any_rank(False):
            self._drop_own()
            self._advance()
            return False
        if "rows" in self.divisors:
            self._pending["rows"] = float(rows)
        if self._set_aside:
            self._put_aside()
            for key, grads in self._current.items():
                _merge(self._acc.setdefault(key, {}), grads)
            self._current = {}
        for key, count in self._pending.items():
            self._counts[key] = self._counts.get(key, 0.0) + count
        self._pending = {}
        self._advance()
        return True

    def discard_micro_batch(self, what: str | None = None) -> None:
        """The micro-batch was skipped (``what`` was non-finite): with ``nonfinite="micro_batch"`` its
        gradients go and the group's earlier ones stay (under data parallel every rank drops its part); with
        ``"step"`` the whole step will be skipped (:meth:`prepare` says why)."""
        if self.any_rank is not None:
            self.any_rank(True)
        if self._set_aside:
            self._drop_own()
        else:
            self._bad.append(what or "loss")
            self._pending = {}
        self._advance()

    def _drop_own(self) -> None:
        for p in self._params():
            p.grad = None
        self._current, self._pending, self._live = {}, {}, None

    def _advance(self) -> None:
        self._micro += 1
        if self.auto_step and self._micro >= self.k:
            self.apply_step()

    def flush(self) -> bool:
        """Step on a partial group (an epoch's end); returns whether a step was taken."""
        return bool(self.apply_step()) if self._micro > 0 else False

    # ------------------------------------------------------------------------------------ the step
    def step(self) -> bool:
        """Finish the group (:meth:`prepare`) and step every optimizer (:meth:`take`). Returns False (nothing
        changes) when the step is skipped or no micro-batch of the group went through."""
        return self.prepare() and self.take()

    def prepare(self) -> bool:
        """The group's gradients, ready to step: skips agreed over ranks, summed over ranks, divided by their
        divisors, unscaled and clipped. False (every gradient cleared; :attr:`last_skip` names what was
        non-finite, None when nothing went through) when the step must not happen."""
        counts, bad, acc = self._counts, self._bad, self._acc
        self._clear_group()
        what = "; ".join(bad) or None
        if self.any_rank_skips is not None:
            what = self.any_rank_skips(what)
        self.last_skip = what
        if what is not None or not self._gather(acc, counts):
            self._zero_grad()
            return False
        norms = []
        for optimizer in self.optimizers.values():
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            if self.max_grad_norm is not None or self.measure_grad_norm:
                owned = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
                if owned or self.measure_grad_norm:
                    norms.append(clip_grad_norm(owned, self.max_grad_norm or math.inf, sharded=self.sharded))
        self.last_grad_norm = max(norms) if norms else None
        bad_norms = [norm for norm in norms if not math.isfinite(norm)]
        if self.nonfinite == "step" and bad_norms:
            self.last_skip = f"gradient norm ({bad_norms[0]})"
            self._zero_grad()
            return False
        return True

    def _gather(self, acc: dict[str | None, Grads], counts: Mapping[str, float]) -> bool:
        """Put the group's gradients in ``.grad``, summed over ranks and divided by their divisors; False when
        no micro-batch went through (the first divisor counts nothing, over every rank)."""
        params = self._params()
        keys = self.divisors if self.weighted else self.divisors[:1]
        if len(keys) <= 1:
            key = keys[0] if keys else None
            _restore(acc.get(key, {}))
            count = counts.get(key, 0.0) if key is not None else 1.0
            if self.all_reduce is not None:
                count = self.all_reduce(params, count)
            if count <= 0:
                return False
            if self.weighted and key is not None:
                for p in params:
                    if p.grad is not None:
                        p.grad.div_(count)
            return True
        total: Grads = {}
        first = None
        for key in keys:  # each divisor's gradients apart: summed over ranks, divided, then added up
            for p in params:
                p.grad = None
            _restore(acc.get(key, {}))
            count = counts.get(key, 0.0)
            if self.all_reduce is not None:
                count = self.all_reduce(params, count)
            first = count if first is None else first
            if count > 0:
                _merge(total, {id(p): (p, p.grad.div_(count)) for p in params if p.grad is not None})
        for p in params:
            p.grad = None
        _restore(total)
        return first > 0

    def take(self) -> bool:
        """Step every optimizer on the prepared gradients and clear them; advance the schedules and counts."""
        for optimizer in self.optimizers.values():
            if self.scaler is not None:
                self.scaler.step(optimizer)
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()
        for scheduler in self.schedulers.values():
            scheduler.step()
        if self.phase is not None:
            self.phase["done"] += 1
        self.global_step += 1
        if self.save_steps and self.global_step % int(self.save_steps) == 0:
            self.save_due = True
        return True

    # ------------------------------------------------------------------------------------ the LR schedule
    def begin_phase(self, horizon: int, *, resume: bool = False) -> None:
        """A phase of ``horizon`` optimizer steps starts (``resume``: the checkpoint's phase continues, with
        the steps it had done)."""
        horizon = max(1, int(horizon))
        done = int(self.phase["done"]) if resume and self.phase is not None else 0
        self.phase = {"horizon": horizon, "done": done}
        self.schedulers = {}
        if not self.scheduled:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # stepping a schedule forward before its optimizer
            for name, optimizer in self.optimizers.items():
                scheduler = build_lr_scheduler(self.settings, optimizer, horizon=horizon)
                if done:
                    scheduler.last_epoch = done - 1
                    scheduler.step()
                self.schedulers[name] = scheduler

    def learning_rate(self, name: str | None = None) -> float:
        """The current learning rate of optimizer ``name`` (default: the first)."""
        optimizer = self.optimizers[name] if name is not None else next(iter(self.optimizers.values()))
        return float(optimizer.param_groups[0]["lr"])

    def step_metrics(self) -> dict[str, float]:
        """``learning_rate`` (and ``grad_norm`` with clipping) after the last step, TRL's names."""
        metrics = {"learning_rate": self.learning_rate()} if self.optimizers else {}
        if self.last_grad_norm is not None:
            metrics["grad_norm"] = self.last_grad_norm
        return metrics

    # ------------------------------------------------------------------------------------ checkpoints
    def on_fresh_run(self) -> None:
        self.reset()
        self.schedulers = {}

    def state_dict(self) -> dict[str, Any]:
        if self.pending:
            raise RuntimeError("a checkpoint cannot be taken while micro-batches wait for their optimizer step")
        state: dict[str, Any] = {"global_step": self.global_step, "phase": self.phase}
        if self.scaler is not None:
            state["scaler"] = {k: float(v) for k, v in self.scaler.state_dict().items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.reset()
        self.global_step = int(state.get("global_step", 0))
        phase = state.get("phase")
        self.phase = {"horizon": int(phase["horizon"]), "done": int(phase["done"])} if phase else None
        if self.scaler is not None and state.get("scaler"):
            saved = dict(state["scaler"])
            saved["_growth_tracker"] = int(saved.get("_growth_tracker", 0))
            self.scaler.load_state_dict(saved)


def _merge(into: Grads, grads: Grads) -> None:
    """Add ``grads`` into ``into`` (the newer gradient plus the earlier ones, in place)."""
    for key, (p, grad) in grads.items():
        into[key] = (p, grad if key not in into else grad.add_(into[key][1]))


def _restore(grads: Grads) -> None:
    for p, grad in grads.values():
        p.grad = grad if p.grad is None else p.grad.add_(grad)
