"""Code-judge benchmark: speed of ``SandboxPool.run_tests`` against unsandboxed baselines, and its
correctness on HumanEval (reference solutions and mutants) against a bare subprocess.

Speed. Programs x tests of stdin/stdout problems (half correct, a quarter wrong, a quarter raising). Each
configuration judges the same batch (fresh programs every repeat, so the verdict cache never answers):

* ``judge``: ``await pool.run_tests(...)``: through the slot's warm server (a fork per program, a fork
  per test) where the pool allows it, else one sandbox launch per program;
* ``baseline_process_per_program``: the issue's baseline, the same interpreter with the same flags
  (``python -I``), one process per program that runs all its tests in-process (each test ``exec``\\ s the
  program in a fresh namespace with ``sys.stdin``/``sys.stdout`` swapped; no isolation, no time limits);
* ``bare_process_per_test``: ``python -I -c PROGRAM`` once per test (what a naive judge does);
* ``sandbox_launch_only``: ``pool.run("pass")`` once per program: what one full sandbox launch costs
  (launcher, namespaces, a fresh interpreter, the uid sweep), i.e. what the warm server saves;
* ``function_judge``: the function-style row. As many programs of HumanEval problems, each problem's
  reference and up to 8 mutants of its entry point (what the tester's reward judges generated tests on), all
  judged on the problem's check through the trusted evaluator (the candidate answers calls, the check runs
  in a separate process; see ``pettingllms/sandbox/function_calls.py``);
* ``function_baseline_process_per_program``: its baseline, one plain process per program running the
  program and its check in one namespace (what HumanEval's ``execution.py`` does, without isolation). The
  verdicts of the two must be equal.

Concurrency is 1 and 2 (the pool's ``max_workers``; the baselines run that many processes at a time).
Each pool judges one untimed batch first (it starts the warm servers; ``server_start_s`` records it).

Correctness. HumanEval's 164 reference solutions must all pass, and on deterministic mutants of them
(comparisons flipped, constants off by one, ``+``/``-`` and ``and``/``or`` swapped, ``return None``) the
sandbox's verdict (all tests passed or not) must equal a bare subprocess's: the same interpreter and
flags on the program followed by its assert test, exit status 0 within the time limit = pass.

    python -m benchmarks.code_judge                     # 20 programs x 5 tests, 5 repeats, all of HumanEval
    python -m benchmarks.code_judge --quick             # < 60 s: fewer repeats and problems
    python -m benchmarks.code_judge --programs 40 --tests 10 --repeats 5

Prints tables and writes ``benchmarks/results/code_judge.json`` (``--quick``: ``code_judge_quick.json``).
Target (the issue's goal): judge time per program within 1.5x of ``baseline_process_per_program``, and
``function_judge`` within 1.5x of ``function_baseline_process_per_program``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from comlrl.atomic_io import atomic_write_json
from pettingllms.envs.code.analysis import trusted_setup
from pettingllms.envs.code.mutants import MUTATION_KINDS, mutants
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


# Runs a function-style program on every test in one process: the program, then the test's assertion code, in
# one namespace per test (as HumanEval's own execution.py does, without its reliability guards).
FUNCTION_BASELINE_DRIVER = r"""
import json, sys
job = json.loads(sys.stdin.read())
results = []
for test in job["tests"]:
    try:
        exec(compile(job["program"] + "\n" + test, "solution.py", "exec"), {"__name__": "__main__"})
        results.append(True)
    except BaseException:
        results.append(False)
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


def function_jobs(num_programs: int, tag: str) -> list[tuple[list[str], list[TestCase]]]:
    """HumanEval problems from the first, each as (its reference and up to 8 mutants of its entry point, its
    tests), until ``num_programs`` programs: what the tester's reward judges, a reference and the known-wrong
    programs, through the trusted evaluator."""
    from pettingllms.envs.code.data import load_problems

    jobs, count = [], 0
    for problem in load_problems("humaneval", None, "test", None):
        if count >= num_programs:
            break
        sources = [problem.solutions[0]] + [m for _, m in mutants(problem.solutions[0], 8, within=problem.entry_point)]
        sources = [f"# {tag}\n{source}" for source in sources[:num_programs - count]]
        tests = [TestCase(assertion=t["assertion"], entry_point=problem.entry_point, setup=trusted_setup(problem))
                 for t in problem.tests]
        jobs.append((sources, tests))
        count += len(sources)
    return jobs


async def judge_function_jobs(pool: SandboxPool, jobs, time_limit: float) -> list[bool]:
    rows = await asyncio.gather(*(pool.run_tests(programs, tests, time_limit_s=time_limit)
                                  for programs, tests in jobs))
    return [all(v.passed for v in row) for batch in rows for row in batch]


async def baseline_function_jobs(python: str, jobs, workers: int) -> list[bool]:
    # The baseline runs program + test in one namespace: HumanEval's check with the program's own helpers.
    runs = [_process(python, ["-c", FUNCTION_BASELINE_DRIVER],
                     json.dumps({"program": program, "tests": [t.assertion for t in tests]}))
            for programs, tests in jobs for program in programs]
    return [all(json.loads(out)) if code == 0 and out.strip() else False
            for code, out in await _gather_limited(runs, workers)]


