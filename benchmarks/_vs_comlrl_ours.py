"""One timed MADPO run with this project's ``comlrl`` (started by ``vs_comlrl.py`` in a fresh process).

Prints one JSON line: ``train()`` wall time, the time and new tokens of every ``model.generate`` call, the
rollout engine's time (``backend.generate``: prompt rendering, batching and completion building around
``model.generate``), pair-collection and learning phases, pairs built and updates done.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the heavy imports: "ready_s" covers imports + constructor

import tempfile  # noqa: E402

import torch  # noqa: E402
from _vs_comlrl_common import (  # noqa: E402
    GenerateMeter,
    Timer,
    emit,
    helper_prompt,
    job_items,
    joint_reward,
    parse_runner_args,
    seed_globals,
    timed_train,
    writer_prompt,
)

import comlrl  # noqa: E402
from comlrl.rollout.hf import eos_token_ids  # noqa: E402
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer  # noqa: E402


def main() -> None:
    args = parse_runner_args()
    job = args.job
    torch.set_num_threads(1)
    seed_globals(job["seed"])
    with tempfile.TemporaryDirectory(prefix="vs-comlrl-ours-") as out:
        config = MADPOConfig(
            num_agents=2,
            num_turns=1,
            joint_mode="aligned",
            agent_devices="cpu",
            num_train_epochs=job["epochs"],
            agent_learning_rate=job["lr"],
            dpo_beta=job["beta"],
            max_new_tokens=job["max_new_tokens"],
            temperature=job["temperature"],
            top_p=job["top_p"],
            top_k=job["top_k"],
            preference_num_candidates=job["candidates"],
            preference_pairs_per_sample=job["pairs_per_item"],
            pair_selection="reward_gap",
            train_batch_size=job["train_batch_size"],
            eval_interval=0,
            exclude_last_completion_token=True,  # the public scorer's behaviour (parity)
            seed=job["seed"],
            output_dir=out,
            report_to="none",
            disable_tqdm=True,
        )
        start = time.perf_counter()
        trainer = MADPOTrainer(
            agent_model=args.model,
            num_agents=2,
            model_config={"torch_dtype": "float32", "attn_implementation": "sdpa"},
            train_dataset=job_items(job["items"]),
            reward_func=joint_reward,
            formatters=[writer_prompt, helper_prompt],
            wandb_config=None,
            args=config,
        )
        trainer.verbose = False
        setup_s = time.perf_counter() - start

        tokenizer = trainer.tokenizers[0]
        meter = GenerateMeter(tokenizer.pad_token_id, eos_token_ids(trainer.agents[0], tokenizer))
        for model in trainer.agents:
            meter.wrap(model)
        engine = Timer(trainer.backend, "generate")
        collect = Timer(trainer, "collect_pairs")
        learn = Timer(trainer, "learn_from_pairs")
        steps = Timer(trainer, "training_step")
        ready_s = time.perf_counter() - PROCESS_START

        train_s, profile = timed_train(trainer.train, args.profile)
        emit(
            {
                "side": "ours",
                "library": "comlrl (this project)",
                "comlrl_file": comlrl.__file__,
                "setup_s": setup_s,
                "ready_s": ready_s,
                "train_s": train_s,
                **meter.as_dict(),
                "engine_s": engine.seconds,
                "engine_calls": engine.calls,
                "collect_s": collect.seconds,
                "learn_s": learn.seconds,
                "update_s": steps.seconds,
                "pairs_built": int(trainer.pairs_built),
                "pairs_trained": len(collect.last or []) * job["epochs"],
                "updates": int(trainer.updates_seen),
                "env_step": int(trainer.env_step),
                "profile": profile,
            }
        )


if __name__ == "__main__":
    main()
