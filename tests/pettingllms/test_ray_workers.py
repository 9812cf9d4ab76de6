"""``run.backend: ray`` against ``local`` on a local Ray cluster (2 CPUs), test-tiny model, Plan-Path.

One cluster serves the module (starting one takes ~5 s, each worker process ~3-5 s to import torch). What
is checked:

- L1 with two EnvWorkers, one of them killed while the run is going, and an update group of two ranks:
  Ray restarts the EnvWorker and retries its shard, and the run's samples (token ids, rewards, branch
  selections) equal the one-process run's step by step; metrics and weights agree to float rounding
  (each EnvWorker's generate calls hold its own shard, so log-probs round differently, and the ranks sum
  gradients in another order; Adam turns that into differences of ~1e-4);
- a pipeline with ``run.backend=ray`` (L3, one EnvWorker, so every generate call holds what the
  one-process call holds) prints the same ``success before ... -> after ...`` line, writes the same
  ``metrics.jsonl`` (timing fields aside) and the same final weights, bit for bit;
- three agents and three policies: every policy gets a non-empty batch and every policy's weights move;
  a RolloutWorker that dies then stops the run with an error naming it and how to resume, and the resumed
  run ends where the uninterrupted one does;
- a placement the cluster cannot hold is refused before any worker starts.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal

import pytest
import torch

ray = pytest.importorskip("ray", reason="needs the ray extra (pip install -e '.[ray]')")

from pettingllms.config import load_config  # noqa: E402
from pettingllms.config.rollout_section import RolloutConfig  # noqa: E402
from pettingllms.execution import PolicyConfig, build_policy  # noqa: E402
from pettingllms.pipeline import Pipeline  # noqa: E402
from pettingllms.trainer.at_grpo import ATGRPOTrainer  # noqa: E402
from pettingllms.trainer.at_grpo_config import ATGRPOConfig  # noqa: E402
from pettingllms.trainer.at_grpo_setup import env_config_for  # noqa: E402
from pettingllms.workers.engine import WorkerFailure  # noqa: E402
from pettingllms.workers.placement import Placement, PlacementError, PolicyPlacement  # noqa: E402
from pettingllms.workers.stage import attach  # noqa: E402
from pettingllms.workers.system import RaySystem  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ENV = {"rows": 4, "cols": 4}


@pytest.fixture(scope="module", autouse=True)
def cluster():
    torch.set_num_threads(1)  # the workers take the driver's count (Ray sets OMP_NUM_THREADS=1 in actors)
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    assert ray.util.get_node_ip_address().startswith("127."), "the test cluster must stay on loopback (tests/conftest.py)"
    yield
    if started:
        ray.shutdown()


class Recording(ATGRPOTrainer):
    """Adds a reward per candidate index (a learning signal from the untrained model), records what each
    step sampled, and runs ``before_step(step)`` first."""

    before_step = None

    def generate_and_score(self, problem_ids, step):
        if self.before_step is not None:
            self.before_step(step)
        batch = super().generate_and_score(problem_ids, step)
        for sample in batch.samples:
            sample.group_reward += 0.5 * sample.candidate
        self.__dict__.setdefault("sampled", []).append(
            [(s.problem_id, s.env_index, s.turn, s.agent_index, s.candidate, s.policy, s.completion_ids,
              s.group_reward, s.selected) for s in batch.samples]
        )
        return batch


ROLLOUT = RolloutConfig(num_generations=2, max_completion_length=8, transcripts_rate=0.0)


def trainer_config(tmp_path, name, **overrides):
    values = dict(
        problems_per_step=3, max_steps=2, learning_rate=1e-2, per_device_train_batch_size=4,
        output_dir=str(tmp_path / name), disable_tqdm=True, seed=1, save_steps=1,
    )
    values.update(overrides)
    return ATGRPOConfig(**values)


def env_settings(turn_order=("tool", "plan")):
    return {**ENV, "max_turns": 2, "turn_order": list(turn_order)}


def local_trainer(config, model_path, level="L1", turn_order=("tool", "plan")):
    return Recording(config, rollout=ROLLOUT, model=PolicyConfig(policy_level=level, model=model_path, seed=config.seed),
                     env_config=env_settings(turn_order))


def placement(policies, env_workers=2, update_devices=1):
    return Placement(
        device_kind="cpu", cpu_slot=0.25, env_worker_cpus=0.25, num_env_workers=env_workers,
        policies={name: PolicyPlacement(name, 1, update_devices, False) for name in policies},
    )


def ray_trainer(config, model_path, level="L1", turn_order=("tool", "plan"), env_workers=2, update_devices=1,
                cls=Recording):
    model = PolicyConfig(policy_level=level, model=model_path, seed=config.seed)
    policy = build_policy(model, list(turn_order))
    env = env_settings(turn_order)
    system = RaySystem(policy, config, rollout=ROLLOUT, env_name="plan_path",
                       env_config=env_config_for(level, "plan_path", env),
                       placement=placement(policy.policies, env_workers, update_devices))
    trainer = cls(config, model=model, policy=policy, env_config=env, **system.trainer_kwargs())
    return attach(trainer, system), system


def weights(policy):
    return {(n, k): v.detach().clone() for n in policy.policies for k, v in policy.named_trainable_parameters(n)}


def comparable(record):
    return {k: v for k, v in record.items() if not k.startswith("time/") and k != "generate_calls"}


def test_l1_two_env_workers_and_two_update_ranks_match_local_and_survive_an_env_worker_kill(tmp_path, tiny_model_path):
    # One optimizer step per training step (24 rows, micro-batches of 4, 8 accumulated): the update group's
    # two ranks then sum the gradient of the same rows the one process sums.
    local = local_trainer(trainer_config(tmp_path, "local", gradient_accumulation_steps=8), tiny_model_path)
    local.train()
    trainer, system = ray_trainer(trainer_config(tmp_path, "ray", gradient_accumulation_steps=8), tiny_model_path,
                                  update_devices=2)
    assert len(system.update_actors["shared"]) == 2
    killed = []

    def kill_an_env_worker(step):
        if step == 2:
            pid = ray.get(system.env_actors[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    trainer.before_step = kill_an_env_worker
    try:
        trainer.train()
        assert killed and ray.get(system.env_actors[0].pid.remote()) != killed[0]  # restarted
    finally:
        system.close()
    assert trainer.sampled == local.sampled  # every step: same ids, rewards, selections
    assert len(trainer.log_history) == len(local.log_history) == 2
    for mine, theirs in zip(trainer.log_history, local.log_history):
        assert mine["generate_calls"] == 2 * theirs["generate_calls"]  # one call per EnvWorker
        assert comparable(mine).keys() == comparable(theirs).keys()
        for key, value in comparable(theirs).items():
            assert math.isclose(mine[key], value, rel_tol=1e-4, abs_tol=1e-6), key
    start = weights(build_policy(PolicyConfig(model=tiny_model_path), ["tool", "plan"]))
    for key, value in weights(local.policy).items():
        assert torch.allclose(weights(trainer.policy)[key], value, atol=2e-3), key
    assert any(not torch.equal(value, start[key]) for key, value in weights(local.policy).items())
    assert trainer.policy.version("shared") == local.policy.version("shared") == 2
    assert [r["policy/shared/optimizer_steps"] for r in trainer.log_history] == [1.0, 1.0]


def test_three_policies_train_and_a_dead_rollout_worker_stops_the_run_clearly_then_it_resumes_equal(
    tmp_path, tiny_model_path
):
    """Three agents, three policies (the anchor's open bug: all but one starve): step 1 on Ray trains every
    policy; a RolloutWorker killed before step 2 stops the run with an error naming it; the checkpoint
    of step 1 resumes (here on the local backend: the checkpoint layout is the same) and the run ends
    exactly where the uninterrupted one-process run ends."""
    order = ("tool", "plan", "single")
    config = trainer_config(tmp_path, "resumed", max_steps=3)
    trainer, system = ray_trainer(config, tiny_model_path, level="L3", turn_order=order, env_workers=1)
    start = weights(trainer.policy)

    def kill_a_rollout_worker(step):
        if step == 2:
            os.kill(ray.get(system.rollout_actors["plan"][0].pid.remote()), signal.SIGKILL)

    trainer.before_step = kill_a_rollout_worker
    try:
        with pytest.raises(WorkerFailure, match=r"step 2: the rollout on the EnvWorkers failed: .*RolloutWorker.*resume"):
            trainer.train()
    finally:
        system.close()
    first = trainer.log_history[0]
    for name in order:
        assert first[f"policy/{name}/num_samples"] > 0 and first[f"policy/{name}/optimizer_steps"] > 0, name
        assert any(not torch.equal(v, start[(n, k)]) for (n, k), v in weights(trainer.policy).items() if n == name), name
    assert sorted(p.name for p in (tmp_path / "resumed").glob("checkpoint-*")) == ["checkpoint-1"]

    resumed = local_trainer(config, tiny_model_path, level="L3", turn_order=order)
    resumed.train(resume_from_checkpoint=True)
    whole = local_trainer(trainer_config(tmp_path, "whole", max_steps=3), tiny_model_path, level="L3", turn_order=order)
    whole.train()
    assert trainer.sampled == whole.sampled[:1] and resumed.sampled == whole.sampled[1:]
    for key, value in weights(whole.policy).items():
        assert torch.equal(weights(resumed.policy)[key], value), key
    assert [comparable(r) for r in resumed.log_history] == [comparable(r) for r in whole.log_history]


def test_a_placement_the_cluster_cannot_hold_is_refused_before_any_worker_starts(tmp_path, tiny_model_path):
    config = trainer_config(tmp_path, "big")
    policy = build_policy(PolicyConfig(model=tiny_model_path), ["tool", "plan"])
    before = len(ray.util.list_named_actors(all_namespaces=True)), ray.available_resources().get("CPU")
    with pytest.raises(PlacementError, match=r"CPU"):
        RaySystem(policy, config, rollout=ROLLOUT, env_name="plan_path",
                  env_config=env_config_for("L1", "plan_path", env_settings()),
                  placement=placement(policy.policies, env_workers=40))
    assert (len(ray.util.list_named_actors(all_namespaces=True)), ray.available_resources().get("CPU")) == before


def pipeline_run(model_path, run_dir, *extra):
    config = load_config("plan_path/L3", [
        f"model.name={model_path}", f"run.output_dir={run_dir}", "env.max_turns=1", "rollout.num_generations=2",
        "rollout.max_completion_length=16", "rollout.transcripts_rate=0.5", "sft.num_problems=12", "sft.num_train_epochs=6",
        "sft.learning_rate=1e-2", "at_grpo.max_steps=2", "at_grpo.problems_per_step=3", "at_grpo.save_steps=1",
        "at_grpo.learning_rate=1e-3", "eval.num_instances=3", "run.progress=false", *extra,
    ])
    out = io.StringIO()
    Pipeline(config, out=out).run()
    return out.getvalue()


def metric_records(path):
    return [comparable(json.loads(line)) for line in path.read_text().splitlines()]


def test_a_pipeline_on_ray_equals_the_local_pipeline(tmp_path, tiny_model_path):
    local = pipeline_run(tiny_model_path, tmp_path / "local")
    on_ray = pipeline_run(tiny_model_path, tmp_path / "ray", "run.backend=ray", "run.num_env_workers=1")
    success = [line for line in local.splitlines() if line.startswith("success before")]
    assert success and success == [line for line in on_ray.splitlines() if line.startswith("success before")]
    assert "stage `sft` has no Ray version; it runs in the driver process" in on_ray
    assert metric_records(tmp_path / "ray/at_grpo/metrics.jsonl") == metric_records(tmp_path / "local/at_grpo/metrics.jsonl")
    assert (tmp_path / "ray/at_grpo/rollouts.jsonl").read_text() == (tmp_path / "local/at_grpo/rollouts.jsonl").read_text()
    from safetensors.torch import load_file

    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local/policies").rglob("*.safetensors"))
    assert files
    for file in files:
        mine, theirs = load_file(tmp_path / "ray" / file), load_file(tmp_path / "local" / file)
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine), file
    # AT-GRPO moved the plan policy (its groups had different rewards), on both backends alike.
    plan = next(f for f in files if "plan" in str(f))
    before, after = load_file(tmp_path / "ray/sft" / plan), load_file(tmp_path / "ray" / plan)
    assert any(not torch.equal(before[k], after[k]) for k in after)


def test_a_users_own_environment_trains_on_ray_workers_that_import_its_module(tmp_path, tiny_model_path, monkeypatch, capfd):
    """The docs' own-environment example through the command line (in this process, on the module's cluster)
    from a folder outside the project, on no worker's path: every worker imports the config's `imports` from
    the folder the driver found them in, before it builds anything. A successful run shows no log line of
    Ray's core (the EnvWorkers get their RolloutWorkers by name)."""
    from pettingllms.cli import main
    from tests.helpers.user_environment import forget_user_modules, write_user_project

    folder = write_user_project(tmp_path / "relay_project")
    monkeypatch.chdir(folder)
    with forget_user_modules():
        assert main([
            "train", "relay.yaml", f"model.name={tiny_model_path}", "run.backend=ray", "run.num_env_workers=1",
            "pipeline=[at_grpo]", "at_grpo.max_steps=1", "rollout.num_generations=2", "--no-progress",
        ]) == 0
    out, err = capfd.readouterr()
    assert "[1/1] at_grpo: 1 step" in out
    record = json.loads((folder / "runs/relay/at_grpo/metrics.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 1 and {"policy/shared/loss", "reward"} <= set(record)
    assert "core_worker" not in err and "object store" not in err, err


def test_rays_token_notice_is_dropped_and_nothing_else():
    import importlib.util
    import logging

    from pettingllms.workers.system import TOKEN_NOTICE_LOGGER, _drop_token_notice

    assert importlib.util.find_spec(TOKEN_NOTICE_LOGGER) is not None  # the logger Ray's notice comes from
    notice = "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out."
    for message, kept in ((notice, False), ("Token authentication is disabled for this Ray cluster.", True)):
        assert _drop_token_notice(logging.LogRecord(TOKEN_NOTICE_LOGGER, logging.WARNING, "", 0, message, (), None)) is kept
