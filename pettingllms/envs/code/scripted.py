"""Scripted policies of the code environment (``pettingllms eval code/... --policy oracle``).

* :class:`CodeOraclePolicy`: the coder answers with the dataset's reference solution; the tester with
  tests its parser accepts, taken from the dataset's tests, public ones first: stdin/stdout pairs as
  they are, and for function problems every equality a test states with literals only (``assert f(1) ==
  2``, HumanEval's ``assert candidate(...) == ...`` inside ``check``, the loaders' ``_got`` / ``_want``
  pair; APPS's one-element-list wrapping of the expected value undone, as APPS's judge accepts) as a
  call test. A problem whose tests state none (HumanEval 32, MBPP's ``math.isclose`` checks) leaves the
  oracle tester without a test: its response then does not parse.
* :class:`WrongCodePolicy`: a deliberately wrong coder (a program that parses and runs but answers
  nothing useful) and a tester whose tests are wrong (a call with no argument, an impossible output:
  invalid, -1).
* :class:`RandomCodePolicy`: a coin flip per response between the two (``--policy random``), so
  episodes mix successes, failures and both kinds of test.

Both answer with text, through the agents' ``format_response``, so parsing, judging and rewards run as
they do for a model.
"""

from __future__ import annotations

import random
from typing import Any

from pettingllms.envs.code.data import CodeProblem
from pettingllms.envs.code.evidence import literal_equalities
from pettingllms.envs.code.parsing import call_test, is_solution_class

__all__ = [
    "NO_ORACLE_TEST",
    "ORACLE_TESTS",
    "CodeOraclePolicy",
    "RandomCodePolicy",
    "WrongCodePolicy",
    "oracle_tests",
    "wrong_program",
    "wrong_tests",
]

#: Most tests the oracle tester writes.
ORACLE_TESTS = 3
#: The oracle tester's answer on a problem whose tests state no equality it can copy (it does not parse).
NO_ORACLE_TEST = "The oracle has no stand-alone test for this problem."


def _call_tests(problem: CodeProblem, assertion: str) -> list[dict[str, str]]:
    """The literal equalities of one dataset test as generated call tests (``{"call": text}``)."""
    out = []
    for args, expected in literal_equalities(assertion, problem.entry_point):
        if problem.dataset == "apps" and isinstance(expected, list) and len(expected) == 1:
            expected = expected[0]  # APPS stores a return value wrapped in a list
        made = call_test(problem.entry_point, args, expected, is_solution_class(problem.starter_code))
        if made is not None:
            out.append({"call": made.assertion})
    return out


def oracle_tests(problem: CodeProblem, limit: int = ORACLE_TESTS) -> list[dict[str, str]]:
    """The tests the oracle tester writes: the first ``limit`` of the dataset's tests (public ones first) in
    the form the tester's parser accepts (see the module docstring)."""
    if problem.style == "stdio":
        return list((problem.public_tests or problem.tests)[:limit])
    out: list[dict[str, str]] = []
    for test in (*problem.public_tests, *problem.tests):
        out += [t for t in _call_tests(problem, test["assertion"]) if t not in out]
        if len(out) >= limit:
            break
    return out[:limit]


def _respond(agent: Any, program: str | None, tests: list[dict[str, str]]) -> str:
    if agent.role in ("code_generator", "single"):
        if program is None:
            raise ValueError("this problem has no reference solution: the oracle coder cannot answer")
        return agent.format_response(program)
    if not tests:
        # Some problems' tests state no equality with literals (HumanEval 32 tests through a loop, MBPP's
        # `math.isclose` checks): the tester then answers without a test, a turn with no parseable test.
        return NO_ORACLE_TEST
    return agent.format_response(tests)


class CodeOraclePolicy:
    """The reference solution as the coder, the public (or first ground-truth) tests as the tester."""

    def check_instances(self, env: Any, seeds: Any) -> None:
        """A ValueError when a coder of ``env``'s workflow would meet a problem of ``seeds`` without a
        reference solution (LiveCodeBench has none)."""
        if not {"code_generator", "single"} & set(env.config.turn_order):
            return
        problems = env.problems()
        missing = [problems[s].problem_id for s in seeds if s < len(problems) and not problems[s].solutions]
        if missing:
            raise ValueError(
                f"its coder plays the reference solutions, and {len(missing)} of {len(seeds)} problems have none "
                f"(e.g. {missing[:3]}); evaluate a model on {env.config.dataset} instead"
            )

    def respond(self, agent: Any, env: Any) -> str:
        state = env.state
        return _respond(agent, state.reference_solution, oracle_tests(state.problem))


def wrong_program(problem: CodeProblem) -> str:
    """A program that runs and answers wrongly: the entry point returns None, or it prints a sentinel."""
    if problem.style == "function":
        return f"def {problem.entry_point}(*args, **kwargs):\n    return None\n"
    return 'print("wrong answer")\n'


def wrong_tests(problem: CodeProblem) -> list[dict[str, str]]:
    """A test the reference solution fails: a call with no argument, or an impossible expected output."""
    if problem.style == "function":
        made = call_test(problem.entry_point, (), "__wrong__", is_solution_class(problem.starter_code))
        return [{"call": made.assertion}]
    return [{"stdin": "0\n", "expected_stdout": "__wrong__"}]


class WrongCodePolicy:
    """A wrong coder (:func:`wrong_program`) and a tester of wrong tests (:func:`wrong_tests`)."""

    def respond(self, agent: Any, env: Any) -> str:
        problem = env.state.problem
        return _respond(agent, wrong_program(problem), wrong_tests(problem))


class RandomCodePolicy:
    """Each response is the oracle's or the wrong policy's, with probability ``oracle_prob`` for the
    oracle, drawn from a generator this policy owns (seeded by ``seed``)."""

    def __init__(self, seed: int = 0, oracle_prob: float = 0.5) -> None:
        if not 0.0 <= oracle_prob <= 1.0:
            raise ValueError(f"`oracle_prob` must be in [0, 1], got {oracle_prob}")
        self.rng = random.Random(seed)
        self.oracle_prob = oracle_prob
        self._oracle, self._wrong = CodeOraclePolicy(), WrongCodePolicy()

    def check_instances(self, env: Any, seeds: Any) -> None:
        """As :meth:`CodeOraclePolicy.check_instances`: half of its answers are the oracle's."""
        self._oracle.check_instances(env, seeds)

    def respond(self, agent: Any, env: Any) -> str:
        policy = self._oracle if self.rng.random() < self.oracle_prob else self._wrong
        return policy.respond(agent, env)
