"""The runs a crash test starts, kills and resumes: ``python -m tests.reliability.crash_child KIND ...``.

KIND is

- ``pipeline ARGV...``: ``pettingllms.cli.main(ARGV)`` (e.g. ``train plan_path/L1 key=value ... --resume``),
  what ``python -m pettingllms`` runs, with a reward bonus per candidate (:func:`add_reward_bonus`);
- ``madpo OUT MODEL`` / ``marlhf OUT MODEL`` (``--resume`` to continue): a tiny :class:`MADPOIterTrainer` /
  :class:`MARLHFIterTrainer` run (:func:`build_trainer`) that checkpoints every round into ``OUT/ck`` and
  writes its final policies to ``OUT/final`` and its evaluation to ``OUT/eval.json``;
- ``serve``: a fork server. Importing torch, transformers and both packages takes 5-10 s of CPU; the server
  pays it once, then forks one process per JSON command line on stdin (``{"argv": [...], "env": {...},
  "log": path}``), answers ``{"pid": N}`` when the run starts and ``{"status": S}`` when it ends (the exit
  code, or minus the signal that ended it). Each run is a separate process that can be SIGKILLed.

With ``CRASH_MARKERS=<file>`` set, phase hooks (test code, installed here, never in the product) append one
line per event to that file: ``start <phase>`` / ``end <phase>`` around each rollout, update, checkpoint
write and resume load (:data:`PHASES`), and ``saved`` after each complete checkpoint. With
``CRASH_WINDOW=<phase>:<k>`` the k-th ``<phase>`` of the process lingers ``CRASH_PAD`` seconds (default 0.4)
before its ``end``: a parent that sees that ``start`` and kills within the pad kills the run inside the
phase. Writes are unbuffered ``os.write`` calls, so a SIGKILL loses none. The hooks change timing only:
every file a run writes is the same with or without them.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

PHASES = ("rollout", "update", "checkpoint", "resume")


class Markers:
    """The event log of one process and the kill window (see the module docstring)."""

    def __init__(self, path: str, window: str, pad: float) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        phase, _, k = window.partition(":")
        self.window = (phase, int(k)) if window else None
        self.pad = pad
        self.seen: Counter = Counter()

    def mark(self, event: str) -> None:
        os.write(self.fd, f"{event}\n".encode())

    def wrap(self, owner, name: str, phase: str, when=None) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def hooked(*args, **kwargs):
            if when is not None and not when(*args, **kwargs):
                return original(*args, **kwargs)
            self.seen[phase] += 1
            self.mark(f"start {phase}")
            out = original(*args, **kwargs)
            if self.window == (phase, self.seen[phase]):
                time.sleep(self.pad)  # the kill window: the phase's work is done, its caller not yet back
            self.mark(f"end {phase}")
            return out

        setattr(owner, name, hooked)


def install_hooks(kind: str, markers: Markers) -> None:
    """Phase markers (see the module docstring) for a ``pipeline`` or a comlrl trainer run."""
    from comlrl.policy import MultiAgentPolicy
    from comlrl.trainers.core.trainer_core import TrainerCore

    if kind == "pipeline":
        from pettingllms.trainer.at_grpo import ATGRPOTrainer

        markers.wrap(ATGRPOTrainer, "generate_and_score", "rollout")
        markers.wrap(ATGRPOTrainer, "_update_policy", "update")
    else:
        from comlrl.trainers.core.trainer import MultiAgentTrainerBase

        markers.wrap(MultiAgentTrainerBase, "sample_items", "rollout",
                     when=lambda self, *a, stream="", **k: stream != "eval")
        markers.wrap(MultiAgentTrainerBase, "step_optimizers", "update")
    # A checkpoint's policies are written into its hidden scratch folder: a kill in the pad leaves the
    # half-built `.tmp-checkpoint-*` folder behind.
    markers.wrap(MultiAgentPolicy, "save", "checkpoint",
                 when=lambda self, directory: Path(directory).name.startswith(".tmp-checkpoint-"))
    markers.wrap(MultiAgentPolicy, "load_weights_", "resume")
    save = TrainerCore.save_checkpoint

    @functools.wraps(save)
    def saved(self, *args, **kwargs):
        out = save(self, *args, **kwargs)
        markers.mark("saved")
        return out

    TrainerCore.save_checkpoint = saved


def add_reward_bonus() -> None:
    """The test-tiny model never writes a parseable Plan-Path answer, so every candidate earns the same
    reward and AT-GRPO's advantages are all 0. As in ``tests/pettingllms/test_at_grpo_trainer.py``, add 0.5
    per candidate index to each sample's reward: the updates then depend on the sampled data."""
    from pettingllms.trainer.at_grpo import ATGRPOTrainer
    from tests.helpers.bonus_trainer import add_candidate_bonus

    original = ATGRPOTrainer.generate_and_score

    @functools.wraps(original)
    def with_bonus(self, problem_ids, step):
        return add_candidate_bonus(original(self, problem_ids, step))

    ATGRPOTrainer.generate_and_score = with_bonus


