"""Crash-safe file writes: write a temporary file in the target folder, fsync, rename into place.

A failed write (a full disk, an I/O error) leaves the previous file untouched and raises :class:`WriteError`,
whose message names the file and the operating system's reason. Appends to a JSONL log go through
:func:`append_line`: one ``os.write`` of the whole line, truncated back when it fails, so a line is never
left half written.

Temporary names carry the writing process's id: ``.<name>.<pid>-XXXXXXXX.tmp`` (files, in the target's
folder) and ``.tmp-<name>@<pid>-XXXXXXXX/`` (scratch folders, :func:`scratch_dir`). A kill mid-write can
leave them behind; :func:`remove_stale_temporaries` removes those of dead processes (and the older names
without a process id) when a run resumes.
"""

from __future__ import annotations

import errno as errno_codes
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

logger = logging.getLogger(__name__)

__all__ = [
    "WriteError",
    "append_line",
    "atomic_replace_dir",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_stream",
    "atomic_write_text",
    "remove_stale_temporaries",
    "scratch_dir",
    "write_error",
]

# A library that writes files itself (safetensors' Rust writer) reports the OS error only in its message.
_LIBRARY_OS_ERROR = re.compile(r"os error (\d+)|code: (\d+), kind:")


class WriteError(OSError):
    """A file could not be written. ``filename`` is the path, ``errno`` the OS error number (None when
    the writer did not say); the message names both, with what was kept."""

    def __init__(
        self, path: str | os.PathLike, code: int | None, reason: str, *, detail: str = "", note: str = ""
    ) -> None:
        super().__init__(code, reason)
        self.filename = os.fspath(path)
        self.reason, self.detail, self.note = reason, detail, note
        name = f" [{errno_codes.errorcode[code]}]" if code in errno_codes.errorcode else ""
        self.message = (
            f"cannot write {self.filename}: {reason}{name}"
            + (f" ({detail})" if detail else "")
            + (f"; {note}" if note else "")
        )

    def __str__(self) -> str:
        return self.message


def write_error(path: str | os.PathLike, exc: BaseException, *, note: str = "") -> WriteError | None:
    """``exc`` as a :class:`WriteError` about ``path`` when it is an I/O failure (an OSError, or a library
    error whose message carries an OS error number), else None. A WriteError keeps its own path and gains
    ``path`` in front when that differs."""
    if isinstance(exc, WriteError):
        if exc.filename == os.fspath(path):
            return exc
        # The innermost file stays named: "cannot write <checkpoint>: writing <file>: <reason>".
        reason = exc.reason if exc.reason.startswith("writing ") else f"writing {exc.filename}: {exc.reason}"
        return WriteError(path, exc.errno, reason, detail=exc.detail, note=note or exc.note)
    if isinstance(exc, OSError):
        code = exc.errno
        if code is None and len(exc.args) == 1 and isinstance(exc.args[0], int):
            code = exc.args[0]  # OSError(errno.ENOSPC)
        reason = exc.strerror or (os.strerror(code) if code and not exc.args[1:] else str(exc))
        return WriteError(path, code, reason, note=note)
    match = _LIBRARY_OS_ERROR.search(str(exc))
    if match:
        code = int(match.group(1) or match.group(2))
        return WriteError(path, code, os.strerror(code), detail=f"{type(exc).__name__}: {exc}", note=note)
    return None


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


