"""How every entry point reports failure: a user error (bad config, override, argument, registry name, or a
model that cannot be found) in one line with exit status 2, Ctrl-C with status 130 and a hint to resume.
The command line (:mod:`pettingllms.cli`) and each script's ``main`` run their handler through
:func:`run_guarded`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "IMPORT_HELP",
    "UsageError",
    "UsageParser",
    "add_import_argument",
    "one_line",
    "run_guarded",
    "script_main",
    "take_imports",
    "user_errors",
]

IMPORT_HELP = (
    "import this module of yours first (repeatable), e.g. the package that registers your environment; "
    "also a config's imports: [...]"
)

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A user error the command line reports in one line with exit status 2."""


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and where to read more) with exit status 2, like the
    other user errors; its subcommand parsers are of this class too."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types that mean bad user input, not a bug (imported only when something failed)."""
    from comlrl.models.loading import ModelNotFoundError
    from comlrl.models.smollm2 import MissingOptionalModel
    from pettingllms.config import ConfigError
    from pettingllms.registry import RegistryError

    return (ConfigError, UsageError, RegistryError, ModelNotFoundError, MissingOptionalModel)


def one_line(text: str) -> str:
    """``text`` on one line: its lines (a YAML parser's message has several) joined by spaces."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


def run_guarded(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``handler(args)``, with user errors (:func:`user_errors`) reported in one line on stderr and exit
    status 2; Ctrl-C exits with 130 and a hint to resume."""
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print(
            "pettingllms: interrupted; continue with the same command plus --resume (checkpoints are kept)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except Exception as error:
        if not isinstance(error, user_errors()):
            raise
        print(f"pettingllms: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USAGE


def add_import_argument(parser: argparse.ArgumentParser) -> None:
    """``--import MODULE`` in ``parser``'s help. :func:`take_imports` takes the flags out of the command line
    before any parser runs, wherever they stand, so this entry only documents them."""
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)


def take_imports(argv: Sequence[str]) -> tuple[int, list[str], list[str]]:
    """``(0, modules, the other arguments)`` once every ``--import MODULE`` of ``argv`` is imported; a module
    that fails to import is one line on stderr and ``(2, [], [])``."""
    from pettingllms.config.imports import import_modules, split_import_flags

    taken: list[tuple[list[str], list[str]]] = []

    def load(_: argparse.Namespace) -> int:
        modules, rest = split_import_flags(argv)
        taken.append((import_modules(modules, "`--import`"), rest))
        return 0

    status = run_guarded(load, argparse.Namespace())
    return (status, *taken[0]) if taken else (status, [], [])


def script_main(
    argv: Sequence[str] | None,
    *,
    module: str,
    doc: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    intermixed: bool = False,
) -> int:
    """A script's ``main``: ``--import`` modules first, then its arguments (``add_arguments``; ``intermixed``:
    options may follow positional ones), then ``run`` under :func:`run_guarded`."""
    from pettingllms.scripts import help_text

    status, imports, argv = take_imports(list(sys.argv[1:] if argv is None else argv))
    if status:
        return status
    parser = UsageParser(
        prog=f"python -m {module}", description=help_text(doc), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    add_import_argument(parser)
    args = parser.parse_intermixed_args(argv) if intermixed else parser.parse_args(argv)
    args.imports = imports
    return run_guarded(run, args)
