"""The user's own modules, imported before a config names anything they register (ARCHITECTURE principle 11).

An environment, its agents and its scripted policies may live in the user's own package. Three ways make
them known, each read at a different point:

- ``imports: [package.module, ...]``, a top-level key of a config file (every file of its ``base:`` chain
  adds its own), read by :func:`~pettingllms.config.load_config` before it resolves ``env.name``;
- ``--import MODULE`` (repeatable) on every ``pettingllms`` command, imported before the command does
  anything; commands that load a config add these to its ``imports``;
- the ``pettingllms.envs`` entry-point group of an installed distribution, read by the registry the first
  time a name is not found (:mod:`pettingllms.registry`), so such a package needs no config line.

The resolved config keeps the union of the first two under ``imports``, so the run's ``config.yaml`` names
them, ``pettingllms eval --checkpoint RUN`` imports them again, and every worker process imports them before
it builds anything (:class:`ModuleImports`: Ray's EnvWorkers, RolloutWorkers and UpdateWorkers; data-parallel
ranks run the same command and load the same config).

A module is imported as ``python -c "import MODULE"`` run in the current folder would find it: installed, on
``PYTHONPATH``, or under the current folder. One that fails to import is a :class:`ConfigError` of one line
naming it and the error, raised before anything is written.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = ["IMPORTS_KEY", "ModuleImports", "check_module_names", "import_modules", "split_import_flags"]

#: The top-level config key that lists the user's modules.
IMPORTS_KEY = "imports"
IMPORT_FLAG = "--import"
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def check_module_names(value: Any, where: str) -> list[str]:
    """``value`` as a list of dotted module names; anything else is a ConfigError naming ``where``."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where} must be a list of module names like [my_package.envs], got {value!r}")
    for name in value:
        if not isinstance(name, str) or not _MODULE_NAME.match(name):
            raise ConfigError(f"{where}: {name!r} is not a module name (dotted Python identifiers, e.g. my_package.envs)")
    return list(value)


def _with_current_folder() -> None:
    """The current folder on ``sys.path`` (last), as ``python -c`` has it: a console script's does not."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def import_modules(names: Iterable[str], where: str = "`imports`") -> list[str]:
    """Import each module of ``names`` (in order, once); a module that fails to import, for whatever reason
    (not found, a syntax error, an exception at import), is a ConfigError naming it. Returns the names."""
    names = check_module_names(list(names), where)
    if names:
        _with_current_folder()
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # the user's code: any failure is theirs to see, in one line
            detail = " ".join(str(error).split()) or "no message"
            raise ConfigError(
                f"{where}: module {name!r} could not be imported: {type(error).__name__}: {detail} "
                f"(python -c 'import {name}' shows the traceback)"
            ) from error
    return names


def split_import_flags(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(modules, the other arguments)`` of a command line: every ``--import MODULE`` / ``--import=MODULE``,
    wherever it stands (before or after the command, the config or the overrides). A trailing
    ``--import`` without a module is a ConfigError."""
    modules: list[str] = []
    rest: list[str] = []
    items = iter(argv)
    for item in items:
        if item == IMPORT_FLAG:
            module = next(items, None)
            if module is None or module.startswith("-"):
                raise ConfigError(f"`{IMPORT_FLAG}` needs a module name, e.g. {IMPORT_FLAG} my_package.envs")
            modules.append(module)
        elif item.startswith(IMPORT_FLAG + "="):
            modules.append(item.split("=", 1)[1])
        else:
            rest.append(item)
    return check_module_names(modules, f"`{IMPORT_FLAG}`"), rest


def merged_imports(*lists: Iterable[str]) -> list[str]:
    """The modules of every list in order, each once."""
    return list(dict.fromkeys(name for names in lists for name in names))


def _found_under(name: str) -> str | None:
    """The ``sys.path`` folder an imported module's top-level package was found under (None for a
    namespace without files or a built-in)."""
    top = sys.modules.get(name.split(".", 1)[0])
    where = getattr(top, "__file__", None)
    if where is None:
        return None
    path = Path(where).resolve().parent
    return str(path.parent if Path(where).name == "__init__.py" else path)


@dataclass(frozen=True)
class ModuleImports:
    """What a worker process imports before it builds anything: the config's ``imports`` and the folders the
    driver found them under (a worker's ``sys.path`` need not hold a folder the driver's does)."""

    modules: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: Any) -> ModuleImports:
        """The ``imports`` of a resolved config (already imported in this process by the loader)."""
        modules = tuple(check_module_names(config.get(IMPORTS_KEY), f"`{IMPORTS_KEY}`"))
        paths = tuple(dict.fromkeys(p for p in map(_found_under, modules) if p is not None))
        return cls(modules, paths)

    def load(self) -> None:
        """Import the modules here (a worker's first act); a failure is a ConfigError naming the module."""
        for path in self.paths:
            if path not in sys.path:
                sys.path.append(path)
        import_modules(self.modules)
