"""The mutator (``pettingllms/envs/code/mutants.py``): every kind changes exactly what it names, mutants are
deterministic, distinct and capped, and ``within`` leaves everything outside the named function alone."""

from __future__ import annotations

import ast

from pettingllms.envs.code.mutants import MUTATION_KINDS, _apply, _sites, mutants

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


def test_mutants_within_a_function_leave_the_rest_alone():
    source = "def helper(x):\n    return x + 1 if x < 3 else 0\n" + SOURCE
    helper = ast.unparse(ast.parse(source).body[0])
    inside = mutants(source, 100, within="f")
    assert len(inside) == len(_sites(ast.parse(SOURCE)))
    assert all(ast.unparse(ast.parse(m).body[0]) == helper for _, m in inside)
    assert any(ast.unparse(ast.parse(m).body[0]) != helper for _, m in mutants(source, 100))
    assert mutants(source, 100, within="missing") == []
