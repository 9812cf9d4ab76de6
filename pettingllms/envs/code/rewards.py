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
* **Tester local reward** (:func:`generated_tests_reward`): the mean over the tester's generated tests of
  ``+1`` when the reference solution passes the test and the current program fails it (the test catches
  a bug), ``+0.2`` when both pass, ``-1`` when the reference solution fails it (a wrong test); a turn
  with no parseable test scores ``-1``. Where the dataset has no reference solution (LiveCodeBench)
  there is no local reward (``None``): the tester then learns from the global part only.
* **Mixing** (:func:`training_reward`): ``alpha * global + local``, the global part alone when local is
  ``None``.
* **Termination** (:func:`episode_over`): never on a hidden verdict. ``terminate_on="generated_tests"``
  (default) ends the episode when the current program passes every one of the tester's latest tests, at
  least one of them (:func:`passes_generated_tests`; the reference solution's verdicts play no part:
  they are hidden too); ``"turns"`` plays the whole turn budget. The turn budget ends it either way, and
  success is judged on the final program. (``ground_truth``, ending when the hidden tests pass, is
  refused: being asked for another turn would tell the coder it failed, and evaluation would become an
  oracle-stopped pass@max_turns.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from pettingllms.envs.base import mix_reward

#: Accepted values of ``terminate_on``; the first is the default.
TERMINATE_ON: tuple[str, ...] = ("generated_tests", "turns")
#: Accepted values of ``partial_credit``; the first is the default.
PARTIAL_CREDIT: tuple[str, ...] = ("beyond_constant", "pass_rate")
#: Tester score of one test that the reference passes and the current program fails.
CATCH_REWARD = 1.0
#: Tester score of one test that both the reference and the current program pass.
AGREE_REWARD = 0.2
#: Tester score of one test that the reference solution fails (the test itself is wrong).
WRONG_TEST_REWARD = -1.0
#: Tester local reward of a turn with no parseable test (when the dataset has a reference solution).
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


def generated_test_score(*, reference_passes: bool, program_passes: bool) -> float:
    """The tester's score of one generated test: -1 wrong test, +1 catches the program, +0.2 both pass."""
    for name, value in (("reference_passes", reference_passes), ("program_passes", program_passes)):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be a bool, got {value!r}")
    if not reference_passes:
        return WRONG_TEST_REWARD
    return AGREE_REWARD if program_passes else CATCH_REWARD


def generated_tests_reward(*, reference_passed: Verdicts | None, program_passed: Verdicts | None) -> float | None:
    """The tester's local reward over this turn's generated tests, in [-1, 1]; ``None`` with no reference.

    (Named after what it scores, not ``tester_...``: pytest would collect a ``test*`` name imported into a
    test module.)

    ``reference_passed[i]``: the dataset's reference solution passes generated test ``i`` (``None``: the
    dataset has no reference solution, so there is no local reward and the tester learns from the global
    part only). ``program_passed[i]``: the coder's current program passes it (``None``: no program yet,
    which fails every test). A turn with no parseable test passes ``reference_passed=[]`` and scores
    :data:`NO_TEST_REWARD`.
    """
    if reference_passed is None:
        return None
    reference = _checked(reference_passed, "reference_passed")
    if not reference:
        return NO_TEST_REWARD
    if program_passed is None:
        program = [False] * len(reference)
    else:
        program = _checked(program_passed, "program_passed")
        if len(program) != len(reference):
            raise ValueError(
                f"`program_passed` has {len(program)} verdicts but `reference_passed` has {len(reference)}: "
                "both must hold one per generated test"
            )
    scores = [generated_test_score(reference_passes=r, program_passes=p) for r, p in zip(reference, program)]
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


def valid_generated_tests(*, reference_passed: Verdicts | None, count: int) -> int:
    """How many of ``count`` generated tests are valid: those the reference passes, or all without one."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"`count` must be an integer >= 0, got {count!r}")
    if reference_passed is None:
        return count
    reference = _checked(reference_passed, "reference_passed")
    if len(reference) != count:
        raise ValueError(f"`reference_passed` has {len(reference)} verdicts but `count` is {count}")
    return sum(reference)


def passes_generated_tests(program_passed: Verdicts | None) -> bool:
    """The stop rule of ``terminate_on="generated_tests"``: the current program passes every one of the
    tester's latest parsed tests, and there is at least one. ``program_passed``: its verdict on each
    (``None``: no program). Whether the reference solution passes them plays no part: that is a hidden
    verdict too."""
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
    "AGREE_REWARD",
    "CATCH_REWARD",
    "NO_TEST_REWARD",
    "PARTIAL_CREDIT",
    "TERMINATE_ON",
    "WRONG_TEST_REWARD",
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
