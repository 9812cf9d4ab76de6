"""The evidence behind the tester's local reward: which generated tests are valid, and which catch a program
known to be wrong (the formula it feeds: :func:`~pettingllms.envs.code.rewards.generated_tests_reward`).

Why. A reward for "the reference passes the test and the current program fails it" pays for tests that say
nothing about behaviour: a tautology passes everything, a test that reads ``solution.py`` fails a correct
program, an input outside the problem's domain that a lenient reference accepts tells programs apart on
nothing the problem asks, and before the first program "fails" every test. So a test is paid only for
evidence: it is behavioural (a literal call, or a stdin / expected-stdout pair: see ``parsing.py``), it is
valid, and it fails a program *known* to be wrong.

Per problem, once (:func:`problem_evidence`; cached per sandbox pool, since the engine makes an environment
per episode and clones environments for tree sampling; concurrent steps of one problem share one
computation), in one sandbox batch of the candidates and the first one's mutants on the ground-truth tests:

* **good references**: of the dataset's first :data:`MAX_REFERENCES` reference solutions, those that pass
  every counted ground-truth test (at least one). A reference that fails its own tests is not used (a
  warning names the problem). No good reference: no local tester reward (``None``; LiveCodeBench has no
  reference at all), and the tester learns from the global part only.
* **signatures** (function problems, :func:`call_signatures`): every call of the entry point in the
  dataset's own tests (``tests``, ``public_tests``, ``unsupported_tests``) whose arguments are all
  literals: ``f(...)`` (MBPP), ``candidate(...)`` (HumanEval's ``check``), ``Solution().f(...)`` (the APPS
  and LiveCodeBench loaders' ``_got = ...``). Calls with another argument are skipped and counted. A
  function problem with no such call (HumanEval 32 calls ``candidate(copy.deepcopy(coeffs))``) cannot
  validate a generated test: no local tester reward either (``None``, never a positive number).
* **wrong mutants**: at most :data:`MAX_MUTANTS` mutants of the first good reference
  (:func:`~pettingllms.envs.code.mutants.mutants`, seed :data:`MUTANT_SEED`; inside the entry point for a
  plain function problem, whose setup shares the module, the whole program otherwise) that fail at least
  one counted ground-truth test. Two kinds are left out: ``return None`` mutants (any test that expects a
  value fails them, so failing one is no evidence of a test's power: with them every valid test would earn
  the catch) and mutants that time out on a ground-truth test (caught by any test that reaches the loop,
  and each would cost the time limit per generated test).

Argument shapes (:func:`value_shape`, :func:`shape_accepts`), what "well-typed" compares: a value's shape is
its type, recursively for containers: ``list[int]``, ``dict[str, list[float]]``, ``tuple[int | str]``.

* ``bool`` and ``int`` are different shapes (``True`` where the dataset passes numbers is out of domain);
  an ``int`` is accepted where the dataset passes a ``float`` (a whole number is a real number), a
  ``float`` never where it passes an ``int``; ``None`` only where the dataset passes ``None``.
* A container's shape is the union of its elements' shapes (tuples too: positions are not told apart);
  a generated container is accepted when each of its element shapes is accepted by one of the dataset's
  for that position. An empty generated container is accepted wherever the dataset passes one of its kind
  (it holds nothing of a wrong type); a dataset that only ever passes an empty container accepts only
  empty ones (its element type is unknown).
* Per arity and position, the shapes of every dataset call are pooled: a generated call is well-typed
  when the dataset has calls of its arity and each argument is accepted at its position.

Only types are checked, not ranges: a negative number where the statement asks for a positive one is
well-typed, and only the references can reject it (lenient ones may not).

Per tester step (:func:`judge_generated_tests`, two sandbox batches run concurrently: the current program on
all the tests, as the workflow needs; the good references and the other known-wrong programs on the
well-typed tests):

* **valid**: a function test is well-typed and every good reference passes it; a stdio test every good
  reference passes. (Passing means the reference ran, exited 0 and printed the tester's expected output
  under the environment's ``compare``: so every reference accepts the input, their outputs agree, and the
  expected output is theirs.)
* **known-wrong programs**: the episode's programs that failed a counted ground-truth test (the current one
  and earlier ones; the coder's step judges each on the ground truth and records it) and the wrong mutants,
  all only once a program exists: with no program yet nothing is paid for catching.
* **catches**: the test fails at least one known-wrong program (a counted verdict that is not a pass).

Nothing of this reaches an agent: the prompts and ``last_report`` show the current program on the tester's
tests, never a reference's or a mutant's verdict, a signature, or whether a test was valid; the evidence is
kept in ``CodeState.tester_evidence`` for transcripts only.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pettingllms.agents.failures import InfrastructureError
from pettingllms.envs.code.analysis import CANDIDATE, SOLUTION_CLASS
from pettingllms.envs.code.data import CodeProblem
from pettingllms.envs.code.env import CodeConfig, CodeState, Judged, judge, judge_verdicts
from pettingllms.envs.code.mutants import mutants
from pettingllms.envs.code.parsing import is_solution_class, parse_call_test
from pettingllms.sandbox.judge import TestVerdict

__all__ = [
    "MAX_MUTANTS",
    "MAX_REFERENCES",
    "MUTANT_SEED",
    "ProblemEvidence",
    "Signatures",
    "TesterEvidence",
    "call_signatures",
    "evidence_key",
    "evidence_per_test",
    "judge_generated_tests",
    "known_wrong_programs",
    "literal_calls",
    "literal_equalities",
    "problem_evidence",
    "shape_accepts",
    "shape_name",
        "value_shape",
]

logger = logging.getLogger(__name__)

#: Most reference solutions judged per problem (the first ones); those passing their tests are the good ones.
MAX_REFERENCES = 3
#: Most mutants of the first good reference made per problem.
MAX_MUTANTS = 8
#: The mutants' seed: the same problem gets the same mutants in every process.
MUTANT_SEED = 0
# Mutation kinds left out (see the module docstring), and how many problems' evidence a pool keeps.
_TRIVIAL_MUTATIONS = frozenset({"return_none"})
_CACHE_SIZE = 1024
_LITERAL_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)

# ---- argument shapes -----------------------------------------------------------------------------------

Shape = tuple  # ("int",) | (kind, frozenset of element shapes) | ("dict", key shapes, value shapes)
_ATOMS = {bool: "bool", int: "int", float: "float", complex: "complex", str: "str", bytes: "bytes",
          type(None): "None"}
_COLLECTIONS = {list: "list", tuple: "tuple", set: "set", frozenset: "set"}


def value_shape(value: Any) -> Shape:
    """The shape of a literal value (see the module docstring); a ValueError for anything a literal cannot be."""
    atom = _ATOMS.get(type(value))
    if atom is not None:
        return (atom,)
    kind = _COLLECTIONS.get(type(value))
    if kind is not None:
        return (kind, frozenset(value_shape(item) for item in value))
    if type(value) is dict:
        return ("dict", frozenset(value_shape(k) for k in value), frozenset(value_shape(v) for v in value.values()))
    raise ValueError(f"`value` must be a literal (numbers, str, bytes, None and containers of those), got "
                     f"{type(value).__name__}")


def shape_accepts(allowed: Shape, given: Shape) -> bool:
    """Whether a value of shape ``given`` may stand where the dataset passes one of shape ``allowed``."""
    if len(given) == 1:
        return given == allowed or (given == ("int",) and allowed == ("float",))
    if allowed[0] != given[0]:
        return False
    return all(_members_accepted(a, g) for a, g in zip(allowed[1:], given[1:]))


def _members_accepted(allowed: frozenset, given: frozenset) -> bool:
    return all(any(shape_accepts(a, g) for a in allowed) for g in given)


def shape_name(shape: Shape) -> str:
    """``list[int | str]``, ``dict[str, float]``, ``list[]`` (an empty list)."""
    if len(shape) == 1:
        return shape[0]
    parts = [" | ".join(sorted(shape_name(s) for s in members)) for members in shape[1:]]
    return f"{shape[0]}[{', '.join(parts)}]"


@dataclass(frozen=True)
class Signatures:
    """The argument shapes of a problem's own calls of its entry point: per arity, the shapes seen at each
    position (``positions``); ``calls`` literal calls were read, ``skipped`` calls had another argument."""

    positions: Mapping[int, tuple[frozenset, ...]] = field(default_factory=dict)
    calls: int = 0
    skipped: int = 0

    def __bool__(self) -> bool:
        return bool(self.positions)

    def accepts(self, args: Sequence[Any]) -> bool:
        """Whether a call with ``args`` is well-typed: an arity the dataset calls, each argument accepted."""
        allowed = self.positions.get(len(args))
        if allowed is None:
            return False
        try:
            shapes = [value_shape(a) for a in args]
        except (ValueError, RecursionError):
            return False
        return all(any(shape_accepts(a, s) for a in options) for options, s in zip(allowed, shapes))

    def describe(self) -> list[str]:
        """One line per arity: ``(list[float], float)``, each position's shapes joined by ``|``."""
        return ["(" + ", ".join(" | ".join(sorted(shape_name(s) for s in options)) for options in positions) + ")"
                for _, positions in sorted(self.positions.items())]


