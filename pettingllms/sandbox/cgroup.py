"""A memory cgroup per sandboxed run, so that ``memory_mb`` bounds the run as a whole (every process it
starts, and the files it writes to its tmpfs), not each process on its own.

The pool makes one folder for itself under the trainer's own cgroup (so whatever limits the trainer's
cgroup has keep binding the runs) and one child per run, ``run-N``, whose limit is ``memory_mb``. The
launcher opens the run's ``cgroup.procs`` before it builds the sandbox's file-system view (which hides
``/sys``) and the program process writes ``0`` (itself) into it before it drops its privileges, so that
every process of the run is in it before any model code runs. After the run the pool reads the
cgroup's OOM-kill counter and removes the folder.

Two layouts:

* **cgroup v2** (one unified hierarchy): the trainer's cgroup must have the memory controller in its
  ``cgroup.controllers`` and be writable by the trainer (root, or a subtree delegated to the user,
  e.g. ``systemd-run --user --scope -p Delegate=yes``). v2 lets a cgroup either hold processes or
  give controllers to its children, so when the trainer's cgroup holds only the trainer itself, the
  trainer is moved into a leaf ``pettingllms-trainer-<pid>`` beside the pool's folder first; when
  other processes share it, no cgroup is used. Limits: ``memory.max`` (and ``memory.swap.max`` = 0);
  OOM kills: ``oom_kill`` in ``memory.events``.
* **cgroup v1** (a ``memory`` hierarchy, e.g. ``/sys/fs/cgroup/memory``): no such rule. Limits:
  ``memory.limit_in_bytes`` and, where swap accounting exists, ``memory.memsw.limit_in_bytes``; OOM
  kills: ``oom_kill`` in ``memory.oom_control`` (kernel 4.13+; older kernels report none, and a run the
  kernel killed for memory shows as a SIGKILL).

Control files are written in place: a cgroup file system has no rename, so ``comlrl.atomic_io`` cannot
apply. Where neither layout is usable :func:`find_memory_cgroup` returns the reason and the pool keeps
the per-process address-space limit (RLIMIT_AS) alone.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import time
from dataclasses import dataclass, field

from pettingllms.sandbox.launcher import unescape_mountinfo

POOL_PREFIX = "pettingllms-sandbox-"
TRAINER_PREFIX = "pettingllms-trainer-"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, list[str]]]:
    """(mount root, mount point, fs type, super options) of each line of ``/proc/self/mountinfo``."""
    mounts = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 10:
            continue
        after = line.split(" - ", 1)[1].split()
        mounts.append((unescape_mountinfo(fields[3]), unescape_mountinfo(fields[4]), after[0],
                       after[2].split(",") if len(after) > 2 else []))
    return mounts


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; a number no pid can be
        return True
    return True


def _rmdir_tree(path: str, timeout: float = 2.0) -> bool:
    """Remove a cgroup folder and its child cgroups (rmdir only: control files go with the folder).
    Retries while the kernel still counts exiting processes in it. Returns whether it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            for entry in os.scandir(path):
                if entry.is_dir(follow_symlinks=False):
                    _rmdir_tree(entry.path, max(0.0, deadline - time.monotonic()))
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
            time.sleep(0.005)


@dataclass
class MemoryCgroup:
    """The pool's cgroup folder (``path``) in a ``version`` 1 or 2 hierarchy; one child per run."""

    path: str
    version: int
    _numbers: itertools.count = field(default_factory=lambda: itertools.count(1), repr=False)

    def create(self, limit_bytes: int, name: str | None = None) -> str:
        """A new child cgroup limited to ``limit_bytes`` (memory and swap); returns its folder."""
        if name is None:
            name = f"run-{next(self._numbers)}"  # next() on a count is atomic: pools serve many threads
        path = os.path.join(self.path, name)
        os.mkdir(path)
        try:
            if self.version == 2:
                _write(os.path.join(path, "memory.max"), str(limit_bytes))
                swap = os.path.join(path, "memory.swap.max")
                if os.path.exists(swap):  # absent without swap accounting
                    _write(swap, "0")
            else:
                # memsw (memory + swap) must never be below the memory limit: set the memory one first.
                _write(os.path.join(path, "memory.limit_in_bytes"), str(limit_bytes))
                memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    _write(memsw, str(limit_bytes))
        except BaseException:
            _rmdir_tree(path)
            raise
        return path

    def oom_kills(self, path: str) -> int:
        """How many processes the kernel's OOM killer ended in the run cgroup ``path`` so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in _read(os.path.join(path, name)).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        # Kernels before 4.13 (v1) have no counter. ``memory.failcnt`` is no substitute: it counts every time
        # usage touched the limit, also when reclaim succeeded and nothing was killed.
        return 0

    @staticmethod
    def remove(path: str) -> bool:
        """Remove a run's cgroup (its processes must be gone); returns whether it is gone."""
        return _rmdir_tree(path)

    def close(self) -> None:
        """Remove the pool's folder and every run cgroup left in it."""
        _rmdir_tree(self.path)


def _remove_stale(parent: str) -> None:
    """Folders of pools whose process died (``pettingllms-sandbox-<pid>-...``), and v2 trainer leaves of
    dead processes, so that a crashed trainer does not leak cgroups."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        for prefix in (POOL_PREFIX, TRAINER_PREFIX):
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                pid = entry.name[len(prefix):].split("-", 1)[0]
                if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                    _rmdir_tree(entry.path, timeout=0.1)


def _own_path(proc_cgroup: str, version: int) -> str | None:
    """The trainer's cgroup path in the hierarchy (``N:memory:/path`` for v1, ``0::/path`` for v2)."""
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if version == 2 and parts[0] == "0" and parts[1] == "":
            return parts[2]
        if version == 1 and "memory" in parts[1].split(","):
            return parts[2]
    return None


