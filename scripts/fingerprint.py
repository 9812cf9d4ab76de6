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
  benchmark ran through the pipeline, its ``final/``);
- ``madpoiter``: ``MADPOIterTrainer`` on ``test-tiny``, 2 rounds over 4 items, ``gradient_accumulation_steps=2``
  and a linear LR schedule: metrics history and final weights;
- ``magrpo_multiturn``: ``MAGRPOTrainer``, 2 agents, ``num_turns=2`` with an ``external_transition``:
  ``default`` (constant LR, no accumulation) and ``dapo_accum`` (``loss_type="dapo"``,
  ``gradient_accumulation_steps=2``); metrics history and final weights of each;
- ``iac``: ``IACTrainer`` with a separate value-head critic per agent: history, actor and critic weights;
- ``sft``: ``pettingllms train plan_path/L1`` on ``test-tiny``: ``sft`` (the sft stage alone, 8 problems,
  2 epochs) and ``at_grpo_dapo_accum`` (sft on 32 problems, then 3 AT-GRPO steps with ``loss_type=dapo``
  and ``gradient_accumulation_steps=2``): each stage's metrics and the saved policy tensors.
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
PARTS = ("madpo", "marlhf", "quickstart", "learning", "madpoiter", "magrpo_multiturn", "iac", "sft")
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


def pettingllms_run(config: str, overrides: list[str]) -> dict:
    """``pettingllms train config`` with ``overrides``: every stage's metrics and the saved policy tensors."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "pettingllms", "train", config, "--overwrite", *overrides,
               f"run.output_dir={run_dir}"]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        metrics = {}
        for path in sorted(run_dir.rglob("metrics.jsonl")):
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            metrics[str(path.relative_to(run_dir))] = strip_timing(rows)
        return {"metrics": metrics, "policies": tensor_hashes(run_dir / "policies")}


def capture_quickstart() -> dict:
    return pettingllms_run("plan_path/quickstart", ["at_grpo.max_steps=10", "eval.num_instances=10"])


def capture_sft() -> dict:
    tiny = ["model.name=test-tiny", "run.progress=false"]
    return {
        "sft": pettingllms_run("plan_path/L1", [*tiny, "pipeline=[sft]", "sft.num_problems=8", "sft.num_train_epochs=2"]),
        # A stronger warm start first: from the untrained model every reward is a parse error (no gradient).
        "at_grpo_dapo_accum": pettingllms_run("plan_path/L1", [
            *tiny, "pipeline=[sft, at_grpo]", "sft.num_problems=32", "sft.num_train_epochs=3", "sft.learning_rate=1e-2",
            "at_grpo.max_steps=3", "at_grpo.problems_per_step=2",
            "at_grpo.per_device_train_batch_size=4", "at_grpo.gradient_accumulation_steps=2",
            "at_grpo.loss_type=dapo", "at_grpo.save_steps=0",
        ]),
    }


# ---- the CoMLRL trainers through their public constructors, on the offline test-tiny preset ----------------

def tiny_items(n: int, start: int = 0) -> list[dict]:
    return [{"prompt": f"Item {i}: plan the route."} for i in range(start, start + n)]


def length_reward(first, second):
    """A joint reward that differs between candidates: agent 0's vowel share + agent 1's length class."""
    vowels = sum(c in "aeiou" for c in first[0]) / max(len(first[0]), 1)
    return [vowels + 0.25 * float(len(second[0]) % 3)]


length_reward.reward_range = (0.0, 1.5)


def revise_transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    """The public ``external_transition``: every agent's next prompt names its last response's length."""
    return [f"{prompt} Revise ({len(c)} chars):" for c in agent_completions]


SHARED = dict(max_new_tokens=6, temperature=1.0, top_p=1.0, eval_interval=0, logging_steps=1, disable_tqdm=True)


def trainer_record(trainer, extra=()) -> dict:
    """The trainer's metrics history and the hashes of its agents' (and ``extra`` modules') weights."""
    trainer.train()
    models = {id(m): m for m in [*trainer.agents, *extra]}
    return {"history": strip_timing(trainer.metrics_logger.history), "weights": module_hashes(models.values())}


def capture_madpoiter(tmp: Path) -> dict:
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    config = MADPOIterConfig(
        output_dir=str(tmp / "madpoiter"), seed=3, num_iterations=2, num_train_epochs=1,
        preference_num_candidates=4, preference_pairs_per_sample=2, comparator_policy="current",
        agent_learning_rate=5e-3, dpo_beta=0.1, train_batch_size=2, gradient_accumulation_steps=2,
        lr_scheduler_type="linear", warmup_steps=1, top_k=0, **SHARED,
    )
    trainer = MADPOIterTrainer(agent_model="test-tiny", num_agents=2, reward_func=length_reward,
                               train_dataset=tiny_items(4), eval_dataset=tiny_items(2, 100), args=config)
    return {**trainer_record(trainer), "evaluate": strip_timing(trainer.evaluate())}


def capture_magrpo_multiturn(tmp: Path) -> dict:
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

    out = {}
    runs = {"default": {}, "dapo_accum": dict(loss_type="dapo", gradient_accumulation_steps=2)}
    for name, overrides in runs.items():
        config = MAGRPOConfig(
            output_dir=str(tmp / name), seed=5, num_turns=2, num_generations=2, agent_learning_rate=1e-2,
            num_train_epochs=1, rollout_buffer_size=2, train_batch_size=2, early_termination_threshold=None,
            **SHARED, **overrides,
        )
        trainer = MAGRPOTrainer(agent_model="test-tiny", num_agents=2, reward_func=length_reward,
                                train_dataset=tiny_items(4), args=config, external_transition=revise_transition)
        out[name] = trainer_record(trainer)
    return out


def capture_iac(tmp: Path) -> dict:
    from comlrl.trainers.actor_critic import IACConfig, IACTrainer

    config = IACConfig(
        output_dir=str(tmp / "iac"), seed=11, num_turns=1, num_agents=2, num_generations=2,
        agent_learning_rate=1e-2, critic_learning_rate=1e-2, num_train_epochs=2, rollout_buffer_size=2,
        critic_type="v", use_separate_critic=True, critic_model_name="test-tiny", **SHARED,
    )
    trainer = IACTrainer(agent_model="test-tiny", reward_func=length_reward, train_dataset=tiny_items(4),
                         args=config)
    record = trainer_record(trainer)
    record["critic_weights"] = module_hashes(trainer.critics)
    return record


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
        elif part == "sft":
            out[part] = capture_sft()
        else:
            with tempfile.TemporaryDirectory() as tmp:
                out[part] = globals()[f"capture_{part}"](Path(tmp))
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
        print(f"{part:<17} {count_leaves(before[part]):>7} values  {status}")
    for d in diffs[:50]:
        print("  ", d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
