"""How a program's standard output is compared with a stdin/stdout test's expected output (pure; the
judge compares outside the sandbox, so nothing expected ever reaches the program)."""

import math
import re

COMPARE_MODES = ("exact", "whitespace", "float")
FLOAT_TOLERANCE = 1e-6
# Only plain decimal numbers count as floats ("nan", "inf", "1_000" compare as text).
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_FLOAT_MARK = re.compile(r"[.eE]")


def _lines_of_tokens(text):
    """Whitespace-split tokens per line; trailing whitespace and trailing blank lines do not count."""
    lines = [line.split() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_match(actual, expected, tolerance):
    if actual == expected:
        return True
    # Only an expected token written as a float (a point or an exponent) gets the tolerance: an integer
    # answer compares exactly ("3.0" is not "3", and print(a / b) for a // b is a real bug).
    if not (_NUMBER.match(actual) and _NUMBER.match(expected)) or not _FLOAT_MARK.search(expected):
        return False
    a, e = float(actual), float(expected)
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= tolerance or abs(a - e) <= tolerance * abs(e)


def compare_output(actual, expected, mode="float", tolerance=FLOAT_TOLERANCE):
    """Whether a program's stdout ``actual`` matches ``expected``.

    ``exact``: identical strings. ``whitespace``: the same tokens line by line, ignoring how much
    whitespace separates them, trailing whitespace and trailing blank lines. ``float``: as
    ``whitespace``, and a numeric token also matches an expected token written as a float (with a ``.``
    or an exponent) when they differ by at most ``tolerance`` absolutely or relatively to the expected
    value (as the APPS and CodeContests judges do for real answers); an expected integer token compares
    exactly, as text.
    """
    if mode not in COMPARE_MODES:
        raise ValueError(f"`mode` must be one of {list(COMPARE_MODES)}, got {mode!r}")
    if mode == "exact":
        return actual == expected
    got, want = _lines_of_tokens(actual), _lines_of_tokens(expected)
    if len(got) != len(want):
        return False
    for got_line, want_line in zip(got, want):
        if len(got_line) != len(want_line):
            return False
        if mode == "whitespace":
            if got_line != want_line:
                return False
        elif not all(_tokens_match(a, e, tolerance) for a, e in zip(got_line, want_line)):
            return False
    return True


__all__ = ["COMPARE_MODES", "FLOAT_TOLERANCE", "compare_output"]
