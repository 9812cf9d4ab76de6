"""Run the public CoMLRL 1.4.3 test suite, unchanged, against this project's ``comlrl`` and check every test
id against the committed classification (docs/compatibility.md, section 11).

Steps: take the sdist (``--sdist PATH``, else the one kept in the work folder, else ``pip download``), check
its sha256, extract it afresh, make sure an interpreter with this project, ``wandb`` and ``pytest`` exists
(``--python``, else a venv in the work folder, installed on first use), list the suite's test ids with the
public library itself (the sdist's own ``comlrl`` imports from its folder), then run the suite with
``WANDB_MODE=disabled`` from the sdist's ``tests/`` folder against ours, and compare with
``scripts/comlrl_public_suite.json``: every test classified ``pass`` must pass; ``internals`` and
``deliberate difference`` tests may fail. A report goes to ``<work>/report.json``.

Exit status: 0 when every ``pass`` test passed, 1 when one did not (or the classification and the suite
disagree on the test ids), 2 when the run could not start (no sdist, wrong checksum, no interpreter).
Standard library only: the installs and the runs happen in subprocesses.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSIFICATION = ROOT / "scripts" / "comlrl_public_suite.json"
WORK = ROOT / ".comlrl-public"  # ignored by git: the sdist, its extracted folder, the venv, the report
REQUIREMENT = "comlrl==1.4.3"
SDIST_FOLDER = "comlrl-1.4.3"
TORCH_PIN = "torch==2.13.0"  # as scripts/setup.sh: the CPU wheel, never a CUDA build
PASS = "pass"


class SuiteError(Exception):
    """The run could not start; the message is the one line printed."""


# ---------------------------------------------------------------------------------------------- checking


@dataclass
class Verdict:
    """The suite's outcome per classification: counts per status, and the tests that broke their rule."""

    counts: Counter = field(default_factory=Counter)
    passed: Counter = field(default_factory=Counter)
    failed_pass: list[tuple[str, str]] = field(default_factory=list)  # (test id, its outcome)
    now_passing: list[str] = field(default_factory=list)  # classified internals / difference, yet passed
    unclassified: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed_pass and not self.unclassified


def load_classification(path: Path = CLASSIFICATION) -> dict:
    """The classification, checked: every test maps to a reason whose status is one of ``statuses``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    statuses = set(data["statuses"])
    for key, reason in data["reasons"].items():
        if reason["status"] not in statuses or not reason["why"].strip():
            raise SuiteError(f"{path}: reason {key!r} needs a status in {sorted(statuses)} and a 'why'")
    unknown = sorted({key for key in data["tests"].values() if key not in data["reasons"]})
    if unknown:
        raise SuiteError(f"{path}: tests name reasons that are not listed: {unknown}")
    return data


def status_of(classification: dict, test_id: str) -> str:
    return classification["reasons"][classification["tests"][test_id]]["status"]


def junit_outcomes(path: Path) -> dict[str, str]:
    """``test id -> passed | failed | error | skipped`` from pytest's JUnit XML (``--junitxml``); a module
    that failed to import shows as an ``error`` case named after the module, kept as ``<module>``."""
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname") or "", case.get("name") or ""
        test_id = f"{classname.replace('.', '/')}.py::{name}" if classname else f"<{name}>"
        if case.find("failure") is not None:
            outcomes[test_id] = "failed"
        elif case.find("error") is not None:
            outcomes[test_id] = "error"
        elif case.find("skipped") is not None:
            outcomes[test_id] = "skipped"
        else:
            outcomes[test_id] = "passed"
    return outcomes


def check(classification: dict, outcomes: dict[str, str]) -> Verdict:
    """Compare a run's outcomes with the classification (a test that was not collected did not pass)."""
    verdict = Verdict()
    tests = classification["tests"]
    for test_id in tests:
        status = status_of(classification, test_id)
        outcome = outcomes.get(test_id, "not collected")
        verdict.counts[status] += 1
        if outcome == "passed":
            verdict.passed[status] += 1
            if status != PASS:
                verdict.now_passing.append(test_id)
        elif status == PASS:
            verdict.failed_pass.append((test_id, outcome))
    verdict.unclassified = sorted(t for t in outcomes if "::" in t and t not in tests)
    return verdict


def summary(verdict: Verdict) -> list[str]:
    """The lines printed after a run."""
    counts = verdict.counts
    lines = [
        f"public suite: {sum(counts.values())} tests: {counts['pass']} pass, {counts['internals']} internals, "
        f"{counts['deliberate difference']} deliberate differences (classification); "
        f"{verdict.passed['pass']} of the {counts['pass']} 'pass' tests passed"
    ]
    lines += [
        f"  FAILED (classified pass): {test_id} ({outcome})" for test_id, outcome in verdict.failed_pass
    ]
    lines += [f"  UNCLASSIFIED: {test_id}" for test_id in verdict.unclassified]
    lines += [f"  now passes (reclassify as pass?): {test_id}" for test_id in verdict.now_passing]
    return lines


# ---------------------------------------------------------------------------------------------- the run


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(given: Path | None, work: Path, expected: str) -> Path:
    """The sdist to run: ``given``, else the one kept in ``work``, else downloaded there; its sha256 checked."""
    if given is not None:
        if not given.is_file():
            raise SuiteError(f"--sdist {given}: no such file")
        path = given
    else:
        path = work / f"{SDIST_FOLDER}.tar.gz"
        if not path.is_file():
            work.mkdir(parents=True, exist_ok=True)
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", REQUIREMENT]
            done = subprocess.run([*pip, "-d", str(work)], capture_output=True, text=True)
            if done.returncode != 0 or not path.is_file():
                raise SuiteError(
                    f"cannot download {REQUIREMENT} (offline?): pass --sdist PATH to a copy of {path.name}"
                )
    actual = sha256(path)
    if actual != expected:
        raise SuiteError(f"{path}: sha256 {actual} is not the pinned {expected}")
    return path


