"""Every fenced ```python block of README.md and docs/*.md runs as written.

The blocks are read from the files at collection time, so the docs cannot drift from what is tested. Each
block runs on its own in a fresh interpreter, from an empty working directory, within ``TIMEOUT_S`` seconds;
a block that trains must print ``before X -> after Y`` and show that it learned (Y > X).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.helpers.scripts import REPO, run_checked, script_env

TIMEOUT_S = 120  # a block takes up to ~35 s alone here; the suite runs two test workers side by side
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TRAINS = re.compile(r"\.train\(")  # trainer.train(), trainer.train(checkpoint_dir=...)
BEFORE_AFTER = re.compile(r"before\s+(-?\d+(?:\.\d+)?)\s*->\s*after\s+(-?\d+(?:\.\d+)?)")


def slug(text: str, words: int = 4) -> str:
    """The first ``words`` words of a heading, lower case, joined by dashes (a readable test id)."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words])


def python_blocks(text: str) -> list[tuple[str, int, str]]:
    """``(heading slug, first line number, code)`` of each fenced ```python block of a Markdown text."""
    blocks: list[tuple[str, int, str]] = []
    heading, fence, start, code = "top", None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if fence is not None:  # inside a fenced block (a `#` line there is code, not a heading)
            if stripped == "```":
                if fence == "python":
                    blocks.append((heading, start, "\n".join(code) + "\n"))
                fence = None
            else:
                code.append(line)
        elif stripped.startswith("```"):
            fence, start, code = stripped[3:].strip() or "text", number + 1, []
        elif line.startswith("#"):
            heading = slug(line.lstrip("#")) or heading
    if fence is not None:
        raise ValueError(f"unclosed ``` block starting at line {start - 1}")
    return blocks


def test_python_blocks_are_read_with_their_heading_and_line():
    text = "# Top\n```bash\n# not a heading\n```\n## Use it (`x.y`) now, please\n```python\nprint(1)\n# comment\n```\n"
    assert python_blocks(text) == [("use-it-x-y", 7, "print(1)\n# comment\n")]
    with pytest.raises(ValueError, match="line 1"):
        python_blocks("```python\nprint(1)\n")


CASES = [
    pytest.param(path, line, code, id=f"{path.name}-{index}-{heading}")
    for path in DOC_FILES
    for index, (heading, line, code) in enumerate(python_blocks(path.read_text(encoding="utf-8")))
]


def test_the_readme_and_the_guides_hold_the_blocks_this_file_runs():
    names = [case.values[0].name for case in CASES]
    assert names.count("README.md") >= 4 and names.count("madpo.md") >= 2 and names.count("pettingllms.md") >= 1


@pytest.mark.slow
@pytest.mark.parametrize(("path", "line", "code"), CASES)
def test_doc_snippet_runs(path: Path, line: int, code: str, model_cache: str, tmp_path: Path):
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    workdir = tmp_path / "work"  # empty: a block must not depend on files lying around
    workdir.mkdir()
    where = f"{path.relative_to(REPO)}, block at line {line},"
    done = run_checked(
        [sys.executable, str(script)], where, cwd=workdir, env=script_env(model_cache), timeout=TIMEOUT_S
    )
    assert done.stdout.strip(), f"{where} prints nothing: a snippet shows its result"
    if TRAINS.search(code):
        found = BEFORE_AFTER.findall(done.stdout)
        assert found, f"{where} trains but prints no `before X -> after Y` line; stdout:\n{done.stdout}"
        before, after = map(float, found[-1])
        assert after > before, f"{where} did not learn: before {before} -> after {after}\n{done.stdout}"
