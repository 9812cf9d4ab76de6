"""Metric reporting through ``report_to`` (none / tensorboard / wandb / all) plus a local JSONL file.

Every run writes ``output_dir/metrics.jsonl`` (one JSON object per logged step); tensorboard and wandb are
imported only when asked for, with an install hint when missing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REPORT_TO_CHOICES = ("tensorboard", "wandb")
KNOWN_REPORTERS = ("none", *REPORT_TO_CHOICES)  # the names besides "all"


def installed_reporters() -> list[str]:
    """What ``report_to="all"`` turns on (TRL's meaning): every integration whose package is installed.
    TensorBoard counts only with the ``tensorboard`` package, which ``torch.utils.tensorboard`` needs
    (``tensorboardX`` alone does not serve :class:`MetricsLogger`)."""
    return [name for name in REPORT_TO_CHOICES if importlib.util.find_spec(name) is not None]


def normalize_report_to(report_to: str | Iterable[str] | None) -> list[str]:
    """``report_to`` as a list of sink names, in order and without repeats: ``None`` and ``"none"`` give
    ``[]``, a comma-separated string is split, names are lower-cased and stripped, ``"all"`` stands for
    :func:`installed_reporters`."""
    if report_to is None:
        return []
    items = report_to.split(",") if isinstance(report_to, str) else report_to
    if isinstance(items, Iterable) and not isinstance(items, Mapping):
        items = list(items)
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"`report_to` must be a string or a list of strings, got {report_to!r}")
    names: list[str] = []
    for item in items:
        name = item.strip().lower()
        if name == "all":
            names += installed_reporters()
        elif name in REPORT_TO_CHOICES:
            names.append(name)
        elif name not in ("", "none"):
            raise ValueError(
                f"`report_to` must be 'none' or any of: {', '.join(REPORT_TO_CHOICES)}, got {report_to!r} "
                "(or 'all': every installed one)"
            )
    return list(dict.fromkeys(names))


def _finite_scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, bool):
            value = float(value)
        if isinstance(value, int | float) and math.isfinite(float(value)):
            out[key] = float(value)
    return out


class MetricsLogger:
    """Writes each ``log(metrics, step)`` to ``metrics.jsonl`` and the configured reporters."""

    def __init__(
        self,
        output_dir: str | os.PathLike,
        report_to: str | Iterable[str] | None = "none",
        *,
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
        wandb_kwargs: Mapping[str, Any] | None = None,
        filename: str = "metrics.jsonl",
        tensorboard_dir: str | os.PathLike | None = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.output_dir / filename
        self.reporters = normalize_report_to(report_to)
        self.tensorboard_dir = Path(tensorboard_dir) if tensorboard_dir else self.output_dir / "tensorboard"
        self.history: list[dict[str, Any]] = []
        self._tb = None
        self._wandb_run = None
        if "tensorboard" in self.reporters:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise ImportError("report_to='tensorboard' needs `pip install tensorboard`") from error
            self._tb = SummaryWriter(log_dir=str(self.tensorboard_dir))
        if "wandb" in self.reporters:
            try:
                import wandb
            except ImportError as error:
                raise ImportError("report_to='wandb' needs `pip install wandb`") from error
            kwargs = dict(wandb_kwargs or {})
            kwargs.setdefault("name", run_name)
            kwargs.setdefault("dir", str(self.output_dir))
            self._wandb_run = wandb.init(config=dict(config or {}), **kwargs)

    def log(self, metrics: Mapping[str, Any], step: int) -> dict[str, float]:
        scalars = _finite_scalars(metrics)
        record = {"step": int(step), **scalars}
        self.history.append(record)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb_run is not None:
            self._wandb_run.log(scalars, step=step)
        return scalars

    def truncate_after(self, step: int) -> None:
        """On resume, drop JSONL lines logged after the checkpoint's step (they will be logged again)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line).get("step", 0) <= step:
                kept.append(line)
        from comlrl.atomic_io import atomic_write_text

        atomic_write_text(self.path, "".join(k + "\n" for k in kept))
        self.history = [json.loads(k) for k in kept]

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()
