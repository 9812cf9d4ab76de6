"""The own-environment example of docs/pettingllms.md ("Your own environment"), written into a folder outside
the project as a user would: ``my_team/__init__.py``, ``my_team/relay.py`` and ``relay.yaml``, read from the
docs at test time so the page cannot drift from what is tested."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.scripts import REPO

__all__ = ["MODULE", "doc_example", "forget_user_modules", "write_user_project"]

DOC = REPO / "docs" / "pettingllms.md"
MODULE = "my_team.relay"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def doc_example() -> tuple[str, str]:
    """``(my_team/relay.py, relay.yaml)`` as the docs show them (the blocks whose first line names the file)."""
    blocks = {body.splitlines()[0].split(":")[0]: body for _, body in _BLOCK.findall(DOC.read_text(encoding="utf-8"))}
    return blocks["# my_team/relay.py"], blocks["# relay.yaml"]


def write_user_project(folder: Path, module: str | None = None, config: str | None = None) -> Path:
    """The example (or the given ``module`` / ``config`` text in its place) written under ``folder``."""
    doc_module, doc_config = doc_example()
    (folder / "my_team").mkdir(parents=True, exist_ok=True)
    (folder / "my_team" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "my_team" / "relay.py").write_text(module if module is not None else doc_module, encoding="utf-8")
    (folder / "relay.yaml").write_text(config if config is not None else doc_config, encoding="utf-8")
    return folder


@contextmanager
def forget_user_modules() -> Iterator[None]:
    """Leave the registry, ``sys.modules`` and ``sys.path`` as they were: a test that imports the example in
    process unregisters it afterwards, so other tests see only the shipped names."""
    from pettingllms import registry

    def registered(reg) -> set[str]:  # without loading entry points (a test may have planted a broken one)
        return set(reg._entries)

    before = {reg: registered(reg) for reg in (registry.ENVS, registry.AGENTS, registry.WORKERS)}
    path = list(sys.path)
    try:
        yield
    finally:
        for reg, names in before.items():
            for name in registered(reg) - names:
                reg.unregister(name)
        for name in [m for m in sys.modules if m == "my_team" or m.startswith("my_team.")]:
            del sys.modules[name]
        sys.path[:] = path
