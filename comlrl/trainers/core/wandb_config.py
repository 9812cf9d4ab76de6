"""The public ``wandb_config`` keyword: what it changes in the trainer's config, the W&B run config (the
trainer's arguments plus ``config_sections``) and the keywords ``wandb.init`` receives."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["apply_wandb_config", "wandb_init_kwargs", "wandb_run_config"]


def apply_wandb_config(args: Any, wandb_config: Mapping[str, Any] | None) -> Any:
    """``wandb_config`` (a dict) turns on ``report_to="wandb"``; its name fills ``run_name`` when unset and
    ``config_sections.output.verbose=False`` hides progress bars."""
    if wandb_config is None:
        return args
    if not isinstance(wandb_config, Mapping):
        raise ValueError(f"`wandb_config` must be a dict or None, got {type(wandb_config).__name__}")
    changes: dict[str, Any] = {}
    if "wandb" not in args.report_to:
        changes["report_to"] = [*args.report_to, "wandb"]
    name = wandb_config.get("name") or wandb_config.get("run_name")
    if name and args.run_name is None:
        changes["run_name"] = str(name)
    wandb_run_config(args.to_dict(), wandb_config)  # checks `config_sections` now, not at the first log
    sections = wandb_config.get("config_sections") or {}
    verbose = (sections.get("output") or {}).get("verbose", True)
    if verbose is False:
        changes["disable_tqdm"] = True
    return dataclasses.replace(args, **changes) if changes else args


def wandb_run_config(args: Mapping[str, Any], wandb_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The W&B run config: the trainer's arguments with ``wandb_config["config_sections"]`` merged in
    (each section a top-level key, as the public CoMLRL does, so runs record e.g. the dataset section)."""
    sections = (wandb_config or {}).get("config_sections") or {}
    if not isinstance(sections, Mapping):
        raise ValueError(f"`wandb_config['config_sections']` must be a dict, got {type(sections).__name__}")
    clashes = sorted(set(sections) & set(args))
    if clashes:
        raise ValueError(f"`wandb_config['config_sections']` keys {clashes} clash with trainer arguments")
    return {**dict(args), **{str(k): v for k, v in sections.items()}}


def wandb_init_kwargs(wandb_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``wandb.init`` keywords ``wandb_config`` names (``name`` or ``run_name`` become ``name``)."""
    if not wandb_config:
        return {}
    out = {
        k: wandb_config[k] for k in ("project", "entity", "dir", "tags", "id", "resume") if k in wandb_config
    }
    name = wandb_config.get("name") or wandb_config.get("run_name")
    if name:
        out["name"] = name
    return out
