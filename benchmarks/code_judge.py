"""Code-judge benchmark: per-program time of ``SandboxPool.run_tests`` against unsandboxed baselines.

Programs x tests of stdin/stdout problems (half correct, a quarter wrong, a quarter raising). Each
configuration judges the same batch (fresh programs every repeat, so the verdict cache never answers):

* ``judge``: ``await pool.run_tests(...)``, one sandbox launch per program, a forked child per test;
* ``baseline_process_per_program``: the issue's baseline, the same interpreter with the same flags
  (``python -I``), one process per program that runs all its tests in-process (each test ``exec``\\ s the
  program in a fresh namespace with ``sys.stdin``/``sys.stdout`` swapped; no isolation, no time limits);
* ``bare_process_per_test``: ``python -I -c PROGRAM`` once per test (what a naive judge does);
* ``sandbox_launch_only``: ``pool.run("pass")`` once per program, the part of the judge's time that is
  the pool's launch (namespaces, launcher, uid sweep) rather than the harness and the tests.

Concurrency is 1 and 2 (the pool's ``max_workers``; the baselines run that many processes at a time).
It also checks that the judge's verdicts equal those of the bare per-test runs.

    python -m benchmarks.code_judge                     # 20 programs x 5 tests, 3 repeats
    python -m benchmarks.code_judge --programs 40 --tests 10 --repeats 5

Prints a table and writes ``benchmarks/results/code_judge.json``. Target (the issue's goal): judge time
per program within 1.5x of ``baseline_process_per_program``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

from comlrl.atomic_io import atomic_write_json
from pettingllms.sandbox import SandboxConfig, SandboxPool, TestCase, compare_output

TARGET_RATIO = 1.5

# Runs a program on every test in one process: the baseline without isolation.
BASELINE_DRIVER = r"""
import io, json, sys, traceback
job = json.loads(sys.stdin.read())
code = compile(job["program"], "solution.py", "exec")
real_stdin, real_stdout = sys.stdin, sys.stdout
results = []
for stdin in job["inputs"]:
    sys.stdin, sys.stdout = io.StringIO(stdin), io.StringIO()
    ok = True
    try:
        exec(code, {"__name__": "__main__"})
    except SystemExit as exc:
        ok = exc.code in (None, 0)
    except BaseException:
        ok = False
    out = sys.stdout.getvalue()
    sys.stdin, sys.stdout = real_stdin, real_stdout
    results.append([ok, out])
print(json.dumps(results))
"""


def make_batch(num_programs: int, num_tests: int, tag: str) -> tuple[list[str], list[TestCase]]:
    """Programs summing the numbers of their input (correct, off by one, or raising) and their tests."""
    programs = []
    for p in range(num_programs):
        body = {0: "print(sum(nums))", 1: "print(sum(nums))", 2: "print(sum(nums) + 1)",
                3: "raise ValueError(len(nums))"}[p % 4]
        programs.append(f"# {tag} {p}\nimport sys\nnums = [int(x) for x in sys.stdin.read().split()]\n{body}\n")
    tests = []
    for t in range(num_tests):
        nums = list(range(t, t + 5 + 3 * t))
        tests.append(TestCase(stdin=" ".join(map(str, nums)) + "\n", expected_stdout=f"{sum(nums)}\n"))
    return programs, tests


async def _gather_limited(coros, limit: int):
    sem = asyncio.Semaphore(limit)

    async def one(coro):
        async with sem:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def _process(python: str, args: list[str], stdin: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(python, "-I", *args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate(stdin.encode())
    return proc.returncode, out.decode(errors="replace")


async def baseline_per_program(python: str, programs: list[str], tests: list[TestCase], workers: int):
    jobs = [_process(python, ["-c", BASELINE_DRIVER],
                     json.dumps({"program": p, "inputs": [t.stdin for t in tests]})) for p in programs]
    return await _gather_limited(jobs, workers)


async def bare_per_test(python: str, programs: list[str], tests: list[TestCase], workers: int):
    jobs = [_process(python, ["-c", p], t.stdin) for p in programs for t in tests]
    runs = await _gather_limited(jobs, workers)
    statuses = []
    for i, (code, out) in enumerate(runs):
        test = tests[i % len(tests)]
        ok = code == 0 and compare_output(out, test.expected_stdout)
        statuses.append("passed" if ok else ("runtime_error" if code != 0 else "wrong_answer"))
    return [statuses[i:i + len(tests)] for i in range(0, len(statuses), len(tests))]


async def launch_only(pool: SandboxPool, count: int) -> list:
    return await asyncio.gather(*(pool.run("pass") for _ in range(count)))


def timed(coro) -> tuple[float, object]:
    """Wall seconds and value of running ``coro`` in a fresh event loop."""
    start = time.perf_counter()
    value = asyncio.run(coro)
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=20)
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--time-limit", type=float, default=2.0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "code_judge.json"))
    args = parser.parse_args()

    rows, agree = [], True
    for workers in args.workers:
        with SandboxPool(SandboxConfig(), max_workers=workers) as pool:
            python = pool.python
            times: dict[str, list[float]] = {"judge": [], "baseline_process_per_program": [],
                                             "bare_process_per_test": [], "sandbox_launch_only": []}
            for repeat in range(args.repeats):
                programs, tests = make_batch(args.programs, args.tests, f"w{workers} r{repeat} {os.getpid()}")
                t, verdicts = timed(pool.run_tests(programs, tests, time_limit_s=args.time_limit))
                times["judge"].append(t)
                t, _ = timed(baseline_per_program(python, programs, tests, workers))
                times["baseline_process_per_program"].append(t)
                t, bare = timed(bare_per_test(python, programs, tests, workers))
                times["bare_process_per_test"].append(t)
                t, _ = timed(launch_only(pool, len(programs)))
                times["sandbox_launch_only"].append(t)
                agree &= [[v.status for v in row] for row in verdicts] == bare
        for name, values in times.items():
            median = statistics.median(values)
            rows.append({"workers": workers, "config": name, "median_s": round(median, 4),
                         "per_program_ms": round(1000 * median / args.programs, 2),
                         "programs_per_s": round(args.programs / median, 1),
                         "all_s": [round(v, 4) for v in values]})

    def per_program(workers: int, name: str) -> float:
        return next(r["per_program_ms"] for r in rows if r["workers"] == workers and r["config"] == name)

    ratios = {str(w): round(per_program(w, "judge") / per_program(w, "baseline_process_per_program"), 2)
              for w in args.workers}
    result = {
        "programs": args.programs, "tests_per_program": args.tests, "repeats": args.repeats,
        "time_limit_s": args.time_limit, "python": python, "rows": rows,
        "judge_over_baseline_per_program": ratios, "target_ratio": TARGET_RATIO,
        "meets_target": all(r <= TARGET_RATIO for r in ratios.values()),
        "verdicts_equal_bare_subprocess": agree, "cpu_count": os.cpu_count(),
        "python_version": platform.python_version(), "machine": platform.machine(),
    }
    print(f"{args.programs} programs x {args.tests} tests, medians of {args.repeats} (interpreter {python})")
    print(f"{'workers':>7}  {'config':<30} {'per program':>12} {'programs/s':>11}")
    for r in rows:
        print(f"{r['workers']:>7}  {r['config']:<30} {r['per_program_ms']:>9.1f} ms {r['programs_per_s']:>11.1f}")
    print(f"judge / baseline per program: {ratios} (target <= {TARGET_RATIO}); "
          f"verdicts equal bare subprocess: {agree}")
    atomic_write_json(args.out, result)


if __name__ == "__main__":
    main()
