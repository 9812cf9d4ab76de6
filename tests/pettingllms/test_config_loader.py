"""Run configs: overrides, strict keys, base inheritance, the shipped YAMLs, dataclass building."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.config import (
    LEVELS,
    STAGES,
    ConfigError,
    env_arguments,
    find_config,
    load_config,
    save_resolved_config,
    section_to_dataclass,
    shipped_configs,
    validate_config,
)
from pettingllms.config.key_names import section_key
from pettingllms.config.loader import DEFAULTS_FILE, load_yaml_file, parse_override, parse_value

ENVS = ("plan_path", "sokoban", "sudoku", "code", "math", "search", "household", "webshop", "eight_queens", "blocksworld")


# ---- overrides -------------------------------------------------------------------------------------

def test_overrides_set_nested_keys_with_yaml_types():
    config = load_config(
        "plan_path/L1",
        [
            "env.rows=6",
            "sft.learning_rate=1e-4",
            "at_grpo.beta=0",
            "rollout.greedy_branch=false",
            "policy.lora.target_modules=[q_proj, v_proj]",
            "at_grpo.epsilon_high=0.28",
            "policy.lora.r=4",
            "run.output_dir=runs/x:y",
        ],
    )
    assert config["env"]["rows"] == 6 and type(config["env"]["rows"]) is int
    assert config["sft"]["learning_rate"] == 1e-4 and type(config["sft"]["learning_rate"]) is float
    assert config["at_grpo"]["beta"] == 0.0 and type(config["at_grpo"]["beta"]) is float  # int accepted for float
    assert config["rollout"]["greedy_branch"] is False
    assert config["policy"]["lora"]["target_modules"] == ["q_proj", "v_proj"]
    assert config["at_grpo"]["epsilon_high"] == 0.28  # a None default accepts any type
    assert config["policy"]["lora"]["r"] == 4 and config["policy"]["lora"]["alpha"] == 16  # siblings kept
    assert config["run"]["output_dir"] == "runs/x:y"


def test_later_override_wins_and_mapping_override_merges():
    config = load_config("sokoban/L2", ["policy.lora={r: 2, dropout: 0.1}", "policy.lora.r=3"])
    assert config["policy"]["lora"] == {"r": 3, "alpha": 16, "dropout": 0.1,
                                        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@pytest.mark.parametrize(
    ("override", "key", "expected"),
    [
        ("env.rows=abc", "`env.rows`", "int"),
        ("env.rows=4.5", "`env.rows`", "int"),
        ("rollout.greedy_branch=1", "`rollout.greedy_branch`", "bool"),
        ("sft.num_train_epochs=true", "`sft.num_train_epochs`", "int"),
        ("sft.learning_rate=fast", "`sft.learning_rate`", "float (or int)"),
        ("policy.lora=3", "`policy.lora`", "mapping"),
        ("pipeline=sft", "`pipeline`", "list"),
        ("policy.lora.target_modules=q_proj", "`policy.lora.target_modules`", "list"),
        ("run.report_to=3", "`run.report_to`", "str"),
        ("policy.lora={r: x}", "`policy.lora.r`", "int"),
        ("sft.late_turn_fraction=half", "`sft.late_turn_fraction`", "float (or int)"),
        ("sft.workflows=single", "`sft.workflows`", "list"),
        ("at_grpo.max_completions=1.5", "`at_grpo.max_completions`", "int"),
        ("grpo.eval_every_completions=x", "`grpo.eval_every_completions`", "int"),
        ("at_grpo.max_minutes=soon", "`at_grpo.max_minutes`", "float (or int)"),
        ("eval.greedy=1", "`eval.greedy`", "bool"),
    ],
)
def test_override_type_errors_name_the_full_key_and_type(override, key, expected):
    with pytest.raises(ConfigError) as info:
        load_config("plan_path/L1", [override])
    message = str(info.value)
    assert key in message and f"must be {expected} " in message


@pytest.mark.parametrize(
    ("override", "key", "known"),
    [
        ("sft.lr=1", "`sft.lr`", "learning_rate"),
        ("nosuch.key=1", "`nosuch`", "rollout"),
        ("env.rowz=5", "`env.rowz`", "wall_density"),
        ("policy.lora.rank=4", "`policy.lora.rank`", "target_modules"),
        ("trainer=1", "`trainer`", "pipeline"),
        ("at_grpo.max_completion=1", "`at_grpo.max_completion`", "max_completions"),
        ("eval.greedy_samples=2", "`eval.greedy_samples`", "greedy"),
        ("sft.late_turns=0.5", "`sft.late_turns`", "late_turn_fraction"),
    ],
)
def test_unknown_override_keys_are_errors_listing_known_keys(override, key, known):
    with pytest.raises(ConfigError) as info:
        load_config("plan_path/L1", [override])
    message = str(info.value)
    assert f"unknown key {key}" in message and known in message


def test_override_through_a_value_that_is_not_a_section():
    with pytest.raises(ConfigError, match=r"`sft.num_train_epochs` is not a section \(its value is 3\): cannot set `sft.num_train_epochs.x`"):
        load_config("plan_path/L1", ["sft.num_train_epochs.x=1"])


@pytest.mark.parametrize("text", ["sft.num_train_epochs", "=3", "sft..num_train_epochs=1", ".x=1", "sft.num_train_epochs=[1,"])
def test_malformed_overrides(text):
    with pytest.raises(ConfigError):
        parse_override(text)


def test_placement_is_an_open_mapping_replaced_whole_by_a_mapping_override():
    config = load_config("plan_path/L3", ["placement.tool.update_devices=2", "placement.plan={colocate: true}"])
    assert config["placement"] == {"tool": {"update_devices": 2}, "plan": {"colocate": True}}
    config = load_config("plan_path/L3", ["placement.tool.update_devices=2", "placement={plan: {colocate: true}}"])
    assert config["placement"] == {"plan": {"colocate": True}}


def test_open_mappings_take_any_keys_and_reach_the_agents():
    config = load_config("plan_path/L1", ["env.agent_options.tool.max_tool_calls=2"])
    name, fields, options = env_arguments(config)
    assert name == "plan_path" and fields["rows"] == 4
    assert options == {"tool": {"max_tool_calls": 2, "tools": ["simulate"]}}
    validate_config(config)
    # an open mapping given whole replaces the old one (no stale role is left behind)
    assert load_config("plan_path/L1", ["policy.agents={solo: s}"])["policy"]["agents"] == {"solo": "s"}
    # ... but what the consumer rejects is still an error at validation, naming the section
    bad = load_config("plan_path/L1", ["env.agent_options.tool.max_tool_calls=0"])
    with pytest.raises(ConfigError, match="max_tool_calls"):
        validate_config(bad)


def test_parse_value_reads_yaml_1_2_floats():
    assert parse_value("1e-4") == 1e-4 and isinstance(parse_value("1e-4"), float)
    assert parse_value("5E3") == 5000.0 and isinstance(parse_value("5E3"), float)
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("true") is True and parse_value("") is None and parse_value("null") is None
    assert parse_value("[a, 2]") == ["a", 2] and parse_value("U R") == "U R"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_parse_value_round_trips_python_floats(x):
    value = parse_value(repr(x))
    assert isinstance(value, float) and value == x


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_parse_value_round_trips_ints(n):
    assert parse_value(str(n)) == n and type(parse_value(str(n))) is int


# ---- base inheritance ------------------------------------------------------------------------------

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_base_inheritance_deep_merges_along_the_chain(tmp_path):
    _write(tmp_path / "a.yaml", "env:\n  name: plan_path\n  rows: 6\n  cols: 6\nsft:\n  num_train_epochs: 7\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\nenv:\n  rows: 4\nrun:\n  seed: 3\n")
    _write(tmp_path / "sub" / "c.yaml", "base: ../b.yaml\nenv:\n  cols: 3\nsft:\n  per_device_train_batch_size: 2\n")
    config = load_config(tmp_path / "sub" / "c.yaml")
    assert (config["env"]["rows"], config["env"]["cols"]) == (4, 3)  # b over a, c over b
    assert config["sft"]["num_train_epochs"] == 7 and config["sft"]["per_device_train_batch_size"] == 2
    assert config["run"]["seed"] == 3
    defaults = load_yaml_file(DEFAULTS_FILE)
    assert config["sft"]["learning_rate"] == defaults["sft"]["learning_rate"]  # untouched keys: defaults
    assert config["env"]["wall_density"] == 0.22  # env fields not set anywhere: the env class's default
    assert "base" not in config


def test_open_mapping_in_a_child_file_replaces_the_base_one(tmp_path):
    _write(tmp_path / "two.yaml", "policy:\n  agents: {tool: shared, plan: shared}\n")
    _write(tmp_path / "one.yaml", "base: two.yaml\nenv:\n  turn_order: [single]\npolicy:\n  level: L0\n"
           "  agents: {single: single}\n")
    config = load_config(tmp_path / "one.yaml")
    assert config["policy"]["agents"] == {"single": "single"}
    validate_config(config)


def test_base_inheritance_errors(tmp_path):
    _write(tmp_path / "loop1.yaml", "base: loop2.yaml\n")
    _write(tmp_path / "loop2.yaml", "base: loop1.yaml\n")
    with pytest.raises(ConfigError, match="loops"):
        load_config(tmp_path / "loop1.yaml")
    _write(tmp_path / "orphan.yaml", "base: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"missing\.yaml does not exist \(named as base by .*orphan\.yaml\)"):
        load_config(tmp_path / "orphan.yaml")
    _write(tmp_path / "badbase.yaml", "base: [a]\n")
    with pytest.raises(ConfigError, match="`base` must be a file name"):
        load_config(tmp_path / "badbase.yaml")
    _write(tmp_path / "list.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(tmp_path / "list.yaml")


def test_file_errors_name_the_key_and_the_file(tmp_path):
    bad_key = _write(tmp_path / "k.yaml", "base: ok.yaml\nsft:\n  lr: 0.1\n")
    _write(tmp_path / "ok.yaml", "env:\n  name: plan_path\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad_key)
    assert "unknown key `sft.lr`" in str(info.value) and "k.yaml" in str(info.value)
    bad_type = _write(tmp_path / "t.yaml", "rollout:\n  num_generations: many\n")
    with pytest.raises(ConfigError) as info:
        load_config(bad_type)
    assert "`rollout.num_generations` must be int" in str(info.value) and "t.yaml" in str(info.value)


def test_switching_env_checks_keys_against_the_new_env():
    with pytest.raises(ConfigError, match=r"unknown key `env.rows`.*plan_path.base\.yaml.*size"):
        load_config("plan_path/L1", ["env.name=sudoku"])
    with pytest.raises(ConfigError, match=r"`env.name`: unknown env 'chess'"):
        load_config("plan_path/L1", ["env.name=chess"])


# ---- shipped configs -------------------------------------------------------------------------------

# Shipped configs that are not named after their level, with the level they run at.
NAMED_CONFIGS = {"plan_path/quickstart": "L1", "plan_path/L1_hybrid": "L1",
                 **{f"code/{d}": "L1" for d in ("apps", "codecontests", "humaneval", "livecodebench", "mbpp")},
                 **{f"math/{d}": "L1" for d in ("arith", "gsm8k", "math500", "aime24", "aime25", "olympiadbench",
                                                "arith_hybrid")},
                 **{f"search/{d}": "L1" for d in ("synthetic", "nq", "hotpotqa", "2wiki", "musique", "bamboogle")},
                 # the seed's protocols: train on one dataset, evaluate on several (eval.benchmarks)
                 **{name: "L1" for name in ("code/train_apps", "code/train_codecontests", "math/train_dapo",
                                            "math/train_polaris", "search/train_hotpotqa")}}
# The roles of each environment's multi-agent workflow (L0 is always the `single` role alone).
TEAM_ROLES = {"code": ["code_generator", "test_generator"], "math": ["tool_generator", "reasoning_generator"],
              "search": ["web_search_agent", "search_reasoning_agent"], "household": ["planner", "actor"],
              "webshop": ["searcher", "buyer"]}


def test_shipped_configs_are_the_levels_and_the_named_ones():
    names = sorted(str(p.relative_to(p.parents[1]).with_suffix("")) for p in shipped_configs())
    assert names == sorted([*(f"{env}/{level}" for env in ENVS for level in LEVELS), *NAMED_CONFIGS])


@pytest.mark.parametrize("path", shipped_configs(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shipped_config_loads_and_resolves(path, tmp_path, code_data_root, search_data_root, monkeypatch):
    from comlrl.trainers.preference.config import MADPOIterConfig, MARLHFIterConfig
    from pettingllms.config.contract import check_command
    from pettingllms.registry import get_env_class
    from pettingllms.trainer.sft import SFTWarmStartConfig

    # The code, math and search configs play dataset splits: the fixtures' stand in for the real ones (all the
    # fixtures live under one root, the search index too).
    assert search_data_root == code_data_root
    monkeypatch.setenv("PETTINGLLMS_DATA", code_data_root)
    # (the APPS fixture's seventh problem has no reference solution for the sft oracle to play)
    config = load_config(path, ["sft.num_problems=6"] if path.parent.name == "code" else [])
    validate_config(config)  # the contract of the pipeline's stages too (pettingllms.config.contract)
    check_command(config, "eval", "oracle")  # every environment ships an oracle that can play its workflow
    check_command(config, "plan")
    env_name = path.parent.name
    level = NAMED_CONFIGS.get(f"{env_name}/{path.stem}", path.stem)
    assert config["env"]["name"] == env_name and config["policy"]["level"] == level
    assert set(config) == set(load_yaml_file(DEFAULTS_FILE))
    assert all(stage in config for stage in STAGES)
    roles = config["env"]["turn_order"]
    assert roles == (["single"] if level == "L0" else TEAM_ROLES.get(env_name, ["tool", "plan"]))
    assert sorted(config["policy"]["agents"]) == sorted(roles)
    # every env key but the section's own is a field of the env's config class, and builds it
    name, fields, _ = env_arguments(config)
    env_config = get_env_class(name).config_class.from_dict(fields)
    assert env_config.turn_order == tuple(roles)
    # the stage sections this repo's trainers define take their sections as written
    sft = section_to_dataclass(SFTWarmStartConfig, config["sft"], "sft")
    assert sft.num_problems == config["sft"]["num_problems"]
    stage_only = {"num_problems", "seed_start"}
    for stage, cls in (("madpo", MADPOIterConfig), ("marlhf", MARLHFIterConfig)):
        known = {section_key(stage, f.name) for f in dataclasses.fields(cls)} | stage_only  # TRL's names
        assert set(config[stage]) <= known, sorted(set(config[stage]) - known)
    # the saved resolved config is complete: loading it again gives the same config
    saved = save_resolved_config(config, tmp_path / "run")
    assert saved == tmp_path / "run" / "config.yaml"
    assert [p.name for p in saved.parent.iterdir()] == ["config.yaml"]  # no temporary file left behind
    assert yaml.safe_load(saved.read_text()) == config
    assert load_config(saved) == config


def test_find_config():
    assert find_config("plan_path/L1").name == "L1.yaml"
    assert find_config("sudoku/L3.yaml").parent.name == "sudoku"
    with pytest.raises(ConfigError, match=r"'chess/L1'.*plan_path/L0"):
        find_config("chess/L1")


# ---- cross-key validation --------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("path", "overrides", "pattern"),
    [
        ("plan_path/L1", ["pipeline=[sft, ppo]"], r"`pipeline` names unknown stage 'ppo'"),
        ("plan_path/L1", ["pipeline=[]"], r"`pipeline` must be a non-empty list"),
        ("plan_path/L1", ["eval.seed_start=10"], r"`sft.seed_start` / `eval.seed_start`.*\[10, 11, 12, 13, 14\]"),
        ("plan_path/L1", ["at_grpo.train_seed_range=[999990, 1000010]"], r"`at_grpo.train_seed_range` / `eval.seed_start`"),
        ("plan_path/L0", ["grpo.train_seed_range=[999990, 1000010]", "pipeline=[grpo]"], None),  # no eval: no check
        ("plan_path/L1", ["env.wall_density=1.5"], r"section `env`: `wall_density` must be in \[0, 1\)"),
        ("plan_path/L1", ["env.tools=[shell]"], r"`env.tools`.*'shell' is not a plan_path tool"),
        ("plan_path/L1", ["policy.level=L4"], r"`policy.level` must be one of"),
        ("plan_path/L1", ["policy.agents.tool=other"], r"L1 shares one policy"),
        ("plan_path/L3", ["policy.agents.tool=plan"], r"L3 gives each agent its own policy"),
        ("plan_path/L0", ["env.turn_order=[tool, plan]", "policy.agents={tool: a, plan: a}"], r"L0 is one agent"),
        ("plan_path/L0", ["policy.agents={plan: p}"], r"`policy.agents` must map each role"),
        ("plan_path/L1", ["run.seed=-1"], r"`run.seed` must be an integer >= 0"),
        ("plan_path/L1", ["run.report_to=mlflow"], r"`run.report_to`"),
        ("sudoku/L1", ["env.size=7"], r"section `env`"),
        ("plan_path/L1", ["run.backend=kubernetes"], r"`run.backend` must be one of \['local', 'ray'\], got 'kubernetes'"),
        ("plan_path/L3", ["placement.shared.colocate=true"],
         r"`placement.shared`: unknown policy 'shared'; the run's policies are \['tool', 'plan'\]"),
        ("plan_path/L3", ["placement.tool.gpus=2"], r"unknown key `placement.tool.gpus`; known keys: \['colocate', "),
        ("plan_path/L3", ["run.backend=ray", "placement={tool: {rollout_devices: 2}, plan: {colocate: true}}"], None),
    ],
)
def test_validate_config_errors_name_the_keys(path, overrides, pattern):
    config = load_config(path, overrides)
    if pattern is None:
        validate_config(config)
        return
    with pytest.raises(ConfigError, match=pattern):
        validate_config(config)


# ---- sections -> dataclasses -----------------------------------------------------------------------

@dataclasses.dataclass
class _Stage:
    steps: int
    rate: float = 0.1
    names: tuple[str, ...] = ("a",)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"`steps` must be >= 1, got {self.steps}")


def test_section_to_dataclass_builds_and_converts_lists():
    stage = section_to_dataclass(_Stage, {"steps": 2, "names": ["x", "y"]}, "train")
    assert stage == _Stage(steps=2, rate=0.1, names=("x", "y"))


@pytest.mark.parametrize(
    ("mapping", "pattern"),
    [
        ({"steps": 1, "lr": 0.1}, r"unknown key `train.lr` for _Stage; known keys of `train`: \['names', 'rate', 'steps'\]"),
        ({"rate": 0.5}, r"missing key `train.steps`"),
        ({"steps": 0}, r"section `train`: `steps` must be >= 1, got 0"),
        ([1, 2], r"section `train` must be a mapping"),
    ],
)
def test_section_to_dataclass_errors(mapping, pattern):
    with pytest.raises(ConfigError, match=pattern):
        section_to_dataclass(_Stage, mapping, "train")


def test_section_to_dataclass_rejects_non_dataclasses():
    with pytest.raises(TypeError, match="must be a dataclass"):
        section_to_dataclass(dict, {}, "x")


def test_defaults_hold_no_string_that_should_be_a_number():
    # PyYAML 1.1 would read 1e-4 as a string; the loader reads YAML 1.2 floats, so none may slip through.
    def walk(node, path=()):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, (*path, key))
        elif isinstance(node, str):
            try:
                float(node)
            except ValueError:
                return
            yield ".".join(path)

    assert list(walk(load_yaml_file(DEFAULTS_FILE))) == []
    assert math.isclose(load_yaml_file(DEFAULTS_FILE)["sft"]["learning_rate"], 2e-3)
