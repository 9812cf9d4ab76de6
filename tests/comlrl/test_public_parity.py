"""Parity with the public CoMLRL 1.4.3 library where users notice it first: its import paths and their names
(docs/compatibility.md §8), and its rejections (§9). Where the public library rejects a keyword or config
value, ours rejects it before any model is loaded (the loaders are patched to fail the test), and the
message holds the public sentence (users match on it) and names our field.

None of these tests needs the public library: its names and sentences are checked in here. Where its sources
are at hand (the environment ``benchmarks/.venvs/comlrl-1.4.3``, or the sdist that
``scripts/comlrl_public_suite.sh`` extracts into ``.comlrl-public/``), two more tests derive its public names
from them and run its configs in a subprocess, so the checked-in copies cannot drift from it."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.core.team import resolve_formatters
from comlrl.trainers.online_rl.critics import check_critic_sources
from comlrl.trainers.preference import (
    MADPOConfig,
    MADPOIterConfig,
    MADPOTrainer,
    MARLHFConfig,
    MARLHFIterConfig,
)
from comlrl.trainers.reinforce import (
    CentralizedMAGRPOConfig,
    CentralizedMAGRPOTrainer,
    MAGRPOConfig,
    MAGRPOTrainer,
)
from tests.helpers.trainer_helpers import plan_items, varied_reward

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
PUBLIC_ENV = ROOT / "benchmarks" / ".venvs" / "comlrl-1.4.3"
PUBLIC_SDIST = ROOT / ".comlrl-public" / "src" / "comlrl-1.4.3"  # scripts/comlrl_public_suite.sh extracts it
SUITE_PYTHON = ROOT / ".comlrl-public" / "venv" / "bin" / "python"
PUBLIC_SOURCES = sorted(PUBLIC_ENV.glob("lib/python3*/site-packages/comlrl")) + sorted(PUBLIC_SDIST.glob("comlrl"))
needs_public = pytest.mark.skipif(
    not PUBLIC_SOURCES, reason="neither the public CoMLRL 1.4.3 environment nor its sdist is here"
)

# ------------------------------------------------------------------------------------ §8 import paths

# The public names, by the rule of docs/compatibility.md §8: every name in the `__all__` of a public package
# (and a name the public README, docs or examples import), at the package and at the submodule that defines
# it. CoMLRL 1.4.3's, checked in; test_checked_in_names_match_the_public_sources keeps this copy honest.
PUBLIC_NAMES = {
    "comlrl": ["__version__"],
    "comlrl.schedulers": ["DeviceScheduler"],
    "comlrl.schedulers.device_scheduler": ["DeviceScheduler"],
    "comlrl.trainers": [
        "ActorCriticTrainerBase", "IACConfig", "IACTrainer", "MAACConfig", "MAACTrainer", "MAGRPOConfig",
        "MAGRPOTrainer", "MADPOConfig", "MADPOTrainer", "MARLHFConfig", "MARLHFTrainer", "JointRewardModel",
        "MAREINFORCEConfig", "MAREINFORCETrainer", "MAReMaxConfig", "MAReMaxTrainer", "MARLOOConfig",
        "MARLOOTrainer",
    ],
    "comlrl.trainers.actor_critic": [
        "ActorCriticTrainerBase", "IACConfig", "IACTrainer", "RolloutSample", "MAACConfig", "MAACTrainer",
    ],
    "comlrl.trainers.actor_critic.ac_base": ["ActorCriticTrainerBase"],
    "comlrl.trainers.actor_critic.iac": ["IACConfig", "IACTrainer", "RolloutSample"],
    "comlrl.trainers.actor_critic.maac": ["MAACConfig", "MAACTrainer"],
    "comlrl.trainers.preference": [
        "MADPOConfig", "MADPOTrainer", "CentralizedComparatorAdapter", "CentralizedComparatorParseError",
        "TaggedCentralizedComparatorAdapter", "MADPOIterConfig", "MADPOIterTrainer", "MARLHFConfig",
        "MARLHFTrainer", "MARLHFIterConfig", "MARLHFIterTrainer", "JointRewardModel",
    ],
    "comlrl.trainers.preference.centralized": [
        "CentralizedComparatorAdapter", "CentralizedComparatorParseError", "TaggedCentralizedComparatorAdapter",
    ],
    "comlrl.trainers.preference.iterative": [
        "MADPOIterConfig", "MADPOIterTrainer", "MARLHFIterConfig", "MARLHFIterTrainer",
    ],
    "comlrl.trainers.preference.madpo": ["MADPOConfig", "MADPOTrainer"],
    "comlrl.trainers.preference.marlhf": ["MARLHFConfig", "MARLHFTrainer", "JointRewardModel"],
    "comlrl.trainers.reinforce": [
        "MAGRPOConfig", "MAGRPOTrainer", "CentralizedMAGRPOConfig", "CentralizedMAGRPOTrainer",
        "MAREINFORCEConfig", "MAREINFORCETrainer", "MAReMaxConfig", "MAReMaxTrainer", "MARLOOConfig",
        "MARLOOTrainer",
    ],
    "comlrl.trainers.reinforce.centralized_magrpo": ["CentralizedMAGRPOConfig", "CentralizedMAGRPOTrainer"],
    "comlrl.trainers.reinforce.magrpo": ["MAGRPOConfig", "MAGRPOTrainer"],
    "comlrl.trainers.reinforce.mareinforce": ["MAREINFORCEConfig", "MAREINFORCETrainer"],
    "comlrl.trainers.reinforce.maremax": ["MAReMaxConfig", "MAReMaxTrainer"],
    "comlrl.trainers.reinforce.marloo": ["MARLOOConfig", "MARLOOTrainer"],
    "comlrl.utils": [
        "read_checkpoint_metadata", "build_formatters", "ensure_pad_token", "ensure_tokenizer",
        "apply_tokenizer_specials", "resolve_tokenizers", "infer_model_name", "resolve_model_sources",
        "clone_reference_models", "load_reference_models_from_sources", "reference_kl_coef",
        "reference_kl_enabled", "reference_kl_for_sequence", "resolve_reference_devices",
        "validate_reference_kl_config", "RewardProcessors", "call_reward_function", "normalize_reward_lengths",
        "resolve_reward_range", "set_reward_range", "DistributedContext", "local_context", "unwrap_model",
    ],
    "comlrl.utils.checkpoint": ["read_checkpoint_metadata"],
    "comlrl.utils.distributed": ["DistributedContext", "local_context", "unwrap_model"],
    "comlrl.utils.formatters": ["build_formatters"],
    "comlrl.utils.model_loading": ["infer_model_name", "resolve_model_sources"],
    "comlrl.utils.reference_kl": [
        "clone_reference_models", "load_reference_models_from_sources", "reference_kl_coef",
        "reference_kl_enabled", "reference_kl_for_sequence", "resolve_reference_devices",
        "validate_reference_kl_config",
    ],
    "comlrl.utils.reward_processor": ["RewardProcessors"],
    "comlrl.utils.reward_utils": [
        "call_reward_function", "normalize_reward_lengths", "resolve_reward_range", "set_reward_range",
    ],
    "comlrl.utils.tokenizer_utils": [
        "ensure_pad_token", "ensure_tokenizer", "apply_tokenizer_specials", "resolve_tokenizers",
    ],
}  # fmt: skip

# Not public by the rule (in no `__all__`), listed in §8 all the same: its public constructor is kept.
LISTED_BEYOND_THE_RULE = {"comlrl.trainers.preference.collaboration": ["CentralizedCollaboration"]}


def _module_file(package_root: Path, module: str) -> Path:
    base = package_root.joinpath(*module.split(".")[1:])
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _relative_imports(module: str, path: Path) -> dict[str, tuple[str, str]]:
    """``name -> (module, original name)`` of the top-level ``from ... import`` statements of a module."""
    out = {}
    anchor = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            out.update({alias.asname or alias.name: (base, alias.name) for alias in node.names})
    return out


def _exported(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


def derive_public_names(package_root: Path, doc_files: list[Path]) -> dict[str, list[str]]:
    """The §8 rule applied to the public sources: each package's ``__all__``, each name again at the module
    that defines it (following the packages' relative imports), and the names ``doc_files`` import."""

    def home(module: str, name: str) -> str:
        imported = _relative_imports(module, _module_file(package_root, module)).get(name)
        return home(*imported) if imported and imported[0].split(".")[0] == "comlrl" else module

    names: dict[str, list[str]] = {}
    for init in sorted(package_root.rglob("__init__.py")):
        module = ".".join(init.relative_to(package_root.parent).parent.parts)
        for name in _exported(init) or []:
            for where in (module, home(module, name)):
                if name not in names.setdefault(where, []):
                    names[where].append(name)
    for doc in doc_files:
        text = doc.read_text(encoding="utf-8", errors="ignore")
        for module, listed in re.findall(r"^from (comlrl[\w.]*) import \(?([\w, ]+)\)?\s*$", text, re.M):
            for name in re.findall(r"\w+", listed):
                if name not in names.setdefault(module, []):
                    names[module].append(name)
    return names


def public_names(module: str) -> list[str]:
    return PUBLIC_NAMES[module]


def listed_names(module: str) -> list[str]:
    return PUBLIC_NAMES.get(module, []) + LISTED_BEYOND_THE_RULE.get(module, [])


def import_rows() -> dict[tuple[str, str], tuple[str, str]]:
    """``(module, name) -> (status, notes)`` from the table of docs/compatibility.md §8."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## 8. ", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`comlrl"):
            continue
        module = cells[0].strip("`")
        for name in re.findall(r"`([A-Za-z_]\w*)`", cells[1]):
            assert (module, name) not in rows, f"{module}.{name} is listed twice"
            rows[(module, name)] = (cells[2], cells[3])
    return rows


def resolve(dotted: str):
    """A module, or an attribute of the longest importable module prefix of ``dotted``."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


@needs_public
def test_checked_in_names_match_the_public_sources():
    docs = []
    if PUBLIC_SDIST.is_dir():  # the environment has no docs: they ship in the sdist only
        docs = [PUBLIC_SDIST / "README.md", *sorted((PUBLIC_SDIST / "docs").rglob("*.md"))]
        docs += sorted((PUBLIC_SDIST / "examples").rglob("*.py"))
    derived = derive_public_names(PUBLIC_SOURCES[0], docs)
    assert {m: sorted(n) for m, n in derived.items()} == {m: sorted(n) for m, n in PUBLIC_NAMES.items()}


def test_derive_public_names_follows_reexports_and_documented_imports(tmp_path):
    root = tmp_path / "comlrl"
    (root / "pkg").mkdir(parents=True)
    (root / "__init__.py").write_text("from .pkg import Thing\n__all__ = ['Thing']\n")
    (root / "pkg" / "__init__.py").write_text("from .impl import Thing, helper\n__all__ = ['Thing']\n")
    (root / "pkg" / "impl.py").write_text("class Thing: ...\ndef helper(): ...\ndef private(): ...\n")
    (root / "pkg" / "other.py").write_text("def documented(): ...\n")
    readme = tmp_path / "README.md"
    readme.write_text("```python\nfrom comlrl.pkg.other import documented\n```\n")
    assert derive_public_names(root, [readme]) == {
        "comlrl": ["Thing"],
        "comlrl.pkg.impl": ["Thing"],  # where it is defined, found through two packages
        "comlrl.pkg": ["Thing"],
        "comlrl.pkg.other": ["documented"],
    }


def test_every_public_name_imports_or_is_listed_out_of_scope():
    rows = import_rows()
    for module in [*PUBLIC_NAMES, *LISTED_BEYOND_THE_RULE]:
        try:
            ours = importlib.import_module(module)
        except ModuleNotFoundError:
            ours = None  # allowed only when every name of the module is out of scope
        for name in listed_names(module):
            assert (module, name) in rows, f"{module}.{name} is not in docs/compatibility.md §8"
            status, notes = rows[(module, name)]
            if status.startswith("out of scope"):
                # A name left out is absent: a public name exists wherever its meaning can be reproduced.
                assert ours is None or not hasattr(ours, name), f"{module}.{name} is listed out of scope but imports"
                continue
            assert status.startswith(("works", "partial")), (module, name, status)
            assert ours is not None, f"{module} does not import, but §8 says {name} works"
            obj = getattr(ours, name)
            named = re.match(r"ours: (?:the same names? in )?`(comlrl[\w.]*)`", notes)
            if named:
                target = resolve(named.group(1))
                expected = getattr(target, name) if re.match(r"ours: the same names? in", notes) else target
                assert obj is expected, f"{module}.{name} is not {named.group(1)}"
            if hasattr(ours, "__path__"):  # a package lists its public names, as the public packages do
                assert name in ours.__all__, f"{module}.__all__ lacks {name}"
    stale = sorted(f"{m}.{n}" for m, n in rows if n not in listed_names(m))
    assert not stale, f"docs/compatibility.md §8 lists names the public library lacks: {stale}"


# ------------------------------------------------------------------------------------ the model loaders


class ModelLoaded(AssertionError):
    """A check that must run before any model is loaded let a loader run."""


@pytest.fixture
def no_model_loading(monkeypatch):
    """Every way a trainer loads a model or a tokenizer fails the test."""
    import transformers

    import comlrl.models
    import comlrl.models.loading

    def loaded(*args, **kwargs):
        raise ModelLoaded(f"a model or tokenizer was loaded: {args!r:.80}")

    for owner in (comlrl.models, comlrl.models.loading):
        for name in ("resolve_model_path", "load_model", "load_tokenizer"):
            if hasattr(owner, name):
                monkeypatch.setattr(owner, name, loaded)
    for cls in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer, transformers.AutoModel):
        monkeypatch.setattr(cls, "from_pretrained", loaded)


