"""Deterministic mutants of a program: small syntactic changes (a comparison flipped, an integer constant
off by one, ``+`` and ``-`` swapped, ``and`` and ``or`` swapped, a ``return`` of ``None``) that usually make a
correct program wrong.

Two users: the tester's reward (a generated test earns "caught a bug" only by failing a program known to be
wrong; mutants of the reference that fail a ground-truth test are such programs, see
``pettingllms/envs/code/evidence.py``) and the judge benchmark (``benchmarks/code_judge.py``: the sandbox's
verdicts on mutants must agree with a bare subprocess's).
"""

from __future__ import annotations

import ast
import random

__all__ = ["MUTATION_KINDS", "mutants"]

_COMPARE_FLIPS = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
                  ast.IsNot: ast.Is}
MUTATION_KINDS = ("compare", "constant", "arith", "boolop", "return_none")


def _sites(tree: ast.AST) -> list[tuple[str, int]]:
    """(kind, index among the nodes of ``ast.walk``) of every place a mutation applies."""
    sites = []
    for index, node in enumerate(ast.walk(tree)):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_FLIPS:
            sites.append(("compare", index))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            sites.append(("constant", index))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            sites.append(("arith", index))
        elif isinstance(node, ast.BoolOp):
            sites.append(("boolop", index))
        elif isinstance(node, ast.Return) and node.value is not None:
            sites.append(("return_none", index))
    return sites


def _apply(source: str, kind: str, index: int) -> str:
    tree = ast.parse(source)
    node = list(ast.walk(tree))[index]
    if kind == "compare":
        node.ops[0] = _COMPARE_FLIPS[type(node.ops[0])]()
    elif kind == "constant":
        node.value += 1
    elif kind == "arith":
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "return_none":
        node.value = ast.Constant(None)
    return ast.unparse(tree)


def mutants(source: str, per_program: int, seed: int = 0, within: str | None = None) -> list[tuple[str, str]]:
    """Up to ``per_program`` (kind, mutated source) of ``source``, deterministic in ``seed``: one site of
    each kind first (in a seeded order), then further sites; sources that differ from the original
    (and from each other) only. ``within``: mutate only inside the function of that name (a HumanEval
    solution's prompt also holds helpers the tests take from the dataset, which a mutant must leave alone)."""
    tree = ast.parse(source)
    baseline = ast.unparse(tree)
    rng = random.Random(seed)
    by_kind: dict[str, list[int]] = {}
    allowed = None
    if within is not None:
        scope = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name == within]
        allowed = {id(node) for top in scope for node in ast.walk(top)}
    nodes = list(ast.walk(tree))
    for kind, index in _sites(tree):
        if allowed is None or id(nodes[index]) in allowed:
            by_kind.setdefault(kind, []).append(index)
    order = []
    for kind in MUTATION_KINDS:
        rng.shuffle(by_kind.get(kind, []))
    while any(by_kind.values()):  # round robin over the kinds
        for kind in MUTATION_KINDS:
            if by_kind.get(kind):
                order.append((kind, by_kind[kind].pop()))
    out, seen = [], {baseline}
    for kind, index in order:
        if len(out) == per_program:
            break
        mutated = _apply(source, kind, index)
        if mutated not in seen:
            seen.add(mutated)
            out.append((kind, mutated))
    return out
