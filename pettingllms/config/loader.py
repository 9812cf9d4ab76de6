"""Run configs: YAML files with ``base:`` inheritance, ``section.key=value`` overrides, strict keys.

A config is a plain nested dict with the sections of ``defaults.yaml`` (``run``, ``model``, ``env``,
``policy``, ``rollout``, ``pipeline`` and one section per stage). :func:`load_config` builds it in
this order:

0. the user's modules (``imports``, :mod:`pettingllms.config.imports`), so the names below may be theirs;
1. ``defaults.yaml`` (next to this file): the schema, i.e. every known key with its default;
2. the ``env`` section is completed with every field of the named environment's config class, at its
   default (so the resolved config written into a run folder holds every setting that was used);
3. the file's ``base:`` chain, most basic first (a ``base:`` path is relative to the file naming it);
4. the command-line overrides ``section.key=value``, in order.

Every step after the first checks keys and types against what is already there:

* a key that is not in the schema is an error naming its dotted path, the closest known key ("did you
  mean") and the known keys around it, except inside an *open mapping*: a mapping that is empty
  (``{}``) in ``defaults.yaml`` (``policy.agents``, ``env.agent_options``) takes any keys;
* a key of an earlier version (``sft.epochs``, ``madpo.agent_learning_rate``: the table of
  :mod:`pettingllms.config.key_names`) is an error naming the key now; a run folder's saved ``config.yaml``
  is read with such keys renamed instead, with one notice;
* a value must have the type of the value it replaces: ``int`` is accepted (and stored as float) where
  a float was, ``None`` accepts anything, mappings merge key by key, lists and open mappings are
  replaced whole (``policy.agents={single: single}`` leaves no other role behind).

Values are read as YAML (``true``, ``3``, ``0.5``, ``[a, b]``, ``null``); unlike PyYAML's YAML 1.1
default, ``1e-4`` is a float as in YAML 1.2. :func:`validate_config` then checks what spans keys (the
environment's own validation, agent roles against ``policy.agents``, stage names, seed ranges).

Shipped configs are named ``<env>/<name>`` (``plan_path/L1``, ``plan_path/quickstart``): every YAML file
under ``<env>/`` but ``base.yaml``, which only serves as ``base:``. :func:`shipped_configs` lists them and
:func:`config_descriptions` gives each one's description, its file's first comment line.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from comlrl.atomic_io import atomic_write_text
from comlrl.validation import MissingFieldsError, UnknownFieldsError, closest_name, strict_arguments
from pettingllms.config.env_section import ENV_KEYS, STAGE_SET_ENV_FIELDS, env_arguments
from pettingllms.config.errors import ConfigError
from pettingllms.config.imports import IMPORTS_KEY, check_module_names, import_modules, merged_imports
from pettingllms.config.key_names import earlier_key_message, is_saved_run_config, migrate_saved_config
from pettingllms.config.stage_sections import (
    CONFIG_STAGES,
    PIPELINE_OWNED_FIELDS,
    config_stage_defaults,
    secret_fields,
)

__all__ = [
    "CONFIG_DIR",
    "DEFAULTS_FILE",
    "ENV_KEYS",
    "STAGE_SET_ENV_FIELDS",
    "LEVELS",
    "STAGES",
    "ConfigError",
    "apply_override",
    "config_descriptions",
    "config_name",
    "env_arguments",
    "find_config",
    "load_config",
    "load_yaml_file",
    "parse_override",
    "parse_value",
    "save_resolved_config",
    "section_to_dataclass",
    "shipped_configs",
    "validate_config",
]

CONFIG_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = CONFIG_DIR / "defaults.yaml"
RESOLVED_CONFIG_FILE = "config.yaml"
LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3")
STAGES: tuple[str, ...] = ("sft", "at_grpo", "grpo", "madpo", "marlhf", "madpo_from_trees", "eval")
# Keys with a non-null default that may also be null (what null means is the key's own documentation).
NULLABLE_KEYS: frozenset[tuple[str, ...]] = frozenset({("eval", "num_instances")})
BASE_KEY = "base"
#: File name of an environment's shared settings: a ``base:`` of the shipped configs, not one itself.
BASE_FILE = "base.yaml"


# ---- YAML ------------------------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` / ``5E3`` (no dot) as floats, as YAML 1.2 does."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_value(text: str) -> Any:
    """One override value read as YAML (``"3"`` -> 3, ``"[a, b]"`` -> ['a', 'b'], ``""`` -> None)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass


def load_yaml_file(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping (an empty file is ``{}``); anything else is a ConfigError."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must hold a mapping of sections, got {type(data).__name__}")
    return data


# ---- keys and types --------------------------------------------------------------------------------

def _dotted(path: Sequence[str]) -> str:
    return ".".join(path) if path else "<top level>"


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "mapping"}.get(
        type(value), type(value).__name__
    )


def _nullable(path: tuple[str, ...]) -> bool:
    """Whether ``path`` may be null though its default is not: a key of :data:`NULLABLE_KEYS`, or an
    environment field typed ``X | None`` (the environment's config then checks the value)."""
    if path in NULLABLE_KEYS:
        return True
    return len(path) == 2 and path[0] == "env" and path[1] in _optional_env_fields()


def _optional_env_fields() -> frozenset[str]:
    from pettingllms.registry import list_envs

    return _optional_fields_of(tuple(list_envs()))  # keyed by the names: a user's import adds environments


@functools.lru_cache(maxsize=4)
def _optional_fields_of(env_names: tuple[str, ...]) -> frozenset[str]:
    from pettingllms.registry import get_env_class

    names = set()
    for env_name in env_names:
        config_class = getattr(get_env_class(env_name), "config_class", None)
        if dataclasses.is_dataclass(config_class):
            names.update(f.name for f in dataclasses.fields(config_class) if "None" in str(f.type))
    return frozenset(names)


