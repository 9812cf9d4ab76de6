"""Damaged, hand-edited and foreign files: each is refused with an error that names the file (and the field
where one is wrong) before anything live changes, never loaded in part; files written before format
versions existed still read as version 1."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from comlrl.checkpoint import CheckpointError, TrainerState, load_checkpoint, save_checkpoint
from comlrl.policy import MultiAgentPolicy
from comlrl.policy.multi_agent import PolicyFileError
from comlrl.reporting import MetricsFileError, MetricsLogger, read_metrics
from comlrl.trainers.core.data_parallel import DataParallel
from comlrl.trainers.preference.records import (
    PreferencePair,
    RoundFileError,
    read_round,
    sidecar_path,
    write_round,
)
from comlrl.trainers.preference.replay import PreferenceReplayBuffer
from comlrl.trainers.preference.rounds import PreferenceRounds, check_round_files

BATCH = torch.tensor([[5, 17, 42, 99, 7, 3]])


def build(model_path: str):
    policy = MultiAgentPolicy.shared(model_path, ["writer", "critic"])
    optimizer = torch.optim.AdamW(policy.trainable_parameters("shared"), lr=1e-2)
    return policy, optimizer


def weights(policy: MultiAgentPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for m in policy.models() for n, p in m.named_parameters()}


@pytest.fixture(scope="module")
def saved_checkpoint(tiny_model_path, tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A checkpoint after one training step, and the weights it holds."""
    policy, optimizer = build(tiny_model_path)
    loss = policy.handle("shared").model(BATCH, labels=BATCH).loss
    loss.backward()
    optimizer.step()
    state = TrainerState(step=1, data_cursor={"index": 4}, log_history=[{"step": 1, "loss": loss.item()}])
    out = tmp_path_factory.mktemp("saved")
    return save_checkpoint(out, state, policy=policy, optimizers={"shared": optimizer}), weights(policy)


@pytest.fixture
def checkpoint(saved_checkpoint, tmp_path) -> Path:
    return Path(shutil.copytree(saved_checkpoint[0], tmp_path / "checkpoint-1"))


def edit_json(checkpoint: Path, name: str, change) -> None:
    """Rewrite one JSON file of a checkpoint; its recorded size follows unless it is the trainer state."""
    path = checkpoint / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    if name != "trainer_state.json":
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        state["files"][name] = path.stat().st_size
        (checkpoint / "trainer_state.json").write_text(json.dumps(state))


