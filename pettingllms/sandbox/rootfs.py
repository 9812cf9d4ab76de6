"""The file-system view of a sandboxed run: which host folders it sees (the plan the launcher builds).

A read-only bind of the host's root does not stop ``connect()`` on the unix sockets that live in it
(D-Bus and journald under ``/run``, ``/dev/log``, a database's socket under ``/var/run`` or
``/var/lib``): a socket file takes write permission on itself, not on its file system. So the run does
not get the host's root at all. The launcher builds a fresh, read-only tmpfs root that holds:

* read-only binds of the system folders the interpreter and its libraries need: ``/usr``, ``/etc``
  and ``/bin``, ``/sbin``, ``/lib*`` (as folders, or as the host's symlinks into ``/usr``);
* read-only binds of the interpreter's own folders: ``sys.prefix``, ``sys.base_prefix``,
  ``sys.exec_prefix``, the folder of the executable and every folder on the interpreter's
  ``sys.path`` (asked from the interpreter itself, with the pool's ``python_args``), with the
  symlinks on the way to them recreated;
* a ``/dev`` with ``null``, ``zero``, ``full``, ``random``, ``urandom`` and the ``fd``/``std*`` links;
* a fresh ``/proc`` of the run's pid namespace, and the scratch tmpfs on ``/tmp``, ``/var/tmp``,
  ``/dev/shm`` and the working directory.

Nothing else of the host is there: no ``/run``, ``/var/run``, ``/var/lib``, ``/home``, ``/root``,
``/srv``, ``/sys`` or host ``/tmp``, so no socket file of theirs can be reached. Folders on the way to
a bind keep the host's owner and mode (a folder under ``/root`` stays closed to the sandbox uid). A
socket file placed inside one of the bound folders themselves would stay reachable; the system folders
hold none by convention (sockets live in ``/run`` and ``/tmp``).
"""

from __future__ import annotations

import json
import os
import subprocess

#: System folders every interpreter needs (those missing on the host are skipped).
SYSTEM_PATHS: tuple[str, ...] = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

_ASK = ("import json, os, sys; print(json.dumps([os.path.abspath(sys.executable), sys.prefix, "
        "sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix] + [p for p in sys.path if p]))")


def interpreter_paths(python: str, python_args: tuple[str, ...], timeout: float = 60.0) -> list[str]:
    """The interpreter's executable, prefixes and ``sys.path`` as it reports them (run as the trainer:
    the interpreter is the configured one, not model code). Raises ``OSError``/``ValueError`` when it
    cannot say."""
    proc = subprocess.run([python, *python_args, "-c", _ASK], capture_output=True, text=True,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/",
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise ValueError(f"`{python} -c ...` exited with {proc.returncode}: {proc.stderr[-500:]}")
    paths = json.loads(proc.stdout.strip().splitlines()[-1])
    executable = paths[0]
    return [os.path.dirname(executable), executable, *paths[1:]]


def _resolve(path: str, symlinks: dict[str, str], depth: int = 0) -> str | None:
    """Walk ``path`` from the root one component at a time, recording every symlink on the way (the
    view must resolve it as the host does); returns the symlink-free path, or None if it is missing."""
    if depth > 40:
        return None
    parts = [p for p in os.path.normpath(path).split("/") if p]
    current = "/"
    for i, part in enumerate(parts):
        nxt = os.path.join(current, part)
        if os.path.islink(nxt):
            target = os.readlink(nxt)
            symlinks[nxt] = target
            rest = "/".join(parts[i + 1:])
            joined = os.path.normpath(os.path.join(current, target))  # current holds no symlink
            return _resolve(os.path.join(joined, rest) if rest else joined, symlinks, depth + 1)
        if not os.path.lexists(nxt):
            return None
        current = nxt
    return current


def _inside(path: str, folder: str) -> bool:
    return folder == "/" or path == folder or path.startswith(folder.rstrip("/") + "/")


def view_plan(paths: list[str]) -> dict[str, list]:
    """The launcher's plan for a view holding the system folders and ``paths``: ``{"binds": [folder or
    file, ...], "symlinks": [[path, target], ...]}``, binds outermost only, never ``/`` itself nor
    anything under ``/tmp``."""
    symlinks: dict[str, str] = {}
    binds: set[str] = set()
    for path in [*SYSTEM_PATHS, *paths]:
        if not os.path.isabs(path):
            continue  # e.g. the import hooks editable installs put on sys.path
        resolved = _resolve(path, symlinks)
        # Under /tmp: the run's /tmp is its scratch tmpfs, which would cover it (an interpreter there
        # cannot run in the sandbox, with or without this view).
        if resolved is None or resolved == "/" or _inside(resolved, "/tmp"):
            continue
        binds.add(resolved)
    outer = sorted(b for b in binds if not any(o != b and _inside(b, o) for o in binds))
    kept = sorted([link, target] for link, target in symlinks.items()
                  if not _inside(link, "/tmp") and not any(_inside(link, b) for b in outer))
    return {"binds": outer, "symlinks": kept}


__all__ = ["SYSTEM_PATHS", "interpreter_paths", "view_plan"]
