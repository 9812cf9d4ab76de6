"""``scripts/comlrl_public_suite.sh`` (docs/compatibility.md §11): the committed classification is complete
and matches the counts the document states, the checker fails a run exactly when a test classified ``pass``
does not pass, and the script stops with one line when it cannot start (no sdist offline, a wrong checksum).
The suite itself needs a download and ``wandb``; it is run by hand, not here."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "comlrl_public_suite.sh"
DOC = ROOT / "docs" / "compatibility.md"


def load_suite():
    spec = importlib.util.spec_from_file_location(
        "comlrl_public_suite", ROOT / "scripts" / "comlrl_public_suite.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


suite = load_suite()
CLASSIFICATION = suite.load_classification()


def test_the_classification_covers_the_720_items_with_reasons():
    tests = CLASSIFICATION["tests"]
    assert len(tests) == 720
    assert all(re.fullmatch(r"tests/test_\w+\.py::test_\w+(\[.+\])?", test_id) for test_id in tests)
    assert len({test_id.split("::")[0] for test_id in tests}) == 23  # the suite's 23 test files
    for key, reason in CLASSIFICATION["reasons"].items():
        assert reason["status"] in CLASSIFICATION["statuses"] and len(reason["why"]) > 40, key
    assert set(tests.values()) == set(CLASSIFICATION["reasons"]), "a reason no test uses"


def test_the_document_states_the_classification_counts():
    counts = Counter(suite.status_of(CLASSIFICATION, test_id) for test_id in CLASSIFICATION["tests"])
    section = DOC.read_text(encoding="utf-8").split("## 11. ", 1)[1]
    stated = re.search(r"\*\*(\d+) pass, (\d+) internals, (\d+) deliberate differences\*\*", section)
    assert stated, "docs/compatibility.md §11 must state the counts"
    assert tuple(map(int, stated.groups())) == (
        counts["pass"],
        counts["internals"],
        counts["deliberate difference"],
    )
    # Every deliberate difference is listed in §11 by its test id.
    differences = [
        t for t in CLASSIFICATION["tests"] if suite.status_of(CLASSIFICATION, t) == "deliberate difference"
    ]
    for test_id in differences:
        path, name = test_id.split("::")
        assert f"`{test_id}`" in section or (f"`{path}::{name.split('[')[0]}" in section), test_id


def junit(tmp_path: Path, cases: dict[str, str], module_errors: tuple[str, ...] = ()) -> Path:
    """A pytest JUnit file with one case per ``test id -> passed | failed | error``."""
    rows = []
    for test_id, outcome in cases.items():
        path, name = test_id.split("::")
        classname = path.removesuffix(".py").replace("/", ".")
        body = {"passed": "", "failed": '<failure message="boom"/>', "error": '<error message="boom"/>'}[
            outcome
        ]
        rows.append(f'<testcase classname="{classname}" name="{name}">{body}</testcase>')
    rows += [
        f'<testcase classname="" name="{m}"><error message="collection failure"/></testcase>'
        for m in module_errors
    ]
    path = tmp_path / "results.xml"
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(rows)}</testsuite></testsuites>')
    return path


def small_classification() -> dict:
    return {
        "statuses": ["pass", "internals", "deliberate difference"],
        "reasons": {
            "public": {"status": "pass", "why": "public names only"},
            "private": {"status": "internals", "why": "private members"},
            "bug": {"status": "deliberate difference", "why": "ours rejects it"},
        },
        "tests": {
            "tests/test_a.py::test_one": "public",
            "tests/test_a.py::test_two[x]": "public",
            "tests/test_b.py::test_private": "private",
            "tests/test_b.py::test_bug": "bug",
            "tests/test_c.py::test_uncollected": "private",
        },
    }


def test_check_fails_only_when_a_pass_test_does_not_pass(tmp_path):
    classification = small_classification()
    outcomes = suite.junit_outcomes(
        junit(
            tmp_path,
            {
                "tests/test_a.py::test_one": "passed",
                "tests/test_a.py::test_two[x]": "passed",
                "tests/test_b.py::test_private": "failed",
                "tests/test_b.py::test_bug": "error",
            },
            module_errors=("tests.test_c",),
        )
    )
    assert outcomes["<tests.test_c>"] == "error" and outcomes["tests/test_a.py::test_two[x]"] == "passed"
    verdict = suite.check(classification, outcomes)
    assert verdict.ok and verdict.counts == Counter({"pass": 2, "internals": 2, "deliberate difference": 1})
    assert verdict.passed == Counter({"pass": 2})
    assert suite.summary(verdict)[0].startswith("public suite: 5 tests: 2 pass, 2 internals, 1 deliberate")

    outcomes["tests/test_a.py::test_two[x]"] = "failed"
    outcomes["tests/test_b.py::test_private"] = "passed"
    del outcomes["tests/test_a.py::test_one"]  # its module no longer collects: not a pass either
    verdict = suite.check(classification, outcomes)
    assert not verdict.ok
    assert verdict.failed_pass == [
        ("tests/test_a.py::test_one", "not collected"),
        ("tests/test_a.py::test_two[x]", "failed"),
    ]
    assert verdict.now_passing == ["tests/test_b.py::test_private"]  # reported, not a failure

    outcomes["tests/test_d.py::test_new"] = "passed"
    assert suite.check(classification, outcomes).unclassified == ["tests/test_d.py::test_new"]


def test_load_classification_rejects_unknown_reasons_and_statuses(tmp_path):
    bad = small_classification()
    bad["tests"]["tests/test_a.py::test_one"] = "missing"
    path = tmp_path / "classification.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(suite.SuiteError, match=r"reasons that are not listed: \['missing'\]"):
        suite.load_classification(path)
    bad = small_classification()
    bad["reasons"]["bug"]["status"] = "flaky"
    path.write_text(json.dumps(bad))
    with pytest.raises(suite.SuiteError, match="reason 'bug' needs a status"):
        suite.load_classification(path)


def run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        ["bash", str(SCRIPT), "--work", str(tmp_path / "work"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_the_script_stops_with_one_line_when_it_cannot_start(tmp_path):
    offline = run_script(tmp_path)  # no --sdist, no kept copy, no index to download from
    assert offline.returncode == 2 and offline.stdout == ""
    assert offline.stderr.strip().splitlines() == [
        "public suite: cannot download comlrl==1.4.3 (offline?): pass --sdist PATH to a copy of comlrl-1.4.3.tar.gz"
    ]
    forged = tmp_path / "comlrl-1.4.3.tar.gz"
    forged.write_bytes(b"not the release")
    wrong = run_script(tmp_path, "--sdist", str(forged))
    assert wrong.returncode == 2
    [line] = wrong.stderr.strip().splitlines()
    assert re.fullmatch(
        rf"public suite: {re.escape(str(forged))}: sha256 [0-9a-f]{{64}} is not the pinned \w+", line
    )
    assert CLASSIFICATION["sdist_sha256"] in line
