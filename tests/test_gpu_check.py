"""``scripts/gpu_check.sh``: its CPU dry run end to end (every part, the report's statuses and numbers), and
the runner's bookkeeping on fake parts (a failing, crashing or hanging part is recorded and the rest still
run; skipped parts do not fail; the exit status; carried wheels installed or not)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.helpers.scripts import REPO, run_checked, script_env

SCRIPT = REPO / "scripts" / "gpu_check.sh"
WORKER_PARTS = ("environment", "generation_scoring", "at_grpo_step", "madpo_round", "rollout_benchmark")


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gpu_check = load_check()


def vllm_importable() -> bool:
    return importlib.util.find_spec("vllm") is not None


# ---------------------------------------------------------------------------------------------- dry run
@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, tiny_model_path, model_cache):
    """The dry run's report (test-tiny is built beforehand into the session's model cache)."""
    folder = tmp_path_factory.mktemp("gpu-check")
    report = folder / "report.json"
    done = run_checked(["bash", str(SCRIPT), "--dry-run", "--report", str(report)], "gpu_check.sh --dry-run",
                       cwd=REPO, env=script_env(model_cache), timeout=240)
    return json.loads(report.read_text()), done, report


@pytest.mark.slow
def test_the_dry_run_runs_every_part_on_cpu_and_reports_it(dry_run):
    data, done, report = dry_run
    assert data["complete"] and data["ok"] and data["mode"] == "dry-run"
    assert data["device"]["type"] == "cpu" and data["device_requested"] == "cpu"
    assert data["dtype"] == "float32" and "float32" in data["dtype_note"] and "CPU" in data["dtype_note"]
    for name in ("torch", "transformers", "peft", "python"):
        assert data["versions"][name]
    assert data["optional_imports"]["trl"] == "imported"
    parts = data["parts"]
    assert list(parts) == list(gpu_check.PART_ORDER)
    for name in WORKER_PARTS:
        assert parts[name]["status"] == "passed", (name, parts[name])
        assert 0 < parts[name]["seconds"] < 120
        assert parts[name]["peak_gpu_memory_mb"] is None and parts[name]["peak_rss_mb"] > 0
    assert parts["wheels"]["status"] == "skipped" and parts["wheels"]["reason"]
    assert parts["gpu_tests"]["status"] == "skipped"
    assert parts["gpu_tests"]["tests"] >= 7 and parts["gpu_tests"]["skipped"] == parts["gpu_tests"]["tests"]
    assert "needs a CUDA device" in parts["gpu_tests"]["reason"]
    if not vllm_importable():
        assert parts["vllm_tests"] == {"status": "skipped", "reason": gpu_check.VLLM_MISSING}
    assert set(data["summary"]) <= {"passed", "skipped"}
    assert Path(data["log"]).exists() and Path(data["log"]) == report.with_suffix(".log")
    assert "done in" in done.stdout


@pytest.mark.slow
def test_the_dry_run_numbers_are_present_and_sane(dry_run):
    parts = dry_run[0]["parts"]
    generation = parts["generation_scoring"]["models"]
    assert [row["model"] for row in generation] == ["test-tiny", "llama-shape-tiny"]
    for row in generation:
        assert row["dtype"] == "float32" and row["generated_tokens"] > 0
        assert row["generate_tokens_per_s"] > 0 and row["score_tokens_per_s"] > 0
        assert row["rollout_vs_rescore_max_abs"] < 1e-3 and row["vs_float32_max_abs"] == 0.0
        assert -20 < row["mean_logprob"] < 0
    steps = parts["at_grpo_step"]["variants"]
    assert [(v["model"], v["policy_level"]) for v in steps] == [
        ("test-tiny", "L1"), ("test-tiny", "L2"), ("llama-shape-tiny", "L1")]
    for variant in steps:
        assert variant["unchanged_tensors"] == 0 < variant["trainable_tensors"]
        assert variant["nonfinite_metrics"] == [] and variant["devices"] == ["cpu"]
        assert 0 < variant["update_s"] < variant["seconds"] and variant["num_samples"] > 0
    rounds = parts["madpo_round"]["models"]
    assert [row["model"] for row in rounds] == ["test-tiny", "llama-shape-tiny"]
    for row in rounds:
        assert row["updates"] >= 1 and row["train_pairs"] > 0 and row["unchanged_tensors"] == 0
        assert row["losses"] and row["nonfinite_losses_skipped"] == 0
    bench = parts["rollout_benchmark"]["summary"]
    assert {row["case"] for row in bench} == {"engine_vs_raw", "engine_vs_raw_top_p", "tree_rollout_vs_raw"}
    for row in bench:
        assert row["model"] == "llama-shape-tiny"
        assert row["engine_tokens_per_s"] > 0 and row["raw_tokens_per_s"] > 0 and row["ratio_raw_over_engine"] > 0


# ---------------------------------------------------------------------------------------------- the runner
FAKE_PARTS = '''
import os, time

class PartSkipped(Exception):
    pass

def passes(ctx):
    return {"value": 1}

def has_problems(ctx):
    return {"value": 2, "problems": ["x is too big"]}

def raises(ctx):
    raise RuntimeError("boom")

def crashes(ctx):
    os._exit(9)

def hangs(ctx):
    time.sleep(120)

def skips(ctx):
    raise PartSkipped("not on this machine")

PARTS = {name: globals()[kind] for name, kind in %s.items()}
'''


def run_fake(tmp_path, kinds: dict[str, str], *extra: str, parts: str | None = None) -> tuple[int, dict]:
    module = tmp_path / "fake_parts.py"
    module.write_text(FAKE_PARTS % repr(kinds))
    report = tmp_path / "fake.json"
    status = gpu_check.main(["--dry-run", "--parts-module", str(module), "--report", str(report),
                             "--parts", parts or ",".join([*kinds, "wheels", "vllm_tests"]), *extra])
    return status, json.loads(report.read_text())


def test_a_failing_part_is_recorded_and_the_others_still_run(tmp_path):
    kinds = {"environment": "passes", "generation_scoring": "has_problems", "at_grpo_step": "raises",
             "madpo_round": "crashes", "rollout_benchmark": "hangs"}
    status, data = run_fake(tmp_path, kinds, "--limit", "rollout_benchmark=2")
    parts = data["parts"]
    assert status == 1 and data["complete"] and data["ok"] is False
    assert parts["environment"]["status"] == "passed" and parts["environment"]["value"] == 1
    assert parts["generation_scoring"]["status"] == "failed" and parts["generation_scoring"]["value"] == 2
    assert parts["generation_scoring"]["error"] == "x is too big"
    assert parts["at_grpo_step"]["status"] == "failed" and parts["at_grpo_step"]["error"] == "RuntimeError: boom"
    assert "Traceback" in parts["at_grpo_step"]["traceback"]
    assert parts["madpo_round"]["status"] == "failed"
    assert "worker process died (exit status 9)" in parts["madpo_round"]["error"]
    assert parts["rollout_benchmark"]["status"] == "failed" and "timed out" in parts["rollout_benchmark"]["error"]
    assert parts["wheels"]["status"] == "skipped" and parts["vllm_tests"]["status"] == "skipped"
    assert data["summary"]["failed"] == ["generation_scoring", "at_grpo_step", "madpo_round", "rollout_benchmark"]


def test_skipped_parts_do_not_fail_the_check(tmp_path):
    status, data = run_fake(tmp_path, {"environment": "passes", "madpo_round": "skips"})
    assert status == 0 and data["ok"] is True
    assert data["parts"]["madpo_round"] == {"status": "skipped", "reason": "not on this machine",
                                            "seconds": data["parts"]["madpo_round"]["seconds"]}
    assert data["summary"] == {"skipped": ["wheels", "madpo_round", "vllm_tests"], "passed": ["environment"]}


def test_a_worker_that_cannot_start_fails_every_part_it_held(tmp_path):
    module = tmp_path / "broken_parts.py"
    module.write_text("raise ImportError('no torch here')\n")
    report = tmp_path / "broken.json"
    status = gpu_check.main(["--dry-run", "--parts-module", str(module), "--report", str(report),
                             "--parts", "environment,madpo_round"])
    parts = json.loads(report.read_text())["parts"]
    assert status == 1
    for name in ("environment", "madpo_round"):
        assert parts[name]["status"] == "failed" and "no torch here" in parts[name]["error"]


def test_parts_left_when_the_budget_runs_out_are_skipped(tmp_path):
    status, data = run_fake(tmp_path, {"environment": "passes"}, "--budget-s", "1")
    assert status == 0
    assert all("budget" in part["reason"] for part in data["parts"].values())


def test_unknown_parts_and_limits_are_usage_errors(tmp_path):
    report = str(tmp_path / "r.json")
    assert gpu_check.main(["--dry-run", "--parts", "nope", "--report", report]) == 2
    assert gpu_check.main(["--dry-run", "--limit", "nope=3", "--report", report]) == 2
    assert gpu_check.selected_parts("gpu_tests,environment") == ["environment", "gpu_tests"]


def test_junit_counts_and_partial_event_lines(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="a" name="t1"/>'
                   '<testcase classname="a" name="t2"><skipped message="needs a CUDA device"/></testcase>'
                   '<testcase classname="a" name="t3"><failure message="x"/></testcase></testsuite></testsuites>')
    counts = gpu_check.junit_counts(xml)
    assert (counts["tests"], counts["passed"], counts["skipped"], counts["failed"]) == (3, 1, 1, 1)
    assert counts["skip_reasons"] == {"needs a CUDA device": 1} and counts["failed_tests"] == ["a::t3"]
    assert gpu_check.junit_counts(tmp_path / "missing.xml") == {}
    events = tmp_path / "events.jsonl"
    events.write_bytes(b'{"event": "start", "part": "a"}\n{"event": "res')
    assert gpu_check.read_events(events, 0) == ([{"event": "start", "part": "a"}], 32)


def fake_wheel(folder: Path, name: str = "gpucheck_probe", version: str = "0.1") -> Path:
    """A minimal pure-Python wheel: one module and its dist-info."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", "VALUE = 42\n")
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                             "Requires-Dist: numpy\nRequires-Dist: pytest ; extra == 'dev'\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          "Tag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def run_wheels_part(tmp_path, wheels: Path, *extra: str) -> tuple[int, dict]:
    report = tmp_path / "wheels.json"
    env = {**script_env(str(tmp_path / "cache")), "GPU_CHECK_WHEELS": str(wheels),
           "GPU_CHECK_SITE": str(tmp_path / "site")}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--parts", "wheels", "--report", str(report), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(report.read_text())["parts"]["wheels"]


