"""Stand-alone launcher that the pool runs as ``python -I -S launcher.py SPEC`` for every program (``SPEC``:
the launch spec as ``marshal.dumps(spec).hex()``; the pool runs it with its own interpreter, so the
marshal format matches).

It uses the standard library only (it runs with ``-S``, before any site-packages) and is never imported
by the package: the trainer process never forks with a ``preexec_fn`` (unsafe next to torch's
threads), this fresh process does the privileged set-up instead. Three processes take part:

1. the **launcher** (session leader, started by the pool): enters new namespaces with ``unshare`` and
   forks;
2. the **init** (pid 1 of the new pid namespace, still privileged, runs no model code): opens the
   run's memory cgroup (``spec["cgroup"]``), builds the run's file-system view (``spec["view"]``, see
   ``rootfs.py``: a fresh root, ``pivot_root``, the host's root detached) and the scratch, forks the
   program, reaps every process that ends up as its child and reports how the
   program ended on the status pipe. When it exits, the kernel kills whatever is left in the
   namespace, including a daemon that left the process group with ``setsid()``;
3. the **program**: joins the memory cgroup, applies the rlimits, drops to the sandbox uid/gid, sets
   ``no_new_privs`` and ``exec``\\ s the interpreter on the code file.

The status pipe carries one Python literal per line (``repr`` of a dict, read back with
``ast.literal_eval``): ``{"kind": "exit", "code": n, "cpu": s}``,
``{"kind": "signal", "signal": n, "cpu": s}`` or ``{"kind": "setup_error", "stage": ..., "message":
...}``, plus ``{"kind": "warning", ...}`` lines for set-up steps that failed without defeating the run.

Imports are kept to what a launch needs: ``json`` (with ``re`` and ``enum``), ``ctypes.util`` and
``signal`` (``enum``) cost 8 to 15 ms each of every launch on a 2-core machine, so the spec travels as
marshal, the records as literals, libc is opened by its soname and signals come from ``_signal``.
"""

import _signal as signal  # not ``signal``: it imports enum (~8 ms a launch)
import ctypes
import marshal
import os
import resource
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

MNT_DETACH = 2

# pivot_root has no libc wrapper: its syscall number per machine (os.uname().machine).
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203,
                      "ppc64": 203, "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218, "armv6l": 218}
# Device nodes of the run's /dev (bound from the host's), and its links into /proc.
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"))
# Where the new root is assembled: the host's /tmp, hidden from the run anyway.
VIEW_STAGING = "/tmp"

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1

RLIMITS = {
    "CPU": resource.RLIMIT_CPU,
    "AS": resource.RLIMIT_AS,
    "FSIZE": resource.RLIMIT_FSIZE,
    "NPROC": resource.RLIMIT_NPROC,
    "NOFILE": resource.RLIMIT_NOFILE,
    "CORE": resource.RLIMIT_CORE,
}

# Per-mount flags that a bind remount must repeat (the kernel refuses to clear locked ones).
MOUNT_OPTION_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}

def _load_libc():
    # Not ctypes.util.find_library: importing ctypes.util (shutil, subprocess, re) took ~40 ms of every
    # launch; glibc's soname is fixed, and the main program's symbols (CDLL(None)) cover other libcs.
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return ctypes.CDLL(None, use_errno=True)


_libc = _load_libc()


class SetupError(Exception):
    def __init__(self, stage, message):
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _check(ret, stage, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise SetupError(stage, f"{what} failed: [Errno {err}] {os.strerror(err)}")


def _prctl(option, value):
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0))


def _mount(source, target, fstype, flags, data, stage="mount"):
    def enc(s):
        return None if s is None else s.encode()

    ret = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(ret, stage, f"mount({source!r}, {target!r}, {fstype!r}, {flags:#x})")


def _report(fd, record):
    data = (repr(record) + "\n").encode()
    try:
        os.write(fd, data)
    except OSError:
        pass


