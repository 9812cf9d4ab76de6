"""The comlrl runs ``test_data_parallel.py`` compares: launched with ``accelerate launch --multi_gpu
--num_processes 2`` (two ranks over gloo) and called in the test's own process (one process).

``python data_parallel_job.py MODEL_PATH OUT_DIR SCENARIO...`` runs each scenario into ``OUT_DIR/SCENARIO``
(the trainer's files: rank 0 only) and every rank dumps ``rank{r}.pt``: its final trainable weights, the
gradient each optimizer stepped with (after the sum over ranks and the division by the global rows;
``dapo``: by each agent's global tokens) and its counters.

Scenarios (test-tiny model, 4 items, the same global batches in both launches):

- ``madpo``: MADPO, 2 epochs over the collected pairs in batches of 5 (ranks take 3 and 2 pairs, the last
  batch's 2 pairs 1 and 1), 2 micro-batches per optimizer step, a linear LR schedule with warm-up, clipping,
  and a checkpoint every optimizer step (``save_steps=1``);
- ``magrpo``: MAGRPO, 2 epochs, one rollout buffer of 4 items, update batches of 3 (ranks take 2 and 1 items)
  then 1 (rank 1 has no row and joins with none), per-item groups whitened, a cosine schedule;
- ``magrpo_dapo``: the same with ``loss_type="dapo"`` and completions scored as if they had ended early at
  lengths drawn from their tokens (:func:`uneven_lengths`), so the ranks' token counts are not in
  proportion to their rows: each agent's loss divides by the global batch's tokens;
- ``madpo_iter``: MADPOIter, 2 rounds against the ``history`` comparator (k=1), the ``lambda_decay`` replay
  drawing 7 pairs a round from both rounds' files, per-round policy snapshots, batches of 3 pairs, a
  checkpoint every optimizer step (inside the rounds); on two ranks it then resumes a fresh trainer from the
  first checkpoint of round 2 and dumps that run's weights as ``resumed{r}.pt``;
- ``marlhf_iter``: MARLHFIter, 2 rounds against ``current_copy`` with the reward model as the comparisons'
  oracle once fitted (round 2), each round a reward-model fit (batches of 3 pairs, 2 epochs) then a MAGRPO
  stage (batches of 3 items);
- ``multi_turn``: MAGRPO over 2 turns (K=2, aligned) with early termination, so the items' trees differ in
  size (and so the ranks' rows per turn), update batches of 3 nodes;
- ``maac_multi_turn``: MAAC over 2 turns on 5 items (ranks play 3 and 2 trajectories), early termination,
  advantages whitened over each global update batch of 3 turns;
- ``iac``: IAC with one separate critic per agent (V), one turn, update batches of 3 items then 1 (rank 1 has
  no row), advantages whitened over each global update batch.

Launched with FSDP (``test_data_parallel_fsdp.py``: accelerate's config with ``distributed_type: FSDP``) the
policies train sharded; the recorded gradients are then the whole ones (each shard's gathered at every step),
and every rank also dumps ``shards{r}.json``: per policy parameter, the elements its shard holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from comlrl import distributed as dist
from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.preference import (
    MADPOConfig,
    MADPOIterConfig,
    MADPOIterTrainer,
    MADPOTrainer,
    MARLHFIterConfig,
    MARLHFIterTrainer,
)
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer

ITEMS = [{"prompt": f"Task {i}: write a short plan."} for i in range(4)]
LR = 1e-2


def reward(a, b) -> float:
    return float(len(a[0]) % 5) + 0.5 * float(len(b[0]) % 3)


def transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    return [f"{prompt} Revise: {agent_completions[1 - a][:12]}" for a in range(num_agents)]


def build(scenario: str, model_path: str, out: Path):
    common = dict(output_dir=str(out), max_new_tokens=5, temperature=1.0, top_p=1.0, agent_learning_rate=LR,
                  logging_steps=1, eval_interval=0, disable_tqdm=True, seed=3, num_train_epochs=2)  # fmt: skip
    if scenario == "madpo":
        args = MADPOConfig(**common, preference_num_candidates=4, preference_pairs_per_sample=3, train_batch_size=5,
                           gradient_accumulation_steps=2, lr_scheduler_type="linear", warmup_steps=1,
                           max_grad_norm=1.0, save_steps=1)  # fmt: skip
        return MADPOTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)
    if scenario == "madpo_iter":
        args = MADPOIterConfig(**{**common, "num_train_epochs": 1}, num_iterations=2, comparator_policy="history",
                               preference_num_candidates=2, preference_pairs_per_sample=2, train_batch_size=3,
                               preference_replay_mode="lambda_decay", preference_replay_lambda=0.5,
                               preference_replay_sample_size=7, policy_checkpoint_dir=str(out / "snapshots"),
                               save_steps=1)  # fmt: skip
        return MADPOIterTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)
    if scenario == "marlhf_iter":
        args = MARLHFIterConfig(**{**common, "num_train_epochs": 1}, num_iterations=2, comparator_policy="current_copy",
                                preference_num_candidates=2, preference_pairs_per_sample=2, rl_algorithm="magrpo",
                                num_generations=2, rollout_buffer_size=4, train_batch_size=3,
                                preference_scoring_reward="reward_model", reward_num_train_epochs=2,
                                reward_train_batch_size=3, reward_learning_rate=1e-3, reward_eval_fraction=0.2)  # fmt: skip
        return MARLHFIterTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)
    if scenario == "multi_turn":
        args = MAGRPOConfig(**{**common, "num_train_epochs": 1}, num_turns=2, num_generations=2, rollout_buffer_size=4,
                            train_batch_size=3, early_termination_threshold=3.0)  # fmt: skip
        return MAGRPOTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args,
                             external_transition=transition)  # fmt: skip
    if scenario == "maac_multi_turn":
        args = MAACConfig(**{**common, "num_train_epochs": 1}, num_turns=2, num_generations=1, rollout_buffer_size=5,
                          train_batch_size=3, early_termination_threshold=3.0, advantage_normalization=True)  # fmt: skip
        return MAACTrainer(agent_model=model_path, reward_func=reward, train_dataset=[*ITEMS, {"prompt": "Task 4: add."}],
                           args=args, external_transition=transition)  # fmt: skip
    if scenario == "iac":
        args = IACConfig(**{**common, "num_train_epochs": 1}, num_turns=1, num_generations=2, rollout_buffer_size=4,
                         train_batch_size=3, use_separate_critic=True, critic_type="v", critic_model_name=model_path,
                         critic_learning_rate=1e-3, advantage_normalization=True)  # fmt: skip
        return IACTrainer(agent_model=model_path, reward_func=reward, train_dataset=ITEMS, args=args)
    args = MAGRPOConfig(**common, num_turns=1, num_generations=3, rollout_buffer_size=4, train_batch_size=3,
                        lr_scheduler_type="cosine", **({"loss_type": "dapo"} if scenario == "magrpo_dapo" else {}))  # fmt: skip
    return MAGRPOTrainer(agent_model=model_path, num_agents=2, reward_func=reward, train_dataset=ITEMS, args=args)


@contextmanager
def uneven_lengths(on: bool) -> Iterator[None]:
    """Completions scored as if they had ended early, at a length drawn from their own tokens (1 to all)."""
    from comlrl.trainers.online_rl import policy_learning

    score = policy_learning._completion_logprobs

    def shortened(model, prompts, completions, pad, args):
        logprobs, mask = score(model, prompts, completions, pad, args)
        keep = torch.tensor([1 + sum(int(t) for t in c) % mask.shape[1] for c in completions])
        return logprobs, mask * (torch.arange(mask.shape[1])[None, :] < keep[:, None]).to(mask.dtype)

    policy_learning._completion_logprobs = shortened if on else score
    try:
        yield
    finally:
        policy_learning._completion_logprobs = score


def record_gradients(trainer) -> list:
    """The gradient every optimizer steps with, per optimizer step, flattened (under FSDP the whole gradient,
    gathered from the shards: every rank steps in lockstep, so the gathers match)."""
    from torch.distributed.tensor import DTensor

    seen = []
    for name, optimizer in trainer.gradient_steps.optimizers.items():

        def hook(opt, args, kwargs, name=name):
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            whole = [(g.full_tensor() if isinstance(g, DTensor) else g).reshape(-1) for g in grads]
            seen.append((name, torch.cat(whole).clone()))

        optimizer.register_step_pre_hook(hook)
    return seen


def run(model_path: str, out: Path, scenario: str) -> dict:
    trainer = build(scenario, model_path, out / scenario)
    grads = record_gradients(trainer)
    with uneven_lengths(scenario == "magrpo_dapo"):
        trainer.train()
    result = {
        "weights": {k: p.detach().clone() for n in trainer.policy.policies for k, p in trainer.policy.named_trainable_parameters(n)},
        "grads": grads,
        "counters": [trainer.env_step, trainer.updates_seen, trainer.gradient_steps.global_step, trainer.pairs_built
                     if hasattr(trainer, "pairs_built") else 0],
    }  # fmt: skip
    if getattr(trainer, "reward_model", None) is not None:
        result["reward_head"] = trainer.reward_model.head.weight.detach().clone()
    torch.save(result, out / scenario / f"rank{dist.rank()}.pt")
    if getattr(trainer, "sharded", None) is not None:  # FSDP: what this rank's shards hold
        shards = {name: [p.to_local().numel(), p.numel()] for m in trainer.sharded.models
                  for name, p in m.module.named_parameters()}  # fmt: skip
        (out / scenario / f"shards{dist.rank()}.json").write_text(json.dumps(shards))
    if scenario == "madpo_iter" and dist.world_size() > 1:
        resumed = build(scenario, model_path, out / "madpo_iter_resumed")
        resumed.train(resume_from_checkpoint=first_checkpoint_inside_round_2(out / scenario))
        weights = {k: p.detach().clone() for n in resumed.policy.policies for k, p in resumed.policy.named_trainable_parameters(n)}
        torch.save(weights, out / "madpo_iter_resumed" / f"resumed{dist.rank()}.pt")
    return result


def first_checkpoint_inside_round_2(folder: Path) -> Path:
    """The earliest ``save_steps`` checkpoint written while round 2 learned (its pairs drawn, epochs going on)."""
    for path in sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])):
        cursor = json.loads((path / "trainer_state.json").read_text())["data_cursor"]
        if cursor.get("rounds_done") == 1 and cursor.get("round_pairs"):
            return path
    raise AssertionError(f"no checkpoint inside round 2 in {folder}")


def launch(model_path: str, out: Path, scenarios: list[str]) -> None:
    """Run ``scenarios`` into ``out`` on two ranks (``accelerate launch --multi_gpu --num_processes 2``)."""
    from tests.helpers.two_ranks import launch_two_ranks

    launch_two_ranks(Path(__file__), [model_path, str(out), *scenarios])


def one_and_two(root: Path, model_path: str, scenarios: list[str]) -> tuple[Path, Path]:
    """``(one-process folder, two-rank folder)`` under ``root``, each holding a folder per scenario: the two-rank
    launch first, then the same scenarios in this process (its torch thread count restored after)."""
    from tests.helpers.two_ranks import in_this_process

    one, two = root / "one", root / "two"
    launch(model_path, two, scenarios)
    in_this_process(main, [model_path, str(one), *scenarios])
    return one, two


def load(folder: Path, rank: int = 0) -> dict:
    """What rank ``rank`` dumped after its run."""
    return torch.load(folder / f"rank{rank}.pt")

def main(argv: list[str]) -> None:
    model_path, out, *scenarios = argv
    torch.set_num_threads(1)
    for scenario in scenarios:
        run(model_path, Path(out), scenario)
        dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1:])
