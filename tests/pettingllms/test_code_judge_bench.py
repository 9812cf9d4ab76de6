"""The code-judge benchmark's correctness part (``benchmarks/code_judge.py``): the mutator, and the quick
mode's check on a handful of HumanEval problems (reference solutions pass; on every mutant the sandbox
agrees with a bare subprocess). The full check (164 references, ~300 mutants) is the benchmark itself."""

from __future__ import annotations

import ast
import sys
import time

import pytest

from benchmarks.code_judge import MUTATION_KINDS, _apply, _sites, check_correctness, mutants
from pettingllms.sandbox import SandboxConfig, SandboxPool

SOURCE = """
def f(xs, k):
    total = 0
    for x in xs:
        if x < k and x != 3:
            total = total + x
    return total
"""


def test_every_mutation_kind_changes_exactly_what_it_names():
    tree = ast.parse(SOURCE)
    namespace: dict = {}
    exec(SOURCE, namespace)
    assert namespace["f"]([1, 2, 3, 4, 5], 5) == 7  # 1 + 2 + 4
    # By hand, f([1, 2, 3, 4, 5], 5) of each mutant: `x >= k` keeps 5 -> 5; `x == 3` -> 3; `total = 1`
    # -> 8; `x != 4` -> 1 + 2 + 3 = 6; `total - x` -> -7; `or` keeps all -> 15; `return None`.
    expected = {"compare": [3, 5], "constant": [6, 8], "arith": [-7], "boolop": [15], "return_none": [None]}
    got: dict[str, list] = {}
    for kind, index in _sites(tree):
        scope: dict = {}
        exec(_apply(SOURCE, kind, index), scope)
        got.setdefault(kind, []).append(scope["f"]([1, 2, 3, 4, 5], 5))
    assert {k: sorted(v, key=repr) for k, v in got.items()} == expected
    assert set(got) == set(MUTATION_KINDS)


def test_mutants_are_deterministic_distinct_and_capped():
    first, again = mutants(SOURCE, 4, seed=1), mutants(SOURCE, 4, seed=1)
    assert first == again and len(first) == 4
    sources = [src for _, src in first]
    assert len(set(sources)) == 4 and ast.unparse(ast.parse(SOURCE)) not in sources
    assert [kind for kind, _ in first] == ["compare", "constant", "arith", "boolop"]  # round robin
    assert len(mutants(SOURCE, 100)) == len(_sites(ast.parse(SOURCE)))  # every site, no duplicates here


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
def test_quick_correctness_on_a_handful_of_humaneval_problems():
    start = time.monotonic()
    with SandboxPool(SandboxConfig(), max_workers=2) as pool:
        report = check_correctness(pool, problems=6, mutants_per_problem=2)
    ref, mut = report["reference"], report["mutants"]
    assert (ref["problems"], ref["passed"], ref["failed"]) == (6, 6, [])
    assert mut["count"] >= 10
    assert mut["disagreements"] == [] and mut["agree"] == mut["count"]
    assert mut["killed"] >= mut["count"] // 2  # the mutants really break most solutions
    assert time.monotonic() - start < 30