def unescape_mountinfo(path):
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and i + 3 < len(path) and path[i + 1:i + 4].isdigit():
            out.append(chr(int(path[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def _remount_read_only(status_fd, skip_prefixes):
    """Bind-remount every visible mount read-only, except pseudo file systems and the scratch."""
    with open("/proc/self/mountinfo") as f:
        lines = f.read().splitlines()
    for line in lines:
        fields = line.split()
        target = unescape_mountinfo(fields[4])
        options = fields[5].split(",")
        if any(target == p or target.startswith(p.rstrip("/") + "/") for p in skip_prefixes):
            continue
        if "ro" in options:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in options:
            flags |= MOUNT_OPTION_FLAGS.get(opt, 0)
        try:
            _mount(None, target, None, flags, None, stage="readonly")
        except SetupError as exc:
            _report(status_fd, {"kind": "warning", "stage": "readonly", "message": exc.message})


def mount_scratch(spec):
    """One fresh size-capped tmpfs for /tmp, /var/tmp, /dev/shm and the working directory (owned by the
    sandbox uid). Also called by the judge's warm server in each program's own new mount namespace, so
    that no file outlives the program that wrote it."""
    workdir = spec["workdir"]
    flags = MS_NOSUID | MS_NODEV
    _mount("tmpfs", "/tmp", "tmpfs", flags, f"size={int(spec['scratch_mb'])}m,mode=1777")
    for target, name in (("/var/tmp", ".var-tmp"), ("/dev/shm", ".dev-shm")):
        if os.path.isdir(target):
            scratch = os.path.join("/tmp", name)
            os.mkdir(scratch)
            os.chmod(scratch, 0o1777)
            _mount(scratch, target, None, MS_BIND, None)
    if workdir == "/tmp" or workdir.startswith("/tmp/"):
        os.makedirs(workdir, mode=0o755, exist_ok=True)
    else:
        scratch = "/tmp/.work"
        os.mkdir(scratch)
        _mount(scratch, workdir, None, MS_BIND, None)
    os.chmod(workdir, 0o700)
    if spec["uid"] is not None:
        os.chown(workdir, spec["uid"], spec["gid"])


def _replicate_dirs(root, path):
    """Create the folders of ``path`` under ``root`` with the host's owner and mode, so that a folder
    closed to the sandbox uid on the host (``/root``) stays closed in the view."""
    current = ""
    for part in [p for p in path.split("/") if p]:
        current += "/" + part
        target = root + current
        if os.path.lexists(target):
            continue
        st = os.stat(current)
        os.mkdir(target)
        try:
            os.chown(target, st.st_uid, st.st_gid)
        except OSError:
            pass  # an id that is not mapped into the user namespace
        os.chmod(target, st.st_mode & 0o7777)


def _pivot_root():
    """Make the current folder the root and detach the old one (see pivot_root(2), "." twice)."""
    machine = os.uname().machine
    number = PIVOT_ROOT_SYSCALL.get(machine)
    if number is None:
        raise SetupError("view", f"no pivot_root syscall number known for {machine!r}")
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "view", "pivot_root('.', '.')")
    _check(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "view", "umount2(old root, MNT_DETACH)")
    os.chdir("/")


def _enter_view(spec, status_fd):
    """Replace the host's root with a fresh tmpfs root that holds only the folders of the pool's plan
    (``spec["view"]``, see ``rootfs.py``), a minimal /dev and the run's /proc; read-only afterwards.
    No host socket outside those folders (/run, /var/run, /var/lib, /dev/log, ...) is reachable."""
    view = spec["view"]
    new = VIEW_STAGING
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755", stage="view")
    for link, target in view["symlinks"]:
        _replicate_dirs(new, os.path.dirname(link))
        os.symlink(target, new + link)
    for path in view["binds"]:
        _replicate_dirs(new, os.path.dirname(path))
        if os.path.isdir(path):
            os.mkdir(new + path)
        else:
            os.close(os.open(new + path, os.O_WRONLY | os.O_CREAT, 0o600))
        _mount(path, new + path, None, MS_BIND | MS_REC, None, stage="view")
    os.mkdir(new + "/dev")
    os.chmod(new + "/dev", 0o755)
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            os.close(os.open(new + "/dev/" + name, os.O_WRONLY | os.O_CREAT, 0o600))
            _mount("/dev/" + name, new + "/dev/" + name, None, MS_BIND, None, stage="view")
    for name, target in DEV_LINKS:
        os.symlink(target, new + "/dev/" + name)
    for folder, mode in (("/dev/shm", 0o1777), ("/tmp", 0o1777), ("/proc", 0o555)):
        os.mkdir(new + folder)
        os.chmod(new + folder, mode)
    if os.path.isdir("/var/tmp") and not os.path.lexists(new + "/var/tmp"):
        _replicate_dirs(new, "/var")
        os.mkdir(new + "/var/tmp")
        os.chmod(new + "/var/tmp", 0o1777)
    workdir = spec["workdir"]
    if not (workdir == "/tmp" or workdir.startswith("/tmp/")):  # else it is made in the scratch
        _replicate_dirs(new, workdir)
    # Before the pivot: in a user namespace the kernel lets a proc be mounted only while a full one is
    # visible in the mount namespace.
    if spec["namespaces"]["pid"]:
        _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, stage="view")
    else:
        _mount("/proc", new + "/proc", None, MS_BIND | MS_REC, None, stage="view")
    os.chdir(new)
    _pivot_root()
    if spec["readonly_root"]:
        _remount_read_only(status_fd, ["/proc", "/dev"])
    else:
        _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, stage="view")


def _setup_mounts(spec, status_fd):
    """Private mounts: the run's own file-system view (see :func:`_enter_view`), then one size-capped
    tmpfs for /tmp, /var/tmp, /dev/shm and the working directory."""
    code_name = spec.get("code_file")
    code = None
    if code_name is not None:  # the warm judge server has no code file: it gets programs on stdin
        with open(os.path.join(spec["workdir"], code_name), "rb") as f:
            code = f.read()
    _mount(None, "/", None, MS_REC | MS_PRIVATE, None, stage="mount")
    _enter_view(spec, status_fd)
    mount_scratch(spec)
    if code is not None:
        path = os.path.join(spec["workdir"], code_name)
        with open(path, "wb") as f:
            f.write(code)
        if spec["uid"] is not None:
            os.chown(path, spec["uid"], spec["gid"])


def _loopback_up(status_fd):
    # A fresh network namespace has only "lo", and it is down; bring it up so that programs can use
    # local sockets among themselves. Nothing outside the namespace is reachable through it.
    import _socket  # not ``socket``: it would import enum and selectors on every launch
    import fcntl
    import struct

    try:
        s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)  # no context manager in _socket
        try:
            req = struct.pack("16sh", b"lo", 0)
            flags = struct.unpack("16sh", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req))[1]
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
        finally:
            s.close()
    except OSError as exc:
        _report(status_fd, {"kind": "warning", "stage": "loopback", "message": str(exc)})


