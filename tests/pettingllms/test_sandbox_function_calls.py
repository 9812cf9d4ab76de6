"""Function-style tests judged outside the candidate (``function_calls.py``, ``judge_keeper.py``): the
plain-data encoding (``plain_data.py``), and through a real pool that every way a program could fake a pass fails while honest
programs pass, in both ways of judging (warm server, one launch per program)."""

from __future__ import annotations

import asyncio
import collections
import enum
import math
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.sandbox import SandboxConfig, SandboxPool
from pettingllms.sandbox.function_calls import stdlib_names
from pettingllms.sandbox.judge import TestCase
from pettingllms.sandbox.plain_data import (
    MAX_DEPTH,
    NotPlainData,
    ProtocolError,
    assign_in_place,
    decode,
    encode,
)

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")

CONFIG = dict(cpu_time_s=2, wall_time_s=5, memory_mb=256, file_size_mb=1, scratch_mb=8, max_processes=16,
              max_open_files=32, max_output_bytes=1 << 18)


# --------------------------------------------------------------------------- the encoding (pure)


def same(a, b) -> bool:
    """Equal with exactly the same types all the way down, floats bit for bit."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack(">d", a) == struct.pack(">d", b)
    if type(a) is complex:
        return same(a.real, b.real) and same(a.imag, b.imag)
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items()) \
            and [type(k) for k in a] == [type(k) for k in b]
    return a == b


SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=-10**400, max_value=10**400)
           | st.floats(allow_nan=True, allow_infinity=True) | st.complex_numbers(allow_nan=True)
           | st.text() | st.binary())
HASHABLE = st.recursive(st.none() | st.booleans() | st.integers() | st.text() | st.binary(),
                        lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=8)
PLAIN = st.recursive(
    SCALARS,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
                   | st.dictionaries(HASHABLE, inner, max_size=4) | st.sets(HASHABLE, max_size=4)
                   | st.frozensets(HASHABLE, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(PLAIN)
def test_plain_data_round_trips_with_exact_types(value):
    encoded = encode(value)
    assert same(decode(encoded), value)


def test_floats_cross_bit_exact_and_tuples_stay_tuples():
    values = [float("nan"), -0.0, float("inf"), -float("inf"), 5e-324, 2**200, -(2**70), (1, [2]), {(1, 2): {3}},
              frozenset({1}), b"\x00\xff", 1 + 2j, True]
    back = decode(encode(values))
    assert same(back, values)
    assert math.copysign(1.0, back[1]) == -1.0 and math.isnan(back[0])
    assert type(back[7]) is tuple and type(back[7][1]) is list


def test_shared_containers_stay_shared_and_cycles_do_not_encode():
    inner = [1]
    back = decode(encode((inner, inner, {"a": inner})))
    assert back[0] is back[1] is back[2]["a"]
    loop = []
    loop.append(loop)
    with pytest.raises(NotPlainData, match="cycle"):
        encode(loop)
    nested = deep = []
    for _ in range(MAX_DEPTH - 1):
        deep.append([])
        deep = deep[0]
    assert decode(encode(nested)) == nested  # MAX_DEPTH levels cross
    deep.append([])
    with pytest.raises(NotPlainData, match="deeper than 1000"):
        encode(nested)


class Color(enum.IntEnum):
    RED = 1


class Text(str):
    pass


@pytest.mark.parametrize("value, type_name", [
    (collections.namedtuple("Point", "x y")(1, 2), "Point"),
    (collections.defaultdict(int), "collections.defaultdict"),
    (collections.OrderedDict(), "collections.OrderedDict"),
    (Color.RED, "Color"),
    (Text("yes"), "Text"),
    ((i for i in range(2)), "generator"),
    (len, "builtin_function_or_method"),
    (object(), "object"),
    ([1, {"k": object()}], "object"),
])
def test_anything_but_exact_plain_types_is_refused_by_name(value, type_name):
    with pytest.raises(NotPlainData, match=type_name):
        encode(value)


def test_numpy_scalars_do_not_cross():
    np = pytest.importorskip("numpy")
    with pytest.raises(NotPlainData, match="numpy"):
        encode(np.int64(3))


@pytest.mark.parametrize("data, match", [
    (1.5, "not an encoded value"), ({"a": 1}, "not an encoded value"), (["Q", 1], "unknown tag"),
    (["f", "zz"], "bad float bits"), (["I", "xyz"], "bad int"), (["R", 0], "reference 0"),
    (["D", 1], "key but no value"), (["S", ["L"]], "bad container"), (["D", ["L"], 1], "bad container"),
])
def test_decoding_rejects_what_encode_never_makes(data, match):
    with pytest.raises(ProtocolError, match=match):
        decode(data)


def test_assign_in_place_keeps_the_objects_a_test_holds():
    inner = [1, 2]
    outer = [inner, 3, 4]
    assign_in_place(outer, [[9], 3])
    assert outer == [[9], 3] and outer[0] is inner
    table = {"a": [1], "b": 2}
    kept = table["a"]
    assign_in_place(table, {"a": [1, 5], "c": 3})
    assert table == {"a": [1, 5], "c": 3} and table["a"] is kept
    seen = {1}
    held = ([1], seen)
    assign_in_place(held, ([1, 2], {2}))
    assert held == ([1, 2], {2}) and held[1] is seen


def test_stdlib_names_are_the_unbound_module_names_a_test_uses():
    assert stdlib_names("assert math.isclose(f(1), 2.0)\nassert re.match('a', f(2))") == ["math", "re"]
    assert stdlib_names("import math\nassert math.isclose(f(1), 1)") == []
    assert stdlib_names("def check(string):\n    assert string.upper()") == []  # a parameter, not the module
    assert stdlib_names("this.x; antigravity.y; len.x") == []
    assert stdlib_names("not python (") == []


def test_a_call_test_needs_plain_values_and_optimising_interpreters_are_refused():
    with pytest.raises(TypeError, match="`args` of a call test must be plain data: .*function"):
        TestCase(args=(lambda x: x,), expected=1, entry_point="f")
    with pytest.raises(TypeError, match="`expected` of a call test must be plain data"):
        TestCase(args=(), expected=object(), entry_point="f")
    with pytest.raises(ValueError, match="`python_args` must not hold '-O'"):
        SandboxConfig(python_args=("-I", "-O"))
    with pytest.raises(ValueError, match="PYTHONOPTIMIZE"):
        SandboxConfig(extra_env={"PYTHONOPTIMIZE": "1"})


# --------------------------------------------------------------------------- through a real pool


@pytest.fixture(scope="module", params=[True, False], ids=["warm-server", "launch-per-program"])
def pool(request):
    with SandboxPool(SandboxConfig(**CONFIG, judge_server=request.param), max_workers=2) as p:
        yield p


def judge(pool, programs, tests, **options):
    options.setdefault("time_limit_s", 2.0)
    return asyncio.run(pool.run_tests(programs, tests, **options))


def statuses(rows):
    return [[v.status for v in row] for row in rows]


DOUBLE = "def f(x):\n    return 2 * x\n"
DOUBLE_TESTS = [TestCase(assertion="assert f(2) == 4\nassert f(-3) == -6", entry_point="f"),
                TestCase(args=(21,), expected=42, entry_point="f")]

# Programs that stop, crash or exit instead of answering: with exit status 0 and without. Every one of them
# "passed" the old harness, which mapped a status-0 exit to a pass.
EXITS = {
    "sys_exit_0": "import sys\nsys.exit(0)\n",
    "os_exit_0": "import os\nos._exit(0)\n",
    "exit_builtin": "exit()\n",
    "quit_builtin": "quit()\n",
    "raise_systemexit": "raise SystemExit\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\ndef f(x):\n    return x\n",
    "excepthook": "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\ndef f(x):\n    return None\n"
                  "raise RuntimeError('then exit through the hook')\n",
    "signal_handler": "import os, signal\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
                      "signal.setitimer(signal.ITIMER_REAL, 0.05)\ndef f(x):\n    import time\n"
                      "    time.sleep(1)\n    return None\n",
    "late_thread": "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.05), os._exit(0)))"
                   ".start()\ndef f(x):\n    time.sleep(1)\n",
    "kill_self": "import os, signal\ndef f(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "exit_in_call": "import sys\ndef f(x):\n    sys.exit(0)\n",
    "os_exit_in_call": "import os\ndef f(x):\n    os._exit(0)\n",
    "systemexit_in_call": "def f(x):\n    raise SystemExit(0)\n",
}


@needs_linux
def test_exiting_instead_of_answering_never_passes(pool):
    # Also when the test swallows every exception around the call: an exit is not an exception.
    catch_all = TestCase(assertion="try:\n    f(1)\nexcept BaseException:\n    pass", entry_point="f")
    rows = judge(pool, list(EXITS.values()), [*DOUBLE_TESTS, catch_all])
    for name, row in zip(EXITS, rows):
        if name == "atexit":  # it answers (wrongly); its exit handler runs after the verdict, if ever
            assert [v.status for v in row] == ["wrong_answer", "wrong_answer", "passed"], row
            continue
        assert [v.status for v in row] == ["runtime_error"] * 3, (name, row)
        assert all(v.counted for v in row), name


FAKES = {
    # A value that equals everything: it does not cross.
    "always_equal": "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                    "def f(x):\n    return Yes()\n",
    "int_subclass": "class I(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return I(0)\n",
    "str_subclass": "class S(str):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return S('')\n",
    # Shadowing what the test uses: the test runs in the trusted interpreter, not in the program's namespace.
    "shadow_builtins": "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.abs = lambda x: 0\n"
                       "builtins.AssertionError = type('Never', (Exception,), {})\ndef f(x):\n    return 'no'\n",
    "shadow_globals": "isinstance = lambda *a: True\nlen = lambda x: 2\nlist = tuple\ndef f(x):\n    return 'no'\n",
    # Patching what ran after the program in the old harness.
    "patch_runtime": "import builtins, os, sys\nos._exit = lambda code: None\nbuiltins.exec = lambda *a, **k: None\n"
                     "builtins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\nsys.exit = lambda *a: None\n"
                     "def f(x):\n    return 0\n",
    # Rewriting the pending assertion through the caller's frames or the garbage collector.
    "frames_and_gc": "import gc, sys\n"
                     "def f(x):\n"
                     "    frame = sys._getframe()\n"
                     "    while frame is not None:\n"
                     "        frame.f_globals['x'] = 0\n"
                     "        frame = frame.f_back\n"
                     "    for obj in gc.get_objects():\n"
                     "        if isinstance(obj, dict) and 'assertion' in obj:\n"
                     "            obj['assertion'] = 'pass'\n"
                     "    return 0\n",
}


@needs_linux
def test_faked_results_never_pass(pool):
    tests = [*DOUBLE_TESTS,
             TestCase(assertion="assert isinstance(f(1), int) and abs(f(1)) == 2 and len(list([f(1)])) == 1",
                      entry_point="f")]
    rows = judge(pool, [DOUBLE, *FAKES.values()], tests)
    assert statuses(rows[:1]) == [["passed"] * 3]
    for name, row in zip(FAKES, rows[1:]):
        assert not any(v.passed for v in row), (name, row)


PEEKER = r"""
import os
needle_head, needle_tail = b'== "SEC', b'RET_7319"'
def scan():
    found = 0
    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith('r') or '[vvar]' in line or '[vsyscall]' in line:
                continue
            start, end = (int(x, 16) for x in span.split('-'))
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            at = data.find(needle_head)
            while at >= 0:
                found += data[at + len(needle_head):at + len(needle_head) + len(needle_tail)] == needle_tail
                at = data.find(needle_head, at + 1)
    return found
