"""The arith generator: deterministic per (seed, level), varied across seeds, exact answers that match an
independent evaluation of the expression, operation counts per level, and a printing program that agrees."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.envs.math.arith import ARITH_LEVELS, STORIES, generate, python_program
from pettingllms.envs.math.calculator import format_number

OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def exact(node: ast.AST) -> Fraction:
    """The test's own evaluator (independent of the calculator): ints and + - * / over Fractions."""
    if isinstance(node, ast.Expression):
        return exact(node.body)
    if isinstance(node, ast.BinOp):
        return OPS[type(node.op)](exact(node.left), exact(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -exact(node.operand)
    assert isinstance(node, ast.Constant) and type(node.value) is int, ast.dump(node)
    return Fraction(node.value)


def operations(expression: str) -> list[type]:
    return [type(n.op) for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.BinOp)]


def as_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def run_program(source: str) -> str:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def check_problem(problem, seed: int, level: int) -> None:
    expression = problem.metadata["expression"]
    value = exact(ast.parse(expression, mode="eval"))
    assert value > 0
    assert problem.answer == as_text(value) == format_number(value)
    assert (problem.problem_id, problem.dataset, problem.split, problem.level) == (f"arith/L{level}/{seed}", "arith", "generated", str(level))
    assert problem.metadata["level"] == level and problem.metadata["template"] in {s.name for s in STORIES}
    ops = operations(expression)
    assert len(ops) == level + 1
    assert ops.count(ast.Div) == (1 if level == 3 else 0)
    # every number of the expression is written in the question as plain digits, in order, and nothing else is
    numbers = re.findall(r"\d+", expression)
    assert sorted(re.findall(r"\d[\d,]*", problem.question)) == sorted(numbers)
    assert "," not in "".join(re.findall(r"\d[\d,]*\d", problem.question))
    low, high = {1: (2, 3), 2: (3, 4), 3: (2, 4)}[level]
    operands = numbers[:-1] if level == 3 else numbers  # the last number at level 3 is the divisor
    assert all(low <= len(n) <= high for n in operands), (level, numbers)


@pytest.mark.parametrize("level", ARITH_LEVELS)
def test_deterministic_and_exact(level):
    for seed in range(25):
        problem = generate(seed, level)
        assert generate(seed, level) == problem
        check_problem(problem, seed, level)


def test_different_seeds_and_levels_differ():
    for level in ARITH_LEVELS:
        assert len({generate(seed, level).question for seed in range(40)}) == 40
    assert generate(3, 1).question != generate(3, 2).question
    assert generate(5).metadata["level"] == 2  # the default level


def test_templates_and_level_3_answers_vary():
    assert len(STORIES) >= 8
    used = {generate(seed, level).metadata["template"] for seed in range(60) for level in ARITH_LEVELS}
    assert used == {s.name for s in STORIES}
    answers = [generate(seed, 3).answer for seed in range(40)]
    assert any("/" in a for a in answers) and any("/" not in a for a in answers)  # fractions and even splits


def test_level_examples():
    one, two, three = (generate(7, level) for level in ARITH_LEVELS)
    assert re.fullmatch(r"\d+ \* \d+ [+-] \d+", one.metadata["expression"])
    assert re.fullmatch(r"\d+ \* \d+ [+-] \d+( \* \d+)?( [+-] \d+)?", two.metadata["expression"])
    assert re.fullmatch(r"\(\d+ \* \d+ [+-] \d+( \* \d+)?( [+-] \d+)?\) / \d+", three.metadata["expression"])
    assert three.question.endswith("Give the exact answer (a fraction if it does not divide evenly).")
    # the worked solution ends on the answer
    assert three.solution.splitlines()[-1].endswith(f"= {three.answer}")


@pytest.mark.parametrize("level", ARITH_LEVELS)
def test_python_program_prints_the_answer(level):
    for seed in range(4):
        problem = generate(seed, level)
        assert run_program(python_program(problem.metadata["expression"])) == problem.answer


def test_python_program_small_cases_and_refusals():
    assert run_program(python_program("-(3 - 10) / 4")) == "7/4"
    assert run_program(python_program("6 / 3 - 9")) == "-7"
    assert run_program(python_program("12345")) == "12345"
    for bad, what in [("__import__('os')", "Call"), ("2 ** 3", "BinOp"), ("x + 1", "Name"), ("1.5 * 2", "Constant")]:
        with pytest.raises(ValueError, match=f"only int literals.*\\({what}\\)"):
            python_program(bad)
    with pytest.raises(ValueError, match="is not an expression"):
        python_program("1 +")


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"arith `level` must be one of \(1, 2, 3\), got 4"):
        generate(0, 4)
    with pytest.raises(ValueError, match="arith `seed` must be an int"):
        generate("0")


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=-(10**12), max_value=10**12), level=st.sampled_from(ARITH_LEVELS))
def test_any_seed_gives_a_valid_problem(seed, level):
    problem = generate(seed, level)
    check_problem(problem, seed, level)
    assert generate(seed, level) == problem
