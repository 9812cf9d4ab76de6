"""The safe calculator: exact results (checked against Fractions computed here), every refusal and its message."""

from __future__ import annotations

import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingllms.envs.math import calculator
from pettingllms.envs.math.calculator import (
    MAX_DIGITS,
    MAX_EXPRESSION_CHARS,
    CalculatorError,
    evaluate,
    format_number,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", Fraction(7)),
        ("(1 + 2) * 3", Fraction(9)),
        ("7 / 2", Fraction(7, 2)),  # exact division
        ("1/3 + 1/6", Fraction(1, 2)),
        ("1.25", Fraction(5, 4)),  # decimals are exact, not binary floats
        ("0.1 + 0.2", Fraction(3, 10)),
        ("1e3", Fraction(1000)),
        ("2.5e-3", Fraction(1, 400)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("1_000 + 0x10", Fraction(1016)),
        ("7 // 2", Fraction(3)),
        ("-7 // 2", Fraction(-4)),  # floor, as in Python
        ("-7 % 3", Fraction(2)),
        ("7.5 % 2", Fraction(3, 2)),
        ("2 ** 10", Fraction(1024)),
        ("2 ** -2", Fraction(1, 4)),
        ("(2/3) ** 3", Fraction(8, 27)),
        ("-2 ** 2", Fraction(-4)),  # Python precedence
        ("(-1) ** (10 ** 999)", Fraction(1)),  # a huge exponent of ±1 is fine
        ("0 ** 5", Fraction(0)),
        ("+-+3", Fraction(-3)),
        ("abs(-3/4)", Fraction(3, 4)),
        ("min(1, 2/3, 5)", Fraction(2, 3)),
        ("max(-1, -1/2)", Fraction(-1, 2)),
        ("round(2.5)", Fraction(2)),  # halves to even
        ("round(3.5)", Fraction(4)),
        ("round(3.14159, 2)", Fraction(157, 50)),
        ("round(1234, -2)", Fraction(1200)),
        ("min(abs(-2), round(7/2))", Fraction(2)),
        ("  \n 6 * 7 \n", Fraction(42)),
        ("(1 +\n 2)", Fraction(3)),
        ("10 ** 999", Fraction(10**999)),
    ],
)
def test_exact_results(expression, expected):
    result = evaluate(expression)
    assert isinstance(result, Fraction)
    assert result == expected


# ---- random expressions against an independent Fraction computation -------------------------------------

_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


@st.composite
def expressions(draw, depth=0):
    """``(text, exact value)``; the value is computed here with Fraction/Decimal, not by the calculator."""
    if depth >= 4 or draw(st.booleans()):
        if draw(st.booleans()):
            n = draw(st.integers(-(10**6), 10**6))
            return (f"({n})" if n < 0 else str(n)), Fraction(n)
        whole = draw(st.integers(0, 10**4))
        frac = draw(st.text(alphabet="0123456789", min_size=1, max_size=5))
        text = f"{whole}.{frac}"
        return text, Fraction(Decimal(text))
    left, a = draw(expressions(depth=depth + 1))
    right, b = draw(expressions(depth=depth + 1))
    op = draw(st.sampled_from(sorted(_OPS)))
    if op == "/" and b == 0:
        op = "*"
    return f"({left} {op} {right})", _OPS[op](a, b)


@settings(max_examples=500)
@given(expressions())
def test_random_expressions_match_fractions(case):
    text, expected = case
    assert evaluate(text) == expected


@settings(max_examples=300)
@given(st.fractions(max_denominator=10**6), st.integers(-6, 6))
def test_powers_match_fractions(base, exponent):
    if base == 0 and exponent < 0:
        with pytest.raises(CalculatorError, match="division by zero"):
            evaluate(f"({base.numerator}/{base.denominator}) ** ({exponent})")
        return
    assert evaluate(f"({base.numerator}/{base.denominator}) ** ({exponent})") == base**exponent


