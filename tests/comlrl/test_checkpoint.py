"""Checkpoints: exact resume, every random stream, atomic writes, rotation, finding the latest."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peft import LoraConfig

from comlrl.checkpoint import (
    CheckpointNotFoundError,
    TrainerState,
    capture_rng,
    checkpoint_path,
    extra_dir,
    find_checkpoint,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_rng,
    rotate_checkpoints,
    save_checkpoint,
)
from comlrl.policy import MultiAgentPolicy
from comlrl.seeding import seed_everything

BATCHES = [
    torch.tensor([[5, 17, 42, 99, 7, 3]]),
    torch.tensor([[11, 12, 13, 14, 15, 16]]),
    torch.tensor([[40, 41, 2, 9, 9, 30]]),
]


@dataclass
class Run:
    """A tiny multi-agent training loop with every kind of state a real trainer has."""

    policy: MultiAgentPolicy
    optimizers: dict
    schedulers: dict
    generators: dict
    state: TrainerState = field(default_factory=lambda: TrainerState(step=0, data_cursor=0))

    def step(self) -> None:
        """One optimizer step per policy: seeded token dropout (torch generator), a loss weight (numpy),
        a batch pick (Python random) and global torch noise, so each stream matters."""
        losses = {}
        for name in self.policy.policies:
            agent = self.policy.agents_of(name)[0]
            cursor = self.state.data_cursor
            ids = BATCHES[(cursor + self.generators["order"].randrange(3)) % len(BATCHES)]
            keep = torch.rand(ids.shape, generator=self.generators["dropout"]) > 0.2
            weight = float(self.generators["weights"].uniform(0.5, 1.5))
            with self.policy.activate(agent) as handle:
                loss = handle.model(ids * keep, labels=ids).loss * weight * (1 + 0.01 * torch.randn(()))
            loss.backward()
            self.optimizers[name].step()
            self.schedulers[name].step()
            self.optimizers[name].zero_grad()
            self.policy.bump_version(name)
            losses[name] = round(loss.item(), 6)
        self.state.step += 1
        self.state.data_cursor += 1
        self.state.log_history.append({"step": self.state.step, "loss": losses})


def make_run(arrangement: str, path: str, seed: int) -> Run:
    seed_everything(seed)
    if arrangement == "per_agent":
        policy = MultiAgentPolicy.per_agent({"writer": path, "critic": path})
    elif arrangement == "lora":
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        policy = MultiAgentPolicy.lora(path, ["writer", "critic"], config)
    else:
        policy = MultiAgentPolicy.shared(path, ["writer", "critic"])
    optimizers = {p: torch.optim.AdamW(policy.trainable_parameters(p), lr=1e-2) for p in policy.policies}
    schedulers = {
        p: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)) for p, o in optimizers.items()
    }
    generators = {
        "dropout": torch.Generator().manual_seed(seed),
        "weights": np.random.default_rng(seed),
        "order": random.Random(seed),
    }
    return Run(policy, optimizers, schedulers, generators)


def save(run: Run, output_dir, **kwargs):
    return save_checkpoint(
        output_dir,
        run.state,
        policy=run.policy,
        optimizers=run.optimizers,
        schedulers=run.schedulers,
        generators=run.generators,
        **kwargs,
    )


def weights(run: Run) -> dict[str, torch.Tensor]:
    return {
        f"{i}.{n}": p.detach().clone()
        for i, m in enumerate(run.policy.models())
        for n, p in m.named_parameters()
    }


@pytest.mark.parametrize("arrangement", ["per_agent", "lora", "shared"])
def test_resume_from_checkpoint_continues_bitwise_like_an_uninterrupted_run(
    arrangement, tiny_model_path, tmp_path
):
    straight = make_run(arrangement, tiny_model_path, seed=1)
    initial = weights(straight)
    straight.step()
    straight.step()
    ckpt = save(
        straight, tmp_path, extra={"replay": lambda d: (d / "index.json").write_text('{"rounds": 2}')}
    )
    assert ckpt == checkpoint_path(tmp_path, 2)
    straight.step()
    straight.step()
    expected, expected_rng = weights(straight), capture_rng(straight.generators)

    # A fresh process-like start: other seeds everywhere, so only the checkpoint can make it match.
    resumed = make_run(arrangement, tiny_model_path, seed=99)
    resumed.state = load_checkpoint(
        latest_checkpoint(tmp_path),
        policy=resumed.policy,
        optimizers=resumed.optimizers,
        schedulers=resumed.schedulers,
        generators=resumed.generators,
    )
    assert resumed.state.step == 2 and resumed.state.data_cursor == 2
    assert json.loads((extra_dir(ckpt, "replay") / "index.json").read_text()) == {"rounds": 2}
    resumed.step()
    resumed.step()

    got = weights(resumed)
    assert any(not torch.equal(got[k], initial[k]) for k in got)  # training did move the weights
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)
    assert capture_rng(resumed.generators) == expected_rng
    assert resumed.state.log_history == straight.state.log_history
    assert {p: resumed.policy.version(p) for p in resumed.policy.policies} == {
        p: straight.policy.version(p) for p in straight.policy.policies
    }
    for name in resumed.policy.policies:
        assert resumed.schedulers[name].last_epoch == straight.schedulers[name].last_epoch == 4


def test_resume_without_optimizer_state_diverges(tiny_model_path, tmp_path):
    """The bitwise test above is sensitive: leaving out the Adam moments changes the result."""
    straight = make_run("per_agent", tiny_model_path, seed=1)
    straight.step()
    straight.step()
    save(straight, tmp_path)
    straight.step()
    resumed = make_run("per_agent", tiny_model_path, seed=1)
    resumed.state = load_checkpoint(
        checkpoint_path(tmp_path, 2),
        policy=resumed.policy,
        schedulers=resumed.schedulers,
        generators=resumed.generators,
    )
    resumed.step()
    got, expected = weights(resumed), weights(straight)
    assert any(not torch.equal(got[k], expected[k]) for k in got)


def test_checkpoint_holds_every_part(tiny_model_path, tmp_path):
    run = make_run("lora", tiny_model_path, seed=0)
    run.step()
    ckpt = save(run, tmp_path)
    names = {p.name for p in ckpt.iterdir()}
    assert {"policy_layout.json", "lora", "trainer_state.json", "rng_state.json"} <= names
    assert {
        "optimizer-writer.pt",
        "optimizer-critic.pt",
        "scheduler-writer.pt",
        "scheduler-critic.pt",
    } <= names
    rng = json.loads((ckpt / "rng_state.json").read_text())
    assert set(rng["generators"]) == {"dropout", "weights", "order"}
    assert {"python", "numpy", "torch"} <= set(rng["global"])
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 1 and state["data_cursor"] == 1 and len(state["log_history"]) == 1


def test_save_does_not_shift_random_streams(tiny_model_path, tmp_path):
    run = make_run("per_agent", tiny_model_path, seed=4)
    before = capture_rng(run.generators)
    save(run, tmp_path)
    assert capture_rng(run.generators) == before


def _dummy_optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)


def test_rotation_keeps_the_newest_and_never_the_one_just_written(tmp_path):
    opt = {"p": _dummy_optimizer()}
    for step in range(1, 6):
        save_checkpoint(tmp_path, TrainerState(step=step), optimizers=opt, save_total_limit=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4, 5]
    # a run resumed from an older step writes checkpoint-3: it is kept, the oldest other goes
    save_checkpoint(tmp_path, TrainerState(step=3), optimizers=opt, save_total_limit=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 5]
    save_checkpoint(tmp_path, TrainerState(step=6), save_total_limit=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [6]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-6"]  # no hidden leftovers
    with pytest.raises(ValueError, match="`save_total_limit` must be an int >= 1, got 0"):
        rotate_checkpoints(tmp_path, 0, keep=tmp_path / "checkpoint-6")


def test_crash_mid_write_leaves_no_partial_checkpoint(tmp_path):
    opt = {"p": _dummy_optimizer()}
    save_checkpoint(tmp_path, TrainerState(step=2, data_cursor="old"), optimizers=opt)

    def explode(folder):
        (folder / "half.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")

    for step in (3, 2):  # a new step, and overwriting an existing one
        with pytest.raises(RuntimeError, match="disk full"):
            save_checkpoint(tmp_path, TrainerState(step=step), optimizers=opt, extra={"replay": explode})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"]
    assert json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())["data_cursor"] == "old"
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"


def test_latest_checkpoint_ignores_temporary_and_incomplete_folders(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    assert latest_checkpoint(tmp_path) is None
    for step in (3, 10):
        save_checkpoint(tmp_path, TrainerState(step=step))
    (tmp_path / ".tmp-checkpoint-11-abc").mkdir()
    (tmp_path / ".tmp-checkpoint-11-abc" / "trainer_state.json").write_text('{"step": 11}')
    (tmp_path / "checkpoint-12").mkdir()  # no trainer state: not complete
    (tmp_path / "checkpoint-final").mkdir()
    (tmp_path / ".checkpoint-13.old").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # numeric, not lexicographic order
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 10]


def test_find_checkpoint_resolves_every_form_a_resume_names(tmp_path):
    runs = tmp_path / "runs"
    for step in (2, 10):
        save_checkpoint(runs, TrainerState(step=step))
    (runs / "checkpoint-11").mkdir()  # incomplete: never chosen
    # A checkpoint-N folder is itself, even when a later one exists.
    assert find_checkpoint(runs / "checkpoint-2") == runs / "checkpoint-2"
    assert find_checkpoint(str(runs / "checkpoint-10")) == runs / "checkpoint-10"
    # A folder holding them gives its latest complete one; True looks in output_dir.
    assert find_checkpoint(runs) == runs / "checkpoint-10"
    assert find_checkpoint(True, output_dir=runs) == runs / "checkpoint-10"
    # Missing: an error that is a FileNotFoundError and a ValueError and names the field.
    for missing in (tmp_path / "nowhere", tmp_path / "empty", runs / "checkpoint-11"):
        (tmp_path / "empty").mkdir(exist_ok=True)
        with pytest.raises(CheckpointNotFoundError, match="`resume_from_checkpoint` .*no checkpoint at"):
            find_checkpoint(missing)
    with pytest.raises(FileNotFoundError, match="`resume` is True but .* holds no complete checkpoint"):
        find_checkpoint(True, output_dir=tmp_path / "empty", field="resume")
    with pytest.raises(ValueError, match="`run.resume` .*no checkpoint at"):
        find_checkpoint(tmp_path / "nowhere", field="run.resume")
    with pytest.raises(ValueError, match="no output_dir was given"):
        find_checkpoint(True)
    with pytest.raises(TypeError, match="`resume_from_checkpoint` must be a path or True, got 3"):
        find_checkpoint(3)


def test_load_names_what_is_missing(tmp_path):
    ckpt = save_checkpoint(
        tmp_path,
        TrainerState(step=1),
        optimizers={"a": _dummy_optimizer()},
        generators={"g": torch.Generator().manual_seed(0)},
    )
    with pytest.raises(FileNotFoundError, match="no optimizer 'b'"):
        load_checkpoint(ckpt, optimizers={"b": _dummy_optimizer()})
    with pytest.raises(KeyError, match="generator 'h' is not in the checkpoint"):
        load_checkpoint(ckpt, generators={"h": torch.Generator()})
    with pytest.raises(TypeError, match="generator 'g' was saved as torch but the live one is numpy"):
        load_checkpoint(ckpt, generators={"g": np.random.default_rng(0)})
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="`optimizers` keys become file names"):
        save_checkpoint(tmp_path, TrainerState(step=2), optimizers={"a/b": _dummy_optimizer()})
    with pytest.raises(ValueError, match="`step` must be an int >= 0, got -1"):
        TrainerState(step=-1)


@settings(max_examples=20)
@given(seed=st.integers(0, 2**63 - 1), draws=st.integers(0, 50))
def test_random_streams_round_trip_through_json(seed, draws):
    generators = {
        "torch": torch.Generator().manual_seed(seed),
        "pcg": np.random.default_rng(seed),  # 128-bit integer state
        "mt": np.random.Generator(np.random.MT19937(seed % 2**32)),
        "py": random.Random(seed),
    }
    seed_everything(seed)
    for _ in range(draws):  # move every stream, the normal-cache ones included
        torch.rand(1, generator=generators["torch"]), generators["pcg"].normal(), generators["mt"].normal()
        generators["py"].gauss(0, 1), np.random.normal(), random.random(), torch.randn(1)
    snapshot = json.loads(json.dumps(capture_rng(generators)))

    def sample():
        return (
            torch.rand(3, generator=generators["torch"]).tolist(),
            generators["pcg"].normal(size=3).tolist(),
            generators["mt"].integers(0, 1000, 3).tolist(),
            generators["py"].gauss(0, 1),
            np.random.normal(size=2).tolist(),
            random.random(),
            torch.randn(2).tolist(),
        )

    first = sample()
    restore_rng(snapshot, generators)
    assert sample() == first
