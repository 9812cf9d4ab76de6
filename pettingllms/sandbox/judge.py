"""Batched judging of model-written programs against test cases (:func:`run_tests`, used through
:meth:`SandboxPool.run_tests`).

A batch is programs x tests. Each distinct program goes to the pool's :meth:`SandboxPool.run_harness`:
where the pool allows it (:attr:`SandboxPool.warm_judge`), to its slot's warm server, which forks one
process per program with fresh namespaces, scratch, rlimits and uid (see ``judge_harness.py``, "the
warm server", and ``warm.py``); elsewhere, as one sandbox launch (every namespace, rlimit and uid
protection of :meth:`SandboxPool.run` applies). Either way the harness ``judge_harness.py`` forks one
child per test from a warm interpreter, so every test starts from fresh interpreter state, and kills a
child at the per-test time limit or output cap without touching the other tests. Outputs of stdin/stdout tests are compared here, outside the sandbox, with
:func:`compare_output`. Verdicts are cached per pool by (program, test set, limits) in an LRU.

When the harness's result lines for one launch could pass the pool's ``max_output_bytes``, the tests
are split over several launches. ``stop_on_first_failure`` stops a launch at the first test that
crashes or times out and reports every test after the first failure (wrong answers included) as
``not_run``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import os
import threading
import weakref
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from pettingllms.sandbox import plain_data
from pettingllms.sandbox.compare import COMPARE_MODES, FLOAT_TOLERANCE, compare_output
from pettingllms.sandbox.result import SandboxError

logger = logging.getLogger(__name__)

_HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS_PATH = os.path.join(_HERE, "judge_harness.py")
VERDICT_STATUSES: tuple[str, ...] = ("passed", "wrong_answer", "runtime_error", "timeout", "output_limit",
                                     "not_run", "test_error", "unsupported")
#: Statuses that are the test's fault, never the program's: they count toward neither reward nor success.
TEST_FAULTS: tuple[str, ...] = ("test_error", "unsupported")
DEFAULT_OUTPUT_LIMIT_BYTES = 1 << 16
STDERR_TAIL_BYTES = 2048
# Characters of a test's stdout kept in its verdict (the comparison sees all of it, up to the cap).
KEPT_OUTPUT_CHARS = 4096
CACHE_SIZE = 4096
# Wall seconds a launch may take beyond its tests' time limits (interpreter start, forks, pipes).
LAUNCH_SLACK_S = 5.0
PER_TEST_SLACK_S = 0.5
_RECORD_OVERHEAD_BYTES = 200


@dataclass(frozen=True)
class TestCase:
    """One test, of one of three kinds (:attr:`kind`):

    * ``stdio``: ``stdin`` is fed to the program and what it prints is compared with ``expected_stdout``
      (outside the sandbox, :func:`compare_output`);
    * ``assertion``: trusted test code (``assert f(1) == 2``, or HumanEval's ``check(candidate)``
      definition and its call) run in the trusted evaluator, never in the candidate's process. There the
      names ``entry_point`` and ``Solution`` are remote handles on the candidate's function and class
      (see ``function_calls.py``), and ``setup`` (trusted code from the dataset, e.g. HumanEval's prompt
      with its helpers ``poly`` / ``encode_cyclic``) runs first in the same namespace;
    * ``call``: one call of the candidate with the plain values ``args`` (a tuple), passing when it
      returns a value equal (``==``, on the trusted side) to ``expected``. With ``solution_class`` the
      call is ``Solution().<entry_point>(*args)``. Nothing of a call test is executed as code: it is how
      the tester's parsed tests are judged.

    A program's exit status never makes a test pass.
    """

    __test__ = False  # not a pytest class

    stdin: str = ""
    expected_stdout: str | None = None
    assertion: str | None = None
    args: tuple | None = None
    expected: Any = None
    entry_point: str | None = None
    setup: str = ""
    solution_class: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.stdin, str):
            raise TypeError(f"`stdin` must be str, got {type(self.stdin).__name__}")
        given = [name for name in ("expected_stdout", "assertion", "args") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a TestCase needs exactly one of `expected_stdout`, `assertion` and `args`, got "
                             + (", ".join(f"`{n}`" for n in given) or "none"))
        for name in ("expected_stdout", "assertion"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"`{name}` must be str or None, got {type(value).__name__}")
        if self.args is not None:
            if not isinstance(self.args, tuple):
                raise TypeError(f"`args` must be a tuple of plain values or None, got {type(self.args).__name__}")
            for name in ("args", "expected"):
                try:
                    plain_data.encode(getattr(self, name))
                except plain_data.NotPlainData as exc:
                    raise TypeError(f"`{name}` of a call test must be plain data: {exc}") from None
        if not isinstance(self.setup, str):
            raise TypeError(f"`setup` must be str, got {type(self.setup).__name__}")
        if self.kind != "stdio":
            entry = self.entry_point
            if not (isinstance(entry, str) and entry.isidentifier()):
                raise ValueError(f"a{'n' if self.kind == 'assertion' else ''} {self.kind} test needs "
                                 f"`entry_point`, the name of the candidate's function, got {entry!r}")
        elif self.setup or self.entry_point is not None or self.solution_class:
            raise ValueError("`setup`, `entry_point` and `solution_class` belong to assertion and call tests, "
                             "not to a stdin/stdout test")

    @property
    def kind(self) -> str:
        """``stdio``, ``assertion`` or ``call``."""
        if self.expected_stdout is not None:
            return "stdio"
        return "assertion" if self.assertion is not None else "call"


@dataclass(frozen=True)
class TestVerdict:
    """The outcome of one (program, test): ``status`` in :data:`VERDICT_STATUSES`, the program's stdout
    (first :data:`KEPT_OUTPUT_CHARS` characters), the tail of its stderr or, for assertion and call tests,
    what the trusted side saw (the failed assertion, the value returned), its exit code (``None`` when
    killed, not run or judged by the trusted side; a negative number is a signal) and its wall seconds.

    ``test_error`` (the trusted test code failed before any call of the candidate returned) and
    ``unsupported`` (the test passes something that is not plain data, e.g. a lambda) are the test's
    fault, not the program's: they count toward neither reward nor success (:attr:`counted`)."""

    __test__ = False

    status: str
    output: str = ""
    error: str = ""
    returncode: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.status not in VERDICT_STATUSES:
            raise ValueError(f"`status` must be one of {list(VERDICT_STATUSES)}, got {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def counted(self) -> bool:
        """Whether this verdict says something about the program (not a test error or unsupported test)."""
        return self.status not in TEST_FAULTS


class VerdictCache:
    """LRU of per-program verdict lists, keyed by a digest of (program, tests, limits); ``statuses`` counts
    the statuses of every verdict judged (not of cache hits), ``test_error`` and ``unsupported`` included."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[TestVerdict, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.statuses: Counter[str] = Counter()
        self.faulty_tests: set[str] = set()  # tests already logged as the test's fault

    def get(self, key: str) -> tuple[TestVerdict, ...] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: str, verdicts: tuple[TestVerdict, ...]) -> None:
        with self._lock:
            self.statuses.update(v.status for v in verdicts)
            self._entries[key] = verdicts
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()
_HARNESS_SOURCE: list[str] = []


def verdict_cache(pool: Any) -> VerdictCache:
    """The verdict cache of ``pool`` (made on first use; it lives as long as the pool)."""
    with _CACHES_LOCK:
        cache = _CACHES.get(pool)
        if cache is None:
            cache = _CACHES[pool] = VerdictCache()
        return cache


# The modules the harness uses, in dependency order: each finds the ones before it as globals.
_BUNDLED = ("plain_data", "function_calls", "judge_keeper")
_BUNDLE_LOADER = (
    "import types as _bundle_types\n\n\n"
    "def _bundled(name, source, **names):\n"
    "    module = _bundle_types.ModuleType(name)\n"
    "    module.__dict__.update(names)\n"
    "    exec(compile(source, name + '.py', 'exec', dont_inherit=True, optimize=0), module.__dict__)\n"
    "    return module\n\n\n"
)


def harness_source() -> str:
    """The harness program: ``judge_harness.py`` behind the modules it uses, each made a module object
    from its source text (inside the sandbox none of them is importable by name)."""
    if not _HARNESS_SOURCE:
        lines, loaded = [_BUNDLE_LOADER], []
        for name in _BUNDLED:
            with open(os.path.join(_HERE, f"{name}.py"), encoding="utf-8") as f:
                names = "".join(f", {other}={other}" for other in loaded)
                lines.append(f"{name} = _bundled({name!r}, {f.read()!r}{names})\n")
            loaded.append(name)
        with open(HARNESS_PATH, encoding="utf-8") as f:
            _HARNESS_SOURCE.append("".join(lines) + f.read())
    return _HARNESS_SOURCE[0]


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode("utf-8")).hexdigest()


def _test_key(test: TestCase) -> list:
    if test.kind == "call":
        return ["call", plain_data.encode(test.args), plain_data.encode(test.expected), test.entry_point,
                test.solution_class]
    return [test.kind, test.stdin, test.expected_stdout, test.assertion, test.entry_point, test.setup,
            test.solution_class]


def digest_of_tests(tests: list[TestCase]) -> str:
    """A stable hash of a test set (the cache key's test part)."""
    return _digest([_test_key(t) for t in tests])


def _trusted_part(test: TestCase, index: int) -> dict:
    """What the trusted evaluator runs for a function-style test (never sent to the candidate)."""
    part = {"index": index, "entry_point": test.entry_point, "setup": test.setup,
            "solution_class": test.solution_class}
    if test.kind == "assertion":
        part["assertion"] = test.assertion
    else:
        part.update(args=plain_data.encode(test.args), expected=plain_data.encode(test.expected))
    return part


def _frame(tag: str, obj: Any) -> str:
    data = json.dumps(obj, ensure_ascii=True)  # ASCII: the frame's length in characters is its length in bytes
    return f"{tag} {len(data)}\n{data}"


def _chunks(count: int, output_limit: int, pool_cap: int) -> list[range]:
    """Consecutive ranges of test indices whose worst-case result lines fit the pool's output cap."""
    per_test = 4 * math.ceil((output_limit + STDERR_TAIL_BYTES) / 3) + _RECORD_OVERHEAD_BYTES
    per_launch = (pool_cap - _RECORD_OVERHEAD_BYTES) // per_test
    if per_launch < 1:
        raise ValueError(f"`output_limit_bytes`={output_limit} is too large for the pool's "
                         f"max_output_bytes={pool_cap}: one test's result must fit (base64, "
                         f"{STDERR_TAIL_BYTES} bytes of stderr); lower it or raise max_output_bytes")
    return [range(start, min(start + per_launch, count)) for start in range(0, count, per_launch)]


def _decode(text: str) -> str:
    return base64.b64decode(text).decode("utf-8", errors="replace")


def _verdict(record: dict, test: TestCase, mode: str) -> TestVerdict:
    """Turn one harness record into a verdict (the comparison happens here, outside the sandbox)."""
    out, err = _decode(record["stdout"]), _decode(record["stderr"])
    kind, code = record["kind"], record["code"]
    common = {"output": out[:KEPT_OUTPUT_CHARS], "seconds": record["seconds"]}
    if kind in ("timeout", "output_limit"):
        return TestVerdict(status=kind, error=err, **common)
    if test.kind != "stdio":
        return _function_verdict(record, err, common)
    if kind == "signal":
        return TestVerdict(status="runtime_error", error=err, returncode=-code, **common)
    if kind != "exit":
        raise SandboxError(f"the judge harness reported a {kind!r} record for a stdin/stdout test")
    if code != 0:
        return TestVerdict(status="runtime_error", error=err, returncode=code, **common)
    if not compare_output(out, test.expected_stdout, mode):
        return TestVerdict(status="wrong_answer", error=err, returncode=0, **common)
    return TestVerdict(status="passed", error=err, returncode=0, **common)


# What the trusted evaluator may answer, and the statuses they become.
_EVALUATOR_STATUSES = {"passed": "passed", "wrong_answer": "wrong_answer", "runtime_error": "runtime_error",
                       "test_error": "test_error", "unsupported": "unsupported", "timeout": "timeout",
                       "aborted": "timeout"}


def _function_verdict(record: dict, err: str, common: dict) -> TestVerdict:
    """An assertion or call test: the trusted evaluator's verdict decides, never the exit status. What the
    candidate printed to stderr follows the evaluator's message (a traceback of a program that failed to
    load is what a coder needs to see)."""
    if record["kind"] == "lost":
        message = "the test's trusted evaluator is gone (stopped or killed from the candidate's process)"
        return TestVerdict(status="runtime_error", error=_joined(message, err), **common)
    verdict = record.get("verdict")
    if record["kind"] != "verdict" or not isinstance(verdict, dict):
        raise SandboxError(f"the judge harness sent a function-test record without a verdict: {record!r:.200}")
    status = _EVALUATOR_STATUSES.get(verdict.get("status"))
    if status is None:
        raise SandboxError(f"the trusted evaluator answered an unknown status: {verdict!r:.200}")
    return TestVerdict(status=status, error=_joined(str(verdict.get("message", "")), err), **common)


def _joined(message: str, stderr: str) -> str:
    return message if not stderr.strip() else f"{message}\n{stderr}" if message else stderr


def _parse(stdout: str) -> tuple[bool, dict[int, dict]]:
    ready, records = False, {}
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("ready") is True:
            ready = True
        elif isinstance(record.get("i"), int):
            records[record["i"]] = record
    return ready, records


async def _launch(pool: Any, program: str, tests: list[TestCase], indices: range, time_limit: float,
                  output_limit: int, stop: bool, mode: str) -> list[TestVerdict | None]:
    """One sandbox launch for ``tests[indices]``; ``None`` for tests the harness did not report."""
    chunk = [tests[i] for i in indices]
    trusted = [_trusted_part(t, offset) for offset, t in enumerate(chunk) if t.kind != "stdio"]
    candidate = {"program": program,
                 "tests": [{"kind": "stdio", "stdin": t.stdin} if t.kind == "stdio" else {"kind": "function"}
                           for t in chunk],
                 "time_limit_s": time_limit, "output_limit_bytes": output_limit,
                 "stderr_tail_bytes": STDERR_TAIL_BYTES, "stop_on_failure": stop,
                 "sweep": bool(getattr(pool, "pid_isolated", False))}
    # The trusted frame first: the harness's keeper reads it before any process a candidate runs in exists.
    payload = (_frame("T", {"tests": trusted}) if trusted else "T 0\n") + _frame("C", candidate)
    wall = LAUNCH_SLACK_S + len(chunk) * (time_limit + PER_TEST_SLACK_S)
    if hasattr(pool, "run_harness"):
        result = await pool.run_harness(harness_source(), payload, timeout=wall)
    else:
        result = await pool.run(harness_source(), stdin=payload, timeout=wall)
    ready, records = _parse(result.stdout)
    if not ready:
        raise SandboxError(f"the judge harness did not start ({result.status}, limit={result.limit}): "
                           f"{result.stderr[-2000:]}")
    # A test without a record after a failure was skipped by the early stop; any other one means the
    # harness itself ended early (the program killed it, or the launch hit the pool's limits).
    note = (f"the test harness ended before this test ({result.status}, "
            f"{'limit ' + result.limit if result.limit else f'exit code {result.returncode}'}): "
            f"{result.stderr[-STDERR_TAIL_BYTES:]}")
    verdicts: list[TestVerdict | None] = []
    for offset, test in enumerate(chunk):
        record = records.get(offset)
        if record is not None:
            verdicts.append(_verdict(record, test, mode))
        elif stop and any(v is not None and not v.passed for v in verdicts):
            verdicts.append(None)
        else:
            verdicts.append(TestVerdict(status="runtime_error", error=note))
    return verdicts


async def _judge_program(pool: Any, program: str, tests: list[TestCase], time_limit: float,
                         output_limit: int, stop: bool, mode: str) -> tuple[TestVerdict, ...]:
    verdicts: list[TestVerdict] = []
    for indices in _chunks(len(tests), output_limit, pool.config.max_output_bytes):
        got = await _launch(pool, program, tests, indices, time_limit, output_limit, stop, mode)
        verdicts.extend(TestVerdict(status="not_run") if v is None else v for v in got)
        if stop and any(not v.passed for v in verdicts):
            break
    if stop:
        first_failure = next((i for i, v in enumerate(verdicts) if not v.passed), len(tests))
        verdicts = verdicts[:first_failure + 1]
    verdicts.extend(TestVerdict(status="not_run") for _ in range(len(tests) - len(verdicts)))
    return tuple(verdicts)


def _log_test_faults(cache: VerdictCache, tests: list[TestCase], verdicts: tuple[TestVerdict, ...]) -> None:
    """One warning per test whose verdict is the test's own fault (it counts toward nothing, so a broken
    dataset test must not go unnoticed); ``cache.statuses`` counts every one."""
    for test, verdict in zip(tests, verdicts):
        if verdict.status not in TEST_FAULTS:
            continue
        key = _digest(_test_key(test))
        if key in cache.faulty_tests:
            continue
        cache.faulty_tests.add(key)
        logger.warning("judge: a test's own fault (%s, counted toward nothing): %s; test: %.200r",
                       verdict.status, verdict.error.strip().splitlines()[0] if verdict.error.strip() else "",
                       test.assertion if test.assertion is not None else test.args)


def _check_arguments(programs: Any, tests: Any, time_limit_s: Any, output_limit_bytes: Any,
                     compare: Any) -> None:
    if not isinstance(programs, (list, tuple)) or not all(isinstance(p, str) for p in programs):
        raise TypeError("`programs` must be a list of program source strings")
    if not isinstance(tests, (list, tuple)) or not all(isinstance(t, TestCase) for t in tests):
        raise TypeError("`tests` must be a list of TestCase")
    if not (isinstance(time_limit_s, (int, float)) and not isinstance(time_limit_s, bool)
            and time_limit_s > 0 and math.isfinite(time_limit_s)):
        raise ValueError(f"`time_limit_s` must be a finite number > 0, got {time_limit_s!r}")
    if not (isinstance(output_limit_bytes, int) and not isinstance(output_limit_bytes, bool)
            and output_limit_bytes >= 1):
        raise ValueError(f"`output_limit_bytes` must be an integer >= 1, got {output_limit_bytes!r}")
    if compare not in COMPARE_MODES:
        raise ValueError(f"`compare` must be one of {list(COMPARE_MODES)}, got {compare!r}")


async def run_tests(pool: Any, programs: list[str], tests: list[TestCase], *, time_limit_s: float,
                    stop_on_first_failure: bool = False,
                    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES,
                    compare: str = "float") -> list[list[TestVerdict]]:
    """Judge every program on every test; ``result[p][t]`` is program ``p``'s verdict on test ``t``.

    ``time_limit_s`` is per test (wall clock; the CPU limit of a test is ``ceil(time_limit_s) + 1``
    seconds), ``output_limit_bytes`` caps each of a test's stdout and stderr, ``compare`` is the
    :func:`compare_output` mode for stdin/stdout tests. Distinct programs run concurrently, at most
    ``pool.max_workers`` at a time; identical programs and cached ones are not run again. Raises
    :class:`SandboxError` when the sandbox cannot run the harness.
    """
    _check_arguments(programs, tests, time_limit_s, output_limit_bytes, compare)
    tests = list(tests)
    if not tests:
        return [[] for _ in programs]
    cache = verdict_cache(pool)
    limits = [float(time_limit_s), output_limit_bytes, bool(stop_on_first_failure), compare]
    test_key = digest_of_tests(tests)
    keys = [_digest([hashlib.sha256(p.encode("utf-8")).hexdigest(), test_key, limits]) for p in programs]
    found: dict[str, tuple[TestVerdict, ...]] = {}
    todo: dict[str, str] = {}
    for key, program in zip(keys, programs):
        cached = cache.get(key) if key not in found and key not in todo else None
        if cached is not None:
            found[key] = cached
        elif key not in found:
            todo[key] = program
    results = await asyncio.gather(*(
        _judge_program(pool, program, tests, float(time_limit_s), output_limit_bytes,
                       bool(stop_on_first_failure), compare) for program in todo.values()))
    for key, verdicts in zip(todo, results):
        cache.put(key, verdicts)
        found[key] = verdicts
        _log_test_faults(cache, tests, verdicts)
    return [list(found[key]) for key in keys]


__all__ = [
    "COMPARE_MODES",
    "DEFAULT_OUTPUT_LIMIT_BYTES",
    "FLOAT_TOLERANCE",
    "TestCase",
    "TestVerdict",
    "VERDICT_STATUSES",
    "VerdictCache",
    "compare_output",
    "run_tests",
    "digest_of_tests",
    "harness_source",
    "verdict_cache",
]