async def launch_only(pool: SandboxPool, count: int) -> list:
    return await asyncio.gather(*(pool.run("pass") for _ in range(count)))


def timed(coro) -> tuple[float, object]:
    """Wall seconds and value of running ``coro`` in a fresh event loop."""
    start = time.perf_counter()
    value = asyncio.run(coro)
    return time.perf_counter() - start, value


def _bare_verdict(python: str, program: str, assertion: str, time_limit: float) -> bool:
    """The reference verdict: ``python -I`` on the program followed by its test; exit 0 in time = pass."""
    with tempfile.TemporaryDirectory(prefix="code-judge-bare-") as folder:
        path = os.path.join(folder, "solution.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program + "\n\n" + assertion + "\n")
        try:
            proc = subprocess.run([python, "-I", path], cwd=folder, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=time_limit)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0


async def _sandbox_verdicts(pool: SandboxPool, jobs: list[tuple[str, list[TestCase]]],
                            time_limit: float) -> list[bool]:
    rows = await asyncio.gather(*(pool.run_tests([program], tests, time_limit_s=time_limit,
                                                 output_limit_bytes=4096) for program, tests in jobs))
    return [all(v.passed for v in row[0]) for row in rows]


def check_correctness(pool: SandboxPool, *, problems: int | None = None, mutants_per_problem: int = 2,
                      time_limit: float = 3.0, seed: int = 0) -> dict:
    """HumanEval's reference solutions (the first ``problems``, or all) through the sandbox, and their
    mutants through the sandbox and a bare subprocess (run ``pool.max_workers`` at a time)."""
    from pettingllms.envs.code.data import load_problems

    chosen = list(load_problems("humaneval", None, "test", None))[:problems]
    jobs = [(p.solutions[0], [TestCase(assertion=t["assertion"], entry_point=p.entry_point, setup=trusted_setup(p))
                              for t in p.tests]) for p in chosen]
    start = time.perf_counter()
    reference = asyncio.run(_sandbox_verdicts(pool, jobs, time_limit))
    reference_s = time.perf_counter() - start
    mutated = []  # (problem id, kind, program, tests, assertion source)
    for problem, (_, tests) in zip(chosen, jobs):
        for kind, program in mutants(problem.solutions[0], mutants_per_problem, seed, within=problem.entry_point):
            mutated.append((problem.problem_id, kind, program, tests, "\n".join(t.assertion for t in tests)))
    start = time.perf_counter()
    sandbox = asyncio.run(_sandbox_verdicts(pool, [(m[2], m[3]) for m in mutated], time_limit))
    sandbox_s = time.perf_counter() - start
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(pool.max_workers) as executor:
        bare = list(executor.map(lambda m: _bare_verdict(pool.python, m[2], m[4], time_limit), mutated))
    bare_s = time.perf_counter() - start
    disagreements = [{"problem": m[0], "kind": m[1], "sandbox_passed": s, "bare_passed": b, "program": m[2]}
                     for m, s, b in zip(mutated, sandbox, bare) if s != b]
    kinds = {kind: sum(1 for m in mutated if m[1] == kind) for kind in MUTATION_KINDS}
    return {
        "reference": {"problems": len(chosen), "passed": sum(reference),
                      "failed": [p.problem_id for p, ok in zip(chosen, reference) if not ok],
                      "seconds": round(reference_s, 2)},
        "mutants": {"count": len(mutated), "by_kind": kinds, "agree": len(mutated) - len(disagreements),
                    "survived": sum(1 for b in bare if b), "killed": sum(1 for b in bare if not b),
                    "disagreements": disagreements, "sandbox_s": round(sandbox_s, 2),
                    "bare_s": round(bare_s, 2), "time_limit_s": time_limit, "seed": seed},
    }


CONFIGS = ("judge", "baseline_process_per_program", "bare_process_per_test", "sandbox_launch_only",
           "function_judge", "function_baseline_process_per_program")


def measure_speed(workers_list: list[int], num_programs: int, num_tests: int, repeats: int,
                  time_limit: float) -> tuple[list[dict], dict, dict, str]:
    """Rows of medians per (workers, config), server start seconds per workers, and whether the verdicts
    agree with the baselines (stdin/stdout: a bare process per test; function style: the same verdict as
    one process running program and test together)."""
    rows, starts, agree, python = [], {}, {"stdio": True, "function": True}, ""
    for workers in workers_list:
        with SandboxPool(SandboxConfig(), max_workers=workers) as pool:
            python = pool.python
            programs, tests = make_batch(num_programs, num_tests, f"w{workers} warm-up {os.getpid()}")
            starts[str(workers)] = round(timed(pool.run_tests(programs, tests, time_limit_s=time_limit))[0], 4)
            times: dict[str, list[float]] = {name: [] for name in CONFIGS}
            for repeat in range(repeats):
                tag = f"w{workers} r{repeat} {os.getpid()}"
                programs, tests = make_batch(num_programs, num_tests, tag)
                t, verdicts = timed(pool.run_tests(programs, tests, time_limit_s=time_limit))
                times["judge"].append(t)
                t, _ = timed(baseline_per_program(python, programs, tests, workers))
                times["baseline_process_per_program"].append(t)
                t, bare = timed(bare_per_test(python, programs, tests, workers))
                times["bare_process_per_test"].append(t)
                t, _ = timed(launch_only(pool, num_programs))
                times["sandbox_launch_only"].append(t)
                agree["stdio"] &= [[v.status for v in row] for row in verdicts] == bare
                jobs = function_jobs(num_programs, tag)
                t, judged = timed(judge_function_jobs(pool, jobs, time_limit))
                times["function_judge"].append(t)
                t, baseline = timed(baseline_function_jobs(python, jobs, workers))
                times["function_baseline_process_per_program"].append(t)
                agree["function"] &= judged == baseline
            warm = pool.warm_judge
        for name, values in times.items():
            median = statistics.median(values)
            rows.append({"workers": workers, "config": name, "median_s": round(median, 4),
                         "per_program_ms": round(1000 * median / num_programs, 2),
                         "programs_per_s": round(num_programs / median, 1),
                         "all_s": [round(v, 4) for v in values], "warm_judge": warm})
    return rows, starts, agree, python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=20)
    parser.add_argument("--tests", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--time-limit", type=float, default=2.0)
    parser.add_argument("--problems", type=int, default=None, help="HumanEval problems (default all 164)")
    parser.add_argument("--mutants-per-problem", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="< 60 s: 2 repeats, 20 problems")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.problems = min(args.repeats, 2), args.problems or 20
    out = args.out or str(Path(__file__).parent / "results" /
                          ("code_judge_quick.json" if args.quick else "code_judge.json"))
    load = os.getloadavg()
    started = time.perf_counter()

    rows, starts, agree, python = measure_speed(args.workers, args.programs, args.tests, args.repeats,
                                                args.time_limit)

    def per_program(workers: int, name: str) -> float:
        return next(r["per_program_ms"] for r in rows if r["workers"] == workers and r["config"] == name)

    ratios = {str(w): round(per_program(w, "judge") / per_program(w, "baseline_process_per_program"), 2)
              for w in args.workers}
    function_ratios = {str(w): round(per_program(w, "function_judge")
                                     / per_program(w, "function_baseline_process_per_program"), 2)
                       for w in args.workers}
    with SandboxPool(SandboxConfig(), max_workers=max(args.workers)) as pool:
        correctness = check_correctness(pool, problems=args.problems,
                                        mutants_per_problem=args.mutants_per_problem)
    ref, mut = correctness["reference"], correctness["mutants"]
    result = {
        "quick": args.quick, "programs": args.programs, "tests_per_program": args.tests,
        "repeats": args.repeats, "time_limit_s": args.time_limit, "python": python, "rows": rows,
        "server_start_s": starts, "judge_over_baseline_per_program": ratios, "target_ratio": TARGET_RATIO,
        "function_judge_over_baseline_per_program": function_ratios,
        "meets_target": all(r <= TARGET_RATIO for r in [*ratios.values(), *function_ratios.values()]),
        "verdicts_equal_bare_subprocess": agree["stdio"], "function_verdicts_equal_one_process": agree["function"],
        "correctness": correctness,
        "all_references_pass": ref["passed"] == ref["problems"],
        "mutants_all_agree": mut["agree"] == mut["count"],
        "cpu_count": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in load],
        "python_version": platform.python_version(), "machine": platform.machine(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(f"{args.programs} programs x {args.tests} tests, medians of {args.repeats} (interpreter {python}; "
          f"load average {load[0]:.2f} at start)")
    header = "".join(f"{f'{w} worker' + ('s' if w > 1 else ''):>23}" for w in args.workers)
    print(f"{'config':<30}{header}   (ms per program, programs/s)")
    for name in CONFIGS:
        cells = "".join(f"{per_program(w, name):>10.1f} ms {1000 / per_program(w, name):>7.1f}/s"
                        for w in args.workers)
        print(f"{name:<30}{cells}")
    print(f"judge / baseline per program: stdin/stdout {ratios}, function style {function_ratios} (target <= "
          f"{TARGET_RATIO}); warm server start (first batch) {starts} s; verdicts equal the baselines: {agree}")
    print(f"HumanEval references: {ref['passed']}/{ref['problems']} pass"
          + (f" (failed: {ref['failed']})" if ref["failed"] else ""))
    print(f"mutants: {mut['agree']}/{mut['count']} verdicts agree with a bare subprocess "
          f"({mut['killed']} fail, {mut['survived']} still pass; by kind {mut['by_kind']})")
    for d in mut["disagreements"]:
        print(f"  DISAGREE {d['problem']} {d['kind']}: sandbox passed={d['sandbox_passed']}, "
              f"bare passed={d['bare_passed']}")
    atomic_write_json(out, result)


if __name__ == "__main__":
    main()
