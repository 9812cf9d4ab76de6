"""The batched judge (``SandboxPool.run_tests``): output comparison, verdicts against a bare subprocess,
per-test isolation (hang, flood, crash), fresh state per test, assertion tests, early stop and the cache.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.sandbox import SandboxConfig, SandboxPool, pids_of_uid
from pettingllms.sandbox.judge import TestCase, TestVerdict, compare_output, digest_of_tests, verdict_cache

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

CONFIG = dict(cpu_time_s=2, wall_time_s=5, memory_mb=256, file_size_mb=1, scratch_mb=8, max_processes=16,
              max_open_files=32, max_output_bytes=1 << 18)


@pytest.fixture(scope="module", params=[True, False], ids=["warm-server", "launch-per-program"])
def pool(request):
    # Both ways of judging: the slot's warm server, and one sandbox launch per program (what a pool
    # without root, dedicated uids or pid + mount namespaces does).
    with SandboxPool(SandboxConfig(**CONFIG, judge_server=request.param), max_workers=2) as p:
        yield p


def judge(pool, programs, tests, **options):
    options.setdefault("time_limit_s", 1.0)
    return asyncio.run(pool.run_tests(programs, tests, **options))


def launches(pool) -> int:
    return sum(pool.counts.values())


# --------------------------------------------------------------------------- comparison (pure)


def test_compare_exact_whitespace_and_float():
    assert compare_output("1 2\n", "1 2\n", "exact")
    assert not compare_output("1 2 \n", "1 2\n", "exact")
    # Trailing whitespace, runs of spaces and trailing blank lines do not count; line breaks do.
    assert compare_output("1  2 \n3\n\n\n", "1 2\n3", "whitespace")
    assert not compare_output("1 2 3\n", "1 2\n3\n", "whitespace")
    assert not compare_output("1\n\n2\n", "1\n2\n", "whitespace")
    assert not compare_output("0.3000001\n", "0.3\n", "whitespace")
    # Floats: |a - e| <= 1e-6 absolutely or relatively to an expected value written as a float.
    assert compare_output("0.30000000000000004\n", "0.3\n", "float")
    assert compare_output("0.3000009\n", "0.3\n", "float")
    assert not compare_output("0.300002\n", "0.3\n", "float")
    assert compare_output("1000000.5\n", "1000000.0\n", "float")  # relative: 0.5 <= 1e-6 * 1e6
    assert compare_output("100000.0\n", "1e5\n", "float") and compare_output("3\n", "3.0\n", "float")
    assert not compare_output("1000002\n", "1000000.0\n", "float")
    assert compare_output("1.0 2.0000000001 abc\n", "1.0 2.0 abc", "float")
    # An expected integer compares exactly: a float printed for an integer answer, or an off-by-one on a
    # large answer, is wrong (1e-6 relative of 1e11 would forgive 1e5).
    assert not compare_output("3.0\n", "3\n", "float")
    assert not compare_output("100000000001\n", "100000000000\n", "float")
    assert not compare_output("1000000.5\n", "1000000\n", "float")
    assert not compare_output("1 2.0000000001 abc\n", "1.0 2 abc", "float")
    assert not compare_output("abd\n", "abc\n", "float")
    # Only plain decimal numbers are numbers: these compare as text.
    assert not compare_output("nan\n", "nan1\n", "float") and compare_output("nan\n", "nan\n", "float")
    assert not compare_output("1_000\n", "1000\n", "float")
    with pytest.raises(ValueError, match="`mode`"):
        compare_output("a", "a", "fuzzy")


TOKENS = st.lists(st.lists(st.from_regex(r"[a-z0-9.\-]{1,6}", fullmatch=True), min_size=1, max_size=4),
                  min_size=1, max_size=5)


@given(lines=TOKENS, gaps=st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=1, max_size=3),
       trail=st.sampled_from(["", " ", "\n", "\n\n", " \n \n"]))
def test_spacing_never_changes_a_tolerant_verdict(lines, gaps, trail):
    canonical = "\n".join(" ".join(tokens) for tokens in lines) + "\n"
    respaced = "\n".join(gaps[i % len(gaps)].join(tokens) + gaps[0] for i, tokens in enumerate(lines)) + trail
    assert compare_output(respaced, canonical, "whitespace") and compare_output(respaced, canonical, "float")
    assert compare_output(canonical, canonical, "exact")
    # Dropping the last token of the last line is always a different answer.
    shorter = "\n".join(" ".join(tokens) for tokens in lines[:-1] + [lines[-1][:-1]])
    assert not compare_output(shorter, canonical, "float")


def test_test_case_and_verdict_checks():
    with pytest.raises(ValueError, match="exactly one of `expected_stdout`, `assertion` and `args`, got none"):
        TestCase(stdin="1")
    with pytest.raises(ValueError, match="exactly one.*got `expected_stdout`, `assertion`"):
        TestCase(expected_stdout="1", assertion="assert f(1)", entry_point="f")
    with pytest.raises(ValueError, match="assertion test needs `entry_point`"):
        TestCase(assertion="assert f(1) == 2")
    with pytest.raises(ValueError, match="call test needs `entry_point`.*'f x'"):
        TestCase(args=(1,), expected=2, entry_point="f x")
    with pytest.raises(TypeError, match="`args` must be a tuple"):
        TestCase(args=[1], expected=2, entry_point="f")
    with pytest.raises(ValueError, match="`setup`, `entry_point` and `solution_class` belong"):
        TestCase(expected_stdout="1", entry_point="f")
    assert [TestCase(expected_stdout="1").kind, TestCase(assertion="f()", entry_point="f").kind,
            TestCase(args=(), expected=None, entry_point="f").kind] == ["stdio", "assertion", "call"]
    assert TestVerdict(status="test_error").counted is False and TestVerdict(status="wrong_answer").counted
    with pytest.raises(TypeError, match="`stdin`"):
        TestCase(stdin=b"1", expected_stdout="1")
    with pytest.raises(ValueError, match="`status`"):
        TestVerdict(status="accepted")
    assert digest_of_tests([TestCase(expected_stdout="1")]) != digest_of_tests([TestCase(expected_stdout="2")])


@needs_linux
def test_argument_errors_name_the_argument(pool):
    tests = [TestCase(expected_stdout="1")]
    with pytest.raises(ValueError, match="`time_limit_s`"):
        judge(pool, ["print(1)"], tests, time_limit_s=0)
    with pytest.raises(ValueError, match="`output_limit_bytes`"):
        judge(pool, ["print(1)"], tests, output_limit_bytes=0)
    with pytest.raises(ValueError, match="`compare`"):
        judge(pool, ["print(1)"], tests, compare="fuzzy")
    with pytest.raises(TypeError, match="`programs`"):
        judge(pool, "print(1)", tests)
    with pytest.raises(ValueError, match="max_output_bytes"):
        judge(pool, ["print(1)"], tests, output_limit_bytes=1 << 20)


# --------------------------------------------------------------------------- against a bare subprocess

PROGRAMS = {
    "correct": "a, b = map(int, input().split())\nprint(a + b)",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)",
    "exception": "a, b = map(int, input().split())\nprint(a)\nraise ValueError('boom')",
    "exit_mid_output": "import sys\nprint(sum(map(int, input().split())))\nsys.exit(0)\nprint('never')",
    "exit_code": "import sys\nprint(3)\nsys.exit(3)",
    "input_until_eof": ("total = 0\nwhile True:\n    try:\n        line = input()\n    except EOFError:\n"
                        "        break\n    total += sum(map(int, line.split()))\nprint(total)"),
    "stdin_buffer": "import sys\nprint(sum(int(x) for x in sys.stdin.buffer.read().split()))",
    "float_close": "a, b = map(int, input().split())\nprint((a + b) * (0.1 + 0.2) / 0.3)",
    "no_newline": "import sys\nsys.stdout.write(str(sum(map(int, input().split()))))",
    "atexit": ("import atexit\nn = sum(map(int, input().split()))\n"
               "atexit.register(lambda: print(n))"),
    "os_exit_unflushed": "import os\nprint(sum(map(int, input().split())))\nos._exit(0)",
    "thread_prints_late": ("import threading, time\nn = sum(map(int, input().split()))\n"
                           "def late():\n    time.sleep(0.05)\n    print(n)\n"
                           "threading.Thread(target=late).start()"),
    "exit_message": "import sys\nprint(1)\nsys.exit('bye')",
    "main_guard": "def main():\n    print(sum(map(int, input().split())))\nif __name__ == '__main__':\n    main()",
}
IO_TESTS = [TestCase(stdin="1 2\n", expected_stdout="3\n"), TestCase(stdin="10 20", expected_stdout="30"),
            TestCase(stdin="1 2\n3 4\n", expected_stdout="3\n")]


def bare_status(python: str, program: str, test: TestCase) -> tuple[str, str, int]:
    """The verdict, stdout and exit code of one test from a plain ``python -I -c`` run."""
    proc = subprocess.run([python, "-I", "-c", program], input=test.stdin.encode(), capture_output=True,
                          timeout=10)
    out = proc.stdout.decode()
    if proc.returncode != 0:
        return "runtime_error", out, proc.returncode
    status = "passed" if compare_output(out, test.expected_stdout, "float") else "wrong_answer"
    return status, out, proc.returncode


@needs_linux
def test_verdicts_equal_a_bare_subprocess(pool):
    names = list(PROGRAMS)
    verdicts = judge(pool, [PROGRAMS[n] for n in names], IO_TESTS)
    for name, row in zip(names, verdicts):
        for test, verdict in zip(IO_TESTS, row):
            expected = bare_status(pool.python, PROGRAMS[name], test)
            assert (verdict.status, verdict.output, verdict.returncode) == expected, (name, test, verdict)
    by_name = dict(zip(names, verdicts))
    # Spot checks that the bare runs above are not all alike.
    assert [v.status for v in by_name["correct"]] == ["passed", "passed", "passed"]
    assert [v.status for v in by_name["input_until_eof"]] == ["passed", "passed", "wrong_answer"]
    assert by_name["exception"][0].error.rstrip().endswith("ValueError: boom")
    assert "solution.py" in by_name["exception"][0].error and "main.py" not in by_name["exception"][0].error
    assert by_name["exit_code"][0].returncode == 3
    assert by_name["exit_message"][0].error == "bye\n"
    assert by_name["thread_prints_late"][0].status == "passed"
    assert by_name["os_exit_unflushed"][0].output == ""  # as in a normal run: the buffer is lost


# --------------------------------------------------------------------------- isolation and state

BEHAVIOURS = """
import os, signal, sys
mode = input().strip()
if mode == "hang":
    while True:
        pass
