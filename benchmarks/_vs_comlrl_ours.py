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
    Timer,
    emit,
    madpo_config_values,
    madpo_trainer_values,
    meter_agents,
    parse_runner_args,
    phase_times,
    seed_globals,
    timed_train,
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
            **madpo_config_values(job),
            exclude_last_completion_token=True,  # the public scorer's behaviour (parity)
            seed=job["seed"],
            output_dir=out,
            report_to="none",
            disable_tqdm=True,
        )
        start = time.perf_counter()
        trainer = MADPOTrainer(**madpo_trainer_values(args.model, job), args=config)
        trainer.verbose = False
        setup_s = time.perf_counter() - start

        meter = meter_agents(trainer, eos_token_ids(trainer.agents[0], trainer.tokenizers[0]))
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
                **phase_times(meter, engine, collect, learn, steps),
                "pairs_built": int(trainer.pairs_built),
                "pairs_trained": len(collect.last or []) * job["epochs"],
                "updates": int(trainer.updates_seen),
                "env_step": int(trainer.env_step),
                "profile": profile,
            }
        )


if __name__ == "__main__":
    main()
