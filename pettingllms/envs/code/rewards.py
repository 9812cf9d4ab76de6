"""Rewards and termination of the code workflow, as small pure functions over pass/fail lists.

Every verdict list holds one ``bool`` per test, in test order (``True``: the program passed that test).
``None`` in place of a program's list means there is no program yet (the coder has not answered, or no
answer parsed): such a program fails every test. The environment runs the programs and tests in the
sandbox and hands the verdicts here; nothing in this module touches the sandbox.

* **Global reward** (:func:`global_reward`): the pass rate of the coder's current program on the
  ground-truth tests. **Success** (:func:`is_success`): it passes all of them (and there is at least one).
  A problem with no ground-truth test scores 0 and never succeeds.
* **Coder local reward** (:func:`coder_local_reward`): the pass rate on the ground-truth tests of the
  program written in this turn (0 when the turn produced no program).
* **Tester local reward** (:func:`generated_tests_reward`): the mean over the tester's generated tests of
  ``+1`` when the reference solution passes the test and the current program fails it (the test catches
  a bug), ``+0.2`` when both pass, ``-1`` when the reference solution fails it (a wrong test); a turn
  with no parseable test scores ``-1``. Where the dataset has no reference solution (LiveCodeBench)
  there is no local reward (``None``): the tester then learns from the global part only.
* **Mixing** (:func:`training_reward`): ``alpha * global + local``, the global part alone when local is
  ``None``.
* **Termination** (:func:`episode_over`): ``terminate_on="ground_truth"`` (default) ends the episode when
  the current program passes every ground-truth test; ``"generated_tests"`` (the anchor's rule, which
  lets a tester end episodes with trivial tests) ends it when the program passes all generated tests,
  counted only once at least one valid generated test exists (:func:`passes_generated_tests`). The turn
  budget ends it either way. Success is always judged against the ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence

from pettingllms.envs.base import mix_reward

#: Accepted values of ``terminate_on``; the first is the default.
TERMINATE_ON: tuple[str, ...] = ("ground_truth", "generated_tests")
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


def global_reward(ground_truth_passed: Verdicts | None) -> float:
    """Task reward: pass rate of the coder's current program on the ground-truth tests, in [0, 1]."""
    return pass_rate(ground_truth_passed, name="ground_truth_passed")


def is_success(ground_truth_passed: Verdicts | None) -> bool:
    """Whether the current program passes every ground-truth test (at least one test required)."""
    if ground_truth_passed is None:
        return False
    verdicts = _checked(ground_truth_passed, "ground_truth_passed")
    return bool(verdicts) and all(verdicts)


def coder_local_reward(turn_program_passed: Verdicts | None) -> float:
    """Coder's local reward: pass rate on the ground-truth tests of this turn's program, in [0, 1]."""
    return pass_rate(turn_program_passed, name="turn_program_passed")


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


def passes_generated_tests(*, program_passed: Verdicts | None, reference_passed: Verdicts | None) -> bool:
    """The anchor's stop rule: the program passes all generated tests, and at least one of them is valid.

    ``program_passed``: the current program on each parseable generated test (``None``: no program).
    ``reference_passed``: the reference solution on the same tests, ``None`` when the dataset has none (then
    every parseable test counts as valid).
    """
    if program_passed is None:
        return False
    program = _checked(program_passed, "program_passed")
    valid = valid_generated_tests(reference_passed=reference_passed, count=len(program))
    return valid > 0 and all(program)


def episode_over(
    *,
    terminate_on: str,
    ground_truth_passed: Verdicts | None,
    generated_program_passed: Verdicts | None = None,
    generated_reference_passed: Verdicts | None = None,
    out_of_turns: bool = False,
) -> bool:
    """Whether the episode ends now: the spent turn budget, or the ``terminate_on`` rule.

    ``"ground_truth"``: the current program passes every ground-truth test (:func:`is_success`).
    ``"generated_tests"``: :func:`passes_generated_tests` on the tester's latest tests.
    """
    rule = check_terminate_on(terminate_on)
    if not isinstance(out_of_turns, bool):
        raise ValueError(f"`out_of_turns` must be a bool, got {out_of_turns!r}")
    if out_of_turns:
        return True
    if rule == "ground_truth":
        return is_success(ground_truth_passed)
    return passes_generated_tests(program_passed=generated_program_passed, reference_passed=generated_reference_passed)


__all__ = [
    "AGREE_REWARD",
    "CATCH_REWARD",
    "NO_TEST_REWARD",
    "TERMINATE_ON",
    "WRONG_TEST_REWARD",
    "check_terminate_on",
    "coder_local_reward",
    "episode_over",
    "generated_test_score",
    "generated_tests_reward",
    "global_reward",
    "is_success",
    "pass_rate",
    "passes_generated_tests",
    "training_reward",
    "valid_generated_tests",
]