def drop_privileges(spec):
    """Own session, working directory, umask, rlimits, the sandbox uid/gid, ``no_new_privs`` (raises
    SetupError). Shared by the program process below and the judge's warm server (per program)."""
    if spec["namespaces"]["pid"]:
        # Its own session: a program that kills its process group cannot reach the launcher (same
        # uid when unprivileged). Without a pid namespace it stays in the launcher's group, which
        # the pool kills as a whole.
        os.setsid()
    os.chdir(spec["workdir"])
    os.umask(0o077)
    for name, (soft, hard) in spec["rlimits"].items():
        resource.setrlimit(RLIMITS[name], (soft, hard))
    if spec["uid"] is not None:
        os.setgroups([])
        os.setgid(spec["gid"])
        os.setuid(spec["uid"])
        if os.getuid() != spec["uid"] or os.geteuid() != spec["uid"]:
            raise SetupError("privileges", "setuid did not take effect")
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "privileges", "prctl(PR_SET_NO_NEW_PRIVS)")


def join_cgroup(cgroup_fd):
    """Move the calling process (and so all it will start) into the run's memory cgroup, through the
    ``cgroup.procs`` of it that was opened before the view hid /sys; closes the descriptor."""
    try:
        os.write(cgroup_fd, b"0")
    except OSError as exc:
        raise SetupError("cgroup", f"joining the run's memory cgroup failed: {exc}") from None
    finally:
        os.close(cgroup_fd)


def _exec_program(spec, error_fd, cgroup_fd):
    """In the program's process: memory cgroup, limits, privileges, exec. Never returns."""
    try:
        if cgroup_fd is not None:
            join_cgroup(cgroup_fd)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        drop_privileges(spec)
        argv = spec["argv"]
        try:
            os.execve(argv[0], argv, spec["env"])
        except OSError as exc:
            raise SetupError("exec", f"cannot execute {argv[0]!r}: {exc}") from None
    except SetupError as exc:
        os.write(error_fd, marshal.dumps({"stage": exc.stage, "message": exc.message}))
    except BaseException as exc:  # any other failure before exec is a set-up failure
        os.write(error_fd, marshal.dumps({"stage": "program", "message": repr(exc)}))
    os._exit(127)


def _sweep_uid(uid, status_fd, timeout=5.0):
    """Without a pid namespace: kill every process of the (dedicated) sandbox uid and reap those that
    were re-parented to us (we are their subreaper), so that no zombie keeps counting against
    RLIMIT_NPROC."""
    deadline = time.monotonic() + timeout
    while True:
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            if int(fields.get("Uid", "-1").split()[0]) != uid:
                continue
            found = True
            if fields.get("State", "").split()[:1] != ["Z"]:
                try:
                    os.kill(int(name), signal.SIGKILL)
                except OSError:
                    pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not found:
            return
        if time.monotonic() > deadline:
            _report(status_fd, {"kind": "warning", "stage": "sweep",
                                "message": f"processes of uid {uid} outlive the run"})
            return
        time.sleep(0.005)


