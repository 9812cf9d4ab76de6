"""Prompt text of the code agents, built from the shared state (kept short: small models read it).

The coder is asked for exactly what :func:`~pettingllms.envs.code.parsing.parse_program` reads (one
```` ```python ```` block), the tester for what ``parse_stdio_tests`` / ``parse_call_tests`` read (for a
function problem the one accepted form, ``assert f(...) == ...`` or ``assert Solution().f(...) == ...``,
with literal values). The coder sees the tester's tests and how its program did on them, never the
ground-truth tests: those score the episode, and showing them would let the coder fit the hidden tests.
Neither sees whether a test was valid or what a reference made of it (hidden information).
"""

from __future__ import annotations

from pettingllms.envs.code.data import CodeProblem
from pettingllms.envs.code.parsing import SOLUTION_CLASS, StdioTestCase, format_stdio_tests, is_solution_class

__all__ = ["PROMPT_VERSION", "coder_system", "dropped_lines", "problem_lines", "program_lines", "tester_system",
           "tests_lines"]

#: Version of the prompt text: changes when what the agents are told changes, so that transcripts and
#: checkpoints trained on one text are not compared with another unknowingly. 2: the tester is shown the one
#: accepted test form (literal values only) and how many parts of its last answer were not understood.
PROMPT_VERSION = 2

_STDIO_EXAMPLE = format_stdio_tests([StdioTestCase("1 2\n", "3")])


def _task(problem: CodeProblem) -> str:
    if problem.style == "function":
        return (f"Write the Python function `{problem.entry_point}` (with the imports it needs); "
                "the tests call it.")
    return "Write a Python program that reads the input from standard input and prints the answer."


def coder_system(problem: CodeProblem, with_tester: bool) -> str:
    """The coder's instructions; ``with_tester``: a tester writes tests for its program."""
    team = ("You are the coder in a team: you write the program, a tester writes unit tests for it.\n"
            if with_tester else "You solve programming problems.\n")
    return (f"{team}{_task(problem)}\nAnswer with the complete program in one ```python block.")


def tester_system(problem: CodeProblem, max_tests: int) -> str:
    """The tester's instructions: the test format its parser reads."""
    head = ("You are the tester in a team: a coder writes the program, you write unit tests that a correct "
            "solution passes and a wrong program fails.\n")
    if problem.style == "function":
        target = f"{SOLUTION_CLASS}().{problem.entry_point}" if is_solution_class(problem.starter_code) \
            else problem.entry_point
        return (f"{head}Write at most {max_tests} tests, one per line in one ```python block, each exactly\n"
                f"```python\nassert {target}(arguments) == expected\n```\n"
                "with the arguments and the expected value written as Python literals (numbers, strings, "
                "True/False/None, and lists, tuples, dicts or sets of those): no variables, function calls or "
                "expressions. Lines of any other form are ignored.")
    return (f"{head}Write at most {max_tests} tests, each an input and its expected output, e.g.\n"
            f"{_STDIO_EXAMPLE}")


def problem_lines(problem: CodeProblem, turn_idx: int, max_turns: int) -> list[str]:
    """Turn, statement and starter code (when the statement does not already hold it)."""
    lines = [f"Turn {turn_idx + 1} of {max_turns}.", "Problem:", problem.prompt.rstrip()]
    if problem.starter_code.strip() and problem.starter_code.strip() not in problem.prompt:
        lines += ["Starter code:", problem.starter_code.rstrip()]
    return lines


def program_lines(program: str | None) -> list[str]:
    if program is None:
        return ["Current program: none yet."]
    return ["Current program:", f"```python\n{program.rstrip()}\n```"]


def dropped_lines(dropped: int) -> list[str]:
    """The tester's own feedback: how many parts of its last response were not understood (statements or
    lines that are no accepted test, unpaired input/output sections, tests past the cap)."""
    if not dropped:
        return []
    return [f"{dropped} part(s) of your last answer were not understood and were ignored."]


def tests_lines(count: int, passed: tuple[bool, ...] | None, first_failure: str) -> list[str]:
    """The tester's latest tests as the coder and tester see them: how many, how many pass, the first failure."""
    if count == 0:
        return ["Tester's tests: none yet."]
    if passed is None:
        return [f"Tester's tests: {count}; no program has been run on them yet."]
    lines = [f"Tester's tests: the current program passes {sum(passed)} of {count}."]
    if first_failure:
        lines += ["First failing test:", first_failure]
    return lines
