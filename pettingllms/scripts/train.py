"""``pettingllms train CONFIG [section.key=value ...]``: run a config's pipeline (see :mod:`pettingllms.pipeline`).

CONFIG is a YAML path or a shipped config named ``<env>/<name>`` (``plan_path/L1``; ``pettingllms configs``
lists them); overrides are dotted ``section.key=value`` pairs, type-checked against the config's schema.
The config, the model and the data it names are checked before the run folder (``run.output_dir``) is
made. A folder holding a run with finished stages is continued with ``--resume`` or replaced with
``--overwrite``; one whose run ended before its first stage finished is started afresh.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pettingllms.scripts import quiet_model_io

__all__ = ["add_arguments", "main", "run", "train"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config", help="config file, or a shipped config as <env>/<name> (e.g. plan_path/L1; pettingllms configs lists them)"
    )
    # default=[]: without it argparse lists the (optional) overrides as a missing required argument.
    parser.add_argument("overrides", nargs="*", default=[], metavar="section.key=value", help="config overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in run.output_dir (run.resume=true)")
    parser.add_argument(
        "--overwrite", action="store_true", help="start afresh over an earlier run in run.output_dir (run.overwrite=true)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars or per-step table")


def train(config: str, overrides: Sequence[str] = (), imports: Sequence[str] = ()):
    """Load ``config`` with ``overrides`` (after importing the user's modules ``imports`` and the config's own)
    and run its pipeline; returns the :class:`~pettingllms.pipeline.PipelineResult`."""
    from pettingllms.config import load_config
    from pettingllms.pipeline import Pipeline

    return Pipeline(load_config(config, list(overrides), imports)).run()


def run(args: argparse.Namespace) -> int:
    quiet_model_io()
    overrides = list(args.overrides)
    for flag, key in (("resume", "run.resume=true"), ("overwrite", "run.overwrite=true"), ("no_progress", "run.progress=false")):
        if getattr(args, flag):
            overrides.append(key)
    train(args.config, overrides, getattr(args, "imports", ()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.scripts.guard import script_main

    return script_main(
        argv, module="pettingllms.scripts.train", doc=__doc__, add_arguments=add_arguments, run=run, intermixed=True
    )


if __name__ == "__main__":
    raise SystemExit(main())