def extract(sdist: Path, work: Path) -> Path:
    """A fresh copy of the sdist's folder under ``work/src`` (the suite runs unchanged, from its own folder)."""
    target = work / "src"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(target, filter="data")
        else:  # Python < 3.12 without the backported filter: refuse members that leave the folder
            for member in archive.getmembers():
                if member.name.startswith(("/", "..")) or ".." in Path(member.name).parts:
                    raise SuiteError(f"{sdist}: unsafe member {member.name!r}")
            archive.extractall(target)
    folder = target / SDIST_FOLDER
    if not (folder / "tests" / "conftest.py").is_file():
        raise SuiteError(f"{sdist}: no {SDIST_FOLDER}/tests/conftest.py inside")
    return folder


def suite_env() -> dict[str, str]:
    """The runs' environment: W&B off, no hub, nothing on the path but what the interpreter brings."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "PYTHONHOME")}
    env.update(WANDB_MODE="disabled", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def interpreter(given: str | None, work: Path) -> str:
    """A Python that imports this project's comlrl (not another), ``wandb`` and ``pytest``: ``given``, else
    ``work/venv``, created and installed on first use (torch's CPU wheel, this project editable, wandb,
    pytest)."""
    python = given or str(work / "venv" / "bin" / "python")
    if given is None and not _imports_ours(python):
        print(
            f"public suite: installing {TORCH_PIN}, this project, wandb and pytest into {work / 'venv'} "
            "(first run only, a few minutes)",
            flush=True,
        )
        install = [python, "-m", "pip", "install", "-q", TORCH_PIN, "-e", str(ROOT), "wandb", "pytest"]
        for step in ([sys.executable, "-m", "venv", str(work / "venv")], install):
            if subprocess.run(step).returncode != 0:
                raise SuiteError(f"{' '.join(step[:4])} ... failed (see the messages above)")
    if not _imports_ours(python):
        raise SuiteError(
            f"{python} does not import this project's comlrl together with wandb and pytest "
            f"(pip install -e {ROOT} wandb pytest)"
        )
    return python


def _imports_ours(python: str) -> bool:
    if not Path(python).exists() and shutil.which(python) is None:
        return False
    probe = "import comlrl, pytest, wandb; print(comlrl.__file__)"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd="/", env=suite_env())
    lines = done.stdout.strip().splitlines()
    return done.returncode == 0 and bool(lines) and Path(lines[-1]).resolve().is_relative_to(ROOT / "comlrl")


def public_test_ids(python: str, folder: Path) -> list[str]:
    """The suite's test ids as the public library collects them (run from the sdist folder, whose own
    ``comlrl`` and egg-info come first on the path)."""
    command = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
               "-c", str(folder / "pyproject.toml"), "--rootdir", str(folder), "tests"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=folder, env=suite_env())
    ids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    if done.returncode != 0 or not ids:
        raise SuiteError(f"the public library could not collect its own suite: {done.stdout[-300:]!r}")
    return ids


def run_suite(python: str, folder: Path, junit: Path, pytest_args: list[str]) -> int:
    """The suite against this project's comlrl: from the sdist's ``tests/`` folder (so its ``helpers`` and
    ``conftest`` import as top-level modules and the sdist's own ``comlrl`` is not on the path), with the
    sdist's ``pyproject.toml`` as pytest's config (our repository's pytest settings, and our ``tests``
    package, stay out). Tracebacks are off (hundreds of internals tests fail by design); extra arguments
    come last, so ``-- --tb=short -k NAME`` shows one test's."""
    command = [python, "-m", "pytest", "-q", "--tb=no", "-rN", "--disable-warnings", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", "-c", str(folder / "pyproject.toml"), "--rootdir", str(folder),
               f"--junitxml={junit}", *pytest_args, "."]  # fmt: skip
    return subprocess.run(command, cwd=folder / "tests", env=suite_env()).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sdist", type=Path, help="a downloaded comlrl-1.4.3.tar.gz (default: download it)")
    parser.add_argument(
        "--python", help="an interpreter with this project, wandb and pytest (default: a venv)"
    )
    parser.add_argument("--work", type=Path, default=WORK, help=f"work folder (default: {WORK})")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    try:
        classification = load_classification()
        sdist = fetch_sdist(args.sdist, args.work, classification["sdist_sha256"])
        folder = extract(sdist, args.work)
        python = interpreter(args.python, args.work)
        ids = public_test_ids(python, folder)
    except SuiteError as error:
        print(f"public suite: {error}", file=sys.stderr)
        return 2
    missing, extra = set(classification["tests"]) - set(ids), set(ids) - set(classification["tests"])
    if missing or extra:
        print(
            f"public suite: the classification lists {len(missing)} ids the suite lacks and lacks {len(extra)} "
            f"of its ids, e.g. {sorted(missing | extra)[:3]}",
            file=sys.stderr,
        )
        return 1
    junit = args.work / "results.xml"
    junit.unlink(missing_ok=True)  # never read a previous run's results
    status = run_suite(python, folder, junit, args.pytest_args)
    if not junit.is_file():
        print(f"public suite: pytest stopped (exit {status}) without writing {junit}", file=sys.stderr)
        return 1
    verdict = check(classification, junit_outcomes(junit))
    report = {
        "counts": dict(verdict.counts),
        "passed": dict(verdict.passed),
        "failed_pass": verdict.failed_pass,
        "now_passing": verdict.now_passing,
        "unclassified": verdict.unclassified,
    }
    (args.work / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print("\n".join(summary(verdict)))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
