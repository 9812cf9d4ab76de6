"""The trainer core every trainer extends: checkpoints with composed parts, resume lookup, save_model, and
the old import paths that now re-export the core."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from comlrl.checkpoint import CheckpointNotFoundError, extra_dir
from comlrl.policy import MultiAgentPolicy
from comlrl.trainers.core.trainer_core import TrainerCore, TrainerPart


class Counter(TrainerPart):
    """A part with JSON state and one payload file."""

    state_key = "counter"

    def __init__(self, events: list[str]) -> None:
        self.value = 0
        self.events = events

    def on_fresh_run(self) -> None:
        self.events.append("part fresh")
        self.value = 0

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state) -> None:
        self.events.append("part state")
        self.value = state["value"]

    def payloads(self) -> dict:
        value = self.value
        return {"counter": lambda folder: (folder / "value.txt").write_text(str(value))}

    def restore(self, checkpoint: Path) -> None:
        self.events.append("part payload")
        assert (extra_dir(checkpoint, "counter") / "value.txt").read_text() == str(self.value)


class Tiny(TrainerCore):
    """The smallest trainer on the core: one optimizer, a step counter, a part."""

    def __init__(self, path: str, output_dir: Path) -> None:
        super().__init__()
        self._output_dir = output_dir
        self.policy = MultiAgentPolicy.shared(path, ["writer", "critic"])
        self.optimizer = torch.optim.SGD(self.policy.trainable_parameters("shared"), lr=0.1)
        self.events: list[str] = []
        self.part = self.add_part(Counter(self.events))
        self.steps = 0
        self.verbose = False

    @property
    def output_dir(self) -> Path:
        return self._output_dir

    def checkpoint_step(self) -> int:
        return self.steps

    def checkpoint_optimizers(self):
        return {"shared": self.optimizer}

    def state_extra(self) -> dict:
        return {"steps": self.steps}

    def load_state_extra(self, extra) -> None:
        self.events.append("own state")
        self.steps = extra["steps"]

    def restore_payloads(self, checkpoint: Path) -> None:
        self.events.append("own payload")

    def step(self) -> None:
        self.steps += 1
        self.part.value += 10
        self.data_cursor = {"index": self.steps}
        self.metrics_logger.log({"loss": 1.0 / self.steps}, self.steps)


def test_checkpoint_holds_the_trainer_then_its_parts_and_loads_in_that_order(tiny_model_path, tmp_path):
    trainer = Tiny(tiny_model_path, tmp_path / "out")
    trainer.on_fresh_run()
    with trainer.progress_bar(total=2, desc="steps") as bar:
        for _ in range(2):
            trainer.step()
            bar.update(1)
    path = trainer.save_checkpoint()
    assert path == tmp_path / "out" / "checkpoint-2"
    state = json.loads((path / "trainer_state.json").read_text())
    assert list(state["extra"]) == ["steps", "counter"] and state["extra"]["counter"] == {"value": 20}
    assert state["data_cursor"] == {"index": 2} and [r["step"] for r in state["log_history"]] == [1, 2]
    assert (path / "optimizer-shared.pt").is_file() and (path / "extra" / "counter" / "value.txt").is_file()

    resumed = Tiny(tiny_model_path, tmp_path / "out")
    loaded = resumed.load_checkpoint(True)  # True: the latest in output_dir
    assert loaded.step == 2 and resumed.steps == 2 and resumed.part.value == 20
    assert resumed.data_cursor == {"index": 2}
    assert resumed.events == ["own state", "part state", "own payload", "part payload"]
    assert resumed.metrics_logger.history == trainer.metrics_logger.history
    assert resumed.find_checkpoint(tmp_path / "out") == path
    with pytest.raises(CheckpointNotFoundError, match="`resume_from_checkpoint`"):
        resumed.load_checkpoint(tmp_path / "nowhere")


def test_save_model_writes_the_policy_layout(tiny_model_path, tmp_path):
    trainer = Tiny(tiny_model_path, tmp_path / "out")
    folder = trainer.save_model()
    assert folder == tmp_path / "out" and (folder / "policy_layout.json").is_file()
    rebuilt = MultiAgentPolicy.load(folder)
    assert rebuilt.agents == trainer.policy.agents


def test_old_module_paths_re_export_the_core():
    from comlrl.trainers import base, policy_learning
    from comlrl.trainers.actor_critic import critics
    from comlrl.trainers.core import centralized, oracle
    from comlrl.trainers.core.sampling import ItemSample
    from comlrl.trainers.core.trainer import MultiAgentTrainerBase
    from comlrl.trainers.online_rl import critics as core_critics
    from comlrl.trainers.online_rl import policy_learning as rl
    from comlrl.trainers.online_rl.trainer import OnlineRLTrainer
    from comlrl.trainers.preference import iterative, madpo
    from comlrl.trainers.preference import oracle as preference_oracle
    from comlrl.trainers.preference.comparators import centralized as comparator_centralized

    assert base.MultiAgentTrainerBase is MultiAgentTrainerBase and base.ItemSample is ItemSample
    assert base.CentralizedCollaboration is centralized.CentralizedCollaboration
    assert (
        policy_learning.PolicyLearner is rl.PolicyLearner
        and policy_learning.OnlineRLTrainer is OnlineRLTrainer
    )
    assert critics.ValueModel is core_critics.ValueModel
    assert preference_oracle.Oracle is oracle.Oracle
    assert comparator_centralized.check_adapter is centralized.check_adapter
    assert iterative.MADPOIterTrainer is madpo.MADPOIterTrainer


def test_the_schedule_is_composed_not_flagged(tiny_model_path, tmp_path):
    from comlrl.trainers.preference import MADPOConfig, MADPOIterConfig, MADPOIterTrainer, MADPOTrainer
    from comlrl.trainers.preference.base import SingleCollection
    from comlrl.trainers.preference.rounds import PreferenceRounds

    def reward(a, b):
        return float(len(a[0]))

    base = MADPOTrainer(
        agent_model=tiny_model_path, reward_func=reward, args=MADPOConfig(output_dir=str(tmp_path))
    )
    assert (
        isinstance(base.rounds, SingleCollection)
        and base.comparator is None
        and base.last_round_stats is None
    )
    with pytest.raises(TypeError, match="MADPOTrainer takes no `comparator`"):
        MADPOTrainer(agent_model=tiny_model_path, reward_func=reward, comparator=object())
    iterative = MADPOIterTrainer(
        agent_model=tiny_model_path, reward_func=reward, args=MADPOIterConfig(output_dir=str(tmp_path))
    )
    assert isinstance(iterative.rounds, PreferenceRounds) and iterative.last_round_stats is None
    assert not hasattr(MADPOTrainer, "iterative")


def test_the_rl_stage_gets_a_host_not_its_trainer(tiny_model_path, tmp_path):
    from comlrl.trainers.online_rl.host import RLHost
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    trainer = MAGRPOTrainer(
        agent_model=tiny_model_path, num_agents=2, reward_func=lambda a, b: [0.0] * len(a),
        args=MAGRPOConfig(output_dir=str(tmp_path), num_turns=1),
    )  # fmt: skip
    host = trainer.rl.host
    assert isinstance(host, RLHost) and all(value is not trainer for value in vars(trainer.rl).values())
    assert host.args is trainer.args and host.policy is trainer.policy and host.gradient_steps is trainer.gradient_steps
    assert host.tokenizers == trainer.tokenizers and host.num_agents == trainer.num_agents == 2
    trainer.reset_counters()  # a fresh train() replaces the counters: the host reads them when used
    assert host.nonfinite() is trainer.nonfinite and host.data_cursor() is trainer.data_cursor

class OwnRecords(Tiny):
    """Keeps its step outside the data cursor and checkpoints only the records it logged itself."""

    def __init__(self, path: str, output_dir: Path) -> None:
        super().__init__(path, output_dir)
        self.own_records: list[dict] = []

    def step(self) -> None:
        super().step()
        self.own_records.append(self.metrics_logger.history[-1])
        self.metrics_logger.log({"aside": 1.0}, self.steps)  # logged, but not part of the trainer's records

    def restore_checkpoint_step(self, step: int) -> None:
        self.events.append(f"step {step}")

    def checkpoint_log_history(self) -> list[dict]:
        return self.own_records


def test_the_step_and_the_records_a_checkpoint_keeps_are_override_points(tiny_model_path, tmp_path):
    trainer = OwnRecords(tiny_model_path, tmp_path / "out")
    for _ in range(2):
        trainer.step()
    path = trainer.save_checkpoint()
    state = json.loads((path / "trainer_state.json").read_text())
    assert [sorted(r) for r in state["log_history"]] == [["loss", "step"], ["loss", "step"]]
    assert len(trainer.metrics_logger.history) == 4

    resumed = OwnRecords(tiny_model_path, tmp_path / "out")
    resumed.load_checkpoint(path)
    assert resumed.events[:2] == ["step 2", "own state"]  # the step comes before the JSON state
    assert resumed.metrics_logger.history == state["log_history"]


def test_a_progress_bar_can_start_part_way(tiny_model_path, tmp_path):
    trainer = Tiny(tiny_model_path, tmp_path / "out")
    trainer.verbose = True  # a hidden bar does not count
    with trainer.progress_bar(total=5, desc="steps", initial=2) as bar:
        assert bar.n == 2
        bar.update(1)
        assert bar.n == 3
