"""What a sandboxed run returns, how its end is classified, and the infrastructure error."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from pettingllms.agents.code_runner import ExecutionResult as _ExecutionResultBase
from pettingllms.agents.failures import InfrastructureError

#: Values of :attr:`ExecutionResult.limit`: which limit ended the run.
LIMITS: tuple[str, ...] = ("wall_time", "cpu_time", "memory", "file_size", "processes", "open_files",
                           "output")


class SandboxError(InfrastructureError):
    """The sandbox could not run the program (bad interpreter, namespaces refused, launcher crash).

    Raised, never returned: a program's own failure is an :class:`ExecutionResult` with a non-``ok``
    status, which the environment rewards; this error drops the sample as an infrastructure failure.
    """


@dataclass(frozen=True)
class ExecutionResult(_ExecutionResultBase):
    """Outcome of one sandboxed run (construct with keywords).

    ``status``: ``ok`` (exit 0), ``error`` (non-zero exit or a crash signal), ``timeout`` (wall clock),
    ``killed`` (a limit; ``limit`` names it, one of :data:`LIMITS`). ``returncode`` is the exit code,
    ``-signal`` when a signal ended the program, ``None`` when the pool killed it (timeout, output cap).
    ``stdout``/``stderr`` are decoded (invalid UTF-8 replaced) and hold at most ``max_output_bytes``
    each; ``*_truncated`` says when more was produced. ``duration`` is wall seconds, ``cpu_time`` the
    CPU seconds of the program and the children it reaped (``None`` when unknown).
    """

    returncode: int | None = None
    limit: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    cpu_time: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.limit is not None and self.limit not in LIMITS:
            raise ValueError(f"`limit` must be None or one of {list(LIMITS)}, got {self.limit!r}")
        if (self.limit is not None) != (self.status in ("timeout", "killed")):
            raise ValueError(f"`limit` must be set exactly when status is timeout/killed, "
                             f"got status={self.status!r}, limit={self.limit!r}")


# Last stderr line of a Python program that died on a resource limit -> the limit. Python ignores
# SIGXFSZ and turns ENOMEM/EMFILE/EAGAIN into exceptions, so the limit shows up as the final exception.
_STDERR_LIMIT_MARKERS: tuple[tuple[str, str], ...] = (
    ("MemoryError", "memory"),
    ("[Errno 12]", "memory"),
    ("[Errno 27]", "file_size"),
    ("[Errno 24]", "open_files"),
    ("[Errno 11]", "processes"),
    ("can't start new thread", "processes"),
)


def limit_from_stderr(stderr: str) -> str | None:
    """The limit named by the last non-empty stderr line (a Python traceback's exception), if any."""
    for line in reversed(stderr.splitlines()):
        line = line.strip()
        if line:
            for marker, limit in _STDERR_LIMIT_MARKERS:
                if marker in line:
                    return limit
            return None
    return None


def classify_exit(
    *,
    kind: str,
    value: int,
    cpu_time: float | None,
    cpu_limit_s: int,
    stderr: str,
) -> tuple[str, str | None, int]:
    """Map how the program ended to ``(status, limit, returncode)``.

    ``kind`` is ``"exit"`` (``value`` = exit code) or ``"signal"`` (``value`` = signal number).
    SIGXCPU, or SIGKILL after at least ``cpu_limit_s`` CPU seconds (the hard RLIMIT_CPU), is the CPU
    limit; SIGXFSZ the file-size limit; a non-zero exit whose last stderr line is a resource exception
    is that limit; any other signal or non-zero exit is ``error``.
    """
    if kind == "signal":
        if value == signal.SIGXCPU or (
            value == signal.SIGKILL and cpu_time is not None and cpu_time >= cpu_limit_s - 0.05
        ):
            return "killed", "cpu_time", -value
        if value == signal.SIGXFSZ:
            return "killed", "file_size", -value
        return "error", None, -value
    if kind != "exit":
        raise ValueError(f"`kind` must be 'exit' or 'signal', got {kind!r}")
    if value == 0:
        return "ok", None, 0
    limit = limit_from_stderr(stderr)
    if limit is not None:
        return "killed", limit, value
    return "error", None, value
