"""Every examples/*.sh runs in its SHORT=1 mode and closes by saying what it showed.

Each script runs as a user runs it (``bash examples/<name>``, from the repository) with the interpreter
running the tests (``PYTHON``), one thread, the session's model cache and ``OUT`` in a temporary folder.
The eval example evaluates the short L1 run and must reproduce that run's own held-out success.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pettingllms.config import load_config
from tests.helpers.scripts import REPO, run_checked, script_env

TIMEOUT_S = 180
# Training examples and the pipeline stages each one's run folder must list as done.
TRAINING = {
    "train_plan_path_L0_grpo.sh": ["sft", "eval_before", "grpo", "eval"],
    "train_plan_path_L1.sh": ["sft", "eval_before", "at_grpo", "eval"],
    "train_sokoban_L3.sh": ["sft", "eval_before", "at_grpo", "eval"],
    "pipeline_madpo.sh": ["sft", "eval_before", "madpo", "at_grpo", "eval"],
}
EVAL = "eval_plan_path.sh"
SUCCESS_LINE = re.compile(r"^success before (\d\.\d+) -> after (\d\.\d+)", re.MULTILINE)


def common_sh(snippet: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """The lines ``snippet`` prints after sourcing examples/_common.sh in ``cwd`` with only ``env`` set."""
    script = f'source "{REPO / "examples" / "_common.sh"}"\n{snippet}'
    done = subprocess.run(["/bin/bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_examples_find_pettingllms_in_the_documented_order(tmp_path):
    show = 'printf "%s\\n" "${PETTINGLLMS[@]}"'
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "python3"
    fake_python.write_text("#!/bin/sh\n")
    fake_python.chmod(0o755)
    path = {"PATH": str(bin_dir)}
    assert common_sh(show, tmp_path, {**path, "PYTHON": "/opt/py"}) == ["/opt/py", "-m", "pettingllms"]
    assert common_sh(show, tmp_path, path) == [str(fake_python), "-m", "pettingllms"]
    on_path = bin_dir / "pettingllms"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert common_sh(show, tmp_path, path) == ["pettingllms"]
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "pettingllms").write_text("#!/bin/sh\n")
    (venv / "pettingllms").chmod(0o755)
    assert common_sh(show, tmp_path, path) == [".venv/bin/pettingllms"]


def test_short_mode_and_out_choose_the_run_folder(tmp_path):
    show = 'run_overrides runs/x sft.num_problems=8; echo "$RUN_DIR"; printf "%s\\n" "${RUN_OVERRIDES[@]}"'
    assert common_sh(show, tmp_path, {}) == ["runs/x", "run.output_dir=runs/x"]
    assert common_sh(show, tmp_path, {"OUT": "o"}) == ["o", "run.output_dir=o"]
    # The default short folder is scratch (a rerun overwrites it); a folder given by OUT is never overwritten.
    assert common_sh(show, tmp_path, {"SHORT": "1"}) == [
        "runs/x_short", "run.output_dir=runs/x_short", "sft.num_problems=8", "run.overwrite=true"
    ]
    assert common_sh(show, tmp_path, {"SHORT": "1", "OUT": "o"}) == ["o", "run.output_dir=o", "sft.num_problems=8"]


def run_example(name: str, *args: str, model_cache: str, out: Path | None = None):
    extra = {"SHORT": "1", **({"OUT": str(out)} if out is not None else {})}
    return run_checked(
        ["bash", str(REPO / "examples" / name), *args],
        f"SHORT=1 bash examples/{name}",
        cwd=REPO,
        env=script_env(model_cache, **extra),
        timeout=TIMEOUT_S,
    )


def closing(stdout: str) -> str:
    """What the script says after its run: from its "What this showed" line to the end."""
    start = stdout.rfind("What this showed:")
    assert start >= 0, f"no closing `What this showed:` line; output tail:\n{stdout[-2000:]}"
    return stdout[start:]


@pytest.fixture(scope="module")
def short_run(model_cache, tmp_path_factory):
    """``short_run(name)``: the (process result, run folder) of a training example's SHORT run, run once."""
    done: dict[str, tuple] = {}

    def run(name: str):
        if name not in done:
            out = tmp_path_factory.mktemp(name.removesuffix(".sh")) / "run"
            done[name] = (run_example(name, model_cache=model_cache, out=out), out)
        return done[name]

    return run


def test_every_example_script_is_run_here():
    scripts = {p.name for p in (REPO / "examples").glob("*.sh") if not p.name.startswith("_")}
    assert scripts == {*TRAINING, EVAL}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training_example_runs_short_and_says_what_it_showed(name, short_run):
    done, out = short_run(name)
    state = json.loads((out / "pipeline_state.json").read_text())
    assert [entry["folder"] for entry in state["completed"]] == TRAINING[name]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"]["name"] == "test-tiny" and config["run"]["output_dir"] == str(out)
    # The same evaluation as the quickstart: 4 samples per instance at temperature 1.
    assert (config["eval"]["num_samples"], config["eval"]["temperature"]) == (4, 1.0)
    assert SUCCESS_LINE.search(done.stdout), done.stdout[-2000:]
    said = closing(done.stdout)
    assert "SHORT=1" in said and said.count("\n") <= 5


@pytest.mark.slow
def test_the_single_agent_baseline_evaluates_like_the_team_it_is_compared_with(short_run):
    (_, l0), (_, l1) = short_run("train_plan_path_L0_grpo.sh"), short_run("train_plan_path_L1.sh")
    sections = [yaml.safe_load((out / "config.yaml").read_text())["eval"] for out in (l0, l1)]
    assert sections[0] == sections[1]
    # ... and like the quickstart: the same instances (SHORT takes the first 4), samples and temperature.
    quickstart = load_config("plan_path/quickstart")["eval"]
    for key in ("seed_start", "num_samples", "temperature"):
        assert sections[0][key] == quickstart[key], key
    said = closing(short_run("train_plan_path_L0_grpo.sh")[0].stdout)
    assert "train_plan_path_L1.sh" in said and "17% -> 15%" in said


@pytest.mark.slow
def test_eval_example_reproduces_the_runs_own_success(short_run, model_cache, tmp_path):
    _, run_dir = short_run("train_plan_path_L1.sh")
    done = run_example(EVAL, str(run_dir), model_cache=model_cache)
    report = json.loads((run_dir / "eval_results.json").read_text())
    own = json.loads((run_dir / "eval" / "eval.json").read_text())
    # The run's own eval settings, so its own numbers: same instances, samples, temperature and seeds.
    for key in ("metrics", "per_problem", "seeds", "num_samples", "temperature", "run_seed"):
        assert report[key] == own[key], key
    assert (report["num_samples"], report["temperature"]) == (4, 1.0)
    said = closing(done.stdout)
    assert str(run_dir) in said and "first 4" in said
    # Overrides pass through: fresh instances from an unused seed range, and the report where asked.
    other = tmp_path / "fresh.json"
    run_example(EVAL, str(run_dir), "eval.seed_start=2000000", "--output", str(other), model_cache=model_cache)
    fresh = json.loads(other.read_text())
    assert sorted(fresh["per_problem"]) == [str(s) for s in range(2000000, 2000004)]
