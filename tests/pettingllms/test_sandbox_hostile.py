"""Hostile-program battery: every program is contained, leaks nothing and leaves nothing behind.

Run as root (CI does), programs run under the pool's dedicated uids; ``test_non_root_trainer_*`` repeats
the worst of them from a trainer process that has itself dropped to an unprivileged uid, to show the
limits hold without root. After every run we check: the status, that the run stayed within its time
limit, that the planted secret appears nowhere in the output, that no process of the sandbox uids is
alive, that no file of theirs (or with the run's marker in its name) is left in the world-writable
folders, that the test's own folders are untouched, and that the pool's work folder is empty.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field

import pytest

from pettingllms.sandbox import SandboxConfig, SandboxPool, TestCase, kill_uid, pids_of_uid
from pettingllms.sandbox.processes import scratch_entries

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

SECRET = "sk-test-7f3a9c1e5b2d4068a1c3e5f7b9d1f3a5"
WALL = 2.0
SLACK = 2.5  # launcher start-up and a loaded 2-core machine
LIMITS = dict(cpu_time_s=1, wall_time_s=WALL, memory_mb=128, file_size_mb=1, scratch_mb=8,
              max_processes=16, max_open_files=32, max_output_bytes=65536)
# Used only when the pool's own uids are unknown to the non-root child: one below the default range.
NON_ROOT_TRAINER_UID = 1_499_999_999


class Listener:
    """A TCP listener outside the sandbox that counts the connections it accepts."""

    def __init__(self, family: int, host: str) -> None:
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


class UnixListener:
    """A listening, world-connectable unix socket outside the sandbox (a path, or an abstract name
    starting with NUL), as D-Bus, journald or a database would leave one on a host."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(16)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)  # permissions would let any uid connect: only the view stops it

    def close(self) -> None:
        self.sock.close()
        if not self.address.startswith("\0"):
            os.unlink(self.address)


