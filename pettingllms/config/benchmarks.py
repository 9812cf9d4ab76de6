"""Several evaluation benchmarks in one run: the ``eval.benchmarks`` mapping.

A run trains on one dataset and may report on several. Each entry of ``eval.benchmarks`` names a
benchmark and says how it differs from the run's own ``env`` / ``eval`` / ``rollout`` settings::

    eval:
      num_instances: null               # the defaults every benchmark starts from
      before_training_instances: 20     # eval_before (and evaluations inside training) play at most this many
      benchmarks:
        apps: {}                        # the run's own dataset, its env.split
        humaneval: {dataset: humaneval}
        livecodebench: {dataset: livecodebench, num_samples: 4, temperature: 0.6}

An entry's keys are of three kinds:

- the ``eval`` keys of one evaluation (:data:`EVAL_KEYS`: instances, samples, temperature, greedy,
  transcripts), each defaulting to the ``eval`` section's value;
- ``max_completion_length``, the generation length (``rollout.max_completion_length``; AIME's solutions
  are longer than GSM8K's);
- the environment fields that select and judge the evaluation data, the environment config's
  ``eval_fields`` (code: ``dataset``, ``split``, ``data_dir``, ``difficulty``, ``compare``, ``time_limit_s``,
  ...). When an entry names another ``dataset``, the fields that describe one dataset's files
  (``dataset_fields``: ``split``, ``data_dir``, ``difficulty`` / ``level``, ``train_split``) go back to their defaults
  unless the entry sets them too.

Everything else is the trained team's and must be the run's: roles, turn order, tools, agent options,
prompts, the turn budget and the rewards. An entry that sets one of those is a ConfigError that says which
keys may differ. The same rule decides what ``pettingllms eval CONFIG --checkpoint RUN`` may change from
the run that saved the policies (:func:`team_differences`).

Without ``eval.benchmarks`` (or with it empty) a run evaluates its own ``env.split`` as one unnamed
benchmark and every report keeps its one-benchmark layout.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pettingllms.config.errors import ConfigError

__all__ = [
    "EVAL_KEYS",
    "GENERATION_KEYS",
    "Benchmark",
    "benchmark_configs",
    "env_eval_fields",
    "may_differ_text",
    "team_differences",
]

# Keys of one evaluation an entry may set (the eval section's own keys, less those of the whole run).
EVAL_KEYS: tuple[str, ...] = ("num_instances", "seed_start", "num_samples", "temperature", "greedy", "transcripts_rate")
# rollout keys an entry may set.
GENERATION_KEYS: tuple[str, ...] = ("max_completion_length",)


@dataclass(frozen=True)
class Benchmark:
    """One evaluation of a run: its ``name`` (None: the run's own, without ``eval.benchmarks``) and the
    resolved run config that plays it (its ``env``, ``eval`` and ``rollout`` sections set for it)."""

    name: str | None
    config: Mapping[str, Any]


def _config_class(env_name: str) -> Any:
    from pettingllms.registry import RegistryError, get_env_class

    try:
        return get_env_class(env_name).config_class
    except (RegistryError, AttributeError):
        return None


def env_eval_fields(env_name: str) -> tuple[str, ...]:
    """The fields of environment ``env_name`` a benchmark may set apart from the trained run (its config
    class's ``eval_fields``; none for an environment without one)."""
    return tuple(getattr(_config_class(env_name), "eval_fields", ()))


def _dataset_defaults(env_name: str) -> dict[str, Any]:
    """``{field: default}`` of the environment's ``dataset_fields``."""
    config_class = _config_class(env_name)
    names = getattr(config_class, "dataset_fields", ())
    if not names or not dataclasses.is_dataclass(config_class):
        return {}
    defaults = {}
    for spec in dataclasses.fields(config_class):
        if spec.name in names and spec.default is not dataclasses.MISSING:
            defaults[spec.name] = spec.default
    return defaults


def may_differ_text(env_name: str) -> str:
    """What an evaluation may set apart from the trained run, in words (for errors)."""
    fields = ", ".join(env_eval_fields(env_name)) or "none"
    return (f"a benchmark may set {', '.join(EVAL_KEYS)}, {', '.join(GENERATION_KEYS)} and the environment's "
            f"evaluation fields ({fields})")


def _entry(env_name: str, name: str, entry: Any, env: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A checked entry split into ``{"eval": ..., "rollout": ..., "env": ...}``."""
    from comlrl.validation import closest_name

    where = f"eval.benchmarks.{name}"
    if entry is None:
        entry = {}
    if not isinstance(entry, Mapping):
        raise ConfigError(f"`{where}` must be a mapping of settings ({{}}: the run's own), got {entry!r}")
    allowed = env_eval_fields(env_name)
    parts: dict[str, dict[str, Any]] = {"eval": {}, "rollout": {}, "env": {}}
    for key, value in entry.items():
        if key in EVAL_KEYS:
            parts["eval"][key] = value
        elif key in GENERATION_KEYS:
            parts["rollout"][key] = value
        elif key in allowed:
            parts["env"][key] = value
        elif key in env or key in ("name", "purpose"):
            raise ConfigError(
                f"`{where}.{key}`: a benchmark plays the trained team, so `env.{key}` must be the run's (roles, "
                f"turn order, tools, agent options, prompts, turns and rewards); {may_differ_text(env_name)}"
            )
        else:
            close = closest_name(str(key), [*EVAL_KEYS, *GENERATION_KEYS, *allowed])
            guess = f"did you mean `{where}.{close}`? " if close is not None else ""
            raise ConfigError(f"unknown key `{where}.{key}`; {guess}{may_differ_text(env_name)}")
    return parts


def benchmark_configs(config: Mapping[str, Any]) -> list[Benchmark]:
    """The benchmarks a run evaluates, each with the run config that plays it (see the module docstring).
    A bad entry is a ConfigError naming it."""
    section = config["eval"]
    entries = section.get("benchmarks") or {}
    if not isinstance(entries, Mapping):
        raise ConfigError(f"`eval.benchmarks` must map benchmark names to their settings, got {entries!r}")
    if not entries:
        return [Benchmark(None, config)]
    env = config["env"]
    env_name = env["name"]
    out = []
    for name, entry in entries.items():
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigError(f"`eval.benchmarks`: a benchmark name must be a non-empty word without '/', got {name!r}")
        parts = _entry(env_name, name, entry, env)
        derived = copy.deepcopy(dict(config))
        new_env = derived["env"]
        if "dataset" in parts["env"] and parts["env"]["dataset"] != env.get("dataset"):
            new_env.update(_dataset_defaults(env_name))  # the trained dataset's folder and filters do not apply
        new_env.update(parts["env"])
        derived["eval"] = {**section, **parts["eval"], "benchmarks": {}}
        derived["rollout"] = {**derived["rollout"], **parts["rollout"]}
        out.append(Benchmark(name, derived))
    return out


def team_differences(config: Mapping[str, Any], trained: Mapping[str, Any]) -> list[str]:
    """The ``env`` keys of ``config`` that differ from the ``trained`` run's and are the team's (not among
    the environment's ``eval_fields``), sorted: what an evaluation of the run's policies may not change."""
    allowed = set(env_eval_fields(trained["env"]["name"])) | {"purpose"}
    mine, theirs = config["env"], trained["env"]
    keys = (set(mine) | set(theirs)) - allowed
    return sorted(k for k in keys if mine.get(k) != theirs.get(k))
