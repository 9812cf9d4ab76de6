"""Env workers that run model-written Python under limits and isolation.

Usage::

    pool = SandboxPool(SandboxConfig(cpu_time_s=2, wall_time_s=5, memory_mb=256), max_workers=4)
    result = await pool.run("print(input()[::-1])", stdin="abc")   # or pool.run_sync(...)
    result.status, result.stdout, result.limit                     # "ok", "cba\n", None

What every run gets (Linux):

* a fresh process tree started by ``launcher.py`` in its own session; rlimits on CPU time, address
  space, file size, processes (RLIMIT_NPROC), open files, core size 0; ``no_new_privs``;
* when the trainer is root, an unprivileged uid: one dedicated uid per worker slot (``uid_base`` +
  slot, reserved across processes with ``flock`` under ``/run/pettingllms-sandbox``), gid of the same
  number, no supplementary groups; ``user="nobody"`` shares one account instead;
* namespaces where the kernel allows them: network (the host's network, loopback included, is out of
  reach; the run has its own loopback), pid (every process of the run, ``setsid()`` daemons included,
  dies with it), mount (host file systems read-only, one tmpfs of ``scratch_mb`` for the working
  directory, ``/tmp``, ``/var/tmp`` and ``/dev/shm``, a private ``/proc``), IPC and UTS. As non-root, a
  user namespace provides them. The pool probes them at start: ``network_isolated``, ``pid_isolated``,
  ``filesystem_isolated`` say what holds, ``isolation_notes`` why something does not, and a warning is
  logged; ``network_isolation="require"`` turns a missing network namespace into a start-up error;
* a per-run working directory (0700, owned by the sandbox uid, ``HOME``), removed afterwards; an
  environment of PATH, LANG/LC_ALL, HOME, TMPDIR, USER/LOGNAME only (plus ``extra_env``);
* a wall clock after which the run is killed (``timeout``), output capped per stream at
  ``max_output_bytes`` (more kills the run, ``limit="output"``), stdin fed from ``run(stdin=...)``.

Judging: ``await pool.run_tests(programs, [TestCase(stdin=..., expected_stdout=...) or
TestCase(assertion=...)], time_limit_s=...)`` returns a :class:`TestVerdict` per (program, test). Each
worker slot keeps a warm judge server (``warm.py``) that forks every program into fresh namespaces, files and
limits, and every test from there with fresh state; where the warm server cannot run (no root, no
namespaces, ``judge_server=False``) each program is one launch (see ``judge.py``).

After each run the pool kills anything left of a dedicated uid (and, without a mount namespace, deletes
that uid's files in ``/tmp``, ``/var/tmp``, ``/dev/shm``), so nothing outlives the call.

Statuses: ``ok`` exit 0; ``error`` non-zero exit or a crash signal; ``timeout`` wall clock; ``killed``
with ``limit`` in ``cpu_time`` (SIGXCPU, or SIGKILL at the hard limit), ``memory`` / ``file_size`` /
``open_files`` / ``processes`` (Python turns these limits into exceptions; the final exception line of
stderr names them), ``output``. A sandbox that cannot run the program raises :class:`SandboxError`, an
:class:`~pettingllms.agents.failures.InfrastructureError`.

Interpreter: the sandbox uid must be able to execute it. A Python under ``/root`` (pyenv's
``/root/.pyenv/...``, or a venv made from it) is unreachable once privileges are dropped; the default
then falls back to ``/usr/bin/python3`` with a warning, and an explicit ``python`` that the uid cannot
run fails the pool's start with an error naming the path. Point ``python`` at a world-readable
interpreter (``/usr/bin/python3``, or a venv under a world-readable folder) that has the packages the
programs need.

Limits of the design (say so where it matters):

* memory is limited per process (RLIMIT_AS), not per run: up to ``max_processes`` x ``memory_mb`` in
  the worst case. A cgroup would bound the total; it is not used because it needs a delegated cgroup
  tree.
* as non-root, programs run under the trainer's own uid (inside a user namespace): they can read the
  files the trainer can read. Run the trainer as root, or as a user without secrets on disk.
* without namespaces (old kernels, locked-down containers) the network is reachable, files written to
  other world-writable folders persist, and as non-root a daemon that calls ``setsid()`` outlives the
  run (as root the dedicated uid is swept).
"""

from pettingllms.sandbox.config import NETWORK_MODES, SandboxConfig
from pettingllms.sandbox.judge import (
    COMPARE_MODES,
    VERDICT_STATUSES,
    TestCase,
    TestVerdict,
    VerdictCache,
    compare_output,
    verdict_cache,
)
from pettingllms.sandbox.pool import SandboxPool
from pettingllms.sandbox.processes import kill_uid, pids_of_uid, remove_files_of_uid
from pettingllms.sandbox.result import LIMITS, ExecutionResult, SandboxError, classify_exit, limit_from_stderr

__all__ = [
    "COMPARE_MODES",
    "ExecutionResult",
    "LIMITS",
    "NETWORK_MODES",
    "SandboxConfig",
    "SandboxError",
    "SandboxPool",
    "TestCase",
    "TestVerdict",
    "VERDICT_STATUSES",
    "VerdictCache",
    "classify_exit",
    "compare_output",
    "kill_uid",
    "limit_from_stderr",
    "pids_of_uid",
    "remove_files_of_uid",
    "verdict_cache",
]
