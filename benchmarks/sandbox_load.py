"""Sandbox load benchmark: many short, often hostile programs through one :class:`SandboxPool`, then a
search for anything they or the pool left behind.

The programs: a seeded mix (``--seed``) of the kinds in ``KINDS``, a few variants each, every one with
the outcome it must get (:func:`make_program`): ``correct`` -> ``ok`` and the answer this script computes;
``exception`` -> ``error``, exit 1; ``exit`` (``sys.exit(3)``, 7, 42) and ``crash`` (``os.abort()``, a
segfault) -> ``error`` with that code or ``-signal``; ``loop`` -> ``timeout`` at ``--loop-timeout``;
``memory`` -> ``killed``/``memory``; ``output`` -> ``killed``/``output``; ``fork_bomb`` and ``daemon``
(``setsid`` double forks, background children) -> ``ok``, and all they started dies with the run;
``files`` (left in ``/tmp``, ``/var/tmp``, ``/dev/shm``, the working directory) -> ``ok``; ``judged``
(2 tests through ``pool.run_tests``, the warm judge where the pool has one) -> the verdicts.

Every other kind goes through ``pool.run``. The benchmark keeps ``workers`` programs in flight (the
pool's ``max_workers``), so a latency is one program's service time, not its wait in a queue. A result
that differs from its kind's expectation is a *mismatch*: counted per kind, the first few kept in full.

Leaks, measured around the run (after an untimed warm-up of every kind, which also starts the judge
server of every slot); a process or file gets ``SETTLE_S`` to disappear (a killed tree being reaped):

* processes: descendants of this process and processes (zombies too) of the pool's uids: after the run
  none that was not there after the warm-up; after ``pool.close()`` none that was not there before;
* open file descriptors of this process (``/proc/self/fd``): after the run = after the warm-up, after
  close = before the pool;
* reserved uids: after close no fd of this process on a uid lock file, and a pool restricted to each of
  the uids (``uid_base=uid, uid_count=1``) starts (as root; as non-root programs keep the trainer's uid
  and nothing is reserved);
* scratch files: new entries of ``pool.work_root`` (which must be gone after close), and entries of
  ``/tmp``, ``/var/tmp``, ``/dev/shm`` owned by a pool uid (as root) or named with this run's marker;
* memory cgroups the pool makes (``pettingllms-sandbox-<pid>-*`` beside or below this process's own):
  no child left after the run, none of them after close;
* RSS of this process: before, after the warm-up, after the run, after close; growth from the warm-up
  to the end of the run above ``--rss-growth-limit-mb`` is a leak.

The benchmark prints every leak and mismatch it finds and then exits 1.

    python -m benchmarks.sandbox_load                          # 10,000 programs, 1 and 2 workers (~30 min)
    python -m benchmarks.sandbox_load --programs 1000 --workers 1 2

Prints a table and writes ``benchmarks/results/sandbox_load.json`` (see ``README.md`` for the fields).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import platform
import random
import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from comlrl.atomic_io import atomic_write_json
from pettingllms.sandbox import SandboxConfig, SandboxError, SandboxPool, TestCase
from pettingllms.sandbox.processes import scratch_entries

#: Seconds a killed process or a removed file may take to disappear before it counts as a leak.
SETTLE_S = 1.0
#: Mismatches kept in full per kind (the rest are counted).
EXAMPLES_PER_KIND = 3
DEFAULT_CONFIG = {"cpu_time_s": 2.0, "wall_time_s": 5.0, "memory_mb": 256, "max_processes": 32,
                  "max_output_bytes": 1 << 16}
JUDGE_TIME_LIMIT_S = 2.0


@dataclass(frozen=True)
class Program:
    """One program of the mix and what its result must be (``None``: not checked)."""

    kind: str
    variant: str
    code: str
    stdin: str = ""
    timeout: float | None = None
    status: str = "ok"
    limit: str | None = None
    returncode: int | None = None
    stdout: str | None = None
    stderr_last: str | None = None  # start of stderr's last non-empty line
    verdicts: tuple[str, ...] | None = None  # ``judged``: one TestVerdict status per test


# --------------------------------------------------------------------------- the mix
def _correct(rng: random.Random, tag: str) -> tuple[str, str, str, str]:
    nums = [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 12))]
    stdin = " ".join(map(str, nums)) + "\n"
    variant = rng.choice(["sum", "sorted", "max_min"])
    head = f"# {tag}\nimport sys\nnums = [int(x) for x in sys.stdin.read().split()]\n"
    if variant == "sum":
        return variant, head + "print(sum(nums))\n", stdin, f"{sum(nums)}\n"
    if variant == "sorted":
        return variant, head + "print(*sorted(nums))\n", stdin, " ".join(map(str, sorted(nums))) + "\n"
    return variant, head + "print(max(nums), min(nums))\n", stdin, f"{max(nums)} {min(nums)}\n"


_EXCEPTIONS = {"ValueError": "raise ValueError('bad input')", "ZeroDivisionError": "print(1 // 0)",
               "KeyError": "print({}['missing'])", "AssertionError": "assert 1 + 1 == 3",
               "RecursionError": "def f(n):\n    return f(n + 1)\nf(0)"}
_LOOPS = {"busy": "while True:\n    pass", "counting": "n = 0\nwhile True:\n    n += 1",
          "sleep": "import time\ntime.sleep(600)"}
_FLOODS = {"stdout": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
           "stderr": "import sys\nwhile True:\n    sys.stderr.write('e' * 65536)",
           "lines": "i = 0\nwhile True:\n    print('line', i)\n    i += 1"}
# The first process prints and exits 0 once fork fails; every other one sleeps until killed.
_FORK_BOMB = ("import os, time\nroot = os.getpid()\nwhile True:\n    try:\n        os.fork()\n"
              "    except OSError:\n        break\nif os.getpid() == root:\n    print('bomb stopped')\n"
              "else:\n{tail}")
_DAEMONS = {
    "setsid_double_fork": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                          "        time.sleep(600)\n    os._exit(0)\nos.wait()\nprint('daemon started')",
    "closed_streams": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    for fd in (0, 1, 2):\n"
                      "        os.close(fd)\n    if os.fork() == 0:\n        time.sleep(600)\n    os._exit(0)\n"
                      "os.wait()\nprint('daemon started')",
    "background_children": "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
                           "        time.sleep(600)\n        os._exit(0)\nprint('daemon started')",
}


def _files_code(tag: str) -> str:
    """Writes into every scratch folder and the working directory; exit 0 whatever is refused."""
    return (f"import os\nnames = ['/tmp/{tag}-t', '/var/tmp/{tag}-v', '/dev/shm/{tag}-s', '{tag}-cwd']\n"
            f"os.makedirs('{tag}-dir/a/b', exist_ok=True)\nnames.append('{tag}-dir/a/b/deep')\n"
            "for name in names:\n    try:\n        with open(name, 'w') as f:\n            f.write('x' * 4096)\n"
            f"    except OSError:\n        pass\nos.chmod('{tag}-dir', 0)\nprint('files written')")


def _judged(rng: random.Random, tag: str) -> tuple[str, str, tuple[str, ...]]:
    variant = rng.choice(["correct", "wrong", "raises", "daemon_then_correct", "files_then_correct"])
    body = {"correct": "print(sum(nums))", "wrong": "print(sum(nums) + 1)", "raises": "raise ValueError(nums)",
            "daemon_then_correct": "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                                   "    time.sleep(600)\nprint(sum(nums))",
            "files_then_correct": f"open('/tmp/{tag}-judged', 'w').write('x')\nopen('left', 'w').write('x')\n"
                                  "print(sum(nums))"}[variant]
    code = f"# {tag}\nimport sys\nnums = [int(x) for x in sys.stdin.read().split()]\n{body}\n"
    status = {"wrong": "wrong_answer", "raises": "runtime_error"}.get(variant, "passed")
    return variant, code, (status, status)


JUDGE_TESTS = (TestCase(stdin="1 2 3\n", expected_stdout="6\n"), TestCase(stdin="-5 5 7\n", expected_stdout="7\n"))

#: Kinds and their weights in the mix (of 100).
KINDS: dict[str, int] = {"correct": 25, "exception": 8, "exit": 6, "crash": 6, "loop": 5, "memory": 8,
                         "output": 8, "fork_bomb": 6, "daemon": 8, "files": 10, "judged": 10}


def make_program(kind: str, rng: random.Random, tag: str, config: SandboxConfig, loop_timeout: float) -> Program:
    """One program of ``kind`` (its variant drawn from ``rng``). ``tag`` (file-name safe, holding the
    run's marker) makes its source unique and names the files it leaves, so that a leftover is found."""
    head = f"# {tag}\n"
    if kind == "correct":
        variant, code, stdin, out = _correct(rng, tag)
        return Program(kind, variant, code, stdin, returncode=0, stdout=out)
    if kind == "exception":
        name = rng.choice(sorted(_EXCEPTIONS))
        return Program(kind, name, head + _EXCEPTIONS[name] + "\n", status="error", returncode=1, stderr_last=name)
    if kind == "exit":
        code = rng.choice([3, 7, 42])
        return Program(kind, f"exit_{code}", head + f"import sys\nsys.exit({code})\n", status="error", returncode=code,
                       stdout="")
    if kind == "crash":
        variant = rng.choice(["abort", "segfault"])
        code = "import os\nos.abort()\n" if variant == "abort" else "import ctypes\nctypes.string_at(0)\n"
        sig = signal.SIGABRT if variant == "abort" else signal.SIGSEGV
        return Program(kind, variant, head + code, status="error", returncode=-int(sig))
    if kind == "loop":
        name = rng.choice(sorted(_LOOPS))
        return Program(kind, name, head + _LOOPS[name] + "\n", timeout=loop_timeout, status="timeout",
                       limit="wall_time")
    if kind == "memory":
        over = config.memory_mb + 64  # MiB: more than the address space allows
        variants = {"one_block": f"x = bytearray({over} << 20)",
                    "list": f"x = [0] * ({over} << 17)",  # 8-byte slots
                    "growing": "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))"}
        name = rng.choice(sorted(variants))
        return Program(kind, name, head + variants[name] + "\n", status="killed", limit="memory")
    if kind == "output":
        name = rng.choice(sorted(_FLOODS))
        return Program(kind, name, head + _FLOODS[name] + "\n", status="killed", limit="output")
    if kind == "fork_bomb":
        name = rng.choice(["sleep", "deaf"])  # deaf: ignores the signals a polite kill would send
        tail = "    time.sleep(600)\n" if name == "sleep" else \
            "    import signal\n    for s in (1, 2, 15):\n        signal.signal(s, signal.SIG_IGN)\n    time.sleep(600)\n"
        return Program(kind, name, head + _FORK_BOMB.format(tail=tail), returncode=0, stdout="bomb stopped\n")
    if kind == "daemon":
        name = rng.choice(sorted(_DAEMONS))
        return Program(kind, name, head + _DAEMONS[name] + "\n", returncode=0, stdout="daemon started\n")
    if kind == "files":
        return Program(kind, "scratch_and_cwd", head + _files_code(tag) + "\n", returncode=0,
                       stdout="files written\n")
    if kind == "judged":
        variant, code, verdicts = _judged(rng, tag)
        return Program(kind, variant, code, verdicts=verdicts)
    raise ValueError(f"`kind` must be one of {sorted(KINDS)}, got {kind!r}")


def make_programs(count: int, seed: int, marker: str, config: SandboxConfig, loop_timeout: float) -> list[Program]:
    """``count`` programs: every kind once (when ``count`` allows), the rest drawn by ``KINDS``'
    weights, shuffled; the same ``seed`` gives the same kinds and variants."""
    rng = random.Random(seed)
    names = sorted(KINDS)
    kinds = names[:count] + rng.choices(names, weights=[KINDS[k] for k in names], k=max(0, count - len(names)))
    rng.shuffle(kinds)
    return [make_program(kind, rng, f"{marker}-{i}", config, loop_timeout) for i, kind in enumerate(kinds)]


def mismatch(program: Program, result) -> str | None:
    """How ``result`` (an ExecutionResult, a list of TestVerdicts for ``judged``, or the exception the
    pool raised) differs from what ``program`` must get; ``None`` when it matches."""
    if isinstance(result, BaseException):
        return f"raised {type(result).__name__}: {result}"
    if program.verdicts is not None:
        got = tuple(v.status for v in result)
        return None if got == program.verdicts else f"verdicts {got}, expected {program.verdicts}"
    problems = []
    if (result.status, result.limit) != (program.status, program.limit):
        problems.append(f"status {result.status}/{result.limit}, expected {program.status}/{program.limit}")
    if program.returncode is not None and result.returncode != program.returncode:
        problems.append(f"returncode {result.returncode}, expected {program.returncode}")
    if program.stdout is not None and result.stdout != program.stdout:
        problems.append(f"stdout {result.stdout[:80]!r}, expected {program.stdout[:80]!r}")
    if program.stderr_last is not None:
        last = next((line.strip() for line in reversed(result.stderr.splitlines()) if line.strip()), "")
        if not last.startswith(program.stderr_last):
            problems.append(f"stderr ends {last[:80]!r}, expected {program.stderr_last}")
    return "; ".join(problems) + f" (stderr tail {result.stderr[-200:]!r})" if problems else None


# --------------------------------------------------------------------------- running
async def run_one(pool: SandboxPool, program: Program):
    """The program's result (its verdict list for ``judged``), or the exception the pool raised: a
    mismatch to report, and the next 9,999 programs still run."""
    try:
        if program.verdicts is not None:
            return (await pool.run_tests([program.code], list(JUDGE_TESTS), time_limit_s=JUDGE_TIME_LIMIT_S,
                                            output_limit_bytes=4096))[0]
        return await pool.run(program.code, stdin=program.stdin, timeout=program.timeout)
    except Exception as exc:  # noqa: BLE001 - SandboxError, or a bug of the pool
        return exc


async def run_batch(pool: SandboxPool, programs: list[Program], workers: int,
                    progress: Callable[[int, float, int], None] | None = None) -> list[tuple[float, str | None]]:
    """(seconds, mismatch) per program, with ``workers`` programs in flight; ``progress(done, seconds,
    mismatches)`` at every tenth of the batch."""
    records: list[tuple[float, str | None] | None] = [None] * len(programs)
    queue = iter(range(len(programs)))
    start = time.perf_counter()
    marks = {max(1, round(len(programs) * k / 10)) for k in range(1, 11)}
    done = [0, 0]  # programs, mismatches

    async def worker() -> None:
        for index in queue:
            began = time.perf_counter()
            result = await run_one(pool, programs[index])
            records[index] = (time.perf_counter() - began, mismatch(programs[index], result))
            done[0] += 1
            done[1] += records[index][1] is not None
            if progress is not None and done[0] in marks:
                progress(done[0], time.perf_counter() - start, done[1])

    await asyncio.gather(*(worker() for _ in range(workers)))
    return records  # type: ignore[return-value]


# --------------------------------------------------------------------------- leak measurements
def _proc_table() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (ppid, real uid, state, name) of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields: dict[str, str] = {}
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    if key in ("Name", "State", "PPid", "Uid"):
                        fields[key] = value.strip()
        except OSError:
            continue  # it ended while we looked
        if len(fields) == 4:
            table[int(entry)] = (int(fields["PPid"]), int(fields["Uid"].split()[0]), fields["State"][:1], fields["Name"])
    return table


def processes(uids: set[int]) -> dict[int, str]:
    """Descendants of this process and processes of ``uids`` (zombies included): pid -> description."""
    table, me = _proc_table(), os.getpid()
    found = {}
    for pid, (_, uid, state, name) in table.items():
        ancestor, hops = table[pid][0], 0
        while ancestor not in (0, 1, me) and ancestor in table and hops < 512:
            ancestor, hops = table[ancestor][0], hops + 1
        if pid != me and (ancestor == me or uid in uids):
            found[pid] = f"{pid} {name} (uid {uid}, state {state})"
    return found


def open_fds() -> dict[str, str]:
    """fd -> what it points at, for this process."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the fd listdir itself used
    return found


def scratch_files(uids: set[int], marker: str) -> list[str]:
    """Entries of the scratch folders owned by ``uids`` or named with ``marker``."""
    return sorted(entry.path for entry in scratch_entries(uids, marker))


def pool_cgroups() -> dict[str, set[str]]:
    """This process's sandbox memory cgroups (folders the pool names ``pettingllms-sandbox-<pid>-...``,
    below this process's own cgroup or, under cgroup v2, beside it) -> the names of their children."""
    prefix, bases = f"pettingllms-sandbox-{os.getpid()}-", set()
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        roots = [f"/sys/fs/cgroup/{c}" for c in controllers.split(",")] if controllers else \
            ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        for root in roots:
            own = os.path.normpath(os.path.join(root, path.lstrip("/")))
            bases.update((own, os.path.dirname(own)))
    found = {}
    for base in sorted(bases):
        try:
            entries = [e for e in os.scandir(base) if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
            for entry in entries:
                found[entry.path] = {c.name for c in os.scandir(entry.path) if c.is_dir(follow_symlinks=False)}
        except OSError:
            continue  # no such hierarchy here, or removed while we looked
    return found


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("/proc/self/status has no VmRSS line")


def snapshot(uids: set[int], marker: str, work_root: str) -> dict:
    """Everything the leak checks compare, as it is now."""
    return {"processes": processes(uids), "fds": open_fds(), "rss_mb": rss_mb(),
            "work_root": set(os.listdir(work_root)) if os.path.isdir(work_root) else None,
            "scratch": scratch_files(uids, marker), "cgroups": pool_cgroups()}


def find_leaks(when: str, now: dict, base: dict) -> list[str]:
    """What ``now`` holds that ``base`` did not, one line per kind of leak (``when`` names the moment)."""
    leaks = []
    new = sorted(set(now["processes"]) - set(base["processes"]))
    if new:
        leaks.append(f"processes {when}: {len(new)} new: " + "; ".join(now["processes"][p] for p in new[:10]))
    if len(now["fds"]) > len(base["fds"]):
        fds = sorted(set(now["fds"].items()) - set(base["fds"].items()))
        leaks.append(f"open fds {when}: {len(base['fds'])} -> {len(now['fds'])}: "
                     + "; ".join(f"{fd} -> {target}" for fd, target in fds[:10]))
    if now["work_root"] is not None and now["work_root"] - (base["work_root"] or set()):
        leaks.append(f"work_root {when} holds {sorted(now['work_root'] - (base['work_root'] or set()))[:10]}")
    if set(now["scratch"]) - set(base["scratch"]):
        leaks.append(f"scratch files {when}: {sorted(set(now['scratch']) - set(base['scratch']))[:10]}")
    folders = sorted(set(now["cgroups"]) - set(base["cgroups"]))
    children = {k: sorted(v - base["cgroups"][k])[:10] for k, v in now["cgroups"].items()
                if k in base["cgroups"] and v - base["cgroups"][k]}
    if folders or children:
        leaks.append(f"memory cgroups {when}: {folders[:10]} {children}")
    return leaks


def measure(uids: set[int], marker: str, work_root: str, base: dict, when: str,
            settle_s: float = SETTLE_S) -> tuple[dict, list[str]]:
    """A snapshot and its leaks against ``base``, taken again for up to ``settle_s`` while it has any
    (a killed tree may take a moment to be reaped)."""
    deadline = time.monotonic() + settle_s
    while True:
        gc.collect()
        now = snapshot(uids, marker, work_root)
        leaks = find_leaks(when, now, base)
        if not leaks or time.monotonic() > deadline:
            return now, leaks
        time.sleep(0.02)


def percentiles(values: list[float]) -> dict[str, float]:
    """Nearest-rank p50/p90/p99 and max of ``values`` (seconds) in milliseconds, and their count."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}

    def rank(q: int) -> float:  # the smallest value with at least q % of the values at or below it
        return ordered[max(0, math.ceil(len(ordered) * q / 100) - 1)]

    return {"count": len(ordered), **{f"p{q}_ms": round(1000 * rank(q), 2) for q in (50, 90, 99)},
            "max_ms": round(1000 * ordered[-1], 2)}


def _counts(snaps: dict[str, dict]) -> dict:
    """The sizes the JSON records, per quantity and moment."""
    return {"processes": {w: len(s["processes"]) for w, s in snaps.items()},
            "open_fds": {w: len(s["fds"]) for w, s in snaps.items()},
            "rss_mb": {w: s["rss_mb"] for w, s in snaps.items()},
            "cgroups": {w: sum(1 + len(v) for v in s["cgroups"].values()) for w, s in snaps.items()}}


# --------------------------------------------------------------------------- one worker count
def run_load(programs: list[Program], workers: int, config: SandboxConfig, marker: str, *,
             loop_timeout: float = 0.25, rss_growth_limit_mb: float = 64.0, settle_s: float = SETTLE_S,
             progress: Callable[[str], None] | None = print,
             inject: Callable[[SandboxPool, str], None] | None = None) -> dict:
    """Run ``programs`` through a fresh pool of ``workers`` and measure leaks; ``inject(pool, marker)``
    runs in the measured window, after the programs and before the after-run measurements (tests use
    it to plant a leak)."""
    gc.collect()
    as_root = os.geteuid() == 0
    snaps = {"before": snapshot(set(), marker, "/nonexistent")}
    pool = SandboxPool(config, max_workers=workers)
    try:
        uids = set(pool.uids) if as_root else set()  # as non-root the runs keep our own uid
        work_root, first_uids = pool.work_root, list(pool.uids)
        # Warm-up: one program of every kind, then 2 x workers slow judged programs at once, which start
        # every slot's judge server (concurrent programs hold distinct slots).
        rng = random.Random(0)
        warm = [make_program(k, rng, f"{marker}-warm-{k}", config, loop_timeout) for k in sorted(KINDS)]
        warm_records = asyncio.run(run_batch(pool, warm, workers))
        slow = [f"# {marker} warm-up slot {i}\nimport time\ntime.sleep(0.2)\nprint(6)\n" for i in range(2 * workers)]
        asyncio.run(pool.run_tests(slow, [JUDGE_TESTS[0]], time_limit_s=JUDGE_TIME_LIMIT_S, output_limit_bytes=4096))
        gc.collect()
        snaps["after_warmup"] = snapshot(uids, marker, work_root)  # the judge servers stay until close

        def report(done: int, seconds: float, mismatches: int) -> None:
            if progress is not None:
                progress(f"  {workers} worker(s): {done}/{len(programs)} ({100 * done // len(programs)}%) "
                         f"{seconds:.1f} s, {done / seconds:.1f} programs/s, {mismatches} mismatches")

        start = time.perf_counter()
        records = asyncio.run(run_batch(pool, programs, workers, report))
        seconds = time.perf_counter() - start
        if inject is not None:
            inject(pool, marker)
        snaps["after_run"], leaks = measure(uids, marker, work_root, snaps["after_warmup"], "after the run", settle_s)
        counts = dict(getattr(pool, "counts", {}))
        isolation = {"network": pool.network_isolated, "pid": pool.pid_isolated,
                     "filesystem": pool.filesystem_isolated, "warm_judge": pool.warm_judge,
                     "memory_per_run": getattr(pool, "memory_per_run", None), "notes": list(pool.isolation_notes)}
        python = getattr(pool, "python", None)  # the interpreter it settled on: no fallback probe again
    finally:
        pool.close()
    snaps["after_close"], closing = measure(uids, marker, work_root, snaps["before"], "after close", settle_s)
    leaks += closing
    if os.path.exists(work_root):
        leaks.append(f"work_root {work_root} still exists after close")
    lock_fds = sorted(t for t in snaps["after_close"]["fds"].values()
                      if os.path.basename(t).startswith("uid-") and t.endswith(".lock"))
    if lock_fds:
        leaks.append(f"uid lock files still open after close: {lock_fds}")
    # Each uid alone (other pools on this machine may take any other uid meanwhile): a pool restricted
    # to it starts only when nothing holds its lock any more.
    dedicated, refused = as_root and config.user is None, {}
    for uid in first_uids if dedicated else []:
        try:
            SandboxPool(replace(config, uid_base=uid, uid_count=1, python=python), max_workers=1).close()
        except SandboxError as exc:
            refused[uid] = str(exc)
    if refused:
        leaks.append(f"uids not reservable again after close: {refused}")
    growth = snaps["after_run"]["rss_mb"] - snaps["after_warmup"]["rss_mb"]
    if growth > rss_growth_limit_mb:
        leaks.append(f"RSS grew {growth:.1f} MiB from the warm-up to the end of the run (limit {rss_growth_limit_mb})")

    by_kind: dict[str, list[tuple[float, str | None]]] = {}
    for program, record in zip(programs, records):
        by_kind.setdefault(program.kind, []).append(record)
    kept: list[dict] = []
    for p, r in zip(warm + programs, warm_records + records):
        if r[1] is not None and sum(1 for e in kept if e["kind"] == p.kind) < EXAMPLES_PER_KIND:
            kept.append({"kind": p.kind, "variant": p.variant, "problem": r[1], "code": p.code})
    return {
        "workers": workers, "programs": len(programs), "seconds": round(seconds, 2),
        "programs_per_s": round(len(programs) / seconds, 2),
        "latency": {"all": percentiles([r[0] for r in records]),
                    **{k: percentiles([r[0] for r in rs]) for k, rs in sorted(by_kind.items())}},
        "kinds": {k: len(rs) for k, rs in sorted(by_kind.items())},
        "mismatches": {k: sum(1 for r in rs if r[1] is not None) for k, rs in sorted(by_kind.items())},
        "warmup_mismatches": sum(1 for r in warm_records if r[1] is not None),
        "mismatch_examples": kept, "leaks": leaks,
        "measurements": {
            **_counts(snaps), "rss_growth_after_warmup_mb": round(growth, 1), "uids": first_uids if as_root else [],
            "uids_reserved_again": [u for u in first_uids if u not in refused] if dedicated else None,
            "scratch_files_after_run": len(snaps["after_run"]["scratch"]),
            "scratch_files_after_close": len(snaps["after_close"]["scratch"]),
        },
        "pool_counts": counts, "isolation": isolation,
    }


# --------------------------------------------------------------------------- command line
def print_table(rows: list[dict]) -> None:
    for row in rows:
        print(f"\n{row['workers']} worker(s): {row['programs']} programs in {row['seconds']} s = "
              f"{row['programs_per_s']} programs/s")
        print(f"{'kind':<12}{'count':>7}{'mismatch':>10}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}")
        for kind in [k for k in [*sorted(row["kinds"]), "all"] if row["latency"][k]["count"]]:
            lat = row["latency"][kind]
            bad = sum(row["mismatches"].values()) if kind == "all" else row["mismatches"][kind]
            print(f"{kind:<12}{lat['count']:>7}{bad:>10}{lat['p50_ms']:>10.1f}{lat['p90_ms']:>10.1f}"
                  f"{lat['p99_ms']:>10.1f}{lat['max_ms']:>10.1f}")
        m = row["measurements"]
        print(f"processes {m['processes']}; open fds {m['open_fds']}; RSS MiB {m['rss_mb']}; uids "
              f"{m['uids']} reserved again: {m['uids_reserved_again']}; memory cgroups {m['cgroups']}")
        iso = row["isolation"]
        print(f"isolation: network {iso['network']}, pid {iso['pid']}, filesystem {iso['filesystem']}, warm judge "
              f"{iso['warm_judge']}, memory per run {iso['memory_per_run']}")
        for note in iso["notes"]:
            print(f"  note: {note}")
        print("leaks: " + ("none" if not row["leaks"] else ""))
        for leak in row["leaks"]:
            print(f"  LEAK {leak}")
        for example in row["mismatch_examples"]:
            print(f"  MISMATCH {example['kind']}/{example['variant']}: {example['problem']}")


def summarize(rows: list[dict], settings: dict, config: SandboxConfig, load: tuple[float, ...],
              seconds: float) -> dict:
    """The JSON document: ``settings`` (the command line), the rows of :func:`run_load`, totals, the
    machine; ``ok`` only without any mismatch (warm-up included) or leak."""
    mismatches = sum(sum(r["mismatches"].values()) + r["warmup_mismatches"] for r in rows)
    leaks = sum(len(r["leaks"]) for r in rows)
    return {
        **settings, "settle_s": SETTLE_S, "kind_weights": KINDS, "judge_time_limit_s": JUDGE_TIME_LIMIT_S,
        "config": {k: v for k, v in asdict(config).items() if isinstance(v, (int, float, str, bool, type(None)))},
        "rows": rows, "mismatches_total": mismatches, "leaks_total": leaks, "ok": mismatches == 0 and leaks == 0,
        "as_root": os.geteuid() == 0, "cpu_count": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in load], "python_version": platform.python_version(),
        "machine": platform.machine(), "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loop-timeout", type=float, default=0.25, help="wall seconds of a looping program")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_CONFIG["memory_mb"])
    parser.add_argument("--rss-growth-limit-mb", type=float, default=64.0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "sandbox_load.json"))
    args = parser.parse_args(argv)
    if args.programs < 1 or any(w < 1 for w in args.workers):
        parser.error(f"--programs and --workers must be >= 1, got {args.programs} and {args.workers}")
    config = SandboxConfig(**{**DEFAULT_CONFIG, "memory_mb": args.memory_mb})
    load, started = os.getloadavg(), time.perf_counter()
    print(f"{args.programs} programs (seed {args.seed}) at {args.workers} worker(s); load average {load[0]:.2f}")
    rows = []
    for workers in args.workers:
        marker = f"sbxload-{os.getpid()}-{secrets.token_hex(3)}-w{workers}"
        programs = make_programs(args.programs, args.seed, marker, config, args.loop_timeout)
        rows.append(run_load(programs, workers, config, marker, loop_timeout=args.loop_timeout,
                             rss_growth_limit_mb=args.rss_growth_limit_mb))
        print_table(rows[-1:])
    result = summarize(rows, {"programs": args.programs, "workers": args.workers, "seed": args.seed,
                              "loop_timeout_s": args.loop_timeout, "rss_growth_limit_mb": args.rss_growth_limit_mb},
                       config, load, time.perf_counter() - started)
    print(f"\n{'OK' if result['ok'] else 'FAILED'}: {result['mismatches_total']} mismatch(es), "
          f"{result['leaks_total']} leak(s)")
    atomic_write_json(args.out, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
