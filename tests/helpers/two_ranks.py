"""Two-rank runs for the data-parallel tests: ``accelerate launch`` of a job script on two CPU processes over
gloo (loopback only, one torch thread per rank), and the same job's one-process run in the test's process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

__all__ = ["DDP_LAUNCH", "FSDP_ACCELERATE_CONFIG", "free_port", "in_this_process", "launch_two_ranks"]

REPO = Path(__file__).resolve().parents[2]
# Two local processes, no mixed precision or compilation (without GPUs: two CPU ranks over gloo).
DDP_LAUNCH = ("--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
              "--dynamo_backend", "no")

# What `accelerate config` writes for FSDP2 on one machine (no GPU here: the launcher starts 2 CPU processes).
FSDP_ACCELERATE_CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 1
num_processes: 2
mixed_precision: 'no'
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: Qwen2DecoderLayer
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_offload_params: false
  fsdp_activation_checkpointing: false
"""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_two_ranks(script: Path, args: Sequence[str], *, launcher: Sequence[str] = DDP_LAUNCH,
                     env: Mapping[str, str] | None = None, timeout: int = 300) -> None:
    """Run ``script args`` under ``accelerate launch launcher`` from the repository root; fails the test with the
    output's tail unless it exits 0. ``env`` replaces the environment (default: this process's)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", *launcher, "--main_process_port",
               str(free_port()), str(script), *args]
    # gloo connects its ranks over the interface the host name resolves to unless told otherwise: loopback only.
    env = {**(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    path = env.get("PYTHONPATH")  # the job scripts import the test helpers
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def in_this_process(main: Callable[[list[str]], object], argv: Sequence[str]) -> None:
    """``main(argv)`` here, this process's torch thread count restored after (the jobs set one thread)."""
    threads = torch.get_num_threads()
    try:
        main(list(argv))
    finally:
        torch.set_num_threads(threads)
