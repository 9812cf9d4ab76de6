"""pettingllms eval [CONFIG] (--checkpoint DIR | --policy NAME) [section.key=value ...] [--output FILE]

Held-out success of saved policies, or of an environment's scripted policy. Give exactly one of:

  --checkpoint DIR  saved policies: a policies/ folder (it holds policy_layout.json), a checkpoint-N/
                    folder, or a run folder (its policies/ are evaluated).
  --policy NAME     a scripted policy of the environment, played through the same rollout engine
                    without loading any model: oracle, random, or scripted:NAME for another policy the
                    environment declares. It checks an environment and its instances before training.
                    `--policy api` plays every role with a hosted model behind an HTTP API instead
                    (comlrl.rollout.APIBackend; no model loaded), set by the rollout.api_* keys:
                    rollout.api_url, rollout.api_model, rollout.api_format (openai, anthropic,
                    openai_responses, generic), rollout.api_key_env (the variable holding the key).

With rollout.backend=vllm, saved policies are played through vLLM engines (the `vllm` extra).

CONFIG is a YAML file or a shipped config named <env>/<name> (plan_path/L1; pettingllms configs lists
them). It names the environment, the policy level and the eval section: the held-out instances
(eval.seed_start, eval.num_instances), the samples per instance (eval.num_samples) and their temperature
(eval.temperature; 0 is greedy). When DIR is a run folder or lies inside one, CONFIG may be left out: the
run's resolved config (RUN/config.yaml) is used, its eval section included, so the command evaluates the
policies the way the run evaluated itself and reproduces its final eval. Overrides apply on top.

Saved policies must fit the config: their level and roles must be the config's policy.level and roles,
and when DIR lies in a run and CONFIG is given, the config must play the trained team: env.name and every
env setting of the team (roles, turn order, tools, prompts, turns, rewards) must be the run's, while the
settings that select and judge the evaluation data may differ (dataset, split, data_dir, compare,
time limits, ... and rollout.max_completion_length): `pettingllms eval code/humaneval --checkpoint
runs/code_train_apps` evaluates a team trained on APPS on HumanEval. A mismatch is an error naming both
values and what may differ; an env setting changed by an override (env.rows=5) is taken as deliberate. A
policies folder outside a run needs CONFIG.

The config's eval.benchmarks (several evaluation sets, each with its dataset, split and instances) are
evaluated one after the other: `pettingllms eval --checkpoint RUN` re-evaluates a finished run on every
benchmark it reported, and the report then holds one block per benchmark (benchmarks.<name>) and the
summary one line per benchmark.

The JSON report goes to --output FILE, by default eval_results.json in the run folder (DIR inside a run)
or in the config's run.output_dir, never inside a policies folder. It holds metrics (success_rate,
num_problems, num_trajectories, per-agent reward and parse-error rates, and with num_samples > 1 the
unbiased pass@k for k = 1, 2, 4, ... up to num_samples), per_problem (success rate per instance seed) and
the settings used: seeds ([start, stop)), num_samples, temperature, run_seed, policy and config. The
summary line states the same. With eval.transcripts_rate > 0 (1.0: every episode) the drawn episodes are
written, with the state after every step, to rollouts.jsonl in a folder named after the report
(eval_results/ beside eval_results.json), which the report names under transcripts; pettingllms show
renders them. A progress bar on stderr counts finished trajectories (--no-progress or
run.progress=false hides it).

Examples:
  pettingllms eval --checkpoint runs/quickstart
  pettingllms eval --checkpoint runs/quickstart eval.num_instances=200 eval.seed_start=2000000
  pettingllms eval plan_path/L1 --checkpoint runs/plan_path_L1/at_grpo/checkpoint-10
  pettingllms eval plan_path/L1 --policy oracle eval.num_instances=20
  pettingllms eval plan_path/L1 --policy api rollout.api_url=http://127.0.0.1:8000/v1/chat/completions \
      rollout.api_model=my-model
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pettingllms.scripts import quiet_model_io
from pettingllms.scripts.guard import UsageError

__all__ = [
    "REPORT_FILE",
    "add_arguments",
    "evaluate",
    "find_run",
    "main",
    "policy_folder",
    "run",
    "scripted_policy_name",
    "transcripts_dir",
]

REPORT_FILE = "eval_results.json"
POLICIES_DIR = "policies"
SCRIPTED_PREFIX = "scripted:"
# Names that mean scripted:<name> on their own.
SHORT_SCRIPTED = ("oracle", "random")
# `--policy api`: a hosted model (rollout.api_*) plays every role.
API_POLICY = "api"
# A run's saved policies arrangement (policy_layout.json) -> the policy level that builds it.
_ARRANGEMENT_LEVEL = {"shared": "L1", "lora": "L2", "per_agent": "L3", "mapping": "L3"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # No mutually exclusive group: `--checkpoint` / `--policy` are checked in `evaluate`, so that leaving
    # both out or giving both is a one-line error like every other user error.
    parser.add_argument(
        "config", nargs="?", default=None,
        help="config file or shipped config <env>/<name> (optional when DIR is, or lies in, a run folder)",
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    parser.add_argument(
        "--checkpoint", type=Path, default=None, metavar="DIR",
        help="saved policies: a policies/ or checkpoint-N/ folder, or a run folder",
    )
    parser.add_argument(
        "--policy", default=None, metavar="NAME",
        help="the environment's scripted policy instead of saved ones: oracle | random | scripted:NAME; "
        "or api: a hosted model (rollout.api_url, rollout.api_model, ...)",
    )
    parser.add_argument(
        "--output", type=Path, default=None, metavar="FILE",
        help=f"JSON report (default: {REPORT_FILE} in the run folder or in run.output_dir)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# ---- what to evaluate ------------------------------------------------------------------------------


def find_run(path: str | Path) -> Path | None:
    """The run folder ``path`` is or lies in: the nearest folder at or above it that holds a run's resolved
    config and pipeline state (None when there is none). Relative in, relative out."""
    from pettingllms.config.loader import RESOLVED_CONFIG_FILE
    from pettingllms.pipeline import PIPELINE_STATE_FILE

    path = Path(path)
    absolute = path.absolute()
    for folder in (absolute, *absolute.parents):
        if (folder / RESOLVED_CONFIG_FILE).is_file() and (folder / PIPELINE_STATE_FILE).is_file():
            return folder if path.is_absolute() else Path(os.path.relpath(folder))
    return None


def policy_folder(path: str | Path) -> Path:
    """The saved-policy folder ``path`` names (itself, or its ``policies/``); an error names what is
    missing and, in a run, the saved policies there are."""
    from comlrl.policy import LAYOUT_FILE

    path = Path(path)
    if not path.exists():
        raise UsageError(f"`--checkpoint` {path} does not exist")
    if not path.is_dir():
        raise UsageError(f"`--checkpoint` {path} is a file; give the folder that holds {LAYOUT_FILE}")
    if (path / LAYOUT_FILE).is_file():
        return path
    if (path / POLICIES_DIR / LAYOUT_FILE).is_file():
        return path / POLICIES_DIR
    found = sorted(str(p.parent) for pattern in (f"*/{LAYOUT_FILE}", f"*/*/{LAYOUT_FILE}") for p in path.glob(pattern))
    hint = f"; saved policies under it: {', '.join(found[:6])}" if found else ""
    raise UsageError(
        f"`--checkpoint` {path} holds no saved policies: expected {path / LAYOUT_FILE} (a policies/ or "
        f"checkpoint-N/ folder) or {path / POLICIES_DIR / LAYOUT_FILE} (a finished run){hint}"
    )


def scripted_policy_name(spec: str) -> str:
    """The scripted policy ``--policy`` names: ``oracle`` and ``random`` alone, any other as ``scripted:NAME``."""
    if spec.startswith(SCRIPTED_PREFIX) and spec[len(SCRIPTED_PREFIX):]:
        return spec[len(SCRIPTED_PREFIX):]
    if spec in SHORT_SCRIPTED:
        return spec
    from comlrl.validation import closest_name

    close = closest_name(spec, [*SHORT_SCRIPTED, API_POLICY])
    guess = f"did you mean {close!r}? " if close else ""
    raise UsageError(
        f"`--policy` {spec!r}: {guess}expected {', '.join(SHORT_SCRIPTED)}, {API_POLICY} or {SCRIPTED_PREFIX}NAME "
        "(a scripted policy of the environment); saved policies are evaluated with --checkpoint DIR"
    )


@dataclass
class _Target:
    """A resolved evaluation: the config, what it is called, the policy (a folder or a scripted name)."""

    config: dict[str, Any]
    config_name: str
    policy_name: str
    folder: Path | None = None
    scripted: str | None = None
    run_dir: Path | None = None


def _load(config: str | Path, overrides: Sequence[str], imports: Sequence[str] = ()) -> dict[str, Any]:
    from pettingllms.config import load_config, validate_config

    resolved = load_config(config, list(overrides), imports)
    # Evaluation plays the eval section alone, in this process, reporting to no tracker: the training stages'
    # seeds (a dataset's train split, which need not even exist here), `run.report_to` and `run.backend` (and
    # the packages they need) are not this command's business.
    run = {**resolved["run"], "report_to": "none", "backend": "local"}
    validate_config({**resolved, "pipeline": ["eval"], "run": run})
    return resolved


def _checkpoint_target(config: str | None, checkpoint: Path, overrides: Sequence[str], imports: Sequence[str]) -> _Target:
    from comlrl.policy import read_layout
    from pettingllms.config.loader import RESOLVED_CONFIG_FILE

    folder = policy_folder(checkpoint)
    run_dir = find_run(folder)
    if config is None:
        if run_dir is None:
            raise UsageError(
                f"`--checkpoint` {checkpoint} is not in a run folder (no {RESOLVED_CONFIG_FILE} with a pipeline "
                f"state above it): give the CONFIG the policies were trained with, e.g. pettingllms eval "
                f"plan_path/L1 --checkpoint {checkpoint}"
            )
        # run.progress is a switch of the command that made the run, not a setting of its evaluation.
        run_config = run_dir / RESOLVED_CONFIG_FILE
        resolved = _load(run_config, ["run.progress=true", *overrides], imports)
        name = str(run_config)
    else:
        resolved = _load(config, overrides, imports)
        name = str(config)
        if run_dir is not None:
            _check_against_run(resolved, overrides, name, run_dir)
    try:
        layout = read_layout(folder)
    except ValueError as error:
        raise UsageError(f"`--checkpoint` {folder}: {error}") from error
    _check_layout(layout, resolved, folder, name)
    return _Target(resolved, name, str(folder), folder=folder, run_dir=run_dir)


def _check_against_run(resolved: Mapping[str, Any], overrides: Sequence[str], name: str, run_dir: Path) -> None:
    """CONFIG against the run that saved the checkpoint: the environment, the level and the trained team's
    env settings (:func:`~pettingllms.config.benchmarks.team_differences`: all but the environment's
    evaluation fields: dataset, split, data folder, comparison, time limits), except those an override sets
    (a deliberate change, e.g. a larger grid)."""
    from pettingllms.config.benchmarks import may_differ_text, team_differences
    from pettingllms.config.loader import RESOLVED_CONFIG_FILE, parse_override

    run_config = _load(run_dir / RESOLVED_CONFIG_FILE, ())
    where = f"the run {run_dir} that saved the checkpoint ({run_dir / RESOLVED_CONFIG_FILE})"
    overridden = {path[1] for path, _ in map(parse_override, overrides) if len(path) > 1 and path[0] == "env"}
    pairs = [("env.name", resolved["env"]["name"], run_config["env"]["name"]),
             ("policy.level", resolved["policy"]["level"], run_config["policy"]["level"])]
    pairs += [(f"env.{key}", resolved["env"].get(key), run_config["env"].get(key))
              for key in team_differences(resolved, run_config) if key not in overridden]
    for key, mine, theirs in pairs:
        if mine != theirs:
            if key in ("env.name", "policy.level"):
                raise UsageError(f"`{key}` is {mine!r} in {name} but {theirs!r} in {where}; leave CONFIG out to use "
                                 "the run's config")
            raise UsageError(
                f"`{key}` is {mine!r} in {name} but {theirs!r} in {where}: it is the trained team's (roles, turn order, "
                f"tools, prompts, turns and rewards), while {may_differ_text(resolved['env']['name'])}; leave CONFIG out "
                f"to use the run's config, or override `{key}` to change it deliberately"
            )


def _check_layout(layout: Mapping[str, Any], config: Mapping[str, Any], folder: Path, name: str) -> None:
    """The saved policies' level and roles against the config's ``policy.level`` and workflow."""
    from pettingllms.stages.context import run_workflow

    agents = list(layout["agents"])
    arrangement = layout["arrangement"]
    level = ("L0" if agents == ["single"] else "L1") if arrangement == "single" else _ARRANGEMENT_LEVEL.get(arrangement)
    wanted = config["policy"]["level"]
    if level != wanted:
        raise UsageError(
            f"`policy.level` is {wanted} in {name} but the checkpoint {folder} holds an {level} policy "
            f"(arrangement {arrangement!r}, agents {agents})"
        )
    roles = run_workflow(config)
    if agents != roles:
        raise UsageError(
            f"the checkpoint {folder} holds agents {agents} but {name} plays the roles {roles} "
            f"(`env.turn_order` at `policy.level` {wanted})"
        )


def _api_target(config: str | None, overrides: Sequence[str], imports: Sequence[str]) -> _Target:
    if config is None:
        raise UsageError(
            "`--policy api` needs a CONFIG (the environment and instances to play), e.g. pettingllms eval "
            "plan_path/L1 --policy api rollout.api_url=URL rollout.api_model=NAME"
        )
    resolved = _load(config, [*overrides, "rollout.backend=api"], imports)
    name = f"{API_POLICY}:{resolved['rollout']['api_model'] or resolved['rollout']['api_url']}"
    return _Target(resolved, str(config), name, scripted=API_POLICY)


def _scripted_target(config: str | None, spec: str, overrides: Sequence[str], imports: Sequence[str]) -> _Target:
    name = scripted_policy_name(spec)
    if config is None:
        raise UsageError(
            f"`--policy {spec}` needs a CONFIG (the environment and instances to play), e.g. "
            f"pettingllms eval plan_path/L1 --policy {spec}"
        )
    from pettingllms.config.contract import check_command

    resolved = _load(config, overrides, imports)
    check_command(resolved, "eval", name, spec)  # the policy is declared and can play (pettingllms.config.contract)
    return _Target(resolved, str(config), f"{SCRIPTED_PREFIX}{name}", scripted=name)


# ---- the evaluation --------------------------------------------------------------------------------


def evaluate(
    config: str | Path | None = None,
    *,
    checkpoint: str | Path | None = None,
    policy: str | None = None,
    overrides: Sequence[str] = (),
    output: str | Path | None = None,
    imports: Sequence[str] = (),
) -> dict[str, Any]:
    """Evaluate saved policies (``checkpoint``) or a scripted ``policy`` on the held-out instances of
    ``config`` (optional for a checkpoint in a run: the run's config), write the JSON report (returned,
    with ``output``: where it went; see the module docstring). ``imports``: the user's modules to import
    first (``--import``; the config's own ``imports`` are imported too)."""
    from comlrl.atomic_io import atomic_write_json
    from pettingllms.stages.context import make_env_worker
    from pettingllms.stages.eval import eval_plan, evaluate_benchmarks, scripted_router

    if (checkpoint is None) == (policy is None):
        both = "not both" if checkpoint is not None else "one is required"
        raise UsageError(
            f"give exactly one of --checkpoint DIR (saved policies, a checkpoint or a run folder) or --policy "
            f"NAME (oracle, random, scripted:NAME); {both}"
        )
    if checkpoint is not None:
        target = _checkpoint_target(None if config is None else str(config), Path(checkpoint), overrides, imports)
    elif policy == API_POLICY:
        target = _api_target(None if config is None else str(config), overrides, imports)
    else:
        target = _scripted_target(None if config is None else str(config), str(policy), overrides, imports)
    resolved = target.config
    home = target.run_dir if target.run_dir is not None else Path(resolved["run"]["output_dir"])
    destination = Path(output) if output is not None else home / REPORT_FILE
    generation = None
    if target.folder is not None:
        from comlrl.policy import MultiAgentPolicy
        from pettingllms.execution import build_router
        from pettingllms.execution.generation import make_generation_backend

        played = MultiAgentPolicy.load(target.folder, device=resolved["model"]["device"])
        generation = make_generation_backend(resolved, played)  # rollout.backend=vllm; else None (HF)
        if generation is not None:
            played = build_router(played, generation)
    elif target.scripted == API_POLICY:
        from pettingllms.execution.generation import api_router

        played = api_router(resolved)
    else:
        played = scripted_router(resolved, str(target.scripted))
    try:
        _, report = evaluate_benchmarks(
            played, eval_plan("eval", resolved), make_env_worker(resolved), progress=bool(resolved["run"]["progress"]),
            policy_name=target.policy_name, config_name=target.config_name,
            transcripts_dir=transcripts_dir(destination),
        )
    finally:
        if generation is not None:
            generation.close()
    atomic_write_json(destination, report)
    return {**report, "output": str(destination)}


def transcripts_dir(report: str | Path) -> Path:
    """Where an evaluation whose report goes to ``report`` writes its transcripts: the folder named after
    the report, beside it (``eval_results.json`` -> ``eval_results/rollouts.jsonl``)."""
    report = Path(report)
    return report.with_name(report.stem if report.suffix else f"{report.name}_transcripts")


def _positionals(config: str | None, overrides: Sequence[str]) -> tuple[str | None, list[str]]:
    """(CONFIG, overrides): with CONFIG left out, argparse hands the first override over as CONFIG."""
    if config is not None and "=" in config and not Path(config).exists():
        return None, [config, *overrides]
    return config, list(overrides)


def run(args: argparse.Namespace) -> int:
    from pettingllms.stages.eval import eval_summary

    quiet_model_io()
    config, overrides = _positionals(args.config, args.overrides)
    if args.no_progress:
        overrides.append("run.progress=false")
    report = evaluate(
        config, checkpoint=args.checkpoint, policy=args.policy, overrides=overrides, output=args.output,
        imports=getattr(args, "imports", ()),
    )
    written = f" | transcripts {report['transcripts']}" if "transcripts" in report else ""
    print(f"{eval_summary(report)} | report {report['output']}{written}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.scripts.guard import script_main

    return script_main(argv, module="pettingllms.scripts.evaluate", doc=__doc__, add_arguments=add_arguments, run=run, intermixed=True)


if __name__ == "__main__":
    raise SystemExit(main())
