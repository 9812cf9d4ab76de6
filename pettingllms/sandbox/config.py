"""Settings of the code sandbox (:class:`SandboxConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field

NETWORK_MODES: tuple[str, ...] = ("auto", "require", "off")
ISOLATION_MODES: tuple[str, ...] = ("strict", "best_effort")
MEMORY_SCOPES: tuple[str, ...] = ("auto", "run", "process")

#: Default first uid of the dedicated sandbox range. Uids need no passwd entry; this range sits far above
#: the ones distributions allocate (system < 1000, users 1000-60000, nobody 65534) and above the usual
#: /etc/subuid ranges (100000 + 65536 per user), and the pool refuses uids that name a real account.
DEFAULT_UID_BASE = 1_500_000_000


@dataclass
class SandboxConfig:
    """Limits and isolation of one sandboxed program run.

    > Resource limits (per program run)

    cpu_time_s, wall_time_s, memory_mb, file_size_mb, scratch_mb, max_processes, max_open_files,
    max_output_bytes: see each field's help.

    > Interpreter

    python: the interpreter that runs the code. ``None`` picks ``sys.executable`` when the sandbox user
    can execute it, else ``/usr/bin/python3`` (a Python under root's home, e.g. pyenv's
    ``/root/.pyenv/...``, is unreachable once privileges are dropped). An explicit path is used as is;
    the pool checks at start that the sandbox user can run it (``python -c pass``) and raises
    :class:`~pettingllms.sandbox.SandboxError` naming the path when it cannot.

    > Isolation

    When the trainer runs as root, programs run under an unprivileged uid (RLIMIT_NPROC does not bind
    root): by default one dedicated uid per worker slot, ``uid_base + slot``, with a group of the same
    number and no supplementary groups, so that concurrent runs do not share a process budget and
    anything left under that uid can be killed. ``user`` names an existing account instead (e.g.
    ``"nobody"``); all slots then share it and its process budget. As non-root, programs keep the
    trainer's uid inside a user namespace.

    Namespaces: a new network namespace (only its own, isolated loopback), pid namespace (a daemon that
    ``setsid()``\\ s away dies with the run), mount namespace (read-only host file systems, a private
    size-capped tmpfs for ``/tmp``, ``/var/tmp``, ``/dev/shm`` and the working directory, a private
    ``/proc``), IPC and UTS namespaces. The mount namespace also gives the run its own file-system view:
    a fresh read-only root with only the system folders and the interpreter's own (see ``rootfs.py``),
    so that no host unix socket (``/run``, ``/var/run``, ``/dev/log``, ...) can be reached.

    ``isolation="strict"`` (the default): the pool refuses to start (:class:`SandboxError` naming the
    namespaces the kernel refused) unless every namespace above holds. ``"best_effort"`` runs with
    what the kernel allows instead (fewer namespaces, down to none), logs a warning and says what is
    missing in ``pool.isolation_notes``. ``network_isolation="require"`` refuses to start without the
    network namespace even under ``"best_effort"``; ``"off"`` disables all namespaces on purpose (no
    refusal; the notes say so).

    > Memory

    ``memory_mb`` bounds each process's address space (RLIMIT_AS) and, with ``memory_scope="auto"``
    where a memory cgroup can be made (root, or a delegated cgroup: see ``cgroup.py``), the run as a
    whole: every process it starts plus the files it writes to its tmpfs; the kernel's OOM killer then
    ends the run, reported as ``status="killed", limit="memory"``. ``"run"`` refuses to start without
    such a cgroup; ``"process"`` never makes one (per-process limit only).
    """

    cpu_time_s: float = field(default=5.0, metadata={"help": "CPU-time limit (RLIMIT_CPU, whole seconds, "
                                                       "rounded up); SIGXCPU then SIGKILL 1 s later."})
    wall_time_s: float = field(default=10.0, metadata={"help": "Default wall-clock limit; the whole "
                                                        "process group is killed past it."})
    memory_mb: int = field(default=512, metadata={"help": "Memory limit: per process (RLIMIT_AS) and, "
                                                  "where a cgroup is available, per run (see "
                                                  "memory_scope)."})
    memory_scope: str = field(default="auto", metadata={"help": "auto | run | process: where memory_mb "
                                                        "binds beyond each process (see class "
                                                        "docstring)."})
    file_size_mb: int = field(default=16, metadata={"help": "Largest file a program may write "
                                                     "(RLIMIT_FSIZE)."})
    scratch_mb: int = field(default=64, metadata={"help": "Size of the private tmpfs that holds the "
                                                   "working directory, /tmp, /var/tmp and /dev/shm."})
    max_processes: int = field(default=32, metadata={"help": "Processes and threads of the sandbox uid "
                                                      "(RLIMIT_NPROC)."})
    max_open_files: int = field(default=64, metadata={"help": "Open file descriptors per process "
                                                       "(RLIMIT_NOFILE)."})
    max_output_bytes: int = field(default=1 << 20, metadata={"help": "Bytes kept per stream (stdout, "
                                                              "stderr); more kills the run."})
    python: str | None = field(default=None, metadata={"help": "Interpreter path; None picks a reachable "
                                                        "default (see class docstring)."})
    python_args: tuple[str, ...] = field(default=("-I",), metadata={"help": "Interpreter options before "
                                                                      "the script path (-I: isolated)."})
    user: str | int | None = field(default=None, metadata={"help": "Account to run as when root; None "
                                                            "uses dedicated uids from uid_base."})
    uid_base: int = field(default=DEFAULT_UID_BASE, metadata={"help": "First dedicated sandbox uid (and "
                                                              "gid) when running as root."})
    uid_count: int = field(default=1024, metadata={"help": "Size of the dedicated uid range the pool "
                                                   "picks free uids from."})
    network_isolation: str = field(default="auto", metadata={"help": "auto | require | off (see class "
                                                              "docstring)."})
    isolation: str = field(default="strict", metadata={"help": "strict | best_effort: refuse to start, or "
                                                       "run with weaker isolation, when the kernel "
                                                       "refuses a namespace."})
    readonly_root: bool = field(default=True, metadata={"help": "Bind the view's host folders (system, "
                                                        "interpreter) read-only; the view's own root is "
                                                        "read-only either way."})
    extra_env: dict[str, str] = field(default_factory=dict, metadata={"help": "Added to the program's "
                                                                      "minimal environment; never put "
                                                                      "secrets here."})
    judge_server: bool = field(default=True, metadata={"help": "run_tests judges through a warm "
                                                         "server per worker slot where that keeps every "
                                                         "protection (root, dedicated uids, pid + mount "
                                                         "namespaces); False: one launch per program."})
    work_root: str | None = field(default=None, metadata={"help": "Folder for the per-run working "
                                                          "directories; default the system temp dir."})

    def __post_init__(self) -> None:
        for name in ("cpu_time_s", "wall_time_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"`{name}` must be > 0, got {value!r}")
        minimums = {"memory_mb": 32, "file_size_mb": 1, "scratch_mb": 1, "max_processes": 1,
                    "max_open_files": 16, "max_output_bytes": 1, "uid_count": 1}
        for name, low in minimums.items():
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
                raise ValueError(f"`{name}` must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.uid_base, int) and 1000 <= self.uid_base
                and self.uid_base + self.uid_count < 2**31):
            raise ValueError(f"`uid_base` must be >= 1000 with uid_base + uid_count < 2**31, "
                             f"got {self.uid_base!r}")
        if self.network_isolation not in NETWORK_MODES:
            raise ValueError(f"`network_isolation` must be one of {list(NETWORK_MODES)}, "
                             f"got {self.network_isolation!r}")
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"`isolation` must be one of {list(ISOLATION_MODES)}, got {self.isolation!r}")
        if self.memory_scope not in MEMORY_SCOPES:
            raise ValueError(f"`memory_scope` must be one of {list(MEMORY_SCOPES)}, "
                             f"got {self.memory_scope!r}")
        if self.python is not None and not self.python.startswith("/"):
            raise ValueError(f"`python` must be an absolute path, got {self.python!r}")
        self.python_args = tuple(self.python_args)
        optimizing = [arg for arg in self.python_args if arg.startswith("-O") or arg == "-OO"]
        if optimizing:
            raise ValueError(f"`python_args` must not hold {optimizing[0]!r}: -O compiles assertions away, "
                             f"and the judge's tests are assertions")
        if "PYTHONOPTIMIZE" in self.extra_env:
            raise ValueError("`extra_env` must not set PYTHONOPTIMIZE: it compiles assertions away, and the "
                             "judge's tests are assertions")
        for key, value in self.extra_env.items():
            if not (isinstance(key, str) and isinstance(value, str)) or "=" in key or not key:
                raise ValueError(f"`extra_env` entries must be str -> str with no '=' in the name, "
                                 f"got {key!r}: {value!r}")