if mode == "flood":
    while True:
        print("x" * 1000)
if mode == "crash":
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "raise":
    raise RuntimeError("bad")
print("ok")
"""


@needs_linux
def test_a_hang_flood_or_crash_does_not_affect_the_other_tests(pool):
    modes = ["hang", "ok", "flood", "ok", "crash", "ok", "raise", "ok"]
    tests = [TestCase(stdin=m + "\n", expected_stdout="ok") for m in modes]
    (row,) = judge(pool, [BEHAVIOURS], tests, time_limit_s=0.5, output_limit_bytes=4096)
    assert [v.status for v in row] == ["timeout", "passed", "output_limit", "passed", "runtime_error",
                                       "passed", "runtime_error", "passed"]
    assert row[0].seconds < 1.5
    assert len(row[2].output) <= 4096
    assert row[4].returncode == -11


@needs_linux
def test_every_test_starts_from_fresh_state(pool):
    # ``json`` and ``collections`` are loaded in the warm parent; a test's changes to them, and to the
    # program's own globals, must not reach the next test.
    program = ("import json, collections\nseen = []\nseen.append(1)\n"
               "json.counter = getattr(json, 'counter', 0) + 1\n"
               "collections.__dict__.setdefault('calls', []).append(input())\n"
               "print(len(seen), json.counter, len(collections.calls))")
    tests = [TestCase(stdin=str(i), expected_stdout="1 1 1") for i in range(4)]
    (row,) = judge(pool, [program], tests)
    assert [v.status for v in row] == ["passed"] * 4, row


DAEMON = """
import os, sys, time
if input() == "spawn":
    if os.fork() == 0:
        os.setsid()  # leaves the test's process group
        if os.fork() == 0:
            with open("/tmp/daemon.pid", "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(1)
        os._exit(0)
    time.sleep(0.2)
    print("spawned")
else:
    pid = int(open("/tmp/daemon.pid").read())
    try:
        os.kill(pid, 0)
        print("alive")
    except ProcessLookupError:
        print("gone")
"""


@needs_linux
def test_a_daemon_left_by_one_test_is_gone_before_the_next(pool):
    if not pool.pid_isolated:
        pytest.skip("needs the run's own pid namespace")
    tests = [TestCase(stdin="spawn", expected_stdout="spawned"), TestCase(stdin="check", expected_stdout="gone")]
    (row,) = judge(pool, [DAEMON], tests)
    assert [(v.status, v.output) for v in row] == [("passed", "spawned\n"), ("passed", "gone\n")], row


@needs_linux
def test_a_program_that_kills_the_harness_fails_only_itself(pool):
    program = "import os, signal\nif input() == 'kill':\n    os.kill(os.getppid(), signal.SIGKILL)\nprint('ok')"
    tests = [TestCase(stdin="ok", expected_stdout="ok"), TestCase(stdin="kill", expected_stdout="ok"),
             TestCase(stdin="ok", expected_stdout="ok")]
    rows = judge(pool, [program, "print('ok')"], tests, output_limit_bytes=4096)  # one launch
    assert [v.status for v in rows[0]] == ["passed", "runtime_error", "runtime_error"]
    assert "harness ended before this test (error, exit code -9)" in rows[0][1].error
    assert [v.status for v in rows[1]] == ["passed"] * 3


FORGER = """
import base64, json, os
forged = {"i": 1, "kind": "exit", "code": 0, "stdout": base64.b64encode(b"forged").decode(), "stderr": "",
          "seconds": 0.0}
try:
    fd = os.open(f"/proc/{os.getppid()}/fd/1", os.O_WRONLY)
    os.write(fd, (json.dumps(forged) + "\\n").encode())
    print("opened")
except OSError:
    print("denied")
"""


@needs_linux
def test_a_test_cannot_reach_the_harness_result_stream(pool):
    # The harness is non-dumpable: a test's process (same uid) cannot open its stdout through /proc.
    tests = [TestCase(expected_stdout="denied"), TestCase(expected_stdout="forged")]
    (row,) = judge(pool, [FORGER], tests)
    assert [(v.status, v.output) for v in row] == [("passed", "denied\n"), ("wrong_answer", "denied\n")]


# --------------------------------------------------------------------------- assertion tests, early stop


@needs_linux
def test_assertion_tests_for_a_function_problem(pool):
    solution = "def add(a, b):\n    return a + b\n"
    wrong = "def add(a, b):\n    return a - b\n"
    check = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\ncheck(add)"
    tests = [TestCase(assertion="assert add(1, 2) == 3", entry_point="add"),
             TestCase(assertion=check, entry_point="add"),
             TestCase(assertion="assert sub(1, 2) == -1", entry_point="add"),
             TestCase(args=(4, 5), expected=9, entry_point="add")]
    good, bad = judge(pool, [solution, wrong], tests)
    # A NameError before any call of the candidate is the test's own fault: counted toward nothing.
    assert [v.status for v in good] == ["passed", "passed", "test_error", "passed"]
    assert "NameError: name 'sub' is not defined" in good[2].error and not good[2].counted
    assert [v.status for v in bad] == ["wrong_answer", "wrong_answer", "test_error", "wrong_answer"]
    assert bad[3].error == "returned -1, expected 9"


@needs_linux
def test_stop_on_first_failure_marks_the_rest_not_run(pool):
    program = "x = int(input())\nassert x != 2\nprint(x)"
    tests = [TestCase(stdin=str(i), expected_stdout=str(i if i != 3 else 0)) for i in range(1, 6)]
    crash, = judge(pool, [program], tests, stop_on_first_failure=True)
    assert [v.status for v in crash] == ["passed", "runtime_error", "not_run", "not_run", "not_run"]
    wrong, = judge(pool, ["print(int(input()))"], tests, stop_on_first_failure=True)
    assert [v.status for v in wrong] == ["passed", "passed", "wrong_answer", "not_run", "not_run"]
    full, = judge(pool, ["print(int(input()))"], tests)
    assert [v.status for v in full] == ["passed", "passed", "wrong_answer", "passed", "passed"]


# --------------------------------------------------------------------------- batching and the cache


@needs_linux
def test_cache_hits_launch_nothing_and_duplicates_run_once(pool):
    programs = ["print(int(input()) * 2)", "print(int(input()) + 2)", "print(int(input()) * 2)"]
    tests = [TestCase(stdin="2", expected_stdout="4"), TestCase(stdin="3", expected_stdout="6")]
    before = launches(pool)
    first = judge(pool, programs, tests, time_limit_s=0.75)
    assert launches(pool) - before == 2  # the duplicate program ran once
    assert [[v.status for v in row] for row in first] == [["passed", "passed"],
                                                          ["passed", "wrong_answer"], ["passed", "passed"]]
    hits = verdict_cache(pool).hits
    again = judge(pool, programs, tests, time_limit_s=0.75)
    assert launches(pool) - before == 2 and again == first
    assert verdict_cache(pool).hits - hits == 2  # the duplicate is found once per call
    judge(pool, programs[:1], tests, time_limit_s=0.8)  # other limits: a new key
    assert launches(pool) - before == 3


@needs_linux
def test_many_tests_split_over_launches_when_results_could_overflow(pool):
    tests = [TestCase(stdin=str(i), expected_stdout=str(i)) for i in range(12)]
    before = launches(pool)
    (row,) = judge(pool, ["print(input())"], tests, output_limit_bytes=30_000)
    assert [v.status for v in row] == ["passed"] * 12
    # 256 KiB of result lines per launch hold 6 tests of 30,000 (+2,048 stderr) bytes in base64.
    assert launches(pool) - before == 2


# --------------------------------------------------------------------------- the warm server's failures


@needs_linux
def test_a_harness_stopped_by_its_test_or_a_cancelled_batch_costs_only_that_program():
    with SandboxPool(SandboxConfig(**CONFIG), max_workers=1) as p:
        if not p.warm_judge:
            pytest.skip("the warm judge needs root, dedicated uids and pid + mount namespaces")
        uids = p.uids
        # A test freezes its harness: the launch's wall clock (5 s + 2 x (0.2 + 0.5) s) ends it, the
        # slot's server is replaced, and the next program is judged normally.
        stopper = "import os, signal\nif input() == 'stop':\n    os.kill(os.getppid(), signal.SIGSTOP)\nprint('ok')"
        tests = [TestCase(stdin="ok", expected_stdout="ok"), TestCase(stdin="stop", expected_stdout="ok")]
        (row,) = judge(p, [stopper], tests, time_limit_s=0.2, output_limit_bytes=4096)
        assert [v.status for v in row] == ["passed", "runtime_error"], row
        assert "harness ended before this test (timeout, limit wall_time)" in row[1].error
        assert all(pids_of_uid(u, include_zombies=True) == [] for u in uids)
        (row,) = judge(p, ["print('ok')"], tests, output_limit_bytes=4096)
        assert [(v.status, v.output) for v in row] == [("passed", "ok\n")] * 2

        # A batch cancelled mid-program: nothing of it survives, and the slot judges again.
        async def cancelled() -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(p.run_tests(["import time\ntime.sleep(30)"], [TestCase(expected_stdout="")],
                                                   time_limit_s=20.0, output_limit_bytes=4096), 0.5)

        asyncio.run(cancelled())
        assert all(pids_of_uid(u, include_zombies=True) == [] for u in uids)
        (row,) = judge(p, ["print(input())"], tests, output_limit_bytes=4096)
        assert [v.status for v in row] == ["passed", "wrong_answer"]
        assert p._servers  # a warm server is running now ...
    # ... and closing the pool ends it with everything of its uid.
    assert all(pids_of_uid(u, include_zombies=True) == [] for u in uids)
    assert not p._servers


def test_the_warm_server_starts_from_source_not_from_paths_into_the_checkout(monkeypatch):
    # Inside the sandbox a checkout under /tmp is out of sight (the sandbox's /tmp is a fresh tmpfs), so
    # neither the server's command nor what it is sent may name a file of the checkout.
    import pettingllms.sandbox.pool as pool_module
    from pettingllms.sandbox.judge import HARNESS_PATH, harness_source
    from pettingllms.sandbox.warm import SERVER_BOOTSTRAP

    seen = {}

    class Recorder:
        def __init__(self, argv, program, spec, status_r, status_w, *rest):
            seen.update(argv=argv, program=program, spec=spec)
            os.close(status_r)
            os.close(status_w)
            raise pool_module.SandboxError("recorded")

    monkeypatch.setattr(pool_module, "WarmServer", Recorder)
    with SandboxPool(SandboxConfig(**CONFIG), max_workers=1) as p:
        if not p.warm_judge:
            pytest.skip("the warm judge server needs root and namespaces here")
        with pytest.raises(Exception, match="recorded"):
            asyncio.run(p.run_tests(["print(1)"], [TestCase(stdin="", expected_stdout="1")], time_limit_s=2.0))
    server_argv = seen["spec"]["argv"]
    assert "-c" in server_argv and server_argv[-1] == "--serve"
    assert HARNESS_PATH not in server_argv and server_argv[server_argv.index("-c") + 1] == SERVER_BOOTSTRAP
    assert seen["spec"]["launcher_source"].startswith('"""')
    source = seen["program"].decode()
    assert source == harness_source() and source.endswith(open(HARNESS_PATH, encoding="utf-8").read())
    assert source.startswith("import types as _bundle_types")  # the modules it uses come as text too
    assert "function_calls = _bundled('function_calls', " in source
