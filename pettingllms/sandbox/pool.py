"""A bounded pool of sandboxed Python runs (:class:`SandboxPool`), the env workers of tool agents.

Every run is a fresh process tree started through ``launcher.py`` (see its docstring for the three
processes and the namespaces). The pool owns: the reserved sandbox uids (one per worker slot, held
with ``flock`` so two pools on one machine never share one), the per-run working directories, each
run's file-system view (``rootfs.py``) and memory cgroup (``cgroup.py``), the wall clock, the output
caps and the clean-up after each run.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import concurrent.futures
import errno
import fcntl
import functools
import logging
import marshal
import math
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass

from pettingllms.sandbox.cgroup import MemoryCgroup, find_memory_cgroup
from pettingllms.sandbox.config import SandboxConfig
from pettingllms.sandbox.judge import harness_source
from pettingllms.sandbox.judge import run_tests as judge_programs
from pettingllms.sandbox.processes import kill_uid, remove_files_of_uid
from pettingllms.sandbox.result import ExecutionResult, SandboxError, classify_exit
from pettingllms.sandbox.rootfs import interpreter_paths, view_plan
from pettingllms.sandbox.warm import SERVER_BOOTSTRAP, WarmServer

logger = logging.getLogger(__name__)

LAUNCHER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
CODE_FILE = "main.py"
FALLBACK_PYTHON = "/usr/bin/python3"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Seconds to wait for a killed run's pipes to close before declaring the sandbox broken.
KILL_GRACE_S = 5.0
# Seconds the pipes may stay open after the launcher exited before their holders are killed.
STREAM_GRACE_S = 0.2
# Set-up stages whose failure means "these namespaces are not available here", not "bad interpreter".
_NAMESPACE_STAGES = ("unshare", "mount", "view", "init", "launcher")
_NAMESPACE_NAMES = ("user", "net", "pid", "mount", "ipc", "uts")
# File-system view plans per (interpreter, options): asking the interpreter costs a process start.
_VIEW_PLANS: dict[tuple[str, tuple[str, ...]], dict] = {}


def _source(path: str) -> str:
    """The text of one of the sandbox's own scripts (read once)."""
    if path not in _SOURCES:
        with open(path, encoding="utf-8") as f:
            _SOURCES[path] = f.read()
    return _SOURCES[path]


_SOURCES: dict[str, str] = {}


@dataclass(frozen=True)
class _Identity:
    uid: int
    gid: int
    dedicated: bool  # reserved for this pool alone: leftovers of this uid may be killed / deleted


def _namespace_tiers(mode: str, as_root: bool) -> list[dict[str, bool]]:
    """Namespace sets to try, strongest first ("off" -> none at all)."""
    none = {"user": False, "net": False, "pid": False, "mount": False, "ipc": False, "uts": False}
    if mode == "off":
        return [none]
    user = not as_root  # unprivileged: a user namespace grants the capabilities for the others
    full = {"user": user, "net": True, "pid": True, "mount": True, "ipc": True, "uts": True}
    no_mount = dict(full, mount=False)
    return [full, no_mount, none]


