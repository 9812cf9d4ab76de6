"""Steps per second of the quickstart-sized AT-GRPO run: one process against Ray with 1 and 2 EnvWorkers.

The run is the README's main job (``plan_path/quickstart``: L1, the ``small`` preset, Plan-Path 4x4, 4
problems x K=4 candidates per decision, 3 turns) without its warm start; each backend trains the same
fresh policy for ``--steps`` AT-GRPO steps with the same seed (the Ray runs sample the same tokens). The first
step (warm-up: worker start, first weight sync) is left out; the table gives the median over the other steps:

- ``step_s`` and ``steps_per_s``;
- where the time goes: ``generate_s`` (model.generate, in the driver or the slowest EnvWorker), ``env_s``
  (environment steps), ``update_s`` (the PPO passes: in the driver, or inside the UpdateWorker), ``transfer_s``
  (Ray only: moving the step's rows to the UpdateWorker and its result back, plus the weight sync to the
  RolloutWorker) and ``other_s`` (the rest: problem draws, advantages, tensorising, metrics, Ray calls);
- ``sync_mb``: weight bytes sent to RolloutWorkers per step.

On one 2-core machine every Ray worker shares the two cores with the driver, so Ray is slower here: the
point of the numbers is where the time goes, and that the split adds little besides the transfers.
``docs/scaling.md`` maps the same config to one 8-GPU node and to several nodes.

    python -m benchmarks.scale                        # 6 steps per backend
    python -m benchmarks.scale --steps 4 --model test-tiny

Results go to ``benchmarks/results/scale.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the one-machine cluster stays on the loopback address

import torch  # noqa: E402

from comlrl.atomic_io import atomic_write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
BACKENDS = (("local", 0), ("ray", 1), ("ray", 2))


def run_backend(backend: str, env_workers: int, steps: int, model: str, output_dir: Path) -> dict:
    """Train ``steps`` steps of the quickstart config on ``backend``; the per-step seconds by part."""
    from pettingllms.config import load_config
    from pettingllms.stages.at_grpo import at_grpo_settings
    from pettingllms.stages.context import build_run_policy, workflow_env
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from pettingllms.workers.stage import attach, stage_workers

    config = load_config("plan_path/quickstart", [
        f"model.name={model}", f"run.output_dir={output_dir}", f"at_grpo.max_steps={steps}", "at_grpo.save_steps=0",
        "rollout.transcripts_rate=0", "run.progress=false", f"run.backend={backend}",
        f"run.num_env_workers={max(env_workers, 1)}",
    ])
    settings = at_grpo_settings("at_grpo", config, output_dir / "at_grpo", progress=False)
    policy = build_run_policy(config)
    name, fields, options = workflow_env(config, purpose="train")
    rows = []
    with stage_workers(config, policy, settings.trainer, name, fields, options) as system:
        trainer = ATGRPOTrainer(settings.trainer, rollout=None if system else settings.rollout, policy=policy,
                                env_name=name, env_config=fields, agent_options=options,
                                **(system.trainer_kwargs() if system else {}))
        attach(trainer, system)
        trainer.on_fresh_run()
        for _ in range(steps):
            before = _updater_seconds(system)
            started = time.perf_counter()
            metrics = trainer.step()
            step_s = time.perf_counter() - started
            after = _updater_seconds(system)
            spent = {k: after[k] - before[k] for k in after}
            update_s = spent["compute_s"] if system else metrics["time/update_s"]
            transfer_s = (metrics["time/update_s"] - spent["compute_s"]) if system else 0.0
            parts = {
                "step_s": step_s,
                "generate_s": metrics["time/generate_s"],
                "env_s": metrics["time/env_s"],
                "update_s": update_s,
                "transfer_s": transfer_s,
                "sync_mb": spent["sync_bytes"] / 2**20,
            }
            parts["other_s"] = step_s - sum(parts[k] for k in ("generate_s", "env_s", "update_s", "transfer_s"))
            rows.append(parts)
    return {"backend": backend, "env_workers": env_workers, "steps": rows}


def _updater_seconds(system) -> dict[str, float]:
    if system is None:
        return {"compute_s": 0.0, "sync_bytes": 0.0}
    updaters = system.updaters.values()
    return {"compute_s": sum(u.compute_seconds for u in updaters), "sync_bytes": float(sum(u.sync_bytes for u in updaters))}


def summarise(run: dict) -> dict:
    """Medians over the steps after the first."""
    steps = run["steps"][1:] or run["steps"]
    out = {"backend": run["backend"] if run["backend"] == "local" else f"ray, {run['env_workers']} EnvWorker(s)"}
    for key in steps[0]:
        out[key] = statistics.median(s[key] for s in steps)
    out["steps_per_s"] = 1.0 / out["step_s"]
    return out


def print_table(rows: list[dict]) -> None:
    columns = ("backend", "steps_per_s", "step_s", "generate_s", "env_s", "update_s", "transfer_s", "other_s", "sync_mb")
    print(" | ".join(f"{c:>22}" if c == "backend" else f"{c:>11}" for c in columns))
    for row in rows:
        cells = [f"{row['backend']:>22}"] + [f"{row[c]:>11.3f}" for c in columns[1:]]
        print(" | ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="AT-GRPO steps per backend (the first is warm-up)")
    parser.add_argument("--model", default="small", help="model preset or local path (default: small)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the driver and every worker")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is warm-up)")
    torch.set_num_threads(args.threads)
    try:
        import ray
    except ImportError:
        print("benchmarks.scale needs Ray: pip install -e '.[ray]'", file=sys.stderr)
        return 2
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    runs = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for backend, workers in BACKENDS:
                print(f"scale: {backend} ({workers} EnvWorkers), {args.steps} steps ...", file=sys.stderr, flush=True)
                runs.append(run_backend(backend, workers, args.steps, args.model, Path(scratch) / f"{backend}{workers}"))
    finally:
        ray.shutdown()
    rows = [summarise(run) for run in runs]
    print_table(rows)
    atomic_write_json(args.output, {
        "benchmark": "scale", "model": args.model, "steps": args.steps, "torch_threads": args.threads,
        "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
        "ray": ray.__version__, "rows": rows, "runs": runs,
    })
    print(f"results: {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
