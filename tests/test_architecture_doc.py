"""``docs/architecture.md`` stays true: every dotted name it writes in backticks (``comlrl.x.y``,
``pettingllms.x.Y``, ``benchmarks.x``) imports, and every repository path it names exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
DOTTED = re.compile(r"`((?:comlrl|pettingllms|benchmarks)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
PATH = re.compile(r"`((?:comlrl|pettingllms|benchmarks|tests|scripts|docs)/[A-Za-z0-9_./-]*)`")


def resolve(dotted: str) -> object:
    """The module, or the attribute chain after the longest importable module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(dotted)


def test_the_document_names_things():
    text = DOC.read_text()
    assert len(set(DOTTED.findall(text))) >= 30
    assert len(set(PATH.findall(text))) >= 15


@pytest.mark.parametrize("dotted", sorted(set(DOTTED.findall(DOC.read_text()))))
def test_named_symbol_imports(dotted):
    resolve(dotted)


@pytest.mark.parametrize("path", sorted(set(PATH.findall(DOC.read_text()))))
def test_named_path_exists(path):
    assert (ROOT / path.rstrip("/")).exists(), path


def test_resolve_rejects_a_missing_name():
    with pytest.raises(AttributeError):
        resolve("comlrl.scoring.no_such_function")
