"""FSDP for data-parallel AT-GRPO, GRPO and SFT (:mod:`pettingllms.trainer.fsdp`): two ranks under ``accelerate
launch --config_file`` an accelerate config with ``distributed_type: FSDP`` (gloo on CPU) against one process
over the same global batch, and the settings FSDP refuses before anything starts.

One launch runs the FSDP scenarios of ``data_parallel_job.py`` (read its docstring): ``l1_tree`` (a checkpoint
every step, ``save_model``), ``l1_resume``, ``l3_beta`` (two policies, a reference, ranks with unequal
micro-batch counts), ``uneven`` (a rank without rows for whole optimizer steps) and ``sft`` (a rank with an
empty shard of a batch). The one-process references run in this process. Compared:

- final weights within ``ATOL`` of one process (as ``test_data_parallel.py``; measured at most 1e-4), every
  logged metric within a relative 1e-6, but the gradient norm and the per-micro-batch update diagnostics
  within 3e-5 (the norm is assembled from the shards' norms, and step 2's gradient is taken at weights that
  already differ by float rounding amplified by Adam; measured up to 8e-6, the KL's);
- both ranks bitwise equal; each rank holds half of every sharded parameter's elements inside an update
  and none of the whole model's (released until the update ends);
- the checkpoints and ``save_model`` hold whole weights that load with ``from_pretrained``, and the
  optimizer state in the one-process layout; a resume on 2 ranks continues bitwise.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from comlrl.checkpoint import read_trainer_state
from pettingllms.config import ConfigError, load_config
from pettingllms.trainer import fsdp
from tests.helpers.two_ranks import FSDP_ACCELERATE_CONFIG, in_this_process, launch_two_ranks
from tests.pettingllms import data_parallel_job as job
from tests.pettingllms.test_data_parallel import ATOL, assert_same_weights, history, weights

SCENARIOS = ["l1_tree", "l1_resume", "l3_beta", "uneven", "sft"]
COMPARED = ["l1_tree", "l3_beta", "sft"]
JOB = Path(__file__).with_name("data_parallel_job.py")
# Float32 quantities that the shards reassemble in another order: the norm and the micro-batch diagnostics.
LOOSE = ("grad_norm", "loss", "entropy", "approx_kl", "ratio_mean", "clip_ratio/", "kl", "staleness_mean")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_path):
    """``(one-process folder, two-rank FSDP folder)``, each holding a folder per scenario."""
    root = tmp_path_factory.mktemp("data-parallel-fsdp")
    one, two = root / "one", root / "two"
    config = root / "accelerate_fsdp.yaml"
    config.write_text(FSDP_ACCELERATE_CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    launch_two_ranks(JOB, [tiny_model_path, str(two), *SCENARIOS], launcher=["--config_file", str(config)], env=env)
    in_this_process(job.main, [tiny_model_path, str(one), *COMPARED])
    return one, two


def is_loose(key: str) -> bool:
    return key.startswith(("policy/", "sft/")) and key.split("/", 2)[-1].startswith(LOOSE)


@pytest.mark.slow  # one 2-process launch for the module
@pytest.mark.parametrize("scenario", COMPARED)
def test_fsdp_ranks_train_as_one_process_over_the_same_global_batch(runs, scenario, tiny_model_path):
    one, two = runs
    assert_same_weights(weights(one / scenario), weights(two / scenario), ATOL)
    start = [p.detach() for p in job.sft_policy(tiny_model_path).trainable_parameters("shared")]
    for name, moved in weights(one / scenario).items():  # the tolerance is far below what training moved
        assert max(float((a - b).abs().max()) for a, b in zip(moved, start)) > 10 * ATOL, name
    ours, theirs = history(one / scenario), history(two / scenario)
    assert len(ours) == len(theirs) == (1 if scenario == "sft" else 2)
    for mine, other in zip(ours, theirs):
        assert mine.keys() == other.keys()
        exact = {k for k in mine if k != "generate_calls" and not is_loose(k)}
        assert scenario == "sft" or len(exact) > 40
        assert {k: other[k] for k in exact} == pytest.approx({k: mine[k] for k in exact}, rel=1e-6, abs=1e-9)
        loose = {k for k in mine if is_loose(k)}
        assert {k: other[k] for k in loose} == pytest.approx({k: mine[k] for k in loose}, rel=3e-5, abs=1e-7)
        if scenario == "l3_beta":
            assert mine["policy/plan/kl"] > 0 and mine["policy/tool/kl"] > 0  # the reference is scored


@pytest.mark.slow  # one 2-process launch for the module
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fsdp_ranks_end_with_the_same_weights_and_history(runs, scenario):
    _, two = runs
    assert_same_weights(weights(two / scenario, 0), weights(two / scenario, 1), atol=0)
    assert history(two / scenario, 0) == history(two / scenario, 1)


@pytest.mark.slow  # one 2-process launch for the module
def test_each_rank_holds_half_of_every_sharded_parameter_during_the_update(runs, tiny_model_path):
    from transformers import AutoModelForCausalLM

    _, two = runs
    whole = {n: p.shape for n, p in AutoModelForCausalLM.from_pretrained(tiny_model_path).named_parameters()}
    held = [json.loads((two / f"shards-rank{r}.json").read_text()) for r in (0, 1)]
    for scenario in ("l1_tree", "l3_beta", "uneven", "sft"):
        for rank, record in enumerate(h[scenario] for h in held):
            assert record["whole"] == 0  # the whole model's weights are released inside the update
            assert record["shards"].keys() == whole.keys()
            for name, shape in whole.items():
                first = math.ceil(shape[0] / 2) * math.prod(shape[1:])  # dim 0 split in two, rank 0 the larger
                expected = first if rank == 0 else math.prod(shape) - first
                assert record["shards"][name] == [expected, math.prod(shape)], (scenario, name)
    assert sum(v[0] for v in held[0]["l1_tree"]["shards"].values()) * 2 == sum(math.prod(s) for s in whole.values())
    assert [r["policy/shared/optimizer_steps"] for r in history(two / "uneven")] == [4.0, 4.0]


@pytest.mark.slow  # one 2-process launch for the module
def test_checkpoints_and_save_model_hold_whole_weights_and_one_process_optimizer_states(runs):
    from transformers import AutoModelForCausalLM

    one, two = runs
    final = weights(two / "l1_tree")["shared"]
    for folder in (two / "l1_tree" / "model" / "shared", two / "l1_tree" / "checkpoint-2" / "shared"):
        loaded = list(AutoModelForCausalLM.from_pretrained(folder).parameters())
        assert len(loaded) == len(final) and all(torch.equal(a, b) for a, b in zip(loaded, final)), folder
    extra = read_trainer_state(two / "l1_tree" / "checkpoint-1").extra
    assert extra["world_size"] == 2
    ours = torch.load(one / "l1_tree" / "checkpoint-2" / "optimizer-shared.pt")
    theirs = torch.load(two / "l1_tree" / "checkpoint-2" / "optimizer-shared.pt")
    assert theirs["param_groups"] == ours["param_groups"] and theirs["state"].keys() == ours["state"].keys()
    for index, state in ours["state"].items():
        assert theirs["state"][index]["step"] == state["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            assert not hasattr(theirs["state"][index][key], "to_local")  # whole tensors, not shards
            assert torch.allclose(theirs["state"][index][key], state[key], rtol=1e-4, atol=1e-7), (index, key)


@pytest.mark.slow  # one 2-process launch for the module
def test_a_fsdp_resume_on_two_ranks_continues_exactly(runs):
    _, two = runs
    assert_same_weights(weights(two / "l1_resume"), weights(two / "l1_tree"), atol=0)
    assert history(two / "l1_resume") == history(two / "l1_tree")
    lines = (two / "l1_resume" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2]


# ---- the settings (no launch) ---------------------------------------------------------------------------

def test_accelerate_fsdp_variables_become_settings():
    assert fsdp.fsdp_settings({}) is None and fsdp.fsdp_settings({"ACCELERATE_USE_FSDP": "false"}) is None
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "false",
           "FSDP_TRANSFORMER_CLS_TO_WRAP": "Qwen2DecoderLayer, MyLayer", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
           "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_OFFLOAD_PARAMS": "false", "FSDP_SYNC_MODULE_STATES": "true"}
    assert fsdp.fsdp_settings(env) == fsdp.FSDPSettings(False, ("Qwen2DecoderLayer", "MyLayer"))
    assert fsdp.fsdp_settings({"ACCELERATE_USE_FSDP": "1"}) == fsdp.FSDPSettings(True, ())  # torchrun: the switch alone


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("ACCELERATE_USE_FSDP", "maybe", r"`ACCELERATE_USE_FSDP` must be true or false, got 'maybe'"),
    ("FSDP_VERSION", "1", r"`FSDP_VERSION` is '1' \(accelerate's `fsdp_version`\): the trainers shard with FSDP2"),
    ("FSDP_OFFLOAD_PARAMS", "true", r"`FSDP_OFFLOAD_PARAMS` is true: CPU offload is not built"),
    ("FSDP_ACTIVATION_CHECKPOINTING", "true", r"`FSDP_ACTIVATION_CHECKPOINTING` is true: activation checkpointing"),
    ("FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP", r"`FSDP_AUTO_WRAP_POLICY` is 'SIZE_BASED_WRAP': .* TRANSFORMER_BASED_WRAP only"),
    ("FSDP_STATE_DICT_TYPE", "SHARDED_STATE_DICT", r"`FSDP_STATE_DICT_TYPE` is 'SHARDED_STATE_DICT': .* FULL_STATE_DICT only"),
    ("FSDP_RESHARD_AFTER_FORWARD", "SHARD_GRAD_OP", r"`FSDP_RESHARD_AFTER_FORWARD` must be true or false"),
])
def test_a_fsdp_setting_that_cannot_be_honoured_is_an_error_naming_it(variable, value, message):
    with pytest.raises(ValueError, match=message):
        fsdp.fsdp_settings({"ACCELERATE_USE_FSDP": "true", variable: value})


def test_fsdp_is_refused_in_one_process_for_lora_policies_and_for_l2_pipelines(monkeypatch):
    from comlrl import distributed
    from pettingllms.pipeline import check_pipeline

    switch = {"ACCELERATE_USE_FSDP": "true"}
    with pytest.raises(ValueError, match=r"`ACCELERATE_USE_FSDP` is true but this run has one process"):
        fsdp.fsdp_for_world(1, switch)
    assert fsdp.fsdp_for_world(2, switch) == fsdp.FSDPSettings()
    lora = SimpleNamespace(handles={"tool": SimpleNamespace(adapter="tool"), "plan": SimpleNamespace(adapter="plan")})
    with pytest.raises(ValueError, match=r"policies \['tool', 'plan'\] are LoRA adapters \(policy level L2\)"):
        fsdp.check_policy(lora)
    fsdp.check_policy(SimpleNamespace(handles={"shared": SimpleNamespace(adapter=None)}))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigError, match=r"this run has one process"):
        check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny"]))
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    check_pipeline(load_config("plan_path/L1", ["model.name=test-tiny"]))
    with pytest.raises(ConfigError, match=r"`ACCELERATE_USE_FSDP` is true but `policy.level` is L2 \(LoRA adapters\)"):
        check_pipeline(load_config("plan_path/L2", ["model.name=test-tiny"]))
    # The trainer refuses an L2 config before any model loads (the path does not exist) and remote updaters.
    from pettingllms.execution import PolicyConfig
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from pettingllms.trainer.at_grpo_config import ATGRPOConfig

    monkeypatch.setattr(distributed, "init_distributed", lambda: 2)
    with pytest.raises(ValueError, match=r"`ACCELERATE_USE_FSDP` is true but `policy_level` is L2"):
        ATGRPOTrainer(ATGRPOConfig(), model=PolicyConfig(policy_level="L2", model="/no/such/model"))
    with pytest.raises(ValueError, match=r"`updaters` \(remote update workers\) cannot be sharded with FSDP"):
        ATGRPOTrainer(ATGRPOConfig(), model="/no/such/model", updaters={})
