"""The comlrl runs ``test_data_parallel.py`` compares: launched with ``accelerate launch --multi_gpu
--num_processes 2`` (two ranks over gloo) and called in the test's own process (one process).

``python data_parallel_job.py MODEL_PATH OUT_DIR SCENARIO...`` runs each scenario into ``OUT_DIR/SCENARIO``
(the trainer's files: rank 0 only) and every rank dumps ``rank{r}.pt``: its final trainable weights, the
gradient each optimizer stepped with (after the sum over ranks and the division by the global rows) and
its counters.

Scenarios (test-tiny model, 4 items, the same global batches in both launches):

- ``madpo``: MADPO, 2 epochs over the collected pairs in batches of 5 (ranks take 3 and 2 pairs, the last
  batch's 2 pairs 1 and 1), 2 micro-batches per optimizer step, a linear LR schedule with warm-up, clipping,
  and a checkpoint every optimizer step (``save_steps=1``);
- ``magrpo``: MAGRPO, 2 epochs, one rollout buffer of 4 items, update batches of 3 (ranks take 2 and 1 items)
  then 1 (rank 1 has no row and joins with none), per-item groups whitened, a cosine schedule.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from comlrl import distributed as dist
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

ITEMS = [{"prompt": f"Task {i}: write a short plan."} for i in range(4)]
LR = 1e-2


def reward(a, b) -> float:
    return float(len(a[0]) % 5) + 0.5 * float(len(b[0]) % 3)


def build(scenario: str, model_path: str, out: Path):
    common = dict(output_dir=str(out), max_new_tokens=5, temperature=1.0, top_p=1.0, agent_learning_rate=LR,
                  logging_steps=1, eval_interval=0, disable_tqdm=True, seed=3, num_train_epochs=2)  # fmt: skip
    if scenario == "madpo":
        args = MADPOConfig(**common, preference_num_candidates=4, preference_pairs_per_sample=3, train_batch_size=5,
                           gradient_accumulation_steps=2, lr_scheduler_type="linear", warmup_steps=1,
                           max_grad_norm=1.0, save_steps=1)  # fmt: skip
        return MADPOTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)
    args = MAGRPOConfig(**common, num_turns=1, num_generations=3, rollout_buffer_size=4, train_batch_size=3,
                        lr_scheduler_type="cosine")  # fmt: skip
    return MAGRPOTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)


def run(model_path: str, out: Path, scenario: str) -> dict:
    trainer = build(scenario, model_path, out / scenario)
    grads = []
    for name, optimizer in trainer.gradient_steps.optimizers.items():

        def hook(opt, args, kwargs, name=name):
            flat = [p.grad.reshape(-1) for g in opt.param_groups for p in g["params"] if p.grad is not None]
            grads.append((name, torch.cat(flat).clone()))

        optimizer.register_step_pre_hook(hook)
    trainer.train()
    result = {
        "weights": {k: p.detach().clone() for n in trainer.policy.policies for k, p in trainer.policy.named_trainable_parameters(n)},
        "grads": grads,
        "counters": [trainer.env_step, trainer.updates_seen, trainer.gradient_steps.global_step, trainer.pairs_built
                     if hasattr(trainer, "pairs_built") else 0],
    }  # fmt: skip
    torch.save(result, out / scenario / f"rank{dist.rank()}.pt")
    return result


def main(argv: list[str]) -> None:
    model_path, out, *scenarios = argv
    torch.set_num_threads(1)
    for scenario in scenarios:
        run(model_path, Path(out), scenario)
        dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1:])