@settings(max_examples=300)
@given(st.fractions(max_denominator=10**4), st.fractions(max_denominator=10**4).filter(lambda f: f != 0))
def test_floordiv_and_mod_match_fractions(a, b):
    text_a, text_b = f"({a.numerator}/{a.denominator})", f"({b.numerator}/{b.denominator})"
    assert evaluate(f"{text_a} // {text_b}") == a // b
    assert evaluate(f"{text_a} % {text_b}") == a % b


# ---- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # names and calls of anything else
        ("x + 1", "unknown name 'x'"),
        ("pi", "unknown name 'pi'"),
        ("abs", "unknown name 'abs'"),  # an allowed function, but not called
        ("foo(1)", "function 'foo' is not allowed"),
        ("print(1)", "function 'print' is not allowed"),
        ("__import__('os')", "function '__import__' is not allowed"),
        ("eval('1')", "function 'eval' is not allowed"),
        ("abs(1)(2)", "only calls of abs, min, max, round are allowed"),
        # attributes, subscripts, lambdas, comprehensions and other constructs
        ("(1).real", r"attribute access \(.real\) is not allowed"),
        ("abs.__call__(1)", "only calls of abs, min, max, round are allowed"),
        ("().__class__", r"attribute access \(.__class__\) is not allowed"),
        ("lambda: 1", "lambda is not allowed"),
        ("(lambda x: x)(1)", "only calls of abs, min, max, round are allowed"),
        ("[i for i in (1, 2)]", "comprehensions are not allowed"),
        ("sum(i for i in (1, 2))", "function 'sum' is not allowed"),
        ("{i: i for i in (1,)}", "comprehensions are not allowed"),
        ("(1, 2)[0]", "Subscript is not allowed"),
        ("(1, 2)", "Tuple is not allowed"),
        ("[1]", "List is not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("(y := 1)", "NamedExpr is not allowed"),
        ("1 < 2", "comparisons are not allowed"),
        ("1 and 2", "boolean operator `and` is not allowed"),
        ("not 1", "operator `not` is not allowed"),
        ("2 ^ 3", r"operator \^ is not allowed \(it is XOR in Python; write powers with \*\*\)"),
        ("1 << 40", "operator << is not allowed"),
        ("6 & 3", "operator & is not allowed"),
        ("~1", "operator ~ is not allowed"),
        # strings and other non-number constants
        ("'1'", "string literals are not allowed"),
        ("b'1'", "string literals are not allowed"),
        ("f'{1}'", "string literals are not allowed"),
        ("True + 1", "constant True is not a number"),
        ("None", "constant None is not a number"),
        ("1j", "complex numbers are not allowed"),
        # functions used wrongly
        ("abs(1, 2)", r"abs\(\) takes exactly 1 argument, got 2"),
        ("min(1)", r"min\(\) needs at least 2 arguments, got 1"),
        ("max(*[1, 2])", r"max\(\) takes plain arguments, not \*unpacking"),
        ("abs(x=1)", r"abs\(\) takes positional arguments only"),
        ("round(1, 0.5)", r"round\(\)'s second argument must be an integer, got 1/2"),
        ("round(1, 2, 3)", r"round\(\) takes 1 or 2 arguments, got 3"),
        # arithmetic errors and sizes
        ("1 / 0", "division by zero"),
        ("1 // (2 - 2)", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("2 ** 0.5", "non-integer exponent 1/2"),
        ("9 ** 9 ** 9", "power too large"),
        ("2 ** 4000", "power too large"),
        ("10 ** 1000", "more than the limit of 1000"),
        ("(10 ** 999) * 10", "more than the limit of 1000"),
        ("1 / 10 ** 999 / 10", "more than the limit of 1000"),
        ("1e-1000", "the literal 1e-1000 has about 1001 digits"),
        ("1e99999999", "the exponent of the literal '1e99999999' is too large"),
        # malformed text
        ("", "empty expression"),
        ("   ", "empty expression"),
        ("1 +", "not a valid expression"),
        ("3 × 4", "not a valid expression"),
        ("import os", "not a valid expression"),
        ("x = 1", "not a valid expression"),
    ],
)
def test_refusals_name_the_problem(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_long_input_is_refused_before_parsing():
    expression = "1+" * (MAX_EXPRESSION_CHARS // 2) + "1"
    with pytest.raises(CalculatorError, match=f"expression too long: {len(expression)} characters"):
        evaluate(expression)
    with pytest.raises(CalculatorError, match="expression too long"):
        evaluate("9" * (MAX_EXPRESSION_CHARS + 1))


def test_non_string_is_refused():
    with pytest.raises(CalculatorError, match="must be a string, got int"):
        evaluate(12)


def test_calculator_error_is_a_value_error():
    assert issubclass(CalculatorError, ValueError)


def test_never_calls_eval_or_exec(monkeypatch):
    import ast
    import builtins

    calls = []
    real_compile = builtins.compile

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the calculator must not call eval/exec")

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        # ast.parse compiles to a tree only; compiling to code objects is what eval/exec would need.
        if not flags & ast.PyCF_ONLY_AST:
            calls.append(source)
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "eval", forbidden)
        patch.setattr(builtins, "exec", forbidden)
        patch.setattr(builtins, "compile", ast_only_compile)
        result = evaluate("max(1, 2) ** 3 / 4")
    assert result == Fraction(2)
    assert calls == []


def test_deep_nesting_does_not_exhaust_the_stack():
    # Iterative evaluation: a 499-deep unary chain and a 300-term sum are fine.
    assert evaluate("-" * 499 + "1") == -1
    assert evaluate("+".join(["1"] * 300)) == 300
    with pytest.raises(CalculatorError, match="not a valid expression"):
        evaluate("(" * 300 + "1" + ")" * 300)  # the parser's own nesting limit


def test_hostile_sizes_are_fast():
    start = time.perf_counter()
    for expression in ("9 ** 9 ** 9 ** 9", "(10 ** 500) ** 3", "2 ** (10 ** 999)", "1e999 * 1e999"):
        with pytest.raises(CalculatorError, match="too large|limit"):
            evaluate(expression)
    assert time.perf_counter() - start < 5.0  # catastrophic sizes would take minutes; 5 s absorbs a loaded CI
    assert MAX_DIGITS == calculator.MAX_DIGITS


@settings(max_examples=1000)
@given(
    st.lists(
        st.sampled_from(list("0123456789.+-*/%()e_ ,xj'") + ["**", "//", "abs(", "round("]), max_size=40
    ).map("".join)
)
def test_fuzz_only_fractions_or_calculator_errors(text):
    try:
        result = evaluate(text)
    except CalculatorError:
        return
    assert isinstance(result, Fraction)


# ---- format_number ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(12345), "12345"),
        (Fraction(-7), "-7"),
        (Fraction(6, 8), "3/4"),
        (Fraction(-3, 4), "-3/4"),
        (Fraction(0), "0"),
        (5, "5"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


@settings(max_examples=300)
@given(st.fractions())
def test_format_number_round_trips_through_evaluate(value):
    assert evaluate(format_number(value)) == value


def test_format_number_refuses_floats():
    with pytest.raises(TypeError, match="got float"):
        format_number(0.5)


def test_names_bind_to_the_problems_quantities():
    assert evaluate("a * b - c", {"a": 6402, "b": 5184, "c": 237}) == Fraction(6402 * 5184 - 237)
    assert evaluate("(a + 1) / b", {"a": 2, "b": 4}) == Fraction(3, 4)
    with pytest.raises(CalculatorError, match=r"unknown name 'z': only numbers, the problem's names a, b"):
        evaluate("a + z", {"a": 1, "b": 2})
    with pytest.raises(CalculatorError, match="unknown name 'a'"):
        evaluate("a + 1")  # no names given
    assert evaluate("abs(a)", {"a": -3, "abs": 9}) == 3  # a name never shadows an allowed function
