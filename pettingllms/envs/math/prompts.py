"""Prompt text of the math agents, built from the shared state (short: small models read it).

Each agent is asked for exactly what its parser reads: the tool agent for one ```` ```python ```` block (or
one ```` ```calc ```` block), the reasoner for ``\\boxed{answer}``. Every prompt shows the problem, the latest
tool run (its source, what it printed or why it failed), the latest final answer, and whether the
environment verified each (the seed's loop: the environment verifies, the team repeats until correct or
out of turns).
"""

from __future__ import annotations

from pettingllms.envs.math.data import MathProblem

__all__ = ["TOOL_HELP", "answers_lines", "problem_lines", "reasoner_system", "single_system", "tool_lines",
           "tool_system"]

_SHOWN_CHARS = 300

#: How each tool is called, as the prompts say it.
TOOL_HELP = {
    "python": "a Python program in one ```python block that prints the answer (only the answer)",
    "calculator": "one arithmetic expression (numbers, + - * / and parentheses) in a ```calc block",
}


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _check(verified: bool) -> str:
    return "correct" if verified else "wrong"


_NAMED = " The problem's letters (a, b, ...) stand for its numbers and may be used."


def tool_system(tool: str, named: bool = False) -> str:
    return ("You are the tool agent in a team: you compute the answer to a math problem, a reasoner reads your "
            f"result and gives the final answer.\nAnswer with {TOOL_HELP[tool]}." + (_NAMED if named else ""))


_ACCEPT = " \\boxed{tool} takes the tool's latest result as your answer."


def reasoner_system(tool: str, accept: bool = False) -> str:
    using = "a Python program" if tool == "python" else "a calculator"
    return ("You are the reasoner in a team: a tool agent computes with " + using + "; you read its result, "
            "reason briefly and give the final answer as \\boxed{answer}." + (_ACCEPT if accept else ""))


def single_system(tool: str, named: bool = False, accept: bool = False) -> str:
    if tool == "none":
        return "You solve math problems. Give the final answer as \\boxed{answer}."
    return ("You solve math problems. You may first compute: write " + TOOL_HELP[tool] + "; its result is shown "
            "next turn." + (_NAMED if named else "") + " Give the final answer as \\boxed{answer}."
            + (_ACCEPT if accept else ""))


def problem_lines(problem: MathProblem, turn_idx: int, max_turns: int) -> list[str]:
    return [f"Turn {turn_idx + 1} of {max_turns}.", "Problem:", problem.question.strip()]


def tool_lines(run, owner: str) -> list[str]:
    """The latest tool run as ``owner`` ("Your", "The tool agent's") sees it."""
    if run is None:
        return [f"{owner} tool result: none yet."]
    fence = "python" if run.tool == "python" else "calc"
    lines = [f"{owner} last {'program' if run.tool == 'python' else 'expression'}:",
             f"```{fence}\n{_clip(run.source)}\n```"]
    if run.answer is None:
        lines.append(f"It failed: {_clip(run.error) or 'it printed nothing'}")
    else:
        lines.append(f"Result: {_clip(run.answer)} (checked: {_check(run.verified)})")
    return lines


def answers_lines(answers: list[str], verified: list[bool], owner: str) -> list[str]:
    """The latest final answer and its check (``owner``: "Your", "The reasoner's")."""
    if not answers:
        return [f"{owner} answer: none yet."]
    return [f"{owner} last answer: {_clip(answers[-1])} (checked: {_check(verified[-1])})"]
