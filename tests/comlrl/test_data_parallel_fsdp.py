"""FSDP for comlrl's trainers (:mod:`comlrl.trainers.core.sharded_training`): two ranks under ``accelerate launch
--config_file`` an accelerate config with ``distributed_type: FSDP`` (gloo on CPU) against one process over the
same global batches, and what FSDP refuses before any model loads.

One launch runs the scenarios of ``data_parallel_job.py`` (read its docstring; the default suite runs three of
them, ``COMLRL_FSDP_ALL=1`` all eight): MADPO (a checkpoint every
optimizer step), MAGRPO (a rank without rows in the second update batch: the filler), MAGRPO with ``dapo``
(the per-agent token divisors), MADPOIter (a filler batch in round 2, and a resume inside round 2), MARLHFIter
(the RL stage sharded, the reward model data-parallel), multi-turn MAGRPO, multi-turn MAAC and IAC (the critics
whole, advantages whitened over the global batch, also by a rank without rows). The one-process runs go in this process. Compared as the
data-parallel tests compare (``test_data_parallel.py``, ``test_data_parallel_rounds.py``): the counters exactly,
each agent's first optimizer step within a relative 1e-5, the later ones within a relative 1e-4 (the base
trainers) or 2e-3 (the rounds and turns), the final weights within their ``ATOL``; measured here: steps
within 2e-4, weights within 2e-3 of the rounds' 2e-3 (multi-turn) and 1e-4 of the base ones' 5e-4. The ranks
end bitwise equal, each holds half of every sharded parameter, checkpoints hold whole weights and one-process
optimizer states, and the two-rank resume ends bitwise equal to the uninterrupted run.
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from comlrl import distributed
from comlrl.trainers.core import fsdp
from comlrl.trainers.core.sharded_training import fsdp_for_trainer
from tests.comlrl import data_parallel_job as job
from tests.comlrl.test_data_parallel import ATOL as BASE_ATOL
from tests.comlrl.test_data_parallel_rounds import ATOL as ROUNDS_ATOL
from tests.helpers.two_ranks import FSDP_ACCELERATE_CONFIG, in_this_process, launch_two_ranks

BASE = ["madpo", "magrpo", "magrpo_dapo"]
ROUNDS = ["madpo_iter", "marlhf_iter", "multi_turn", "maac_multi_turn", "iac"]
# The default suite runs three scenarios that reach every FSDP path (a preference loss with checkpoints; rounds
# with a filler batch and a resume; the RL stage with critics, whitening and a rank without rows);
# COMLRL_FSDP_ALL=1 runs all eight (about 20 s more on 2 cores).
ALL = os.environ.get("COMLRL_FSDP_ALL", "") not in ("", "0")
SCENARIOS = BASE + ROUNDS if ALL else ["madpo", "madpo_iter", "iac"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank FSDP folder)``, each holding a folder per scenario."""
    root = tmp_path_factory.mktemp("comlrl-data-parallel-fsdp")
    one, two = root / "one", root / "two"
    config = root / "accelerate_fsdp.yaml"
    config.write_text(FSDP_ACCELERATE_CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    launch_two_ranks(job.__file__, [tiny_model_path, str(two), *SCENARIOS], launcher=["--config_file", str(config)],
                     env=env, timeout=900)  # fmt: skip
    in_this_process(job.main, [tiny_model_path, str(one), *SCENARIOS])
    return one, two


@pytest.mark.slow  # one 2-process launch for the module
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fsdp_ranks_train_as_one_process_over_the_same_global_batches(runs, scenario):
    one, two = (job.load(folder / scenario) for folder in runs)
    assert two["counters"] == one["counters"]  # env_step, updates, optimizer steps, pairs
    assert [name for name, _ in two["grads"]] == [name for name, _ in one["grads"]] and one["grads"]
    later = 1e-4 if scenario in BASE else 2e-3
    first: dict[str, float] = {}
    for (name, g1), (_, g2) in zip(one["grads"], two["grads"]):
        gap = float((g1 - g2).norm()) / float(g1.norm())
        assert gap <= (later if name in first else 1e-5), (name, len(first), gap)
        first[name] = gap
    worst = max(float((one["weights"][k] - two["weights"][k]).abs().max()) for k in one["weights"])
    assert worst <= (BASE_ATOL if scenario in BASE else ROUNDS_ATOL), worst
    if scenario == "marlhf_iter":  # the reward model is not sharded: data-parallel as without FSDP
        assert float((one["reward_head"] - two["reward_head"]).abs().max()) <= 1e-5


@pytest.mark.slow  # one 2-process launch for the module
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fsdp_ranks_end_bitwise_equal_holding_half_of_every_parameter(runs, scenario, tiny_model_path):
    from transformers import AutoModelForCausalLM

    one, two = (folder / scenario for folder in runs)
    rank0, rank1 = job.load(two, 0), job.load(two, 1)
    assert all(torch.equal(rank0["weights"][k], rank1["weights"][k]) for k in rank0["weights"])
    whole = {n: p.shape for n, p in AutoModelForCausalLM.from_pretrained(tiny_model_path).named_parameters()}
    for rank in (0, 1):
        held = json.loads((two / f"shards{rank}.json").read_text())
        assert held.keys() == whole.keys()
        for name, shape in whole.items():
            first = math.ceil(shape[0] / 2) * math.prod(shape[1:])  # dim 0 split in two, rank 0 the larger part
            assert held[name] == [first if rank == 0 else math.prod(shape) - first, math.prod(shape)], name
    lines = (two / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len((one / "metrics.jsonl").read_text().splitlines())  # rank 0 alone writes


@pytest.mark.slow  # one 2-process launch for the module
def test_fsdp_checkpoints_hold_whole_weights_and_one_process_optimizer_states(runs):
    from comlrl.checkpoint import read_trainer_state
    from comlrl.policy import MultiAgentPolicy

    one, two = (folder / "madpo" for folder in runs)
    final = job.load(two)["weights"]
    latest = max(two.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    loaded = MultiAgentPolicy.load(latest)
    last = loaded.policies[-1]  # the job keeps one weight per parameter name: the last policy's
    assert all(torch.equal(param, final[key]) for key, param in loaded.named_trainable_parameters(last))
    assert read_trainer_state(latest).extra["world_size"] == 2
    ours = torch.load(one / latest.name / "optimizer-agent_0.pt")
    theirs = torch.load(latest / "optimizer-agent_0.pt")
    assert theirs["param_groups"] == ours["param_groups"] and theirs["state"].keys() == ours["state"].keys()
    for index, state in ours["state"].items():
        assert theirs["state"][index]["step"] == state["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            assert not hasattr(theirs["state"][index][key], "to_local")  # whole tensors, not shards
            assert torch.allclose(theirs["state"][index][key], state[key], rtol=1e-3, atol=1e-7), (index, key)


@pytest.mark.slow  # one 2-process launch for the module
def test_a_fsdp_resume_inside_a_round_continues_bitwise(runs):
    _, two = runs
    final = job.load(two / "madpo_iter")["weights"]
    for rank in (0, 1):
        resumed = torch.load(two / "madpo_iter_resumed" / f"resumed{rank}.pt")
        assert all(torch.equal(resumed[k], final[k]) for k in final)


# ---- what FSDP refuses (no launch) ------------------------------------------------------------------------

def test_fsdp_is_selected_as_pettingllms_selects_it_and_refused_before_any_model_loads(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    assert fsdp_for_trainer("MAGRPOTrainer", 2, SimpleNamespace()) is None  # no ACCELERATE_USE_FSDP: no FSDP
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match=r"`ACCELERATE_USE_FSDP` is true but this run has one process"):
        MAGRPOTrainer(agent_model="no-such-model", num_agents=2, reward_func=job.reward,
                      args=MAGRPOConfig(output_dir=str(tmp_path), num_turns=1))  # fmt: skip
    assert fsdp_for_trainer("MAGRPOTrainer", 2, SimpleNamespace()) == fsdp.FSDPSettings()
    with pytest.raises(ValueError, match=r"MADPOTrainer cannot be sharded with FSDP: `lora_config` trains LoRA"):
        fsdp_for_trainer("MADPOTrainer", 2, SimpleNamespace(), lora_config=object())
    with pytest.raises(ValueError, match=r"IACTrainer cannot be sharded with FSDP: IAC with use_separate_critic=False"):
        fsdp_for_trainer("IACTrainer", 2, SimpleNamespace(rl_algorithm="iac", use_separate_critic=False))
    monkeypatch.setattr(distributed, "init_distributed", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 0)
    from peft import LoraConfig

    with pytest.raises(ValueError, match=r"MAGRPOTrainer cannot be sharded with FSDP"):  # before the model loads
        MAGRPOTrainer(agent_model="no-such-model", num_agents=2, reward_func=job.reward, lora_config=LoraConfig(),
                      args=MAGRPOConfig(output_dir=str(tmp_path), num_turns=1))  # fmt: skip
