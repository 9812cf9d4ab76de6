"""Scripted policies of the math environment: play it without a model (``pettingllms eval --policy scripted:NAME``,
the ``sft`` stage's demonstrations).

* :class:`MathOraclePolicy`: the tool agent computes the answer (a generated problem's expression, in the
  calculator or as a program printing its exact value; for a dataset problem, a program printing the reference
  answer), the reasoner boxes the reference answer; the single agent with a tool first computes (when a turn
  is left to answer in), then boxes the answer.
* :class:`WrongMathPolicy`: every answer and every tool result is wrong (:func:`wrong_answer`).
* :class:`RandomMathPolicy`: each response is the oracle's or the wrong policy's, drawn from its own generator.

All answer with text through the agents' formatters, so parsing, tools, verification and rewards run as they
do for a model. They read the environment, not the prompt: the oracle reads the reference answer (and, with
``accept_tool_answer``, whether the tool's answer verifies), which is what makes it an oracle; the prompts a
model gets hold neither (:mod:`pettingllms.envs.math.prompts`).
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from pettingllms.envs.math.agents import TOOL_ANSWER, format_answer, format_tool_call
from pettingllms.envs.math.arith import python_program
from pettingllms.envs.math.calculator import CalculatorError, evaluate, format_number
from pettingllms.envs.math.data import MathProblem

__all__ = ["MathOraclePolicy", "RandomMathPolicy", "WrongMathPolicy", "oracle_tool_call", "wrong_answer"]


def _number(text: str) -> Fraction | None:
    try:
        return evaluate(text)
    except CalculatorError:
        return None


def oracle_tool_call(problem: MathProblem, tool: str) -> str:
    """What the oracle tool agent writes: the generated problem's expression (as a program printing its exact
    value for ``python``), else the reference answer (as an expression when the calculator can read it)."""
    expression = problem.metadata.get("expression")
    if tool == "calculator":
        if expression:
            return problem.metadata.get("named_expression") or expression
        return problem.answer if _number(problem.answer) is not None else "0"
    if expression:
        return python_program(expression)
    return f"print({problem.answer!r})"


def wrong_answer(problem: MathProblem) -> str:
    """An answer that does not verify: the reference plus one where it is a number, else ``0`` (``1`` when the
    reference is ``0``)."""
    value = _number(problem.answer)
    if value is not None:
        return format_number(value + 1)
    return "1" if problem.answer.strip() == "0" else "0"


def _wrong_tool_call(problem: MathProblem, tool: str) -> str:
    answer = wrong_answer(problem)
    return answer if tool == "calculator" else f"print({answer!r})"


def _single_computes_first(env: Any) -> bool:
    """The oracle single agent calls its tool first: it has one, the problem has an expression to compute, no
    tool run yet, and a turn is left to answer in."""
    state = env.state
    return (env.config.single_tool != "none" and bool(state.problem.metadata.get("expression"))
            and not state.tool_runs and state.turn + 1 < env.config.max_turns)


class MathOraclePolicy:
    """The correct tool call and the reference answer (see the module docstring); with
    ``env.accept_tool_answer``, ``\\boxed{tool}`` where the latest tool answer verifies."""

    def respond(self, agent: Any, env: Any) -> str:
        state = env.state
        problem = state.problem
        if agent.role == "tool_generator":
            return format_tool_call(env.config.tool, oracle_tool_call(problem, env.config.tool))
        if agent.role == "single" and _single_computes_first(env):
            return format_tool_call(env.config.single_tool, oracle_tool_call(problem, env.config.single_tool))
        if env.config.accept_tool_answer and state.tool_run is not None and state.tool_run.verified:
            return format_answer(TOOL_ANSWER)
        return format_answer(problem.answer)


class WrongMathPolicy:
    """A wrong tool result and a wrong answer (:func:`wrong_answer`)."""

    def respond(self, agent: Any, env: Any) -> str:
        problem = env.state.problem
        if agent.role == "tool_generator":
            return format_tool_call(env.config.tool, _wrong_tool_call(problem, env.config.tool))
        return format_answer(wrong_answer(problem))


class RandomMathPolicy:
    """Each response is the oracle's or the wrong policy's, with probability ``oracle_prob`` for the oracle,
    drawn from a generator this policy owns (seeded by ``seed``)."""

    def __init__(self, seed: int = 0, oracle_prob: float = 0.5) -> None:
        if not 0.0 <= oracle_prob <= 1.0:
            raise ValueError(f"`oracle_prob` must be in [0, 1], got {oracle_prob}")
        self.rng = random.Random(seed)
        self.oracle_prob = oracle_prob
        self._oracle, self._wrong = MathOraclePolicy(), WrongMathPolicy()

    def respond(self, agent: Any, env: Any) -> str:
        policy = self._oracle if self.rng.random() < self.oracle_prob else self._wrong
        return policy.respond(agent, env)
