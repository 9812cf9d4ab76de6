"""MARLHF on the cooperative toy task of ``madpo_toy.py``: how well does the joint reward model rank held-out
pairs, and does RL on it raise the team's task reward? For ``rl_algorithm`` magrpo and maac.

The task (imported from ``madpo_toy.py``): two agents answer the same item; the joint reward is
``vowel share of agent 0's text + digit/space share of agent 1's text`` (in [0, 2]). MARLHF never sees it
during RL: it collects preference pairs once (scored by the task reward), fits a joint reward model with
Bradley–Terry (a held-out share of the pairs measures its pairwise accuracy), then trains the agents with
the RL backend on the reward model's scores. The model is the offline ``test-tiny`` preset (random init,
~0.1M parameters) for the agents, the reward model and the critic.

    python benchmarks/marlhf_toy.py                       # seeds 0 1 2, magrpo and maac
    python benchmarks/marlhf_toy.py --seeds 0 --algorithms magrpo --rl-epochs 4

Two pair selections are run: ``reward_gap`` (each item's widest-gap pairs, the library default: easy to
rank) and ``random`` (any non-tied pairs, small gaps included: a harder ranking test).

Reports per run: reward-model held-out pairwise accuracy (and loss), mean task reward on 16 held-out items
before and after training, and the wall time. Prints a table and writes
``benchmarks/results/marlhf_toy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from madpo_toy import joint_reward  # noqa: E402  (the cooperative task of the MADPO benchmark)

from comlrl.atomic_io import atomic_write_text  # noqa: E402
from comlrl.trainers.preference import MARLHFConfig, MARLHFTrainer  # noqa: E402

HELD_OUT = 16


def settings(args: argparse.Namespace) -> dict:
    return {
        "preference_num_candidates": 8,
        "preference_pairs_per_sample": 6,
        "reward_eval_fraction": 0.25,
        "reward_num_train_epochs": args.reward_epochs,
        "reward_learning_rate": 1e-3,
        "reward_train_batch_size": 8,
        "num_generations": 4,
        "num_train_epochs": args.rl_epochs,
        "rollout_buffer_size": 4,
        "max_new_tokens": 12,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "agent_learning_rate": args.lr,
    }


def run(algorithm: str, selection: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    train = [{"prompt": f"Item {i}: describe the plan."} for i in range(args.items)]
    held_out = [{"prompt": f"Held-out {i}: describe the plan."} for i in range(HELD_OUT)]
    extra = (
        {"critic_model_name": args.model, "critic_learning_rate": args.lr}
        if algorithm in ("maac", "iac")
        else {}
    )
    config = MARLHFConfig(
        output_dir=str(workdir / f"{algorithm}-{selection}-seed{seed}"),
        pair_selection=selection,
        seed=seed,
        rl_algorithm=algorithm,
        reward_model_name=args.model,
        eval_interval=0,
        eval_num_samples=HELD_OUT,
        eval_batch_size=HELD_OUT,
        logging_steps=10**9,
        disable_tqdm=True,
        **settings(args),
        **extra,
    )
    trainer = MARLHFTrainer(
        agent_model=args.model,
        num_agents=2,
        reward_func=joint_reward,
        train_dataset=train,
        eval_dataset=held_out,
        args=config,
    )
    before = trainer.evaluate()["eval/turn_1/reward_mean"]
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    after = trainer.evaluate()["eval/turn_1/reward_mean"]
    fit = next(r for r in trainer.metrics_logger.history if "reward_model/eval_accuracy" in r)
    return {
        "algorithm": algorithm,
        "pair_selection": selection,
        "seed": seed,
        "pairs": int(fit["reward_model/train_pairs"] + fit["reward_model/eval_pairs"]),
        "held_out_pairs": int(fit["reward_model/eval_pairs"]),
        "rm_train_accuracy": round(fit["reward_model/accuracy"], 4),
        "rm_held_out_accuracy": round(fit["reward_model/eval_accuracy"], 4),
        "rm_held_out_loss": round(fit["reward_model/eval_loss"], 4),
        "task_reward_before": round(before, 4),
        "task_reward_after": round(after, 4),
        "train_s": round(train_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algorithms", nargs="+", default=["magrpo", "maac"])
    parser.add_argument(
        "--pair-selections",
        nargs="+",
        default=["reward_gap", "random"],
        help="reward_gap keeps each item's widest-gap pairs (easy to rank); random keeps any non-tied pairs",
    )
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--rl-epochs", type=int, default=12)
    parser.add_argument("--reward-epochs", type=int, default=4)
    parser.add_argument("--model", default="test-tiny")
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "marlhf_toy.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    with tempfile.TemporaryDirectory(prefix="marlhf-toy-") as tmp:
        runs = [
            run(a, sel, s, args, Path(tmp))
            for sel in args.pair_selections
            for a in args.algorithms
            for s in args.seeds
        ]

    header = [
        "pairs kept",
        "rl_algorithm",
        "seed",
        "pairs",
        "RM held-out acc",
        "task reward before",
        "after",
        "train s",
    ]
    lines = [header]
    for r in runs:
        lines.append(
            [
                r["pair_selection"],
                r["algorithm"],
                str(r["seed"]),
                str(r["pairs"]),
                f"{r['rm_held_out_accuracy']:.3f}",
                f"{r['task_reward_before']:.3f}",
                f"{r['task_reward_after']:.3f}",
                f"{r['train_s']:.1f}",
            ]
        )
    summary = {}
    for selection in args.pair_selections:
        for algorithm in args.algorithms:
            mine = [r for r in runs if r["algorithm"] == algorithm and r["pair_selection"] == selection]
            s = summary[f"{selection}/{algorithm}"] = {
                key: round(statistics.mean(r[key] for r in mine), 4)
                for key in ("rm_held_out_accuracy", "task_reward_before", "task_reward_after", "train_s")
            }
            lines.append(
                [
                    selection,
                    algorithm,
                    "mean",
                    "",
                    f"{s['rm_held_out_accuracy']:.3f}",
                    f"{s['task_reward_before']:.3f}",
                    f"{s['task_reward_after']:.3f}",
                    f"{s['train_s']:.1f}",
                ]
            )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    print("MARLHF, cooperative toy task (joint task reward in [0, 2], 16 held-out items)")
    for row in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))
    result = {
        "task": "vowel share of agent 0 + digit/space share of agent 1 (joint reward in [0, 2])",
        "model": args.model,
        "seeds": args.seeds,
        "algorithms": args.algorithms,
        "pair_selections": args.pair_selections,
        "train_items": args.items,
        "held_out_items": HELD_OUT,
        "config": settings(args),
        "runs": runs,
        "summary": summary,
        "threads": args.threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