def make_legacy(checkpoint: Path) -> None:
    """What the same checkpoint looked like before format versions and the file list existed."""
    edit_json(checkpoint, "rng_state.json", lambda d: d.pop("format_version"))
    edit_json(checkpoint, "trainer_state.json", lambda d: [d.pop("format_version"), d.pop("files")])


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    "truncated weights": (
        lambda c: truncate(c / "shared" / "model.safetensors"),
        r"shared/model\.safetensors: is \d+ bytes but trainer_state\.json recorded \d+; the file is damaged "
        r"\(truncated",
    ),
    "missing optimizer": (
        lambda c: (c / "optimizer-shared.pt").unlink(),
        r"checkpoint-1/optimizer-shared\.pt: file is missing from the checkpoint",
    ),
    "missing tokenizer": (
        lambda c: (c / "shared" / "tokenizer.json").unlink(),
        r"shared/tokenizer\.json: file is missing from the checkpoint",
    ),
    "state not JSON": (
        lambda c: (c / "trainer_state.json").write_text('{"step": 1, "data_cursor": '),
        r"checkpoint-1/trainer_state\.json: not valid JSON",
    ),
    "state field of the wrong type": (
        lambda c: edit_json(c, "trainer_state.json", lambda d: d.update(log_history={"step": 1})),
        r"trainer_state\.json: field 'log_history' must be a list, got dict",
    ),
    "state without its step": (
        lambda c: edit_json(c, "trainer_state.json", lambda d: d.pop("step")),
        r"trainer_state\.json: field 'step' is missing",
    ),
    "state from a newer version": (
        lambda c: edit_json(c, "trainer_state.json", lambda d: d.update(format_version=2)),
        r"trainer_state\.json: `format_version` is 2, this version of comlrl reads 1",
    ),
    "random streams from a newer version": (
        lambda c: edit_json(c, "rng_state.json", lambda d: d.update(format_version=7)),
        r"rng_state\.json: `format_version` is 7, this version of comlrl reads 1",
    ),
    "layout from a newer version": (
        lambda c: edit_json(c, "policy_layout.json", lambda d: d.update(format_version=2)),
        r"policy_layout\.json: `format_version` is 2, this version of comlrl reads 1",
    ),
    "legacy checkpoint, truncated weights": (
        lambda c: [make_legacy(c), truncate(c / "shared" / "model.safetensors")],
        r"shared/model\.safetensors: truncated safetensors file \(\d+ bytes, its header describes \d+\)",
    ),
    "legacy checkpoint, weights missing": (
        lambda c: [make_legacy(c), (c / "shared" / "model.safetensors").unlink()],
        r"checkpoint-1/shared: no weights file \(model\.safetensors or ",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_by_name_and_nothing_is_loaded(
    damage, checkpoint, tiny_model_path
):
    change, message = DAMAGE[damage]
    change(checkpoint)
    policy, optimizer = build(tiny_model_path)
    before = weights(policy)
    with pytest.raises((CheckpointError, PolicyFileError), match=message):
        load_checkpoint(checkpoint, policy=policy, optimizers={"shared": optimizer})
    after = weights(policy)
    assert all(torch.equal(before[k], after[k]) for k in before)  # not one tensor was overwritten
    assert optimizer.state_dict()["state"] == {}


def test_a_checkpoint_from_before_format_versions_loads_as_version_1(checkpoint, saved_checkpoint, tiny_model_path):
    make_legacy(checkpoint)
    assert "format_version" not in json.loads((checkpoint / "trainer_state.json").read_text())
    policy, optimizer = build(tiny_model_path)
    state = load_checkpoint(checkpoint, policy=policy, optimizers={"shared": optimizer})
    assert (state.step, state.data_cursor) == (1, {"index": 4})
    expected, loaded = saved_checkpoint[1], weights(policy)
    assert all(torch.equal(expected[k], loaded[k]) for k in expected)
    assert len(optimizer.state_dict()["state"]) == len(list(policy.trainable_parameters("shared")))


def test_a_saved_policy_folder_is_checked_before_it_is_loaded(saved_checkpoint, tmp_path):
    folder = Path(shutil.copytree(saved_checkpoint[0], tmp_path / "policies"))
    (folder / "policy_layout.json").write_text("[1, 2")
    with pytest.raises(PolicyFileError, match=r"policies/policy_layout\.json: not valid JSON"):
        MultiAgentPolicy.load(folder)
    (folder / "policy_layout.json").write_text(json.dumps({"format": "comlrl.policy", "format_version": 1}))
    with pytest.raises(PolicyFileError, match=r"policy_layout\.json: field 'arrangement' must be a str, got None"):
        MultiAgentPolicy.load(folder)


# ---------------------------------------------------------------------------------------- round files
def pair(i: int) -> PreferencePair:
    return PreferencePair(
        prompts=[f"prompt {i}"], winner_completions=[f"win {i}"], loser_completions=[f"lose {i}"],
        winner_reward=1.0 + i, loser_reward=float(i), candidate_reward_mean=0.5 + i,
        prompt_token_ids=[[1, i]], winner_token_ids=[[i, 2]], loser_token_ids=[[i + 7]],
    )


def hand_edit(path: Path, change) -> None:
    """Edit a round file as a person would: parse, change, write back (the sidecar no longer matches, so
    it goes, as it would for a file brought from elsewhere)."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))
    sidecar_path(path).unlink(missing_ok=True)


ROUND_EDITS = {
    "a number as text": (
        lambda d: d["pairs"][1].update(winner_reward="high"),
        r"iteration_0002\.json: record 1: record field 'winner_reward' must be a number, got str",
    ),
    "a prompt that is not a list": (
        lambda d: d["pairs"][0].update(prompts="p"),
        r"iteration_0002\.json: record 0: record field 'prompts' must be a list of strings",
    ),
    "a missing record field": (
        lambda d: d["pairs"][0].pop("loser_reward"),
        r"iteration_0002\.json: record 0: record is missing field\(s\) 'loser_reward'",
    ),
    "a missing key": (lambda d: d.pop("num_pairs"), r"iteration_0002\.json: missing key 'num_pairs'"),
    "an unknown key": (lambda d: d.update(note="x"), r"iteration_0002\.json: unknown key\(s\) \['note'\]"),
    "a round number that does not match the name": (
        lambda d: d.update(iteration=5),
        r"iteration_0002\.json: 'iteration' is 5 but the file name says 2",
    ),
    "a newer format": (
        lambda d: d.update(format_version=2),
        r"iteration_0002\.json: 'format_version' is 2, this comlrl reads 1",
    ),
}


@pytest.fixture
def rounds(tmp_path) -> Path:
    folder = tmp_path / "replay"
    write_round(folder / "iteration_0001.json", 1, [pair(0)])
    write_round(folder / "iteration_0002.json", 2, [pair(1), pair(2)])
    return folder


@pytest.mark.parametrize("edit", list(ROUND_EDITS))
def test_a_hand_edited_round_file_is_refused_naming_the_file_and_field(edit, rounds):
    change, message = ROUND_EDITS[edit]
    hand_edit(rounds / "iteration_0002.json", change)
    with pytest.raises(RoundFileError, match=message):
        check_round_files(rounds)
    with pytest.raises(RoundFileError, match=message):
        read_round(rounds / "iteration_0002.json")


def test_round_files_must_follow_one_another(rounds):
    for path in (rounds / "iteration_0002.json", sidecar_path(rounds / "iteration_0002.json")):
        path.rename(path.with_name(path.name.replace("0002", "0003")))
    with pytest.raises(RoundFileError, match=r"iteration_0003\.json: round 3 does not follow round 1 .*expected "
                       r"iteration_0002\.json"):
        check_round_files(rounds)


def test_an_edit_behind_the_sidecars_back_is_caught_by_size(rounds):
    path = rounds / "iteration_0001.json"
    path.write_text(path.read_text().replace('"win 0"', '"a better win"'))
    with pytest.raises(RoundFileError, match=r"iteration_0001\.json: is \d+ bytes but was written with \d+ "):
        check_round_files(rounds)


def test_a_round_file_without_format_version_reads_as_version_1(rounds):
    hand_edit(rounds / "iteration_0002.json", lambda d: d.pop("format_version"))
    assert check_round_files(rounds) == [rounds / "iteration_0001.json", rounds / "iteration_0002.json"]
    assert [p.winner_reward for p in read_round(rounds / "iteration_0002.json").pairs] == [2.0, 3.0]


def test_resume_refuses_a_checkpoint_whose_round_file_was_edited(tmp_path):
    """The preference loop's restore checks the rounds it copies back before the replay state loads."""
    source = tmp_path / "checkpoint-2" / "extra" / "replay"
    buffer = PreferenceReplayBuffer(tmp_path / "first", mode="all_history", seed=1)
    for i in range(2):
        buffer.add_round([pair(i)])
    (source / "rounds").mkdir(parents=True)
    for path in buffer.files():
        shutil.copy2(path, source / "rounds" / path.name)
    (source / "state.json").write_text(json.dumps(buffer.state_dict()))
    hand_edit(source / "rounds" / "iteration_0002.json", lambda d: d["pairs"][0].update(loser_reward=[1]))
    args = SimpleNamespace(
        log_reward_distribution=False, resolved_preference_replay_dir=str(tmp_path / "resumed"),
        preference_replay_mode="all_history", preference_replay_k=None, preference_replay_lambda=None,
        preference_replay_sample_size=None, seed=1,
    )
    trainer = SimpleNamespace(args=args, data_cursor={"rounds_done": 2}, data_parallel=DataParallel("stub"))
    part = PreferenceRounds(trainer, comparator=object())
    with pytest.raises(RoundFileError, match=r"resumed/iteration_0002\.json: record 0: record field 'loser_reward'"):
        part.restore(tmp_path / "checkpoint-2")
    assert part.replay_buffer is None


# ---------------------------------------------------------------------------------------- metrics
def test_a_torn_last_metrics_line_is_dropped_with_a_warning_naming_file_and_line(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    torn = '{"step": 3, "lo'
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n' + torn)  # older runs
    warning = f"{path}, line 3: torn last line ({len(torn)} bytes, an interrupted write) dropped"
    with caplog.at_level(logging.WARNING, logger="comlrl.reporting"):
        assert read_metrics(path) == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}]
    assert caplog.messages == [warning]
    caplog.clear()
    logger = MetricsLogger(tmp_path, "none")  # a run that appends to it starts its records on a new line
    with caplog.at_level(logging.WARNING, logger="comlrl.reporting"):
        logger.log({"loss": 0.125}, step=3)
    assert caplog.messages == [warning]
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert path.read_text().splitlines()[-1] == '{"step": 3, "loss": 0.125, "format_version": 1}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"step": 1}\n{"step": 2, \n{"step": 3}\n', r"metrics\.jsonl, line 2: not a JSON record"),
        ('{"step": 1}\n[1, 2]\n', r"metrics\.jsonl, line 2: expected a JSON object, got list"),
        ('{"step": 1, "format_version": 2}\n', r"metrics\.jsonl, line 1: `format_version` is 2, this version of "
                                                r"comlrl reads 1"),
    ],
    ids=["torn middle line", "not an object", "newer version"],
)
def test_a_bad_metrics_line_is_an_error_naming_file_and_line(tmp_path, text, message):
    (tmp_path / "metrics.jsonl").write_text(text)
    with pytest.raises(MetricsFileError, match=message):
        read_metrics(tmp_path / "metrics.jsonl")
    with pytest.raises(MetricsFileError, match=message):
        MetricsLogger(tmp_path, "none").truncate_after(5)  # a resume does not silently drop records


