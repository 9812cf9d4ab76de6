"""Behaviour fingerprint of the trainers, for refactors that must not change a single number.

``capture`` runs small, seeded jobs through public entry points only and writes every non-timing number
they produce, with a SHA-256 of every saved or final weight tensor, to one JSON file; ``compare`` diffs two
such files and exits 1 on any difference. Run ``capture`` on the commit before a refactor and on the
commit after it (same machine, one torch thread), then ``compare``:

    .venv/bin/python scripts/fingerprint.py capture before.json            # every part
    .venv/bin/python scripts/fingerprint.py capture after.json --parts madpo marlhf
    .venv/bin/python scripts/fingerprint.py compare before.json after.json

Parts:

- ``madpo``: ``benchmarks/madpo_toy.py``'s seed-0 run (5 rounds), its metrics history and final weights;
- ``marlhf``: ``benchmarks/marlhf_toy.py``'s seed-0 runs (magrpo and maac, ``reward_gap`` pairs);
- ``quickstart``: ``pettingllms train plan_path/quickstart`` for 10 AT-GRPO steps (10 held-out instances):
  the per-step metrics of every stage and the saved policy tensors;
- ``learning``: ``benchmarks/learning.py``'s seed-0 AT-GRPO L1 cell (warm start included): success,
  curve, per-step history and the final policy tensors (the cell's pipeline run's ``policies/``; before the
  benchmark ran through the pipeline, its ``final/``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("madpo", "marlhf", "quickstart", "learning")
# Keys that measure time (or derive from it) and so differ between runs of the same computation.
TIMING_MARKERS = ("time", "seconds", "_s", "per_s", "per_second", "throughput", "elapsed", "wall", "threads")


def is_timing_key(key: str) -> bool:
    leaf = key.rsplit("/", 1)[-1]
    return any(m in leaf for m in TIMING_MARKERS) or leaf.endswith("_s") or key.startswith("time/")


def strip_timing(value: Any) -> Any:
    """``value`` without timing entries, at any depth."""
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items() if not is_timing_key(str(k))}
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def tensor_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every tensor in every safetensors / bin file under ``folder`` (relative names)."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".safetensors":
            tensors = load_file(str(path))
        elif path.suffix in (".bin", ".pt") and path.name != "training_args.bin":
            tensors = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(tensors, dict):
                continue
        else:
            continue
        for name, tensor in sorted(tensors.items()):
            if isinstance(tensor, torch.Tensor):
                data = tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
                out[f"{path.relative_to(folder)}:{name}"] = hashlib.sha256(data).hexdigest()
    return out


def module_hashes(models) -> dict[str, str]:
    out = {}
    for i, model in enumerate(models):
        for name, tensor in model.state_dict().items():
            data = tensor.detach().cpu().contiguous().view(__import__("torch").uint8).numpy().tobytes()
            out[f"{i}:{name}"] = hashlib.sha256(data).hexdigest()
    return out


def load_benchmark(name: str):
    if (ROOT / "benchmarks" / "__init__.py").exists():  # the benchmarks package
        sys.path.insert(0, str(ROOT))
        return importlib.import_module(f"benchmarks.{name}")
    sys.path.insert(0, str(ROOT / "benchmarks"))  # before it: scripts that import their siblings by name
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def capture_toy(module_name: str, runs: list[tuple], extra_args: dict) -> list[dict]:
    """Each run of a toy benchmark, with the trainer's metrics history and final weights."""
    module = load_benchmark(module_name)
    trainers = []
    original = module.train_and_evaluate

    def recording(trainer):
        trainers.append(trainer)
        return original(trainer)

    module.train_and_evaluate = recording
    args = argparse.Namespace(items=16, model="test-tiny", lr=5e-3, threads=1, **extra_args)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for run_args in runs:
            result = module.run(*run_args, args, Path(tmp))
            trainer = trainers[-1]
            out.append({
                "result": strip_timing(result),
                "history": strip_timing(trainer.metrics_logger.history),
                "weights": module_hashes({id(m): m for m in trainer.agents}.values()),
            })
    return out


def capture_quickstart() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "quickstart"
        cmd = [
            sys.executable, "-m", "pettingllms", "train", "plan_path/quickstart", "--overwrite",
            "at_grpo.max_steps=10", "eval.num_instances=10", f"run.output_dir={run_dir}",
        ]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        metrics = {}
        for path in sorted(run_dir.rglob("metrics.jsonl")):
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            metrics[str(path.relative_to(run_dir))] = strip_timing(rows)
        return {"metrics": metrics, "policies": tensor_hashes(run_dir / "policies")}


def capture_learning() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "learning"
        package = (ROOT / "benchmarks" / "__init__.py").exists()
        entry = ["-m", "benchmarks.learning"] if package else [str(ROOT / "benchmarks" / "learning.py")]
        cmd = [
            sys.executable, *entry, "--seeds", "0", "--methods", "at_grpo_l1",
            "--threads", "1", "--results", str(results), "--summary", str(Path(tmp) / "summary.json"),
            "--budget-minutes", "1000",  # no time cap: a busy machine must not cut the cell short
        ]
        subprocess.run(cmd, check=True, cwd=ROOT)
        cell = json.loads((results / "at_grpo_l1-seed0.json").read_text())
        keep = ("success_before", "success_after", "greedy_before", "greedy_after", "completions", "steps",
                "curve", "history")
        run_dir = results / "cache" / "at_grpo_l1-seed0"
        final = run_dir / "policies" if (run_dir / "policies").is_dir() else run_dir / "final"  # before: final/
        return {**{k: strip_timing(cell[k]) for k in keep}, "final_policy": tensor_hashes(final)}


def capture(parts: list[str]) -> dict:
    import torch

    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for part in parts:
        print(f"[fingerprint] {part} ...", flush=True)
        if part == "madpo":
            out[part] = capture_toy("madpo_toy", [(0,)], {"iterations": 5})
        elif part == "marlhf":
            out[part] = capture_toy(
                "marlhf_toy", [("magrpo", "reward_gap", 0), ("maac", "reward_gap", 0)],
                {"rl_epochs": 12, "reward_epochs": 4},
            )
        elif part == "quickstart":
            out[part] = capture_quickstart()
        elif part == "learning":
            out[part] = capture_learning()
    return out


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                out.append(f"{path}/{key}: only in {'after' if key not in a else 'before'}")
            else:
                out += differences(a[key], b[key], f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def count_leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(count_leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_leaves(v) for v in value)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture")
    cap.add_argument("output", type=Path)
    cap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "capture":
        result = capture(args.parts)
        args.output.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"[fingerprint] wrote {args.output}")
        return 0
    before, after = json.loads(args.before.read_text()), json.loads(args.after.read_text())
    shared = sorted(set(before) & set(after))
    diffs = differences({k: before[k] for k in shared}, {k: after[k] for k in shared})
    for part in shared:
        part_diffs = [d for d in diffs if d.startswith(f"/{part}")]
        status = "identical" if not part_diffs else f"{len(part_diffs)} differences"
        print(f"{part:<12} {count_leaves(before[part]):>7} values  {status}")
    for d in diffs[:50]:
        print("  ", d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
