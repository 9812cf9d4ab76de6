"""One timed MADPO run with the public CoMLRL 1.4.3 (started by ``vs_comlrl.py`` with the interpreter of
its own virtual environment, in a fresh process and a scratch working directory).

Set up as the reference notes ran it on CPU: ``wandb_config=None`` (and ``WANDB_MODE=disabled`` in the
environment), ``agent_devices="cpu"``, ``trainer.verbose=False``, one torch thread. Prints one JSON line
with the same fields as ``_vs_comlrl_ours.py``; the engine time is ``_generate_completions`` (prompt
tokenization, ``model.generate``, decoding), the library's per-item, per-agent generation step.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # before the heavy imports: "ready_s" covers imports + constructor

import importlib.metadata  # noqa: E402

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
from comlrl.trainers.preference import MADPOConfig, MADPOTrainer  # noqa: E402

EXPECTED_VERSION = "1.4.3"


def main() -> None:
    args = parse_runner_args()
    job = args.job
    version = importlib.metadata.version("comlrl")
    if version != EXPECTED_VERSION:
        raise SystemExit(
            f"expected the public comlrl {EXPECTED_VERSION}, imported {version} from {comlrl.__file__}"
        )
    torch.set_num_threads(1)
    seed_globals(job["seed"])
    config = MADPOConfig(**madpo_config_values(job), parallel_training="none")
    start = time.perf_counter()
    trainer = MADPOTrainer(**madpo_trainer_values(args.model, job), args=config)
    trainer.verbose = False
    setup_s = time.perf_counter() - start

    eos = trainer.tokenizers[0].eos_token_id
    meter = meter_agents(trainer, eos if isinstance(eos, list) else [eos])
    engine = Timer(trainer, "_generate_completions")
    collect = Timer(trainer, "_build_preference_dataset")
    learn = Timer(trainer, "_train_preference_pairs")
    steps = Timer(trainer, "_update_from_preference_batch")
    ready_s = time.perf_counter() - PROCESS_START

    train_s, profile = timed_train(trainer.train, args.profile)
    pairs = len(collect.last or [])
    emit(
        {
            "side": "theirs",
            "library": f"comlrl {version} (public)",
            "comlrl_file": comlrl.__file__,
            "setup_s": setup_s,
            "ready_s": ready_s,
            "train_s": train_s,
            **phase_times(meter, engine, collect, learn, steps),
            "pairs_built": pairs,
            "pairs_trained": pairs * job["epochs"],
            "updates": int(steps.calls),
            "env_step": int(trainer.env_step),
            "profile": profile,
        }
    )


if __name__ == "__main__":
    main()
