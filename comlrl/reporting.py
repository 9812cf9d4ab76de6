"""Metric reporting through ``report_to`` (none / tensorboard / wandb / all) plus a local JSONL file.

Every run writes ``output_dir/metrics.jsonl`` (one JSON object per logged step); tensorboard and wandb are
imported only when asked for, with an install hint when missing.

Each line carries ``"format_version": 1`` after the metrics (lines written before it existed read as
version 1). A line is appended in one write and truncated back when that fails
(:func:`comlrl.atomic_io.append_line`), so this code never leaves half a line; :func:`read_metrics` still
drops a torn last line left by an older writer, with a warning naming the file and line.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from comlrl.atomic_io import append_line, atomic_write_text

logger = logging.getLogger(__name__)

METRICS_FORMAT_VERSION = 1
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


class MetricsFileError(ValueError):
    """A metrics JSONL file holds a line that is not a record of a supported version."""


def _metrics_line(record: Mapping[str, Any]) -> str:
    return json.dumps({**record, "format_version": METRICS_FORMAT_VERSION})


def read_jsonl(path: str | os.PathLike, error: type[Exception] = ValueError) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each record of a JSONL log (blank lines skipped).

    A last line without its newline that does not parse is the torn end of an interrupted write: it is
    dropped with a warning naming the file and line. Any other bad line raises ``error`` naming the file and
    line.
    """
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # no newline after it: the write was cut short
                logger.warning(
                    "%s, line %d: torn last line (%d bytes, an interrupted write) dropped", path, number, len(line)
                )
                break
            raise error(f"{path}, line {number}: not a JSON record ({exc})") from None
        if not isinstance(record, dict):
            raise error(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        records.append((number, record))
    return records


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file, without their ``format_version`` (see :func:`read_jsonl` for
    torn and bad lines). A version other than :data:`METRICS_FORMAT_VERSION` raises
    :class:`MetricsFileError` naming the file and line.
    """
    records = []
    for number, record in read_jsonl(path, MetricsFileError):
        version = record.pop("format_version", 1)
        if version != METRICS_FORMAT_VERSION:
            raise MetricsFileError(
                f"{path}, line {number}: `format_version` is {version!r}, this version of comlrl reads "
                f"{METRICS_FORMAT_VERSION}"
            )
        records.append(record)
    return records


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
        self._tail_checked = False
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
        """Append one record; a failed write raises :class:`~comlrl.atomic_io.WriteError` naming the file
        (which is left as it was) and the record is not kept."""
        scalars = _finite_scalars(metrics)
        record = {"step": int(step), **scalars}
        if not self._tail_checked:
            self._drop_torn_tail()
        append_line(self.path, _metrics_line(record))
        self.history.append(record)
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb_run is not None:
            self._wandb_run.log(scalars, step=step)
        return scalars

    def _drop_torn_tail(self) -> None:
        """Before the first append: cut a torn last line (no newline) an interrupted writer left, so the
        next record starts on a line of its own."""
        self._tail_checked = True
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            try:  # a whole record without its newline is kept, as read_jsonl keeps it
                json.loads(data[keep:])
            except ValueError:
                logger.warning(
                    "%s, line %d: torn last line (%d bytes, an interrupted write) dropped",
                    self.path,
                    data.count(b"\n") + 1,
                    len(data) - keep,
                )
                os.truncate(self.path, keep)
                return
            with open(self.path, "ab") as handle:  # the next record starts on a line of its own
                handle.write(b"\n")

    def rewrite(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace the file (atomically) and the history with ``records``."""
        self.history = [dict(r) for r in records]
        atomic_write_text(self.path, "".join(_metrics_line(r) + "\n" for r in self.history))
        self._tail_checked = True

    def truncate_after(self, step: int) -> None:
        """On resume, drop JSONL lines logged after the checkpoint's step (they will be logged again)."""
        if not self.path.exists():
            return
        self.rewrite(r for r in read_metrics(self.path) if r.get("step", 0) <= step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()
