"""How one ``train()`` call of a multi-agent trainer checkpoints: the plan from the public checkpoint keywords,
the config a checkpoint records, and the check that a resumed run's config matches it."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from comlrl.checkpoint import find_checkpoint

__all__ = ["UNSET", "CheckpointPlan", "check_config_matches", "json_config", "plan_checkpoints"]

UNSET: Any = object()  # tells "not given" from the public defaults of train()'s checkpoint keywords
# Config fields that may differ between a checkpoint and the run resuming from it.
PORTABLE_FIELDS = frozenset(
    {
        "num_iterations",
        "num_train_epochs",
        "output_dir",
        "logging_dir",
        "logging_steps",
        "report_to",
        "run_name",
        "disable_tqdm",
        "save_total_limit",
        "save_steps",
        "agent_devices",
        "comparator_devices",
        "reference_devices",
        "reward_model_device",
        "critic_devices",
        "parallel_training",
        "preference_replay_dir",
        "policy_checkpoint_dir",
        "eval_interval",
        "eval_num_samples",
        "eval_batch_size",
        "comparator_api_key",
        "comparator_api_key_env",
        "comparator_api_timeout",
        "comparator_api_headers",
    }
)


@dataclasses.dataclass
class CheckpointPlan:
    """How one ``train()`` call checkpoints: ``directory`` None means no checkpoints."""

    directory: Path | None
    interval: int = 1
    total_limit: int | None = None
    resume_from: Path | None = None
    save_directory: Path | None = None  # where save_steps checkpoints go (None: save_steps is off)


def plan_checkpoints(
    resume: str | os.PathLike | bool | None,
    directory: str | os.PathLike | None,
    interval: Any,
    total_limit: Any,
    *,
    output_dir: str | os.PathLike,
    save_total_limit: int | None,
    save_steps: int | None = None,
) -> CheckpointPlan:
    """The plan of ``train(resume_from_checkpoint, checkpoint_dir, checkpoint_interval,
    checkpoint_total_limit)``: giving any of them turns checkpoints on (``UNSET`` marks the last two as
    not given); the directory defaults to ``output_dir`` and the limit to ``save_total_limit``. With
    ``save_steps`` the ``save_steps`` checkpoints go to that directory (default ``output_dir``) too, whether
    or not the commit-point checkpoints are on."""
    given = (
        resume not in (None, False)
        or directory is not None
        or interval is not UNSET
        or total_limit is not UNSET
    )
    interval = 1 if interval is UNSET else interval
    total_limit = save_total_limit if total_limit is UNSET or total_limit is None else total_limit
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise ValueError(f"`checkpoint_interval` must be a positive integer, got {interval!r}")
    if total_limit is not None and (
        isinstance(total_limit, bool) or not isinstance(total_limit, int) or total_limit < 1
    ):
        raise ValueError(f"`checkpoint_total_limit` must be a positive integer or None, got {total_limit!r}")
    base = Path(directory if directory is not None else output_dir)
    save_directory = base if save_steps else None
    if not given:
        return CheckpointPlan(directory=None, total_limit=total_limit, save_directory=save_directory)
    resume_from = find_checkpoint(resume, output_dir=base) if resume not in (None, False) else None
    return CheckpointPlan(base, interval, total_limit, resume_from, save_directory)


def json_config(args: Any) -> dict[str, Any]:
    """The config as a checkpoint records it: every field, values JSON cannot hold as their ``repr``."""
    out = {}
    for key, value in args.to_dict().items():
        try:
            json.dumps(value)
        except TypeError:
            value = repr(value)
        out[key] = value
    return out


def check_config_matches(saved: Mapping[str, Any], args: Any, path: Path) -> None:
    """Refuse to resume from ``path`` when its config differs from ``args`` in a field that shapes the run."""
    mine = json_config(args)
    differing = sorted(k for k in saved if k not in PORTABLE_FIELDS and k in mine and saved[k] != mine[k])
    if differing:
        detail = ", ".join(f"{k}: {saved[k]!r} -> {mine[k]!r}" for k in differing)
        raise ValueError(f"cannot resume from {path}: the config differs in {detail}")
