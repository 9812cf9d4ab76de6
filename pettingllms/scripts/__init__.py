"""Entry points of the command line (``pettingllms <command>``), each also runnable on its own:

- :mod:`~pettingllms.scripts.train`: ``python -m pettingllms.scripts.train CONFIG [overrides]``;
- :mod:`~pettingllms.scripts.evaluate`: ``python -m pettingllms.scripts.evaluate [CONFIG] (--checkpoint DIR | --policy NAME)``;
- :mod:`~pettingllms.scripts.dataprocess`: puzzle banks and oracle demonstration sets.

Each module has ``add_arguments(parser)``, ``run(args) -> exit code`` and ``main(argv)``; its docstring,
made plain by :func:`help_text`, is its ``--help`` description.
"""

import re

__all__ = ["help_text", "quiet_model_io"]

# :role:`target` and :domain:role:`target` (Sphinx cross-references).
_ROLE = re.compile(r":(?:[\w-]+:)+`([^`]*)`")
_TITLED = re.compile(r"^(.*?)\s*<[^<>]*>$")  # `title <target>`
_LITERAL = re.compile(r"``(.+?)``")
_INTERPRETED = re.compile(r"(?<![`\w])`([^`\n]+)`(?![`\w])")


def _reference(match: re.Match) -> str:
    target = match.group(1)
    titled = _TITLED.match(target)
    if titled and titled.group(1):
        return titled.group(1)
    if target.startswith("~"):  # Sphinx shows only the last component
        return target[1:].rsplit(".", 1)[-1]
    return target


def help_text(doc: str) -> str:
    """A reST docstring as plain text for ``--help``: ``x`` and `x` -> x, :mod:`~a.b.c` -> c,
    :class:`a.b.C` -> a.b.C, :func:`title <a.b>` -> title, a ``::`` that opens a literal block -> ``:``
    (alone on its line: dropped); surrounding blank lines are stripped."""
    text = _ROLE.sub(_reference, doc)
    text = _LITERAL.sub(r"\1", text)
    text = _INTERPRETED.sub(r"\1", text)
    lines = []
    for line in text.splitlines():
        if line.strip() == "::":
            continue
        lines.append(line[:-1] if line.endswith("::") else line)
    return "\n".join(lines).strip()


def quiet_model_io() -> None:
    """Hide transformers' per-file progress bars (loading and saving weights): the run's own bars and
    per-step table are what a user watches."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
