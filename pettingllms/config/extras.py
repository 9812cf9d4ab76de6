"""The optional packages a config can select, checked before anything is written (ARCHITECTURE principle 5).

Each row of :data:`OPTIONAL_PACKAGES` is a setting that needs a package the core install leaves out, the
module it imports and what to install. :func:`check_optional_packages` (run by
:func:`~pettingllms.config.validate_config`) looks each selected one up without importing it
(:func:`importlib.util.find_spec`), so a missing one is one line naming the setting and the extra, exit
status 2 at the command line, instead of a traceback after the run folder was written and the model loaded.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = ["OPTIONAL_PACKAGES", "OptionalPackage", "check_optional_packages"]


def _reports_to(sink: str) -> Callable[[Mapping[str, Any]], bool]:
    def selects(config: Mapping[str, Any]) -> bool:
        from comlrl.reporting import normalize_report_to

        return sink in normalize_report_to(config["run"]["report_to"])  # "all" is what is installed

    return selects


def _uses_vllm(config: Mapping[str, Any]) -> bool:
    if config["rollout"].get("backend") == "vllm":
        return True
    stages = set(config.get("pipeline") or ())
    return any(bool((config.get(stage) or {}).get("use_vllm")) for stage in ("madpo", "marlhf", "madpo_from_trees") if stage in stages)


def _household_source(source: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda config: config["env"].get("name") == "household" and config["env"].get("source") == source


@dataclass(frozen=True)
class OptionalPackage:
    """``module`` is needed where ``selects(config)``; ``setting`` names it, ``install`` says how to get it."""

    setting: str
    module: str
    install: str
    selects: Callable[[Mapping[str, Any]], bool]


OPTIONAL_PACKAGES: tuple[OptionalPackage, ...] = (
    OptionalPackage("`run.report_to` tensorboard", "tensorboard", 'pip install -e ".[tensorboard]"', _reports_to("tensorboard")),
    OptionalPackage("`run.report_to` wandb", "wandb", 'pip install -e ".[wandb]"', _reports_to("wandb")),
    OptionalPackage("`run.backend` ray", "ray", 'pip install -e ".[ray]"',
                    lambda config: config["run"].get("backend") == "ray"),
    OptionalPackage("`rollout.backend` vllm (or a preference stage's `use_vllm`)", "vllm",
                    'pip install -e ".[vllm]" on a GPU machine; on CPU, bash scripts/test_vllm_cpu.sh (docs/vllm.md)',
                    _uses_vllm),
    OptionalPackage("`env.source` textworld (household)", "textworld", "pip install textworld",
                    _household_source("textworld")),
    OptionalPackage("`env.source` alfworld (household)", "alfworld",
                    "pip install alfworld, then alfworld-download and set ALFWORLD_DATA (docs/household.md)",
                    _household_source("alfworld")),
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails, or a module whose spec is unset
        return False


def check_optional_packages(config: Mapping[str, Any]) -> None:
    """A ConfigError naming the first selected optional package that is not installed, and how to install it."""
    for package in OPTIONAL_PACKAGES:
        if package.selects(config) and not _installed(package.module):
            raise ConfigError(
                f"{package.setting} needs the `{package.module}` package, which is not installed: {package.install}"
            )
