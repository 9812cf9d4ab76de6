"""Prompt text of the math agents, built from the shared state (short: small models read it).

Each agent is asked for exactly what its parser reads: the tool agent for one ```` ```python ```` block (or
one ```` ```calc ```` block), the reasoner for ``\\boxed{answer}``. Every prompt shows the problem, the turn,
the latest tool run (its source, what it printed or why it failed) and the latest final answer: what the
team itself did, never what the environment made of it. Whether an answer is right is computed from the
reference answer, so no prompt shows it (ARCHITECTURE principle 10): a prompt that said "checked: correct"
would let a team guess until it sees the word and keep that answer, solving nothing. So these functions read
a tool run's source, output and error and the answers' text, never a verdict (a
:class:`~pettingllms.envs.math.env.ToolRun`'s ``verified``, ``MathState.answers_verified``); the team decides
for itself whether to try again, and the episode ends on its agreement
(:attr:`~pettingllms.envs.math.env.MathEnv.done`), never on the verdict.
"""

from __future__ import annotations

from pettingllms.envs.math.data import MathProblem

__all__ = ["PROMPT_VERSION", "TOOL_HELP", "answers_lines", "problem_lines", "reasoner_system", "single_system",
           "tool_lines", "tool_system"]

#: Version of the prompt text: bumped whenever any prompt's text changes (the learning benchmark keys its
#: cached cells on it, so results measured with older prompts are not reused). 2: no verdict is shown.
PROMPT_VERSION = 2

_SHOWN_CHARS = 300

#: How each tool is called, as the prompts say it.
TOOL_HELP = {
    "python": "a Python program in one ```python block that prints the answer (only the answer)",
    "calculator": "one arithmetic expression (numbers, + - * / and parentheses) in a ```calc block",
}


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


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
        lines.append(f"Result: {_clip(run.answer)}")
    return lines


def answers_lines(answers: list[str], owner: str) -> list[str]:
    """The latest final answer (``owner``: "Your", "The reasoner's")."""
    if not answers:
        return [f"{owner} answer: none yet."]
    return [f"{owner} last answer: {_clip(answers[-1])}"]
