"""Rewards and termination of the code workflow, as small pure functions over pass/fail lists.

Every verdict list holds one ``bool`` per test, in test order (``True``: the program passed that test).
``None`` in place of a program's list means there is no program yet (the coder has not answered, or no
answer parsed): such a program fails every test. The environment runs the programs and tests in the
sandbox and hands the verdicts here, of the *counted* tests only (a verdict that is the test's fault,
``test_error`` or ``unsupported``, counts toward neither reward nor success); nothing in this module
touches the sandbox.

* **Program score** (:func:`program_score`), by ``partial_credit``:

  - ``pass_rate``: the fraction of tests passed, ``p``;
  - ``beyond_constant`` (the training default): credit only beyond what one constant answer earns. With
    ``c`` the largest share of the tests that expect one same output (:func:`constant_share`; at least
    ``1 / n``, since one constant always matches one test), the score is ``(p - c) / (1 - c)`` clipped at 0, and when ``c == 1``, 1 if
    ``p == 1`` else 0 (:func:`beyond_constant`). A program that prints or returns one constant passes at
    most a ``c`` share of the tests, so it earns nothing: 10 tests of which 5 expect ``YES``, a program
    printing ``YES`` passes 5, ``p = c = 0.5``, score 0.

* **Global reward** (:func:`global_reward`): the score of the coder's current program on the ground-truth
  tests. **Success** (:func:`is_success`): it passes all of them (and there is at least one). A problem
  with no ground-truth test scores 0 and never succeeds.
* **Coder local reward** (:func:`coder_local_reward`): the score on the ground-truth tests of the
  program written in this turn (0 when the turn produced no program).
* **Tester local reward** (:func:`generated_tests_reward`), from evidence
  (:mod:`pettingllms.envs.code.evidence` computes it): the mean over the tester's generated tests of
  :func:`generated_test_score`:

  - ``-1`` for an **invalid** test: a function test whose arguments do not have the types per position of
    the dataset's own calls, or that a good reference fails; a stdio test that a good reference does not
    run to the tester's expected output (good references: the dataset's reference solutions that pass
    every counted ground-truth test);
  - ``+1`` for a valid test that **catches** a program known to be wrong: it fails the current program, an
    earlier program of the episode, or a cached mutant of the reference, any of which failed a counted
    ground-truth test;
  - ``0`` for a valid test that no known-wrong program fails: a test every known program passes earns at
    most 0, so a tautology, a copied example or a test the wrong program happens to pass earns nothing.

  With no program yet (the tester moving first), nothing is paid for catching: a valid test scores 0. A
  turn with no parseable test scores ``-1`` (:data:`NO_TEST_REWARD`; through the agent, the environment's
  ``parse_error_reward``). Where the problem gives no evidence there is no local reward (``None``): no
  reference solution passes its own tests (LiveCodeBench has none at all), or a function problem's tests
  hold no call with literal arguments to take the types from; the tester then learns from the global
  part only. Hand-computed: tests (invalid, catches, valid), one program known wrong: ``(-1 + 1 + 0) / 3 =
  0``; the same before any program: ``(-1 + 0 + 0) / 3``.
* **Mixing** (:func:`training_reward`): ``alpha * global + local``, the global part alone when local is
  ``None``.
* **Termination** (:func:`episode_over`): never on a hidden verdict. ``terminate_on="generated_tests"``
  (default) ends the episode when the current program passes every one of the tester's latest tests, at
  least one of them (:func:`passes_generated_tests`; whether the tests are valid plays no part: the
  references' verdicts are hidden too); ``"turns"`` plays the whole turn budget. The turn budget ends it
  either way, and success is judged on the final program. (``ground_truth``, ending when the hidden tests
  pass, is refused: being asked for another turn would tell the coder it failed, and evaluation would
  become an oracle-stopped pass@max_turns.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from pettingllms.envs.base import mix_reward

#: Accepted values of ``terminate_on``; the first is the default.
TERMINATE_ON: tuple[str, ...] = ("generated_tests", "turns")
#: Accepted values of ``partial_credit``; the first is the default.
PARTIAL_CREDIT: tuple[str, ...] = ("beyond_constant", "pass_rate")
#: Tester score of a valid test that fails a program known to be wrong (a caught bug).
CATCH_REWARD = 1.0
#: Tester score of a valid test that no known-wrong program fails (or with no program yet).
VALID_TEST_REWARD = 0.0
#: Tester score of an invalid test (ill-typed, or a good reference fails it).
INVALID_TEST_REWARD = -1.0
#: Tester local reward of a turn with no parseable test (when the problem gives evidence).
NO_TEST_REWARD = -1.0

Verdicts = Sequence[bool]


def _checked(verdicts: Verdicts, name: str) -> list[bool]:
    """``verdicts`` as a list of bools; a ValueError naming ``name`` when it is not one."""
    if isinstance(verdicts, (str, bytes)) or not isinstance(verdicts, Sequence):
        raise ValueError(f"`{name}` must be a sequence of bools (one per test), got {type(verdicts).__name__}")
    out = list(verdicts)
    for i, value in enumerate(out):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}[{i}]` must be a bool (passed or not), got {value!r}")
    return out


def pass_rate(passed: Verdicts | None, *, name: str = "passed") -> float:
    """Fraction of tests passed; 0.0 with no program (``None``) or no test."""
    if passed is None:
        return 0.0
    verdicts = _checked(passed, name)
    return sum(verdicts) / len(verdicts) if verdicts else 0.0


def constant_share(expected_outputs: Sequence[Hashable | None]) -> float:
    """``c``: the largest share of the tests that expect one same output (``None``: an output that cannot
    be read, its test's own), so at least ``1 / n``: one constant always matches one test's output (a
    problem whose outputs all differ still pays nothing for returning one of them); 0.0 with no test."""
    if isinstance(expected_outputs, (str, bytes)) or not isinstance(expected_outputs, Sequence):
        raise ValueError(f"`expected_outputs` must be a sequence (one per test), got {type(expected_outputs).__name__}")
    if not expected_outputs:
        return 0.0
    counts = Counter(output for output in expected_outputs if output is not None)
    return max(counts.values(), default=1) / len(expected_outputs)


def beyond_constant(p: float, c: float) -> float:
    """``(p - c) / (1 - c)`` clipped at 0: the pass rate ``p`` beyond the share ``c`` one constant output
    passes; with ``c == 1`` (every test expects the same output), 1 if ``p == 1`` else 0."""
    for name, value in (("p", p), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"`{name}` must be a number in [0, 1], got {value!r}")
    if c == 1.0:
        return 1.0 if p == 1.0 else 0.0
    return max(0.0, (p - c) / (1.0 - c))


def check_partial_credit(partial_credit: str) -> str:
    """``partial_credit`` itself when it is one of :data:`PARTIAL_CREDIT`; a ValueError naming it otherwise."""
    if partial_credit not in PARTIAL_CREDIT:
        raise ValueError(f"`partial_credit` must be one of {list(PARTIAL_CREDIT)}, got {partial_credit!r}")
    return partial_credit


def program_score(
    passed: Verdicts | None, expected_outputs: Sequence[Hashable | None] | None = None, *,
    partial_credit: str = "pass_rate", name: str = "passed",
) -> float:
    """A program's score on some tests, in [0, 1]: the pass rate, or with ``partial_credit="beyond_constant"``
    the pass rate beyond the constant baseline of ``expected_outputs`` (one per test, see
    :func:`constant_share`). 0.0 with no program (``None``) or no test."""
    mode = check_partial_credit(partial_credit)
    p = pass_rate(passed, name=name)
    if mode == "pass_rate" or passed is None or not passed:
        return p
    if expected_outputs is None or len(expected_outputs) != len(passed):
        raise ValueError(f"`expected_outputs` must hold one output per test ({len(passed)}) for "
                         f"partial_credit='beyond_constant', got {expected_outputs!r:.80}")
    return beyond_constant(p, constant_share(expected_outputs))


def global_reward(
    ground_truth_passed: Verdicts | None, expected_outputs: Sequence[Hashable | None] | None = None, *,
    partial_credit: str = "pass_rate",
) -> float:
    """Task reward: the score (:func:`program_score`) of the coder's current program on the ground-truth
    tests, in [0, 1]."""
    return program_score(ground_truth_passed, expected_outputs, partial_credit=partial_credit,
                         name="ground_truth_passed")


def is_success(ground_truth_passed: Verdicts | None) -> bool:
    """Whether the current program passes every ground-truth test (at least one test required)."""
    if ground_truth_passed is None:
        return False
    verdicts = _checked(ground_truth_passed, "ground_truth_passed")
    return bool(verdicts) and all(verdicts)


def coder_local_reward(
    turn_program_passed: Verdicts | None, expected_outputs: Sequence[Hashable | None] | None = None, *,
    partial_credit: str = "pass_rate",
) -> float:
    """Coder's local reward: the score (:func:`program_score`) on the ground-truth tests of this turn's
    program, in [0, 1]."""
    return program_score(turn_program_passed, expected_outputs, partial_credit=partial_credit,
                         name="turn_program_passed")


def generated_test_score(*, valid: bool, catches: bool) -> float:
    """The tester's score of one generated test: -1 invalid, +1 valid and catches a known-wrong program,
    0 valid otherwise. ``catches`` is False with no program yet."""
    for name, value in (("valid", valid), ("catches", catches)):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be a bool, got {value!r}")
    if not valid:
        return INVALID_TEST_REWARD
    return CATCH_REWARD if catches else VALID_TEST_REWARD


def generated_tests_reward(*, valid: Verdicts | None, catches: Verdicts | None) -> float | None:
    """The tester's local reward over this turn's generated tests, in [-1, 1]; ``None`` without evidence.

    (Named after what it scores, not ``tester_...``: pytest would collect a ``test*`` name imported into a
    test module.)

    ``valid[i]``: generated test ``i`` is valid (``None``: the problem gives no evidence, so there is no
    local reward and the tester learns from the global part only). ``catches[i]``: it fails at least one
    program known to be wrong (``None``: no program yet, so nothing is paid for catching). A turn with no
    parseable test passes ``valid=[]`` and scores :data:`NO_TEST_REWARD`.
    """
    if valid is None:
        return None
    checked = _checked(valid, "valid")
    if not checked:
        return NO_TEST_REWARD
    if catches is None:
        caught = [False] * len(checked)
    else:
        caught = _checked(catches, "catches")
        if len(caught) != len(checked):
            raise ValueError(f"`catches` has {len(caught)} verdicts but `valid` has {len(checked)}: both must hold "
                             "one per generated test")
    scores = [generated_test_score(valid=v, catches=c) for v, c in zip(checked, caught)]
    return sum(scores) / len(scores)


def training_reward(global_part: float, local_part: float | None, alpha: float) -> float:
    """Training reward of a step: ``alpha * global + local``; the global part alone when local is None."""
    return mix_reward(global_part, 0.0 if local_part is None else local_part, alpha)


def check_terminate_on(terminate_on: str) -> str:
    """``terminate_on`` itself when it is one of :data:`TERMINATE_ON`; a ValueError naming it otherwise."""
    if terminate_on == "ground_truth":
        raise ValueError(
            "`terminate_on: ground_truth` is no longer accepted: ending the episode when the hidden tests pass "
            "leaks their verdict (another turn means the program failed) and makes success an oracle-stopped "
            "pass@max_turns; use `generated_tests` (the default: the program passes the tester's tests) or `turns`"
        )
    if terminate_on not in TERMINATE_ON:
        raise ValueError(f"`terminate_on` must be one of {list(TERMINATE_ON)}, got {terminate_on!r}")
    return terminate_on


def valid_generated_tests(*, valid: Verdicts | None, count: int) -> int | None:
    """How many of ``count`` generated tests are valid; ``None`` without evidence (validity unknown)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"`count` must be an integer >= 0, got {count!r}")
    if valid is None:
        return None
    checked = _checked(valid, "valid")
    if len(checked) != count:
        raise ValueError(f"`valid` has {len(checked)} verdicts but `count` is {count}")
    return sum(checked)


