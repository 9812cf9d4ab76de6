"""Pipelines: an ordered list of stages over one set of policies, driven by a resolved run config.

>>> from pettingllms.config import load_config
>>> from pettingllms.pipeline import Pipeline
>>> config = load_config("plan_path/L1", ["model.name=test-tiny", "at_grpo.max_steps=1"])
>>> result = Pipeline(config).run()            # doctest: +SKIP
>>> result.success_before, result.success_after  # doctest: +SKIP

Stages (``pipeline: [...]`` in the config; each reads the config section of its name):

- ``sft``: oracle demonstrations, then supervised fine-tuning of every policy (the warm start);
- ``at_grpo``: :class:`~pettingllms.trainer.ATGRPOTrainer` (tree sampling, per (problem, turn, agent)
  groups); ``grpo``: the same trainer with independent sampling, the single-agent (L0) baseline;
- ``madpo`` / ``marlhf``: comlrl's iterative preference trainers with the environment as the oracle
  (:mod:`pettingllms.stages.env_oracle`);
- ``eval``: success rate (mean over ``num_samples`` trajectories) on the held-out ``eval`` instances.
  With ``eval.before_training`` an extra ``eval_before`` runs right before the first RL stage, so a run
  prints its success before and after training.

Each stage lives in its module of :mod:`pettingllms.stages` as two functions: its settings, built and
checked from the config (:func:`check_pipeline` builds every stage's once, before the first stage starts,
and the stage runs with them), and its run, a function of one :class:`StageContext` (the resolved config,
the shared :class:`~comlrl.policy.MultiAgentPolicy`, the stage's folder and settings, the env worker)
returning summary metrics. This module plans, checks and runs them.

The run folder (``run.output_dir``)::

    config.yaml            the resolved config (every key, after overrides)
    pipeline_state.json    the stage plan and the stages done, with their summary metrics and seconds
    contamination.json     training statements against every evaluation benchmark's (pettingllms.stages.contamination)
    metrics.jsonl          one record per finished stage (keys ``<stage folder>/<metric>``)
    <stage>/               each stage's own output: metrics.jsonl, checkpoint-N/ (RL stages),
                           policies/ (after a training stage), eval.json (eval stages)
    policies/              the final policies, one folder per policy (LoRA adapters included)
    plots/                 PNG plots of success and reward per agent over steps

Resume (``run.resume``): the stages done are skipped, the policies are restored from the last finished
training stage, and an interrupted RL stage continues from its latest checkpoint exactly as the
uninterrupted run would have. A resumed run must use the same config (``run.*`` switches aside).
The global random streams (Python, numpy, torch) are seeded from ``run.seed`` when the run starts and
again from ``derive_seed(run.seed, "stage", folder)`` when each stage starts; an RL stage's checkpoint
restores them as they were when it was written.
A run that ended before its first stage finished holds nothing to keep: the next command into its folder,
resumed or not, starts afresh whatever its config (and says so). A resume first removes what writes cut short
by a kill left in the run folder (:func:`comlrl.atomic_io.remove_stale_temporaries`, logged), and refuses a
``pipeline_state.json`` that does not parse or has another ``version`` with an error naming the file.

Data-parallel runs: ``pettingllms train CONFIG`` (or any script that runs a :class:`Pipeline`) under
``accelerate launch --multi_gpu --num_processes N`` or ``torchrun --nproc_per_node N`` runs the pipeline on
every rank. :class:`Pipeline` joins the launcher's process group when it is made
(:func:`~comlrl.distributed.init_distributed`); the ``sft``, ``at_grpo`` and ``grpo`` stages
are data-parallel (each rank takes a shard of the demonstrations / of each step's problems, see
:mod:`pettingllms.trainer.step_view`), ``eval`` stages play every instance on every rank (the same
result), and ``madpo`` / ``marlhf`` (no data-parallel mode yet), like ``run.backend: ray``, are refused with a
ConfigError before the run starts. Rank 0 alone writes and removes files in the run folder (the folder's
preparation, ``config.yaml``, ``pipeline_state.json``, ``metrics.jsonl``, every stage's files,
``policies/``, ``plots/``) and prints progress and the summary; the other ranks wait for it at a barrier
where they read what it wrote (after the folder is prepared, after each stage). A resume must run on the
world size the interrupted run had (an RL stage's checkpoint records it). FSDP (accelerate's config with
``distributed_type: FSDP``, or ``ACCELERATE_USE_FSDP=true`` under torchrun) shards those stages' updates
(:mod:`pettingllms.trainer.fsdp`); an L2 (LoRA) config under it is refused here.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from comlrl import distributed as dist
from comlrl.atomic_io import atomic_write_json, remove_stale_temporaries
from comlrl.seeding import derive_seed, seed_everything
from pettingllms.config.key_names import migrate_saved_config
from pettingllms.config.loader import (
    RESOLVED_CONFIG_FILE,
    ConfigError,
    load_yaml_file,
    save_resolved_config,
    validate_config,
)
from pettingllms.stages.at_grpo import at_grpo_config, at_grpo_settings, rollout_config, run_at_grpo
from pettingllms.stages.contamination import CONTAMINATION_FILE, check_contamination
from pettingllms.stages.context import (
    RL_STAGES,
    TRAINING_STAGES,
    SettingsBuilder,
    StageContext,
    build_run_policy,
    check_run_inputs,
    make_env_worker,
)
from pettingllms.stages.eval import EVAL_BEFORE_FOLDER, eval_metrics, eval_plan, evaluate_policy, run_eval
from pettingllms.stages.madpo import madpo_settings, run_madpo
from pettingllms.stages.madpo_from_trees import madpo_from_trees_settings, run_madpo_from_trees
from pettingllms.stages.marlhf import marlhf_settings, run_marlhf
from pettingllms.stages.preference import run_preference_stage
from pettingllms.stages.sft import run_sft, sft_settings
from pettingllms.trainer import fsdp
from pettingllms.workers.stage import RAY_STAGES

__all__ = [
    "PIPELINE_STATE_FILE",
    "POLICIES_DIR",
    "RL_STAGES",
    "STAGE_RUNNERS",
    "STAGE_SETTINGS",
    "Pipeline",
    "PipelineResult",
    "StageContext",
    "at_grpo_config",
    "build_run_policy",
    "check_pipeline",
    "config_differences",
    "eval_metrics",
    "evaluate_policy",
    "make_env_worker",
    "plan_stages",
    "before_after_folders",
    "success_summary",
]
# The madpo / marlhf runner under the name it had here.
run_preference = run_preference_stage

PIPELINE_STATE_FILE = "pipeline_state.json"
POLICIES_DIR = "policies"
PLOTS_DIR = "plots"
STATE_FORMAT = "pettingllms-pipeline"
STATE_VERSION = 1
# ``run`` keys that may differ between a run and its resumption.
RUN_SWITCHES = ("run.resume", "run.overwrite", "run.progress")

STAGE_SETTINGS: dict[str, SettingsBuilder] = {
    "sft": sft_settings,
    "at_grpo": at_grpo_settings,
    "grpo": at_grpo_settings,
    "madpo": madpo_settings,
    "marlhf": marlhf_settings,
    "madpo_from_trees": madpo_from_trees_settings,
    "eval": eval_plan,
}
STAGE_RUNNERS: dict[str, Callable[[StageContext], dict[str, float]]] = {
    "sft": run_sft,
    "at_grpo": run_at_grpo,
    "grpo": run_at_grpo,
    "madpo": run_madpo,
    "marlhf": run_marlhf,
    "madpo_from_trees": run_madpo_from_trees,
    "eval": run_eval,
}


# ================================================================================= plan and checks (pure)


def plan_stages(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``[(stage, folder), ...]`` in run order.

    A stage's folder is its name (``eval_2``, ``eval_3``, ... for repeats). With ``eval`` in the pipeline
    and ``eval.before_training``, ``("eval", "eval_before")`` runs right before the first RL stage unless
    an ``eval`` already does.
    """
    pipeline = list(config["pipeline"])
    seen: dict[str, int] = {}
    plan: list[tuple[str, str]] = []
    for stage in pipeline:
        seen[stage] = seen.get(stage, 0) + 1
        plan.append((stage, stage if seen[stage] == 1 else f"{stage}_{seen[stage]}"))
    if "eval" in pipeline and config["eval"].get("before_training", False):
        first_rl = next((i for i, (stage, _) in enumerate(plan) if stage in RL_STAGES), None)
        if first_rl is not None and (first_rl == 0 or plan[first_rl - 1][0] != "eval"):
            plan.insert(first_rl, ("eval", EVAL_BEFORE_FOLDER))
    return plan


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Sequence[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs (keys only in one count), sorted."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    keys = set(flat_old) | set(flat_new)
    return sorted(k for k in keys if k not in ignore and flat_old.get(k, _MISSING) != flat_new.get(k, _MISSING))


_MISSING = object()


def _flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = list(value) if isinstance(value, tuple) else value
    return out


def check_pipeline(config: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that can be checked before a run starts (and before its folder is made):
    :func:`~pettingllms.config.validate_config`, the model and device
    (:func:`~pettingllms.stages.context.check_run_inputs`, no model is loaded), then every stage's settings
    (a bad value fails now, not after the warm start; under a data-parallel launch a stage without a
    data-parallel mode fails here too). Returns the settings of each planned stage by folder
    (:func:`plan_stages`), which the stages then run with."""
    validate_config(config)
    check_run_inputs(config)
    size = dist.world_size()
    try:  # FSDP (accelerate's config / ACCELERATE_USE_FSDP): a launch of N > 1 processes, no LoRA policies
        if fsdp.fsdp_for_world(size) is not None:
            fsdp.check_level(config["policy"]["level"], "policy.level")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if size > 1 and config["run"].get("backend", "local") == "ray":
        raise ConfigError(
            f"`run.backend` is 'ray' but this run has world size {size} (accelerate launch / torchrun): the Ray "
            "backend places its own workers; start it in one process, or use run.backend=local under the launcher"
        )
    from pettingllms.execution.generation import check_pipeline_generation

    check_pipeline_generation(config)  # rollout.backend=api trains nothing
    if size > 1 and config["rollout"].get("backend", "hf") == "vllm":
        raise ConfigError(
            f"`rollout.backend` is 'vllm' but this run has world size {size} (accelerate launch / torchrun): one "
            "engine per rank is not built yet; use run.backend=ray (a RolloutWorker per device) or rollout.backend=hf"
        )
    plan = plan_stages(config)
    for index, (stage, folder) in enumerate(plan):  # pairs from trees need the tree stage right before
        if stage == "madpo_from_trees" and (index == 0 or plan[index - 1][0] != "at_grpo"):
            before = plan[index - 1][1] if index else "nothing"
            raise ConfigError(
                f"`pipeline`: stage `madpo_from_trees` ({folder}) learns from the trees of the `at_grpo` stage right "
                f"before it, but follows {before}; e.g. pipeline=[sft, at_grpo, madpo_from_trees, at_grpo, eval]"
            )
        if stage == "madpo_from_trees" and config["at_grpo"]["sampling_mode"] != "tree":
            raise ConfigError(
                "`at_grpo.sampling_mode` is 'independent', whose whole-trajectory groups share no prefix: stage "
                "`madpo_from_trees` needs tree sampling (at_grpo.sampling_mode=tree)"
            )
        following = plan[index + 1][0] if index + 1 < len(plan) else None
        if stage == "grpo" and config["grpo"]["update_policy"] is False:
            raise ConfigError(
                "`grpo.update_policy` is false, but grpo's independent trajectories give no tree pairs for a "
                "`madpo_from_trees` stage to train on: keep it true (sample-only trees: at_grpo.update_policy=false)"
            )
        if stage == "at_grpo" and config["at_grpo"]["update_policy"] is False and following != "madpo_from_trees":
            raise ConfigError(
                f"`at_grpo.update_policy` is false, so stage {folder} only samples trees for the `madpo_from_trees` "
                f"stage right after it, but {following or 'nothing'} follows; e.g. "
                "pipeline=[sft, at_grpo, madpo_from_trees, at_grpo, madpo_from_trees, eval]"
            )
    run_dir, progress = Path(config["run"]["output_dir"]), bool(config["run"]["progress"])
    return {folder: STAGE_SETTINGS[stage](stage, config, run_dir / folder, progress) for stage, folder in plan}


# ================================================================================= the pipeline


@dataclass
class PipelineResult:
    """What a run produced: its folder, each stage's summary metrics (``{folder: metrics}``, run order),
    the held-out success before the first and after the last RL stage (None where no eval ran there),
    and the plots written."""

    run_dir: Path
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    success_before: float | None = None
    success_after: float | None = None
    plots: list[Path] = field(default_factory=list)


def before_after_folders(plan: Sequence[tuple[str, str]], stages: Mapping[str, Mapping[str, float]]) -> tuple[str | None, str | None]:
    """The folders of the last eval before the first RL stage and of the last eval after the last RL stage
    (None where there is none; with no RL stage, the first and last eval)."""
    rl = [i for i, (stage, _) in enumerate(plan) if stage in RL_STAGES]
    evals = [(i, folder) for i, (stage, folder) in enumerate(plan) if stage == "eval" and folder in stages]
    if not evals:
        return None, None
    if not rl:
        return evals[0][1], evals[-1][1]
    before = [f for i, f in evals if i < rl[0]]
    after = [f for i, f in evals if i > rl[-1]]
    return (before[-1] if before else None), (after[-1] if after else None)


def success_summary(plan: Sequence[tuple[str, str]], stages: Mapping[str, Mapping[str, float]]) -> tuple[float | None, float | None]:
    """``(before, after)``: success of the last eval before the first RL stage and of the last eval
    after the last RL stage (None where there is none; with no RL stage, the first and last eval). With
    several benchmarks, the headline's (the first of ``eval.benchmarks``)."""
    before, after = before_after_folders(plan, stages)
    return (
        stages[before]["success_rate"] if before is not None else None,
        stages[after]["success_rate"] if after is not None else None,
    )


class Pipeline:
    """Runs the stages of a resolved config (see the module docstring).

    Args:
        config: a resolved run config (:func:`~pettingllms.config.load_config`).
        policy: a prebuilt :class:`~comlrl.policy.MultiAgentPolicy` (default: built from the config).
        out: where progress lines go (default stdout).
        plots: write PNG plots (matplotlib) at the end of each stage.

    ``run.resume``, ``run.overwrite`` and ``run.progress`` are read from the config. Under ``accelerate
    launch`` / ``torchrun`` it joins the launcher's process group first (see the module docstring).
    """

    def __init__(self, config: Mapping[str, Any], *, policy: Any = None, out: TextIO | None = None, plots: bool = True):
        dist.init_distributed()  # first: the stage checks read the world size
        self.settings = check_pipeline(config)
        # Training problems against every benchmark's, by statement (refused unless eval.allow_contamination).
        self.contamination = check_contamination(config)
        self.config = config
        self.plan = plan_stages(config)
        self.run_dir = Path(config["run"]["output_dir"])
        self.resume = bool(config["run"]["resume"])
        self.overwrite = bool(config["run"]["overwrite"])
        self.progress = bool(config["run"]["progress"])
        self._policy = policy
        self.out = out if out is not None else sys.stdout
        self.make_plots = plots

    # ---- helpers ---------------------------------------------------------------------------------
    def say(self, message: str) -> None:
        """Print a progress line (rank 0 only: one line per run, not one per rank)."""
        if dist.is_main_process():
            print(message, file=self.out, flush=True)

    @property
    def state_path(self) -> Path:
        return self.run_dir / PIPELINE_STATE_FILE

    def _write_state(self, completed: list[dict[str, Any]]) -> None:
        atomic_write_json(
            self.state_path,
            {"format": STATE_FORMAT, "version": STATE_VERSION, "plan": [list(p) for p in self.plan], "completed": completed},
        )

    def _read_state(self) -> dict[str, Any]:
        """``pipeline_state.json``, checked: a JSON object of this format and version whose ``completed``
        entries name a stage and folder (errors name the file and the field)."""
        path = self.state_path
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            found = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ConfigError(f"{path}: `format` is {found!r}, expected {STATE_FORMAT!r}")
        if state.get("version", 1) != STATE_VERSION:
            raise ConfigError(
                f"{path}: `version` is {state['version']!r}, this version of pettingllms reads {STATE_VERSION}"
            )
        completed = state.get("completed")
        if not isinstance(completed, list):
            raise ConfigError(f"{path}: field 'completed' must be a list, got {type(completed).__name__}")
        for i, entry in enumerate(completed):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("stage", "folder")):
                raise ConfigError(f"{path}: completed[{i}] must hold the strings 'stage' and 'folder', got {entry!r}")
            if not isinstance(entry.get("metrics", {}), dict):
                raise ConfigError(f"{path}: completed[{i}].metrics must be an object")
        return state

    def _finished_no_stage(self) -> bool:
        """Whether the run folder holds a run that ended before its first stage finished (nothing to keep)."""
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(state, dict) and state.get("format") == STATE_FORMAT and state.get("completed") == []

    def _prepare(self) -> list[dict[str, Any]]:
        """Check the run folder against resume / overwrite; returns the stages already done."""
        if self._finished_no_stage():
            asked = "--resume: " if self.resume else ""
            self.say(
                f"{asked}{self.run_dir} holds a run that ended before its first stage finished; starting afresh"
            )
            self._remove_previous_run()
            self.resume = False  # nothing of the old run is continued
            return self._start()
        if self.resume:
            if not self.state_path.is_file():
                raise ConfigError(
                    f"`run.resume`: {self.run_dir} holds no pipeline run to resume (no {PIPELINE_STATE_FILE})"
                )
            remove_stale_temporaries(self.run_dir)
            config_path = self.run_dir / RESOLVED_CONFIG_FILE
            saved = migrate_saved_config(load_yaml_file(config_path), config_path)  # keys of earlier versions
            saved.setdefault("imports", [])  # a run saved before configs had `imports` imported none
            changed = config_differences(saved, self.config, ignore=RUN_SWITCHES)
            if changed:
                raise ConfigError(
                    f"`run.resume`: the config differs from the one {self.run_dir} was started with "
                    f"({config_path}), at {changed[:8]}; resume with the same config"
                )
            completed = list(self._read_state()["completed"])
            for entry, (stage, folder) in zip(completed, self.plan):
                if (entry["stage"], entry["folder"]) != (stage, folder):
                    raise ConfigError(f"{self.state_path}: stage {entry['folder']!r} does not match the plan {self.plan}")
            return completed
        if self.state_path.is_file():
            if not self.overwrite:
                raise ConfigError(
                    f"`run.output_dir` {self.run_dir} already holds a pipeline run; continue it with --resume "
                    "(run.resume=true) or start over with --overwrite (run.overwrite=true), or pick another "
                    "run.output_dir"
                )
            self._remove_previous_run()
        return self._start()

    def _prepare_on_main(self) -> list[dict[str, Any]]:
        """:meth:`_prepare` on rank 0 alone (the only rank that touches the folder); the other ranks get its
        outcome (the stages done and whether the run resumes) or raise its error, so none waits forever."""
        if dist.world_size() == 1:
            return self._prepare()
        if dist.is_main_process():
            try:
                completed = self._prepare()
            except ConfigError as error:
                dist.gather_objects(("config", str(error), None))
                raise
            except Exception as error:
                dist.gather_objects(("failed", f"{type(error).__name__}: {error}", None))
                raise
            dist.gather_objects(("done", completed, self.resume))
            return completed
        kind, value, resume = dist.gather_objects(None)[0]
        if kind == "config":
            raise ConfigError(value)
        if kind == "failed":
            raise RuntimeError(f"rank 0 failed to prepare the run folder {self.run_dir}: {value}")
        self.resume = resume
        return value

    def _start(self) -> list[dict[str, Any]]:
        """A fresh run folder: the resolved config and a state with no stage done."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_resolved_config(self.config, self.run_dir)
        self._write_state([])
        return []

    def _remove_previous_run(self) -> None:
        try:
            state = self._read_state()
        except ConfigError:  # a damaged state still names no other folders than this plan's
            state = {"plan": self.plan}
        folders = {folder for _, folder in state.get("plan", [])} | {POLICIES_DIR, PLOTS_DIR}
        for name in sorted(folders):
            path = self.run_dir / name
            if path.is_dir() and path.resolve().parent == self.run_dir.resolve():
                shutil.rmtree(path)
        for name in ("metrics.jsonl", RESOLVED_CONFIG_FILE, PIPELINE_STATE_FILE, CONTAMINATION_FILE):
            (self.run_dir / name).unlink(missing_ok=True)

    # ---- run -------------------------------------------------------------------------------------
    def run(self) -> PipelineResult:
        """Run (or resume) every stage; returns the :class:`PipelineResult`."""
        from comlrl.reporting import MetricsLogger

        completed = self._prepare_on_main()
        main, size = dist.is_main_process(), dist.world_size()
        if main and self.contamination is not None:
            atomic_write_json(self.run_dir / CONTAMINATION_FILE, self.contamination)
        seed = self.config["run"]["seed"]
        seed_everything(seed)  # the global streams, for code we do not control (model loading, user code)
        if self._policy is None:
            model, level = self.config["model"], self.config["policy"]["level"]
            self.say(f"loading model {model['name']} (policy level {level}, device {model['device']}) ...")
        policy = self._policy if self._policy is not None else self._build_policy()
        worker = make_env_worker(self.config)
        saved = [e["policies"] for e in completed if e.get("policies")]
        if saved:  # continue from the policies the last finished training stage left
            policy.load_weights_(self.run_dir / saved[-1])
        run_logger = MetricsLogger(self.run_dir, "none") if main else dist.RankMetricsLogger()
        run_logger.truncate_after(len(completed))
        result = PipelineResult(self.run_dir)
        for entry in completed:
            result.stages[entry["folder"]] = entry["metrics"]

        total = len(self.plan)
        ranks = f" (data-parallel over {size} processes)" if size > 1 else ""
        self.say(f"pipeline {self.run_dir}: {' -> '.join(folder for _, folder in self.plan)}{ranks}")
        generation = self._generation_backend(policy)
        try:
            for index, (stage, folder) in enumerate(self.plan, start=1):
                if index <= len(completed):
                    self.say(f"[{index}/{total}] {folder}: done (resumed run)")
                    continue
                self.say(f"[{index}/{total}] {folder} ...")
                if self.config["run"].get("backend") == "ray" and stage not in RAY_STAGES:
                    self.say(f"[{index}/{total}] {folder}: stage `{stage}` has no Ray version; it runs in the driver process")
                context = StageContext(
                    stage, folder, self.config, policy, self.run_dir, worker, resume=self.resume,
                    progress=self.progress and main, settings=self.settings[folder], generation=generation,
                    previous_folder=self.plan[index - 2][1] if index > 1 else None,
                    next_stage=self.plan[index][0] if index < total else None,
                )
                if main:
                    context.stage_dir.mkdir(parents=True, exist_ok=True)
                started = time.perf_counter()
                # Each stage starts from its own seed, so a stage rerun by a resume starts as it did the first time.
                seed_everything(derive_seed(seed, "stage", folder))
                metrics = {k: float(v) for k, v in STAGE_RUNNERS[stage](context).items()}
                entry: dict[str, Any] = {
                    "stage": stage, "folder": folder, "metrics": metrics, "seconds": time.perf_counter() - started,
                }
                if stage in TRAINING_STAGES:
                    if main:
                        policy.save(context.stage_dir / POLICIES_DIR)
                    entry["policies"] = f"{folder}/{POLICIES_DIR}"
                run_logger.log({f"{folder}/{k}": v for k, v in metrics.items()}, step=index)
                completed.append(entry)
                if main:
                    self._write_state(completed)
                dist.barrier()  # the next stage may read this one's policies and the state (eval.json names them)
                result.stages[folder] = metrics
                self.say(f"[{index}/{total}] {folder}: {_describe(stage, metrics, self.config)}")
        finally:
            if generation is not None:
                generation.close()
        run_logger.close()

        plots: list[Path] = []
        if main:
            policy.save(self.run_dir / POLICIES_DIR)
            if self.make_plots:
                from pettingllms.plots import plot_run

                plots = plot_run(self.run_dir)
        result.plots = dist.gather_objects(plots)[0]  # also waits for rank 0's files
        result.success_before, result.success_after = success_summary(self.plan, result.stages)
        self.say(self.summary(result))
        return result

    def _generation_backend(self, policy: Any) -> Any:
        """The run's shared generation backend (``rollout.backend: vllm``: its engines start once, here,
        from the policy's current weights), or None (HF on the live policy). Under ``run.backend: ray`` the
        RL stages' RolloutWorkers hold their own and the stages run in the driver use HF."""
        from pettingllms.execution.generation import make_generation_backend

        if self.config["rollout"].get("backend", "hf") != "vllm":
            return None
        if self.config["run"].get("backend", "local") == "ray":
            self.say("rollout.backend vllm under run.backend ray: the RolloutWorkers generate with vLLM; "
                     "stages run in the driver (sft, eval) generate with HF")
            return None
        self.say("starting the vLLM engine(s) (rollout.backend vllm) ...")
        backend = make_generation_backend(self.config, policy)
        self.say(backend.describe())
        return backend

    def _build_policy(self) -> Any:
        """The config's policy; under a launcher rank 0 first, so a preset is built into the model cache
        once (the other ranks then load it)."""
        if dist.is_main_process():
            policy = build_run_policy(self.config)
        dist.barrier()
        if not dist.is_main_process():
            policy = build_run_policy(self.config)
        return policy

    def summary(self, result: PipelineResult) -> str:
        """The closing lines: success before / after, where the policies and plots are."""
        section = self.config["eval"]
        evals = [result.stages[folder] for stage, folder in self.plan if stage == "eval" and folder in result.stages]
        what = (
            f"{_instance_count(section, evals[-1] if evals else {})} held-out instances x {section['num_samples']} sample(s), "
            f"{'greedy' if section['temperature'] == 0 else 'temperature ' + str(section['temperature'])}"
        )
        lines = []
        before, after = result.success_before, result.success_after
        if section.get("benchmarks"):
            lines.extend(_benchmark_lines(list(section["benchmarks"]), *before_after_folders(self.plan, result.stages),
                                          result.stages))
        elif before is not None and after is not None:
            lines.append(f"success before {before:.3f} -> after {after:.3f} ({after - before:+.3f}) on {what}")
        elif after is not None or before is not None:
            lines.append(f"success {after if after is not None else before:.3f} on {what}")
        lines.append(f"policies: {self.run_dir / POLICIES_DIR}")
        if result.plots:
            lines.append(f"plots: {', '.join(str(p) for p in result.plots)}")
        return "\n".join(lines)


def _benchmark_lines(names: Sequence[str], before: str | None, after: str | None,
                     stages: Mapping[str, Mapping[str, float]]) -> list[str]:
    """One closing line per benchmark: its success before and after training, each on the instances it
    played (``eval_before`` may play fewer: ``eval.before_training_instances``)."""

    def part(folder: str | None, name: str) -> str | None:
        metrics = stages.get(folder, {}) if folder is not None else {}
        if f"{name}/success_rate" not in metrics:
            return None
        return f"{metrics[f'{name}/success_rate']:.3f} on {int(metrics[f'{name}/num_problems'])}"

    lines = []
    for name in names:
        first, last = part(before, name), part(after, name)
        if first is not None and last is not None and before != after:
            lines.append(f"{name}: success before {first} -> after {last} held-out instances")
        elif last is not None or first is not None:
            lines.append(f"{name}: success {last if last is not None else first} held-out instances")
    return lines


def _training_rollouts(stage: str, config: Mapping[str, Any]) -> str:
    """How the training success was sampled: a tree's best-branch success runs above held-out success."""
    trainer, rollout = at_grpo_config(stage, config, ".", progress=False), rollout_config(config)
    k = rollout.num_generations
    if trainer.sampling_mode != "tree":
        return f"mean over steps of K={k} sampled trajectories per problem"
    kept = "the best" if rollout.greedy_branch else "candidate 0"
    return (
        f"mean over steps; tree rollouts: each decision continues from {kept} of K={k} candidates, held-out "
        "eval plays each decision once"
    )


def _instance_count(section: Mapping[str, Any], metrics: Mapping[str, float]) -> Any:
    """How many instances an eval played: its metrics' count (``eval.num_instances: null`` is a whole split)."""
    return int(metrics["num_problems"]) if "num_problems" in metrics else section["num_instances"]


def _describe(stage: str, metrics: Mapping[str, float], config: Mapping[str, Any]) -> str:
    names = list(config["eval"].get("benchmarks") or {}) if stage == "eval" else []
    if names:  # one clause per benchmark: "apps 0.200 on 40 | humaneval 0.050 on 164"
        return " | ".join(
            f"{name} {metrics[f'{name}/success_rate']:.3f} on {int(metrics[f'{name}/num_problems'])}"
            for name in names if f"{name}/success_rate" in metrics
        )
    if stage == "eval":
        section = config["eval"]
        samples = int(section["num_samples"])
        how = "greedy" if section["temperature"] == 0 else f"temperature {section['temperature']}"
        line = (
            f"success {metrics['success_rate']:.3f} on {_instance_count(section, metrics)} held-out instances x "
            f"{samples} sample{'s' * (samples != 1)}, {how}"
        )
        if samples > 1 and f"pass@{samples}" in metrics:
            line += f" | pass@{samples} {metrics[f'pass@{samples}']:.3f}"
        return line
    if stage == "sft":
        if "sft/loss_first" in metrics:
            epochs, steps = int(config["sft"]["num_train_epochs"]), int(metrics["sft/steps"])
            if epochs == 1:
                return f"mean loss {metrics['sft/loss_first']:.3f} over 1 epoch ({steps} steps)"
            return (
                f"mean loss {metrics['sft/loss_first']:.3f} (epoch 1) -> {metrics['sft/loss_last']:.3f} "
                f"(epoch {epochs}) ({steps} steps)"
            )
        return "no demonstrations"
    if stage in ("at_grpo", "grpo"):
        parts = [f"{int(metrics['steps'])} steps"]
        if "mean/success_rate" in metrics:
            parts.append(f"training success {metrics['mean/success_rate']:.3f} ({_training_rollouts(stage, config)})")
        return ", ".join(parts)
    return ", ".join(f"{k} {v:g}" for k, v in metrics.items() if k.startswith("pairs") or k == "iter/current_win_rate")