class _Sink:
    """A binary file object over a raw descriptor: every write is complete (looped ``os.write``), and the
    OSError of a failed one is kept, for writers such as ``torch.save`` that report it as a RuntimeError."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.error: OSError | None = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        try:
            while done < len(view):
                done += os.write(self.fd, view[done:])
        except OSError as exc:
            self.error = exc
            raise
        return len(view)

    def flush(self) -> None:
        """Nothing is buffered."""


def atomic_write_stream(path: str | os.PathLike, write: Callable[[BinaryIO], Any]) -> Path:
    """Call ``write(file)`` on a temporary file beside ``path``, fsync, then rename it to ``path``. Readers
    see the old file or the whole new one; an I/O failure raises :class:`WriteError` naming ``path``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from exc
    sink = _Sink(fd)
    try:
        try:
            write(sink)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        wrapped = write_error(path, sink.error or exc, note="the previous version is unchanged")
        if wrapped is None:
            raise
        raise wrapped from exc
    _fsync_dir(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    return atomic_write_stream(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append ``line`` (newline added) to ``path`` in one ``os.write`` on an ``O_APPEND`` descriptor. When
    the write fails or comes back short, the file is truncated back to its old size and :class:`WriteError`
    is raised: a reader never sees half a line written by this call."""
    path = Path(path)
    data = (line + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            failure: OSError | None = None
            if written != len(data):
                failure = OSError(errno_codes.ENOSPC, f"short write ({written} of {len(data)} bytes)")
            else:
                os.fsync(fd)
        except OSError as exc:
            failure = exc
        if failure is not None:
            try:
                os.ftruncate(fd, size)
                kept = "the file is unchanged"
            except OSError:
                kept = "truncating the partial line failed too: readers drop a torn last line with a warning"
            raise write_error(path, failure, note=kept) from failure
    finally:
        os.close(fd)


def scratch_dir(parent: str | os.PathLike, name: str) -> Path:
    """A new hidden folder ``parent/.tmp-<name>@<pid>-XXXXXXXX`` to build ``parent/<name>`` in (``@``: names
    such as ``checkpoint-3`` end in digits, so a ``-`` could not tell the pid from the name)."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".tmp-{name}@{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise write_error(Path(parent) / name, exc) from exc


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


# ---------------------------------------------------------------------------------------- leftovers
_RANDOM = r"[a-z0-9_]{8}"
# (pattern, is a folder). Group "pid" is the writer's process id where the name carries one.
_LEFTOVERS = (
    (re.compile(rf"^\..+\.(?:(?P<pid>\d+)-)?{_RANDOM}\.tmp$"), False),  # atomic_write_* temporaries
    (re.compile(rf"^\.tmp-.+@(?P<pid>\d+)-{_RANDOM}$"), True),  # scratch folders (checkpoints, policies)
    (re.compile(rf"^\.tmp-[^@]+-{_RANDOM}$"), True),  # the same, named before names carried the pid
    (re.compile(rf"^\..+\.tmp-{_RANDOM}$"), True),  # older scratch folders (reward model)
    (re.compile(r"^\.deleting-checkpoint-\d+-(?P<pid>\d+)$"), True),  # checkpoint rotation
)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process has no write in flight while it cleans up
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _is_leftover(entry: Path) -> bool:
    if entry.is_symlink():
        return False
    name = entry.name
    if name.endswith(".old") and entry.is_dir():
        # The trash of atomic_replace_dir: garbage only once the new folder is in place.
        return (entry.parent / name[1 : -len(".old")]).is_dir()
    for pattern, is_dir in _LEFTOVERS:
        match = pattern.match(name)
        if match and (entry.is_dir() if is_dir else entry.is_file()):
            pid = match.groupdict().get("pid")
            return pid is None or not _alive(int(pid))
    return False


def remove_stale_temporaries(root: str | os.PathLike, *, max_depth: int = 3) -> list[Path]:
    """Remove what interrupted writes left under ``root`` (down to ``max_depth`` folder levels): temporary
    files and scratch folders of the names above whose writer is gone, and replaced folders' trash. Other
    names, hidden folders' contents and symlinks are never touched. Logs and returns the removed paths."""
    root = Path(root)
    removed: list[Path] = []
    folders = [(root, 0)] if root.is_dir() else []
    while folders:
        folder, depth = folders.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith("."):
                if depth < max_depth and entry.is_dir() and not entry.is_symlink():
                    folders.append((entry, depth + 1))
                continue
            if _is_leftover(entry):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                removed.append(entry)
    if removed:
        logger.warning(
            "removed %d leftover(s) of interrupted writes under %s: %s",
            len(removed),
            root,
            ", ".join(str(p) for p in removed),
        )
    return sorted(removed)
