"""The ``pettingllms`` command line.

::

    pettingllms train CONFIG [section.key=value ...] [--resume] [--overwrite] [--no-progress]
    pettingllms eval [CONFIG] (--checkpoint DIR | --policy NAME) [section.key=value ...] [--output FILE]
    pettingllms plan CONFIG [section.key=value ...] [--json] [--device-memory GIB] [--resources CPU=N,GPU=M]
    pettingllms configs
    pettingllms envs
    pettingllms dataprocess {sudoku-bank,demos,code,math,search} ...
    pettingllms show RUN_DIR [--stage NAME] [--episode N] [--html PATH]

Every command takes ``--import MODULE`` (repeatable, anywhere on the line): your own module, imported first
(an environment, agents, scripted policies it registers); a config's ``imports: [...]`` does the same.
CONFIG is a YAML file or a shipped config named ``<env>/<name>`` (``plan_path/L1``, ``plan_path/quickstart``;
``pettingllms configs`` lists them). Also reachable as ``python -m pettingllms ...``. Bad input (a config,
override, model, data path or argument) exits with status 2 and a one-line error naming it (no traceback),
before a run folder is made; an interrupted run exits with 130 and says how to resume it. ``plan`` prints
the placement and the per-device memory estimate (:mod:`pettingllms.workers.memory`) and exits with 2 and
one line naming the device and how much it is short when the estimate or the placement does not fit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pettingllms.scripts import help_text
from pettingllms.scripts.guard import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    UsageParser,
    add_import_argument,
    run_guarded,
    take_imports,
)

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "list_configs",
    "list_registered",
    "main",
    "plan",
    "run_guarded",
]


def list_registered() -> str:
    """The registered environments with their agent roles, and the env workers, as text."""
    from pettingllms.registry import list_agents, list_envs, list_workers

    lines = ["environments (agents by role):"]
    envs = list_envs()
    width = max((len(e) for e in envs), default=0)
    for env in envs:
        roles = [name.split(".", 1)[1] if name.startswith(env + ".") else name for name in list_agents(env)]
        lines.append(f"  {env.ljust(width)}  {', '.join(roles) if roles else '(no agents)'}")
    lines.append(f"env workers: {', '.join(list_workers()) or '(none)'}")
    lines.append("levels: L0 single agent | L1 shared model | L2 LoRA per agent | L3 model per agent")
    return "\n".join(lines)


def list_configs() -> str:
    """Every shipped config as ``<env>/<name>`` with its one-line description, as text."""
    from pettingllms.config.loader import config_descriptions

    descriptions = config_descriptions()
    width = max((len(name) for name in descriptions), default=0)
    lines = ["shipped configs (pettingllms train <env>/<name>; a YAML file path works too):"]
    lines += [f"  {name.ljust(width)}  {text}" for name, text in descriptions.items()]
    return "\n".join(lines)


def _envs(args: argparse.Namespace) -> int:
    print(list_registered())
    return 0


def _configs(args: argparse.Namespace) -> int:
    print(list_configs())
    return 0


def _resources(text: str) -> dict[str, float]:
    """``"CPU=16,GPU=8"`` -> ``{"CPU": 16.0, "GPU": 8.0}`` (``--resources``)."""
    out = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected RESOURCE=NUMBER pairs like CPU=16,GPU=8, got {part!r}") from None
    return out


def plan(args: argparse.Namespace) -> int:
    """``pettingllms plan``: the placement and the memory per device; exit 2 and one line when it does not fit."""
    from pettingllms.config import load_config, validate_config
    from pettingllms.config.contract import check_command
    from pettingllms.workers.memory import plan_run
    from pettingllms.workers.placement import PlacementError

    config = load_config(args.config, list(args.overrides), getattr(args, "imports", ()))
    validate_config(config)
    check_command(config, "plan")  # a declared random policy can play (pettingllms.config.contract)
    kind = "gpu" if str(config["model"]["device"]).startswith("cuda") else "cpu"
    capacity = None if args.device_memory is None else {kind: int(args.device_memory * 2**30)}
    try:
        result = plan_run(config, capacity=capacity, resources=args.resources, fsdp_shards=args.fsdp)
    except PlacementError as error:
        print(f"pettingllms: error: does not fit: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(result.to_json())
    else:
        sizes = result.sizes
        fsdp = f", one rank of FSDP over {sizes['fsdp_shards']}" if sizes["fsdp_shards"] > 1 else ""
        print(f"plan of {args.config} (run.backend {result.backend}{fsdp}, model {sizes['model']}: "
              f"{sizes['parameters']:,} parameters, {sizes['dtype_bytes']} bytes each; prompts <= "
              f"{sizes['prompt_tokens']} tokens, completions <= {sizes['completion_tokens']})")
        if result.placement is not None:
            print(result.placement.describe())
            if args.resources is None and config["run"]["ray_address"] is not None:
                print(f"  (the resources of the cluster at {config['run']['ray_address']} are checked when the run joins it)")
        print(result.render_table())
    if not result.fits:
        print(f"pettingllms: error: does not fit: {result.shortfalls[0]}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config file, or a shipped config as <env>/<name> (e.g. plan_path/L3)")
    parser.add_argument("overrides", nargs="*", default=[], metavar="section.key=value", help="config overrides")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--device-memory", type=float, default=None, metavar="GIB",
        help="plan for devices of this many GiB (a GPU's memory, or the host's for cpu) instead of this machine's",
    )
    parser.add_argument(
        "--resources", type=_resources, default=None, metavar="CPU=N,GPU=M",
        help="check the Ray placement against these cluster resources instead of this machine's",
    )
    parser.add_argument(
        "--fsdp", type=int, default=1, metavar="N",
        help="plan one rank of an FSDP launch over N processes (accelerate's FSDP config / ACCELERATE_USE_FSDP=true)",
    )


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser and one parser per command."""
    from pettingllms.scripts import dataprocess, evaluate, show, train

    parser = UsageParser(
        prog="pettingllms",
        description="Train and evaluate teams of LLM agents on multi-agent environments. Start with: "
        "pettingllms configs (the shipped configs), then pettingllms train plan_path/quickstart.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,eval,show,plan,configs,envs,dataprocess}")
    commands: dict[str, argparse.ArgumentParser] = {}
    for name, module, text in (
        ("train", train, "run a config's pipeline (sft, at_grpo, grpo, madpo, marlhf, eval)"),
        ("eval", evaluate, "held-out success of saved policies or a scripted policy (oracle, random)"),
        ("show", show, "render an episode of a run's transcripts turn by turn (terminal or --html PATH)"),
        ("dataprocess", dataprocess, "pre-generate puzzle banks, demonstration sets, normalised code, math and QA benchmarks, search indexes"),
    ):
        command = sub.add_parser(
            name, help=text, description=help_text(module.__doc__ or text),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(command)
        command.set_defaults(handler=module.run)
        commands[name] = command
    commands["plan"] = sub.add_parser(
        "plan", help="the placement and the memory per device of a config, before launch",
        description="The Ray placement and a per-device memory estimate (weights, gradients, optimizer states, "
        "activations, KV cache) of a config; exit status 2 when it does not fit. How the estimate is made: "
        "docs/scaling.md.",
    )
    _plan_arguments(commands["plan"])
    commands["plan"].set_defaults(handler=plan)
    for name, handler, text in (
        ("configs", _configs, "list the shipped configs with their descriptions"),
        ("envs", _envs, "list the registered environments and agents"),
    ):
        commands[name] = sub.add_parser(name, help=text, description=text)
        commands[name].set_defaults(handler=handler)
    for command in (parser, *commands.values()):
        add_import_argument(command)
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    # The user's modules first (`--import MODULE`, anywhere on the line): they may register what the rest names.
    status, imports, argv = take_imports(list(sys.argv[1:] if argv is None else argv))
    if status:
        return status
    parser, commands = build_parser()
    if argv and argv[0] in ("train", "eval", "plan"):
        # Overrides may come before or after the options (`eval CONFIG --checkpoint DIR key=value`).
        command = commands[argv[0]]
        args = command.parse_intermixed_args(argv[1:])
    else:
        args = parser.parse_args(argv)
    args.imports = imports
    return run_guarded(args.handler, args)


if __name__ == "__main__":
    raise SystemExit(main())