def passes_generated_tests(program_passed: Verdicts | None) -> bool:
    """The stop rule of ``terminate_on="generated_tests"``: the current program passes every one of the
    tester's latest parsed tests, and there is at least one. ``program_passed``: its verdict on each
    (``None``: no program). Whether the tests are valid (the references' verdicts) plays no part: that is
    a hidden verdict too."""
    if program_passed is None:
        return False
    program = _checked(program_passed, "program_passed")
    return bool(program) and all(program)


def episode_over(*, terminate_on: str, generated_program_passed: Verdicts | None = None,
                 out_of_turns: bool = False) -> bool:
    """Whether the episode ends now: the spent turn budget, or the ``terminate_on`` rule.

    ``"generated_tests"``: :func:`passes_generated_tests` on the tester's latest tests. ``"turns"``: only
    the turn budget. Nothing computed from the ground truth decides it.
    """
    rule = check_terminate_on(terminate_on)
    if not isinstance(out_of_turns, bool):
        raise ValueError(f"`out_of_turns` must be a bool, got {out_of_turns!r}")
    if out_of_turns:
        return True
    return rule == "generated_tests" and passes_generated_tests(generated_program_passed)


__all__ = [
    "CATCH_REWARD",
    "INVALID_TEST_REWARD",
    "NO_TEST_REWARD",
    "PARTIAL_CREDIT",
    "TERMINATE_ON",
    "VALID_TEST_REWARD",
    "beyond_constant",
    "check_partial_credit",
    "check_terminate_on",
    "coder_local_reward",
    "constant_share",
    "episode_over",
    "generated_test_score",
    "generated_tests_reward",
    "global_reward",
    "is_success",
    "pass_rate",
    "passes_generated_tests",
    "program_score",
    "training_reward",
    "valid_generated_tests",
]
