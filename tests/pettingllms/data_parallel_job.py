"""The runs ``test_data_parallel.py`` compares: launched with ``accelerate launch --multi_gpu
--num_processes 2`` (two ranks over gloo) and called in the test's own process (one process).

``python data_parallel_job.py MODEL_PATH OUT_DIR SCENARIO...`` runs each scenario into ``OUT_DIR/SCENARIO``:
the trainer writes its files there (rank 0 only, data-parallel), and every rank dumps its final trainable
weights to ``weights-rank{r}.pt`` and its returned history to ``history-rank{r}.json`` for the test to read.

Scenarios (test-tiny model, Plan-Path 4x4, K = 2, 8 tokens, 2 steps, a reward bonus per candidate so
there is a gradient; every policy makes exactly one optimizer step per training step, so the data-parallel
step is the one-process step over the same global rows):

- ``l1_tree``: AT-GRPO, one shared policy, 4 problems per step (2 per rank), micro-batches of 4 rows,
  transcripts of every episode, a checkpoint every step; ``l1_resume`` resumes ``l1_tree``'s
  ``checkpoint-1`` into its own folder and runs step 2;
- ``l3_tree``: AT-GRPO, two policies (L3), 3 problems per step (1 and 2 per rank: unequal micro-batch
  counts within the one optimizer step);
- ``l1_grpo``: the GRPO baseline (independent sampling), 4 problems per step;
- ``uneven``: L1, 3 problems per step with one micro-batch per optimizer step, so the ranks hold different
  numbers of optimizer steps' rows: the rank with fewer joins the others' steps with zero gradients (not
  comparable with one process; both ranks must end with the same weights);
- ``sft``: the SFT warm start of an L1 policy on 9 tool and 8 plan demonstrations, batches of 4 (the last
  batch of an epoch holds 1 row, so rank 0's shard of it is empty);
- ``l3_beta``: ``l3_tree`` with a KL to the reference (``beta = 0.1``).

Launched with FSDP (``test_data_parallel_fsdp.py``: accelerate's config with ``distributed_type: FSDP``), every
rank also writes ``shards-rank{r}.json``: per scenario, what the last sharded update held on this rank
(elements of each sharded parameter against its whole size, and of the whole model, released inside).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from comlrl import distributed as dist
from tests.helpers.bonus_trainer import BonusTrainer

ENV = {"rows": 4, "cols": 4}


def at_grpo_values(scenario: str, out: Path) -> dict:
    values = dict(
        policy_level="L1",
        max_turns=2,
        problems_per_step=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=16,  # one optimizer step per policy and training step
        output_dir=str(out / scenario),
        disable_tqdm=True,
        seed=1,
    )
    if scenario in ("l1_tree", "l1_resume"):
        values.update(transcript_rate=1.0, save_steps=1)
    elif scenario in ("l3_tree", "l3_beta"):
        values.update(policy_level="L3", problems_per_step=3, beta=0.1 if scenario == "l3_beta" else 0.0)
    elif scenario == "l1_grpo":
        values.update(sampling_mode="independent")
    elif scenario == "uneven":
        values.update(problems_per_step=3, gradient_accumulation_steps=1)
    return values


def sft_demos() -> dict[str, list[tuple[str, str]]]:
    return {
        role: [(f"{role} step {i}: where next?", f"move {'UDLR'[i % 4]} then {'RLDU'[i % 4]}" * (1 + i % 3))
               for i in range(count)]
        for role, count in (("tool", 9), ("plan", 8))
    }


def sft_policy(model_path: str):
    from comlrl.policy import MultiAgentPolicy

    return MultiAgentPolicy.shared(model_path, ["tool", "plan"])


def run(model_path: str, out: Path, scenario: str) -> None:
    folder = out / scenario
    if scenario == "sft":
        from pettingllms.trainer.sft import sft_warm_start

        policy = sft_policy(model_path)
        summary = sft_warm_start(policy, sft_demos(), num_train_epochs=2, learning_rate=1e-2, per_device_train_batch_size=4, seed=0,
                                 max_length=512, progress=False)
        history = [summary]
    else:
        trainer = BonusTrainer.from_flat(at_grpo_values(scenario, out), model=model_path, env_config=ENV)
        resume = str(out / "l1_tree" / "checkpoint-1") if scenario == "l1_resume" else None
        history = trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(folder / "model")
        policy = trainer.policy
    folder.mkdir(parents=True, exist_ok=True)
    weights = {name: [p.detach().clone() for p in policy.trainable_parameters(name)] for name in policy.policies}
    torch.save(weights, folder / f"weights-rank{dist.rank()}.pt")
    (folder / f"history-rank{dist.rank()}.json").write_text(json.dumps(history))


def record_shards(held: dict) -> None:
    """Under FSDP: keep in ``held["last"]`` what each sharded update holds on this rank, seen inside it."""
    from contextlib import contextmanager

    from pettingllms.trainer import fsdp

    training = fsdp.ShardedModel.training

    @contextmanager
    def recorded(self):
        with training(self) as module:
            held["last"] = {"whole": self.whole_numel(), "shards": self.local_numels()}
            yield module

    fsdp.ShardedModel.training = recorded


def main(argv: list[str]) -> None:
    model_path, out, *scenarios = argv
    torch.set_num_threads(1)
    held, shards = {}, {}
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":  # accelerate's FSDP launch
        record_shards(held)
    for scenario in scenarios:
        held.clear()
        run(model_path, Path(out), scenario)
        shards[scenario] = held.get("last")
        dist.barrier()
    if any(shards.values()):
        (Path(out) / f"shards-rank{dist.rank()}.json").write_text(json.dumps(shards))


if __name__ == "__main__":
    main(sys.argv[1:])