def in_files():
    found = 0
    for root in ('.', '/tmp'):
        for name in os.listdir(root):
            try:
                data = open(os.path.join(root, name), 'rb').read()
            except OSError:
                continue
            at = data.find(needle_head)
            while at >= 0:
                found += data[at + len(needle_head):at + len(needle_head) + len(needle_tail)] == needle_tail
                at = data.find(needle_head, at + 1)
    return found
print('found in files:', in_files())
print('found at start:', scan())
def f(x):
    print('found in call:', scan())
    return 'guess'
"""


@needs_linux
def test_the_candidate_never_holds_the_test_or_its_expected_values(pool):
    # The program reads all of its own memory looking for the test's text: it is not there (the harness it
    # is forked from never read the trusted frame), neither while loading nor during the call.
    tests = [TestCase(assertion='assert f(1) == "SECRET_7319"', entry_point="f"),
             TestCase(args=(1,), expected="SECRET_7319", entry_point="f")]
    (row,) = judge(pool, [PEEKER], tests, time_limit_s=5.0)
    for verdict in row:
        assert verdict.status == "wrong_answer", verdict
        assert "found in files: 0\nfound at start: 0\nfound in call: 0\n" in verdict.output, verdict.output


@needs_linux
def test_names_from_the_dataset_come_from_its_setup_not_from_the_candidate(pool):
    # HumanEval/32 in small: the check evaluates the dataset's own helper on the returned value.
    setup = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n" \
            "def find_zero(xs):\n    '''a root of poly(xs, x)'''\n"
    check = "def check(candidate):\n    x = candidate([-6, 1])\n    assert abs(poly([-6, 1], x)) < 1e-6\n" \
            "check(find_zero)\n"
    test = TestCase(assertion=check, entry_point="find_zero", setup=setup)
    honest = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
    forged = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 123.0\n"
    stub_only = "def find_zero(xs):\n    '''a root of poly(xs, x)'''\n"
    assert statuses(judge(pool, [honest, forged, stub_only], [test])) == [["passed"], ["wrong_answer"],
                                                                          ["wrong_answer"]]


@needs_linux
def test_candidate_exceptions_cross_as_builtin_classes(pool):
    program = ("class Custom(Exception):\n    pass\n"
               "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n"
               "    if x == 0:\n        raise Custom('zero')\n    return {}[x]\n")
    expect = "try:\n    f({arg})\nexcept {kind} as exc:\n    assert {check}\nelse:\n    assert False"
    tests = [TestCase(assertion=expect.format(arg=-1, kind="ValueError", check="str(exc) == 'negative'"),
                      entry_point="f"),
             TestCase(assertion=expect.format(arg=5, kind="KeyError", check="True"), entry_point="f"),
             TestCase(assertion=expect.format(arg=0, kind="RuntimeError", check="'Custom: zero' in str(exc)"),
                      entry_point="f"),
             TestCase(assertion="f(-1)", entry_point="f")]  # not caught: the candidate's runtime error
    (row,) = judge(pool, [program], tests)
    assert [v.status for v in row] == ["passed", "passed", "passed", "runtime_error"], row
    assert "the candidate raised ValueError: negative" in row[3].error


@needs_linux
def test_arguments_alias_and_state_lives_for_one_test(pool):
    program = ("calls = 0\n"
               "def f(xs, table):\n    global calls\n    calls += 1\n    xs.append(calls)\n"
               "    xs[0].append('in')\n    table['n'] = calls\n    return calls\n")
    test = ("inner = []\nxs = [inner]\ntable = {}\n"
            "assert f(xs, table) == 1 and f(xs, table) == 2\n"
            "assert xs == [['in', 'in'], 1, 2] and xs[0] is inner and table == {'n': 2}\n")
    rows = judge(pool, [program], [TestCase(assertion=test, entry_point="f")] * 2)
    assert statuses(rows) == [["passed", "passed"]], rows  # the second test starts from a fresh program


@needs_linux
def test_a_solution_class_is_made_and_called_in_the_candidate(pool):
    program = ("class Solution:\n    def __init__(self):\n        self.total = 0\n"
               "    def add(self, x):\n        self.total += x\n        return self.total\n")
    tests = [TestCase(assertion="s = Solution()\ns.add(2)\nassert s.add(3) == 5\nassert Solution().add(1) == 1",
                      entry_point="add"),
             TestCase(args=(7,), expected=7, entry_point="add", solution_class=True),
             TestCase(args=(7,), expected=8, entry_point="add", solution_class=True),
             TestCase(args=(7,), expected=7, entry_point="missing", solution_class=True)]
    (row,) = judge(pool, [program], tests)
    assert [v.status for v in row] == ["passed", "passed", "wrong_answer", "runtime_error"], row
    assert "has no method `missing`" in row[3].error


@needs_linux
def test_using_a_handle_as_a_value_fails_and_the_tests_faults_count_for_nothing(pool):
    tests = [TestCase(assertion="assert f == f", entry_point="f"),
             TestCase(assertion="assert f", entry_point="f"),
             TestCase(assertion="assert len([*Solution().items])", entry_point="f"),
             TestCase(assertion="assert True", entry_point="f"),
             TestCase(assertion="assert f(1) ==", entry_point="f"),
             TestCase(assertion="assert f(2) == 4", entry_point="f", setup="raise ImportError('dataset')"),
             TestCase(assertion="assert f(lambda x: x) == 2", entry_point="f"),
             TestCase(assertion="assert f(2) == 4\nassert f(len) == 2", entry_point="f")]
    (row,) = judge(pool, [DOUBLE + "class Solution:\n    items = [1]\n"], tests)
    assert [v.status for v in row] == ["wrong_answer", "wrong_answer", "wrong_answer", "test_error", "test_error",
                                       "test_error", "unsupported", "unsupported"], row
    assert "used the candidate's function f as a value (==)" in row[0].error
    assert [v.counted for v in row[3:]] == [False] * 5
    assert "never called the candidate" in row[3].error and "ImportError: dataset" in row[5].error


@needs_linux
def test_the_tests_own_faults_are_counted_and_logged_once(pool, caplog):
    from pettingllms.sandbox.judge import verdict_cache

    broken = TestCase(assertion="assert f(2) == 4", entry_point="f", setup="raise ImportError('dataset gone')")
    before = verdict_cache(pool).statuses["test_error"]
    with caplog.at_level("WARNING", logger="pettingllms.sandbox.judge"):
        judge(pool, [DOUBLE, DOUBLE + "# another program\n"], [broken, *DOUBLE_TESTS])
    assert verdict_cache(pool).statuses["test_error"] - before == 2  # one per program judged
    warnings = [r.getMessage() for r in caplog.records if "own fault" in r.getMessage()]
    assert len(warnings) == 1 and "ImportError: dataset gone" in warnings[0]


@needs_linux
def test_hangs_floods_and_attacks_on_the_evaluator_fail_only_their_program(pool):
    programs = {
        "hang": "def f(x):\n    while True:\n        pass\n",
        "flood": "def f(x):\n    while True:\n        print('x' * 1000)\n",
        "huge": "def f(x):\n    return 'x' * (17 << 20)\n",  # past the 16 MiB a message may take
        "kill_others": ("import os, signal\ndef f(x):\n    for pid in os.listdir('/proc'):\n"
                        "        if pid.isdigit() and int(pid) != os.getpid():\n            try:\n"
                        "                os.kill(int(pid), signal.SIGKILL)\n            except OSError:\n"
                        "                pass\n    return 2 * x\n"),
        "stop_others": ("import os, signal\ndef f(x):\n    for pid in os.listdir('/proc'):\n"
                        "        if pid.isdigit() and int(pid) != os.getpid():\n            try:\n"
                        "                os.kill(int(pid), signal.SIGSTOP)\n            except OSError:\n"
                        "                pass\n    return 2 * x\n"),
    }
    rows = judge(pool, [*programs.values(), DOUBLE], DOUBLE_TESTS, time_limit_s=1.0, output_limit_bytes=4096)
    by_name = dict(zip([*programs, "honest"], rows))
    assert [v.status for v in by_name["hang"]] == ["timeout", "timeout"]
    assert [v.status for v in by_name["flood"]] == ["output_limit", "output_limit"]
    assert [v.status for v in by_name["huge"]] == ["runtime_error", "runtime_error"]
    assert "longer than 16777216 bytes" in by_name["huge"][0].error
    for name in ("kill_others", "stop_others"):
        assert not any(v.passed for v in by_name[name]), (name, by_name[name])
    assert [v.status for v in by_name["honest"]] == ["passed", "passed"]
    assert all(v.seconds is None or v.seconds < 3.0 for row in rows for v in row)  # None: the harness was killed


@needs_linux
def test_results_up_to_megabytes_and_deep_values_cross(pool):
    program = ("def f(n):\n    out = cur = []\n    for _ in range(n):\n        cur.append([])\n"
               "        cur = cur[0]\n    return [list(range(100_000)), out, 10 ** 5000, float('nan')]\n")
    test = TestCase(assertion="v = f(900)\nassert v[0] == list(range(100_000)) and v[2] == 10 ** 5000\n"
                              "assert v[3] != v[3]\ndepth, cur = 0, v[1]\nwhile cur:\n    depth, cur = depth + 1, cur[0]\n"
                              "assert depth == 900", entry_point="f")
    assert statuses(judge(pool, [program], [test], time_limit_s=5.0)) == [["passed"]]
