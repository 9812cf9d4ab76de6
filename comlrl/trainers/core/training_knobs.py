"""The optimisation knobs of every trainer config (:class:`TrainingKnobFields`: transformers'
``TrainingArguments`` names and meanings) and the learning-rate schedule they describe. Declared apart from
:class:`~comlrl.trainers.core.optimization.GradientSteps`, which runs them, so that reading a config does not
need torch.

The schedule's keywords are checked with the config against :data:`SCHEDULE_KEYWORDS` (transformers'
schedule functions, which ``tests/comlrl/test_training_knobs.py`` compares with the installed transformers);
what only building the schedule can tell (a value transformers refuses) is reported by
:func:`build_lr_scheduler`, when a trainer builds its schedulers, in the same words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from comlrl.validation import check_bool, check_float, check_int, help_field, warn

__all__ = [
    "LR_SCHEDULER_TYPES",
    "SCHEDULE_KEYWORDS",
    "OptimizerStepFields",
    "TrainingKnobFields",
    "build_lr_scheduler",
    "check_schedule_keywords",
    "warmup_steps_for",
]

# transformers' SchedulerType values a step-count schedule can use (reduce_lr_on_plateau needs a metric,
# greedy a loss: neither fits these trainers).
LR_SCHEDULER_TYPES = (
    "constant",
    "constant_with_warmup",
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "inverse_sqrt",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
)
# The keywords ``lr_scheduler_kwargs`` may hold for each schedule: its transformers function's parameters past
# the optimizer, the warm-up and the horizon (``get_scheduler`` passes those). None: ``get_scheduler`` calls the
# schedule without the keywords, so any are accepted (and ignored).
SCHEDULE_KEYWORDS: dict[str, tuple[str, ...] | None] = {
    "constant": None,
    "constant_with_warmup": None,
    "linear": ("last_epoch",),
    "cosine": ("num_cycles", "last_epoch"),
    "cosine_with_restarts": ("num_cycles", "last_epoch"),
    "polynomial": ("lr_end", "power", "last_epoch"),
    "inverse_sqrt": ("timescale", "last_epoch"),
    "cosine_with_min_lr": ("num_cycles", "last_epoch", "min_lr", "min_lr_rate"),
    "cosine_warmup_with_min_lr": ("num_cycles", "last_epoch", "min_lr", "min_lr_rate", "warmup_lr_rate"),
    "warmup_stable_decay": (
        "num_decay_steps", "num_stable_steps", "warmup_type", "decay_type", "min_lr_ratio", "num_cycles", "last_epoch",
    ),
}
# transformers' warm-up and decay shapes of ``warmup_stable_decay``.
_WSD_SHAPES = ("linear", "cosine", "1-sqrt")


@dataclass
class OptimizerStepFields:
    r"""
    The optimizer-step knobs every trainer config shares (transformers' `TrainingArguments` names and
    meanings): accumulation, the LR schedule and clipping; the base of [`TrainingKnobFields`] (comlrl's
    trainers) and of pettingllms' `ATGRPOConfig`, which override only the defaults that differ. Checked once,
    here (`_validate_step_knobs`).

    Parameters:
        > Parameters that control the optimizer steps

        gradient_accumulation_steps (`int`, *optional*, defaults to `1`):
            Micro-batches (of `train_batch_size` rows each) per optimizer step. The step is the update of one
            batch this many times larger (the loss is the mean over all rows of the step); an epoch's last
            step may hold fewer. Under a data-parallel launcher, the global batch of a step is
            `train_batch_size × gradient_accumulation_steps × processes`.
        lr_scheduler_type (`str`, *optional*, defaults to `"constant"`):
            transformers' schedule name (`constant`, `constant_with_warmup`, `linear`, `cosine`,
            `cosine_with_restarts`, `polynomial`, `inverse_sqrt`, ...), applied by
            `transformers.get_scheduler` to every optimizer over the trainer's optimizer steps (one round of
            an iterative trainer). The public library has none, hence `constant` (transformers: `linear`).
        lr_scheduler_kwargs (`dict`, *optional*):
            Extra keywords of the schedule (e.g. `{"num_cycles": 2}`, `{"min_lr": 1e-7}`).
        warmup_steps (`int`, *optional*, defaults to `0`):
            Optimizer steps of linear warm-up from 0; overrides `warmup_ratio` when > 0.
        warmup_ratio (`float`, *optional*, defaults to `0.0`):
            Warm-up as a fraction of the schedule's optimizer steps, in [0, 1].
        max_grad_norm (`float`, *optional*):
            Clip each policy's (and each critic's) gradient norm to this value; `None` or `0` does not clip
            (the public library does not; transformers' default is 1.0).
    """

    gradient_accumulation_steps: int = help_field("Micro-batches per optimizer step.", 1)
    lr_scheduler_type: str = help_field(
        "transformers' LR schedule name (constant, constant_with_warmup, linear, cosine, ...).", "constant"
    )
    lr_scheduler_kwargs: dict | None = help_field("Extra keywords of the LR schedule.", None)
    warmup_steps: int = help_field("Linear warm-up steps (overrides warmup_ratio when > 0).", 0)
    warmup_ratio: float = help_field("Warm-up as a fraction of the schedule's steps, in [0, 1].", 0.0)
    max_grad_norm: float | None = help_field("Clip each policy's gradient norm to this; None or 0: no clip.", None)

    def _normalize_training_knobs(self) -> None:
        if isinstance(self.lr_scheduler_type, str):
            self.lr_scheduler_type = self.lr_scheduler_type.strip().lower()
        if isinstance(self.lr_scheduler_kwargs, str):  # a JSON object on a command line
            import json

            self.lr_scheduler_kwargs = json.loads(self.lr_scheduler_kwargs) if self.lr_scheduler_kwargs else None

    def _validate_step_knobs(self) -> None:
        """The rules of this class's fields (:func:`check_schedule_keywords` is left to the caller, which runs
        it after its own fields, so the first error reported stays the one it always was)."""
        check_int("gradient_accumulation_steps", self.gradient_accumulation_steps, minimum=1)
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES:
            raise ValueError(
                f"`lr_scheduler_type` must be one of: {', '.join(LR_SCHEDULER_TYPES)}, got {self.lr_scheduler_type!r}"
            )
        if self.lr_scheduler_kwargs is not None and not isinstance(self.lr_scheduler_kwargs, dict):
            raise ValueError(f"`lr_scheduler_kwargs` must be a dict or None, got {self.lr_scheduler_kwargs!r}")
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_float("warmup_ratio", self.warmup_ratio, ge=0, le=1)
        check_float("max_grad_norm", self.max_grad_norm, ge=0, optional=True)

    def _warn_ineffective_training_knobs(self) -> None:
        if self.lr_scheduler_type == "constant" and (self.warmup_steps or self.warmup_ratio):
            warn(
                "`warmup_steps` / `warmup_ratio` have no effect with lr_scheduler_type='constant' (as in "
                "transformers); use 'constant_with_warmup'"
            )


@dataclass
class TrainingKnobFields(OptimizerStepFields):
    r"""
    The optimisation knobs of every comlrl trainer config (transformers' `TrainingArguments` names and
    meanings); a mixin of [`TrainerConfig`]. The defaults keep the public CoMLRL behaviour. The optimizer-step
    knobs (`gradient_accumulation_steps`, `lr_scheduler_type`, `lr_scheduler_kwargs`, `warmup_steps`,
    `warmup_ratio`, `max_grad_norm`) are those of [`OptimizerStepFields`].

    Parameters:
        bf16 (`bool`, *optional*, defaults to `False`):
            Forward passes under `torch.autocast` in bfloat16 (weights and optimizer states stay float32);
            works on CPU and GPU.
        fp16 (`bool`, *optional*, defaults to `False`):
            The same in float16 with loss scaling (`torch.amp.GradScaler`); CUDA only (an error on CPU: use
            `bf16` there).
        save_steps (`int`, *optional*):
            Write a checkpoint every this many optimizer steps, inside epochs and rounds too (with
            `save_total_limit`). Checkpoints are then named `checkpoint-{optimizer steps}`; see
            docs/compatibility.md for how this combines with `train(checkpoint_interval=...)`.
    """

    bf16: bool = help_field("Autocast forward passes to bfloat16.", False)
    fp16: bool = help_field("Autocast forward passes to float16 with loss scaling (CUDA only).", False)
    save_steps: int | None = help_field("Checkpoint every this many optimizer steps; None: never.", None)

    def _validate_training_knobs(self) -> None:
        self._validate_step_knobs()
        check_bool("bf16", self.bf16)
        check_bool("fp16", self.fp16)
        if self.bf16 and self.fp16:
            raise ValueError("`bf16` and `fp16` are both True: choose one autocast precision")
        check_int("save_steps", self.save_steps, minimum=1, optional=True)
        check_schedule_keywords(self)  # the schedule's keywords and what it needs, without building it


def warmup_steps_for(settings: Any, horizon: int) -> int:
    """Warm-up steps of a schedule over ``horizon`` optimizer steps: ``warmup_steps`` when > 0, else
    ``ceil(warmup_ratio · horizon)`` (transformers' rule)."""
    if settings.warmup_steps > 0:
        return int(settings.warmup_steps)
    return math.ceil(float(settings.warmup_ratio) * horizon)


def build_lr_scheduler(settings: Any, optimizer: Any, *, horizon: int) -> Any:
    """``transformers.get_scheduler`` for ``optimizer`` over ``horizon`` optimizer steps with the config's
    schedule (``settings`` has the :class:`TrainingKnobFields`)."""
    from transformers import get_scheduler

    try:
        return get_scheduler(
            settings.lr_scheduler_type,
            optimizer,
            num_warmup_steps=warmup_steps_for(settings, horizon),
            num_training_steps=horizon,
            scheduler_specific_kwargs=dict(settings.lr_scheduler_kwargs or {}),
        )
    except (TypeError, ValueError) as error:  # what the keyword table cannot tell (a value transformers refuses)
        raise _schedule_error(settings, error) from None


def _schedule_error(settings: Any, reason: Any) -> ValueError:
    return ValueError(
        f"`lr_scheduler_type` {settings.lr_scheduler_type!r} with `lr_scheduler_kwargs`="
        f"{settings.lr_scheduler_kwargs!r} cannot be built: {reason}"
    )


def check_schedule_keywords(settings: Any) -> None:
    """A ValueError naming ``lr_scheduler_type`` and ``lr_scheduler_kwargs`` when the keywords are not the
    schedule's (:data:`SCHEDULE_KEYWORDS`) or miss what it needs (``min_lr`` or ``min_lr_rate`` of the
    ``*_min_lr`` schedules, ``num_decay_steps`` of ``warmup_stable_decay``), in transformers' words; no torch."""
    kind, given = settings.lr_scheduler_type, dict(settings.lr_scheduler_kwargs or {})
    allowed = SCHEDULE_KEYWORDS.get(kind)
    if allowed is None:
        return
    unknown = [key for key in given if key not in allowed]
    if unknown:
        raise _schedule_error(
            settings, f"unexpected keyword {unknown[0]!r} (the {kind} schedule takes {', '.join(allowed)})"
        )
    if "min_lr" in allowed:
        if given.get("min_lr") is not None and given.get("min_lr_rate") is not None:
            raise _schedule_error(settings, "Only one of min_lr or min_lr_rate should be set")
        if given.get("min_lr") is None and given.get("min_lr_rate") is None:
            raise _schedule_error(
                settings, "One of min_lr or min_lr_rate should be set through the `lr_scheduler_kwargs`"
            )
    if kind == "warmup_stable_decay":
        if "num_decay_steps" not in given:
            raise _schedule_error(settings, "missing the required keyword 'num_decay_steps'")
        for key in ("warmup_type", "decay_type"):
            if given.get(key, "linear") not in _WSD_SHAPES:
                shape = key.split("_")[0]
                raise _schedule_error(
                    settings, f"Unknown {shape} type: {given[key]}, expected 'linear', 'cosine' or '1-sqrt'"
                )
