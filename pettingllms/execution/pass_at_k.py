"""pass@k, the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on Code".

With ``n`` samples of a problem of which ``c`` succeed, ``pass@k = 1 - C(n - c, k) / C(n, k)``: the
probability that a set of ``k`` samples drawn without replacement from the ``n`` holds a success. An
evaluation reports the mean over its problems. ``pass@1`` is ``c / n``, the plain success rate.

Confidence intervals (:func:`pass_at_k_intervals`) are Wilson score intervals over the problems: the mean
``p`` of the per-problem estimates with the problem count as the sample size. With one sample per problem
the estimates are 0/1 and this is the exact Wilson interval of a binomial proportion; with several samples
the estimates lie in [0, 1] and have a variance of at most ``p (1 - p)``, so the interval is conservative.
Unlike the normal approximation it never collapses to a point at 0 or 1 (164 of 164 solved: [0.977, 1]).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from statistics import NormalDist

__all__ = ["CONFIDENCE", "mean_pass_at_k", "pass_at_k", "pass_at_k_intervals", "pass_at_k_sizes", "wilson_interval"]

#: Level of the intervals an evaluation reports.
CONFIDENCE = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)`` for ``n`` samples with ``c`` successes (``1 <= k <= n``)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"`{name}` must be an integer, got {value!r}")
    if not 0 <= c <= n:
        raise ValueError(f"`c` must be in [0, n={n}], got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"`k` must be in [1, n={n}], got {k}")
    # Exact integer arithmetic: no rounding before the one conversion to float.
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def pass_at_k_sizes(num_samples: int) -> list[int]:
    """The ``k`` an evaluation with ``num_samples`` samples per problem reports: the powers of 2 up to
    ``num_samples``, and ``num_samples`` itself (``6 -> [1, 2, 4, 6]``)."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be an integer >= 1, got {num_samples!r}")
    sizes = [1 << i for i in range(num_samples.bit_length()) if 1 << i <= num_samples]
    return sizes if sizes[-1] == num_samples else [*sizes, num_samples]


def mean_pass_at_k(counts: Iterable[tuple[int, int]], ks: Iterable[int]) -> dict[str, float]:
    """``{"pass@<k>": mean over problems}`` from ``(n, c)`` per problem. A problem with fewer than ``k``
    samples (trajectories lost to infrastructure failures) is left out of that ``k``'s mean; a ``k`` no
    problem has enough samples for is left out."""
    counts = list(counts)
    out: dict[str, float] = {}
    for k in ks:
        values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
        if values:
            out[f"pass@{k}"] = sum(values) / len(values)
    return out


def wilson_interval(proportion: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of a proportion observed over ``n`` trials."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be an integer >= 1, got {n!r}")
    if not 0.0 <= proportion <= 1.0:
        raise ValueError(f"`proportion` must be in [0, 1], got {proportion!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be in (0, 1), got {confidence!r}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    denominator = 1 + z * z / n
    centre = (proportion + z * z / (2 * n)) / denominator
    half = z * math.sqrt(proportion * (1 - proportion) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if proportion == 0.0 else max(0.0, centre - half)  # exact ends where rounding would miss them
    high = 1.0 if proportion == 1.0 else min(1.0, centre + half)
    return low, high


def pass_at_k_intervals(
    counts: Iterable[tuple[int, int]], ks: Iterable[int], confidence: float = CONFIDENCE
) -> dict[str, list[float]]:
    """``{"pass@<k>": [low, high]}``: the Wilson interval (module docstring) of each ``k``'s mean over the
    problems with at least ``k`` samples, from ``(n, c)`` per problem."""
    counts = list(counts)
    out: dict[str, list[float]] = {}
    for k in ks:
        values = [pass_at_k(n, c, k) for n, c in counts if n >= k]
        if values:
            out[f"pass@{k}"] = list(wilson_interval(sum(values) / len(values), len(values), confidence))
    return out
