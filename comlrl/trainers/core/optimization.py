"""The training knobs every comlrl trainer shares, declared and run in one place: gradient accumulation, the
learning-rate schedule with warm-up, gradient clipping, bf16 / fp16 autocast, and when ``save_steps``
checkpoints fall due.

The config fields are :class:`TrainingKnobFields` (transformers' ``TrainingArguments`` names and meanings;
the defaults keep the public CoMLRL behaviour: one micro-batch per step, a constant learning rate, no
clipping, float32, no checkpoints). A trainer drives :class:`GradientSteps` per micro-batch::

    steps.start_micro_batch()              # the gradients of the group's earlier micro-batches are set aside
    with steps.autocast(): loss = ...      # forward passes in bf16 / fp16 when asked
    steps.backward(loss, rows)             # rows: the micro-batch's pairs / joint responses / tree nodes
    steps.end_micro_batch(rows)            # or steps.discard_micro_batch() (a skipped, non-finite one)
    ...
    steps.flush()                          # the end of an epoch: a partial group steps too

**Accumulation.** ``gradient_accumulation_steps`` (k) consecutive micro-batches form one optimizer step.
Every trainer's loss is a mean over the rows of its micro-batch; with k > 1 it is back-propagated times its
row count and, before the step, the gradients are divided by the rows of the whole step, so the step
follows the gradient of the mean over all rows of its k micro-batches: the update of one micro-batch k
times larger (exactly, up to float rounding, for every loss averaged over rows: MADPO, the reward model,
the ``sequence_sum`` / ``grpo`` / ``dr_grpo`` policy losses and the value losses; the token-averaged
``bnpo`` / ``token`` / ``dapo`` losses weigh each micro-batch by its rows, not its tokens). A skipped
micro-batch adds nothing (the others' gradients are kept) but holds its place in the group, so the groups
stay those of the larger batch. With k = 1 the loss is back-propagated as it is (bitwise the old update).

**Data parallel.** Under a launcher (:mod:`comlrl.distributed`) the step first sums every parameter's
gradient and the rows over the ranks, so the division gives the mean over the global rows (set
``all_reduce``; the trainers do).

**LR schedule.** ``transformers.get_scheduler(lr_scheduler_type, optimizer, warmup, horizon)`` for every
optimizer, over a *phase* whose optimizer steps the trainer counts before it starts (:meth:`begin_phase`):
the whole run of MAGRPO / IAC / MAAC and of the base preference trainers after pair collection (MARLHF:
its RL stage), one round of the iterative ones. Warm-up is ``warmup_steps`` when > 0, else
``ceil(warmup_ratio · horizon)`` (transformers' rule). The schedule's state is its phase (horizon, warm-up,
steps done), kept in checkpoints, so a resumed run rebuilds the same schedulers.

**Clipping.** With ``max_grad_norm`` > 0 each optimizer's parameters (one policy, or one critic) are
clipped to that norm (``torch.nn.utils.clip_grad_norm_``); ``grad_norm`` is the largest norm before
clipping. **Precision.** ``bf16`` / ``fp16``: ``torch.autocast`` around the forward passes (weights and
optimizer states stay float32); fp16 adds loss scaling (``torch.amp.GradScaler``) and needs CUDA.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from typing import Any

import torch

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
    "TrainingKnobFields",
    "accumulated_steps",
    "build_lr_scheduler",
    "epoch_micro_batches",
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


_DEFAULTS = {name: f.default for name, f in TrainingKnobFields.__dataclass_fields__.items()}


class GradientSteps(TrainerPart):
    """Micro-batches into optimizer steps (see the module docstring): accumulation, clipping, the LR
    schedule, autocast and the optimizer-step count.

    Args:
        settings: an object with the :class:`TrainingKnobFields` (a trainer config); a missing field takes
            its default.
        optimizers: ``{name: optimizer}``; more can be added with :meth:`add_optimizer` (critics).
        device_type: where the forward passes run (``"cpu"`` or ``"cuda"``): autocast's device.
        apply_step: what completes a group (default :meth:`step`); a trainer passes its own, which calls
            :meth:`step` and bumps its policies' versions.

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
    ) -> None:
        knob = lambda name: getattr(settings, name, _DEFAULTS[name])  # noqa: E731
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
        # Data parallel (set by the trainer under a launcher): sum gradients and rows over ranks; whether any
        # rank skipped the current micro-batch.
        self.all_reduce: Callable[[list[torch.Tensor], float], float] | None = None
        self.any_rank: Callable[[bool], bool] | None = None
        self.schedulers: dict[str, Any] = {}
        self.reset()

    def reset(self) -> None:
        """A fresh run: no steps, no phase, nothing pending."""
        self.global_step = 0
        self.phase: dict[str, int] | None = None
        self.save_due = False
        self.last_grad_norm: float | None = None
        self._stash: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._micro = 0
        self._rows = 0.0

    def add_optimizer(self, name: str, optimizer: torch.optim.Optimizer) -> None:
        self.optimizers[name] = optimizer

    def _params(self) -> list[torch.Tensor]:
        """Every optimized parameter once (a value head's backbone may sit in two optimizers)."""
        return list({id(p): p for o in self.optimizers.values() for g in o.param_groups for p in g["params"]}.values())

    # ------------------------------------------------------------------------------------ micro-batches
    @property
    def pending(self) -> bool:
        """Whether micro-batches of an unfinished group are waiting for their step."""
        return self._micro > 0

    def autocast(self) -> Any:
        """``torch.autocast`` in the config's precision around forward passes (a no-op in float32)."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def start_micro_batch(self) -> None:
        """Before a micro-batch's forward passes: a group's first clears every gradient; later ones set the
        group's gradients aside, so this micro-batch's can be dropped alone."""
        params = self._params()
        if self._micro == 0:
            for optimizer in self.optimizers.values():
                optimizer.zero_grad(set_to_none=True)
            self._stash = []
            return
        self._stash = [(p, p.grad) for p in params if p.grad is not None]
        for p, _ in self._stash:
            p.grad = None

    def backward(self, loss: torch.Tensor, rows: int) -> None:
        """Back-propagate a micro-batch's mean loss over ``rows`` rows (times ``rows`` when k > 1)."""
        if self.weighted:
            loss = loss * float(rows)
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def end_micro_batch(self, rows: int) -> bool:
        """The micro-batch went through: its ``rows`` count; completes the group when it is the k-th. Returns
        False when, under data parallel, another rank skipped its part of the micro-batch: then this rank
        drops its part too (one process would have skipped the whole micro-batch)."""
        if self.any_rank is not None and self.any_rank(False):
            self._drop_own()
            self._advance()
            return False
        for p, grad in self._stash or []:
            p.grad = grad if p.grad is None else p.grad.add_(grad)
        self._stash = None
        self._rows += float(rows)
        self._advance()
        return True

    def discard_micro_batch(self) -> None:
        """The micro-batch was skipped (a non-finite loss): its gradients go, the group's earlier ones come
        back; under data parallel every rank drops its part."""
        if self.any_rank is not None:
            self.any_rank(True)
        self._drop_own()
        self._advance()

    def _drop_own(self) -> None:
        for p in self._params():
            p.grad = None
        for p, grad in self._stash or []:
            p.grad = grad
        self._stash = None

    def _advance(self) -> None:
        self._micro += 1
        if self._micro >= self.k:
            self.apply_step()

    def flush(self) -> bool:
        """Step on a partial group (an epoch's end); returns whether a step was taken."""
        return bool(self.apply_step()) if self._micro > 0 else False

    # ------------------------------------------------------------------------------------ the step
    @property
    def weighted(self) -> bool:
        """Whether micro-batch losses are back-propagated times their rows and the step divides by the rows
        (accumulation, or data parallel); with neither the loss goes back as it is."""
        return self.k > 1 or self.all_reduce is not None

    def step(self) -> bool:
        """Finish the group: sum over ranks, average over its rows, clip, step every optimizer and its
        schedule. Returns False (nothing changes) when no micro-batch of the group went through."""
        rows, self._micro, self._rows = self._rows, 0, 0.0
        if self.all_reduce is not None:  # every rank's gradients and rows summed: the global step's
            rows = self.all_reduce(self._params(), rows)
        params = [p for p in self._params() if p.grad is not None]
        if rows <= 0:
            for optimizer in self.optimizers.values():
                optimizer.zero_grad(set_to_none=True)
            return False
        if self.weighted:
            for p in params:
                p.grad.div_(rows)
        norms = []
        for optimizer in self.optimizers.values():
            if self.scaler is not None:
                self.scaler.unscale_(optimizer)
            if self.max_grad_norm is not None:
                owned = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
                if owned:
                    norms.append(float(torch.nn.utils.clip_grad_norm_(owned, self.max_grad_norm)))
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
        self.last_grad_norm = max(norms) if norms else None
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
