"""The viewer's HTML page in a real browser: headless Chromium (Debian's ``chromium``) loads a Plan-Path
episode's page with no console error (no blocked or missing resource, no CSP violation, no script error)
and takes a full-page screenshot. The checker itself is checked on a page that does have errors.

Chromium missing: as root the test installs it (``apt-get install -y chromium``, ~20 s); otherwise it skips
with that command as the reason, except in CI (``CI`` set), where a missing browser is a failure
(``.ci/run`` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pettingllms.cli import main
from pettingllms.viewer.browser import INSTALL_COMMAND, find_chromium, load_page

PNG = b"\x89PNG\r\n\x1a\n"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _install() -> str | None:
    """Install Chromium as root (apt-get; an update of the package lists first when the install alone
    fails); None when done, else why not."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"Chromium is not installed: {INSTALL_COMMAND} (as root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    for commands in ([install], [["apt-get", "update", "-q"], install]):
        ok = all(subprocess.run(c, env=env, capture_output=True, timeout=900).returncode == 0 for c in commands)
        if ok and find_chromium():
            return None
    return f"`{INSTALL_COMMAND}` failed"


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        reason = _install()
        found = find_chromium()
        if found is None:
            if os.environ.get("CI"):
                pytest.fail(f"{reason}; CI must run the browser test (.ci/run installs chromium)")
            pytest.skip(reason)
    return found


def test_the_plan_path_page_loads_without_console_errors(chromium, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["eval", "plan_path/L1", "--policy", "random", "eval.num_instances=1", f"run.output_dir={run}",
                 "eval.transcripts_rate=1.0", "--no-progress"]) == 0
    page = tmp_path / "episode.html"
    assert main(["show", str(run), "--html", str(page)]) == 0
    capsys.readouterr()
    report = load_page(page, screenshot=tmp_path / "episode.png", chromium=chromium)
    assert report.errors == [], report.errors
    assert report.height > 800  # three turns of two agents: a long page
    shot = (tmp_path / "episode.png").read_bytes()
    assert shot.startswith(PNG) and len(shot) > 20_000
    assert (tmp_path / "episode.png").stat().st_mode & 0o777 == 0o644  # an image to share: readable by others


def test_the_checker_reports_console_errors_and_blocked_resources(chromium, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bad</title></head><body><p>x</p>"
        "<script>console.error('boom from the page'); undefinedFunction();</script>"
        "<img src='missing.png'></body></html>",
        encoding="utf-8",
    )
    errors = " | ".join(load_page(bad, chromium=chromium).errors)
    assert "boom from the page" in errors and "undefinedFunction" in errors and "missing.png" in errors


def test_the_docs_show_a_screenshot_of_a_plan_path_episode():
    image = DOCS / "images" / "viewer_plan_path.png"
    assert image.read_bytes().startswith(PNG)
    assert "images/viewer_plan_path.png" in (DOCS / "viewer.md").read_text(encoding="utf-8")
