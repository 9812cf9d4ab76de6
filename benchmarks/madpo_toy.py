"""MADPOIter on a cooperative toy task: does the team's mean joint reward rise over 5 iterations?

Two agents answer the same item. The joint reward adds what each contributes:
``vowel share of agent 0's text + share of digits and spaces in agent 1's text`` (each in [0, 1], so the
joint reward is in [0, 2]). Neither agent sees the other's score: they learn only which joint response
won. The model is the offline ``test-tiny`` preset (random init, ~0.1M parameters), so any rise comes from
MADPO alone.

    python -m benchmarks.madpo_toy                      # seeds 0 1 2, 5 iterations
    python -m benchmarks.madpo_toy --seeds 0 --iterations 3 --model tiny

For every seed it reports, per round, the mean task reward of the current agents' candidates (sampled
before that round's update), and the mean reward on 16 held-out items before and after training. Prints a
table and writes ``benchmarks/results/madpo_toy.json``. Pass criterion: the reward of round 5 and the
held-out reward after training exceed round 1's and the held-out reward before training, for every seed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from comlrl.atomic_io import atomic_write_text
from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

VOWELS = frozenset("aeiouAEIOU")


def share(text: str, wanted) -> float:
    return sum(1 for c in text if wanted(c)) / len(text) if text else 0.0


def joint_reward(writer, helper):
    """Cooperative joint reward of one joint response (lists of one completion per agent)."""
    return share(writer[0], lambda c: c in VOWELS) + share(helper[0], lambda c: c.isdigit() or c == " ")


joint_reward.reward_range = (0.0, 2.0)

TASK = "vowel share of agent 0 + digit/space share of agent 1 (joint reward in [0, 2])"
HELD_OUT = 16
# Evaluation on every held-out item in one batch, and no periodic logging or progress bars.
EVAL_SETTINGS = dict(
    eval_interval=0,
    eval_num_samples=HELD_OUT,
    eval_batch_size=HELD_OUT,
    logging_steps=10**9,
    disable_tqdm=True,
)


def toy_items(n: int) -> tuple[list[dict], list[dict]]:
    """``n`` training items and the ``HELD_OUT`` held-out items."""
    train = [{"prompt": f"Item {i}: describe the plan."} for i in range(n)]
    held_out = [{"prompt": f"Held-out {i}: describe the plan."} for i in range(HELD_OUT)]
    return train, held_out


def train_and_evaluate(trainer) -> tuple[float, float, float]:
    """Held-out mean reward before and after ``trainer.train()``, and the training wall time in seconds."""
    before = trainer.evaluate()["eval/turn_1/reward_mean"]
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    after = trainer.evaluate()["eval/turn_1/reward_mean"]
    return before, after, train_s


def toy_parser(doc: str, out_name: str) -> argparse.ArgumentParser:
    """The options every toy benchmark takes; ``out_name`` is the default file under benchmarks/results."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--model", default="test-tiny")
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / out_name))
    return parser


def setup_threads(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def print_table(title: str, lines: list[list[str]]) -> None:
    """``title``, then ``lines`` (the first is the header) with right-aligned columns."""
    widths = [max(len(row[i]) for row in lines) for i in range(len(lines[0]))]
    print(title)
    for row in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))


def write_result(args: argparse.Namespace, result: dict) -> None:
    """``result`` plus the thread count and versions, written atomically to ``args.out``."""
    versions = {"threads": args.threads, "python": platform.python_version(), "torch": torch.__version__}
    result = {**result, **versions}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


def run(seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    train, held_out = toy_items(args.items)
    config = MADPOIterConfig(
        output_dir=str(workdir / f"seed{seed}"),
        seed=seed,
        num_iterations=args.iterations,
        num_train_epochs=2,
        preference_num_candidates=8,
        preference_pairs_per_sample=4,
        comparator_policy="current",
        max_new_tokens=12,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        agent_learning_rate=args.lr,
        dpo_beta=0.1,
        train_batch_size=8,
        **EVAL_SETTINGS,
    )
    trainer = MADPOIterTrainer(
        agent_model=args.model,
        num_agents=2,
        reward_func=joint_reward,
        train_dataset=train,
        eval_dataset=held_out,
        args=config,
    )
    before, after, train_s = train_and_evaluate(trainer)
    rounds = [r for r in trainer.metrics_logger.history if "iter/current_iteration" in r]
    return {
        "seed": seed,
        "round_reward_mean": [round(r["iter/current_reward_mean"], 4) for r in rounds],
        "round_win_rate": [round(r["iter/current_win_rate"], 4) for r in rounds],
        "round_pairs": [int(r["iter/current_preference_pairs"]) for r in rounds],
        "held_out_before": round(before, 4),
        "held_out_after": round(after, 4),
        "train_s": round(train_s, 2),
    }


def main() -> None:
    parser = toy_parser(__doc__, "madpo_toy.json")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    setup_threads(args)

    with tempfile.TemporaryDirectory(prefix="madpo-toy-") as tmp:
        runs = [run(seed, args, Path(tmp)) for seed in args.seeds]

    header = (
        ["seed"]
        + [f"round {r + 1}" for r in range(args.iterations)]
        + ["held-out before", "after", "train s"]
    )
    lines = [header]
    for r in runs:
        lines.append(
            [str(r["seed"])]
            + [f"{v:.3f}" for v in r["round_reward_mean"]]
            + [f"{r['held_out_before']:.3f}", f"{r['held_out_after']:.3f}", f"{r['train_s']:.1f}"]
        )
    means = [statistics.mean(r["round_reward_mean"][i] for r in runs) for i in range(args.iterations)]
    lines.append(
        ["mean"]
        + [f"{v:.3f}" for v in means]
        + [
            f"{statistics.mean(r['held_out_before'] for r in runs):.3f}",
            f"{statistics.mean(r['held_out_after'] for r in runs):.3f}",
            f"{statistics.mean(r['train_s'] for r in runs):.1f}",
        ]
    )
    print_table(
        "MADPOIter, cooperative toy task: mean joint task reward (range 0..2) of the current agents", lines
    )
    rises = all(
        r["round_reward_mean"][-1] > r["round_reward_mean"][0] and r["held_out_after"] > r["held_out_before"]
        for r in runs
    )
    print(
        f"reward rises from round 1 to round {args.iterations} and on held-out items, every seed: "
        f"{'yes' if rises else 'NO'}"
    )
    result = {
        "task": TASK,
        "model": args.model,
        "seeds": args.seeds,
        "iterations": args.iterations,
        "train_items": args.items,
        "held_out_items": HELD_OUT,
        "config": {
            "preference_num_candidates": 8,
            "preference_pairs_per_sample": 4,
            "num_train_epochs": 2,
            "max_new_tokens": 12,
            "temperature": 1.0,
            "agent_learning_rate": args.lr,
            "dpo_beta": 0.1,
            "train_batch_size": 8,
            "comparator_policy": "current",
            "replay": "current",
        },
        "runs": runs,
        "round_reward_mean_over_seeds": [round(v, 4) for v in means],
        "reward_rises_every_seed": rises,
    }
    write_result(args, result)


if __name__ == "__main__":
    main()
