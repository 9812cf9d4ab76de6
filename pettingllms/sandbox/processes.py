"""Finding and removing what a sandbox uid left behind: processes (via /proc) and scratch files."""

from __future__ import annotations

import os
import shutil
import signal
import time


def _uid_and_state(pid: str) -> tuple[int | None, str]:
    uid, state = None, ""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None, ""  # the process ended while we looked
    return uid, state


def pids_of_uid(uid: int, *, include_zombies: bool = False) -> list[int]:
    """Pids of the processes whose real uid is ``uid``; zombies (already dead, awaiting their parent's
    wait) only when ``include_zombies``."""
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            owner, state = _uid_and_state(pid)
            if owner == uid and (include_zombies or state not in ("Z", "X")):
                pids.append(int(pid))
    return sorted(pids)


def kill_uid(uid: int, *, timeout: float = 5.0) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were signalled.

    Only for uids that nothing else uses (the pool's dedicated, flock-reserved uids): repeated because a
    process may fork between the scan and the kill. Raises ``TimeoutError`` when processes remain.
    """
    if uid == 0:
        raise ValueError("`uid` must not be 0: refusing to kill root's processes")
    killed = 0
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in pids_of_uid(uid) if p != os.getpid()]
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes of uid {uid} survive SIGKILL: {pids}")
        time.sleep(0.005)


SCRATCH_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable on a standard system


def scratch_entries(uids: set[int], marker: str | None = None,
                    folders: tuple[str, ...] = SCRATCH_FOLDERS) -> list[os.DirEntry]:
    """Top-level entries of ``folders`` owned by one of ``uids`` (or, with ``marker``, named with it)."""
    found = []
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if owner in uids or (marker is not None and marker in entry.name):
                found.append(entry)
    return found


def remove_files_of_uid(uid: int, folders: tuple[str, ...] = SCRATCH_FOLDERS) -> list[str]:
    """Delete the top-level entries of ``folders`` owned by ``uid``; returns the removed paths.

    Used only when the sandbox has no private tmpfs (no mount namespace): these are the world-writable
    places an unprivileged program can write to on a standard system.
    """
    removed = []
    for entry in scratch_entries({uid}, folders=folders):
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
            removed.append(entry.path)
        except OSError:
            continue
    return removed
