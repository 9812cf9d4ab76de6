"""The contract between tool agents and env workers that execute code (the sandbox implements it).

A tool agent never runs model code itself: it hands the code to an env worker and reads back an
:class:`ExecutionResult`. What the *program* did (exit status, a timeout, a resource limit) is reported
in ``status`` and is the model's doing; a worker that cannot run the program at all (a crashed pool, a
sandbox that could not start) raises instead, which callers treat as an infrastructure failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: ``ok``: exited 0; ``error``: exited non-zero or raised; ``timeout``: the wall-clock limit killed it;
#: ``killed``: a resource limit (CPU time, memory, file size, processes, open files) or a signal killed it.
EXECUTION_STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "killed")


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of one program run.

    ``status`` is one of :data:`EXECUTION_STATUSES`; ``stdout`` / ``stderr`` are the (capped) decoded
    streams; ``duration`` is the wall-clock time of the run in seconds.
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in EXECUTION_STATUSES:
            raise ValueError(f"`status` must be one of {list(EXECUTION_STATUSES)}, got {self.status!r}")
        if not self.duration >= 0.0:  # also rejects NaN
            raise ValueError(f"`duration` must be >= 0, got {self.duration}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@runtime_checkable
class CodeRunner(Protocol):
    """An env worker that runs a Python program.

    ``run`` executes ``code`` with ``stdin`` as its standard input and returns an
    :class:`ExecutionResult`. ``timeout`` (seconds) overrides the worker's default wall-clock limit
    when given. It raises only when the program could not be run at all.
    """

    async def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult: ...