class _Capture:
    """Keeps the first ``cap`` bytes of a stream and notes whether more arrived."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> bool:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.data += chunk[:max(room, 0)]
            self.truncated = True
        else:
            self.data += chunk
        return self.truncated

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _unreachable(path: str) -> str | None:
    """Why another user cannot reach ``path``'s file, where a folder on the way (a symlink followed) bars them;
    else None. The launcher would only report "No such file": the sandbox view binds what it may read."""
    real = os.path.realpath(path)
    parts = os.path.dirname(real).split(os.sep)[1:]
    for folder in (os.sep + os.sep.join(parts[:depth]) for depth in range(1, len(parts) + 1)):
        try:
            mode = os.stat(folder).st_mode
        except OSError:  # a missing folder: the launcher's own reason says so
            return None
        if not mode & 0o001:  # no search (x) bit for others
            link = f"a symlink to {real}, " if real != os.path.abspath(path) else ""
            return f"{link}inside {folder}, which other users cannot enter (mode {mode & 0o777:o})"
    return None


def _view_plan(python: str, python_args: tuple[str, ...]) -> dict:
    """The file-system view a run of ``python`` gets (see ``rootfs.py``); cached per process."""
    key = (python, tuple(python_args))
    if key not in _VIEW_PLANS:
        try:
            paths = interpreter_paths(python, python_args)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            # It cannot run even here: the probe through the launcher then names the path.
            return view_plan([python])
        _VIEW_PLANS[key] = view_plan(paths)
    return _VIEW_PLANS[key]


def _cleanup_pool(work_root: str, lock_fds: list[int], servers: dict, executors: list,
                  cgroups: list[MemoryCgroup]) -> None:
    for server in list(servers.values()):  # before the uids are released: nothing of theirs survives
        try:
            server.stop()
        except SandboxError as exc:
            logger.error("sandbox: stopping a judge server: %s", exc)
    servers.clear()
    for cgroup in cgroups:  # after the servers: their cgroups hold no process any more
        cgroup.close()
    cgroups.clear()
    for executor in executors:
        executor.shutdown(wait=False, cancel_futures=True)
    shutil.rmtree(work_root, ignore_errors=True)
    for fd in lock_fds:
        try:
            os.close(fd)  # releases the uid's flock
        except OSError:
            pass


def _retrieve(future: asyncio.Future) -> None:
    """Mark a background future's outcome as seen (its cancellation is expected, not an error)."""
    if not future.cancelled():
        future.exception()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_status(fd: int) -> list[dict]:
    """All records the launcher wrote (non-blocking: the writers are gone or never write again)."""
    os.set_blocking(fd, False)
    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    records = []
    for line in data.decode(errors="replace").splitlines():
        try:  # the launcher writes ``repr`` of plain dicts (it does not import json: see there)
            record = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class SandboxPool:
    """Runs untrusted Python programs with limits, at most ``max_workers`` at a time.

    Construction checks the machine (namespaces, the sandbox uid's access to the interpreter) and raises
    :class:`SandboxError` when programs cannot be run as configured. ``run`` returns an
    :class:`ExecutionResult` for anything the program does and raises :class:`SandboxError` only when
    the sandbox itself fails. Use as a (async) context manager or call :meth:`close`.
    """

    def __init__(self, config: SandboxConfig | None = None, max_workers: int = 4) -> None:
        if not (isinstance(max_workers, int) and max_workers >= 1):
            raise ValueError(f"`max_workers` must be an integer >= 1, got {max_workers!r}")
        self.config = config if config is not None else SandboxConfig()
        self.max_workers = max_workers
        self.as_root = os.geteuid() == 0
        self.counts: dict[str, int] = {"ok": 0, "error": 0, "timeout": 0, "killed": 0, "sandbox_error": 0}
        self._lock = threading.Lock()
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock_fds: list[int] = []
        self._reported_warnings: set[str] = set()
        self._servers: dict[int, WarmServer] = {}  # the judge's warm server of each slot, when started
        self._executors: list[concurrent.futures.ThreadPoolExecutor] = []
        self._cgroups: list[MemoryCgroup] = []  # the pool's memory cgroup, when it has one
        work_parent = self.config.work_root or tempfile.gettempdir()
        self._work_root = tempfile.mkdtemp(prefix="pettingllms-sandbox-", dir=work_parent)
        os.chmod(self._work_root, 0o711)  # sandbox uids may traverse to their own run folder only
        self._finalizer = weakref.finalize(self, _cleanup_pool, self._work_root, self._lock_fds,
                                           self._servers, self._executors, self._cgroups)
        try:
            self._identities = self._reserve_identities()
            self._free_slots = list(range(max_workers))
            self._namespaces, self.isolation_notes = self._choose_namespaces()
            self.python = self._choose_python()
            self._choose_memory_cgroup()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- properties
    @property
    def network_isolated(self) -> bool:
        """Programs run in their own network namespace (the host's network, loopback included, is out
        of reach)."""
        return self._namespaces["net"]

    @property
    def pid_isolated(self) -> bool:
        """Programs run in their own pid namespace (every process they start dies with the run)."""
        return self._namespaces["pid"]

    @property
    def filesystem_isolated(self) -> bool:
        """Programs see read-only host file systems and a private, size-capped scratch tmpfs."""
        return self._namespaces["mount"]

    @property
    def memory_per_run(self) -> bool:
        """``memory_mb`` bounds each run as a whole (a memory cgroup per run), not only each process."""
        return bool(self._cgroups)

    @property
    def warm_judge(self) -> bool:
        """``run_tests`` judges through a warm server per worker slot (one launch per slot, a fork per
        program) rather than one launch per program. Only where that keeps every protection of a
        launch: as root with a dedicated uid per slot and pid + mount namespaces (``judge_server``)."""
        return (self.config.judge_server and self.as_root and self._namespaces["pid"]
                and self._namespaces["mount"] and all(i is not None and i.dedicated
                                                      for i in self._identities))

    @property
    def work_root(self) -> str:
        """Folder holding the per-run working directories (each removed after its run)."""
        return self._work_root

    @property
    def uids(self) -> list[int]:
        """The uids programs run under (one per worker slot)."""
        if self._identities[0] is None:
            return [os.getuid()] * self.max_workers
        return [ident.uid for ident in self._identities]

    # ----------------------------------------------------------------- start-up
    def _reserve_identities(self) -> list[_Identity | None]:
        cfg = self.config
        if not self.as_root:
            return [None] * self.max_workers
        if cfg.user is not None:
            try:
                entry = pwd.getpwnam(cfg.user) if isinstance(cfg.user, str) else pwd.getpwuid(cfg.user)
                uid, gid = entry.pw_uid, entry.pw_gid
            except KeyError:
                if isinstance(cfg.user, str):
                    raise SandboxError(f"`user` {cfg.user!r} is not an account on this machine") from None
                uid = gid = cfg.user
            if uid == 0:
                raise SandboxError(f"`user` {cfg.user!r} is root; the sandbox needs an unprivileged user")
            return [_Identity(uid, gid, dedicated=False)] * self.max_workers
        lock_dir = "/run/pettingllms-sandbox" if os.path.isdir("/run") else os.path.join(
            tempfile.gettempdir(), "pettingllms-sandbox-uids")
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)
        st = os.lstat(lock_dir)
        if st.st_uid != 0 or st.st_mode & 0o022 or not os.path.isdir(lock_dir):
            raise SandboxError(f"uid lock folder {lock_dir!r} must be a root-owned folder not writable by "
                               f"others")
        identities: list[_Identity | None] = []
        for uid in range(cfg.uid_base, cfg.uid_base + cfg.uid_count):
            if len(identities) == self.max_workers:
                break
            try:
                account = pwd.getpwuid(uid).pw_name
                logger.warning("sandbox: skipping uid %d, it belongs to the account %r", uid, account)
                continue
            except KeyError:
                pass
            fd = os.open(os.path.join(lock_dir, f"uid-{uid}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue  # another pool holds it
                raise
            self._lock_fds.append(fd)
            kill_uid(uid)  # leftovers of a pool that died: nobody else may use a free dedicated uid
            remove_files_of_uid(uid)
            identities.append(_Identity(uid, uid, dedicated=True))
        if len(identities) < self.max_workers:
            raise SandboxError(f"only {len(identities)} free sandbox uids in [{cfg.uid_base}, "
                               f"{cfg.uid_base + cfg.uid_count}), need max_workers={self.max_workers}; "
                               f"raise `uid_count` or change `uid_base`")
        return identities

    def _probe(self, python: str, namespaces: dict[str, bool], cgroup: str | None = None
               ) -> tuple[dict | None, str]:
        """Run ``python -c pass`` through the full launch path; returns (final record, stderr)."""
        workdir = tempfile.mkdtemp(prefix="probe-", dir=self._work_root)
        identity = self._identities[0]
        status_r, status_w = os.pipe()
        try:
            self._prepare_workdir(workdir, "", identity)
            spec = self._spec(workdir, identity, namespaces, [python, "-c", "pass"], status_w)
            spec["cgroup"] = cgroup
            try:
                proc = subprocess.run(self._launcher_argv(spec), stdin=subprocess.DEVNULL,
                                      capture_output=True, pass_fds=(status_w,), start_new_session=True,
                                      env={"PATH": SANDBOX_PATH}, cwd=self._work_root, timeout=60)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxError(f"could not start the sandbox launcher with {sys.executable!r}: "
                                   f"{exc}") from exc
            os.close(status_w)
            status_w = -1
            records = _read_status(status_r)
            final = next((r for r in reversed(records) if r.get("kind") != "warning"), None)
            self._log_warnings(records)
            return final, proc.stderr.decode(errors="replace")
        finally:
            os.close(status_r)
            if status_w >= 0:
                os.close(status_w)
            shutil.rmtree(workdir, ignore_errors=True)
            if identity is not None and identity.dedicated:
                kill_uid(identity.uid)

    def _choose_namespaces(self) -> tuple[dict[str, bool], list[str]]:
        cfg = self.config
        notes: list[str] = []
        probe_python = cfg.python or sys.executable
        tiers = _namespace_tiers(cfg.network_isolation, self.as_root)
        for tier in tiers:
            final, _ = self._probe(probe_python, tier)
            if final is not None and final.get("kind") == "setup_error" \
                    and final.get("stage") in _NAMESPACE_STAGES:
                notes.append(f"{sorted(k for k, v in tier.items() if v)}: {final['stage']}: "
                             f"{final['message']}")
                continue
            break
        else:
            raise SandboxError("the sandbox launcher fails even without namespaces: " + "; ".join(notes))
        if cfg.network_isolation == "require" and not tier["net"]:
            raise SandboxError("network_isolation='require' but network namespaces are unavailable here: "
                               + "; ".join(notes))
        lost = [k for k in _NAMESPACE_NAMES if tiers[0][k] and not tier[k]]
        if lost and cfg.isolation == "strict":
            raise SandboxError(
                f"the kernel refused the {', '.join(lost)} namespace(s) that SandboxConfig.isolation="
                f"'strict' requires ({'; '.join(notes)}). Allow them (as root, or enable unprivileged "
                f"user namespaces: sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces), "
                f"or opt in to weaker isolation with SandboxConfig(isolation='best_effort') (it runs "
                f"without them and lists what is missing in pool.isolation_notes)")
        if notes:
            lost = [k for k in ("net", "pid", "mount") if tiers[0][k] and not tier[k]]
            logger.warning("sandbox: running WITHOUT %s namespace(s) (the kernel refused them): %s",
                           ", ".join(lost), "; ".join(notes))
        if cfg.network_isolation == "off":
            notes.append("namespaces disabled by network_isolation='off'")
            logger.warning("sandbox: network isolation is off; sandboxed programs can reach the network")
        return tier, notes

    def _choose_memory_cgroup(self) -> None:
        """A memory cgroup for the runs (``memory_scope`` auto/run), checked with one launch; else the
        per-process limit alone, said in ``isolation_notes`` (or an error for ``memory_scope="run"``)."""
        cfg = self.config
        if cfg.memory_scope == "process":
            self.isolation_notes.append("memory is limited per process (RLIMIT_AS) only: "
                                        "memory_scope='process'")
            return
        cgroup, why = find_memory_cgroup()
        if cgroup is not None:
            try:
                run = cgroup.create(cfg.memory_mb << 20, name="probe")
                try:
                    final, stderr = self._probe(self.python, self._namespaces, cgroup=run)
                finally:
                    cgroup.remove(run)
            except BaseException:
                cgroup.close()
                raise
            if final is not None and final.get("kind") == "exit" and final.get("code") == 0:
                self._cgroups.append(cgroup)
                return
            cgroup.close()
            why = (f"a run cannot join {cgroup.path}: "
                   + (f"{final.get('stage')}: {final.get('message')}" if final else stderr[-300:]))
        if cfg.memory_scope == "run":
            raise SandboxError(f"SandboxConfig.memory_scope='run' needs a memory cgroup, and none can be "
                               f"made here ({why}). Run the trainer as root or in a delegated cgroup (see "
                               f"the sandbox docs), or set memory_scope='auto' for a per-process limit")
        note = f"memory is limited per process (RLIMIT_AS), not per run: no memory cgroup ({why})"
        self.isolation_notes.append(note)
        logger.warning("sandbox: %s", note)

    def _choose_python(self) -> str:
        cfg = self.config
        who = "the trainer's uid" if self._identities[0] is None else f"sandbox uid {self.uids[0]}"
        if cfg.python is not None:
            candidates = [cfg.python]
        else:
            candidates = [sys.executable]
            if self.as_root and os.path.realpath(sys.executable) != os.path.realpath(FALLBACK_PYTHON) \
                    and os.path.exists(FALLBACK_PYTHON):
                candidates.append(FALLBACK_PYTHON)
        reasons = []
        for python in candidates:
            final, stderr = self._probe(python, self._namespaces)
            if final is not None and final.get("kind") == "exit" and final.get("code") == 0:
                if python != candidates[0]:
                    logger.warning("sandbox: %s cannot run %r (%s); using %r", who, candidates[0],
                                   _unreachable(candidates[0]) or reasons[0], python)
                return python
            if final is None:
                reason = f"no status from the launcher; stderr: {stderr[-500:]!r}"
            elif final.get("kind") == "setup_error":
                reason = f"{final.get('stage')}: {final.get('message')}"
            else:
                reason = f"`{python} -c pass` ended with {final}"
            reasons.append(reason)
        hidden = (" (the sandbox's /tmp is its own scratch: an interpreter under /tmp is out of its sight)"
                  if self._namespaces["mount"] and candidates[0].startswith("/tmp/") else "")
        raise SandboxError(
            f"{who} cannot execute the interpreter {candidates[0]!r} ({_unreachable(candidates[0]) or reasons[0]}){hidden}"
            + (f"; fallback {candidates[1]!r} failed too ({reasons[1]})" if len(candidates) > 1 else "")
            + ". Set SandboxConfig.python to an interpreter every user can read and execute, e.g. "
            "/usr/bin/python3 (a Python under /root, such as pyenv's, is unreachable to other users)."
        )

    # ----------------------------------------------------------------- one run
    def _launcher_argv(self, spec: dict) -> list[str]:
        return [sys.executable, "-I", "-S", LAUNCHER_PATH, marshal.dumps(spec).hex()]

    def _rlimits(self) -> dict[str, list[int]]:
        cfg = self.config
        cpu = max(1, math.ceil(cfg.cpu_time_s))
        return {
            "CPU": [cpu, cpu + 1],
            "AS": [cfg.memory_mb << 20] * 2,
            "FSIZE": [cfg.file_size_mb << 20] * 2,
            "NPROC": [cfg.max_processes] * 2,
            "NOFILE": [cfg.max_open_files] * 2,
            "CORE": [0, 0],
        }

    def _spec(self, workdir: str, identity: _Identity | None, namespaces: dict[str, bool],
              argv: list[str], status_fd: int) -> dict:
        env = {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir,
               "TMPDIR": "/tmp", "USER": "sandbox", "LOGNAME": "sandbox", "PYTHONIOENCODING": "utf-8",
               "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(self.config.extra_env)
        return {
            "workdir": workdir,
            "code_file": CODE_FILE,
            "argv": argv,
            "env": env,
            "uid": None if identity is None else identity.uid,
            "gid": None if identity is None else identity.gid,
            "rlimits": self._rlimits(),
            "namespaces": namespaces,
            "scratch_mb": self.config.scratch_mb,
            "readonly_root": self.config.readonly_root,
            # Without a pid namespace, init kills and reaps what is left of a dedicated uid.
            "sweep_uid": identity.uid if identity is not None and identity.dedicated else None,
            "status_fd": status_fd,
            # The run's own root: the system folders and those of its interpreter, argv[0].
            "view": _view_plan(argv[0], self.config.python_args) if namespaces["mount"] else None,
            "cgroup": None,  # set per run by the caller (memory cgroup folder)
        }

    @staticmethod
    def _prepare_workdir(workdir: str, code: str, identity: _Identity | None) -> None:
        path = os.path.join(workdir, CODE_FILE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(code)
        os.chmod(workdir, 0o700)
        if identity is not None:
            os.chown(path, identity.uid, identity.gid)
            os.chown(workdir, identity.uid, identity.gid)

    def _log_warnings(self, records: list[dict]) -> None:
        for record in records:
            if record.get("kind") == "warning":
                key = f"{record.get('stage')}: {record.get('message')}"
                if key not in self._reported_warnings:
                    self._reported_warnings.add(key)
                    logger.warning("sandbox set-up: %s", key)

    def _stop(self, launcher_pid: int, identity: _Identity | None) -> None:
        """Start stopping a run early (wall clock, output cap, cancellation).

        With a pid namespace, SIGTERM asks the launcher to SIGKILL the namespace's init and wait until
        the kernel has killed every process in it, so that when the launcher exits nothing of the run is
        left (killing the launcher at once would let the namespace die after the call returned).
        Without one, the dedicated uid's processes are killed while init still lives to reap them (a
        zombie re-parented to the host's init could linger and count against the uid's process limit).
        """
        if self.pid_isolated:
            try:
                os.kill(launcher_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        elif identity is not None and identity.dedicated:
            kill_uid(identity.uid)

    def _after_run(self, pgid: int | None, identity: _Identity | None) -> None:
        """Kill whatever the run left (its process group; all of a dedicated uid) and stray files."""
        if pgid is not None:
            _kill_group(pgid)
        if identity is not None and identity.dedicated:
            try:
                kill_uid(identity.uid)
            except TimeoutError as exc:
                raise SandboxError(str(exc)) from exc
            if not self.filesystem_isolated:
                remove_files_of_uid(identity.uid)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._semaphores.get(loop)
            if sem is None:
                sem = self._semaphores[loop] = asyncio.Semaphore(self.max_workers)
            return sem

    async def _take_slot(self) -> int:
        while True:  # waits only when several event loops share the pool
            with self._lock:
                if self._free_slots:
                    return self._free_slots.pop()
            await asyncio.sleep(0.005)

    async def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult:
        """Run ``code`` (a Python program) with ``stdin``; ``timeout`` overrides ``wall_time_s``."""
        if not isinstance(code, str):
            raise TypeError(f"`code` must be str, got {type(code).__name__}")
        if not isinstance(stdin, str):
            raise TypeError(f"`stdin` must be str, got {type(stdin).__name__}")
        wall = self.config.wall_time_s if timeout is None else timeout
        if not (isinstance(wall, (int, float)) and wall > 0 and math.isfinite(wall)):
            raise ValueError(f"`timeout` must be a finite number > 0, got {timeout!r}")
        if not self._finalizer.alive:
            raise SandboxError("the sandbox pool is closed")
        async with self._semaphore():
            slot = await self._take_slot()
            try:
                result = await self._run_in_slot(slot, code, stdin, float(wall))
            except SandboxError:
                self.counts["sandbox_error"] += 1
                raise
            finally:
                with self._lock:
                    self._free_slots.append(slot)
        self.counts[result.status] += 1
        return result

    async def run_harness(self, harness: str, payload: str, timeout: float) -> ExecutionResult:
        """Run the judge's harness on ``payload`` (its stdin): through the slot's warm server when
        :attr:`warm_judge`, else as :meth:`run` of the harness source. Counted in ``counts`` as a run."""
        if not self.warm_judge:
            return await self.run(harness, stdin=payload, timeout=timeout)
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"`timeout` must be a finite number > 0, got {timeout!r}")
        if not self._finalizer.alive:
            raise SandboxError("the sandbox pool is closed")
        data = payload.encode("utf-8")
        loop = asyncio.get_running_loop()
        async with self._semaphore():
            slot = await self._take_slot()
            future = loop.run_in_executor(self._executor(), self._warm_run, slot, data, float(timeout))
            try:
                result = await asyncio.shield(future)
            except asyncio.CancelledError:
                server = self._servers.get(slot)
                if server is not None:  # its pipes then end and the thread returns at once
                    server.stop()
                await asyncio.wait({future}, timeout=2 * KILL_GRACE_S)
                raise
            except SandboxError:
                self.counts["sandbox_error"] += 1
                raise
            finally:
                if future.done():
                    with self._lock:
                        self._free_slots.append(slot)
                else:  # never hand out a slot whose thread still talks to its server
                    logger.error("sandbox: slot %d's judge thread did not finish; slot retired", slot)
        self.counts[result.status] += 1
        return result

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if not self._executors:
                self._executors.append(concurrent.futures.ThreadPoolExecutor(
                    self.max_workers, thread_name_prefix="sandbox-judge"))
            return self._executors[0]

    def _start_server(self, slot: int) -> WarmServer:
        identity = self._identities[slot]
        workdir = os.path.join(self._work_root, f"slot-{slot}")
        if not (workdir.startswith("/tmp/")):  # the launcher binds the scratch there: it must exist
            os.makedirs(workdir, mode=0o700, exist_ok=True)
        status_r, status_w = os.pipe()
        # The server gets its own code and the launcher's as text on stdin, not as paths: the sandbox may not
        # see the checkout (one under /tmp is hidden by the sandbox's fresh /tmp).
        spec = self._spec(workdir, identity, self._namespaces,
                          [self.python, *self.config.python_args, "-c", SERVER_BOOTSTRAP, "--serve"], status_w)
        spec.update(server=True, code_file=None)
        # One cgroup for the slot's programs, one after the other (none is alive when the next starts).
        cgroup = spec["cgroup"] = self._new_cgroup(name=f"slot-{slot}-{time.monotonic_ns()}")
        server_spec = {**spec, "launcher_source": _source(LAUNCHER_PATH)}
        try:
            server = WarmServer(self._launcher_argv(spec), harness_source().encode(), server_spec, status_r,
                                status_w, self._work_root, {"PATH": SANDBOX_PATH}, identity.uid, _read_status)
        except BaseException:
            self._drop_cgroup(cgroup)
            raise
        if cgroup is not None:
            server.cgroup = cgroup
            # Not a method of the pool: the pool's finalizer holds the servers, which must not hold it.
            server.on_stop = functools.partial(MemoryCgroup.remove, cgroup)
        return server

    def _warm_run(self, slot: int, payload: bytes, wall: float) -> ExecutionResult:
        """In a pool thread: one payload through the slot's warm server (started when missing)."""
        server = self._servers.get(slot)
        if server is None or not server.alive:
            if server is not None:
                server.stop()
            server = self._servers[slot] = self._start_server(slot)
        cap = self.config.max_output_bytes
        cgroup = server.cgroup
        ooms = self._cgroups[0].oom_kills(cgroup) if cgroup is not None else 0
        start = time.monotonic()
        try:
            stdout, record, ended_by = server.call(payload, wall, cap)
            oom = cgroup is not None and self._cgroups[0].oom_kills(cgroup) > ooms
        finally:
            if not server.alive:
                self._servers.pop(slot, None)
        duration = time.monotonic() - start
        out, err = _Capture(cap), _Capture(cap)
        if out.add(stdout) and ended_by is None:
            ended_by = "output"
        records = []
        if record is not None:
            err.add(base64.b64decode(record.get("stderr", "")))
            if record.get("stderr_bytes", 0) > len(err.data):
                err.truncated = True
            final = {"kind": record["kind"], "cpu": record.get("cpu")}
            final["code" if record["kind"] == "exit" else "signal"] = record["code"]
            records.append(final)
        return self._result(records, ended_by, out, err, duration, None, oom)

    async def run_tests(self, programs: list[str], tests: list, **options) -> list[list]:
        """Judge programs x tests in one batch (see :func:`pettingllms.sandbox.judge.run_tests`)."""
        return await judge_programs(self, programs, tests, **options)

    def run_sync(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecutionResult:
        """:meth:`run` for synchronous callers (not from inside a running event loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(code, stdin, timeout))
        raise RuntimeError("SandboxPool.run_sync was called inside a running event loop; await run()")

    def _new_cgroup(self, name: str | None = None) -> str | None:
        """A fresh memory cgroup limited to ``memory_mb`` for one run or server (None without one)."""
        if not self._cgroups:
            return None
        try:
            return self._cgroups[0].create(self.config.memory_mb << 20, name=name)
        except OSError as exc:
            raise SandboxError(f"cannot create a memory cgroup under {self._cgroups[0].path}: {exc}") from exc

    def _drop_cgroup(self, path: str | None) -> None:
        if path is not None and not MemoryCgroup.remove(path):  # a static method: safe after close()
            logger.error("sandbox: the memory cgroup %s could not be removed", path)

    async def _run_in_slot(self, slot: int, code: str, stdin: str, wall: float) -> ExecutionResult:
        identity = self._identities[slot]
        workdir = tempfile.mkdtemp(prefix="run-", dir=self._work_root)
        status_r, status_w = os.pipe()
        pgid = None
        proc = None
        cgroup = None
        try:
            self._prepare_workdir(workdir, code, identity)
            spec = self._spec(workdir, identity, self._namespaces, [self.python, *self.config.python_args,
                                                                     os.path.join(workdir, CODE_FILE)],
                              status_w)
            cgroup = spec["cgroup"] = self._new_cgroup()
            start = time.monotonic()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self._launcher_argv(spec), stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, pass_fds=(status_w,),
                    start_new_session=True, env={"PATH": SANDBOX_PATH}, cwd=self._work_root)
            except OSError as exc:
                raise SandboxError(f"could not start the sandbox launcher: {exc}") from exc
            finally:
                os.close(status_w)
                status_w = -1
            pgid = proc.pid  # start_new_session: the launcher leads its own session and group
            ended_by, out, err = await self._supervise(proc, stdin.encode("utf-8"), wall, identity)
            duration = time.monotonic() - start
            self._after_run(pgid, identity)
            pgid = None
            records = _read_status(status_r)
            self._log_warnings(records)
            oom = cgroup is not None and self._cgroups[0].oom_kills(cgroup) > 0
            return self._result(records, ended_by, out, err, duration, proc.returncode, oom)
        finally:
            if pgid is not None:  # cancelled or failed mid-run: never leave the tree running
                self._stop(pgid, identity)
                if not self.pid_isolated:
                    _kill_group(pgid)
                if identity is not None and identity.dedicated:
                    try:
                        kill_uid(identity.uid)
                    except TimeoutError:
                        logger.error("sandbox: processes of uid %d survive SIGKILL", identity.uid)
                if proc is not None and proc.returncode is None:
                    try:  # reap the launcher so that its transport closes with the loop
                        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
                    except BaseException:  # noqa: BLE001 - a second cancellation or a dead loop
                        _kill_group(pgid)
            os.close(status_r)
            if status_w >= 0:
                os.close(status_w)
            shutil.rmtree(workdir, ignore_errors=True)
            self._drop_cgroup(cgroup)

    async def _supervise(self, proc: asyncio.subprocess.Process, stdin: bytes, wall: float,
                         identity: _Identity | None) -> tuple[str | None, _Capture, _Capture]:
        """Feed stdin, capture output, enforce the wall clock and output caps.

        Returns (what the pool killed the run for: ``"wall_time"``, ``"output"`` or ``None``, stdout,
        stderr)."""
        cap = self.config.max_output_bytes
        out, err = _Capture(cap), _Capture(cap)
        over_cap = asyncio.Event()

        async def drain(stream: asyncio.StreamReader, sink: _Capture) -> None:
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                if sink.add(chunk):
                    over_cap.set()

        async def feed(writer: asyncio.StreamWriter) -> None:
            try:
                if stdin:
                    writer.write(stdin)
                    await writer.drain()
                writer.close()
                await writer.wait_closed()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the program exited without reading all of its input

        async def finished() -> int:
            streams = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err), feed(proc.stdin))
            streams.add_done_callback(_retrieve)
            try:
                # Not ``proc.wait()``: in Python 3.11 it returns only once every pipe is closed, which a
                # process that escaped the run (no pid namespace) could postpone for ever.
                while proc.returncode is None:
                    await asyncio.sleep(0.005)
                code = proc.returncode
                try:
                    await asyncio.wait_for(asyncio.shield(streams), STREAM_GRACE_S)
                except asyncio.TimeoutError:
                    # The program has ended but something it started still holds its pipes (possible
                    # only without a pid namespace): kill it so that the streams close.
                    self._after_run(proc.pid, identity)
                    try:
                        await asyncio.wait_for(asyncio.shield(streams), STREAM_GRACE_S)
                    except asyncio.TimeoutError:
                        # Only as non-root without namespaces: it left the group and has our own uid.
                        logger.error("sandbox: a process of the run outlives it and holds its output "
                                     "pipes (no pid namespace and no dedicated uid to sweep); output cut off")
                        proc._transport.close()  # noqa: SLF001 - stop reading pipes nobody will close
                return code
            finally:
                if not streams.done():
                    streams.cancel()

        main = asyncio.ensure_future(finished())
        cap_hit = asyncio.ensure_future(over_cap.wait())
        try:
            done, _ = await asyncio.wait({main, cap_hit}, timeout=wall, return_when=asyncio.FIRST_COMPLETED)
            ended_by = None
            if main not in done:
                ended_by = "output" if over_cap.is_set() else "wall_time"
                self._stop(proc.pid, identity)
                # The launcher exits once the run's processes are gone; the group kill is the backstop.
                await asyncio.wait({main}, timeout=1.0)
                self._after_run(proc.pid, identity)
                try:
                    await asyncio.wait_for(main, KILL_GRACE_S)
                except asyncio.TimeoutError:
                    raise SandboxError(f"a killed sandbox run still holds its pipes after {KILL_GRACE_S} s") \
                        from None
            elif over_cap.is_set():
                ended_by = "output"
            return ended_by, out, err
        finally:
            cap_hit.cancel()
            if not main.done():
                main.cancel()

    def _result(self, records: list[dict], ended_by: str | None, out: _Capture, err: _Capture,
                duration: float, launcher_code: int | None, oom: bool = False) -> ExecutionResult:
        """``oom``: the kernel's OOM killer ended a process of the run's memory cgroup."""
        final = next((r for r in reversed(records) if r.get("kind") != "warning"), None)
        common = {"stdout": out.text(), "stderr": err.text(), "duration": duration,
                  "stdout_truncated": out.truncated, "stderr_truncated": err.truncated}
        cpu = final.get("cpu") if final is not None else None
        if ended_by is not None:
            status = "timeout" if ended_by == "wall_time" else "killed"
            returncode = None
            if final is not None and final.get("kind") in ("exit", "signal"):
                # The program ended on its own just before the kill; keep its exit code for the record.
                returncode = final["code"] if final["kind"] == "exit" else -final["signal"]
            return ExecutionResult(status=status, limit=ended_by, returncode=returncode, cpu_time=cpu,
                                   **common)
        if final is None:
            raise SandboxError(f"the sandbox launcher exited with code {launcher_code} without reporting "
                               f"how the program ended")
        if final.get("kind") == "setup_error":
            raise SandboxError(f"sandbox set-up failed at {final.get('stage')}: {final.get('message')}")
        status, limit, returncode = classify_exit(
            kind=final["kind"], value=final["code"] if final["kind"] == "exit" else final["signal"],
            cpu_time=cpu, cpu_limit_s=max(1, math.ceil(self.config.cpu_time_s)), stderr=common["stderr"])
        if oom and limit != "cpu_time":  # whichever process it hit, the run went over its memory
            status, limit = "killed", "memory"
        return ExecutionResult(status=status, limit=limit, returncode=returncode, cpu_time=cpu, **common)

    # ----------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Remove the pool's folders and release its uids (runs in flight must have finished)."""
        self._finalizer()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        if not hasattr(self, "python"):
            return f"SandboxPool(max_workers={self.max_workers}, <not started>)"
        return (f"SandboxPool(max_workers={self.max_workers}, python={self.python!r}, "
                f"network_isolated={self.network_isolated}, pid_isolated={self.pid_isolated}, "
                f"filesystem_isolated={self.filesystem_isolated})")


__all__ = ["SandboxPool"]