# ---------------------------------------------------------------------------------------- comlrl trainers
def build_trainer(kind: str, out: Path, model: str):
    """The tiny iterative trainer of ``kind`` (``madpo`` or ``marlhf``): 3 rounds over 3 prompts."""
    from comlrl.trainers.preference import (
        MADPOIterConfig,
        MADPOIterTrainer,
        MARLHFIterConfig,
        MARLHFIterTrainer,
    )
    from tests.helpers.trainer_helpers import madpo_values, plan_items, varied_reward

    items = plan_items(3)
    if kind == "madpo":
        values = madpo_values(out, num_iterations=3, preference_num_candidates=3, max_new_tokens=5,
                              eval_num_samples=3, seed=11, preference_replay_mode="lambda_decay",
                              preference_replay_lambda=0.7)
        return MADPOIterTrainer(agent_model=model, num_agents=2, reward_func=varied_reward, train_dataset=items,
                                eval_dataset=items, args=MADPOIterConfig(**values))
    args = MARLHFIterConfig(
        output_dir=str(out), num_iterations=3, reward_model_name=model, comparator_num_candidates=3,
        reward_num_train_epochs=1, max_new_tokens=4, temperature=1.0, top_p=1.0, agent_learning_rate=1e-2,
        reward_learning_rate=1e-3, reward_train_batch_size=2, reward_eval_fraction=0.34, num_generations=2,
        num_train_epochs=1, rollout_buffer_size=3, preference_num_candidates=3, preference_pairs_per_sample=2,
        logging_steps=1, eval_interval=0, eval_num_samples=3, disable_tqdm=True, seed=13,
    )
    return MARLHFIterTrainer(agent_model=model, num_agents=2, reward_func=varied_reward, train_dataset=items,
                             eval_dataset=items, args=args)


def run_trainer(kind: str, out: Path, model: str, resume: bool) -> None:
    """Train (or continue from the latest checkpoint in ``out/ck``), then save and evaluate."""
    from comlrl.atomic_io import atomic_write_json

    trainer = build_trainer(kind, out, model)
    trainer.train(resume_from_checkpoint=True if resume else None, checkpoint_dir=out / "ck")
    trainer.save_model(out / "final")
    atomic_write_json(out / "eval.json", trainer.evaluate())


def main(argv: list[str]) -> int:
    import torch

    torch.set_num_threads(1)
    kind, rest = argv[0], argv[1:]
    if kind == "serve":
        return serve()
    if os.environ.get("CRASH_MARKERS"):
        markers = Markers(os.environ["CRASH_MARKERS"], os.environ.get("CRASH_WINDOW", ""),
                          float(os.environ.get("CRASH_PAD", "0.4")))
        install_hooks(kind, markers)
    if kind == "pipeline":
        from pettingllms.cli import main as cli_main

        add_reward_bonus()
        return cli_main(rest)
    if kind in ("madpo", "marlhf"):
        run_trainer(kind, Path(rest[0]), rest[1], resume="--resume" in rest[2:])
        return 0
    raise SystemExit(f"crash_child: unknown kind {kind!r} (pipeline, madpo, marlhf, serve)")


# ---------------------------------------------------------------------------------------- fork server
def _preload() -> None:
    """Import what every run imports, and nothing more: no torch op runs before a fork."""
    import matplotlib
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM  # noqa: F401

    import comlrl.trainers.preference  # noqa: F401
    import pettingllms.cli  # noqa: F401
    import pettingllms.pipeline  # noqa: F401
    import pettingllms.trainer.at_grpo  # noqa: F401

    transformers.utils.logging.disable_progress_bar()
    matplotlib.use("Agg", force=True)
    __import__("matplotlib.pyplot")  # what a finished pipeline draws its plots with


def _child(command: dict) -> int:
    fd = os.open(command["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    os.environ.update(command.get("env", {}))
    try:
        code = main(list(command["argv"]))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code or 0)


def serve() -> int:
    """The fork server loop (see the module docstring); ends at EOF on stdin."""
    _preload()
    out = sys.stdout
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        command = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os._exit(_child(command))
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        out.write(json.dumps({"status": code}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
