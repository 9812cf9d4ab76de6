"""How every entry point reports failure: a user error (bad config, override, argument or registry name) in
one line with exit status 2, Ctrl-C with status 130 and a hint to resume. The command line
(:mod:`pettingllms.cli`) and each script's ``main`` run their handler through :func:`run_guarded`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "UsageError", "run_guarded"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A user error the command line reports in one line with exit status 2."""


def run_guarded(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``handler(args)``, with user errors (a bad config, override or argument) reported in one line on
    stderr and exit status 2; Ctrl-C exits with 130 and a hint to resume."""
    from pettingllms.config import ConfigError
    from pettingllms.registry import RegistryError

    try:
        return int(handler(args) or 0)
    except (ConfigError, UsageError, RegistryError) as error:
        print(f"pettingllms: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(
            "pettingllms: interrupted; continue with the same command plus --resume (checkpoints are kept)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
