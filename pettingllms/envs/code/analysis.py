"""Static reading of ground-truth tests (nothing here runs code): which function-style tests the trusted
evaluator can run, what a test expects, and which tests are the statement's own examples.

The judge runs a function-style test (an ``assert`` line, or HumanEval's ``check(candidate)`` program and
its call) in a trusted process, where the candidate's function and class are remote handles and values
cross as plain data (see :class:`~pettingllms.sandbox.judge.TestCase`). That namespace holds the Python
builtins, what the dataset's trusted ``setup`` binds, the entry point and ``Solution`` (the handles), and
any top-level standard-library module the test names (imported on demand). So a test is **unsupported**
(:func:`classify_function_test` gives the reason) when it

(a) reads a name none of these provide (:func:`free_names`, a scope-aware analysis by the compiler's own
    symbol tables): e.g. MBPP tests that build ``Pair(5, 24)`` from a class the *solution* defines;
(b) passes a lambda or a generator expression to the candidate (not plain data: it cannot cross);
(c) never calls the entry point, ``candidate`` or ``Solution`` (it would pass whatever the program does).

:func:`classify_tests` applies the classification to a problem (the loaders call it), :func:`trusted_setup`
gives the trusted code its tests run after, :func:`count_tests` sums up the result.
:func:`expected_output_key` reads what a test expects (for the constant-program baseline of the rewards),
and :func:`stdio_test_shown` / :func:`function_test_shown` tell whether a test is one of the examples the
prompt shows (training does not reward passing them).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import math
import re
import symtable
import sys
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CANDIDATE",
    "SOLUTION_CLASS",
    "TestCounts",
    "classify_function_test",
    "classify_tests",
    "count_tests",
    "equality_test_parts",
    "expected_output_key",
    "free_names",
    "function_test_shown",
    "module_bindings",
    "reason_template",
    "stdio_test_shown",
    "trusted_setup",
    "whitespace_tokens",
]

#: The parameter name HumanEval's ``check`` gives the function under test.
CANDIDATE = "candidate"
#: The class LeetCode-style problems (APPS, LiveCodeBench) define; a remote handle on the trusted side.
SOLUTION_CLASS = "Solution"
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(sys.stdlib_module_names)


# ------------------------------------------------------------------------------------ names and scopes


def _tables(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    yield table
    for child in table.get_children():
        yield from _tables(child)


@functools.lru_cache(maxsize=4096)
def _global_scope(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """(names bound in the module's global namespace, names read from it), by the compiler's symbol tables:
    a function's parameters, locals and comprehension targets stay in their scope, a nested function's
    free variables resolve to the enclosing function, class bodies do not leak into methods."""
    top = symtable.symtable(source, "<test>", "exec")
    bound: set[str] = set()
    read: set[str] = set()
    for table in _tables(top):
        for symbol in table.get_symbols():
            name = symbol.get_name()
            binds = symbol.is_assigned() or symbol.is_imported()
            if table is top:
                if binds:
                    bound.add(name)
                if symbol.is_referenced():
                    read.add(name)
            else:
                if symbol.is_declared_global() and binds:  # `global x; x = ...` binds the module's x
                    bound.add(name)
                if symbol.is_global() and symbol.is_referenced():
                    read.add(name)
    return frozenset(bound), frozenset(read)


def module_bindings(source: str) -> frozenset[str]:
    """Names ``source`` binds at module level (defs, classes, imports, assignment, loop, ``with`` and
    ``except`` targets, ``global`` declarations assigned in a function); empty when it does not parse."""
    try:
        return _global_scope(source)[0]
    except SyntaxError:
        return frozenset()


def free_names(source: str) -> frozenset[str]:
    """Names ``source`` reads from its global namespace without binding them there itself (builtins
    included: the caller decides what the namespace provides). Raises SyntaxError when it does not parse."""
    bound, read = _global_scope(source)
    return read - bound


# ------------------------------------------------------------------------------- calls of the candidate


def _solution_instances(module: ast.Module) -> frozenset[str]:
    """Names the test binds to ``Solution(...)`` (``s = Solution(); s.f(1)``)."""
    names = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and _is_solution(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def _is_solution(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == SOLUTION_CLASS


def _target_name(call: ast.Call, entry_point: str, instances: frozenset[str]) -> str | None:
    """How a call of the candidate is written (``f``, ``candidate``, ``Solution``, ``Solution().f``), or
    None when ``call`` calls something else."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in (entry_point, CANDIDATE, SOLUTION_CLASS):
        return func.id
    if isinstance(func, ast.Attribute) and (
        _is_solution(func.value) or (isinstance(func.value, ast.Name) and func.value.id in instances)
    ):
        return f"{SOLUTION_CLASS}().{func.attr}"
    return None


def _candidate_calls(module: ast.Module, entry_point: str) -> list[tuple[ast.Call, str]]:
    instances = _solution_instances(module)
    calls = []
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            name = _target_name(node, entry_point, instances)
            if name is not None:
                calls.append((node, name))
    return calls


def _passed_values(call: ast.Call) -> Iterator[ast.AST]:
    """The argument expressions of ``call``, and the elements of container literals among them."""
    todo: list[ast.AST] = [*call.args, *(k.value for k in call.keywords)]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            todo.extend(node.elts)
        elif isinstance(node, ast.Dict):
            todo.extend(v for v in (*node.keys, *node.values) if v is not None)
        elif isinstance(node, ast.Starred):
            todo.append(node.value)


def classify_function_test(assertion: str, entry_point: str, setup: str = "", solution: str = "") -> str | None:
    """``None`` when the trusted evaluator can run this function-style test, else why it cannot (see the
    module docstring). ``setup``: the trusted code run before it (its bindings are available);
    ``solution``: a reference solution, only to say that a missing name is one the solution defines."""
    try:
        module = ast.parse(assertion)
        missing = free_names(assertion)
    except (SyntaxError, ValueError) as error:  # ValueError: a null byte in the source
        return f"does not parse ({type(error).__name__})"
    missing -= _BUILTINS | _STDLIB | module_bindings(setup) | {entry_point, SOLUTION_CLASS}
    if missing:
        names = sorted(missing)
        ours = module_bindings(solution)
        if all(name in ours for name in names):
            return f"uses {_quoted(names)}, which the solution defines"
        return f"uses {_quoted(names)}, which no builtin, standard-library module, setup or the test defines"
    calls = _candidate_calls(module, entry_point)
    for call, name in calls:
        for value in _passed_values(call):
            if isinstance(value, ast.Lambda):
                return f"passes a lambda to `{name}`"
            if isinstance(value, ast.GeneratorExp):
                return f"passes a generator expression to `{name}`"
    if not calls:
        return f"never calls `{entry_point}`"
    return None


def _quoted(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def reason_template(reason: str) -> str:
    """A reason with the names it quotes blanked (``uses `Pair`, ...`` -> ``uses `...`, ...``), to count
    reasons by kind."""
    return re.sub(r"`[^`]*`(?:, `[^`]*`)*", "`...`", reason)


# ------------------------------------------------------------------------------- a problem's test sets
# ``problem`` below is a :class:`~pettingllms.envs.code.data.CodeProblem` (not imported: the data module
# imports this one).


def trusted_setup(problem: Any) -> str:
    """The trusted code a function-style test of ``problem`` runs after: ``test_setup``, or for a HumanEval
    record written before that field existed, its prompt (imports, helpers such as ``poly``, the entry
    point's stub)."""
    if problem.test_setup or problem.style != "function":
        return problem.test_setup
    return problem.prompt if problem.dataset == "humaneval" else ""


def classify_tests(problem: Any) -> Any:
    """``problem`` with every function-style test the trusted evaluator cannot run moved from ``tests`` and
    ``public_tests`` to ``unsupported_tests`` (with the reason of :func:`classify_function_test`); stdio
    problems unchanged. Idempotent."""
    if problem.style != "function":
        return problem
    setup = trusted_setup(problem)
    solution = problem.solutions[0] if problem.solutions else ""
    reasons: dict[str, str | None] = {}
    for test in (*problem.tests, *problem.public_tests):
        if test["assertion"] not in reasons:
            reasons[test["assertion"]] = classify_function_test(test["assertion"], problem.entry_point, setup, solution)
    if not any(reasons.values()):
        return problem
    known = {t["assertion"] for t in problem.unsupported_tests}
    moved = [{"assertion": a, "reason": r} for a, r in reasons.items() if r is not None and a not in known]
    return dataclasses.replace(
        problem,
        tests=[t for t in problem.tests if reasons[t["assertion"]] is None],
        public_tests=[t for t in problem.public_tests if reasons[t["assertion"]] is None],
        unsupported_tests=[*problem.unsupported_tests, *moved],
    )


@dataclass(frozen=True)
class TestCounts:
    """How the tests of some problems were classified (:func:`count_tests`)."""

    __test__ = False  # not a pytest class

    problems: int = 0
    stdio: int = 0
    supported: int = 0
    unsupported: int = 0
    reasons: tuple[tuple[str, int], ...] = ()  # (reason with its names blanked, count), most frequent first
    untestable: tuple[str, ...] = ()  # ids of problems left with no test

    def summary(self) -> str:
        """One line: stdio tests, function tests supported / unsupported with the reasons counted."""
        parts = [f"{self.problems} problems", f"{self.stdio} stdin/stdout tests",
                 f"{self.supported} function tests supported", f"{self.unsupported} unsupported"]
        line = ", ".join(parts)
        if self.reasons:
            line += " (" + "; ".join(f"{count} {reason}" for reason, count in self.reasons) + ")"
        if self.untestable:
            shown = ", ".join(self.untestable[:5]) + (", ..." if len(self.untestable) > 5 else "")
            line += f"; {len(self.untestable)} problem(s) left with no test: {shown}"
        return line


def count_tests(problems: Iterable[Any]) -> TestCounts:
    """Tests of classified ``problems`` by kind (a test both public and hidden counts once)."""
    problems = list(problems)
    reasons = Counter(reason_template(t["reason"]) for p in problems for t in p.unsupported_tests)
    return TestCounts(
        problems=len(problems),
        stdio=sum(len(p.tests) for p in problems if p.style == "stdio"),
        supported=sum(len(p.tests) for p in problems if p.style == "function"),
        unsupported=sum(len(p.unsupported_tests) for p in problems),
        reasons=tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))),
        untestable=tuple(p.problem_id for p in problems if not p.tests),
    )