def _connects(address: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(address)
        except OSError:
            return False
        return True


# Environment variables through which a program would find the host's buses; the fixture plants them.
BUS_ENV = ("DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "XDG_RUNTIME_DIR", "SSH_AUTH_SOCK")


@dataclass
class Context:
    marker: str
    protected_dir: str  # root-owned, mode 0700
    readable_dir: str  # root-owned, mode 0755, holds a 0644 file
    protected_token: str
    listener4: Listener
    listener6: Listener | None
    holder: subprocess.Popen  # a process outside the sandbox whose environment holds the secret
    # name -> address of unix sockets listening on the host (/run, /var/run, /var/lib, /dev as root;
    # the host's /tmp, an abstract name and the test's own /proc/<pid>/root path everywhere).
    sockets: dict[str, str] = field(default_factory=dict)
    test_pid: int = field(default_factory=os.getpid)

    def fill(self, template: str) -> str:
        return template.format(
            marker=self.marker, protected=self.protected_dir, readable=self.readable_dir,
            port4=self.listener4.port, port6=self.listener6.port if self.listener6 else 0,
            test_pid=self.test_pid, holder_pid=self.holder.pid, sockets=sorted(self.sockets.items()),
        )


@pytest.fixture(scope="module")
def ctx():
    os.environ["SANDBOX_TEST_SECRET"] = SECRET
    marker = f"sbxmark{os.getpid()}x{int(time.time())}"
    protected = tempfile.mkdtemp(prefix="sbx-protected-")
    os.chmod(protected, 0o700)
    token = f"protected-token-{marker}"
    with open(os.path.join(protected, "keep.txt"), "w") as f:
        f.write(token)
    readable = tempfile.mkdtemp(prefix="sbx-readable-")
    os.chmod(readable, 0o755)
    with open(os.path.join(readable, "keep.txt"), "w") as f:
        f.write("keep")
    os.chmod(os.path.join(readable, "keep.txt"), 0o644)
    listener4 = Listener(socket.AF_INET, "127.0.0.1")
    try:
        listener6 = Listener(socket.AF_INET6, "::1")
    except OSError:
        listener6 = None
    # os.environ changes do not reach /proc/<pid>/environ, so a process started with the secret holds it.
    holder = subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin", "SANDBOX_TEST_SECRET": SECRET})
    socket_dirs = [tempfile.mkdtemp(prefix="sbx-sock-")]
    listeners: list[UnixListener] = []
    sockets: dict[str, str] = {}

    def listen(name: str, address: str) -> None:
        listeners.append(UnixListener(address))
        sockets[name] = address

    os.chmod(socket_dirs[0], 0o755)
    listen("host_tmp", os.path.join(socket_dirs[0], "s.sock"))
    if os.geteuid() == 0:  # where system services keep theirs (/var/run is often a link to /run)
        for name, parent in (("run", "/run"), ("var_run", "/var/run"), ("var_lib", "/var/lib")):
            if os.path.isdir(parent):
                socket_dirs.append(tempfile.mkdtemp(prefix="sbx-sock-", dir=parent))
                os.chmod(socket_dirs[-1], 0o755)
                listen(name, os.path.join(socket_dirs[-1], "s.sock"))
        listen("dev", f"/dev/sbx-{marker}.sock")  # a stand-in for /dev/log (journald's socket)
    listen("abstract", f"\0sbx-abstract-{marker}")  # no file at all: only the network namespace helps
    # A socket through the test process's root as /proc shows it.
    sockets["proc_root"] = f"/proc/{os.getpid()}/root{sockets.get('run', sockets['host_tmp'])}"
    bus = sockets.get("run", sockets["host_tmp"])
    for name in BUS_ENV:  # what a desktop session or ssh login would hand down
        os.environ[name] = f"unix:path={bus}" if name.startswith("DBUS") else bus
    context = Context(marker, protected, readable, token, listener4, listener6, holder, sockets)
    yield context
    for name in BUS_ENV:
        os.environ.pop(name, None)
    for listener in listeners:
        listener.close()
    for folder in socket_dirs:
        shutil.rmtree(folder, ignore_errors=True)
    holder.kill()
    holder.wait()
    listener4.close()
    if listener6:
        listener6.close()
    shutil.rmtree(protected, ignore_errors=True)
    shutil.rmtree(readable, ignore_errors=True)
    os.environ.pop("SANDBOX_TEST_SECRET", None)


@pytest.fixture(scope="module")
def pool(ctx):
    with SandboxPool(SandboxConfig(**LIMITS), max_workers=2) as p:
        yield p


# name -> (code template, allowed statuses, expected limit or None, timeout override, stdin)
HOSTILE: dict[str, tuple[str, set[str], str | None, float | None, str]] = {
    "infinite_loop": ("while True:\n    pass\n", {"killed"}, "cpu_time", 3.5, ""),
    "ignores_sigxcpu": (
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n",
        {"killed"}, "cpu_time", 6.0, ""),
    "sleep_past_timeout": ("import time\ntime.sleep(60)\n", {"timeout"}, "wall_time", None, ""),
    "ignores_sigterm_and_sleeps": (
        "import signal, time\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\ntime.sleep(60)\n", {"timeout"}, "wall_time", None, ""),
    "fork_bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        {"timeout", "killed"}, None, None, ""),
    "memory_hog": ("chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
                   {"killed"}, "memory", None, ""),
    "disk_fill_one_file": (
        "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
        {"killed"}, "file_size", None, ""),
    "disk_fill_many_files": (
        "for i in range(64):\n    with open(f'/tmp/{marker}-{{i}}', 'wb') as f:\n"
        "        f.write(b'x' * (512 << 10))\n", {"error", "ok"}, None, None, ""),
    "huge_stdout": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
                    {"killed"}, "output", None, ""),
    "huge_stderr": ("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n",
                    {"killed"}, "output", None, ""),
    "network_to_outside_listener": (
        "import socket\n"
        "targets = [(socket.AF_INET, ('127.0.0.1', {port4})), (socket.AF_INET, ('localhost', {port4}))]\n"
        "if {port6}:\n    targets.append((socket.AF_INET6, ('::1', {port6})))\n"
        "for family, addr in targets:\n"
        "    s = socket.socket(family, socket.SOCK_STREAM)\n    s.settimeout(0.5)\n"
        "    try:\n        s.connect(addr)\n        print('CONNECTED', addr)\n"
        "    except OSError as exc:\n        print('refused', addr, type(exc).__name__)\n"
        "    finally:\n        s.close()\n", {"ok"}, None, None, ""),
    "read_planted_env_secret": (
        "import os\nprint(dict(os.environ))\nprint(open('/proc/self/environ', 'rb').read())\n"
        "print(os.environ.get('SANDBOX_TEST_SECRET'))\n", {"ok"}, None, None, ""),
    "read_parent_and_all_environ": (
        "import os\npids = [os.getppid(), 1, {test_pid}, {holder_pid}]\n"
        "for pid in pids + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    try:\n        print(pid, open(f'/proc/{{pid}}/environ', 'rb').read())\n"
        "    except OSError as exc:\n        print(pid, type(exc).__name__)\n", {"ok"}, None, None, ""),
    "write_outside_workdir": (
        "import os\nfor path in ['{protected}/owned.txt', '{readable}/new-{marker}.txt', '/tmp/{marker}-escape',\n"
        "             '/var/tmp/{marker}-escape', '/dev/shm/{marker}-escape', '/etc/{marker}-escape',\n"
        "             '/{marker}-escape', os.path.join(os.path.dirname(os.getcwd()), '{marker}-sibling')]:\n"
        "    try:\n        open(path, 'w').write('pwned')\n        print('WROTE', path)\n"
        "    except OSError as exc:\n        print('blocked', path, type(exc).__name__)\n", {"ok"}, None, None, ""),
    "signal_the_parent": (
        "import os, signal\nfor pid in (os.getppid(), {test_pid}, 1):\n    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n        print('signalled', pid)\n"
        "    except OSError as exc:\n        print('blocked', pid, type(exc).__name__)\n"
        "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as exc:\n    print('kill -1', type(exc).__name__)\n"
        "print('alive')\n", {"ok"}, None, None, ""),
    "kill_own_process_group": ("import os, signal\nos.killpg(0, signal.SIGKILL)\n", {"error"}, None, None, ""),
    "delete_files": (
        "import os, shutil\nshutil.rmtree('{readable}', ignore_errors=True)\n"
        "for path in ['{readable}/keep.txt', '{protected}/keep.txt', '/etc/hostname', '/tmp']:\n"
        "    try:\n        os.remove(path)\n        print('DELETED', path)\n"
        "    except OSError as exc:\n        print('blocked', path, type(exc).__name__)\n"
        "os.remove(__file__)\n", {"ok"}, None, None, ""),
    "symlink_traps_for_cleanup": (
        "import os\nos.symlink('{readable}', 'link-to-readable')\nos.symlink('/', 'link-to-root')\n"
        "os.mkdir('sub')\nos.symlink('{readable}/keep.txt', 'sub/keep')\nos.chmod('.', 0o000)\n",
        {"ok"}, None, None, ""),
    "daemon_double_fork_setsid": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n        os._exit(0)\n    os._exit(0)\nprint('parent done')\n", {"ok"}, None, None, ""),
    "daemon_closes_its_streams": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    for fd in (0, 1, 2):\n        os.close(fd)\n"
        "    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\nprint('parent done')\n", {"ok"}, None, None, ""),
    "background_children_then_exit": (
        "import os, time\nfor _ in range(5):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "print('bye')\n", {"ok"}, None, None, ""),
    "zombie_army_and_sleep": (
        "import os, time\nfor _ in range(8):\n    if os.fork() == 0:\n        os._exit(0)\ntime.sleep(60)\n",
        {"timeout"}, "wall_time", None, ""),
    "deep_recursion_unbounded": (
        "import sys\nsys.setrecursionlimit(10 ** 7)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
        {"error", "killed", "timeout"}, None, 4.0, ""),
    "deep_recursion_default": ("def f(n):\n    return f(n + 1)\nf(0)\n", {"error"}, None, None, ""),
    "thread_bomb": (
        "import threading, time\nwhile True:\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
        {"killed"}, None, None, ""),
    "open_many_files": ("files = []\nwhile True:\n    files.append(open('/dev/null'))\n",
                        {"killed"}, "open_files", None, ""),
    "become_root": (
        "import os\nfor name, call in [('setuid', lambda: os.setuid(0)), ('setgid', lambda: os.setgid(0)),\n"
        "                   ('seteuid', lambda: os.seteuid(0)), ('setgroups', lambda: os.setgroups([0]))]:\n"
        "    try:\n        call()\n        print('GAINED', name)\n"
        "    except OSError as exc:\n        print('blocked', name, type(exc).__name__)\n"
        "print('uid', os.getuid(), os.geteuid())\n", {"ok"}, None, None, ""),
    "read_protected_files": (
        "for path in ['{protected}/keep.txt', '/etc/shadow', '/root/.bashrc']:\n"
        "    try:\n        print(path, open(path).read())\n"
        "    except OSError as exc:\n        print('blocked', path, type(exc).__name__)\n", {"ok"}, None, None, ""),
    "write_proc_and_sys": (
        "for path in ['/proc/sys/kernel/hostname', '/proc/sysrq-trigger', '/sys/kernel/mm/ksm/run']:\n"
        "    try:\n        open(path, 'w').write('x')\n        print('WROTE', path)\n"
        "    except OSError as exc:\n        print('blocked', path, type(exc).__name__)\n", {"ok"}, None, None, ""),
    "unread_stdin_flood": ("print('bye')\n", {"ok"}, None, None, "z" * (4 << 20)),
    # Unix sockets of the host (a read-only bind does not stop connect()), the buses named by the
    # environment, and other processes through /proc.
    "host_unix_sockets": (
        "import json, os, socket\nreport = {{}}\n"
        "bus = os.environ.get('DBUS_SESSION_BUS_ADDRESS', '').partition('unix:path=')[2]\n"
        "for name, address in {sockets} + ([('env_bus', bus)] if bus else []):\n"
        "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.settimeout(1.0)\n"
        "    try:\n        s.connect(address)\n        report[name] = 'CONNECTED'\n"
        "    except OSError as exc:\n        report[name] = type(exc).__name__\n    finally:\n        s.close()\n"
        "report['env'] = sorted(k for k in os.environ if k.startswith(('DBUS', 'XDG', 'SSH_AUTH')))\n"
        "for pid in ({test_pid}, {holder_pid}):\n    try:\n"
        "        report[f'cmdline {{pid}}'] = open(f'/proc/{{pid}}/cmdline', 'rb').read().decode(errors='replace')\n"
        "    except OSError as exc:\n        report[f'cmdline {{pid}}'] = type(exc).__name__\n"
        "report['visible'] = [p for p in ('/run', '/var/run', '/var/lib', '/dev/log', '/sys', '/home', '/root',\n"
        "                                 '/srv', '/mnt') if os.path.lexists(p)]\n"
        "print(json.dumps(report, sort_keys=True))\n", {"ok"}, None, None, ""),
}

REFUSED = ("FileNotFoundError", "ConnectionRefusedError", "PermissionError")


def _assert_no_host_socket(out: str, ctx: Context, viewed: bool = True) -> None:
    """The report of ``host_unix_sockets``: no socket reached, no bus variable, no foreign /proc entry
    and (with a mount namespace) none of the host's socket places in sight."""
    report = json.loads(out.strip().splitlines()[-1])
    for name in ctx.sockets:
        assert report[name] in REFUSED, (name, report)
    assert "env_bus" not in report and report["env"] == [], report
    assert "sleep" not in report[f"cmdline {ctx.holder.pid}"], report
    assert "pytest" not in report[f"cmdline {ctx.test_pid}"], report
    if viewed:
        assert report["visible"] == [], report


def _leftover_files(uids: set[int], marker: str) -> list[str]:
    return [entry.path for entry in scratch_entries(uids, marker)]


def _forbidden_writes(out: str, ctx: Context) -> list[str]:
    """Lines of the write program that report a write into the host's protected places."""
    forbidden = (ctx.protected_dir, ctx.readable_dir, "/etc/", f"/{ctx.marker}")
    return [line for line in out.splitlines() if line.startswith("WROTE ") and line[6:].startswith(forbidden)]


def _assert_contained(pool: SandboxPool, ctx: Context, result, wall: float) -> None:
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert ctx.protected_token not in result.stdout
    assert result.duration <= wall + SLACK, f"run took {result.duration:.2f}s with a {wall}s limit"
    uids = set(pool.uids)
    if os.geteuid() == 0:
        leftover = {uid: pids_of_uid(uid, include_zombies=True) for uid in uids}
        assert all(pids == [] for pids in leftover.values()), leftover
        assert 0 not in uids
    assert _leftover_files(uids if os.geteuid() == 0 else set(), ctx.marker) == []
    assert sorted(os.listdir(ctx.protected_dir)) == ["keep.txt"]
    assert sorted(os.listdir(ctx.readable_dir)) == ["keep.txt"]
    with open(os.path.join(ctx.readable_dir, "keep.txt")) as f:
        assert f.read() == "keep"
    assert os.listdir(pool.work_root) == []
    assert not any(ctx.marker in name for name in os.listdir("/etc") + os.listdir("/"))


def test_battery_has_at_least_twenty_programs():
    assert len(HOSTILE) >= 20


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(pool, ctx, name):
    template, statuses, limit, timeout, stdin = HOSTILE[name]
    wall = timeout if timeout is not None else WALL
    accepted_before = (ctx.listener4.accepted, ctx.listener6.accepted if ctx.listener6 else 0)
    result = pool.run_sync(ctx.fill(template), stdin=stdin, timeout=timeout)
    assert result.status in statuses, result
    if limit is not None:
        assert result.limit == limit, result
    _assert_contained(pool, ctx, result, wall)
    # Program-specific evidence.
    out = result.stdout
    if name in ("infinite_loop", "ignores_sigxcpu"):
        assert result.cpu_time is not None and 0.5 <= result.cpu_time <= 2.5, result
    if name in ("huge_stdout", "huge_stderr"):
        stream = result.stdout if name == "huge_stdout" else result.stderr
        assert len(stream) == LIMITS["max_output_bytes"]
        assert result.stdout_truncated if name == "huge_stdout" else result.stderr_truncated
    if name == "disk_fill_many_files" and pool.filesystem_isolated:
        assert result.status == "error" and "[Errno 28]" in result.stderr  # the scratch tmpfs is full
    if name == "network_to_outside_listener":
        if not pool.network_isolated:
            pytest.skip("network namespaces are unavailable here; the sandbox cannot isolate the network")
        assert "CONNECTED" not in out and out.count("refused") >= 2, out
        time.sleep(0.1)  # let the accept loop see a connection that might have got through
        assert (ctx.listener4.accepted, ctx.listener6.accepted if ctx.listener6 else 0) == accepted_before
    if name == "write_outside_workdir":
        # Writes to /tmp, /var/tmp, /dev/shm may succeed: they land on the run's private tmpfs (the
        # leftover-file check above shows nothing reached the host's folders).
        assert _forbidden_writes(out, ctx) == [], out
    if name in ("delete_files", "read_protected_files", "write_proc_and_sys"):
        assert "WROTE" not in out and "DELETED" not in out, out
    if name == "signal_the_parent":
        assert "alive" in out and "signalled" not in out.replace(f"signalled {os.getpid()}", "HIT-TEST-PID")
        assert "HIT-TEST-PID" not in out
    if name == "kill_own_process_group":
        assert result.returncode == -9
    if name == "become_root":
        assert "GAINED" not in out and "uid 0" not in out, out
    if name in ("daemon_double_fork_setsid", "daemon_closes_its_streams", "background_children_then_exit"):
        assert "done" in out or "bye" in out
        assert result.duration < WALL, "the run waited for its daemon instead of ending with the program"
    if name == "thread_bomb":
        assert result.limit in ("processes", "memory"), result
    if name == "host_unix_sockets":
        _assert_no_host_socket(out, ctx, pool.filesystem_isolated)


def test_controls_show_the_checks_can_fail(ctx):
    """Without namespaces the same connection succeeds, and the planted secret really is in our environ."""
    with open(f"/proc/{ctx.holder.pid}/environ", "rb") as f:
        assert SECRET.encode() in f.read()
    plain = subprocess.run([sys.executable, "-c", "import os; print(os.environ['SANDBOX_TEST_SECRET'])"],
                           capture_output=True, text=True, check=True)
    assert plain.stdout.strip() == SECRET  # an unsandboxed child would inherit it
    before = ctx.listener4.accepted
    with SandboxPool(SandboxConfig(network_isolation="off", **LIMITS), max_workers=1) as open_pool:
        assert not open_pool.network_isolated
        result = open_pool.run_sync(ctx.fill(HOSTILE["network_to_outside_listener"][0]))
        socket_run = open_pool.run_sync(ctx.fill(HOSTILE["host_unix_sockets"][0]))
    assert "CONNECTED" in result.stdout, result
    deadline = time.monotonic() + 2
    while ctx.listener4.accepted == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ctx.listener4.accepted > before
    # Every planted socket takes a connection from here (the test process), so a refusal inside the
    # sandbox is the sandbox's doing; without namespaces even the sandbox uid gets through to them.
    assert all(_connects(address) for address in ctx.sockets.values()), ctx.sockets
    report = json.loads(socket_run.stdout.strip().splitlines()[-1])
    reachable = {name for name in ctx.sockets if name != "proc_root"}  # /proc/<pid>/root needs ptrace rights
    assert {name for name in reachable if report[name] == "CONNECTED"} == reachable, report


# --------------------------------------------------------------------------- non-root trainer

NON_ROOT_SCRIPT = textwrap.dedent("""
    # Run with -E -s (not -I): the script's folder, which holds the package copy, is sys.path[0].
    import json, os, sys
    from pettingllms.sandbox import SandboxConfig, SandboxPool, pids_of_uid
    programs = json.loads(sys.argv[2])
    os.environ["SANDBOX_TEST_SECRET"] = sys.argv[3]
    report = {"uid": os.getuid(), "results": {}}
    with SandboxPool(SandboxConfig(**json.loads(sys.argv[4])), max_workers=2) as pool:
        report["network_isolated"] = pool.network_isolated
        report["pid_isolated"] = pool.pid_isolated
        report["filesystem_isolated"] = pool.filesystem_isolated
        for name, (code, timeout) in programs.items():
            r = pool.run_sync(code, timeout=timeout)
            report["results"][name] = {"status": r.status, "limit": r.limit, "stdout": r.stdout,
                                       "stderr": r.stderr[-2000:], "duration": r.duration,
                                       "cpu_time": r.cpu_time}
            report["results"][name]["leftover"] = [p for p in pids_of_uid(os.getuid()) if p != os.getpid()]
        report["work_root_empty"] = os.listdir(pool.work_root) == []
    print(json.dumps(report))
""")

NON_ROOT_PROGRAMS = ["infinite_loop", "fork_bomb", "memory_hog", "thread_bomb", "disk_fill_one_file",
                     "network_to_outside_listener", "read_planted_env_secret", "read_parent_and_all_environ",
                     "daemon_double_fork_setsid", "signal_the_parent", "write_outside_workdir",
                     "sleep_past_timeout", "huge_stdout", "host_unix_sockets"]


def _describe(pid: int) -> str:
    """State, parent and command line of a process, for failure messages."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        return f"{fields['State'].strip()} ppid={fields['PPid'].strip()} {cmd}"
    except OSError:
        return "gone"


def _world_runnable(path: str) -> bool:
    """Whether every user can reach and execute ``path`` (each parent folder o+x, the file o+rx)."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return False
    parts = real.split("/")
    for i in range(2, len(parts)):
        if not os.stat("/".join(parts[:i])).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(real).st_mode
    return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)