def test_metrics_lines_from_before_format_versions_read_as_version_1(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n')
    logger = MetricsLogger(tmp_path, "none")
    logger.truncate_after(1)
    assert logger.history == [{"step": 1, "loss": 0.5}]
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": 0.5, "format_version": 1}\n'


# ---------------------------------------------------------------------------------------- pipeline
@pytest.fixture
def pipeline_run(tiny_model_path, tmp_path):
    from pettingllms.config import load_config
    from pettingllms.config.loader import save_resolved_config

    run_dir = tmp_path / "run"
    overrides = [f"model.name={tiny_model_path}", f"run.output_dir={run_dir}", "run.progress=false"]
    config = load_config("plan_path/L1", [*overrides, "run.resume=true"])
    run_dir.mkdir()
    save_resolved_config(load_config("plan_path/L1", overrides), run_dir)
    return config, run_dir


# A state with a stage done: one with none is a run that holds nothing to keep, and starts afresh.
SFT_DONE = {"stage": "sft", "folder": "sft", "metrics": {}, "seconds": 1.0}


def resume(config):
    import io

    from pettingllms.pipeline import Pipeline

    return Pipeline(config, out=io.StringIO(), plots=False).run()


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ('{"format": "pettingllms-pipeline", "version": 1, "completed": [', r"pipeline_state\.json: not valid JSON"),
        (json.dumps({"format": "pettingllms-pipeline", "version": 2, "completed": [SFT_DONE]}),
         r"pipeline_state\.json: `version` is 2, this version of pettingllms reads 1"),
        (json.dumps({"format": "pettingllms-pipeline", "version": 1, "completed": [{"stage": "sft"}]}),
         r"pipeline_state\.json: completed\[0\] must hold the strings 'stage' and 'folder'"),
        (json.dumps({"format": "other", "completed": []}), r"pipeline_state\.json: `format` is 'other'"),
    ],
    ids=["not JSON", "newer version", "entry without folder", "another format"],
)
def test_a_pipeline_resume_refuses_a_damaged_state_after_clearing_leftovers(pipeline_run, state, message, caplog):
    from pettingllms.config import ConfigError

    config, run_dir = pipeline_run
    (run_dir / "pipeline_state.json").write_text(state)
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    leftover = run_dir / "at_grpo" / f".tmp-checkpoint-3@{gone}-abcd1234"
    leftover.mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="comlrl.atomic_io"), pytest.raises(ConfigError, match=message):
        resume(config)
    assert not leftover.exists() and str(leftover) in caplog.text


