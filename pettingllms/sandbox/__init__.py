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
* namespaces: network (the host's network, loopback and abstract unix sockets included, is out of
  reach; the run has its own loopback), pid (every process of the run, ``setsid()`` daemons included,
  dies with it), mount, IPC and UTS. As non-root, a user namespace provides them. The mount namespace
  gives the run its own file-system view (``rootfs.py``): a fresh read-only root holding only ``/usr``,
  ``/etc``, ``/bin``/``/sbin``/``/lib*`` and the interpreter's own folders (read-only binds), a
  ``/dev`` of ``null``/``zero``/``full``/``random``/``urandom``, a private ``/proc``, and one tmpfs
  of ``scratch_mb`` for the working directory, ``/tmp``, ``/var/tmp`` and ``/dev/shm``. No ``/run``,
  ``/var/run``, ``/var/lib``, ``/dev/log``, ``/sys``, ``/home`` or ``/root``: no host unix socket
  (D-Bus, journald, a database's) can be connected to, which a read-only bind would not prevent;
* the pool probes the namespaces at start. With ``isolation="strict"`` (the default) it refuses to
  start when the kernel refuses one (:class:`SandboxError` naming it and how to opt in);
  ``isolation="best_effort"`` runs with what holds, logs a warning and says what is missing in
  ``isolation_notes``; ``network_isolated``, ``pid_isolated``, ``filesystem_isolated`` say what holds.
  ``network_isolation="require"`` refuses a missing network namespace under either mode; ``"off"``
  disables them all on purpose;
* a memory cgroup per run where one can be made (root, or a delegated cgroup; v1 or v2, see
  ``cgroup.py``): ``memory_mb`` then bounds the run as a whole (all its processes and its tmpfs files),
  and an OOM kill reads ``status="killed", limit="memory"``; ``memory_per_run`` says whether it holds.
  Elsewhere memory is limited per process only, and ``isolation_notes`` says so;
* a per-run working directory (0700, owned by the sandbox uid, ``HOME``), removed afterwards; an
  environment of PATH, LANG/LC_ALL, HOME, TMPDIR, USER/LOGNAME only (plus ``extra_env``): nothing of
  the trainer's, so no ``DBUS_SESSION_BUS_ADDRESS``, ``XDG_RUNTIME_DIR`` or ``SSH_AUTH_SOCK``;
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

* without a memory cgroup (non-root without a delegated cgroup, ``memory_scope="process"``) memory
  is limited per process (RLIMIT_AS), not per run: up to ``max_processes`` x ``memory_mb`` in the worst
  case. With one, RLIMIT_AS still bounds each process as well.
* a unix socket file inside one of the folders the view binds (the system folders, the interpreter's
  prefix and ``sys.path``) stays reachable; by convention none is there (sockets live in ``/run`` and
  ``/tmp``).
* as non-root, programs run under the trainer's own uid (inside a user namespace): in the folders the
  view shows (``/etc``, ``/usr``, the interpreter's) they can read what the trainer can read. Run the
  trainer as root, or keep its secrets out of those folders.
* under ``isolation="best_effort"`` without namespaces (old kernels, locked-down containers) the
  network and the host's unix sockets are reachable, files written to other world-writable folders
  persist, and as non-root a daemon that calls ``setsid()`` outlives the run (as root the dedicated uid
  is swept).
"""

from pettingllms.sandbox.config import ISOLATION_MODES, MEMORY_SCOPES, NETWORK_MODES, SandboxConfig
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
    "ISOLATION_MODES",
    "LIMITS",
    "MEMORY_SCOPES",
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