def _run_init(spec, status_fd, lifeline_fd):
    """pid 1 of the namespace (or a subreaper without one): mounts, fork the program, reap, report."""
    import select

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # The launcher holds the pipe's write end: end of file means it died before the death signal was
    # armed (getppid() cannot tell, it reads 0 across a pid namespace).
    if select.select([lifeline_fd], [], [], 0)[0]:
        os._exit(70)
    os.close(lifeline_fd)
    ns = spec["namespaces"]
    if not ns["pid"]:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    cgroup_fd = None
    if spec.get("cgroup"):
        # Opened now: the view below has no /sys. Written by the program process, see join_cgroup.
        path = os.path.join(spec["cgroup"], "cgroup.procs")
        try:
            cgroup_fd = os.open(path, os.O_WRONLY)
        except OSError as exc:
            raise SetupError("cgroup", f"cannot open {path}: {exc}") from None
    if ns["net"]:  # first: it imports modules, which the view may not hold for this interpreter
        _loopback_up(status_fd)
    if ns["mount"]:
        _setup_mounts(spec, status_fd)
    if spec.get("server"):
        # The judge's warm server (judge_harness.py --serve) becomes pid 1 of the namespace, still
        # privileged: it runs no model code itself and forks one process per program, which makes
        # its own mount and IPC namespaces, applies the limits and drops to the sandbox uid (see there).
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir("/")
        argv = spec["argv"]
        if cgroup_fd is not None:  # the server moves each program process into it (judge_harness.py)
            os.set_inheritable(cgroup_fd, True)
            argv = [*argv, "--cgroup-fd", str(cgroup_fd)]
        try:
            os.execve(argv[0], argv, spec["env"])
        except OSError as exc:
            raise SetupError("exec", f"cannot execute {argv[0]!r}: {exc}") from None
    err_r, err_w = os.pipe()  # close-on-exec: empty on a successful exec
    child = os.fork()
    if child == 0:
        os.close(err_r)
        os.close(status_fd)
        _exec_program(spec, err_w, cgroup_fd)
    os.close(err_w)
    if cgroup_fd is not None:
        os.close(cgroup_fd)
    chunks = []
    while True:
        chunk = os.read(err_r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(err_r)
    failure = marshal.loads(b"".join(chunks)) if chunks else None
    while True:  # reap orphans re-parented to us until the program itself is reaped
        try:
            pid, wstatus, usage = os.wait4(-1, 0)
        except ChildProcessError:
            raise SetupError("init", "lost track of the program process") from None
        except InterruptedError:
            continue
        if pid == child:
            break
    cpu = usage.ru_utime + usage.ru_stime
    if not ns["pid"] and spec.get("sweep_uid") is not None:
        _sweep_uid(spec["sweep_uid"], status_fd)
    if failure is not None:
        raise SetupError(failure["stage"], failure["message"])
    if os.WIFSIGNALED(wstatus):
        _report(status_fd, {"kind": "signal", "signal": os.WTERMSIG(wstatus), "cpu": cpu})
    else:
        _report(status_fd, {"kind": "exit", "code": os.WEXITSTATUS(wstatus), "cpu": cpu})


def _enter_namespaces(spec):
    ns = spec["namespaces"]
    flags = 0
    for key, bit in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET), ("pid", CLONE_NEWPID),
                     ("mount", CLONE_NEWNS), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS)):
        if ns[key]:
            flags |= bit
    if not flags:
        return
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare", f"unshare({flags:#x})")
    if ns["user"]:
        # Map our own ids to themselves: the program keeps the trainer's (unprivileged) uid, and the
        # rlimits keep binding it, while init gains the capabilities it needs inside the namespaces.
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError as exc:
            raise SetupError("unshare", f"writing the user-namespace id maps failed: {exc}") from None


def main():
    spec = marshal.loads(bytes.fromhex(sys.argv[1]))
    status_fd = spec["status_fd"]
    os.set_inheritable(status_fd, False)
    init = None

    def stop(signum, frame):
        # The pool's early stop: kill init (its exit kills the whole pid namespace) and keep waiting
        # for it below, so that this process exits only after every process of the run is gone.
        if init is None:
            os._exit(70)
        try:
            os.kill(init, signal.SIGKILL)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _enter_namespaces(spec)
        lifeline_r, lifeline_w = os.pipe()
        init = os.fork()
        if init == 0:
            os.close(lifeline_w)
            code = 0
            try:
                _run_init(spec, status_fd, lifeline_r)
            except SetupError as exc:
                _report(status_fd, {"kind": "setup_error", "stage": exc.stage, "message": exc.message})
                code = 70
            except BaseException as exc:
                _report(status_fd, {"kind": "setup_error", "stage": "init", "message": repr(exc)})
                code = 70
            os._exit(code)
        while True:
            try:
                _, wstatus = os.waitpid(init, 0)
                break
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(wstatus) & 0xFF)
    except SetupError as exc:
        _report(status_fd, {"kind": "setup_error", "stage": exc.stage, "message": exc.message})
    except BaseException as exc:
        _report(status_fd, {"kind": "setup_error", "stage": "launcher", "message": repr(exc)})
    os._exit(70)


if __name__ == "__main__":
    main()
