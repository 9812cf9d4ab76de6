"""``pettingllms eval CONFIG --checkpoint DIR [section.key=value ...]``: held-out success of saved policies.

DIR is a saved policy folder (holding ``policy_layout.json``: a run's ``policies/``, a stage's
``policies/`` or a ``checkpoint-N/``) or a run folder (its ``policies/`` is used). The ``eval`` section
of the config names the instances (``seed_start``, ``num_instances``), ``num_samples`` and ``temperature``.
Prints the metrics and writes them as JSON (``--output``, default ``DIR/eval_results.json``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from pettingllms.scripts import quiet_model_io

__all__ = ["add_arguments", "evaluate_checkpoint", "main", "policy_folder", "run"]

LAYOUT_FILE = "policy_layout.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config file, or a shipped config as <env>/<level> (e.g. plan_path/L1)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides")
    parser.add_argument("--checkpoint", required=True, type=Path, help="saved policies, a checkpoint or a run folder")
    parser.add_argument("--output", type=Path, default=None, help="JSON report (default DIR/eval_results.json)")


def policy_folder(path: str | Path) -> Path:
    """The saved-policy folder ``path`` names (itself, or its ``policies/``); an error names what is missing."""
    from pettingllms.scripts.guard import UsageError

    path = Path(path)
    if (path / LAYOUT_FILE).is_file():
        return path
    if (path / "policies" / LAYOUT_FILE).is_file():
        return path / "policies"
    raise UsageError(
        f"`--checkpoint` {path} holds no saved policies: expected {path / LAYOUT_FILE} (a policies/ or "
        f"checkpoint-N/ folder) or {path / 'policies' / LAYOUT_FILE} (a run folder)"
    )


def evaluate_checkpoint(config: str, checkpoint: str | Path, overrides: Sequence[str] = (), output: str | Path | None = None) -> dict:
    """Load the policies saved at ``checkpoint``, evaluate them on ``config``'s held-out instances, write
    the JSON report (returned) to ``output`` (default ``<policy folder>/eval_results.json``)."""
    from comlrl.atomic_io import atomic_write_json
    from comlrl.policy import MultiAgentPolicy
    from pettingllms.config import load_config, validate_config
    from pettingllms.stages.context import make_env_worker
    from pettingllms.stages.eval import evaluate_policy

    resolved = load_config(config, list(overrides))
    validate_config(resolved)
    folder = policy_folder(checkpoint)
    policy = MultiAgentPolicy.load(folder, device=resolved["model"]["device"])
    _, report = evaluate_policy(policy, resolved, make_env_worker(resolved))
    report["checkpoint"] = str(folder)
    target = Path(output) if output is not None else folder / "eval_results.json"
    atomic_write_json(target, report)
    report["output"] = str(target)
    return report


def run(args: argparse.Namespace) -> int:
    quiet_model_io()
    report = evaluate_checkpoint(args.config, args.checkpoint, args.overrides, args.output)
    print(json.dumps(report["metrics"], indent=2, sort_keys=True))
    start, stop = report["seeds"]
    print(
        f"success {report['metrics']['success_rate']:.3f} on {stop - start} held-out instances "
        f"(seeds {start}..{stop - 1}) x {report['num_samples']} sample(s); report: {report['output']}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.scripts.guard import run_guarded

    parser = argparse.ArgumentParser(prog="python -m pettingllms.scripts.evaluate", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_guarded(run, parser.parse_intermixed_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