def rejects(error: type, public: str, field: str, build) -> None:
    """``build()`` raises ``error`` whose message holds the public sentence and names ``field``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(error, match=re.escape(public)) as caught:
            build()
    assert f"`{field}`" in str(caught.value), str(caught.value)


# ------------------------------------------------------------------------------------ §9 config checks

# (config, keyword values, the public sentence, our field, *notes); every value the public library rejects
# too. Notes: "trainer", a check the public library runs in its trainer rather than its config (so the
# drift check does not run it).
CONFIG_REJECTIONS = [
    (MADPOConfig, {"collaboration_mode": "hybrid"}, "collaboration_mode must be decentralized or centralized.", "collaboration_mode"),
    (MADPOConfig, {"preference_num_candidates": 1}, "preference_num_candidates must be >= 2.", "preference_num_candidates"),
    (MADPOConfig, {"dpo_beta": 0}, "dpo_beta must be > 0.", "dpo_beta"),
    (MADPOConfig, {"num_turns": 2}, "MADPO currently supports num_turns=1 only.", "num_turns"),
    (MARLHFConfig, {"num_turns": 0}, "num_turns must be >= 1.", "num_turns"),
    (MADPOConfig, {"environment_steps_per_pair": 0}, "environment_steps_per_pair must be >= 1.", "environment_steps_per_pair"),
    (MADPOConfig, {"reference_kl_enabled": True, "reference_devices": ["cpu"] * 3}, "reference_devices length (3) must be 1 or 2.", "reference_devices"),
    (MADPOConfig, {"reference_kl_enabled": True, "reference_devices": []}, "reference_devices must be a non-empty list or 'auto'.", "reference_devices"),
    (MADPOConfig, {"collaboration_mode": "centralized", "reference_kl_enabled": True, "reference_devices": ["cpu", "cpu"]}, "reference_devices length (2) must be 1 or 1.", "reference_devices"),
    (MARLHFConfig, {"rl_algorithm": "ppo"}, "rl_algorithm must be one of: magrpo, mareinforce, maremax, marloo, maac, iac.", "rl_algorithm"),
    (MARLHFConfig, {"num_generations": 1}, "num_generations must be >= 2 for MAGRPO-family MARLHF backends.", "num_generations"),
    (MARLHFConfig, {"rl_algorithm": "iac", "num_generations": 0}, "num_generations must be >= 1.", "num_generations"),
    (MARLHFConfig, {"reward_learning_rate": 0}, "reward_learning_rate must be > 0.", "reward_learning_rate"),
    (MARLHFConfig, {"reward_num_train_epochs": 0}, "reward_num_train_epochs must be >= 1.", "reward_num_train_epochs"),
    (MARLHFConfig, {"reward_train_batch_size": 0}, "reward_train_batch_size must be >= 1.", "reward_train_batch_size"),
    (MARLHFConfig, {"reward_max_length": 0}, "reward_max_length must be >= 1 or null.", "reward_max_length"),
    (MARLHFConfig, {"critic_type": "a"}, "critic_type must be one of: v, q.", "critic_type"),
    (MADPOIterConfig, {"num_iterations": 0}, "num_iterations must be >= 1.", "num_iterations"),
    (MADPOIterConfig, {"comparator_policy": "peer"}, "comparator_policy must be one of: current, current_copy, model, history, api.", "comparator_policy"),
    (MADPOIterConfig, {"comparator_generation_mode": "joint"}, "comparator_generation_mode must be one of: decentralized, centralized.", "comparator_generation_mode"),
    (MADPOIterConfig, {"collaboration_mode": "centralized", "comparator_centralized_agent_index": 1}, "Centralized collaboration has only actor index 0.", "comparator_centralized_agent_index"),
    (MADPOIterConfig, {"comparator_generation_mode": "centralized", "comparator_centralized_agent_index": -1}, "comparator_centralized_agent_index must be >= 0.", "comparator_centralized_agent_index"),
    (MADPOIterConfig, {"comparator_generation_mode": "centralized", "comparator_centralized_agent_index": 2}, "comparator_centralized_agent_index must be smaller than num_agents.", "comparator_centralized_agent_index"),
    (MADPOIterConfig, {"comparator_policy": "model"}, "comparator_model_name or comparator_agents is required when comparator_policy='model'.", "comparator_model_name"),
    (MADPOIterConfig, {"comparator_model_name": "m"}, "comparator_model_name and comparator_agents are only valid when comparator_policy='model'.", "comparator_model_name"),
    (MADPOIterConfig, {"comparator_policy": "history", "comparator_agents": ["a", "b"]}, "comparator_model_name and comparator_agents are only valid when comparator_policy='model'.", "comparator_agents"),
    (MADPOIterConfig, {"comparator_history_k": 2}, "comparator_history_k is only valid when comparator_policy='history'.", "comparator_history_k"),
    (MADPOIterConfig, {"comparator_policy": "history", "comparator_history_k": 0}, "comparator_history_k must be >= 1.", "comparator_history_k"),
    (MADPOIterConfig, {"comparator_num_candidates": 0}, "comparator_num_candidates must be >= 1 or null.", "comparator_num_candidates"),
    (MADPOIterConfig, {"comparator_policy": "api", "comparator_api_url": "http://127.0.0.1:9/v1", "comparator_api_max_n_per_request": 0}, "comparator_api_max_n_per_request must be >= 1 or null.", "comparator_api_max_n_per_request"),
    (MADPOIterConfig, {"comparator_policy": "api"}, "comparator_api_url is required when comparator_policy='api'.", "comparator_api_url"),
    (MARLHFIterConfig, {"preference_scoring_reward": "judge"}, "preference_scoring_reward must be one of: task, reward_model.", "preference_scoring_reward"),
    (IACConfig, {"critic_type": "a"}, "critic_type must be one of: 'v', 'q'.", "critic_type"),
    (MAACConfig, {"critic_type": "a"}, "critic_type must be one of: 'v', 'q'.", "critic_type"),
    (IACConfig, {"num_turns": 1, "num_generations": 0}, "num_generations must be >= 1.", "num_generations"),
    (IACConfig, {"parallel_training": "mp", "agent_devices": ["cpu", "cpu"]}, "parallel_training='mp' requires explicit critic_devices when use_separate_critic=True.", "critic_devices"),
    (MAACConfig, {"parallel_training": "mp", "agent_devices": ["cpu", "cpu"]}, "parallel_training='mp' requires explicit critic_devices.", "critic_devices"),
    (IACConfig, {"reference_kl_enabled": True, "reference_devices": ["cpu"] * 3}, "reference_devices length (3) must be 1 or 2.", "reference_devices"),
    (IACConfig, {"parallel_training": "mp", "agent_devices": ["cpu", "cpu"], "critic_devices": ["cpu"] * 3}, "critic_devices length (3) must be 1 or 2.", "critic_devices", "trainer"),
    (CentralizedMAGRPOConfig, {"collaboration_mode": "decentralized"}, "CentralizedMAGRPOConfig requires centralized collaboration.", "collaboration_mode"),
    (CentralizedMAGRPOConfig, {"num_turns": 2}, "Centralized MAGRPO currently supports num_turns=1 only.", "num_turns"),
    (CentralizedMAGRPOConfig, {"reference_kl_enabled": True, "reference_devices": ["cpu", "cpu"]}, "reference_devices length (2) must be 1 or 1.", "reference_devices"),
    # the shared fields
    (MAGRPOConfig, {"num_agents": 0}, "num_agents must be >= 1.", "num_agents"),
    (MAGRPOConfig, {"num_train_epochs": 0}, "num_train_epochs must be >= 1.", "num_train_epochs"),
    (MAGRPOConfig, {"rollout_buffer_size": 0}, "rollout_buffer_size must be >= 1.", "rollout_buffer_size"),
    (MAGRPOConfig, {"train_batch_size": 0}, "train_batch_size must be >= 1.", "train_batch_size"),
    (MAGRPOConfig, {"eval_batch_size": 0}, "eval_batch_size must be >= 1.", "eval_batch_size"),
    (MAGRPOConfig, {"eval_interval": -1}, "eval_interval must be >= 0.", "eval_interval"),
    (MAGRPOConfig, {"eval_num_samples": -1}, "eval_num_samples must be >= 0.", "eval_num_samples"),
    (MAGRPOConfig, {"logging_steps": 0}, "logging_steps must be >= 1.", "logging_steps"),
    (MAGRPOConfig, {"reference_kl_coef": -0.1}, "reference_kl_coef must be >= 0.", "reference_kl_coef"),
    (MAGRPOConfig, {"num_turns": 0}, "num_turns must be >= 1.", "num_turns"),
    (MAGRPOConfig, {"parallel_training": "ddp"}, "parallel_training only supports: none, mp.", "parallel_training"),
    (MADPOConfig, {"parallel_training": "mp"}, "parallel_training='mp' requires explicit agent_devices.", "agent_devices"),
    (MAGRPOConfig, {"num_generations": 1}, "num_generations must be >= 2 (group baseline requires multiple samples).", "num_generations"),
    (MAGRPOConfig, {"advantage_mode": "median"}, "advantage_mode must be one of: mean, raw, max, rloo.", "advantage_mode", "trainer"),
    (MARLHFConfig, {"critic_learning_rate": 0}, "critic_learning_rate must be > 0 or null.", "critic_learning_rate"),
    (MARLHFConfig, {"value_loss_coef": 0}, "value_loss_coef must be > 0.", "value_loss_coef"),
    (MARLHFConfig, {"value_clip_range": 0}, "value_clip_range must be > 0 or null.", "value_clip_range"),
]  # fmt: skip

@pytest.mark.parametrize(
    "case",
    CONFIG_REJECTIONS,
    ids=lambda c: f"{c[0].__name__}-{c[3]}-{list(c[1].values())[-1]!r}",
)
def test_config_rejections_hold_the_public_sentence(case, no_model_loading):
    cls, kwargs, public, field = case[:4]
    rejects(ValueError, public, field, lambda: cls(**kwargs))


def public_python() -> tuple[Path | None, dict[str, str]]:
    """An interpreter that imports the public library, and its environment: the 1.4.3 environment, else the
    public suite's venv with the extracted sdist first on the path (its own ``comlrl`` and egg-info)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the public comlrl, not ours
    if (PUBLIC_ENV / "bin" / "python").exists():
        return PUBLIC_ENV / "bin" / "python", env
    if SUITE_PYTHON.exists() and PUBLIC_SDIST.is_dir():
        return SUITE_PYTHON, {**env, "PYTHONPATH": str(PUBLIC_SDIST), "WANDB_MODE": "disabled"}
    return None, env