def _folder(mount_root: str, mount_point: str, path: str) -> str | None:
    """Where the cgroup ``path`` shows in a mount of the hierarchy at ``mount_point``."""
    if mount_root != "/":
        if not (path == mount_root or path.startswith(mount_root.rstrip("/") + "/")):
            return None
        path = path[len(mount_root.rstrip("/")):] or "/"
    return os.path.join(mount_point, path.lstrip("/")).rstrip("/") or "/"


def _v1(mount_root: str, mount_point: str, proc_cgroup: str) -> tuple[MemoryCgroup | None, str]:
    own = _own_path(proc_cgroup, 1)
    base = None if own is None else _folder(mount_root, mount_point, own)
    if base is None or not os.path.isdir(base):
        return None, f"cgroup v1: the trainer's memory cgroup is not under {mount_point}"
    if not os.access(base, os.W_OK):
        return None, f"cgroup v1: {base} is not writable by uid {os.getuid()} (not root, not delegated)"
    _remove_stale(base)
    path = os.path.join(base, f"{POOL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(path)
    except OSError as exc:
        return None, f"cgroup v1: cannot create {path}: {exc}"
    return MemoryCgroup(path, 1), ""


def _v2(mount_root: str, mount_point: str, proc_cgroup: str) -> tuple[MemoryCgroup | None, str]:
    own = _own_path(proc_cgroup, 2)
    base = None if own is None else _folder(mount_root, mount_point, own)
    if base is None or not os.path.isdir(base):
        return None, f"cgroup v2: the trainer's cgroup is not under {mount_point}"
    try:
        controllers = _read(os.path.join(base, "cgroup.controllers")).split()
        subtree = _read(os.path.join(base, "cgroup.subtree_control")).split()
    except OSError as exc:
        return None, f"cgroup v2: cannot read the controllers of {base}: {exc}"
    parent = base
    if os.path.basename(base).startswith(TRAINER_PREFIX) and base != mount_point:
        # A pool of this process moved it into its leaf before: the pools live beside that leaf.
        parent = os.path.dirname(base)
        try:
            subtree = _read(os.path.join(parent, "cgroup.subtree_control")).split()
            controllers = _read(os.path.join(parent, "cgroup.controllers")).split()
        except OSError as exc:
            return None, f"cgroup v2: cannot read the controllers of {parent}: {exc}"
    if "memory" not in controllers:
        return None, (f"cgroup v2: the memory controller is not delegated to {parent} (its "
                      f"cgroup.controllers lists {controllers or 'nothing'})")
    if not os.access(parent, os.W_OK) or not os.access(os.path.join(parent, "cgroup.procs"), os.W_OK):
        return None, f"cgroup v2: {parent} is not writable by uid {os.getuid()} (not root, not delegated)"
    _remove_stale(parent)
    if "memory" not in subtree:
        # "No internal processes": the trainer must leave this cgroup before its children get the memory
        # controller. Only when it is alone there: other processes are not ours to move.
        try:
            procs = [p for p in _read(os.path.join(parent, "cgroup.procs")).split() if p.strip()]
        except OSError as exc:
            return None, f"cgroup v2: cannot read {parent}/cgroup.procs: {exc}"
        if procs and procs != [str(os.getpid())]:
            return None, (f"cgroup v2: {parent} holds other processes than the trainer ({len(procs)} in "
                          f"all), so it cannot give the memory controller to a child; start the trainer "
                          f"in a cgroup of its own (see the sandbox docs)")
        if procs:
            leaf = os.path.join(parent, f"{TRAINER_PREFIX}{os.getpid()}")
            try:
                os.makedirs(leaf, exist_ok=True)
                _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))
            except OSError as exc:
                return None, f"cgroup v2: cannot move the trainer into {leaf}: {exc}"
        try:
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
        except OSError as exc:
            return None, f"cgroup v2: cannot enable the memory controller in {parent}: {exc}"
    path = os.path.join(parent, f"{POOL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(path)
        _write(os.path.join(path, "cgroup.subtree_control"), "+memory")
    except OSError as exc:
        _rmdir_tree(path, timeout=0.1)
        return None, f"cgroup v2: cannot create {path} with the memory controller: {exc}"
    return MemoryCgroup(path, 2), ""


def find_memory_cgroup(proc_cgroup: str | None = None, mountinfo: str | None = None
                       ) -> tuple[MemoryCgroup | None, str]:
    """The pool's memory cgroup folder, made here, or ``(None, why not)``.

    ``proc_cgroup`` and ``mountinfo`` default to this process's ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo`` (tests pass fakes whose mount points are plain folders)."""
    try:
        if proc_cgroup is None:
            proc_cgroup = _read("/proc/self/cgroup")
        if mountinfo is None:
            mountinfo = _read("/proc/self/mountinfo")
    except OSError as exc:
        return None, f"no /proc/self/cgroup or mountinfo: {exc}"
    reasons = []
    mounts = _mounts(mountinfo)
    for root, point, fstype, options in mounts:  # v1's memory hierarchy first: it needs no moves
        if fstype == "cgroup" and "memory" in options:
            found, why = _v1(root, point, proc_cgroup)
            if found is not None:
                return found, ""
            reasons.append(why)
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2":
            found, why = _v2(root, point, proc_cgroup)
            if found is not None:
                return found, ""
            reasons.append(why)
    return None, "; ".join(reasons) or "no cgroup file system is mounted"


__all__ = ["MemoryCgroup", "find_memory_cgroup"]
