"""Proof that training learns: success before and after RL, single agent vs multi-agent, one table per task.

``--config`` picks the task (:data:`TASKS`): ``plan_path`` (the default; :data:`SETTINGS`) or ``math/arith``
(:data:`MATH_ARITH_SETTINGS`: generated arithmetic word problems whose numbers carry letters, 2 turns, the
calculator as the tool of the team's tool agent and of the single agent; its rows add single-agent GRPO with the
calculator, the baseline of the +10-point target, next to GRPO without a tool). The description below is
Plan-Path's; ``math/arith`` runs the ``math/<level>`` configs the same way, with its own "before RL" rows
(:class:`StartRow`: the team, the single agent without a tool, the single agent with the calculator).

Every run is a pipeline run (:class:`pettingllms.pipeline.Pipeline`) of a shipped ``plan_path/<level>``
config with the benchmark's :data:`SETTINGS` (Plan-Path 4x4, 20 % walls, 3 turns, the built-in ``small``
model) and the command line's overrides; numbers are read back from the run folders under
``<results>/cache/``. Per seed:

1. **Warm start** (cached): ``plan_path/L1`` with ``pipeline=[sft, eval]``: the ``small`` preset
   (initialised with the seed) fine-tuned on oracle demonstrations of *every* role
   (``sft.workflows``: ``single`` from the L0 workflow, ``tool`` and ``plan`` from the multi-agent one),
   so that all methods start from the same weights: L0 and L1 use that model, L3 gives each role a copy,
   L2 puts one LoRA adapter per role on it. Its held-out success is the "start", measured for the
   multi-agent workflow by that run's ``eval`` and for the single agent by a ``plan_path/L0``
   ``pipeline=[eval]`` run on the same model.
2. **RL cells** (method x seed), each ``plan_path/<level>`` with ``pipeline=[<stage>, eval]`` from the warm
   start (``eval_before`` runs first), each with the same budget of sampled completions
   (``<stage>.max_completions``; every completion the RL rollouts draw is counted, the continuations of
   ``rollout.credit_depth`` too, evaluation is not):
   ``grpo_l0`` single-agent GRPO (L0, independent sampling), ``at_grpo_l1`` AT-GRPO with one shared
   model (tree sampling), ``at_grpo_l3`` AT-GRPO with one model per role, ``at_grpo_l2`` one LoRA
   adapter per role. A cell stops once its completion count reaches the budget, so the counts agree
   within one step's worth; ``<stage>.eval_every_completions`` adds points to its held-out curve.
   Two preference rows (multi-turn preference learning, issue #22; not in the default ``--methods``) run
   ``pipeline=[at_grpo, madpo_from_trees] x 6 + [eval]`` on L1, each ``at_grpo`` stage sampling a sixth of
   the budget (:attr:`Method.chunks`): ``madpo_trees_l1`` with ``at_grpo.update_policy=false`` (the trees
   only supply preference pairs; MADPO on them alone trains, on pairs of the policy it left one chunk
   before), ``hybrid_l1`` (AT-GRPO updates, then MADPO on the same trees' pairs) and ``hybrid_rl_last_l1``
   (the same ending on an AT-GRPO stage, as the shipped hybrid configs do). The preference stages sample
   nothing, so the RL completions are the ``at_grpo`` stages' and equal the other rows' budget.
3. **Evaluation** (the ``eval`` section): success over 50 held-out instances whose seeds
   ``[10**6, 10**6 + 50)`` are disjoint from every training seed (the pipeline checks it): the mean over
   4 trajectories per instance at temperature 1, with greedy success (``eval.greedy``) next to it. Each
   cell's final policy stays in ``<results>/cache/<cell>/policies`` for ``learning_failures.py``.

Every cell writes ``<results>/<cell>.json`` atomically when done; a rerun skips cells whose settings key
(a hash of the resolved config, stage sections the cell does not run left out, and the environment's
``PROMPT_VERSION``: prompt text is code, so a prompt change makes new cells) matches, so the table can be
completed across sessions; a record without a prompt version was made with version 1. A record made before keys were added to the configs still counts when its
recorded config, with the added keys at their current values (:func:`with_added_keys`), gives the current
key, and a cell only when its warm start's numbers equal the current warm start record's (a warm start
retrained since must have reproduced them exactly); the summary lists such records under ``rekeyed``. ``--smollm`` adds
one tiny run on the ``smollm2-135m-instruct`` preset (AT-GRPO L1, no warm start, 2 steps x 2 problems,
K = 2) showing the pipeline runs on a real pretrained model.

    .venv/bin/python -m benchmarks.learning                       # everything, 3 seeds
    .venv/bin/python -m benchmarks.learning --seeds 0 --methods at_grpo_l1 --budget-minutes 3
    .venv/bin/python -m benchmarks.learning --rl learning_rate=2e-4 --rl at_grpo_l1.rollout.num_generations=8
    .venv/bin/python -m benchmarks.learning --config math/arith --cells-parallel 2
    .venv/bin/python -m benchmarks.learning --seeds 0 --methods at_grpo_l1 madpo_trees_l1 hybrid_l1 hybrid_rl_last_l1 \
        --results benchmarks/results/learning-preference/plan_path --summary benchmarks/results/learning_preference.json

The summary file keeps one table per task (``{"benchmark": "learning", "tasks": {"plan_path": ...,
"math/arith": ...}}``, :func:`merged_summary`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pettingllms.trainer.demonstrations import DetourOracle as DetourOracle  # re-exported: it lived here
from pettingllms.trainer.demonstrations import detour_turns as detour_turns  # re-exported: it lived here

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "learning"
SUMMARY_PATH = ROOT / "benchmarks" / "results" / "learning.json"
TARGET_GAIN = 0.30  # AT-GRPO success minus the multi-agent start
TARGET_MARGIN = 0.10  # AT-GRPO success minus single-agent GRPO's, at equal samples
RL_STAGES = ("at_grpo", "grpo")
STAGE_SECTIONS = (*RL_STAGES, "madpo", "marlhf", "madpo_from_trees")  # left out of a key where the run has no such stage

# The benchmark's settings, applied to plan_path/<level> (base.yaml: 4x4, 20 % walls, 3 turns, simulate tool).
SETTINGS: tuple[str, ...] = (
    "model.name=small",
    "model.dtype=float32",
    "env.invalid_action_penalty=0.1",  # the environment's default: per blocked move of an action
    # The single agent has the team's tool (issue #36's fair baseline): its warm-start demonstrations simulate,
    # then play the proposal, as the team's tool and plan agents do; the no-tool rows override it.
    "env.agent_options.single.tools=[simulate]",
    "policy.lora.r=8",
    "policy.lora.alpha=16",
    "policy.lora.target_modules=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]",  # all linear
    "rollout.temperature=1.0",
    "rollout.num_generations=4",
    "rollout.greedy_branch=true",  # tree rollouts continue the best candidate
    "rollout.max_completion_length=48",
    "rollout.transcripts_rate=0.0",
    # Warm start (defaults.yaml's measured budget: ~25 % (L0) / ~27 % (L1) greedy start on 4x4), on every role.
    # 200 problems, as the table's warm starts were made (a change to 150 meant for math/arith's settings had
    # reached these too, so a retrained warm start no longer reproduced the table's).
    "sft.num_problems=200",
    "sft.seed_start=0",
    "sft.num_train_epochs=3",
    "sft.learning_rate=2e-3",
    "sft.per_device_train_batch_size=8",
    "sft.max_length=1024",
    "sft.workflows=[[single], [tool, plan]]",
    # Half the demonstration episodes start after 1..max_turns-1 random turns, so the warm start also sees
    # later-turn prompts (tool reports, failed moves).
    "sft.late_turn_fraction=0.5",
    # Tool-agent demonstrations hold 1-3 simulate calls (the oracle's path among random ones); plan-agent
    # demonstrations answer `#### proposal` when the proposal solves.
    "sft.tool_candidates=3",
    "sft.accept_proposals=true",
    # Held-out success: the mean over 4 trajectories per instance at temperature 1, greedy next to it.
    "eval.num_instances=50",
    "eval.seed_start=1000000",
    "eval.num_samples=4",
    "eval.temperature=1.0",
    "eval.greedy=true",
    *(
        f"{stage}.{key}"
        for stage in RL_STAGES
        for key in (
            "max_completions=4500",  # sampled completions during RL, equal for every method
            "eval_every_completions=1500",  # also evaluate after every this many completions
            "problems_per_step=4",
            "train_seed_range=[0, 100000]",
            "learning_rate=1e-4",
            "lr_scheduler_type=constant",
            "loss_type=dapo",
            # Dr. GRPO's unscaled advantages: in pilots, group-std scaling blew up the small reward differences
            # between failed candidates and drove the policy to one-move answers within ~300 completions.
            "scale_rewards=none",
            "epsilon=0.2",
            "beta=0.0",  # no KL to the warm start (no reference model)
            "num_iterations=1",
            "per_device_train_batch_size=16",
            "gradient_accumulation_steps=1",
            "max_grad_norm=1.0",
            "save_steps=0",
        )
    ),
)
# Keys that leave a run's numbers alone, so that changing them keeps finished runs.
KEY_IGNORED = ("run.output_dir", "run.resume", "run.overwrite", "run.progress", "at_grpo.max_minutes",
               "grpo.max_minutes")


@dataclass(frozen=True)
class Method:
    """One row of the table: the policy level (``<family>/<level>`` and its workflow), the RL stage, and
    config overrides of its own (e.g. the single agent's tool).

    ``chunks`` > 0 makes a preference row (multi-turn preference learning, issue #22): the pipeline alternates
    ``chunks`` ``at_grpo`` stages with ``madpo_from_trees`` (``[at_grpo, madpo_from_trees] * chunks + [eval]``),
    each ``at_grpo`` stage sampling ``ceil(budget / chunks)`` completions (the stage's repeat rule takes a
    repeat's overshoot off the next, so the row samples the budget within one step, as the others do); the
    preference stages sample nothing. With ``at_grpo.update_policy=false`` in ``overrides`` the trees only
    supply pairs and MADPO alone trains. ``rl_last`` ends on the RL stage instead, as the shipped hybrid configs
    do (``[at_grpo, madpo_from_trees] * (chunks - 1) + [at_grpo, eval]``: the last chunk's trees train nothing
    but its AT-GRPO update)."""

    name: str
    label: str
    policy_level: str
    stage: str
    overrides: tuple[str, ...] = ()
    chunks: int = 0
    rl_last: bool = False

    def pipeline(self) -> list[str]:
        if self.chunks and self.rl_last:
            return [*[self.stage, "madpo_from_trees"] * (self.chunks - 1), self.stage, "eval"]
        if self.chunks:
            return [*[self.stage, "madpo_from_trees"] * self.chunks, "eval"]
        return [self.stage, "eval"]


# The preference rows' MADPO stage (the defaults of the `madpo_from_trees` section, written out): per decision
# point the 2 pairs with the largest reward gaps, every step of the at_grpo stage before, one epoch, the RL
# learning rate, the public MADPO margin (no reference policy).
MADPO_FROM_TREES: tuple[str, ...] = (
    "madpo_from_trees.pair_selection=reward_gap",
    "madpo_from_trees.preference_pairs_per_sample=2",
    "madpo_from_trees.preference_replay_mode=all_history",
    "madpo_from_trees.num_train_epochs=1",
    "madpo_from_trees.per_device_train_batch_size=8",
    "madpo_from_trees.learning_rate=1e-4",
    "madpo_from_trees.beta=0.1",
)
PREFERENCE_CHUNKS = 6  # chunks of the preference rows: 4,500 completions -> 6 x 750 (Plan-Path), 2,400 -> 6 x 400 (math)


def preference_methods(level: str = "L1") -> tuple[Method, Method, Method]:
    """The preference rows at ``level``: MADPO from AT-GRPO's trees alone (the trees are sampled by an
    ``at_grpo`` stage with ``update_policy=false``), and the hybrid (both stages train) ending on MADPO or, as
    the shipped hybrid configs do, on AT-GRPO."""
    suffix, n = level.lower(), PREFERENCE_CHUNKS
    return (
        Method(f"madpo_trees_{suffix}", f"MADPO from AT-GRPO's trees, shared policy ({level})", level, "at_grpo",
               ("at_grpo.update_policy=false", *MADPO_FROM_TREES), n),
        Method(f"hybrid_{suffix}", f"hybrid ending on MADPO: [AT-GRPO, MADPO] x{n} ({level})", level,
               "at_grpo", MADPO_FROM_TREES, n),
        Method(f"hybrid_rl_last_{suffix}", f"hybrid ending on AT-GRPO: [AT-GRPO, MADPO] x{n - 1}, AT-GRPO ({level})",
               level, "at_grpo", MADPO_FROM_TREES, n, rl_last=True),
    )


# Plan-Path's single agent with the team's tool gets the team's model calls: the tool agent and the plan agent
# each answer once per turn, the single agent once per turn (a tool turn or an action turn), so twice the turns.
SINGLE_WITH_TOOL: tuple[str, ...] = ("env.max_turns=6",)
NO_SINGLE_TOOL: tuple[str, ...] = ("env.agent_options.single.tools=null",)
# AT-GRPO with credit across turns (issue #36): every tree candidate continued 2 agent steps by the current
# policies, its return the global reward its branch reaches (rollout.credit_depth, docs/pettingllms.md); the
# continuations count against the completion budget.
CREDIT: tuple[str, ...] = ("rollout.credit_depth=2", "rollout.credit_discount=1.0")

METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method("grpo_l0", "single-agent GRPO, no tool (L0)", "L0", "grpo", NO_SINGLE_TOOL),
        Method("grpo_l0_tool", "single-agent GRPO with simulate (L0)", "L0", "grpo", SINGLE_WITH_TOOL),
        Method("at_grpo_l1", "AT-GRPO, shared policy (L1)", "L1", "at_grpo"),
        Method("at_grpo_l3", "AT-GRPO, model per role (L3)", "L3", "at_grpo"),
        Method("at_grpo_l1_credit", "AT-GRPO L1, credit across turns (d = 2)", "L1", "at_grpo", CREDIT),
        Method("at_grpo_l3_credit", "AT-GRPO L3, credit across turns (d = 2)", "L3", "at_grpo", CREDIT),
        Method("at_grpo_l2", "AT-GRPO, LoRA per role (L2)", "L2", "at_grpo"),
        *preference_methods("L1"),
    )
}
DEFAULT_METHODS = ("grpo_l0", "grpo_l0_tool", "at_grpo_l1", "at_grpo_l3")


@dataclass(frozen=True)
class StartRow:
    """A "before RL" row: the warm start's held-out success for one workflow. The first row of a task is the
    warm-start run's own evaluation; each other one is a ``pipeline=[eval]`` run of ``<family>/<level>`` with
    ``overrides`` on the warm-start model, in ``warmstart-seed<N><folder_suffix>``."""

    key: str
    label: str
    level: str
    overrides: tuple[str, ...] = ()
    folder_suffix: str = ""


@dataclass(frozen=True)
class BenchTask:
    """One task of the benchmark (``--config``): its config family, settings, methods and "before" rows, the
    method the +10 margin is measured against, and where its cells and table go."""

    name: str
    family: str
    settings: tuple[str, ...]
    methods: Mapping[str, Method]
    default_methods: tuple[str, ...]
    starts: tuple[StartRow, ...]
    baseline: str
    results: Path
    description: str = ""
    # Other single-agent rows each AT-GRPO row is compared with, paired as with ``baseline``: reported next to
    # the target's margin, not a target (e.g. the single agent at fewer model calls than the team's).
    other_baselines: tuple[str, ...] = ()


PLAN_PATH = BenchTask(
    name="plan_path", family="plan_path", settings=SETTINGS, methods=METHODS, default_methods=DEFAULT_METHODS,
    starts=(StartRow("start_multi", "multi-agent workflow before RL (warm start)", "L1"),
            StartRow("start_single", "single agent, no tool, before RL (warm start)", "L0", NO_SINGLE_TOOL, "-single"),
            StartRow("start_single_tool", "single agent with simulate, before RL (warm start)", "L0", SINGLE_WITH_TOOL,
                     "-single-tool")),
    baseline="grpo_l0_tool", results=DEFAULT_RESULTS,
    description="Plan-Path 4x4, 20 % walls, 3 turns, simulate for the team's tool agent and the single agent "
                "(6 turns: the team's model calls)",
)

# math/arith: generated multi-step arithmetic word problems (level 2: three operations on 3-4 digit numbers),
# both the team's tool agent and the tool-using single agent compute with the calculator.
MATH_ARITH_SETTINGS: tuple[str, ...] = (
    "model.name=small",
    "model.dtype=float32",
    "env.dataset=arith",
    "env.arith_level=2",
    "env.arith_named=true",  # letters label the numbers: the small model cannot copy 4-digit numbers (measured)
    "env.accept_tool_answer=true",  # \\boxed{tool} takes the tool's result: nor can it copy the result (measured)
    "env.tool=calculator",
    "env.max_turns=2",  # the tool-using single agent needs two: compute, then answer
    "policy.lora.r=8",
    "policy.lora.alpha=16",
    "rollout.temperature=1.0",
    "rollout.num_generations=4",
    "rollout.greedy_branch=true",
    "rollout.max_completion_length=48",  # digits are one token each: a level-2 expression is up to ~35 tokens
    "rollout.transcripts_rate=0.0",
    "sft.num_problems=150",
    "sft.seed_start=0",
    "sft.num_train_epochs=3",
    "sft.learning_rate=2e-3",
    "sft.per_device_train_batch_size=8",
    "sft.max_length=1024",
    "sft.workflows=[[single], [tool_generator, reasoning_generator]]",
    "env.single_tool=calculator",  # the single agent's demonstrations compute with the calculator
    "eval.num_instances=50",
    "eval.seed_start=1000000",
    "eval.num_samples=4",
    "eval.temperature=1.0",
    "eval.greedy=true",
    *(item for item in SETTINGS if item.startswith(RL_STAGES)),
)
# math/arith's single agent with the calculator gets the team's model calls: the tool agent and the reasoner each
# answer once per turn, the single agent once per turn (a calculator call or its answer), so twice the turns.
MATH_SINGLE_WITH_TOOL: tuple[str, ...] = ("env.single_tool=calculator", "env.max_turns=4")
# ... and at the task's 2 turns (compute, answer), half the team's calls: the row measured before the change, kept
# since with 4 turns the single agent makes more malformed responses and learns less on some seeds.
MATH_SINGLE_TWO_TURNS: tuple[str, ...] = ("env.single_tool=calculator",)
MATH_ARITH = BenchTask(
    name="math/arith", family="math", settings=MATH_ARITH_SETTINGS,
    methods={m.name: m for m in (
        Method("grpo_l0", "single-agent GRPO, no tool (L0)", "L0", "grpo", ("env.single_tool=none",)),
        Method("grpo_l0_tool", "single-agent GRPO with the calculator (L0)", "L0", "grpo", MATH_SINGLE_WITH_TOOL),
        Method("grpo_l0_tool_two_turns", "single-agent GRPO with the calculator, 2 turns (L0)", "L0", "grpo",
               MATH_SINGLE_TWO_TURNS),
        Method("at_grpo_l1", "AT-GRPO, shared policy (L1)", "L1", "at_grpo"),
        Method("at_grpo_l3", "AT-GRPO, model per role (L3)", "L3", "at_grpo"),
        Method("at_grpo_l1_credit", "AT-GRPO L1, credit across turns (d = 2)", "L1", "at_grpo", CREDIT),
        Method("at_grpo_l3_credit", "AT-GRPO L3, credit across turns (d = 2)", "L3", "at_grpo", CREDIT),
        *preference_methods("L1"),
    )},
    default_methods=("grpo_l0", "grpo_l0_tool", "at_grpo_l1", "at_grpo_l3"),
    starts=(StartRow("start_multi", "team before RL (warm start)", "L1"),
            StartRow("start_single", "single agent, no tool, before RL (warm start)", "L0",
                     ("env.single_tool=none",), "-single"),
            StartRow("start_single_tool", "single agent with the calculator, before RL (warm start)", "L0",
                     MATH_SINGLE_WITH_TOOL, "-single-tool"),
            StartRow("start_single_tool_two_turns", "single agent with the calculator, 2 turns, before RL (warm start)",
                     "L0", MATH_SINGLE_TWO_TURNS, "-single-tool-two-turns")),
    baseline="grpo_l0_tool", other_baselines=("grpo_l0_tool_two_turns",),
    results=ROOT / "benchmarks" / "results" / "learning-math-arith",
    description="math/arith level 2, 2 turns, calculator tool for the team's tool agent and the single agent "
                "(4 turns: the team's model calls)",
)
TASKS: dict[str, BenchTask] = {t.name: t for t in (PLAN_PATH, MATH_ARITH)}


# ================================================================================= configs and keys


def run_config(
    level: str, overrides: Sequence[str], seed: int, output_dir: Path, bench: BenchTask = PLAN_PATH
) -> dict[str, Any]:
    """The resolved pipeline config of ``<family>/<level>`` with the task's settings, then ``overrides``."""
    from pettingllms.config import load_config

    return load_config(f"{bench.family}/{level}", [
        *bench.settings, *overrides, f"run.seed={seed}", f"run.output_dir={output_dir}", "run.progress=false",
        "run.overwrite=true",
    ])


def settings_hash(values: Mapping[str, Any]) -> str:
    """Short stable hash of a JSON-able mapping (keys sorted)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:12]


def prompt_version(config: Mapping[str, Any]) -> int:
    """The ``PROMPT_VERSION`` of the config's environment's prompts module (1 where it has none): prompt text
    is code, not config, so a key made of the config alone would reuse cells measured with older prompts."""
    try:
        prompts = importlib.import_module(f"pettingllms.envs.{config['env']['name']}.prompts")
    except ModuleNotFoundError:
        return 1
    return int(getattr(prompts, "PROMPT_VERSION", 1))


def config_key(config: Mapping[str, Any], drop: Sequence[str] = (), replace: Mapping[str, Any] | None = None,
               prompts: int | None = None) -> str:
    """Hash of ``config`` without :data:`KEY_IGNORED` and the sections in ``drop``, with the dotted keys of
    ``replace`` set (e.g. a warm start's folder replaced by its key), and the prompt version ``prompts``
    (default: the environment's current one, :func:`prompt_version`)."""
    values = copy.deepcopy(dict(config))
    values["prompt_version"] = prompt_version(config) if prompts is None else prompts
    for name in drop:
        values.pop(name, None)
    for dotted in KEY_IGNORED:
        section, _, key = dotted.partition(".")
        values.get(section, {}).pop(key, None)
    for dotted, value in (replace or {}).items():
        section, _, key = dotted.partition(".")
        values[section][key] = value
    return settings_hash(values)


def warm_start_config(seed: int, task: Sequence[str], results: Path, bench: BenchTask = PLAN_PATH) -> dict[str, Any]:
    """The warm start's run: ``<family>/<first start row's level>``, oracle demonstrations of every role, then
    held-out success."""
    return run_config(bench.starts[0].level, [*task, "pipeline=[sft, eval]"], seed,
                      results / "cache" / f"warmstart-seed{seed}", bench)


def warm_start_key(seed: int, task: Sequence[str], results: Path, bench: BenchTask = PLAN_PATH) -> str:
    """Hash of what the warm start and its start numbers depend on (RL sections and the run folder aside)."""
    return warm_config_key(warm_start_config(seed, task, results, bench))


def warm_config_key(config: Mapping[str, Any], prompts: int | None = None) -> str:
    return config_key(config, drop=("pipeline", *STAGE_SECTIONS), prompts=prompts)


def recorded_config(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's config with the keys of earlier versions renamed (``sft.epochs`` -> ``sft.num_train_epochs``,
    ...: :func:`pettingllms.config.key_names.migrate_saved_config`), so a cell measured before a rename keeps
    its key."""
    from pettingllms.config.key_names import migrate_saved_config

    return migrate_saved_config(record["config"], "a benchmark record")


def with_added_keys(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``recorded`` (a record's config) with the keys it lacks and ``current`` has set to ``current``'s values,
    at any depth: the config the record's run would resolve to now, if every key added to the configs since
    defaults to the behaviour before it (the project's rule for new keys). Keys ``current`` lacks stay, so a
    removed or renamed key still tells the configs apart."""
    out = copy.deepcopy(dict(recorded))
    for key, value in current.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(out[key], Mapping) and isinstance(value, Mapping):
            out[key] = with_added_keys(out[key], value)
    return out


def rl_overrides(items: Sequence[str], method: str, bench: BenchTask = PLAN_PATH) -> list[str]:
    """``--rl`` items for ``method``: ``[METHOD.]KEY=VALUE`` where KEY is a key of the method's RL stage
    section (``learning_rate``) or a dotted config key (``rollout.num_generations``); items naming another
    method are left out. Keys and values are the config loader's to check."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--rl {item!r}: expected [METHOD.]KEY=VALUE")
        head, _, rest = key.partition(".")
        if head in bench.methods:
            if head != method:
                continue
            key = rest
        out.append(f"{key if '.' in key else bench.methods[method].stage + '.' + key}={value}")
    return out


def cell_config(
    method_name: str, seed: int, task: Sequence[str], rl: Sequence[str], results: Path, model_dir: str,
    budget_minutes: float = 6.0, bench: BenchTask = PLAN_PATH,
) -> dict[str, Any]:
    """A cell's run: ``<family>/<level>`` with the method's overrides from the warm start's model, the method's
    pipeline (``[<stage>, eval]``; a preference row's alternates ``at_grpo`` and ``madpo_from_trees``), with
    ``max_steps`` enough to reach the completion budget (a preference row: each ``at_grpo`` stage its share) and
    a time limit of twice ``budget_minutes`` (per RL stage)."""
    from pettingllms.stages.at_grpo import at_grpo_config, rollout_config
    from pettingllms.stages.context import run_workflow

    method = bench.methods[method_name]
    stage = method.stage
    overrides = [*task, *method.overrides, *rl_overrides(rl, method_name, bench), f"model.name={model_dir}",
                 f"pipeline=[{', '.join(method.pipeline())}]", f"{stage}.max_minutes={2 * budget_minutes}"]
    output_dir = results / "cache" / f"{method_name}-seed{seed}"
    config = run_config(method.policy_level, overrides, seed, output_dir, bench)
    args = at_grpo_config(stage, config, output_dir / stage)
    fewest, _ = completions_per_step_bounds(
        args.sampling_mode, len(run_workflow(config)), rollout_config(config).num_generations, args.problems_per_step,
        config["env"]["max_turns"],
    )
    budget = config[stage]["max_completions"]
    if method.chunks:
        budget = math.ceil(budget / method.chunks)
        overrides.append(f"{stage}.max_completions={budget}")
    steps = max_steps_for_budget(budget, fewest)
    return run_config(method.policy_level, [*overrides, f"{stage}.max_steps={steps}"], seed, output_dir, bench)


def cell_key(config: Mapping[str, Any], method_name: str, warm_key: str, prompts: int | None = None) -> str:
    unused = [s for s in STAGE_SECTIONS if s not in config["pipeline"]]
    return settings_hash({"method": method_name,
                          "config": config_key(config, drop=unused, replace={"model.name": warm_key},
                                               prompts=prompts)})


def warm_rekey(current: Mapping[str, Any]):
    """For a warm-start record made earlier: its key under the current config (:func:`with_added_keys`)."""
    def rekey(record: Mapping[str, Any]) -> str | None:
        if "config" not in record:
            return None
        return warm_config_key(with_added_keys(recorded_config(record), current), record.get("prompt_version", 1))
    return rekey


def cell_rekey(current: Mapping[str, Any], method_name: str, warm_key: str, warm_path: Path):
    """For a cell record made earlier: its key under the current config, provided it started from a warm start
    with the numbers of the warm start recorded at ``warm_path`` now (a warm start retrained since must have
    reproduced them exactly). The numbers of the evaluated "before RL" rows the warm-start record lists
    (``start_rows``) are left out: they change with a row's own overrides, the model stays."""
    def rekey(record: Mapping[str, Any]) -> str | None:
        if "config" not in record or not warm_path.exists():
            return None
        warm_record = json.loads(warm_path.read_text())
        evaluated = {name for key in warm_record.get("start_rows", {}) for name in (key, f"{key}_greedy")}
        starts = {k: v for k, v in record.get("warm_start", {}).items() if k != "model_dir" and k not in evaluated}
        if not starts or any(warm_record.get(k) != v for k, v in starts.items()):
            return None
        return cell_key(with_added_keys(recorded_config(record), current), method_name, warm_key,
                        record.get("prompt_version", 1))
    return rekey


@functools.cache
def role_tools(level: str, task_name: str = "plan_path", overrides: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The tools each role of ``<family>/<level>`` may call under task ``task_name``'s settings and ``overrides``:
    the agent options' ``tools`` (the games), or the math environment's ``tool`` / ``single_tool``."""
    from pettingllms.stages.context import workflow_env

    _, fields, options = workflow_env(run_config(level, overrides, 0, Path("unused"), TASKS[task_name]))
    out = {}
    for role in fields["turn_order"]:
        tools = list(options.get(role, {}).get("tools") or [])
        own = {"tool_generator": fields.get("tool"), "single": fields.get("single_tool")}.get(role)
        if not tools and own not in (None, "none"):
            tools = [own]
        out[role] = tools
    return out


# ================================================================================= pure helpers


def completions_per_step_bounds(
    sampling_mode: str, num_agents: int, k: int, problems: int, max_turns: int
) -> tuple[int, int]:
    """(fewest, most) completions one RL step samples.

    Tree: K per (problem, turn, agent) decision; an episode ends at the earliest after the last agent of
    turn 0 acts. Independent: K trajectories per problem, one completion per agent decision.
    Both: at most ``max_turns * num_agents`` decisions per problem.
    """
    if sampling_mode not in ("tree", "independent"):
        raise ValueError(f"`sampling_mode` must be 'tree' or 'independent', got {sampling_mode!r}")
    for name, value in (("num_agents", num_agents), ("k", k), ("problems", problems), ("max_turns", max_turns)):
        if value < 1:
            raise ValueError(f"`{name}` must be >= 1, got {value}")
    per_decision = k * problems
    return per_decision * num_agents, per_decision * num_agents * max_turns


def max_steps_for_budget(budget: int, fewest_per_step: int) -> int:
    """Steps that certainly reach ``budget`` completions: ``ceil(budget / fewest_per_step)``."""
    if budget < 1 or fewest_per_step < 1:
        raise ValueError(f"`budget` and `fewest_per_step` must be >= 1, got {budget}, {fewest_per_step}")
    return math.ceil(budget / fewest_per_step)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean of ``values``: their sample standard deviation (n - 1) over sqrt(n); None
    under two values."""
    return statistics.stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else None


def _display(path: Path) -> str:
    """``path`` relative to the repository root where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _pct(value: float | None) -> str:
    """``40%``, ``30.5%``: one decimal where it is not 0 (200 trajectories per cell resolve half a point)."""
    if value is None:
        return "—"
    text = f"{100 * value:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.0f}"


def _pct_se(value: float | None, se: float | None) -> str:
    """``45%``, or ``45% ± 3.2`` (points) where the standard error is known."""
    return _pct(value) + ("" if se is None else f" ± {100 * se:.1f}")


def tools_text(tools: Mapping[str, Sequence[str]]) -> str:
    """``tool: simulate; plan: none`` for a row's agents and their tools."""
    return "; ".join(f"{role}: {', '.join(names) or 'none'}" for role, names in tools.items())


def build_table(
    seeds: Sequence[int], warm: Mapping[int, Mapping[str, Any]], cells: Mapping[tuple[str, int], Mapping[str, Any]],
    methods: Sequence[str], bench: BenchTask = PLAN_PATH,
) -> tuple[list[dict[str, Any]], str]:
    """Rows (dicts) and the markdown table: the task's "before RL" rows, then each RL method over ``seeds``."""
    rows: list[dict[str, Any]] = []

    def start_row(label: str, key: str, level: str, overrides: tuple[str, ...]) -> dict[str, Any]:
        values = {s: warm[s][key] for s in seeds if s in warm and key in warm[s]}
        greedy = [warm[s][key + "_greedy"] for s in seeds if s in warm and key + "_greedy" in warm[s]]
        return {
            "row": label, "start": key, "tools": tools_text(role_tools(level, bench.name, overrides)), "per_seed": values,
            "mean": mean(list(values.values())), "se": standard_error(list(values.values())),
            "greedy_mean": mean(greedy),
            "start_mean": None, "gain": None, "completions": 0, "minutes": None,
        }

    for start in bench.starts:
        rows.append(start_row(start.label, start.key, start.level, start.overrides))
    for name in methods:
        method = bench.methods[name]
        done = {s: cells[(name, s)] for s in seeds if (name, s) in cells}
        values = {s: c["success_after"] for s, c in done.items()}
        starts = [c["success_before"] for c in done.values()]
        after, start = mean(list(values.values())), mean(starts)
        rows.append({
            "row": method.label, "method": name,
            "tools": tools_text(role_tools(method.policy_level, bench.name, method.overrides)),
            "per_seed": values,
            "mean": after, "se": standard_error(list(values.values())), "start_mean": start,
            "greedy_mean": mean([c["greedy_after"] for c in done.values() if "greedy_after" in c]),
            "gain": None if after is None else after - start,
            "completions": mean([c["completions"] for c in done.values()]),
            "minutes": mean([c["seconds_total"] / 60 for c in done.values()]),
        })
    header = ["Row", "Agents: tools", *[f"seed {s}" for s in seeds], "mean (± s.e.)", "Δ vs start (points)", "greedy mean",
              "RL completions / cell", "min / cell"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        completions = row["completions"]
        lines.append("| " + " | ".join([
            row["row"], row["tools"], *[_pct(row["per_seed"].get(s)) for s in seeds], _pct_se(row["mean"], row["se"]),
            _points(row["gain"]), _pct(row["greedy_mean"]), "—" if not completions else f"{completions:.0f}",
            "—" if row["minutes"] is None else f"{row['minutes']:.1f}",
        ]) + " |")
    return rows, "\n".join(lines)


def paired_deltas(
    cells: Mapping[tuple[str, int], Mapping[str, Any]], seeds: Sequence[int], reference: str = "at_grpo_l1",
) -> dict[str, Any]:
    """Per preference-comparable row (every method but ``reference`` with cells), its final success minus
    ``reference``'s on each seed both have (same warm start, same held-out set), and their mean."""
    out: dict[str, Any] = {}
    for name in sorted({n for n, _ in cells} - {reference}):
        per_seed = {s: cells[(name, s)]["success_after"] - cells[(reference, s)]["success_after"]
                    for s in seeds if (name, s) in cells and (reference, s) in cells}
        out[name] = {"reference": reference, "per_seed": per_seed, "mean": mean(list(per_seed.values()))}
    return out


def target_checks(rows: Sequence[Mapping[str, Any]], bench: BenchTask = PLAN_PATH) -> dict[str, Any]:
    """The targets per AT-GRPO row and per hybrid ending on AT-GRPO (the other preference rows aside): gain
    over the multi-agent start >= 30 points, and success minus the task's baseline single-agent GRPO's (``bench.baseline``) >= 10 points (None where a
    number is missing or no seed is shared). Both are means of paired per-seed differences (same warm start,
    same held-out instances) over the seeds both rows have, so a row run on fewer seeds is compared on those;
    with the same seeds that is the difference of the means. Next to them: the per-seed differences and their
    standard errors."""
    by_method = {r.get("method"): r for r in rows if r.get("method")}

    def paired(row: Mapping[str, Any], reference: Mapping[int, float]) -> tuple[float | None, dict[int, float], float | None]:
        diffs = {s: v - reference[s] for s, v in row["per_seed"].items() if s in reference}
        return mean(list(diffs.values())), diffs, standard_error(list(diffs.values()))

    out: dict[str, Any] = {}
    for name, row in by_method.items():
        method = bench.methods[name]
        if method.stage != "at_grpo" or (method.chunks and not method.rl_last) or row["mean"] is None:
            continue
        gain, gains, gain_se = paired(row, rows[0]["per_seed"])
        margin, margins, margin_se = paired(row, by_method.get(bench.baseline, {}).get("per_seed", {}))
        others = {other: dict(zip(("mean", "per_seed", "se"), paired(row, by_method[other]["per_seed"])))
                  for other in bench.other_baselines if other in by_method}
        out[name] = {
            "gain_over_multi_start": gain, "gain_target": TARGET_GAIN, "gain_per_seed": gains, "gain_se": gain_se,
            "margin_per_seed": margins, "margin_se": margin_se,
            "gain_met": None if gain is None else gain >= TARGET_GAIN - 1e-9,
            "baseline": bench.baseline, "margin_over_grpo_l0": margin, "margin_target": TARGET_MARGIN,
            "margin_met": None if margin is None else margin >= TARGET_MARGIN - 1e-9,
            "margins_over_other_baselines": others,
        }
    return out


# ================================================================================= jobs (run in a subprocess)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def run_pipeline(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Run ``config``'s pipeline; returns its finished stages by folder (``pipeline_state.json``)."""
    from pettingllms.pipeline import PIPELINE_STATE_FILE, Pipeline

    Pipeline(config, plots=False).run()
    state = json.loads((Path(config["run"]["output_dir"]) / PIPELINE_STATE_FILE).read_text())
    return {entry["folder"]: entry for entry in state["completed"]}


def rl_history(metrics_file: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(history, curve points)`` of an RL stage's ``metrics.jsonl``: one entry per training step (its
    completions, success, reward, ... and per policy loss, approx_kl, entropy, grad_norm) and one point per
    held-out evaluation on the way (``eval_every_completions``)."""
    from pettingllms.plots import read_metrics
    from pettingllms.stages.at_grpo import step_completions  # samples and credit continuations

    history, points = [], []
    for record in read_metrics(metrics_file):
        if "eval/completions" in record:
            points.append({"completions": int(record["eval/completions"]), "success": record["eval/success_rate"],
                           "greedy": record.get("eval/greedy_success_rate")})
        elif "num_samples" in record:
            history.append({
                "step": record["step"], "completions": step_completions(record),
                "success_rate": record["success_rate"], "reward": record["reward"],
                "frac_reward_zero_std": record["frac_reward_zero_std"], "parse_error_rate": record["parse_error_rate"],
                "mean_length": record["completions/mean_length"], "step_s": record["time/step_s"],
                **{k: v for k, v in record.items() if k.startswith("policy/") and k.split("/")[-1] in
                   ("loss", "approx_kl", "entropy", "grad_norm")},
            })
    return history, points


def stage_histories(run_dir: Path, folders: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`rl_history` of the RL stage folders ``folders`` (a preference row's ``at_grpo``, ``at_grpo_2``,
    ...) in run order: their steps one after the other, each with its ``stage``; curve points counted over
    the whole run."""
    history: list[dict[str, Any]] = []
    points: list[dict[str, Any]] = []
    for folder in folders:
        done = sum(h["completions"] for h in history)
        steps, curve = rl_history(run_dir / folder / "metrics.jsonl")
        history += [{**h, "stage": folder} for h in steps]
        points += [{**c, "completions": c["completions"] + done} for c in curve]
    return history, points


def start_row_spec(start: StartRow) -> dict[str, Any]:
    """What a "before RL" row's number depends on beyond the warm start itself (whose key covers the model, the
    task's settings and the seed): the row's workflow level and its overrides."""
    return {"level": start.level, "overrides": list(start.overrides)}


def stale_start_rows(record: Mapping[str, Any], bench: BenchTask = PLAN_PATH) -> list[StartRow]:
    """The evaluated "before RL" rows (all but the warm start's own) whose number in the warm-start ``record``
    was measured with another level or other overrides than the row has now, or by a version that did not
    record them: their numbers must be measured again, not reused."""
    specs = record.get("start_rows", {})
    return [start for start in bench.starts[1:] if specs.get(start.key) != start_row_spec(start)]


def _start_row_eval(start: StartRow, seed: int, task: Sequence[str], results: Path, model_dir: Path,
                    bench: BenchTask) -> dict[str, Any]:
    """``pipeline=[eval]`` of one "before RL" row on the warm-start model."""
    folder = results / "cache" / f"warmstart-seed{seed}{start.folder_suffix}"
    run = run_config(start.level, [*task, *start.overrides, "pipeline=[eval]", f"model.name={model_dir}"], seed, folder,
                     bench)
    return run_pipeline(run)["eval"]


def _start_numbers(evals: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {**{key: run["metrics"]["success_rate"] for key, run in evals.items()},
            **{f"{key}_greedy": run["metrics"].get("greedy_success_rate") for key, run in evals.items()}}


def job_warm_start(seed: int, task: Sequence[str], results: Path, bench: BenchTask = PLAN_PATH) -> dict[str, Any]:
    """The seed's warm start (oracle demonstrations of every role, one shared model) and its start success
    for each of the task's "before RL" rows; cached by settings. A finished warm start whose model is still on
    disk keeps its model and numbers, and only its stale "before RL" rows (:func:`stale_start_rows`) are
    evaluated again."""
    from comlrl.atomic_io import atomic_write_json
    from pettingllms.pipeline import POLICIES_DIR

    t0 = time.perf_counter()
    path = results / f"warmstart-seed{seed}.json"
    config = warm_start_config(seed, task, results, bench)
    key = warm_start_key(seed, task, results, bench)
    if _job_done(path, key, warm_rekey(config)):
        record = json.loads(path.read_text())
        model_dir = Path(record["model_dir"])
        if model_dir.is_dir():
            stale = stale_start_rows(record, bench)
            evals = {start.key: _start_row_eval(start, seed, task, results, model_dir, bench) for start in stale}
            record.update(_start_numbers(evals))
            record["start_rows"] = {start.key: start_row_spec(start) for start in bench.starts[1:]}
            record["seconds"] = {**record.get("seconds", {}), "start_rows_again": time.perf_counter() - t0}
            atomic_write_json(path, record)
            return record
    multi = run_pipeline(config)
    model_dir = Path(config["run"]["output_dir"]) / POLICIES_DIR / "shared"
    evals = {bench.starts[0].key: multi["eval"]}
    evals.update({start.key: _start_row_eval(start, seed, task, results, model_dir, bench)
                  for start in bench.starts[1:]})
    sft = multi["sft"]["metrics"]
    record = {
        "seed": seed, "settings_key": key, "config": config,
        "prompt_version": prompt_version(config),
        "model_dir": str(model_dir),
        "demonstrations": {k.split("/")[1]: int(v) for k, v in sft.items() if k.endswith("/examples")},
        "sft_loss_first": sft.get("sft/loss_first"), "sft_loss_last": sft.get("sft/loss_last"),
        **_start_numbers(evals),
        "start_rows": {start.key: start_row_spec(start) for start in bench.starts[1:]},
        "eval_instances": config["eval"]["num_instances"],
        "seconds": {"sft": multi["sft"]["seconds"], "eval": sum(run["seconds"] for run in evals.values()),
                    "total": time.perf_counter() - t0},
    }
    atomic_write_json(path, record)
    return record


def job_cell(
    method_name: str, seed: int, task: Sequence[str], rl: Sequence[str], results: Path, budget_minutes: float,
    bench: BenchTask = PLAN_PATH,
) -> dict[str, Any]:
    """One RL cell from the seed's warm start: train until the completion budget, then evaluate."""
    from comlrl.atomic_io import atomic_write_json
    from pettingllms.pipeline import plan_stages
    from pettingllms.stages.at_grpo import at_grpo_config, rollout_config
    from pettingllms.stages.context import run_workflow

    method = bench.methods[method_name]
    warm_path = results / f"warmstart-seed{seed}.json"
    warm_key = warm_start_key(seed, task, results, bench)
    if not _job_done(warm_path, warm_key, warm_rekey(warm_start_config(seed, task, results, bench))):
        raise RuntimeError(f"warm start of seed {seed} is stale; rerun the warm-start job first")
    warm = json.loads(warm_path.read_text())
    config = cell_config(method_name, seed, task, rl, results, warm["model_dir"], budget_minutes, bench)
    stage, run_dir = method.stage, Path(config["run"]["output_dir"])
    t0 = time.perf_counter()
    stages = run_pipeline(config)
    plan = plan_stages(config)
    rl_folders = [folder for name, folder in plan if name == stage]
    preference_folders = [folder for name, folder in plan if name == "madpo_from_trees"]
    history, points = stage_histories(run_dir, rl_folders)
    before, after = stages["eval_before"]["metrics"], stages["eval"]["metrics"]
    completions = sum(h["completions"] for h in history)
    args = at_grpo_config(stage, config, run_dir / stage)
    roles = run_workflow(config)
    bounds = completions_per_step_bounds(args.sampling_mode, len(roles), rollout_config(config).num_generations,
                                         args.problems_per_step, config["env"]["max_turns"])
    budget = config[stage]["max_completions"] * len(rl_folders)
    stage_steps = [int(stages[f]["metrics"]["steps"]) for f in rl_folders]
    steps = sum(stage_steps)
    stopped_by = ("budget" if completions >= budget else
                  "max_steps" if any(n >= args.max_steps for n in stage_steps) else "time_cap")
    curve = [
        {"completions": 0, "success": before["success_rate"], "greedy": before.get("greedy_success_rate")},
        *points,
        {"completions": completions, "success": after["success_rate"], "greedy": after.get("greedy_success_rate")},
    ]
    evaluation = config["eval"]
    result = {
        "method": method_name, "label": method.label, "seed": seed, "policy_level": method.policy_level,
        "sampling_mode": args.sampling_mode, "roles": roles,
        "tools": role_tools(method.policy_level, bench.name, method.overrides),
        "settings_key": cell_key(config, method_name, warm_key), "config": config,
        "prompt_version": prompt_version(config),
        "warm_start": {k: warm[k] for k in (*(s.key for s in bench.starts), "model_dir")},
        "success_before": before["success_rate"], "success_after": after["success_rate"],
        "gain": after["success_rate"] - before["success_rate"],
        "greedy_before": before.get("greedy_success_rate"), "greedy_after": after.get("greedy_success_rate"),
        "eval_samples": evaluation["num_samples"], "eval_temperature": evaluation["temperature"],
        "completions": completions, "sample_budget": budget, "steps": steps,
        "completions_per_step_bounds": list(bounds), "stopped_by": stopped_by,
        "eval_instances": evaluation["num_instances"],
        "eval_seeds": [evaluation["seed_start"], evaluation["seed_start"] + evaluation["num_instances"]],
        "train_seed_range": list(args.train_seed_range),
        "curve": curve, "history": history,
        **({"chunks": method.chunks, "stage_steps": stage_steps,
            "preference": [{"folder": f, "seconds": stages[f]["seconds"], **stages[f]["metrics"]}
                           for f in preference_folders]} if method.chunks else {}),
        "seconds_train": sum(stages[f]["seconds"] for f in (*rl_folders, *preference_folders)),
        "seconds_total": time.perf_counter() - t0,
        "seconds_eval_before": stages["eval_before"]["seconds"],
        "threads": __import__("torch").get_num_threads(),
    }
    atomic_write_json(results / f"{method_name}-seed{seed}.json", result)
    return result


def job_smollm(task: Sequence[str], results: Path, eval_instances: int) -> dict[str, Any]:
    """AT-GRPO L1 on the smollm2-135m-instruct preset, no warm start: 2 steps x 2 problems, K = 2."""
    from comlrl.atomic_io import atomic_write_json
    from pettingllms.execution.transcripts import TRANSCRIPT_FILE

    run_dir = results / "cache" / "smollm2-l1"
    config = run_config("L1", [
        *task, "model.name=smollm2-135m-instruct", "pipeline=[at_grpo, eval]", "at_grpo.max_steps=2",
        "at_grpo.problems_per_step=2", "rollout.num_generations=2", "at_grpo.learning_rate=1e-5",
        "at_grpo.max_completions=0", "at_grpo.eval_every_completions=0", f"eval.num_instances={eval_instances}",
        "rollout.transcripts_rate=1.0",
    ], 0, run_dir)
    t0 = time.perf_counter()
    stages = run_pipeline(config)
    history, _ = rl_history(run_dir / "at_grpo" / "metrics.jsonl")
    transcripts = [json.loads(line) for line in (run_dir / "at_grpo" / TRANSCRIPT_FILE).read_text().splitlines()]
    before, after = stages["eval_before"]["metrics"], stages["eval"]["metrics"]
    result = {
        "model": config["model"]["name"], "method": "at_grpo_l1", "steps": len(history),
        "problems_per_step": 2, "num_generations": 2, "learning_rate": config["at_grpo"]["learning_rate"],
        "warm_start": False, "eval_instances": eval_instances,
        "success_before": before["success_rate"], "success_after": after["success_rate"],
        "greedy_before": before.get("greedy_success_rate"), "greedy_after": after.get("greedy_success_rate"),
        "completions": sum(h["completions"] for h in history),
        "train_success_rate": [h["success_rate"] for h in history],
        "parse_error_rate": [h["parse_error_rate"] for h in history],
        "frac_reward_zero_std": [h["frac_reward_zero_std"] for h in history],
        "mean_completion_length": [h["mean_length"] for h in history],
        "max_completion_length": config["rollout"]["max_completion_length"],
        "example_responses": [  # the last step's training rollouts
            {k: r.get(k) for k in ("role", "turn", "response", "parse_error")}
            for r in [r for r in transcripts if r["step"] == len(history)][:4]
        ],
        "seconds": {"eval_before": stages["eval_before"]["seconds"], "train": stages["at_grpo"]["seconds"],
                    "total": time.perf_counter() - t0},
        "threads": __import__("torch").get_num_threads(),
    }
    atomic_write_json(results / "smollm2-l1.json", result)
    return result


# ================================================================================= orchestration


Rekey = Callable[[Mapping[str, Any]], "str | None"]


def _record_key(path: Path, rekey: Rekey | None = None) -> tuple[str | None, str | None]:
    """``(recorded key, key under the current configs)`` of the record at ``path`` (Nones: no record); the
    second is ``rekey``'s for a record made before keys were added to the configs (:func:`with_added_keys`)."""
    if not path.exists():
        return None, None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None, None
    return record.get("settings_key"), (rekey(record) if rekey is not None else None)


def _job_done(path: Path, key: str, rekey: Rekey | None = None) -> bool:
    recorded, now = _record_key(path, rekey)
    return key in (recorded, now) and recorded is not None


def _warm_model_missing(job: Job) -> bool:
    """A finished warm-start record whose ``model_dir`` no longer exists on disk."""
    if job.key is None or not _job_done(job.result, job.key, job.rekey):
        return False
    return not Path(json.loads(job.result.read_text())["model_dir"]).is_dir()


@dataclass
class Job:
    name: str
    argv: list[str]
    result: Path
    key: str | None
    needs: list[str] = field(default_factory=list)
    rekey: Rekey | None = None  # a record made before keys were added: its key now (None: not comparable)

    def done(self) -> bool:
        return self.key is not None and _job_done(self.result, self.key, self.rekey)


def run_jobs(jobs: Sequence[Job], parallel: int, threads: int, logs: Path) -> dict[str, int]:
    """Run pending jobs as subprocesses, at most ``parallel`` at once, each after the jobs it needs."""
    logs.mkdir(parents=True, exist_ok=True)
    pending: list[Job] = []
    for j in jobs:  # a finished job waits for a job it needs that runs again (a retrained warm start), then is
        # checked again: a cell counts only from a warm start with its numbers
        if not j.done() or any(n in {p.name for p in pending} for n in j.needs):
            pending.append(j)
        else:
            print(f"[skip] {j.name}: finished ({_display(j.result)})", flush=True)
    finished: set[str] = {j.name for j in jobs if j not in pending}
    failed: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float, Any]] = {}
    codes: dict[str, int] = {}
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    while pending or running:
        for job in list(pending):
            if len(running) >= parallel:
                break
            if any(n in failed for n in job.needs):
                pending.remove(job)
                failed.add(job.name)
                print(f"[skip] {job.name}: a job it needs failed", flush=True)
                continue
            if all(n in finished for n in job.needs):
                pending.remove(job)
                if job.done():  # finished by another run meanwhile
                    finished.add(job.name)
                    print(f"[skip] {job.name}: finished ({_display(job.result)})", flush=True)
                    continue
                log = open(logs / f"{job.name}.log", "w")  # noqa: SIM115 - closed when the job ends
                cmd = [sys.executable, "-m", "benchmarks.learning", *job.argv, "--threads", str(threads)]
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                running[job.name] = (proc, time.perf_counter(), log)
                print(f"[start] {job.name} (pid {proc.pid}, log {log.name})", flush=True)
        time.sleep(2)
        for name, (proc, started, log) in list(running.items()):
            code = proc.poll()
            if code is None:
                continue
            log.close()
            del running[name]
            codes[name] = code
            took = (time.perf_counter() - started) / 60
            if code == 0:
                finished.add(name)
                print(f"[done] {name} in {took:.1f} min", flush=True)
            else:
                failed.add(name)
                print(f"[FAIL] {name} (exit {code}) after {took:.1f} min; see {logs / (name + '.log')}", flush=True)
    return codes


def write_plot(cells: Mapping[tuple[str, int], Mapping[str, Any]], path: Path) -> Path | None:
    """Training success per RL step and held-out curve per cell (one panel each); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"grpo_l0": "tab:gray", "grpo_l0_tool": "black", "at_grpo_l1": "tab:blue", "at_grpo_l1_credit": "tab:cyan",
              "at_grpo_l3_credit": "gold", "at_grpo_l3": "tab:orange", "at_grpo_l2": "tab:green",
              "madpo_trees_l1": "tab:purple", "hybrid_l1": "tab:red", "hybrid_rl_last_l1": "tab:brown"}
    for (name, seed), cell in sorted(cells.items()):
        xs, ys, total = [], [], 0
        for h in cell["history"]:
            total += h["completions"]
            xs.append(total)
            ys.append(h["success_rate"])
        label = f"{name} s{seed}"
        axes[0].plot(xs, ys, color=colors.get(name), alpha=0.6, label=label)
        curve = cell["curve"]
        axes[1].plot([c["completions"] for c in curve], [c["success"] for c in curve], "o-",
                     color=colors.get(name), alpha=0.7, label=label)
    axes[0].set(xlabel="RL completions sampled", ylabel="training success (sampled)", title="training rollouts")
    axes[1].set(xlabel="RL completions sampled", ylabel="held-out success (mean of K samples)", title="held-out", ylim=(0, 1))
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    import io

    from comlrl.atomic_io import atomic_write_bytes

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def _finished(path: Path, key: str, rekey: Rekey | None = None, rekeyed: list[str] | None = None) -> dict[str, Any] | None:
    """The record at ``path`` if it was made with settings ``key``, or with the settings that are ``key`` now
    that keys were added to the configs (``rekey``; its name then goes to ``rekeyed``); one made with other
    settings is named."""
    recorded, now = _record_key(path, rekey)
    if recorded is not None and key in (recorded, now):
        if recorded != key and rekeyed is not None:
            rekeyed.append(_display(path))
        return json.loads(path.read_text())
    if path.exists():
        print(f"[left out] {_display(path)}: made with other settings (settings_key != {key})", flush=True)
    return None


def summarize(args, task: Sequence[str], results: Path, bench: BenchTask = PLAN_PATH) -> dict[str, Any]:
    warm, cells, rekeyed = {}, {}, []
    for seed in args.seeds:
        warm_key = warm_start_key(seed, task, results, bench)
        warm_path = results / f"warmstart-seed{seed}.json"
        record = _finished(warm_path, warm_key, warm_rekey(warm_start_config(seed, task, results, bench)), rekeyed)
        if record is not None:
            for start in stale_start_rows(record, bench):
                print(f"[left out] {start.key} of seed {seed}: measured with another level or other overrides "
                      f"than {start_row_spec(start)}; run the benchmark to measure it again", flush=True)
                record.pop(start.key, None)
                record.pop(f"{start.key}_greedy", None)
            warm[seed] = record
        for name in args.methods:
            config = cell_config(name, seed, task, args.rl, results, "unused", args.budget_minutes, bench)
            record = _finished(results / f"{name}-seed{seed}.json", cell_key(config, name, warm_key),
                               cell_rekey(config, name, warm_key, warm_path) if seed in warm else None, rekeyed)
            if record is not None:
                cells[(name, seed)] = record
    rows, table = build_table(args.seeds, warm, cells, args.methods, bench)
    targets = target_checks(rows, bench)
    deltas = paired_deltas(cells, args.seeds) if any(bench.methods[n].chunks for n in args.methods) else {}
    plot = write_plot(cells, results / "learning_curves.png") if cells else None
    smollm_path = results / "smollm2-l1.json"
    smollm = json.loads(smollm_path.read_text()) if smollm_path.exists() else None
    return {
        "benchmark": "learning", "config": bench.name, "description": bench.description,
        "settings": list(bench.settings), "task": list(task), "rl": list(args.rl),
        "seeds": list(args.seeds), "methods": list(args.methods), "rows": rows, "table": table,
        "targets": targets, "vs_at_grpo_l1": deltas, "warm_starts": {str(s): {k: v for k, v in w.items() if k != "config"} for s, w in warm.items()},
        "cells": {f"{n}-seed{s}": {k: v for k, v in c.items() if k not in ("history", "config")}
                  for (n, s), c in cells.items()},
        "smollm2": smollm, "plot": None if plot is None else _display(plot),
        "rekeyed": rekeyed,  # records made before keys were added to the configs, counted under the rule of with_added_keys
        "cells_parallel": args.cells_parallel, "threads": args.threads,
    }


def merged_summary(existing: Mapping[str, Any] | None, name: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The summary file's content with task ``name``'s table set to ``summary``, the other tasks' kept (a file
    of the one-table layout, written before tasks existed, holds the Plan-Path table)."""
    tasks: dict[str, Any] = {}
    if existing:
        if "tasks" in existing:
            tasks.update(existing["tasks"])
        elif existing.get("benchmark") == "learning":
            tasks[PLAN_PATH.name] = dict(existing)
    tasks[name] = dict(summary)
    return {"benchmark": "learning", "tasks": tasks}


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.config import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=PLAN_PATH.name, choices=list(TASKS),
                        help="the task: plan_path (the Plan-Path table) or math/arith")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=None,
                        choices=sorted({m for t in TASKS.values() for m in t.methods}),
                        help="rows to run (default: the task's)")
    parser.add_argument("--cells-parallel", type=int, default=1, help="jobs run at once (2 cores: 1 or 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per job (default 2 // parallel)")
    parser.add_argument("--budget-minutes", type=float, default=6.0,
                        help="intended minutes per cell; a cell stops at 2x this even short of its sample budget")
    parser.add_argument("--eval-instances", type=int, default=None, help="held-out instances (eval.num_instances)")
    parser.add_argument("--rl", action="append", default=[], metavar="[METHOD.]KEY=VALUE",
                        help="RL override: a key of the method's stage section (at_grpo / grpo), e.g. "
                             "learning_rate=2e-4, or a dotted config key, e.g. rollout.num_generations=8")
    parser.add_argument("--task", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="config override of every run (warm start and cells), e.g. env.rows=5, sft.num_train_epochs=2")
    parser.add_argument("--results", type=Path, default=None,
                        help="folder of the per-cell JSON files (default: the task's, under benchmarks/results/)")
    parser.add_argument("--summary", type=Path, default=None, help="summary JSON (default benchmarks/results/learning.json)")
    parser.add_argument("--smollm", action="store_true", help="also run the tiny smollm2-135m-instruct run")
    parser.add_argument("--smollm-eval-instances", type=int, default=10)
    parser.add_argument("--no-run", action="store_true", help="only rebuild the table from finished cells")
    # Internal: one job in this process.
    parser.add_argument("--job", choices=["warm_start", "cell", "smollm"], help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    bench = TASKS[args.config]
    if args.methods is None:
        args.methods = list(bench.default_methods)
    unknown = [m for m in args.methods if m not in bench.methods]
    if unknown:
        parser.error(f"--methods {unknown}: not rows of {bench.name} (its rows: {list(bench.methods)})")
    if args.smollm and bench is not PLAN_PATH:
        parser.error("--smollm runs on plan_path only")
    if args.threads is None:
        args.threads = max(1, 2 // max(1, args.cells_parallel))
    task = [*args.task, *([f"eval.num_instances={args.eval_instances}"] if args.eval_instances is not None else [])]
    results = (args.results or bench.results).resolve()
    results.mkdir(parents=True, exist_ok=True)
    try:  # every config once, so that a bad override fails before any job starts
        from pettingllms.pipeline import check_pipeline

        check_pipeline(warm_start_config(0, task, results, bench))
        for name in {*args.methods, *([args.method] if args.method else [])}:
            check_pipeline(cell_config(name, 0, task, args.rl, results, "small", args.budget_minutes, bench))
    except ConfigError as error:
        raise SystemExit(f"learning: {error}") from None

    if args.job:
        _set_threads(args.threads)
        if args.job == "warm_start":
            out = job_warm_start(args.seed, task, results, bench)
        elif args.job == "cell":
            out = job_cell(args.method, args.seed, task, args.rl, results, args.budget_minutes, bench)
        else:
            out = job_smollm(task, results, args.smollm_eval_instances)
        print(json.dumps({k: v for k, v in out.items() if k not in ("history", "config")}))
        return 0

    common = ["--config", bench.name, "--results", str(results), "--budget-minutes", str(args.budget_minutes)]
    common += [x for item in args.rl for x in ("--rl", item)] + [x for item in args.task for x in ("--task", item)]
    if args.eval_instances is not None:
        common += ["--eval-instances", str(args.eval_instances)]
    jobs: list[Job] = []
    for seed in args.seeds:  # seed-major order: one seed's row of the table lands before the next starts
        warm_key = warm_start_key(seed, task, results, bench)
        warm_path = results / f"warmstart-seed{seed}.json"
        warm_job = Job(f"warmstart-seed{seed}", ["--job", "warm_start", "--seed", str(seed), *common],
                       warm_path, warm_key, rekey=warm_rekey(warm_start_config(seed, task, results, bench)))
        cell_jobs = []
        for name in args.methods:
            config = cell_config(name, seed, task, args.rl, results, "unused", args.budget_minutes, bench)
            cell_jobs.append(Job(
                f"{name}-seed{seed}",
                ["--job", "cell", "--method", name, "--seed", str(seed), "--methods", name, *common],
                results / f"{name}-seed{seed}.json", cell_key(config, name, warm_key),
                needs=[warm_job.name], rekey=cell_rekey(config, name, warm_key, warm_path),
            ))
        if _warm_model_missing(warm_job) and any(not c.done() for c in cell_jobs):
            # The record survived (it is committed) but its model (under the ignored cache/) did not, and a
            # cell still needs it: train it again from the same seed.
            print(f"[rerun] {warm_job.name}: its model is gone and cells still need it", flush=True)
            warm_job.key = None
        elif not args.no_run and warm_job.done() and (stale := stale_start_rows(json.loads(warm_path.read_text()), bench)):
            # A "before RL" row changed (its level or overrides): measure it again on the same model.
            print(f"[rerun] {warm_job.name}: start rows {[start.key for start in stale]} changed", flush=True)
            warm_job.key = None
        jobs += [warm_job, *cell_jobs]
    if args.smollm:
        jobs.append(Job("smollm2-l1", ["--job", "smollm", "--smollm-eval-instances", str(args.smollm_eval_instances),
                                       *common], results / "smollm2-l1.json", None))
    if not args.no_run:
        run_jobs(jobs, args.cells_parallel, args.threads, results / "cache" / "logs")

    summary = summarize(args, task, results, bench)
    from comlrl.atomic_io import atomic_write_json

    summary_path = args.summary or (SUMMARY_PATH if results == bench.results.resolve() else results / "learning.json")
    existing = json.loads(summary_path.read_text()) if summary_path.exists() else None
    atomic_write_json(summary_path, merged_summary(existing, bench.name, summary))
    print()
    print(summary["table"])
    for name, delta in summary["vs_at_grpo_l1"].items():
        per_seed = ", ".join(f"seed {s} {_points(d)}" for s, d in delta["per_seed"].items())
        print(f"{name} vs {delta['reference']}: {_points(delta['mean'])} points ({per_seed or 'no common seed'})")
    for name, check in summary["targets"].items():
        gain_se, margin_se = (check.get(k) for k in ("gain_se", "margin_se"))  # absent in older summaries
        print(f"{name}: gain over multi-agent start {_points(check['gain_over_multi_start'])} points "
              f"{'' if gain_se is None else f'(paired s.e. {100 * gain_se:.1f}) '}(target +{100 * TARGET_GAIN:.0f}), "
              f"margin over {check['baseline']} {_points(check['margin_over_grpo_l0'])} points "
              f"{'' if margin_se is None else f'(paired s.e. {100 * margin_se:.1f}) '}(target +{100 * TARGET_MARGIN:.0f})")
        for other, margin in check.get("margins_over_other_baselines", {}).items():
            se = "" if margin["se"] is None else f" (paired s.e. {100 * margin['se']:.1f})"
            print(f"{name}: margin over {other} {_points(margin['mean'])} points{se} (reported, not the target)")
    if summary["smollm2"]:
        s = summary["smollm2"]
        print(f"smollm2-135m-instruct, AT-GRPO L1, no warm start, {s['steps']} steps: success "
              f"{_pct(s['success_before'])} -> {_pct(s['success_after'])} on {s['eval_instances']} held-out "
              f"instances, {s['seconds']['total']:.0f} s")
    print(f"\nwrote {summary_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
