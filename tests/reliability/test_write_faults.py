"""Writes that fail (a full disk, an I/O error) and writes a kill cut short.

Every failing write must leave the previous state readable, stop with a :class:`WriteError` whose message
names the file and the OS reason, and let a later resume continue from that previous state. Full disks
are real where the machine allows it (a small tmpfs mounted for the test, as root) and injected
(``os.write`` / ``os.fsync`` / ``save_pretrained`` raising) otherwise and for ``EIO``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from comlrl.atomic_io import WriteError, append_line, atomic_write_json, remove_stale_temporaries
from comlrl.checkpoint import TrainerState, latest_checkpoint, list_checkpoints, read_trainer_state
from comlrl.policy import MultiAgentPolicy
from comlrl.reporting import MetricsLogger, read_metrics
from comlrl.trainers.core.trainer_core import TrainerCore
from comlrl.trainers.preference.records import PreferencePair, read_round, sidecar_path
from comlrl.trainers.preference.replay import PreferenceReplayBuffer
from comlrl.trainers.preference.rounds import check_round_files

BATCH = torch.tensor([[5, 17, 42, 99, 7, 3]])


class TinyTrainer(TrainerCore):
    """The smallest trainer on :class:`TrainerCore`: one shared policy, AdamW, a step counter and a log."""

    verbose = False

    def __init__(self, output_dir: Path, model_path: str) -> None:
        super().__init__()
        self._output_dir = Path(output_dir)
        self.policy = MultiAgentPolicy.shared(model_path, ["writer", "critic"])
        self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters("shared"), lr=1e-2)
        self.step = 0

    @property
    def output_dir(self) -> Path:
        return self._output_dir

    def checkpoint_step(self) -> int:
        return self.step

    def restore_checkpoint_step(self, step: int) -> None:
        self.step = step

    def checkpoint_optimizers(self):
        return {"shared": self.optimizer}

    def train_step(self) -> None:
        loss = self.policy.handle("shared").model(BATCH, labels=BATCH).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.policy.bump_version("shared")
        self.step += 1
        self.metrics_logger.log({"loss": loss.item()}, self.step)


def weights(policy: MultiAgentPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for m in policy.models() for n, p in m.named_parameters()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def make_pair(i: int) -> PreferencePair:
    return PreferencePair(
        prompts=[f"prompt {i}"], winner_completions=[f"win {i}"], loser_completions=[f"lose {i}"],
        winner_reward=1.0 + i, loser_reward=float(i), candidate_reward_mean=0.5 + i,
        prompt_token_ids=[[1, i]], winner_token_ids=[[i, 2]], loser_token_ids=[[i + 7]],
    )


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 4 MiB mounted for the test (skipped where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Take all but ``leave`` bytes of ``disk`` with one file (removed to free the disk again)."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


def fail_os_calls(monkeypatch, name: str, code: int, *, after: int = 0) -> None:
    """``os.<name>`` raises ``OSError(code)`` from its ``after + 1``-th call on."""
    real, calls = getattr(os, name), []

    def failing(*args):
        calls.append(args)
        if len(calls) > after:
            raise OSError(code, os.strerror(code))
        return real(*args)

    monkeypatch.setattr(os, name, failing)


def test_checkpoint_save_on_a_full_disk_keeps_the_last_checkpoint_and_the_run_resumes(
    small_disk, tiny_model_path
):
    out = small_disk / "run"
    trainer = TinyTrainer(out, tiny_model_path)
    trainer.train_step()
    trainer.save_checkpoint()
    at_step_1 = weights(trainer.policy)
    trainer.train_step()
    metrics_before = (out / "metrics.jsonl").read_bytes()
    filler = fill(small_disk, leave=64 * 1024)

    with pytest.raises(WriteError, match=r"checkpoint-2: .*No space left on device \[ENOSPC\].*checkpoint-1 \(unchanged\)"):
        trainer.save_checkpoint()
    assert [path.name for _, path in list_checkpoints(out)] == ["checkpoint-1"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # the scratch folder is gone
    assert (out / "metrics.jsonl").read_bytes() == metrics_before

    # The run stopped; a new process resumes from checkpoint-1 (weights, step, metrics log) and goes on.
    filler.unlink()
    resumed = TinyTrainer(out, tiny_model_path)
    assert resumed.load_checkpoint(True).step == 1 and resumed.step == 1
    assert same(weights(resumed.policy), at_step_1)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1]
    resumed.train_step()
    assert resumed.save_checkpoint() == out / "checkpoint-2"
    assert same(weights(resumed.policy), weights(trainer.policy))  # the same step 2 as before the failure


def test_io_error_during_a_checkpoint_save_names_the_file_and_keeps_the_previous_one(
    tmp_path, tiny_model_path, monkeypatch
):
    trainer = TinyTrainer(tmp_path, tiny_model_path)
    trainer.train_step()
    first = trainer.save_checkpoint()
    state_before = (first / "trainer_state.json").read_bytes()
    trainer.train_step()
    fail_os_calls(monkeypatch, "fsync", errno.EIO)
    with pytest.raises(WriteError, match=r"cannot write .*checkpoint-2: writing .*: Input/output error \[EIO\]") as info:
        trainer.save_checkpoint()
    assert info.value.errno == errno.EIO and info.value.filename == str(tmp_path / "checkpoint-2")
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == first and read_trainer_state(first).step == 1
    assert (first / "trainer_state.json").read_bytes() == state_before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_round_file_on_a_full_disk_leaves_the_earlier_rounds_and_no_half_round(small_disk):
    replay = small_disk / "replay"
    buffer = PreferenceReplayBuffer(replay, mode="all_history", seed=3)
    buffer.add_round([make_pair(i) for i in range(3)])
    first = read_round(replay / "iteration_0001.json")
    # Room for the small sidecar of round 2 but not for its JSON file.
    filler = fill(small_disk, leave=8 * 1024)
    big = [PreferencePair(**{**vars(make_pair(i)), "prompts": ["x" * 3000]}) for i in range(8)]
    with pytest.raises(WriteError, match=r"iteration_0002\.json: No space left on device \[ENOSPC\]"):
        buffer.add_round(big)
    assert [r.iteration for r in buffer.rounds] == [1]
    assert sorted(p.name for p in replay.iterdir()) == ["iteration_0001.ids.bin", "iteration_0001.json"]
    assert check_round_files(replay) == [replay / "iteration_0001.json"]
    assert read_round(replay / "iteration_0001.json") == first
    filler.unlink()
    buffer.add_round(big)  # the disk has room again: the same round is written whole
    assert read_round(replay / "iteration_0002.json").pairs == big


def test_io_error_on_the_round_json_removes_the_new_sidecar(tmp_path, monkeypatch):
    buffer = PreferenceReplayBuffer(tmp_path, mode="all_history", seed=3)
    buffer.add_round([make_pair(0)])
    fail_os_calls(monkeypatch, "write", errno.EIO, after=1)  # the sidecar is written, the JSON file is not
    with pytest.raises(WriteError, match=r"iteration_0002\.json: Input/output error \[EIO\]"):
        buffer.add_round([make_pair(1)])
    monkeypatch.undo()
    assert not sidecar_path(tmp_path / "iteration_0002.json").exists()
    assert not (tmp_path / "iteration_0002.json").exists()
    assert check_round_files(tmp_path) == [tmp_path / "iteration_0001.json"]


def test_metrics_line_on_a_full_disk_is_never_half_written(small_disk):
    log = MetricsLogger(small_disk, "none")
    log.log({"loss": 0.5}, step=1)
    before = (small_disk / "metrics.jsonl").read_bytes()
    filler = fill(small_disk, leave=0)
    # A line longer than what is left of the file's last page: the kernel writes part of it, then stops.
    wide = {f"agent/{i:04d}/reward": i / 7 for i in range(400)}
    with pytest.raises(WriteError, match=r"metrics\.jsonl: .*\[ENOSPC\]; the file is unchanged"):
        log.log(wide, step=2)
    assert (small_disk / "metrics.jsonl").read_bytes() == before
    assert log.history == [{"step": 1, "loss": 0.5}]
    filler.unlink()
    log.log(wide, step=2)
    assert read_metrics(small_disk / "metrics.jsonl") == [{"step": 1, "loss": 0.5}, {"step": 2, **wide}]


@pytest.mark.parametrize("fault", ["eio", "short"])
def test_metrics_line_write_failure_truncates_back(tmp_path, monkeypatch, fault):
    path = tmp_path / "metrics.jsonl"
    append_line(path, json.dumps({"step": 1}))
    real = os.write
    if fault == "eio":
        fail_os_calls(monkeypatch, "write", errno.EIO)
        message = r"Input/output error \[EIO\]"
    else:
        monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data)[:5]))  # a real partial write
        message = r"short write \(5 of 12 bytes\) \[ENOSPC\]"
    with pytest.raises(WriteError, match=rf"cannot write {re.escape(str(path))}: {message}; the file is unchanged"):
        append_line(path, json.dumps({"step": 2}))
    monkeypatch.undo()
    assert path.read_text() == '{"step": 1}\n'


def test_policy_save_failure_keeps_every_saved_policy(tmp_path, tiny_model_path, monkeypatch):
    policy = MultiAgentPolicy.per_agent({"writer": tiny_model_path, "critic": tiny_model_path})
    policy.save(tmp_path / "policies")
    saved = weights(MultiAgentPolicy.load(tmp_path / "policies"))
    layout = (tmp_path / "policies" / "policy_layout.json").read_bytes()
    with torch.no_grad():
        for model in policy.models():
            for p in model.parameters():
                p.add_(1.0)
    policy.bump_version("writer")
    critic = policy.handle("critic").model

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(critic, "save_pretrained", broken)  # the writer's folder is already written
    with pytest.raises(WriteError, match=r"cannot write .*policies: Input/output error \[EIO\]; the policies"):
        policy.save(tmp_path / "policies")
    assert (tmp_path / "policies" / "policy_layout.json").read_bytes() == layout
    assert same(weights(MultiAgentPolicy.load(tmp_path / "policies")), saved)  # neither folder replaced
    assert sorted(p.name for p in (tmp_path / "policies").iterdir()) == ["critic", "policy_layout.json", "writer"]


def test_save_model_on_a_full_disk_reports_the_folder_and_the_reason(small_disk, tiny_model_path, tmp_path):
    trainer = TinyTrainer(tmp_path / "run", tiny_model_path)
    filler = fill(small_disk, leave=16 * 1024)
    with pytest.raises(WriteError, match=r"cannot write .*/disk/model: No space left on device \[ENOSPC\] \(SafetensorError"):
        trainer.save_model(small_disk / "model")
    assert not (small_disk / "model" / "policy_layout.json").exists()
    assert [p.name for p in (small_disk / "model").iterdir()] == []
    filler.unlink()
    trainer.save_model(small_disk / "model")
    assert same(weights(MultiAgentPolicy.load(small_disk / "model")), weights(trainer.policy))


# ---------------------------------------------------------------------------------------- leftovers
def dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_resume_removes_the_leftovers_of_a_killed_writer_and_nothing_else(
    tmp_path, tiny_model_path, caplog
):
    out = tmp_path / "run"
    trainer = TinyTrainer(out, tiny_model_path)
    trainer.train_step()
    trainer.save_checkpoint()
    gone = dead_pid()
    leftovers = [
        out / f".tmp-checkpoint-2@{gone}-ab3_x9yz",  # a checkpoint being built
        out / ".tmp-checkpoint-3-k2j4h5g6",  # the same, named before names carried the pid
        out / f".deleting-checkpoint-0-{gone}",  # a rotation cut short
        out / f".metrics.jsonl.{gone}-q1w2e3r4.tmp",  # an atomic rewrite
        out / "preference_replay" / ".iteration_0002.json.z9y8x7w6.tmp",
        out / "policies" / f".tmp-shared@{gone}-aaaa1111",
    ]
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        keep = [
            out / f".metrics.jsonl.{live.pid}-q1w2e3r4.tmp",  # another process is writing it right now
            out / f".tmp-checkpoint-4@{live.pid}-ab3_x9yz",  # another process is building this checkpoint
            out / ".tmp-notes",  # not one of our names
            out / "notes.tmp",
            out / ".checkpoint-7.old",  # trash whose replacement is missing: it may be the only copy
            tmp_path / f".tmp-checkpoint-9@{gone}-ab3_x9yz",  # outside the output folder
        ]
        # The trash of a replace that finished is garbage: its new folder is in place.
        (out / "policies" / "shared").mkdir(parents=True)
        leftovers.append(out / "policies" / ".shared.old")
        for path in leftovers + keep:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.name.endswith(".tmp") or path.name == ".tmp-notes":
                path.write_text("partial")
            else:
                path.mkdir()
                (path / "model.safetensors").write_bytes(b"\0" * 10)

        resumed = TinyTrainer(out, tiny_model_path)
        with caplog.at_level(logging.WARNING, logger="comlrl.atomic_io"):
            assert resumed.load_checkpoint(True).step == 1
        assert not [p for p in leftovers if p.exists()]
        assert all(p.exists() for p in keep)
        message = caplog.messages[-1]
        assert message.startswith(f"removed {len(leftovers)} leftover(s) of interrupted writes under {out}: ")
        assert all(str(p) in message for p in leftovers)
    finally:
        live.kill()
        live.wait()


def test_cleanup_counts_only_our_names(tmp_path):
    atomic_write_json(tmp_path / "state.json", {"a": 1})
    assert remove_stale_temporaries(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    assert TrainerState(step=0).to_json()["format_version"] == 1