def _run_as_unprivileged_trainer(ctx: Context, programs: list[str], config: dict) -> tuple[dict, dict]:
    """Run ``programs`` through a pool created by a trainer process that dropped to an unprivileged uid.

    Returns (the trainer's JSON report, the trainer uid's processes alive after it exited)."""
    python = next((p for p in ("/usr/bin/python3", sys.executable) if _world_runnable(p)), None)
    assert python is not None, "no interpreter here is usable by an unprivileged user"
    uid = NON_ROOT_TRAINER_UID
    assert pids_of_uid(uid) == []
    home = tempfile.mkdtemp(prefix="sbx-nonroot-")
    try:
        # A world-readable copy of the package: the checkout may sit where the uid cannot read it.
        package = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pettingllms")
        shutil.copytree(package, os.path.join(home, "pettingllms"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        script = os.path.join(home, "trainer.py")
        with open(script, "w") as f:
            f.write(NON_ROOT_SCRIPT)
        for dirpath, _dirnames, filenames in os.walk(home):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
        payload = {name: (ctx.fill(HOSTILE[name][0]), HOSTILE[name][3]) for name in programs}
        drop = ("import os, sys\nuid = int(sys.argv[1])\nos.setgroups([])\nos.setgid(uid)\nos.setuid(uid)\n"
                "os.execv(sys.argv[2], sys.argv[2:])\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "SANDBOX_TEST_SECRET": SECRET, "LANG": "C.UTF-8",
               **{name: os.environ[name] for name in BUS_ENV}}
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", drop, str(uid), python, "-E", "-s", script, home, json.dumps(payload),
             SECRET, json.dumps(config)],
            capture_output=True, text=True, env=env, cwd=home, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        leftover = {pid: _describe(pid) for pid in pids_of_uid(uid)}
        kill_uid(uid)
        shutil.rmtree(home, ignore_errors=True)
    assert report["uid"] == uid
    for name, r in report["results"].items():
        _, statuses, limit, timeout, _ = HOSTILE[name]
        assert r["status"] in statuses, (name, r)
        if limit is not None:
            assert r["limit"] == limit, (name, r)
        assert r["duration"] <= (timeout or WALL) + SLACK, (name, r)
        assert SECRET not in r["stdout"] and SECRET not in r["stderr"], name
    assert report["work_root_empty"]
    return report, leftover


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid to play the non-root trainer needs root")
def test_non_root_trainer_keeps_the_limits(ctx):
    accepted_before = ctx.listener4.accepted
    report, leftover = _run_as_unprivileged_trainer(ctx, NON_ROOT_PROGRAMS, LIMITS)
    results = report["results"]
    if report["pid_isolated"]:
        assert leftover == {}
        assert all(r["leftover"] == [] for r in results.values()), results
    assert 0.5 <= results["infinite_loop"]["cpu_time"] <= 2.5
    assert results["daemon_double_fork_setsid"]["duration"] < WALL
    assert _forbidden_writes(results["write_outside_workdir"]["stdout"], ctx) == []
    assert _leftover_files({NON_ROOT_TRAINER_UID}, ctx.marker) == []
    _assert_no_host_socket(results["host_unix_sockets"]["stdout"], ctx, report["filesystem_isolated"])
    if report["network_isolated"]:
        assert "CONNECTED" not in results["network_to_outside_listener"]["stdout"]
        time.sleep(0.1)
        assert ctx.listener4.accepted == accepted_before
    else:
        pytest.skip("user/network namespaces are unavailable to unprivileged users here")


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid to play the non-root trainer needs root")
def test_non_root_trainer_without_namespaces_keeps_rlimits_and_never_hangs(ctx):
    """The weakest mode (non-root, namespaces off): rlimits still bind, and a daemon holding the output
    pipes cannot make the call hang (it is the documented escape of this mode, killed by the test)."""
    programs = ["infinite_loop", "memory_hog", "open_many_files", "daemon_double_fork_setsid"]
    report, _ = _run_as_unprivileged_trainer(ctx, programs, dict(LIMITS, network_isolation="off"))
    assert not (report["network_isolated"] or report["pid_isolated"] or report["filesystem_isolated"])
    assert report["results"]["daemon_double_fork_setsid"]["duration"] < WALL


FALLBACK_PROGRAMS = ["daemon_double_fork_setsid", "daemon_closes_its_streams", "background_children_then_exit",
                     "fork_bomb", "zombie_army_and_sleep", "write_outside_workdir", "disk_fill_many_files",
                     "memory_hog"]


@pytest.mark.slow
@pytest.mark.parametrize("name", FALLBACK_PROGRAMS)
def test_without_namespaces_root_still_contains(ctx, name):
    """Where the kernel refuses namespaces, the dedicated uid (killed and reaped after every run) and the
    rlimits still contain processes, files and resources; only the network stays reachable."""
    if os.geteuid() != 0:
        pytest.skip("the namespace-free fallback relies on a dedicated uid, which needs root")
    with SandboxPool(SandboxConfig(network_isolation="off", **LIMITS), max_workers=1) as bare:
        assert not (bare.network_isolated or bare.pid_isolated or bare.filesystem_isolated)
        template, statuses, limit, timeout, stdin = HOSTILE[name]
        result = bare.run_sync(ctx.fill(template), stdin=stdin, timeout=timeout)
        assert result.status in statuses, result
        if limit is not None:
            assert result.limit == limit, result
        if name == "write_outside_workdir":
            assert _forbidden_writes(result.stdout, ctx) == [], result.stdout
        _assert_contained(bare, ctx, result, timeout or WALL)
        # The next run on the same uid starts cleanly (no zombie eats its process budget).
        assert bare.run_sync("print('next')").stdout == "next\n"


# --------------------------------------------------------------------------- the judge's warm server
# ``run_tests`` judges every program of a worker slot in one long-lived sandbox (a warm server, pid 1 of
# its namespaces, forks one process per program). Each hostile program goes through it, then a probe
# through the same slot must find a state equal to a brand-new server's: no file, IPC object or process
# of the hostile program, and the server itself untouched.

PROBE = r"""
import json, os
def ls(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return type(exc).__name__
def table(path):
    try:
        return open(path).read().splitlines()[1:]
    except OSError as exc:
        return type(exc).__name__
me, parent = os.getpid(), os.getppid()
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
print(json.dumps({
    "tmp": ls('/tmp'), "var_tmp": ls('/var/tmp'), "dev_shm": ls('/dev/shm'), "cwd": ls('.'),
    "home": ls(os.environ['HOME']),
    "others": [p for p in pids if p not in (1, me, parent)],
    "shm": table('/proc/sysvipc/shm'), "msg": table('/proc/sysvipc/msg'), "sem": table('/proc/sysvipc/sem'),
    "uid": os.getuid(), "marker_env": os.environ.get('PROBE_MARK'),
}, sort_keys=True))
"""

WARM_EXTRA = {
    # SysV IPC objects outlive their creator; each program gets its own IPC namespace.
    "sysv_ipc_leftovers": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('shm', libc.shmget(0x5eed, 4096, 0o1666))\nprint('msg', libc.msgget(0x5eed, 0o1666))\n"
        "print('sem', libc.semget(0x5eed, 1, 0o1666))\n", {"ok"}, None, None, ""),
    # State in the interpreter the next program would see if it shared one.
    "poison_the_interpreter": (
        "import os, json, builtins\nos.environ['PROBE_MARK'] = 'poisoned'\njson.dumps = None\n"
        "builtins.print = None\nopen('/tmp/{marker}-left', 'w').write('x')\n", {"ok"}, None, None, ""),
}