def test_a_pipeline_resume_refuses_a_config_from_another_version(pipeline_run):
    from pettingllms.config import ConfigError

    config, run_dir = pipeline_run
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    saved["at_grpo"]["old_knob"] = 3  # a key this version does not have ...
    del saved["eval"]["greedy"]  # ... and one it added
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    (run_dir / "pipeline_state.json").write_text(json.dumps({"format": "pettingllms-pipeline", "version": 1,
                                                             "plan": [], "completed": [SFT_DONE]}))
    with pytest.raises(ConfigError, match=r"run/config\.yaml\), at \['at_grpo\.old_knob', 'eval\.greedy'\]"):
        resume(config)


def test_a_torn_last_transcript_line_is_dropped_and_a_resume_rewrites_the_file_whole(tmp_path, caplog):
    from pettingllms.execution import TRANSCRIPT_FILE
    from pettingllms.execution.transcripts import TranscriptWriter

    writer = TranscriptWriter(tmp_path, rate=1.0)
    writer.write([{"step": 1, "response": "a"}, {"step": 2, "response": "b"}])
    path = tmp_path / TRANSCRIPT_FILE
    with path.open("a") as handle:
        handle.write('{"step": 3, "resp')  # a kill in the middle of an older, unguarded write
    with caplog.at_level(logging.WARNING, logger="comlrl.reporting"):
        assert [r["step"] for r in writer.read()] == [1, 2]
    assert caplog.messages == [f"{path}, line 3: torn last line (17 bytes, an interrupted write) dropped"]
    writer.truncate_after(2)  # what a resume does before rolling step 3 out again
    writer.write([{"step": 3, "response": "c"}])
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]
    path.write_text('{"step": 1}\n{"step": 2, \n{"step": 3}\n')  # damage before the end is an error
    with pytest.raises(ValueError, match=r"rollouts\.jsonl, line 2: not a JSON record"):
        writer.read()