# ------------------------------------------------------------------------------- what a test expects


def equality_test_parts(assertion: str, entry_point: str) -> tuple[ast.Call, ast.expr] | None:
    """``(call, expected)`` of a test written ``assert <call> == <expected>`` (either side) or in the
    ``_got = <call>`` / ``_want = <expected>`` form the APPS and LiveCodeBench loaders write, where
    ``<call>`` calls the candidate (``f(...)``, ``candidate(...)``, ``Solution().f(...)``); else None.
    Statements before the assertion (MBPP's setup lines) are allowed."""
    try:
        module = ast.parse(assertion)
    except (SyntaxError, ValueError):
        return None
    instances = _solution_instances(module)

    def is_call(node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and _target_name(node, entry_point, instances) is not None

    assigned = {
        node.targets[0].id: node.value for node in module.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
    got, want = assigned.get("_got"), assigned.get("_want")
    if got is not None and want is not None and is_call(got):
        return got, want
    last = module.body[-1] if module.body else None
    if not isinstance(last, ast.Assert):
        return None
    test = last.test
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        left, right = test.left, test.comparators[0]
        if is_call(left):
            return left, right
        if is_call(right):
            return right, left
    return None


def _value_key(value: Any) -> Hashable:
    """A key equal for values a constant return value would match alike (``1 == 1.0 == True``; a tuple
    result is compared as a list)."""
    if isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value) and value.is_integer()):
        return ("number", int(value))
    if isinstance(value, (float, complex)):
        return ("number", value) if value == value else ("nan",)
    if isinstance(value, (list, tuple)):
        return ("sequence", tuple(_value_key(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(_value_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_value_key(k), _value_key(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def _literal_key(node: ast.expr) -> Hashable | None:
    try:
        return _value_key(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def expected_output_key(test: dict[str, str], entry_point: str | None) -> Hashable | None:
    """What ``test`` expects, as a key equal across tests a single constant output would pass alike, or
    None where it cannot be read (such a test counts as its own output).

    stdio: the expected stdout's whitespace tokens. Function style: the literal of ``assert <call> ==
    <expected>`` / ``_want``; ``assert <call>`` expects True and ``assert not <call>`` False.
    """
    if "expected_stdout" in test:
        return ("stdout", whitespace_tokens(test["expected_stdout"]))
    if entry_point is None:
        return None
    parts = equality_test_parts(test["assertion"], entry_point)
    if parts is not None:
        return _literal_key(parts[1])
    try:
        module = ast.parse(test["assertion"])
    except (SyntaxError, ValueError):
        return None
    last = module.body[-1] if module.body else None
    if not isinstance(last, ast.Assert):
        return None
    node, truth = last.test, True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node, truth = node.operand, False
    instances = _solution_instances(module)
    if isinstance(node, ast.Call) and _target_name(node, entry_point, instances) is not None:
        return _value_key(truth)
    return None


# --------------------------------------------------------------------------- the statement's examples


def whitespace_tokens(text: str) -> str:
    """``text`` split on whitespace and joined with single spaces."""
    return " ".join(text.split())


def stdio_test_shown(stdin: str, expected_stdout: str, shown: str) -> bool:
    """Whether a stdin/stdout test is one of the examples in ``shown`` (the rendered statement): its
    input and its expected output each occur there as whole whitespace tokens (whitespace normalised).
    A test whose input and output are both empty shows nothing, so it is never an example."""
    text = f" {whitespace_tokens(shown)} "
    given, wanted = whitespace_tokens(stdin), whitespace_tokens(expected_stdout)
    if not given and not wanted:
        return False
    return all(not part or f" {part} " in text for part in (given, wanted))


def _renderings(node: ast.expr, source: str) -> set[str]:
    """Ways a value may be written in a statement: as in the test, unparsed, and its literal's repr."""
    forms = {ast.get_source_segment(source, node) or "", ast.unparse(node)}
    try:
        forms.add(repr(ast.literal_eval(node)))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    # Strings may be shown in double quotes (`"abc"`, `["a", "b"]`).
    forms |= {form.replace("'", '"') for form in forms if '"' not in form}
    return {_no_space(form) for form in forms if form}


def _no_space(text: str) -> str:
    return "".join(text.split())


class _Compact:
    """A text with its whitespace removed, remembering where whitespace was (a boundary between words)."""

    def __init__(self, text: str) -> None:
        chars, gaps, gap = [], set(), True
        for char in text:
            if char.isspace():
                gap = True
                continue
            if gap:
                gaps.add(len(chars))
            chars.append(char)
            gap = False
        gaps.add(len(chars))
        self.text, self.gaps = "".join(chars), gaps

    def _word(self, index: int) -> bool:
        """Whether the character at ``index`` continues a name or number: a letter, digit or ``_``, or a
        decimal point between digits."""
        if not 0 <= index < len(self.text):
            return False
        char = self.text[index]
        if char == ".":
            return self.text[index - 1:index].isdigit() and self.text[index + 1:index + 2].isdigit()
        return char.isalnum() or char == "_"

    def holds(self, literal: str) -> bool:
        """Whether ``literal`` (whitespace removed) occurs whole: not glued to a name or number around it
        (``1`` is not in ``10``, ``x1`` or ``1.5``; it is in ``[0,1]`` and ``is 1.``)."""
        start = self.text.find(literal)
        while start >= 0:
            end = start + len(literal)
            left_ok = start in self.gaps or not (self._word(start - 1) and self._word(start))
            right_ok = end in self.gaps or not (self._word(end - 1) and self._word(end))
            if left_ok and right_ok:
                return True
            start = self.text.find(literal, start + 1)
        return False


def function_test_shown(assertion: str, entry_point: str, shown: str) -> bool:
    """Whether a function test ``assert f(<args>) == <expected>`` (or the ``_got`` / ``_want`` form) is
    one of the examples in ``shown``: every argument and the expected value occur there, all whitespace
    removed (as written in the test, unparsed, or as the literal's repr), each whole (``1`` does not
    occur in ``10`` or ``1.5``). APPS wraps expected values in a one-element list; its element also
    counts. Other forms of test are never examples."""
    parts = equality_test_parts(assertion, entry_point)
    if parts is None:
        return False
    call, expected = parts
    text = _Compact(shown)
    wanted = [expected]
    if isinstance(expected, ast.List) and len(expected.elts) == 1:
        wanted.append(expected.elts[0])
    if not any(text.holds(form) for node in wanted for form in _renderings(node, assertion)):
        return False
    arguments = [*call.args, *(k.value for k in call.keywords)]
    return all(any(text.holds(form) for form in _renderings(arg, assertion)) for arg in arguments)