@pytest.fixture(scope="module")
def warm_pool(ctx):
    with SandboxPool(SandboxConfig(**LIMITS), max_workers=1) as p:
        if not p.warm_judge:
            pytest.skip("the warm judge needs root, dedicated uids and pid + mount namespaces")
        yield p


def _probe(pool) -> dict:
    (verdict,), = asyncio.run(pool.run_tests([PROBE + f"# {time.time()}\n"], [TestCase(expected_stdout="")],
                                             time_limit_s=2.0, output_limit_bytes=4096))
    assert verdict.status == "wrong_answer", verdict  # it printed its findings
    return json.loads(verdict.output)


@pytest.mark.parametrize("name", sorted({**HOSTILE, **WARM_EXTRA}))
def test_hostile_program_through_the_warm_judge_leaves_nothing_for_the_next(warm_pool, ctx, name):
    template, _, _, _, stdin = {**HOSTILE, **WARM_EXTRA}[name]
    fresh = _probe(warm_pool)
    server = warm_pool._servers[0]
    start = time.monotonic()
    (verdict,), = asyncio.run(warm_pool.run_tests([ctx.fill(template) + f"# {time.time()}\n"],
                                                  [TestCase(stdin=stdin, expected_stdout="")], time_limit_s=1.0,
                                                  output_limit_bytes=4096))
    elapsed = time.monotonic() - start
    assert verdict.status in ("passed", "wrong_answer", "runtime_error", "timeout", "output_limit"), verdict
    assert SECRET not in verdict.output and SECRET not in verdict.error
    assert ctx.protected_token not in verdict.output
    assert elapsed <= 1.0 + WALL + SLACK, elapsed
    leftover = {uid: pids_of_uid(uid, include_zombies=True) for uid in warm_pool.uids}
    assert all(pids == [] for pids in leftover.values()), leftover
    assert _leftover_files(set(warm_pool.uids), ctx.marker) == []
    assert sorted(os.listdir(ctx.protected_dir)) == ["keep.txt"]
    assert sorted(os.listdir(ctx.readable_dir)) == ["keep.txt"]
    if name == "network_to_outside_listener":
        assert "CONNECTED" not in verdict.output, verdict
    if name == "sysv_ipc_leftovers":
        assert "shm -1" not in verdict.output, verdict  # it did create the objects
    if name == "host_unix_sockets":
        _assert_no_host_socket(verdict.output, ctx)
    after = _probe(warm_pool)
    assert after == fresh, (name, fresh, after)
    assert warm_pool._servers[0] is server, "a contained program must not cost the slot its server"
