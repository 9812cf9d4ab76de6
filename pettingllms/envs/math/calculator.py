"""A safe exact calculator for the tool agent's ``env.tool=calculator`` mode.

:func:`evaluate` reads one arithmetic expression in Python syntax with :func:`ast.parse` (``mode="eval"``)
and walks the tree itself; model text is never passed to ``eval`` or ``exec``. Accepted:

* integer literals (any Python spelling: ``1_000``, ``0x10``) and decimal literals, read **exactly** from
  their source text (``1.25`` is ``5/4``, ``1e-3`` is ``1/1000``; no binary floating point anywhere);
* ``+ - * / // % **`` (``/`` is exact division), unary ``+`` and ``-``, parentheses;
* the functions ``abs(x)``, ``min(a, b, ...)``, ``max(a, b, ...)``, ``round(x)`` and ``round(x, n)``
  (Python's rules: halves round to even), positional arguments only.

Everything else raises :class:`CalculatorError` with a message naming what was refused: names
(``x``, ``pi``), calls of any other function, attributes, subscripts, lambdas, comprehensions,
comparisons, boolean and bitwise operators (``^`` is XOR in Python: the message points to ``**``),
strings and other non-number constants (``True`` included), complex numbers. Bounds keep every
evaluation small and fast: the expression length (:data:`MAX_EXPRESSION_CHARS`), the size of every
literal and intermediate result (numerator and denominator at most :data:`MAX_DIGITS` digits), and
powers (an integer exponent whose result is checked against the digit bound *before* it is computed;
a fractional exponent would be irrational and is refused). Division or modulo by zero is an error too.
Evaluation is iterative, so deeply nested input cannot exhaust the stack.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import warnings
from collections.abc import Callable, Mapping
from fractions import Fraction

__all__ = ["MAX_DIGITS", "MAX_EXPRESSION_CHARS", "CalculatorError", "evaluate", "format_number"]

#: Longest accepted expression, in characters (after stripping surrounding blanks).
MAX_EXPRESSION_CHARS = 1000
#: Most decimal digits in the numerator or the denominator of any literal or intermediate result.
MAX_DIGITS = 1000
#: Most decimal digits of a decimal literal's exponent (``1e99`` is fine, ``1e100000`` is not).
_MAX_LITERAL_EXPONENT = MAX_DIGITS
_LOG10_2 = math.log10(2)


class CalculatorError(ValueError):
    """The expression is not one the calculator evaluates; the message says what is wrong."""


_BINARY: dict[type[ast.operator], tuple[str, Callable[[Fraction, Fraction], Fraction]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", lambda a, b: Fraction(a // b)),
    ast.Mod: ("%", operator.mod),
}
_REFUSED_OPERATORS: dict[type[ast.AST], str] = {
    ast.BitXor: "operator ^ is not allowed (it is XOR in Python; write powers with **)",
    ast.BitAnd: "operator & is not allowed",
    ast.BitOr: "operator | is not allowed",
    ast.LShift: "operator << is not allowed",
    ast.RShift: "operator >> is not allowed",
    ast.MatMult: "operator @ is not allowed",
    ast.Invert: "operator ~ is not allowed",
    ast.Not: "operator `not` is not allowed",
}
_FUNCTIONS = ("abs", "min", "max", "round")
_DECIMAL = re.compile(r"(?P<mantissa>[0-9_]*\.?[0-9_]*)(?:[eE](?P<exponent>[+-]?[0-9_]+))?")


def _digits(value: int) -> int:
    """Decimal digits of ``|value|``, from its bit length (never converts a huge int to text)."""
    return int(abs(value).bit_length() * _LOG10_2) + 1


def _checked(value: Fraction, what: str) -> Fraction:
    size = max(_digits(value.numerator), _digits(value.denominator))
    if size > MAX_DIGITS:
        raise CalculatorError(f"{what} has about {size} digits, more than the limit of {MAX_DIGITS}")
    return value


def _literal(node: ast.Constant, source: str) -> Fraction:
    value = node.value
    if isinstance(value, bool) or value is None or value is Ellipsis:
        raise CalculatorError(f"constant {value!r} is not a number")
    if isinstance(value, (str, bytes)):
        raise CalculatorError(f"string literals are not allowed (got {value!r})")
    if isinstance(value, complex):
        raise CalculatorError(f"complex numbers are not allowed (got {value!r})")
    if isinstance(value, int):
        return _checked(Fraction(value), f"the literal {value}")
    if isinstance(value, float):
        # Read the literal's own text: the float in the tree is already rounded to binary.
        text = ast.get_source_segment(source, node) or ""
        match = _DECIMAL.fullmatch(text)
        if match is None or not match.group("mantissa").strip("._"):
            raise CalculatorError(f"cannot read the decimal literal {text!r} exactly")
        exponent = match.group("exponent")
        if exponent is not None and len(exponent.lstrip("+-").lstrip("0_")) > len(str(_MAX_LITERAL_EXPONENT)):
            raise CalculatorError(f"the exponent of the literal {text!r} is too large")
        if exponent is not None and abs(int(exponent.replace("_", ""))) > _MAX_LITERAL_EXPONENT:
            raise CalculatorError(f"the exponent of the literal {text!r} is too large")
        return _checked(Fraction(text.replace("_", "")), f"the literal {text}")
    raise CalculatorError(f"constant {value!r} is not a number")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalculatorError(
            f"power with the non-integer exponent {_short(exponent)} is not allowed (the result may be irrational)"
        )
    power = exponent.numerator
    if base == 0 and power < 0:
        raise CalculatorError("division by zero: 0 raised to a negative power")
    if abs(base) != 1 and base != 0:
        # Digits of the result = |power| * log10 of the base's larger part: refuse before computing it.
        # Any base but 0 and ±1 has a part >= 2, so an exponent past 4 * MAX_DIGITS is always too large
        # (checked first: a huge exponent would overflow the float estimate).
        size = math.inf
        if abs(power) <= 4 * MAX_DIGITS:
            size = abs(power) * math.log10(max(abs(base.numerator), base.denominator))
        if size > MAX_DIGITS:
            amount = f"about {size:.0f}" if size != math.inf else "far more than"
            raise CalculatorError(
                f"power too large: ** with exponent {_short(power)} gives {amount} digits, "
                f"more than the limit of {MAX_DIGITS}"
            )
    return _checked(base**power, "a power's result")


def _short(value: int | Fraction) -> str:
    """``value`` for a message: huge numbers by their digit count, not 1000 digits of text."""
    value = Fraction(value)
    if max(_digits(value.numerator), _digits(value.denominator)) <= 30:
        return format_number(value)
    return f"<a {_digits(value.numerator)}-digit number>"


def _call(node: ast.Call, args: list[Fraction]) -> Fraction:
    name = node.func.id  # checked to be one of _FUNCTIONS before the arguments were evaluated
    if name == "abs":
        if len(args) != 1:
            raise CalculatorError(f"abs() takes exactly 1 argument, got {len(args)}")
        return abs(args[0])
    if name in ("min", "max"):
        if len(args) < 2:
            raise CalculatorError(f"{name}() needs at least 2 arguments, got {len(args)}")
        return min(args) if name == "min" else max(args)
    # round
    if len(args) == 1:
        return Fraction(round(args[0]))
    if len(args) == 2:
        digits = args[1]
        if digits.denominator != 1:
            raise CalculatorError(f"round()'s second argument must be an integer, got {_short(digits)}")
        if abs(digits.numerator) > MAX_DIGITS:
            raise CalculatorError(f"round()'s second argument {_short(digits)} is out of range")
        return _checked(round(args[0], digits.numerator), "round()'s result")
    raise CalculatorError(f"round() takes 1 or 2 arguments, got {len(args)}")


def _check_node(node: ast.AST, names: Mapping[str, Fraction]) -> None:
    """Refuse a node the calculator does not evaluate, before anything is computed."""
    if isinstance(node, ast.Name):
        if node.id in names:
            return
        known = f"the problem's names {', '.join(sorted(names))}, " if names else ""
        raise CalculatorError(
            f"unknown name {node.id!r}: only numbers, {known}and {', '.join(_FUNCTIONS)}() are allowed"
        )
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise CalculatorError(
                f"only calls of {', '.join(_FUNCTIONS)} are allowed, not of {type(node.func).__name__}"
            )
        if node.func.id not in _FUNCTIONS:
            raise CalculatorError(
                f"function {node.func.id!r} is not allowed: only {', '.join(_FUNCTIONS)} may be called"
            )
        if node.keywords:
            raise CalculatorError(f"{node.func.id}() takes positional arguments only")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise CalculatorError(f"{node.func.id}() takes plain arguments, not *unpacking")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) in _REFUSED_OPERATORS:
            raise CalculatorError(_REFUSED_OPERATORS[type(node.op)])
        return
    if isinstance(node, ast.UnaryOp):
        if type(node.op) in _REFUSED_OPERATORS:
            raise CalculatorError(_REFUSED_OPERATORS[type(node.op)])
        return
    if isinstance(node, ast.Attribute):
        raise CalculatorError(f"attribute access (.{node.attr}) is not allowed")
    if isinstance(node, ast.Lambda):
        raise CalculatorError("lambda is not allowed")
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        raise CalculatorError("comprehensions are not allowed")
    if isinstance(node, ast.Compare):
        raise CalculatorError("comparisons are not allowed")
    if isinstance(node, ast.BoolOp):
        raise CalculatorError(
            f"boolean operator `{'and' if isinstance(node.op, ast.And) else 'or'}` is not allowed"
        )
    if isinstance(node, (ast.JoinedStr, ast.FormattedValue)):
        raise CalculatorError("string literals are not allowed (got an f-string)")
    if not isinstance(node, (ast.Expression, ast.Constant)):
        raise CalculatorError(f"{type(node).__name__} is not allowed in a calculator expression")


def evaluate(expression: str, names: Mapping[str, Fraction | int] | None = None) -> Fraction:
    """The exact value of an arithmetic ``expression`` (see the module docstring); CalculatorError otherwise.
    ``names``: values the expression may use by name (a generated problem's labelled quantities, ``a = 6402``)."""
    bound = {key: Fraction(value) for key, value in (names or {}).items() if key not in _FUNCTIONS}
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, got {type(expression).__name__}")
    source = expression.strip()
    if not source:
        raise CalculatorError("empty expression")
    if len(source) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"expression too long: {len(source)} characters, more than the limit of {MAX_EXPRESSION_CHARS}"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid expression: {exc.msg}") from None
    except (ValueError, MemoryError, RecursionError) as exc:
        raise CalculatorError(f"not a valid expression: {exc}") from None
    called: set[int] = set()  # the name nodes of allowed calls (`abs` in `abs(x)`), not variables
    for node in ast.walk(tree):  # breadth-first: a call is checked before its function's name
        if isinstance(node, (ast.operator, ast.unaryop, ast.expr_context)) or id(node) in called:
            continue
        _check_node(node, bound)
        if isinstance(node, ast.Call):
            called.add(id(node.func))

    # Iterative post-order walk: ("visit", node) pushes the children, ("apply", node) combines their values.
    values: list[Fraction] = []
    stack: list[tuple[bool, ast.AST]] = [(False, tree.body)]
    try:
        while stack:
            ready, node = stack.pop()
            if isinstance(node, ast.Constant):
                values.append(_literal(node, source))
                continue
            if isinstance(node, ast.Name):  # checked to be bound
                values.append(bound[node.id])
                continue
            if not ready:
                stack.append((True, node))
                children = _children(node)
                stack.extend((False, child) for child in reversed(children))
                continue
            if isinstance(node, ast.BinOp):
                right = values.pop()
                left = values.pop()
                values.append(_binary(node.op, left, right))
            elif isinstance(node, ast.UnaryOp):
                value = values.pop()
                values.append(-value if isinstance(node.op, ast.USub) else value)
            else:  # ast.Call
                count = len(node.args)
                args = values[len(values) - count :] if count else []
                del values[len(values) - count :]
                values.append(_checked(_call(node, args), f"{node.func.id}()'s result"))
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    return values[0]


def _children(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Call):
        return list(node.args)
    raise CalculatorError(f"{type(node).__name__} is not allowed in a calculator expression")


def _binary(op: ast.operator, left: Fraction, right: Fraction) -> Fraction:
    if isinstance(op, ast.Pow):
        return _power(left, right)
    symbol, function = _BINARY[type(op)]
    if right == 0 and symbol in ("/", "//", "%"):
        raise CalculatorError(f"division by zero (in {_short(left)} {symbol} 0)")
    return _checked(function(left, right), f"the result of {symbol}")


def format_number(value: Fraction | int) -> str:
    """``value`` as exact text: ``"12345"``, ``"-7"``, ``"3/4"`` (lowest terms, sign on the numerator)."""
    if isinstance(value, bool) or not isinstance(value, (Fraction, int)):
        raise TypeError(f"format_number takes a Fraction or an int, got {type(value).__name__}")
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"
