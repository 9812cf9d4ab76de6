"""The data-parallel pipeline runs ``test_data_parallel_pipeline.py`` checks: launched with ``accelerate
launch --multi_gpu --num_processes 2`` (two ranks over gloo on CPU); the test runs the one-process
reference itself with :data:`OVERRIDES`.

``python data_parallel_pipeline_job.py MODEL_PATH OUT_DIR`` runs, on every rank, through the command line
(``pettingllms train plan_path/L1 ...``, :data:`OVERRIDES`):

- ``OUT_DIR/full``: the whole pipeline (sft -> eval_before -> at_grpo, 2 steps -> eval; :data:`OVERRIDES`);
- ``OUT_DIR/resumed``: the same pipeline interrupted (KeyboardInterrupt on every rank) right after AT-GRPO's
  step 1 with ``checkpoint-1`` on disk, then continued with ``--resume``.

The test-tiny model never writes a parseable answer, so every reward is -1 and AT-GRPO's groups would carry
no gradient: :func:`with_candidate_bonus` adds ``0.5 * candidate`` to each sample's group reward (as
``data_parallel_job.py`` does), here and in the test's reference, so the update is exercised.

What each rank printed to stdout goes to ``OUT_DIR/printed-<name>-rank<r>.txt`` (``full``,
``interrupted``, ``resumed``), the commands' exit codes and each run's :class:`~pettingllms.pipeline.PipelineResult`
(stage metrics, success before and after, plot names; by run folder) to ``OUT_DIR/result-rank<r>.json``. On a
rank > 0 an audit hook (:func:`sys.addaudithook`) records every file opened for writing, folder made,
rename, truncation or removal under ``OUT_DIR`` while the runs go; the list goes to
``OUT_DIR/writes-rank<r>.json`` (rank 0 alone may write the run folders).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

from tests.helpers.bonus_trainer import add_candidate_bonus

# The tiny pipeline of test_pipeline.py (test-tiny model, Plan-Path 4x4 with one turn, a warm start on 12
# problems, AT-GRPO 2 steps of 2 problems, one per rank, with a checkpoint each, eval on 3 instances), cut so
# that two ranks compute what one process does up to float summation order:
# - the warm start in batches of 1: each batch's row sits on one rank, the other adds zero gradients, so
#   every step is bitwise the one-process step (with batches of 2, summation-order differences grow through
#   AdamW's 24 steps at lr 1e-2 to 7e-5 in the weights and 1e-3 in AT-GRPO's gradient norm, measured;
#   test_data_parallel.py checks the sharded warm start itself);
# - AT-GRPO in micro-batches of one row and one optimizer step per training step (16 >= the 8 rows), so the
#   per-micro-batch diagnostics average over the same micro-batches in both runs.
OVERRIDES = [
    "env.max_turns=1",
    "rollout.num_generations=2",
    "rollout.max_completion_length=16",
    "rollout.transcripts_rate=0.0",
    "sft.num_problems=12",
    "sft.num_train_epochs=2",
    "sft.per_device_train_batch_size=1",
    "sft.learning_rate=1e-2",
    "at_grpo.max_steps=2",
    "at_grpo.problems_per_step=2",
    "at_grpo.per_device_train_batch_size=1",
    "at_grpo.gradient_accumulation_steps=16",
    "at_grpo.save_steps=1",
    "at_grpo.learning_rate=1e-3",
    "eval.num_instances=3",
    "run.progress=false",
]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATH_EVENTS = ("os.mkdir", "os.remove", "os.rmdir", "os.truncate", "shutil.rmtree", "os.symlink", "os.link")


def arguments(model_path: str, run_dir: Path, *extra: str) -> list[str]:
    """``pettingllms train`` arguments of the tiny pipeline into ``run_dir``."""
    return ["train", "plan_path/L1", f"model.name={model_path}", f"run.output_dir={run_dir}", *OVERRIDES, *extra]


def with_candidate_bonus(generate_and_score):
    """``ATGRPOTrainer.generate_and_score`` with ``0.5 * candidate`` added to each sample's group reward."""

    def scored(self, problem_ids, step):
        return add_candidate_bonus(generate_and_score(self, problem_ids, step))

    return scored


class WriteRecorder:
    """An audit hook recording writes under ``root`` while ``active``."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.active = True
        self.writes: list[str] = []

    def _inside(self, path) -> str | None:
        if isinstance(path, int) or path is None:
            return None  # a file descriptor: its opening was recorded
        path = os.path.realpath(os.fsdecode(path))
        return path if path == self.root or path.startswith(self.root + os.sep) else None

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            paths = [path] if writes else []
        elif event == "os.rename":  # os.rename and os.replace
            paths = list(args[:2])
        elif event in _PATH_EVENTS:
            paths = [args[0]]
        else:
            return
        for path in paths:
            inside = self._inside(path)
            if inside is not None:
                self.writes.append(f"{event} {inside}")


def main(argv: list[str]) -> None:
    import torch

    from comlrl import distributed as dist
    from pettingllms.cli import main as cli
    from pettingllms.pipeline import Pipeline
    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    model_path, out = argv[0], Path(argv[1])
    torch.set_num_threads(1)
    dist.init_distributed()
    rank = dist.rank()
    recorder = WriteRecorder(out)
    if rank > 0:
        sys.addaudithook(recorder)

    codes: dict[str, int] = {}
    printed: dict[str, str] = {}
    results: dict[str, dict] = {}
    run = Pipeline.run

    def recording_run(self):
        result = run(self)
        results[self.run_dir.name] = {
            "stages": result.stages, "before": result.success_before, "after": result.success_after,
            "plots": [p.name for p in result.plots],
        }
        return result

    Pipeline.run = recording_run
    ATGRPOTrainer.generate_and_score = with_candidate_bonus(ATGRPOTrainer.generate_and_score)

    def train(name: str, run_dir: Path, *extra: str) -> None:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            codes[name] = cli(arguments(model_path, run_dir, *extra))
        printed[name] = buffer.getvalue()

    train("full", out / "full")
    step = ATGRPOTrainer.step

    def interrupted_step(self):
        metrics = step(self)
        if self.global_step == 1:  # checkpoint-1 is on disk; every rank stops here
            raise KeyboardInterrupt
        return metrics

    ATGRPOTrainer.step = interrupted_step
    try:
        train("interrupted", out / "resumed")
    finally:
        ATGRPOTrainer.step = step
    train("resumed", out / "resumed", "--resume")
    dist.barrier()
    recorder.active = False

    for name, text in printed.items():
        (out / f"printed-{name}-rank{rank}.txt").write_text(text)
    (out / f"result-rank{rank}.json").write_text(json.dumps({"codes": codes, "results": results}))
    if rank > 0:
        (out / f"writes-rank{rank}.json").write_text(json.dumps(recorder.writes))


if __name__ == "__main__":
    main(sys.argv[1:])
