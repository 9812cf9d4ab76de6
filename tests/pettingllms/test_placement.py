"""Placement under ``run.backend: ray``: the config keys and their validation, Ray bundles and their indices,
the demand totals and the fit check that names what is short."""

from __future__ import annotations

import os

import pytest

from pettingllms.config import ConfigError, load_config, validate_config
from pettingllms.workers.placement import (
    Placement,
    PlacementError,
    PolicyPlacement,
    available_resources,
    check_fits,
    placement_from_config,
    policy_names,
)


def placement(name: str, *overrides: str) -> Placement:
    config = load_config(name, list(overrides))
    validate_config(config)
    return placement_from_config(config)


def test_defaults_are_the_local_backend_and_an_empty_placement():
    config = load_config("plan_path/L1")
    run = config["run"]
    assert (run["backend"], run["ray_address"], run["num_env_workers"]) == ("local", None, 2)
    assert (run["env_worker_cpus"], run["cpu_slot"], config["placement"]) == (0.25, 0.25, {})


@pytest.mark.parametrize(
    ("name", "overrides", "expected"),
    [
        ("plan_path/L0", [], ["single"]),
        ("plan_path/L1", [], ["shared"]),
        ("plan_path/L2", [], ["tool", "plan"]),
        ("plan_path/L3", [], ["tool", "plan"]),
        ("plan_path/L3", ["policy.agents={tool: coder, plan: judge}"], ["coder", "judge"]),
        ("plan_path/L3", ["env.turn_order=[plan, tool]"], ["plan", "tool"]),
    ],
)
def test_policy_names_are_the_runs_policies_in_turn_order(name, overrides, expected):
    assert policy_names(load_config(name, overrides)) == expected


def test_an_l3_run_with_defaults_fits_a_two_cpu_machine():
    p = placement("plan_path/L3")
    assert p.device_kind == "cpu" and list(p.policies) == ["tool", "plan"]
    # 2 policies x (1 rollout + 1 update) CPU slots of 0.25, then 2 EnvWorkers of 0.25: 1.5 CPUs.
    assert p.bundles() == [{"CPU": 0.25}] * 4 + [{"CPU": 0.25}] * 2
    assert p.demand() == {"CPU": 2 * 2 * 0.25 + 2 * 0.25}
    assert p.worker_bundles("tool") == {"rollout": [0], "update": [1]}
    assert p.worker_bundles("plan") == {"rollout": [2], "update": [3]}
    assert p.env_bundles() == [4, 5]
    check_fits(p, {"CPU": 2.0, "GPU": 0.0})  # no error
    with pytest.raises(PlacementError, match=r"placement needs 1\.5 CPUs \(policy tool: 1 rollout \+ 1 update x 0\.25; "
                       r"policy plan: 1 rollout \+ 1 update x 0\.25; 2 EnvWorkers x 0\.25\), the cluster has 1$"):
        check_fits(p, {"CPU": 1.0})


def test_more_gpus_than_the_cluster_has_is_an_error_with_its_numbers():
    p = placement("plan_path/L3", "model.device=cuda", "placement.plan.rollout_devices=2")
    assert p.device_kind == "gpu"
    assert p.bundles()[:5] == [{"GPU": 1.0, "CPU": 1.0}] * 5 and p.bundles()[5:] == [{"CPU": 0.25}] * 2
    assert p.demand() == {"GPU": 5.0, "CPU": 5.5}
    message = (r"^placement needs 5 GPUs \(policy tool: 1 rollout \+ 1 update; policy plan: 2 rollout \+ 1 update\), "
               r"the cluster has 1$")
    with pytest.raises(PlacementError, match=message):
        check_fits(p, {"CPU": 64.0, "GPU": 1.0})
    with pytest.raises(PlacementError, match=r"needs 5 GPUs .* has 0; and placement needs 5\.5 CPUs .* has 2$"):
        check_fits(p, {"CPU": 2.0})  # every short resource is named
    check_fits(p, {"CPU": 5.5, "GPU": 5.0})


