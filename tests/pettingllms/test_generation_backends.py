"""``rollout.backend`` (hf | vllm | api) without vLLM: the keys are checked before a run starts, naming the
key; an API plays every role of an evaluation through a loopback server (no model loaded) and can train
nothing; vLLM without the extra is a one-line error naming the install; ``use_vllm`` in comlrl's configs.

The vLLM engines themselves are tested in ``tests/vllm`` (``bash scripts/test_vllm_cpu.sh``).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from comlrl.rollout.api import APIBackend
from pettingllms.config import ConfigError, load_config
from pettingllms.execution.generation import api_router
from pettingllms.pipeline import Pipeline, check_pipeline
from pettingllms.scripts.evaluate import evaluate
from tests.helpers.http_fixture import api_server as api_server  # noqa: F401  (the fixture)
from tests.helpers.http_fixture import json_reply

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def config(*overrides):
    return load_config("plan_path/L1", ["model.name=test-tiny", *overrides])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.backend=sglang", r"`rollout.backend` must be one of \['hf', 'vllm', 'api'\], got 'sglang'"),
        ("rollout.vllm_mode=remote", r"`rollout.vllm_mode` must be one of 'colocate', 'server', got 'remote'"),
        ("rollout.vllm_gpu_memory_utilization=0", r"`rollout.vllm_gpu_memory_utilization` must be in \(0, 1\]"),
        ("rollout.vllm_max_model_length=long", r"`rollout.vllm_max_model_length` must be int or null, got 'long'"),
        ("rollout.vllm_logprobs=never", r"`rollout.vllm_logprobs` must be one of 'auto', 'recompute'"),
        ("rollout.api_format=soap", r"`rollout.api_format`: `format` must be one of"),
    ],
)
def test_bad_generation_keys_are_refused_naming_the_key(override, message):
    extra = ["rollout.backend=api", "rollout.api_url=http://127.0.0.1:1/x"] if "api_format" in override else []
    with pytest.raises(ConfigError, match=message):
        check_pipeline(config(*extra, override))


def test_an_api_needs_a_url_and_trains_nothing():
    with pytest.raises(ConfigError, match=r"`rollout.backend` is 'api' but `rollout.api_url` is not set"):
        check_pipeline(config("rollout.backend=api"))
    api = ["rollout.backend=api", "rollout.api_url=http://127.0.0.1:1/v1/chat/completions"]
    with pytest.raises(ConfigError, match=r"stages \['at_grpo'\] cannot train on it; evaluate a hosted model"):
        check_pipeline(config(*api))  # the default pipeline: sft, at_grpo, eval
    check_pipeline(config(*api, "pipeline=[eval]"))  # evaluation alone is fine
    check_pipeline(config(*api, "pipeline=[sft, eval]"))  # sft trains on the oracle's demonstrations, not on samples


def test_vllm_under_a_data_parallel_launch_is_refused(monkeypatch):
    from comlrl import distributed
    from pettingllms.config import extras

    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(extras, "_installed", lambda module: True)  # past the missing-package check
    with pytest.raises(ConfigError, match=r"`rollout.backend` is 'vllm' but this run has world size 2"):
        check_pipeline(config("rollout.backend=vllm"))


@pytest.mark.skipif(HAVE_VLLM, reason="checks the error a machine without vLLM gives")
def test_vllm_without_the_extra_is_one_error_naming_the_install(tmp_path):
    from comlrl.trainers.preference import MADPOConfig, MADPOTrainer

    run = config("rollout.backend=vllm", f"run.output_dir={tmp_path / 'run'}", "pipeline=[eval]",
                 "eval.num_instances=1", "run.progress=false")
    with pytest.raises(ConfigError, match=r"`rollout.backend` vllm .* needs the `vllm` package, which is not "
                                          r"installed: pip install -e \"\.\[vllm\]\" on a GPU machine"):
        Pipeline(run).run()  # refused before the run folder is made
    assert not (tmp_path / "run").exists()
    args = MADPOConfig(output_dir=str(tmp_path / "madpo"), use_vllm=True)
    with pytest.raises(ImportError, match=r"scripts/test_vllm_cpu.sh"):
        MADPOTrainer(agent_model="test-tiny", num_agents=2, reward_func=lambda a, b: 0.0,
                     train_dataset=[{"prompt": "x"}], args=args)


def test_use_vllm_and_the_vllm_fields_are_every_comlrl_config_s_with_trl_s_defaults():
    from comlrl.trainers.actor_critic import IACConfig, MAACConfig
    from comlrl.trainers.preference import MADPOConfig, MADPOIterConfig, MARLHFConfig
    from comlrl.trainers.reinforce import MAGRPOConfig

    for cls in (MADPOConfig, MADPOIterConfig, MARLHFConfig, MAGRPOConfig, IACConfig, MAACConfig):
        made = cls()
        assert (made.use_vllm, made.vllm_mode, made.vllm_gpu_memory_utilization, made.vllm_server_timeout) == (
            False, "colocate", 0.3, 240.0), cls
        with pytest.raises(ValueError, match=r"`vllm_weight_sync` must be one of 'auto', 'nccl', 'file', got 'ftp'"):
            cls(vllm_weight_sync="ftp")
        with pytest.raises(ValueError, match=r"`use_vllm` must be True or False, got 'yes'"):
            cls(use_vllm="yes")


def test_an_api_plays_every_role_of_an_evaluation_through_a_loopback_server(api_server, tmp_path):
    url = api_server.url("openai")
    api = ["rollout.api_format=openai", f"rollout.api_url={url}", "rollout.api_model=hosted-1",
           "eval.num_instances=3", "eval.num_samples=2", "run.progress=false", f"run.output_dir={tmp_path}"]
    junk = evaluate("plan_path/L0", policy="api", overrides=api, output=tmp_path / "junk.json")
    assert junk["policy"] == "api:hosted-1" and junk["metrics"]["num_trajectories"] == 6
    assert junk["metrics"]["agent/single/parse_error_rate"] == 1.0  # "re: <prompt> #k" is no move answer
    bodies = [r.body for r in api_server.requests]
    assert bodies and all(b["model"] == "hosted-1" for b in bodies)
    assert "End with one line `#### <answer>`" in bodies[0]["messages"][-1]["content"]  # the env's prompt
    # a server that answers moves: parsed (success depends on the grid), every request still one per turn
    api_server.reset()
    answer = {"choices": [{"message": {"role": "assistant", "content": "#### U U U"}, "finish_reason": "stop"}]}
    api_server.always(json_reply(answer))
    moves = evaluate("plan_path/L0", policy="api", overrides=api, output=tmp_path / "moves.json")
    assert moves["metrics"]["agent/single/parse_error_rate"] == 0.0
    assert json.loads((tmp_path / "moves.json").read_text())["metrics"] == moves["metrics"]
    assert api_server.request_count >= 6


def test_the_api_router_maps_each_role_to_one_backend():
    router = api_router(config("rollout.api_url=http://127.0.0.1:9/v1/chat/completions", "rollout.api_model=m"))
    assert router.roles == ["tool", "plan"] and set(router.policies) == {"api:m"}
    assert isinstance(router.backend_for("api:m"), APIBackend)


def test_eval_with_the_api_needs_a_config():
    from pettingllms.scripts.guard import UsageError

    with pytest.raises(UsageError, match=r"`--policy api` needs a CONFIG"):
        evaluate(None, policy="api")
