"""pass@k, the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on Code".

With ``n`` samples of a problem of which ``c`` succeed, ``pass@k = 1 - C(n - c, k) / C(n, k)``: the
probability that a set of ``k`` samples drawn without replacement from the ``n`` holds a success. An
evaluation reports the mean over its problems. ``pass@1`` is ``c / n``, the plain success rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

__all__ = ["mean_pass_at_k", "pass_at_k", "pass_at_k_sizes"]


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