def test_carried_wheels_are_installed_into_the_target_site(tmp_path):
    wheel = fake_wheel(tmp_path / "whl")
    assert gpu_check.wheel_project(wheel.name) == ("gpucheck-probe", "0.1")
    assert gpu_check.wheel_requirements(wheel) == ["numpy"]
    status, part = run_wheels_part(tmp_path, wheel.parent)
    assert status == 0 and part["status"] == "skipped" and "dry run" in part["reason"]
    status, part = run_wheels_part(tmp_path, wheel.parent, "--with-wheels")
    assert status == 0 and part["status"] == "passed", part
    assert part["wheels"] == [wheel.name] and (tmp_path / "site" / "gpucheck_probe.py").exists()
    status, part = run_wheels_part(tmp_path, tmp_path / "none", "--with-wheels")
    assert status == 0 and part["status"] == "skipped" and "--fetch-wheels" in part["reason"]


def test_a_broken_wheel_fails_the_wheels_part(tmp_path):
    folder = tmp_path / "whl"
    folder.mkdir()
    (folder / "broken-0.1-py3-none-any.whl").write_bytes(b"not a zip")
    status, part = run_wheels_part(tmp_path, folder, "--with-wheels")
    assert status == 1 and part["status"] == "failed" and part["output_tail"]