def test_colocate_halves_the_bundles_and_shares_them():
    apart = placement("plan_path/L3", "model.device=cuda")
    together = placement("plan_path/L3", "model.device=cuda", "placement.tool.colocate=true", "placement.plan.colocate=true")
    assert len(apart.bundles()) - apart.num_env_workers == 4
    assert len(together.bundles()) - together.num_env_workers == 2
    assert together.demand()["GPU"] == apart.demand()["GPU"] / 2
    assert together.worker_bundles("tool") == {"rollout": [0], "update": [0]}
    assert together.worker_bundles("plan") == {"rollout": [1], "update": [1]}
    # Two actors share each colocated bundle: each asks for half of it.
    assert together.worker_resources("tool", "rollout") == [{"GPU": 0.5, "CPU": 0.5}]
    assert apart.worker_resources("tool", "update") == [{"GPU": 1.0, "CPU": 1.0}]


def test_colocated_sides_of_different_sizes_take_the_larger_count():
    p = placement("plan_path/L1", "placement.shared={rollout_devices: 2, update_devices: 3, colocate: true}")
    assert p.policies["shared"].num_devices == 3
    assert p.worker_bundles("shared") == {"rollout": [0, 1], "update": [0, 1, 2]}
    assert p.worker_resources("shared", "update") == [{"CPU": 0.125}, {"CPU": 0.125}, {"CPU": 0.25}]
    assert p.env_bundles() == [3, 4]


def test_policies_not_listed_take_the_defaults():
    p = placement("plan_path/L3", "placement.tool.update_devices=2")
    assert p.policies["tool"] == PolicyPlacement("tool", 1, 2, False)
    assert p.policies["plan"] == PolicyPlacement("plan", 1, 1, False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["placement.coder.rollout_devices=2"],
         r"`placement\.coder`: unknown policy 'coder'; the run's policies are \['tool', 'plan'\]"),
        (["placement.tool.rollout_gpus=2"],
         r"unknown key `placement\.tool\.rollout_gpus`; known keys: \['colocate', 'rollout_devices', 'update_devices'\]"),
        (["placement.tool.update_devices=0"], r"`placement\.tool\.update_devices` must be an integer >= 1, got 0"),
        (["placement.plan.colocate=yes please"], r"`placement\.plan\.colocate` must be true or false, got 'yes please'"),
        (["placement.plan=2"], r"`placement\.plan` must be a mapping with keys"),
        (["run.backend=spark"], r"`run\.backend` must be one of \['local', 'ray'\], got 'spark'"),
        (["run.ray_address=5"], r"`run\.ray_address` must be null .*got 5"),
        (["run.num_env_workers=0"], r"`run\.num_env_workers` must be an integer >= 1, got 0"),
        (["run.env_worker_cpus=0"], r"`run\.env_worker_cpus` must be a number > 0, got 0\.0"),
        (["run.cpu_slot=-0.5"], r"`run\.cpu_slot` must be a number > 0, got -0\.5"),
    ],
)
def test_bad_backend_keys_are_errors_naming_the_key(overrides, message):
    config = load_config("plan_path/L3", overrides)
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_the_policy_names_of_an_l1_run_are_the_valid_placement_keys():
    config = load_config("plan_path/L1", ["placement.tool.update_devices=2"])
    with pytest.raises(ConfigError, match=r"unknown policy 'tool'; the run's policies are \['shared'\]"):
        validate_config(config)
    with pytest.raises(ConfigError, match=r"unknown policy 'tool'"):
        placement_from_config(config)  # the same check when a placement is built without validate_config


def test_the_local_backend_still_checks_the_keys_but_a_ray_address_joins():
    config = load_config("plan_path/L3", ["run.ray_address=auto", "run.num_env_workers=3"])
    validate_config(config)  # `local` ignores them, but they are well formed
    assert placement_from_config(config).env_bundles() == [4, 5, 6]


def test_available_resources_without_ray():
    import torch

    here = available_resources()
    assert here == {"CPU": float(os.cpu_count()), "GPU": float(torch.cuda.device_count())}
    assert available_resources("auto") is None  # a cluster to join: its resources are known once joined


def test_worker_bundles_names_an_unknown_policy():
    p = placement("plan_path/L1")
    with pytest.raises(KeyError, match=r"unknown policy 'tool'; the placement holds \['shared'\]"):
        p.worker_bundles("tool")
    with pytest.raises(KeyError, match=r"`role` must be 'rollout' or 'update', got 'env'"):
        p.worker_resources("shared", "env")
