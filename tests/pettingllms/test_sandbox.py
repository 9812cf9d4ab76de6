"""Sandbox pool: result classification, config checks, interpreter check, happy paths and status mapping.

The hostile battery lives in ``test_sandbox_hostile.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.agents.code_runner import CodeRunner
from pettingllms.agents.code_runner import ExecutionResult as BaseExecutionResult
from pettingllms.agents.failures import InfrastructureError
from pettingllms.sandbox import (
    LIMITS,
    ExecutionResult,
    SandboxConfig,
    SandboxError,
    SandboxPool,
    classify_exit,
    limit_from_stderr,
    pids_of_uid,
)
from pettingllms.sandbox.pool import _Capture, _namespace_tiers
from pettingllms.sandbox.rootfs import SYSTEM_PATHS, view_plan

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

SMALL = dict(cpu_time_s=1, wall_time_s=3, memory_mb=128, file_size_mb=1, scratch_mb=8, max_processes=16,
             max_open_files=32, max_output_bytes=4096)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(**SMALL), max_workers=2) as p:
        yield p


# --------------------------------------------------------------------------- pure pieces


def test_classify_exit_maps_codes_signals_and_limits():
    kw = dict(cpu_time=0.1, cpu_limit_s=2, stderr="")
    assert classify_exit(kind="exit", value=0, **kw) == ("ok", None, 0)
    assert classify_exit(kind="exit", value=3, **kw) == ("error", None, 3)
    assert classify_exit(kind="signal", value=signal.SIGXCPU, **kw) == ("killed", "cpu_time", -signal.SIGXCPU)
    assert classify_exit(kind="signal", value=signal.SIGXFSZ, **kw) == ("killed", "file_size", -signal.SIGXFSZ)
    assert classify_exit(kind="signal", value=signal.SIGSEGV, **kw) == ("error", None, -signal.SIGSEGV)
    # SIGKILL is the hard CPU limit only when the CPU budget was actually spent.
    assert classify_exit(kind="signal", value=9, cpu_time=2.0, cpu_limit_s=2, stderr="") == (
        "killed", "cpu_time", -9)
    assert classify_exit(kind="signal", value=9, cpu_time=0.3, cpu_limit_s=2, stderr="") == ("error", None, -9)
    assert classify_exit(kind="exit", value=1, cpu_time=0.1, cpu_limit_s=2,
                         stderr="Traceback ...\nMemoryError\n") == ("killed", "memory", 1)
    # A limit marker counts only when the program failed.
    assert classify_exit(kind="exit", value=0, cpu_time=0.1, cpu_limit_s=2, stderr="MemoryError") == (
        "ok", None, 0)
    with pytest.raises(ValueError, match="`kind`"):
        classify_exit(kind="crash", value=1, **kw)


@pytest.mark.parametrize("last_line, limit", [
    ("MemoryError", "memory"),
    ("OSError: [Errno 12] Cannot allocate memory", "memory"),
    ("OSError: [Errno 27] File too large", "file_size"),
    ("OSError: [Errno 24] Too many open files: '/dev/null'", "open_files"),
    ("BlockingIOError: [Errno 11] Resource temporarily unavailable", "processes"),
    ("RuntimeError: can't start new thread", "processes"),
    ("ZeroDivisionError: division by zero", None),
])
def test_limit_from_stderr_reads_the_last_line(last_line, limit):
    assert limit_from_stderr(f"Traceback (most recent call last):\n  File x\n{last_line}\n\n") == limit
    # Only the final exception counts: an earlier MemoryError that was handled does not.
    assert limit_from_stderr(f"MemoryError\nsomething else\n{last_line}") == limit


@given(st.text())
@settings(max_examples=300)
def test_limit_from_stderr_never_raises(text):
    assert limit_from_stderr(text) in (None, *LIMITS)


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(1, 200))
def test_capture_keeps_exactly_the_first_cap_bytes(chunks, cap):
    capture = _Capture(cap)
    for chunk in chunks:
        capture.add(chunk)
    joined = b"".join(chunks)
    assert bytes(capture.data) == joined[:cap]
    assert capture.truncated == (len(joined) > cap)


def test_execution_result_shape_and_validation():
    r = ExecutionResult(status="killed", stdout="a", stderr="b", duration=0.5, returncode=1, limit="memory")
    assert isinstance(r, BaseExecutionResult) and not r.ok
    assert (r.status, r.stdout, r.stderr, r.duration, r.returncode, r.limit) == ("killed", "a", "b", 0.5, 1,
                                                                                  "memory")
    with pytest.raises(ValueError, match="`limit`"):
        ExecutionResult(status="killed", duration=0.1)
    with pytest.raises(ValueError, match="`limit`"):
        ExecutionResult(status="ok", duration=0.1, limit="memory")
    with pytest.raises(ValueError, match="`limit`"):
        ExecutionResult(status="killed", duration=0.1, limit="gpu")
    with pytest.raises(ValueError, match="`status`"):
        ExecutionResult(status="crashed", duration=0.1)
    assert issubclass(SandboxError, InfrastructureError)


@pytest.mark.parametrize("field, value", [
    ("cpu_time_s", 0), ("wall_time_s", -1), ("memory_mb", 8), ("file_size_mb", 0), ("scratch_mb", 0),
    ("max_processes", 0), ("max_open_files", 3), ("max_output_bytes", 0), ("uid_count", 0),
    ("uid_base", 0), ("network_isolation", "maybe"), ("python", "python3"), ("isolation", "loose"),
    ("memory_scope", "cgroup"),
])
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        SandboxConfig(**{field: value})


def test_config_rejects_env_names_with_equals():
    with pytest.raises(ValueError, match="`extra_env`"):
        SandboxConfig(extra_env={"A=B": "x"})


def test_view_plan_binds_the_outermost_folders_and_keeps_the_hosts_symlinks():
    plan = view_plan(["/usr/lib", "/usr/bin/env", "/", "__editable__.pkg.finder.__path_hook__", "/tmp/venv/lib"])
    assert {"/usr", "/etc"} <= set(plan["binds"])
    # Never the host's root, nothing inside another bind, nothing under /tmp (the run's scratch there).
    assert not [b for b in plan["binds"] if b == "/" or b.startswith(("/usr/", "/tmp"))], plan
    links = {link: target for link, target in plan["symlinks"]}
    for path in SYSTEM_PATHS:  # e.g. /bin -> usr/bin on merged-/usr systems: recreated, not bound
        if os.path.islink(path):
            assert links[path] == os.readlink(path) and path not in plan["binds"]


def test_namespace_tiers_strongest_first():
    root = _namespace_tiers("auto", as_root=True)
    assert root[0]["net"] and root[0]["pid"] and root[0]["mount"] and not root[0]["user"]
    assert not any(root[-1].values())
    assert _namespace_tiers("auto", as_root=False)[0]["user"]
    assert _namespace_tiers("off", as_root=True) == [root[-1]]


# --------------------------------------------------------------------------- pool start-up


def _refusing(kernel_refuses: str, monkeypatch) -> None:
    """Make the start-up probe fail as a kernel would for every namespace set that includes
    ``kernel_refuses`` (the launcher's unshare() gets EPERM); other sets are probed for real."""
    real = SandboxPool._probe

    def probe(self, python, namespaces, cgroup=None):
        if namespaces[kernel_refuses]:
            return {"kind": "setup_error", "stage": "unshare",
                    "message": "unshare(0x6e020000) failed: [Errno 1] Operation not permitted"}, ""
        return real(self, python, namespaces, cgroup)

    monkeypatch.setattr(SandboxPool, "_probe", probe)


@needs_linux
def test_strict_isolation_refuses_a_refused_namespace_and_best_effort_runs_without_it(monkeypatch):
    _refusing("mount", monkeypatch)
    with pytest.raises(SandboxError, match=r"refused the mount namespace\(s\) that SandboxConfig.isolation="
                                           r"'strict' requires \(\[.*\]: unshare: .*Operation not permitted\)") as info:
        SandboxPool(SandboxConfig(**SMALL), max_workers=1)
    assert "SandboxConfig(isolation='best_effort')" in str(info.value)  # how to opt in
    with SandboxPool(SandboxConfig(isolation="best_effort", **SMALL), max_workers=1) as weak:
        assert (weak.network_isolated, weak.pid_isolated, weak.filesystem_isolated) == (True, True, False)
        assert any("'mount'" in note and "Operation not permitted" in note for note in weak.isolation_notes)
        assert weak.run_sync("print('still runs')").stdout == "still runs\n"


@needs_linux
def test_required_network_namespace_is_refused_even_under_best_effort(monkeypatch):
    _refusing("net", monkeypatch)
    with pytest.raises(SandboxError, match="refused the net, pid, mount, ipc, uts namespace"):
        SandboxPool(SandboxConfig(**SMALL), max_workers=1)
    with pytest.raises(SandboxError, match="network_isolation='require' but network namespaces are unavailable"):
        SandboxPool(SandboxConfig(isolation="best_effort", network_isolation="require", **SMALL), max_workers=1)


@needs_linux
def test_network_isolation_off_is_an_explicit_opt_out_that_strict_accepts():
    with SandboxPool(SandboxConfig(network_isolation="off", **SMALL), max_workers=1) as bare:
        assert not (bare.network_isolated or bare.pid_isolated or bare.filesystem_isolated)
        assert "namespaces disabled by network_isolation='off'" in bare.isolation_notes


def test_pool_rejects_bad_max_workers():
    with pytest.raises(ValueError, match="`max_workers`"):
        SandboxPool(SandboxConfig(), max_workers=0)


@needs_linux
def test_missing_interpreter_is_a_sandbox_error_naming_the_path():
    with pytest.raises(SandboxError, match="/nonexistent/bin/python3"):
        SandboxPool(SandboxConfig(python="/nonexistent/bin/python3"), max_workers=1)


@needs_linux
@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops to a uid that can be locked out")
def test_interpreter_unreachable_to_the_sandbox_user_is_named(tmp_path):
    hidden = tempfile.mkdtemp(prefix="sandbox-hidden-")
    try:
        os.chmod(hidden, 0o700)  # root-only, like /root/.pyenv
        python = os.path.join(hidden, "python3")
        shutil.copy2(os.path.realpath(shutil.which("python3") or sys.executable), python)
        with pytest.raises(SandboxError, match=f"cannot execute the interpreter '{python}'") as info:
            SandboxPool(SandboxConfig(python=python), max_workers=1)
        assert "/usr/bin/python3" in str(info.value)  # the message says how to fix it
        assert f"inside {hidden}, which other users cannot enter (mode 700)" in str(info.value)  # the real cause
    finally:
        shutil.rmtree(hidden)


def test_the_real_cause_of_an_unreachable_interpreter_is_a_folder_on_the_way_a_symlink_leads_into():
    from pettingllms.sandbox.pool import _unreachable

    base = Path(tempfile.mkdtemp(prefix="sandbox-reach-"))  # under /tmp, which everyone may enter
    try:
        base.chmod(0o755)
        hidden, shown = base / "hidden", base / "shown"
        hidden.mkdir(mode=0o700)
        shown.mkdir(mode=0o755)
        (hidden / "python3").write_text("")
        (shown / "python").symlink_to(hidden / "python3")  # a venv's bin/python into a root-only pyenv, say
        assert _unreachable(str(shown / "python")) == (
            f"a symlink to {hidden / 'python3'}, inside {hidden}, which other users cannot enter (mode 700)"
        )
        assert _unreachable(str(hidden / "python3")) == f"inside {hidden}, which other users cannot enter (mode 700)"
        (shown / "python3").write_text("")
        assert _unreachable(str(shown / "python3")) is None
    finally:
        shutil.rmtree(base)


@needs_linux
def test_default_interpreter_is_one_the_sandbox_user_can_run(pool):
    result = pool.run_sync("import sys; print(sys.executable)")
    assert result.status == "ok", result
    assert result.stdout.strip() == pool.python
    if os.geteuid() == 0:
        assert set(pool.uids).isdisjoint({0}) and len(set(pool.uids)) == pool.max_workers


@needs_linux
def test_two_pools_never_share_a_sandbox_uid(pool):
    with SandboxPool(SandboxConfig(**SMALL), max_workers=2) as other:
        if os.geteuid() == 0:
            assert set(other.uids).isdisjoint(pool.uids)
        assert other.run_sync("print('hi')").stdout == "hi\n"


@needs_linux
@pytest.mark.skipif(os.geteuid() != 0, reason="naming an account needs root")
def test_named_user_mode_runs_as_that_account():
    with SandboxPool(SandboxConfig(user="nobody", **SMALL), max_workers=1) as p:
        result = p.run_sync("import os; print(os.getuid(), os.getgid(), os.getgroups())")
    assert result.status == "ok", result
    uid, gid, groups = result.stdout.split(" ", 2)
    assert int(uid) == 65534 and int(gid) == 65534 and groups.strip() == "[]"


def test_closed_pool_refuses_runs():
    p = SandboxPool(SandboxConfig(**SMALL), max_workers=1)
    root = p.work_root
    p.close()
    assert not os.path.exists(root)
    with pytest.raises(SandboxError, match="closed"):
        p.run_sync("print(1)")


# --------------------------------------------------------------------------- happy paths and statuses


@needs_linux
def test_stdout_stdin_and_exit_codes(pool):
    r = pool.run_sync("import sys\ndata = sys.stdin.read()\nprint(data.upper(), end='')\n", stdin="héllo\n")
    assert (r.status, r.stdout, r.stderr, r.returncode, r.limit) == ("ok", "HÉLLO\n", "", 0, None)
    assert 0 < r.duration < 3 and r.cpu_time is not None and r.cpu_time >= 0
    r = pool.run_sync("import sys\nprint('partial')\nsys.exit(7)\n")
    assert (r.status, r.returncode, r.stdout) == ("error", 7, "partial\n")
    r = pool.run_sync("1 / 0\n")
    assert r.status == "error" and r.returncode == 1 and "ZeroDivisionError" in r.stderr
    r = pool.run_sync("def broken(:\n")
    assert r.status == "error" and "SyntaxError" in r.stderr
    r = pool.run_sync("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert (r.status, r.returncode) == ("error", -signal.SIGSEGV)


@needs_linux
def test_status_mapping_for_each_limit(pool):
    cases = {
        "wall_time": ("import time\ntime.sleep(30)\n", 1.0, "timeout"),
        "cpu_time": ("while True:\n    pass\n", 3.0, "killed"),
        "memory": ("x = bytearray(512 << 20)\n", None, "killed"),
        "file_size": ("open('f', 'wb').write(b'x' * (2 << 20))\n", None, "killed"),
        "open_files": ("fs = [open('/dev/null') for _ in range(100)]\n", None, "killed"),
        "output": ("print('y' * 100000)\n", None, "killed"),
    }
    for limit, (code, timeout, status) in cases.items():
        r = pool.run_sync(code, timeout=timeout)
        assert (r.status, r.limit) == (status, limit), (limit, r)
    r = pool.run_sync("import time\ntime.sleep(30)\n", timeout=1.0)
    assert r.returncode is None and 1.0 <= r.duration < 2.5


@needs_linux
def test_output_is_capped_and_marked_truncated(pool):
    cap = pool.config.max_output_bytes
    r = pool.run_sync("import sys\nsys.stdout.write('a' * 3000)\nsys.stderr.write('b' * 3000)\n")
    assert r.status == "ok" and r.stdout == "a" * 3000 and not r.stdout_truncated
    r = pool.run_sync(f"print('z' * {cap * 3})")
    assert r.status == "killed" and r.limit == "output"
    assert r.stdout == "z" * cap and r.stdout_truncated and not r.stderr_truncated


@needs_linux
def test_invalid_utf8_output_is_replaced_not_raised(pool):
    r = pool.run_sync("import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe')\n")
    assert r.status == "ok" and r.stdout == "ok\ufffd\ufffd"


@needs_linux
def test_minimal_environment_and_private_workdir(pool):
    r = pool.run_sync("import os, stat\nst = os.stat('.')\n"
                      "print(','.join(sorted(os.environ)))\n"
                      "print(oct(stat.S_IMODE(st.st_mode)), st.st_uid == os.getuid())\n"
                      "print(os.getcwd() == os.environ['HOME'])\n")
    assert r.status == "ok", r
    names, mode_line, home_line = r.stdout.splitlines()
    assert names.split(",") == sorted(["HOME", "LANG", "LC_ALL", "LOGNAME", "PATH", "PYTHONDONTWRITEBYTECODE",
                                       "PYTHONIOENCODING", "TMPDIR", "USER"])
    assert mode_line == "0o700 True" and home_line == "True"


@needs_linux
def test_concurrency_is_bounded_by_max_workers(pool):
    # Four 0.6 s sleeps on two workers need two rounds: >= 1.2 s in all, and never more than two at once.
    async def go():
        return await asyncio.gather(*(pool.run("import time\ntime.sleep(0.6)\nprint('done')") for _ in range(4)))

    start = time.monotonic()
    results = asyncio.run(go())
    elapsed = time.monotonic() - start
    assert [r.stdout for r in results] == ["done\n"] * 4
    assert elapsed >= 1.2


@needs_linux
def test_cancelled_run_leaves_nothing_behind(pool):
    async def go():
        task = asyncio.ensure_future(pool.run("import time\ntime.sleep(30)\n", timeout=20))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    time.sleep(0.1)
    if os.geteuid() == 0:
        assert all(pids_of_uid(uid) == [] for uid in set(pool.uids))
    assert os.listdir(pool.work_root) == []


@needs_linux
def test_run_sync_refuses_a_running_loop(pool):
    async def go():
        pool.run_sync("print(1)")

    with pytest.raises(RuntimeError, match="running event loop"):
        asyncio.run(go())


def test_pool_satisfies_the_code_runner_protocol(pool):
    assert isinstance(pool, CodeRunner)


@needs_linux
def test_run_rejects_bad_arguments(pool):
    with pytest.raises(TypeError, match="`code`"):
        pool.run_sync(b"print(1)")
    with pytest.raises(ValueError, match="`timeout`"):
        pool.run_sync("print(1)", timeout=float("nan"))


@needs_linux
@given(st.text(max_size=200))
@settings(max_examples=40, deadline=None)
def test_arbitrary_text_as_code_never_raises(pool, code):
    r = pool.run_sync(code, timeout=3)
    assert r.status in ("ok", "error", "killed", "timeout")
    assert r.duration >= 0 and r.duration == r.duration


def test_work_root_is_private_to_root_and_sandbox(pool):
    mode = stat.S_IMODE(os.stat(pool.work_root).st_mode)
    assert mode == 0o711
