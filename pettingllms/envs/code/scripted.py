"""Scripted policies of the code environment (``pettingllms eval code/... --policy oracle``).

* :class:`CodeOraclePolicy`: the coder answers with the dataset's reference solution; the tester with
  the dataset's public tests, or else the first ground-truth tests it can express in its own format
  (HumanEval's ``check`` programs give up their plain ``assert candidate(...)`` lines, renamed to the
  entry point).
* :class:`WrongCodePolicy`: a deliberately wrong coder (a program that parses and runs but answers
  nothing useful) and a tester whose tests are wrong (the reference solution fails them).
* :class:`RandomCodePolicy`: a coin flip per response between the two (``--policy random``), so
  episodes mix successes, failures and both kinds of test.

Both answer with text, through the agents' ``format_response``, so parsing, judging and rewards run as
they do for a model.
"""

from __future__ import annotations

import ast
import builtins
import random
from typing import Any

from pettingllms.envs.code.data import CodeProblem

__all__ = [
    "ORACLE_TESTS",
    "CodeOraclePolicy",
    "RandomCodePolicy",
    "WrongCodePolicy",
    "oracle_tests",
    "wrong_program",
    "wrong_tests",
]

#: Most ground-truth tests the oracle tester copies when the problem has no public tests.
ORACLE_TESTS = 3
_BUILTINS = frozenset(dir(builtins))


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _check_asserts(source: str, entry_point: str) -> list[str]:
    """The top-level ``assert`` lines of a ``def check(candidate)`` program, calling ``entry_point``,
    keeping those that name nothing but the entry point and builtins (so each stands alone)."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in module.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args):
            continue
        candidate = node.args.args[0].arg
        for statement in node.body:
            if not isinstance(statement, ast.Assert):
                continue
            renamed = _Rename(candidate, entry_point).visit(statement)
            names = {n.id for n in ast.walk(renamed) if isinstance(n, ast.Name)}
            if entry_point in names and names <= _BUILTINS | {entry_point}:
                found.append(ast.unparse(renamed))
    return found


def oracle_tests(problem: CodeProblem, limit: int = ORACLE_TESTS) -> list[dict[str, str]]:
    """The tests the oracle tester writes: the public ones, else the first ``limit`` ground-truth tests
    in the tester's format."""
    if problem.public_tests:
        return list(problem.public_tests[:limit])
    if problem.style == "stdio":
        return list(problem.tests[:limit])
    out: list[dict[str, str]] = []
    for test in problem.tests:
        text = test["assertion"].strip()
        lines = [text] if text.startswith("assert ") and "\n" not in text else _check_asserts(text, problem.entry_point)
        out += [{"assertion": line} for line in lines]
        if len(out) >= limit:
            break
    return out[:limit]


def _respond(agent: Any, program: str | None, tests: list[dict[str, str]]) -> str:
    if agent.role in ("code_generator", "single"):
        if program is None:
            raise ValueError("this problem has no reference solution: the oracle coder cannot answer")
        return agent.format_response(program)
    if not tests:
        # Some checks hold no stand-alone assert (HumanEval 32, 38, 50 test through loops): the tester then
        # answers without a test, which the environment scores as a turn with no parseable test.
        return "The oracle has no stand-alone test for this problem."
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
        return [{"assertion": f"assert {problem.entry_point}() == '__wrong__'"}]
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