def test_the_wheel_pins_are_pure_python_and_one_version_each():
    pins = {**gpu_check.REQUIRED_WHEELS, **gpu_check.OPTIONAL_WHEELS}
    assert len({gpu_check.normalize(n) for n in pins}) == len(pins)
    assert {"trl", "datasets"} <= set(gpu_check.REQUIRED_WHEELS)
    assert not {gpu_check.normalize(n) for n in pins} & gpu_check.IMAGE_PACKAGES  # the image lacks each


def test_a_terminated_check_ends_its_worker_and_keeps_the_report(tmp_path):
    module = tmp_path / "slow_parts.py"
    pid_file = tmp_path / "worker.pid"
    module.write_text(f"import os, time\n"
                      f"def first(ctx):\n    return {{}}\n"
                      f"def hangs(ctx):\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                      f"    time.sleep(120)\n"
                      f"PARTS = {{'environment': first, 'madpo_round': hangs}}\n")
    report = tmp_path / "stopped.json"
    process = subprocess.Popen([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--dry-run", "--parts",
                                "environment,madpo_round", "--parts-module", str(module), "--report", str(report)],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def first_recorded() -> bool:
        try:
            return json.loads(report.read_text())["parts"]["environment"]["status"] == "passed"
        except (OSError, ValueError):
            return False

    deadline = time.monotonic() + 60
    while not (pid_file.exists() and first_recorded()) and time.monotonic() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    data = json.loads(report.read_text())
    assert data["complete"] is False and data["parts"]["environment"]["status"] == "passed"
    assert data["parts"]["madpo_round"]["status"] == "pending"
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # the group was killed; the zombie is reaped by its parent's exit
            os.kill(worker, 0)
            time.sleep(0.1)
