"""Every optional package a config can select (tensorboard, wandb, ray, vllm, textworld, alfworld), missing, is
one line naming the setting and what to install, exit status 2, before anything is written; so is a
``run.ray_address`` nobody listens on, within the documented time. The packages are made missing by
``sys.modules[name] = None`` (what ``import`` and ``importlib.util.find_spec`` then treat as absent)."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from pettingllms.cli import main
from pettingllms.config import load_config, validate_config
from pettingllms.config.extras import OPTIONAL_PACKAGES
from pettingllms.scripts.guard import EXIT_USAGE
from pettingllms.workers.placement import RAY_CONNECT_TIMEOUT_S, check_ray_address


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("pettingllms: error: ") and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("module", "args", "named"),
    [
        ("tensorboard", ["plan_path/L1", "run.report_to=tensorboard"],
         '`run.report_to` tensorboard needs the `tensorboard` package, which is not installed: pip install -e ".[tensorboard]"'),
        ("wandb", ["plan_path/L1", "run.report_to=wandb"],
         '`run.report_to` wandb needs the `wandb` package, which is not installed: pip install -e ".[wandb]"'),
        ("ray", ["plan_path/L1", "run.backend=ray"], '`run.backend` ray needs the `ray` package, which is not installed: pip install -e ".[ray]"'),
        ("vllm", ["plan_path/L1", "rollout.backend=vllm"], "`rollout.backend` vllm (or a preference stage's `use_vllm`) needs the `vllm` package"),
        ("vllm", ["plan_path/L2", "pipeline=[madpo, eval]", "madpo.use_vllm=true"], "needs the `vllm` package"),
        ("textworld", ["household/L1"], "`env.source` textworld (household) needs the `textworld` package, which is not installed: pip install textworld"),
        ("alfworld", ["household/L1", "env.source=alfworld"], "`env.source` alfworld (household) needs the `alfworld` package"),
    ],
)
def test_a_missing_optional_package_is_one_line_before_anything_is_written(module, args, named, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.chdir(tmp_path)
    assert main(["train", *args, "model.name=test-tiny", "run.output_dir=runs/x"]) == EXIT_USAGE
    assert named in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


def test_every_optional_package_has_a_case_above_and_all_means_the_installed_ones(monkeypatch):
    assert {p.module for p in OPTIONAL_PACKAGES} == {"tensorboard", "wandb", "ray", "vllm", "textworld", "alfworld"}
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    validate_config(load_config("plan_path/L1", ["run.report_to=all"]))  # `all`: whatever is installed


def test_evaluation_needs_no_tracker_so_a_run_that_reported_to_one_evaluates_without_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.chdir(tmp_path)
    args = ["eval", "plan_path/L1", "--policy", "oracle", "run.report_to=wandb", "eval.num_instances=2", "--no-progress"]
    assert main(args) == 0
    assert "success 1.000" in capsys.readouterr().out


def test_a_ray_address_nobody_listens_on_is_one_line_naming_it_within_the_documented_time(tmp_path, monkeypatch, capsys):
    with socket.socket() as probe:  # a loopback port that was free a moment ago: nobody listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    assert main(["train", "plan_path/L1", "run.backend=ray", f"run.ray_address=127.0.0.1:{port}", "run.output_dir=runs/x"]) == EXIT_USAGE
    assert time.monotonic() - started < RAY_CONNECT_TIMEOUT_S + 5
    err = one_error_line(capsys.readouterr().err)
    assert f"`run.ray_address` 127.0.0.1:{port}: no Ray cluster reachable there (connection refused" in err
    assert f"ray start --head --port {port}" in err and "run.ray_address=null" in err
    assert not (tmp_path / "runs").exists()
    # A listener there passes; the local backend never probes the address; `auto` is left to Ray.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_ray_address(f"127.0.0.1:{server.getsockname()[1]}")
    validate_config(load_config("plan_path/L1", [f"run.ray_address=127.0.0.1:{port}"]))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_ray_address("auto")
    with pytest.raises(ValueError, match=r"must be null, `auto` or host:port, got 'nowhere'"):
        check_ray_address("nowhere")