def check_type(path: Sequence[str], value: Any, existing: Any, where: str = "") -> Any:
    """``value`` if it may replace ``existing`` (an int where a float was comes back as a float).

    Raises a ConfigError naming the full dotted key and the expected type.
    """
    if existing is None or (value is None and _nullable(tuple(path))):
        return value
    ok = False
    if isinstance(existing, bool):
        ok = isinstance(value, bool)
    elif isinstance(existing, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(existing, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
    else:  # str, list, mapping (or another type a caller put there): the same type only
        ok = isinstance(value, type(existing))
    if not ok:
        expected = "float (or int)" if isinstance(existing, float) else _type_name(existing)
        source = f" ({where})" if where else ""
        raise ConfigError(
            f"`{_dotted(path)}` must be {expected} like its default {existing!r}, got "
            f"{_type_name(value)} {value!r}{source}"
        )
    return value


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """``"did you mean `<prefix><closest>`? "`` for a misspelled ``name``, or ``""`` when nothing is close."""
    close = closest_name(name, known)
    return f"did you mean `{prefix}{close}`? " if close is not None else ""


def _unknown_key(path: Sequence[str], key: str, known: Iterable[str], where: str = "") -> ConfigError:
    source = f" ({where})" if where else ""
    if len(path) == 1 and path[0] in CONFIG_STAGES and key in PIPELINE_OWNED_FIELDS:
        return ConfigError(
            f"`{path[0]}.{key}` is the pipeline's: it is set from `{PIPELINE_OWNED_FIELDS[key]}`{source}; "
            "set that key instead"
        )
    if len(path) == 1 and path[0] in CONFIG_STAGES and key in secret_fields(path[0]):
        return ConfigError(
            f"`{path[0]}.{key}` would be written into the run's config.yaml{source}; name the environment "
            f"variable that holds it with `{path[0]}.{key}_env` instead"
        )
    earlier = earlier_key_message(path[0], key) if len(path) == 1 else None
    if earlier is not None:  # a key of an earlier version: name the one that replaced it
        return ConfigError(f"{earlier}{source}")
    section = f"`{_dotted(path)}`" if path else "the top level"
    known = sorted(known)
    guess = did_you_mean(key, known, prefix=f"{_dotted(path)}." if path else "")
    return ConfigError(f"unknown key `{_dotted([*path, key])}`{source}; {guess}known keys of {section}: {known}")


def _is_open(path: Sequence[str], open_paths: set[tuple[str, ...]]) -> bool:
    """Whether the mapping at ``path`` is (inside) an open mapping; the top level never is."""
    return any(tuple(path[: len(p)]) == p for p in open_paths)


def open_paths_of(schema: Mapping[str, Any], path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Dotted paths (as tuples) of the empty mappings of ``schema``: the open mappings."""
    found: set[tuple[str, ...]] = set()
    for key, value in schema.items():
        if isinstance(value, dict):
            if not value:
                found.add((*path, key))
            else:
                found |= open_paths_of(value, (*path, key))
    return found


def merge_checked(
    base: dict[str, Any],
    child: Mapping[str, Any],
    open_paths: set[tuple[str, ...]],
    where: str = "",
    path: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A deep copy of ``base`` with ``child`` merged in; every key and type of ``child`` is checked."""
    merged = copy.deepcopy(base)
    for key, value in child.items():
        if not isinstance(key, str):
            raise ConfigError(f"keys must be strings, got {key!r} under `{_dotted(path)}`" + (f" ({where})" if where else ""))
        here = (*path, key)
        if key not in merged:
            if not _is_open(path, open_paths):
                raise _unknown_key(path, key, merged, where)
            merged[key] = copy.deepcopy(value)
            continue
        existing = merged[key]
        if here in open_paths:  # an open mapping is replaced whole, like a list
            merged[key] = copy.deepcopy(check_type(here, value, existing, where))
        elif isinstance(existing, dict) and isinstance(value, dict):
            merged[key] = merge_checked(existing, value, open_paths, where, here)
        elif _is_open(path, open_paths):
            merged[key] = copy.deepcopy(value)  # inside an open mapping: whatever the consumer accepts
        else:
            merged[key] = copy.deepcopy(check_type(here, value, existing, where))
    return merged


# ---- overrides -------------------------------------------------------------------------------------

def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """``"section.key=value"`` -> (("section", "key"), parsed value)."""
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"an override must look like `section.key=value`, got {text!r}")
    dotted, raw = text.split("=", 1)
    dotted = dotted.strip()
    parts = tuple(dotted.split("."))
    if not dotted or any(not p for p in parts):
        raise ConfigError(f"an override must name a dotted key like `section.key`, got {dotted!r} in {text!r}")
    try:
        value = parse_value(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override `{dotted}`: value {raw!r} is not valid YAML ({exc})") from exc
    return parts, value


def apply_override(
    config: dict[str, Any], path: Sequence[str], value: Any, open_paths: set[tuple[str, ...]]
) -> None:
    """Set ``config[path]`` to ``value`` in place, after the key and type checks."""
    where = f"override {_dotted(path)}=..."
    node = config
    for depth, key in enumerate(path[:-1]):
        here = tuple(path[: depth + 1])
        if key not in node:
            if not _is_open(here[:-1], open_paths):
                raise _unknown_key(here[:-1], key, node, where)
            node[key] = {}
        if not isinstance(node[key], dict):
            raise ConfigError(
                f"`{_dotted(here)}` is not a section (its value is {node[key]!r}): cannot set "
                f"`{_dotted(path)}` ({where})"
            )
        node = node[key]
    parent, key = tuple(path[:-1]), path[-1]
    if key not in node:
        if not _is_open(parent, open_paths):
            raise _unknown_key(parent, key, node, where)
        node[key] = value
        return
    if tuple(path) in open_paths:  # an open mapping is replaced whole, like a list
        node[key] = check_type(path, value, node[key], where)
    elif isinstance(node[key], dict) and isinstance(value, dict):
        node[key] = merge_checked(node[key], value, open_paths, where, tuple(path))
    elif _is_open(parent, open_paths):
        node[key] = value
    else:
        node[key] = check_type(path, value, node[key], where)


# ---- files -----------------------------------------------------------------------------------------

def find_config(name: str | Path) -> Path:
    """An existing YAML path, or a shipped config named ``"<env>/<name>"`` (e.g. ``"plan_path/L1"``)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = {config_name(p): p for p in shipped_configs()}
    wanted = str(name).removesuffix(".yaml")
    if wanted in shipped:
        return shipped[wanted]
    raise ConfigError(
        f"config {str(name)!r} is neither a file nor a shipped config; {did_you_mean(wanted, shipped)}"
        f"shipped: {sorted(shipped)} (`pettingllms configs` describes them)"
    )


def shipped_configs() -> list[Path]:
    """Every shipped config file, ``<env>/<name>.yaml`` (the ``base.yaml`` files aside), sorted."""
    return sorted(p for p in CONFIG_DIR.glob("*/*.yaml") if p.name != BASE_FILE)


def config_name(path: str | Path) -> str:
    """The ``<env>/<name>`` of a shipped config file."""
    return str(Path(path).resolve().relative_to(CONFIG_DIR).with_suffix(""))


def config_descriptions() -> dict[str, str]:
    """``{"<env>/<name>": one-line description}`` of every shipped config: its file's first comment line."""
    out = {}
    for path in shipped_configs():
        first = next((line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")), "#")
        out[config_name(path)] = first.lstrip("#").strip()
    return out


def read_chain(path: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """``[(file, its mapping without base:)]`` along the ``base:`` chain, most basic first."""
    chain: list[tuple[Path, dict[str, Any]]] = []
    seen: list[Path] = []
    current: Path | None = Path(path).resolve()
    while current is not None:
        if current in seen:
            cycle = " -> ".join(str(p) for p in [*seen, current])
            raise ConfigError(f"`base:` inheritance loops: {cycle}")
        if not current.is_file():
            named_by = f" (named as base by {seen[-1]})" if seen else ""
            raise ConfigError(f"config file {current} does not exist{named_by}")
        seen.append(current)
        data = load_yaml_file(current)
        if is_saved_run_config(current):  # a run folder's config, maybe saved by an earlier version
            data = migrate_saved_config(data, current)
        base = data.pop(BASE_KEY, None)
        chain.append((current, data))
        if base is None:
            current = None
        elif isinstance(base, str) and base:
            current = (current.parent / base).resolve()
        else:
            raise ConfigError(f"{current}: `base` must be a file name, got {base!r}")
    chain.reverse()
    return chain


def _yaml_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_yaml_value(v) for v in value]
    return value


def env_field_defaults(env_name: str) -> dict[str, Any]:
    """Every field of environment ``env_name``'s config class at its default (tuples as lists), except
    the fields the stages set (:data:`STAGE_SET_ENV_FIELDS`), which are no config keys."""
    from pettingllms.registry import RegistryError, get_env_class

    try:
        config_class = get_env_class(env_name).config_class
    except RegistryError as exc:
        raise ConfigError(f"`env.name`: {exc}") from exc
    out: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):
        if field.name in STAGE_SET_ENV_FIELDS:
            continue
        if field.default is not dataclasses.MISSING:
            out[field.name] = _yaml_value(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            out[field.name] = _yaml_value(field.default_factory())
        else:
            out[field.name] = None
    return out


GRPO_OMITS = ("sampling_mode",)  # grpo is at_grpo without its sampling mode (independent): declared once


def schema_defaults() -> dict[str, Any]:
    """``defaults.yaml`` with ``grpo`` filled in from ``at_grpo`` but :data:`GRPO_OMITS` (``grpo``'s own keys win)."""
    defaults = load_yaml_file(DEFAULTS_FILE)
    own = defaults.get("grpo") or {}
    defaults["grpo"] = {**{k: copy.deepcopy(v) for k, v in defaults["at_grpo"].items() if k not in GRPO_OMITS}, **own}
    return defaults


def load_config(path: str | Path, overrides: Sequence[str] = (), imports: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved config of ``path`` (file or ``"<env>/<level>"``) with ``overrides`` applied.

    The user's modules (``imports`` of every file of the chain, of an ``imports=[...]`` override, and
    ``imports``: the command line's ``--import``) are imported first, so ``env.name`` may name what they
    register (:mod:`pettingllms.config.imports`); the resolved ``imports`` lists them all. Keys and types are
    checked at every step (see the module docstring); cross-key checks are :func:`validate_config`'s.
    """
    path = find_config(path)
    defaults = schema_defaults()
    open_paths = open_paths_of(defaults)
    chain = read_chain(path)
    parsed = [parse_override(o) for o in overrides]
    modules = merged_imports(
        *(check_module_names(data.pop(IMPORTS_KEY, None), f"`{IMPORTS_KEY}` ({file})") for file, data in chain),
        *(check_module_names(value, f"`{IMPORTS_KEY}` (override)") for keys, value in parsed if keys == (IMPORTS_KEY,)),
        check_module_names(list(imports), "`--import`"),
    )
    import_modules(modules)
    parsed = [(keys, value) for keys, value in parsed if keys != (IMPORTS_KEY,)]

    env_name = defaults.get("env", {}).get("name")
    for _, data in chain:
        env_section = data.get("env")
        if isinstance(env_section, dict) and "name" in env_section:
            env_name = env_section["name"]
    for keys, value in parsed:
        if keys == ("env", "name"):
            env_name = value
    if not isinstance(env_name, str) or not env_name:
        raise ConfigError(f"`env.name` must be a registered environment name, got {env_name!r}")

    config = copy.deepcopy(defaults)
    extra = {k: v for k, v in env_field_defaults(env_name).items() if k not in config["env"]}
    clash = sorted(set(env_field_defaults(env_name)) & set(ENV_KEYS))
    if clash:
        raise ConfigError(f"env {env_name!r} config fields {clash} clash with the env section's own keys {ENV_KEYS}")
    config["env"].update(extra)
    for stage in CONFIG_STAGES:  # the section's own defaults (defaults.yaml) over the class's
        config[stage] = {**copy.deepcopy(config_stage_defaults(stage)), **config[stage]}
    for file, data in chain:
        config = merge_checked(config, data, open_paths, where=str(file))
    for keys, value in parsed:
        apply_override(config, keys, value, open_paths)
    config[IMPORTS_KEY] = modules
    return config


def save_resolved_config(config: Mapping[str, Any], run_dir: str | Path, filename: str = RESOLVED_CONFIG_FILE) -> Path:
    """Write ``config`` as YAML into ``run_dir/filename`` atomically; returns the path."""
    text = yaml.safe_dump(_plain(config), sort_keys=False, default_flow_style=False, allow_unicode=True)
    return atomic_write_text(Path(run_dir) / filename, text)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ---- sections -> objects ---------------------------------------------------------------------------

def section_to_dataclass(cls: type, mapping: Mapping[str, Any] | None, section_name: str) -> Any:
    """``cls(**mapping)`` for a config dataclass, read by comlrl's one strict reader
    (:func:`comlrl.validation.strict_arguments`); unknown or missing fields name ``section.field``.

    Lists become tuples where the field's default is a tuple. A ValueError raised by the class's own
    validation comes back as a ConfigError prefixed with the section.
    """
    mapping = {} if mapping is None else mapping
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"section `{section_name}` must be a mapping, got {_type_name(mapping)} {mapping!r}")
    try:
        kwargs = strict_arguments(cls, mapping, required=True, tuples=True)
    except UnknownFieldsError as error:  # the section's wording: its dotted key, the first unknown one
        first = error.unknown[0]
        close = error.guesses.get(first)
        guess = f"did you mean `{section_name}.{close}`? " if close is not None else ""
        raise ConfigError(
            f"unknown key `{section_name}.{first}` for {cls.__name__}; {guess}known keys of "
            f"`{section_name}`: {sorted(error.known)}"
        ) from None
    except MissingFieldsError as error:
        raise ConfigError(f"missing key `{section_name}.{error.missing[0]}` (required by {cls.__name__})") from None
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"section `{section_name}`: {exc}") from exc


# ---- cross-key checks ------------------------------------------------------------------------------

def validate_config(config: Mapping[str, Any]) -> None:
    """Checks that span keys: the environment and its agents build and provide what the pipeline's stages
    need from them (:mod:`pettingllms.config.contract`), ``policy.agents`` matches the
    turn order and the level, ``run.backend`` / ``placement`` fit the run's policies, stages are known, every stage's seeds fit the split it plays, and no
    training stage plays a held-out eval instance
    (:func:`~pettingllms.config.instances.check_held_out_instances`)."""
    from pettingllms.registry import make_agents, make_env

    run = config["run"]
    if isinstance(run["seed"], bool) or not isinstance(run["seed"], int) or run["seed"] < 0:
        raise ConfigError(f"`run.seed` must be an integer >= 0, got {run['seed']!r}")
    if not isinstance(run["output_dir"], str) or not run["output_dir"]:
        raise ConfigError(f"`run.output_dir` must be a non-empty path, got {run['output_dir']!r}")
    from comlrl.reporting import normalize_report_to

    try:
        normalize_report_to(run["report_to"])
    except ValueError as exc:
        raise ConfigError(f"`run.report_to`: {exc}") from exc
    from pettingllms.config.extras import check_optional_packages

    check_optional_packages(config)  # tensorboard, wandb, ray, vllm, textworld, alfworld where selected
    if not isinstance(config["model"]["name"], str) or not config["model"]["name"]:
        raise ConfigError(f"`model.name` must be a preset, a local path or a hub id, got {config['model']['name']!r}")

    from pettingllms.config.contract import check_classes, check_contract

    name, fields, options = env_arguments(config)
    check_classes(name)  # the protocol's methods, named, before building
    try:
        env = make_env(name, fields)
    except (ValueError, TypeError, OSError) as exc:  # OSError: a data file it reads (a Sudoku bank) is missing
        raise ConfigError(f"section `env`: {exc}") from exc
    roles = list(env.config.turn_order)
    check_classes(name, roles)
    try:
        agents = make_agents(name, roles, options)
    except (ValueError, TypeError, LookupError) as exc:
        raise ConfigError(f"`env.tools` / `env.agent_options` / `env.turn_order`: {exc}") from exc
    check_contract(config, env, agents, config["pipeline"])  # what each stage needs (pettingllms.config.contract)

    policy = config["policy"]
    level, agents = policy["level"], policy["agents"]
    if level not in LEVELS:
        raise ConfigError(f"`policy.level` must be one of {list(LEVELS)}, got {level!r}")
    if not isinstance(agents, dict) or sorted(agents) != sorted(roles):
        got = sorted(agents) if isinstance(agents, dict) else agents
        raise ConfigError(f"`policy.agents` must map each role of `env.turn_order` {roles} to a policy, got {got}")
    policies = list(agents.values())
    if not all(isinstance(p, str) and p for p in policies):
        raise ConfigError(f"`policy.agents` values must be policy names, got {policies}")
    if level == "L0" and len(roles) != 1:
        raise ConfigError(f"`policy.level` L0 is one agent, but `env.turn_order` has {roles}")
    if level == "L1" and len(set(policies)) != 1:
        raise ConfigError(f"`policy.level` L1 shares one policy among all agents, got `policy.agents` {agents}")
    if level in ("L2", "L3") and len(set(policies)) != len(policies):
        raise ConfigError(f"`policy.level` {level} gives each agent its own policy, got `policy.agents` {agents}")
    from pettingllms.config.placement_section import check_backend_config

    # run.backend and its keys, and `placement` against the run's policy names (in turn order).
    check_backend_config(config, list(dict.fromkeys(agents[role] for role in roles)))
    from pettingllms.config.rollout_section import check_generation_config

    check_generation_config(config)  # rollout.backend (hf | vllm | api) and its keys
    from pettingllms.config.rollout_section import check_state_max_chars

    try:
        check_state_max_chars(config["rollout"].get("transcript_state_max_chars"), "rollout.transcript_state_max_chars")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

    pipeline = config["pipeline"]
    if not isinstance(pipeline, list) or not pipeline:
        raise ConfigError(f"`pipeline` must be a non-empty list of stages from {list(STAGES)}, got {pipeline!r}")
    for stage in pipeline:
        if stage not in STAGES:
            raise ConfigError(f"`pipeline` names unknown stage {stage!r}; known stages: {list(STAGES)}")
    for stage in STAGES:
        if not isinstance(config.get(stage), dict):
            raise ConfigError(f"section `{stage}` is missing or not a mapping")

    from pettingllms.config.instances import check_held_out_instances

    # Every stage's seeds fit its split, and no training stage plays an instance eval plays.
    check_held_out_instances(config)
