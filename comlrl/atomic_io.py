"""Crash-safe file writes: write a temporary file in the target folder, fsync, rename into place."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def atomic_replace_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike) -> Path:
    """Move a fully written ``tmp_dir`` to ``final_dir`` (replacing an old one) in one rename."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    if final_dir.exists():
        trash = final_dir.with_name(f".{final_dir.name}.old")
        if trash.exists():
            shutil.rmtree(trash)
        os.replace(final_dir, trash)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(trash)
    else:
        os.replace(tmp_dir, final_dir)
    _fsync_dir(final_dir.parent)
    return final_dir
