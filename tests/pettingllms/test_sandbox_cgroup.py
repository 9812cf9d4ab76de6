"""Memory per run: a memory cgroup per sandboxed run (``pettingllms/sandbox/cgroup.py``).

The cgroup layouts are checked against fake cgroup folders (plain files in ``tmp_path``, with the
mountinfo and ``/proc/self/cgroup`` lines that point at them); the real thing runs where this process
may make memory cgroups (root with cgroup v1 or v2's memory controller), and is skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

import pettingllms.sandbox.pool as pool_module
from pettingllms.sandbox import SandboxConfig, SandboxError, SandboxPool, TestCase
from pettingllms.sandbox.cgroup import find_memory_cgroup

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

MEMORY_MB = 128
# Generous time limits: these runs must end on memory, and on a loaded machine page faults of 4 x 77 MiB
# could reach a tight CPU or wall limit first.
LIMITS = dict(cpu_time_s=10, wall_time_s=20, memory_mb=MEMORY_MB, file_size_mb=1, scratch_mb=8,
              max_processes=16, max_open_files=32, max_output_bytes=4096)
# Four children each touching 0.6 x memory_mb at the same time: every process stays under the
# per-process limit (RLIMIT_AS), the run as a whole needs 2.4 x memory_mb.
FOUR_CHILDREN = f"""
import os, time
size = int({MEMORY_MB} * 0.6) << 20
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b'\\x01' * size
        time.sleep(0.4)
        os._exit(0)
    children.append(pid)