@pytest.mark.skipif(public_python()[0] is None, reason="no interpreter imports the public CoMLRL 1.4.3")
@pytest.mark.slow  # one subprocess importing the public library (transformers, wandb, datasets)
def test_the_public_configs_still_word_these_rejections_so(tmp_path):
    """Each config case, run by the public library (one subprocess), fails with exactly the sentence we
    check for."""
    cases = [(c[0].__name__, c[1], c[2]) for c in CONFIG_REJECTIONS if "trainer" not in c[4:]]
    script = tmp_path / "public_configs.py"
    script.write_text(
        "import json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from comlrl.trainers import actor_critic, preference, reinforce\n"
        "out = []\n"
        "for name, kwargs, _ in json.load(open(sys.argv[1])):\n"
        "    cls = next(getattr(m, name) for m in (actor_critic, preference, reinforce) if hasattr(m, name))\n"
        "    try:\n"
        "        cls(**kwargs)\n"
        "        out.append(None)\n"
        "    except ValueError as error:\n"
        "        out.append(str(error))\n"
        "print(json.dumps(out))\n"
    )
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    python, env = public_python()
    done = subprocess.run(
        [str(python), str(script), str(tmp_path / "cases.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    messages = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = [
        (name, kwargs, public, got) for (name, kwargs, public), got in zip(cases, messages) if got != public
    ]
    assert not wrong, wrong


# ------------------------------------------------------------------------------------ §9 constructor checks

ITEMS = plan_items(2)
TOKENIZER = object()  # never used: every case fails before a tokenizer is touched


class Adapter:
    def build_prompt(self, item, prompts):
        return " | ".join(prompts)

    def parse_completion(self, text, item, num_roles):
        return [text] * num_roles


def magrpo(**kwargs):
    kwargs.setdefault("reward_func", varied_reward)
    kwargs.setdefault("args", MAGRPOConfig(num_turns=1))
    return lambda: MAGRPOTrainer(**kwargs)


def madpo(**kwargs):
    kwargs.setdefault("reward_func", varied_reward)
    args = kwargs.pop("args", {})
    return lambda: MADPOTrainer(args=MADPOConfig(**args), **kwargs)


def iac(cls=IACTrainer, **kwargs):
    kwargs.setdefault("reward_func", varied_reward)
    config = IACConfig if cls is IACTrainer else MAACConfig
    args = {"num_turns": 1, "num_agents": 2, **kwargs.pop("args", {})}
    return lambda: cls(args=config(**args), **kwargs)


def centralized(**kwargs):
    kwargs.setdefault("centralized_adapter", Adapter())
    kwargs.setdefault("agent_model", "test-tiny")
    kwargs.setdefault("reward_func", varied_reward)
    kwargs.setdefault("args", CentralizedMAGRPOConfig())
    return lambda: CentralizedMAGRPOTrainer(**kwargs)


CONSTRUCTOR_REJECTIONS = [
    ("no model", ValueError, "Either agent_model or agents must be provided.", "agent_model", madpo()),
    ("no model, MAGRPO", ValueError, "Either agent_model or agents must be provided.", "agents", magrpo()),
    ("agents shorter than num_agents with agent_model", ValueError, "agents length (1) must match num_agents (2).", "agents", magrpo(agent_model="test-tiny", agents=["test-tiny"])),
    ("agent_model and agents differ", ValueError, "agent_model and agents conflict: a != ['b', 'b'].", "agent_model", madpo(agent_model="a", agents=["b", "b"])),
    ("agents not a list", ValueError, "agents must be a non-empty sequence.", "agents", magrpo(agents="test-tiny")),
    ("an agent is None", ValueError, "agents entries must be non-null.", "agents[1]", magrpo(agents=["test-tiny", None])),
    ("IAC agents count", ValueError, "agents length (3) must match num_agents (2).", "agents", iac(agents=["test-tiny"] * 3, tokenizer=TOKENIZER)),
    ("MAAC agents without a tokenizer", ValueError, "Tokenizer must be provided when using agents.", "tokenizer", iac(MAACTrainer, agents=["test-tiny"] * 2)),
    ("a one-item tokenizer list for two agents", ValueError, "tokenizers length must match agents.", "tokenizer", magrpo(agents=["test-tiny"] * 2, tokenizer=[TOKENIZER])),
    ("centralized: two agents", ValueError, "Centralized collaboration requires exactly one actor model.", "agents", madpo(agents=["test-tiny"] * 2, args={"collaboration_mode": "centralized"})),
    ("centralized: two tokenizers", ValueError, "Centralized collaboration requires one actor tokenizer.", "tokenizer", madpo(agent_model="test-tiny", tokenizer=[TOKENIZER] * 2, args={"collaboration_mode": "centralized"})),
    ("CentralizedMAGRPO: a decentralized config", ValueError, "CentralizedMAGRPOTrainer requires centralized configuration.", "args", centralized(args=MAGRPOConfig(num_turns=1))),
    ("CentralizedMAGRPO: role count", ValueError, "num_agents must match args.num_agents (the role count).", "num_agents", centralized(num_agents=3)),
    ("CentralizedMAGRPO: two agents", ValueError, "Centralized collaboration requires exactly one actor model.", "agents", centralized(agent_model=None, agents=["test-tiny"] * 2)),
    ("CentralizedMAGRPO: two tokenizers", ValueError, "Centralized collaboration requires one actor tokenizer.", "tokenizer", centralized(tokenizer=[TOKENIZER] * 2)),
    ("CentralizedMAGRPO: no reward", ValueError, "reward_func must be callable.", "reward_func", centralized(reward_func=None)),
    ("CentralizedMAGRPO: adapter", TypeError, "centralized_adapter.build_prompt must be callable.", "centralized_adapter", centralized(centralized_adapter=object())),
]  # fmt: skip


@pytest.mark.parametrize("case", CONSTRUCTOR_REJECTIONS, ids=lambda c: c[0])
def test_constructor_rejections_hold_the_public_sentence_before_any_model_loads(case, no_model_loading):
    _, error, public, field, build = case
    rejects(error, public, field, build)


def _default_config(cls):
    """A trainer built on its config's defaults: MAGRPO, IAC and MAAC default to num_turns=2, no transition."""
    config = {MAGRPOTrainer: MAGRPOConfig, IACTrainer: IACConfig, MAACTrainer: MAACConfig}[cls]
    return lambda **kwargs: (lambda: cls(args=config(), **kwargs))


# One mistake, on the configs' defaults: the public library reports that mistake, not the multi-turn rule
# (docs/compatibility.md §9, the order of the constructor checks).
PUBLIC_ORDER = [
    *[
        case
        for cls in (MAGRPOTrainer, IACTrainer, MAACTrainer)
        for case in (
            (f"{cls.__name__}: no reward", ValueError, "reward_func must be a callable.", "reward_func", _default_config(cls)(agent_model="test-tiny")),
            (f"{cls.__name__}: no model", ValueError, "Either agent_model or agents must be provided.", "agent_model", _default_config(cls)(reward_func=varied_reward)),
            (f"{cls.__name__}: no transition", ValueError, "requires an external_transition", "num_turns", _default_config(cls)(agent_model="test-tiny", reward_func=varied_reward)),
        )
    ],
    ("MADPO centralized: two agents, no reward", ValueError, "Centralized collaboration requires exactly one actor model.", "agents", lambda: MADPOTrainer(agents=["test-tiny"] * 2, args=MADPOConfig(collaboration_mode="centralized"))),
]  # fmt: skip


@pytest.mark.parametrize("case", PUBLIC_ORDER, ids=lambda c: c[0])
def test_constructor_checks_run_in_the_public_order(case, no_model_loading):
    _, error, public, field, build = case
    rejects(error, public, field, build)


MORE_CONSTRUCTOR_REJECTIONS = [
    ("no reward", ValueError, "reward_func must be a callable.", "reward_func", madpo(agent_model="test-tiny", reward_func=None)),
    ("centralized: role count", ValueError, "num_agents must match args.num_agents (the role count).", "num_agents", madpo(agents=["test-tiny"], num_agents=3, args={"collaboration_mode": "centralized"})),
]  # fmt: skip


@pytest.mark.parametrize("case", MORE_CONSTRUCTOR_REJECTIONS, ids=lambda c: c[0])
def test_trainer_base_rejections_hold_the_public_sentence(case, no_model_loading):
    _, error, public, field, build = case
    rejects(error, public, field, build)


def test_formatters_rule_holds_the_public_sentence():
    rejects(
        ValueError,
        "Number of formatters must match num_agents when providing a sequence.",
        "formatters",
        lambda: resolve_formatters([str, str, str], 2),
    )
    rejects(
        ValueError,
        "formatters must be None, a callable, or a sequence of callables.",
        "formatters",
        lambda: resolve_formatters("prompt", 2),
    )


def test_formatters_are_rejected_by_the_trainers_before_any_model_loads(no_model_loading):
    rejects(
        ValueError,
        "Number of formatters must match num_agents when providing a sequence.",
        "formatters",
        madpo(agent_model="test-tiny", formatters=[str, str, str]),
    )


CRITIC_REJECTIONS = [
    ("IAC: one critic for two agents", IACConfig(num_turns=1), None, ["test-tiny"], "critics length (1) must match num_agents (2).", "critics"),
    ("MAAC: two critics", MAACConfig(num_turns=1), None, ["test-tiny"] * 2, "critics length (2) must match 1 critic.", "critics"),
    ("critics not a list", IACConfig(num_turns=1), None, "test-tiny", "critics must be a non-empty sequence.", "critics"),
    ("a critic is None", IACConfig(num_turns=1), None, ["test-tiny", None], "critics entries must be non-null.", "critics[1]"),
    ("critic_model and critics differ", IACConfig(num_turns=1), "a", ["a", "b"], "critic_model and critics conflict: a != ['a', 'b'].", "critic_model"),
    ("value heads on the actors", IACConfig(num_turns=1, use_separate_critic=False), "test-tiny", None, "critics can only be provided when use_separate_critic=True.", "critics"),
]  # fmt: skip


@pytest.mark.parametrize("case", CRITIC_REJECTIONS, ids=lambda c: c[0])
def test_critic_keywords_are_checked_without_loading(case, no_model_loading):
    _, args, critic_model, critics, public, field = case
    rejects(ValueError, public, field, lambda: check_critic_sources(args, critic_model, critics, 2))


def test_critic_model_and_critics_naming_one_model_are_accepted(no_model_loading):
    check_critic_sources(IACConfig(num_turns=1), "m", ["m", "m"], 2)  # as in the public library
    check_critic_sources(MAGRPOConfig(num_turns=1), "m", None, 2)  # no critics: the trainer rejects it


@pytest.mark.parametrize("case", CRITIC_REJECTIONS[:2], ids=lambda c: c[0])
def test_critic_keywords_are_rejected_by_the_trainers_before_any_model_loads(case, no_model_loading):
    _, args, critic_model, critics, public, field = case
    cls = IACTrainer if isinstance(args, IACConfig) else MAACTrainer

    def build():
        return cls(
            agent_model="test-tiny",
            critic_model=critic_model,
            critics=critics,
            reward_func=varied_reward,
            args=args,
        )

    rejects(ValueError, public, field, build)


# ------------------------------------------------------------------------------------ critic_type="q"


@pytest.mark.parametrize("config", [IACConfig, MAACConfig])
def test_q_critics_take_the_public_default_of_one_generation(config):
    cfg = config(critic_type="q", num_turns=1)
    assert cfg.critic_type == "q" and cfg.num_generations == 1


def test_a_q_critic_with_one_generation_trains_on_r_minus_q(tiny_model_path, tmp_path):
    trainer = IACTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        args=IACConfig(
            output_dir=str(tmp_path / "out"), num_turns=1, num_agents=2, critic_type="q", max_new_tokens=4,
            num_train_epochs=1, rollout_buffer_size=2, advantage_normalization=False, eval_interval=0,
            disable_tqdm=True, agent_learning_rate=1e-2, critic_learning_rate=1e-2, seed=5,
        ),
    )  # fmt: skip
    returns, values = torch.tensor([1.0, 3.0]), torch.tensor([0.5, 1.0])
    advantages = trainer.rl.advantages(returns, torch.zeros(2), torch.tensor([0, 1]), values)
    assert advantages.tolist() == pytest.approx([0.5, 2.0])  # R - Q(h, a), as the public library
    trainer.train()
    assert trainer.updates_seen == 1