def _is_candidate_call(node: ast.Call, entry_point: str) -> bool:
    """``f(...)``, ``candidate(...)`` (HumanEval's ``check``) or ``Solution().f(...)``."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in (entry_point, CANDIDATE)
    return (isinstance(func, ast.Attribute) and func.attr == entry_point and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == SOLUTION_CLASS)


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except _LITERAL_ERRORS:
        return False, None


def _literal_args(call: ast.Call) -> tuple | None:
    if call.keywords or any(isinstance(arg, ast.Starred) for arg in call.args):
        return None
    values = [_literal(arg) for arg in call.args]
    return tuple(value for _, value in values) if all(ok for ok, _ in values) else None


def _module(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def literal_calls(assertion: str, entry_point: str) -> tuple[list[tuple], int]:
    """The argument tuples of every call of the entry point in a ground-truth test whose arguments are all
    literals, and how many of its calls were skipped (another argument, a keyword, a starred one)."""
    module = _module(assertion)
    if module is None:
        return [], 0
    found, skipped = [], 0
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and _is_candidate_call(node, entry_point):
            args = _literal_args(node)
            if args is None:
                skipped += 1
            else:
                found.append(args)
    return found, skipped


def call_signatures(assertions: Iterable[str], entry_point: str) -> Signatures:
    """The :class:`Signatures` of a problem from its ground-truth test sources."""
    positions: dict[int, list[set]] = {}
    calls = skipped = 0
    for assertion in assertions:
        found, missed = literal_calls(assertion, entry_point)
        skipped += missed
        for args in found:
            try:
                shapes = [value_shape(a) for a in args]
            except (ValueError, RecursionError):
                skipped += 1
                continue
            calls += 1
            for options, shape in zip(positions.setdefault(len(args), [set() for _ in args]), shapes):
                options.add(shape)
    frozen = {arity: tuple(frozenset(options) for options in per) for arity, per in positions.items()}
    return Signatures(frozen, calls, skipped)


def literal_equalities(assertion: str, entry_point: str) -> list[tuple[tuple, Any]]:
    """``(args, expected)`` of each equality a ground-truth test states with literals only: ``assert
    <call> == <literal>`` (either side, at any depth: HumanEval's asserts sit in ``check``) and the loaders'
    ``_got = <call>`` / ``_want = <literal>`` pair (APPS, LiveCodeBench), ``<call>`` a call of the entry point
    with literal arguments (for the scripted oracle tester)."""
    module = _module(assertion)
    if module is None:
        return []
    pairs: list[tuple[ast.expr, ast.expr]] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1 \
                and isinstance(node.test.ops[0], ast.Eq):
            pairs += [(node.test.left, node.test.comparators[0]), (node.test.comparators[0], node.test.left)]
    assigned = {n.targets[0].id: n.value for n in module.body if isinstance(n, ast.Assign)
                and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    if "_got" in assigned and "_want" in assigned:
        pairs.append((assigned["_got"], assigned["_want"]))
    found = []
    for call, want in pairs:
        if isinstance(call, ast.Call) and _is_candidate_call(call, entry_point):
            args, (ok, expected) = _literal_args(call), _literal(want)
            if args is not None and ok:
                found.append((args, expected))
    return found


# ---- per-test evidence -----------------------------------------------------------------------------------


def _rows(rows: Sequence[Sequence[bool]], count: int, name: str) -> list[list[bool]]:
    out = []
    for r, row in enumerate(rows):
        row = list(row)
        if len(row) != count or not all(isinstance(v, bool) for v in row):
            raise ValueError(f"`{name}[{r}]` must hold one bool per generated test ({count}), got {row!r:.80}")
        out.append(row)
    return out


def evidence_per_test(
    well_typed: Sequence[bool], references_passed: Sequence[Sequence[bool]],
    wrong_failed: Sequence[Sequence[bool]] | None,
) -> tuple[tuple[bool, ...], tuple[bool, ...] | None]:
    """Per generated test, ``(valid, catches)``.

    ``well_typed[i]``: test ``i`` has an accepted signature (always True for stdio tests);
    ``references_passed[r][i]``: good reference ``r`` passed it; ``wrong_failed[w][i]``: known-wrong program
    ``w`` failed it (a counted verdict), ``None`` with no program yet. Valid: well-typed and passed by every
    good reference, of which there must be one. Catches: failed by at least one known-wrong program."""
    typed = list(well_typed)
    if not all(isinstance(v, bool) for v in typed):
        raise ValueError(f"`well_typed` must be bools, one per generated test, got {typed!r:.80}")
    references = _rows(references_passed, len(typed), "references_passed")
    if not references:
        raise ValueError("`references_passed` must hold the verdicts of at least one good reference")
    valid = tuple(ok and all(row[i] for row in references) for i, ok in enumerate(typed))
    if wrong_failed is None:
        return valid, None
    wrong = _rows(wrong_failed, len(typed), "wrong_failed")
    return valid, tuple(any(row[i] for row in wrong) for i in range(len(typed)))


def known_wrong_programs(programs: Sequence[str], failed_ground_truth: Sequence[bool],
                         wrong_mutants: Sequence[str]) -> list[str]:
    """The episode's programs that failed a counted ground-truth test, then the wrong mutants; each once."""
    if len(programs) != len(failed_ground_truth):
        raise ValueError(f"`failed_ground_truth` must hold one bool per program ({len(programs)}), got "
                         f"{len(failed_ground_truth)}")
    found = [p for p, failed in zip(programs, failed_ground_truth) if failed] + list(wrong_mutants)
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class TesterEvidence:
    """What the tester's reward saw of one step's tests, per test: ``well_typed``, ``valid`` and ``catches``
    (``None``: no program yet); how many good references and known-wrong programs judged them. Kept in the
    state for transcripts; never shown to an agent."""

    __test__ = False  # not a pytest class

    well_typed: tuple[bool, ...]
    valid: tuple[bool, ...]
    catches: tuple[bool, ...] | None
    references: int
    wrong_programs: int


# ---- per problem, cached -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemEvidence:
    """A problem's good references, wrong mutants and signatures (``None`` for stdio problems); ``missing``
    says why the tester has no local reward on it ("" when it has one)."""

    references: tuple[str, ...] = ()
    wrong_mutants: tuple[str, ...] = ()
    signatures: Signatures | None = None
    missing: str = ""

    def well_typed(self, tests: Sequence[Mapping[str, str]], problem: CodeProblem) -> tuple[bool, ...]:
        """Per generated test: a stdio test, or a call test whose arguments the signatures accept."""
        if self.signatures is None:
            return tuple(True for _ in tests)
        solution_class = is_solution_class(problem.starter_code)
        return tuple(self.signatures.accepts(parse_call_test(t["call"], problem.entry_point, solution_class).args)
                     for t in tests)


def evidence_key(problem: CodeProblem, config: CodeConfig) -> str:
    """What the evidence depends on: the problem's tests, setup, references and the judging limits (a
    training view of a problem holds other tests than its evaluation view)."""
    parts = [problem.problem_id, problem.style, problem.entry_point, problem.starter_code, problem.test_setup,
             list(problem.tests), list(problem.public_tests), list(problem.unsupported_tests),
             list(problem.solutions[:MAX_REFERENCES]), float(config.time_limit_s), config.compare]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def _passes_all(row: Sequence[TestVerdict]) -> bool:
    counted = [v for v in row if v.counted]
    return bool(counted) and all(v.passed for v in counted)


def _wrong_mutant(row: Sequence[TestVerdict]) -> bool:
    return any(v.counted and not v.passed for v in row) and not any(v.status == "timeout" for v in row)


def _mutants_of(source: str, problem: CodeProblem) -> list[str]:
    plain_function = problem.style == "function" and not is_solution_class(problem.starter_code)
    try:
        made = mutants(source, MAX_MUTANTS, MUTANT_SEED, within=problem.entry_point if plain_function else None)
    except (SyntaxError, ValueError, RecursionError) as exc:
        logger.warning("%s: no mutants of the reference solution (%s)", problem.problem_id, exc)
        return []
    return [text for kind, text in made if kind not in _TRIVIAL_MUTATIONS]


async def _gather_evidence(env_worker: Any, problem: CodeProblem, config: CodeConfig) -> ProblemEvidence:
    found = await _evidence_of(env_worker, problem, config)
    if found.missing:  # once per problem and pool: the evidence is cached
        logger.info("%s: no local reward for the tester: %s", problem.problem_id, found.missing)
    return found


async def _evidence_of(env_worker: Any, problem: CodeProblem, config: CodeConfig) -> ProblemEvidence:
    signatures = None
    if problem.style == "function":
        sources = [t["assertion"] for t in (*problem.tests, *problem.public_tests, *problem.unsupported_tests)]
        signatures = call_signatures(sources, problem.entry_point)
        if not signatures:
            return ProblemEvidence(signatures=signatures, missing=(
                f"no call of `{problem.entry_point}` with literal arguments in its tests ({signatures.skipped} "
                "other calls): a generated test cannot be checked for its argument types"))
    candidates = list(problem.solutions[:MAX_REFERENCES])
    if not candidates:
        return ProblemEvidence(signatures=signatures, missing="no reference solution")
    tests = list(problem.tests)
    # The first candidate's mutants ride along: it is the first good reference unless it fails its own tests.
    first_mutants = _mutants_of(candidates[0], problem)
    rows = await judge_verdicts(env_worker, [*candidates, *first_mutants], tests, config, problem)
    good = [c for c, row in zip(candidates, rows) if _passes_all(row)]
    if len(good) < len(candidates):
        logger.warning("%s: %d of its first %d reference solution(s) fail their own ground-truth tests and are not "
                       "used for the tester's reward", problem.problem_id, len(candidates) - len(good), len(candidates))
    if not good:
        return ProblemEvidence(signatures=signatures, missing="no reference solution passes its own tests")
    made, mutant_rows = first_mutants, rows[len(candidates):]
    if good[0] != candidates[0]:
        made = _mutants_of(good[0], problem)
        mutant_rows = await judge_verdicts(env_worker, made, tests, config, problem)
    wrong = tuple(m for m, row in zip(made, mutant_rows) if _wrong_mutant(row))
    logger.debug("%s: %d good reference(s), %d of %d mutant(s) known wrong", problem.problem_id, len(good),
                 len(wrong), len(made))
    return ProblemEvidence(tuple(good), wrong, signatures)


class _EvidenceCache:
    def __init__(self) -> None:
        self.done: OrderedDict[str, ProblemEvidence] = OrderedDict()
        self.pending: dict[str, asyncio.Future] = {}


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _cache_of(env_worker: Any) -> _EvidenceCache | None:
    """The evidence cache of ``env_worker`` (made on first use, living as long as it); None for a worker that
    cannot be weakly referenced (its evidence is then computed per step; the pool's verdict cache still
    spares the sandbox work)."""
    with _LOCK:
        try:
            cache = _CACHES.get(env_worker)
            if cache is None:
                cache = _CACHES[env_worker] = _EvidenceCache()
        except TypeError:
            return None
        return cache


async def problem_evidence(env_worker: Any, problem: CodeProblem, config: CodeConfig) -> ProblemEvidence:
    """The :class:`ProblemEvidence` of ``problem`` judged with ``config``'s limits, computed once per pool (see
    the module docstring); an infrastructure failure is raised, never cached."""
    cache = _cache_of(env_worker)
    if cache is None:
        return await _gather_evidence(env_worker, problem, config)
    key, loop = evidence_key(problem, config), asyncio.get_running_loop()
    with _LOCK:
        found = cache.done.get(key)
        if found is not None:
            cache.done.move_to_end(key)
            return found
        waiting = cache.pending.get(key)
        if waiting is None or waiting.get_loop() is not loop:
            waiting, future = None, loop.create_future()
            cache.pending[key] = future
    if waiting is not None:  # another step of this problem is computing it
        return await asyncio.shield(waiting)
    try:
        found = await _gather_evidence(env_worker, problem, config)
    except BaseException as exc:
        with _LOCK:
            if cache.pending.get(key) is future:
                del cache.pending[key]
        failure = exc if isinstance(exc, Exception) else InfrastructureError(f"the evidence of {problem.problem_id} "
                                                                               "was not computed (cancelled)")
        future.set_exception(failure)
        future.exception()  # retrieved: the waiters, if any, raise it
        raise
    with _LOCK:
        cache.done[key] = found
        while len(cache.done) > _CACHE_SIZE:
            cache.done.popitem(last=False)
        if cache.pending.get(key) is future:
            del cache.pending[key]
    future.set_result(found)
    return found


# ---- one tester step ------------------------------------------------------------------------------------


async def judge_generated_tests(env_worker: Any, config: CodeConfig, state: CodeState, tests: list[dict[str, str]]
                                ) -> tuple[Judged | None, TesterEvidence | None]:
    """The current program's :class:`~pettingllms.envs.code.env.Judged` on ``tests`` (None with no program)
    and the tester's evidence on them (None where the problem gives none: ``ProblemEvidence.missing``)."""
    problem, program = state.problem, state.program
    evidence = await problem_evidence(env_worker, problem, config)

    async def nothing() -> list:
        return []

    if evidence.missing:
        current = await (judge(env_worker, [program], tests, config, problem) if program is not None else nothing())
        return (current[0] if current else None), None
    typed = evidence.well_typed(tests, problem)
    checked = [t for t, ok in zip(tests, typed) if ok]
    wrong: list[str] = []
    if program is not None:
        wrong = known_wrong_programs(state.programs, state.failed_ground_truth, evidence.wrong_mutants)
    others = [p for p in wrong if p != program]  # the current program's verdicts come from its own batch
    current, judged = await asyncio.gather(
        judge(env_worker, [program], tests, config, problem) if program is not None else nothing(),
        judge(env_worker, [*evidence.references, *others], checked, config, problem) if checked else nothing())

    def spread(row: Any, fill: bool) -> list[bool]:  # a row over the checked tests, over all of them
        values = iter(row)
        return [next(values) if ok else fill for ok in typed]

    def failed(j: Judged) -> tuple[bool, ...]:
        counted = j.counted or (True,) * len(j.passed)
        return tuple(c and not p for p, c in zip(j.passed, counted))

    n_refs = len(evidence.references)
    references = [spread(j.passed, False) for j in judged[:n_refs]] if checked else [[False] * len(tests)] * n_refs
    wrong_failed = None
    if program is not None:
        wrong_failed = [spread(failed(j), False) for j in judged[n_refs:]]
        if program in wrong:
            wrong_failed.append(list(failed(current[0])))
    valid, catches = evidence_per_test(typed, references, wrong_failed)
    return (current[0] if current else None), TesterEvidence(typed, valid, catches, n_refs, len(wrong))
