"""The sandbox load benchmark (``benchmarks/sandbox_load.py``): its mix and checks on their own, a
200-program run through a real pool that must end with no mismatch and no leak, and a run with planted
leaks that the leak checks must report (so they can fail)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import sandbox_load as load
from pettingllms.sandbox import ExecutionResult, SandboxConfig, SandboxError, TestVerdict

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox needs Linux")
REPO = Path(__file__).resolve().parents[2]
README = REPO / "benchmarks" / "README.md"
CONFIG = SandboxConfig(**load.DEFAULT_CONFIG)

# What benchmarks/README.md documents for benchmarks/results/sandbox_load.json.
TOP_FIELDS = ["programs", "workers", "seed", "loop_timeout_s", "rss_growth_limit_mb", "settle_s", "kind_weights",
              "judge_time_limit_s", "config", "rows", "mismatches_total", "leaks_total", "ok", "as_root",
              "cpu_count", "load_average_at_start", "python_version", "machine", "seconds"]
ROW_FIELDS = ["workers", "programs", "seconds", "programs_per_s", "latency", "kinds", "mismatches",
              "warmup_mismatches", "mismatch_examples", "leaks", "measurements", "pool_counts", "isolation"]
MEASUREMENT_FIELDS = ["processes", "open_fds", "rss_mb", "cgroups", "rss_growth_after_warmup_mb", "uids",
                      "uids_reserved_again", "scratch_files_after_run", "scratch_files_after_close"]


def test_percentiles_are_nearest_rank():
    assert load.percentiles([i / 1000 for i in range(10, 0, -1)]) == {
        "count": 10, "p50_ms": 5.0, "p90_ms": 9.0, "p99_ms": 10.0, "max_ms": 10.0}
    values = [random.Random(1).expovariate(20) for _ in range(997)]
    got = load.percentiles(values)
    for q in (50, 90, 99):  # numpy's inverted_cdf is the nearest-rank definition
        assert got[f"p{q}_ms"] == round(1000 * float(np.percentile(values, q, method="inverted_cdf")), 2)
    assert got["max_ms"] == round(1000 * max(values), 2) and got["count"] == 997
    assert load.percentiles([]) == {"count": 0}


def test_mix_is_seeded_and_holds_every_kind():
    first = load.make_programs(200, 3, "mark", CONFIG, 0.25)
    assert first == load.make_programs(200, 3, "mark", CONFIG, 0.25)
    assert [p.variant for p in first] != [p.variant for p in load.make_programs(200, 4, "mark", CONFIG, 0.25)]
    assert {p.kind for p in first} == set(load.KINDS)
    assert {p.kind for p in load.make_programs(len(load.KINDS), 0, "m", CONFIG, 0.25)} == set(load.KINDS)
    assert len({p.code for p in first}) == 200  # unique sources: the judge's verdict cache never answers
    assert all(p.timeout == 0.25 for p in first if p.kind == "loop")
    with pytest.raises(ValueError, match="`kind` must be one of .*got 'nope'"):
        load.make_program("nope", random.Random(0), "t", CONFIG, 0.25)


def test_expected_outcomes_equal_a_bare_interpreter():
    """What the benchmark expects of the kinds that need no limit is what plain Python does (no sandbox)."""
    programs = load.make_programs(300, 5, "mark", CONFIG, 0.25)
    chosen = []
    for kind, count in (("correct", 3), ("exit", 2), ("exception", 3), ("crash", 2)):
        chosen += [p for p in programs if p.kind == kind][:count]
    assert {p.variant for p in chosen if p.kind == "crash"} == {"abort", "segfault"}
    for program in chosen:
        proc = subprocess.run([sys.executable, "-I", "-c", program.code], input=program.stdin,
                              capture_output=True, text=True, timeout=30)
        result = ExecutionResult(status="ok" if proc.returncode == 0 else "error", returncode=proc.returncode,
                                 stdout=proc.stdout, stderr=proc.stderr)
        assert load.mismatch(program, result) is None, (program, proc)


def test_mismatch_names_what_differs():
    memory = load.make_program("memory", random.Random(0), "t", CONFIG, 0.25)
    assert load.mismatch(memory, ExecutionResult(status="killed", limit="memory", returncode=1)) is None
    assert "status ok/None, expected killed/memory" in load.mismatch(memory, ExecutionResult(status="ok"))
    exc = load.make_program("exception", random.Random(0), "t", CONFIG, 0.25)
    problem = load.mismatch(exc, ExecutionResult(status="error", returncode=2, stderr="x\nOSError: boom\n"))
    assert "returncode 2, expected 1" in problem and f"expected {exc.variant}" in problem
    correct = load.make_program("correct", random.Random(0), "t", CONFIG, 0.25)
    assert "stdout '0\\n'" in load.mismatch(correct, ExecutionResult(status="ok", returncode=0, stdout="0\n"))
    judged = load.Program("judged", "wrong", "", verdicts=("wrong_answer", "wrong_answer"))
    assert load.mismatch(judged, [TestVerdict("passed"), TestVerdict("wrong_answer")]) == (
        "verdicts ('passed', 'wrong_answer'), expected ('wrong_answer', 'wrong_answer')")
    assert load.mismatch(memory, SandboxError("launcher died")) == "raised SandboxError: launcher died"


@linux_only
def test_200_programs_leave_nothing_and_match(tmp_path, capsys):
    out = tmp_path / "sandbox_load.json"
    code = load.main(["--programs", "200", "--workers", "2", "--seed", "11", "--out", str(out)])
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    row = data["rows"][0]
    assert row["leaks"] == [], row["leaks"]
    assert row["mismatches"] == {k: 0 for k in load.KINDS} and row["warmup_mismatches"] == 0, row["mismatch_examples"]
    assert code == 0 and data["ok"] is True and (data["leaks_total"], data["mismatches_total"]) == (0, 0)
    assert set(row["kinds"]) == set(load.KINDS) and sum(row["kinds"].values()) == 200
    # The counts are the seeded mix's, and the latency table covers every program.
    expected = {}
    for program in load.make_programs(200, 11, "x", CONFIG, 0.25):
        expected[program.kind] = expected.get(program.kind, 0) + 1
    assert row["kinds"] == expected and row["latency"]["all"]["count"] == 200
    assert all(row["latency"][k]["count"] == n for k, n in expected.items())
    lat = row["latency"]["all"]
    assert 0 < lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    assert row["programs_per_s"] == pytest.approx(200 / row["seconds"], rel=2e-3)  # both rounded
    # Loops end at the wall clock, not before it.
    assert row["latency"]["loop"]["p50_ms"] >= 1000 * data["loop_timeout_s"]
    for name in TOP_FIELDS:
        assert name in data, name
    for name in ROW_FIELDS:
        assert name in row, name
    for name in MEASUREMENT_FIELDS:
        assert name in row["measurements"], name
    m = row["measurements"]
    assert m["open_fds"]["after_close"] == m["open_fds"]["before"]
    assert m["processes"]["after_run"] == m["processes"]["after_warmup"] and m["processes"]["after_close"] == m["processes"]["before"]
    if data["as_root"]:
        assert len(m["uids"]) == 2 and m["uids_reserved_again"] == m["uids"]
    assert (data["programs"], data["workers"], data["seed"]) == (200, [2], 11)
    progress = re.findall(r"2 worker\(s\): (\d+)/200 \((\d+)%\)", printed)
    assert [int(done) for done, _ in progress] == list(range(20, 201, 20))
    assert "leaks: none" in printed and "OK: 0 mismatch(es), 0 leak(s)" in printed


def test_readme_documents_every_json_field():
    text = README.read_text()
    section = text[text.index("### Sandbox load"):]
    for name in TOP_FIELDS + ROW_FIELDS + MEASUREMENT_FIELDS:
        assert f"`{name}`" in section, name


@linux_only
def test_planted_leaks_are_reported(tmp_path):
    """Every leak check fires when its leak is real: an fd, a file in work_root and in /tmp, a child
    process, RSS, and (as root) a uid lock kept open. The run is a fresh interpreter's
    (``tests/helpers/planted_sandbox_leaks.py``): in this worker, memory other test files freed may go
    back to the system during the run and hide the planted RSS growth."""
    out = tmp_path / "planted.json"
    done = subprocess.run([sys.executable, "-m", "tests.helpers.planted_sandbox_leaks", str(out)], cwd=REPO,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    row, marker = result["row"], result["marker"]
    leaks = "\n".join(row["leaks"])
    assert sum(row["mismatches"].values()) == 0, row["mismatch_examples"]
    for expected in ["open fds after the run", "open fds after close", "work_root", "'planted'",
                     "scratch files after the run", "scratch files after close", f"{marker}-planted",
                     "processes after the run: 1 new", "processes after close: 1 new", "sleep",
                     "RSS grew"]:
        assert expected in leaks, (expected, leaks)
    assert row["measurements"]["rss_growth_after_warmup_mb"] >= 200  # the 256 MiB plant, seen whole
    if result["cgroups"]:  # only where the pool has memory cgroups
        assert "memory cgroups after the run" in leaks and "run-planted" in leaks
    if os.geteuid() == 0:
        assert "uid lock files still open after close" in leaks
        assert f"uids not reservable again after close: {{{row['measurements']['uids'][0]}:" in leaks
    assert result["summary_ok"] is False
