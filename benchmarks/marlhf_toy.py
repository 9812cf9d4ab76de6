"""MARLHF on the cooperative toy task of ``madpo_toy.py``: how well does the joint reward model rank held-out
pairs, and does RL on it raise the team's task reward? For ``rl_algorithm`` magrpo and maac.

The task (imported from ``madpo_toy.py``): two agents answer the same item; the joint reward is
``vowel share of agent 0's text + digit/space share of agent 1's text`` (in [0, 2]). MARLHF never sees it
during RL: it collects preference pairs once (scored by the task reward), fits a joint reward model with
Bradley–Terry (a held-out share of the pairs measures its pairwise accuracy), then trains the agents with
the RL backend on the reward model's scores. The model is the offline ``test-tiny`` preset (random init,
~0.1M parameters) for the agents, the reward model and the critic.

    python -m benchmarks.marlhf_toy                       # seeds 0 1 2, magrpo and maac
    python -m benchmarks.marlhf_toy --seeds 0 --algorithms magrpo --rl-epochs 4

Two pair selections are run: ``reward_gap`` (each item's widest-gap pairs, the library default: easy to
rank) and ``random`` (any non-tied pairs, small gaps included: a harder ranking test).

Reports per run: reward-model held-out pairwise accuracy (and loss), mean task reward on 16 held-out items
before and after training, and the wall time. Prints a table and writes
``benchmarks/results/marlhf_toy.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

# The cooperative task of the MADPO benchmark and the runner pieces both toy benchmarks share.
from benchmarks.madpo_toy import (
    EVAL_SETTINGS,
    HELD_OUT,
    TASK,
    joint_reward,
    print_table,
    setup_threads,
    toy_items,
    toy_parser,
    train_and_evaluate,
    write_result,
)
from comlrl.trainers.preference import MARLHFConfig, MARLHFTrainer


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
    train, held_out = toy_items(args.items)
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
        **EVAL_SETTINGS,
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
    before, after, train_s = train_and_evaluate(trainer)
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
    parser = toy_parser(__doc__, "marlhf_toy.json")
    parser.add_argument("--algorithms", nargs="+", default=["magrpo", "maac"])
    parser.add_argument(
        "--pair-selections",
        nargs="+",
        default=["reward_gap", "random"],
        help="reward_gap keeps each item's widest-gap pairs (easy to rank); random keeps any non-tied pairs",
    )
    parser.add_argument("--rl-epochs", type=int, default=12)
    parser.add_argument("--reward-epochs", type=int, default=4)
    args = parser.parse_args()
    setup_threads(args)

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
    print_table("MARLHF, cooperative toy task (joint task reward in [0, 2], 16 held-out items)", lines)
    result = {
        "task": TASK,
        "model": args.model,
        "seeds": args.seeds,
        "algorithms": args.algorithms,
        "pair_selections": args.pair_selections,
        "train_items": args.items,
        "held_out_items": HELD_OUT,
        "config": settings(args),
        "runs": runs,
        "summary": summary,
    }
    write_result(args, result)


if __name__ == "__main__":
    main()