print(sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children))
"""


def _write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _drop_control_files(folder: str) -> None:
    """What the kernel does on rmdir of a cgroup: its control files go with it (here they are plain
    files that would keep the folder from being removed)."""
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            os.remove(os.path.join(dirpath, name))


# --------------------------------------------------------------------------- layouts on fake folders


def test_v2_delegated_cgroup_moves_the_trainer_to_a_leaf_and_limits_each_run(tmp_path):
    mount = tmp_path / "cgroup2"
    scope = mount / "user.slice" / "trainer.scope"
    _write(scope / "cgroup.controllers", "cpu memory pids\n")
    _write(scope / "cgroup.subtree_control", "")
    _write(scope / "cgroup.procs", f"{os.getpid()}\n")
    stale = scope / "pettingllms-sandbox-999999999-dead" / "run-3"  # a crashed pool's (pid past pid_max)
    stale.mkdir(parents=True)
    mountinfo = f"30 25 0:26 / {mount} rw,nosuid,nodev - cgroup2 cgroup2 rw\n"
    found, why = find_memory_cgroup("0::/user.slice/trainer.scope\n", mountinfo)
    assert why == "" and found is not None and found.version == 2
    assert os.path.dirname(found.path) == str(scope)
    assert os.path.basename(found.path).startswith(f"pettingllms-sandbox-{os.getpid()}-")
    # v2's "no internal processes": the trainer left for a leaf, then the scope gave memory to children.
    assert (scope / f"pettingllms-trainer-{os.getpid()}" / "cgroup.procs").read_text() == str(os.getpid())
    assert (scope / "cgroup.subtree_control").read_text() == "+memory"
    assert open(os.path.join(found.path, "cgroup.subtree_control")).read() == "+memory"
    assert not stale.parent.exists()
    run = found.create(96 << 20)
    assert open(os.path.join(run, "memory.max")).read() == str(96 * 1024 * 1024)
    assert not os.path.exists(os.path.join(run, "memory.swap.max"))  # absent files are not made up
    assert found.oom_kills(run) == 0  # no memory.events yet
    with open(os.path.join(run, "memory.events"), "w") as f:
        f.write("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n")
    assert found.oom_kills(run) == 2
    _drop_control_files(found.path)
    assert found.remove(run) and not os.path.exists(run)
    found.close()
    assert not os.path.exists(found.path)


def test_v2_cgroup_is_refused_when_shared_or_without_the_memory_controller(tmp_path):
    mount = tmp_path / "cgroup2"
    mountinfo = f"30 25 0:26 / {mount} rw - cgroup2 cgroup2 rw\n"
    shared = mount / "shared"
    _write(shared / "cgroup.controllers", "memory pids\n")
    _write(shared / "cgroup.subtree_control", "")
    _write(shared / "cgroup.procs", f"{os.getpid()}\n1\n")
    found, why = find_memory_cgroup("0::/shared\n", mountinfo)
    assert found is None and "holds other processes than the trainer (2 in all)" in why
    assert (shared / "cgroup.procs").read_text() == f"{os.getpid()}\n1\n"  # nobody was moved
    bare = mount / "bare"
    _write(bare / "cgroup.controllers", "cpu pids\n")
    _write(bare / "cgroup.subtree_control", "")
    _write(bare / "cgroup.procs", f"{os.getpid()}\n")
    found, why = find_memory_cgroup("0::/bare\n", mountinfo)
    assert found is None and f"the memory controller is not delegated to {bare}" in why
    found, why = find_memory_cgroup("0::/bare\n", "")
    assert found is None and why == "no cgroup file system is mounted"


def test_v1_memory_hierarchy_limits_memory_and_reads_the_oom_counter(tmp_path):
    mount = tmp_path / "memory"
    own = mount / "session" / "job"
    own.mkdir(parents=True)
    mountinfo = (f"35 31 0:32 / {mount} rw,relatime - cgroup cgroup rw,memory\n"
                 f"36 31 0:33 / {tmp_path / 'pids'} rw,relatime - cgroup cgroup rw,pids\n")
    found, why = find_memory_cgroup("5:pids:/\n4:memory:/session/job\n0::/\n", mountinfo)
    assert why == "" and found is not None and found.version == 1
    assert os.path.dirname(found.path) == str(own)
    run = found.create(200 << 20)
    assert open(os.path.join(run, "memory.limit_in_bytes")).read() == str(200 << 20)
    with open(os.path.join(run, "memory.oom_control"), "w") as f:
        f.write("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    assert found.oom_kills(run) == 3
    os.remove(os.path.join(run, "memory.oom_control"))  # a kernel before 4.13: no kill counter
    with open(os.path.join(run, "memory.failcnt"), "w") as f:
        f.write("5\n")  # hits of the limit that reclaim absorbed: not kills
    assert found.oom_kills(run) == 0
    _drop_control_files(found.path)
    found.close()
    assert os.listdir(own) == []


# --------------------------------------------------------------------------- the pool


def test_memory_scope_run_refuses_to_start_without_a_cgroup(monkeypatch):
    monkeypatch.setattr(pool_module, "find_memory_cgroup", lambda: (None, "test: no cgroup here"))
    with pytest.raises(SandboxError, match=r"memory_scope='run' needs a memory cgroup.*test: no cgroup here"):
        SandboxPool(SandboxConfig(memory_scope="run", **LIMITS), max_workers=1)
    with SandboxPool(SandboxConfig(**LIMITS), max_workers=1) as p:
        assert not p.memory_per_run
        assert "memory is limited per process (RLIMIT_AS), not per run: no memory cgroup (test: no cgroup " \
               "here)" in p.isolation_notes


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(SandboxConfig(**LIMITS), max_workers=1) as p:
        if not p.memory_per_run:
            pytest.skip(f"no memory cgroup here: {p.isolation_notes}")
        yield p


def _cgroup_folders(path: str) -> list[str]:
    return sorted(e.name for e in os.scandir(path) if e.is_dir())


@needs_linux
def test_four_children_over_the_run_limit_are_killed_for_memory(pool):
    result = pool.run_sync(FOUR_CHILDREN)
    assert (result.status, result.limit) == ("killed", "memory"), result
    assert "-9" in result.stdout, result  # the OOM killer's SIGKILL, seen by the parent
    # The per-process limit alone lets the same program through: 2.4 x memory_mb in all.
    with SandboxPool(SandboxConfig(memory_scope="process", **LIMITS), max_workers=1) as per_process:
        assert not per_process.memory_per_run
        free = per_process.run_sync(FOUR_CHILDREN)
    assert (free.status, free.stdout) == ("ok", "[0, 0, 0, 0]\n"), free


@needs_linux
def test_every_run_cgroup_is_removed(pool):
    parent = os.path.dirname(pool._cgroups[0].path)
    before = _cgroup_folders(pool._cgroups[0].path)
    programs = [(FOUR_CHILDREN, None), ("import time\ntime.sleep(30)\n", 1.0), ("raise SystemExit(3)", None)]
    statuses = [pool.run_sync(code, timeout=timeout).status for code, timeout in programs + [("print(1)", None)] * 8]
    assert statuses == ["killed", "timeout", "error"] + ["ok"] * 8
    assert _cgroup_folders(pool._cgroups[0].path) == before
    with SandboxPool(SandboxConfig(**LIMITS), max_workers=1) as other:
        assert other.run_sync("print(1)").stdout == "1\n"
        assert os.path.dirname(other._cgroups[0].path) == parent
        mine = os.path.basename(other._cgroups[0].path)
        assert mine in _cgroup_folders(parent)
    assert mine not in _cgroup_folders(parent)  # the pool's own folder goes with close()


@needs_linux
def test_warm_judge_programs_share_no_memory_budget_and_report_oom(pool):
    if not pool.warm_judge:
        pytest.skip("the warm judge needs root, dedicated uids and pid + mount namespaces")
    killed = pool.counts["killed"]
    tests = [TestCase(stdin="", expected_stdout="[0, 0, 0, 0]\n")]
    (verdict,), = asyncio.run(pool.run_tests([FOUR_CHILDREN], tests, time_limit_s=3.0, output_limit_bytes=256))
    assert verdict.status == "wrong_answer" and "-9" in verdict.output, verdict
    assert pool.counts["killed"] == killed + 1  # the harness run is reported as killed for memory
    server = pool._servers[0]
    assert server.cgroup is not None and os.path.isdir(server.cgroup)
    # The next program of the slot gets the whole budget again: 0.55 x memory_mb in one process passes.
    size = int(MEMORY_MB * 0.55) << 20
    (after,), = asyncio.run(pool.run_tests([f"print(len(b'x' * {size}))"],
                                           [TestCase(stdin="", expected_stdout=f"{size}\n")], time_limit_s=3.0,
                                           output_limit_bytes=256))
    assert after.status == "passed", after
    assert pool._servers[0] is server
    cgroup = server.cgroup
    server.stop()
    assert not os.path.exists(cgroup)
