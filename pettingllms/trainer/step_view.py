"""What a data-parallel AT-GRPO / GRPO step's metrics are computed over, and its transcripts: every rank's part
of the step gathered into the view one process has of it (:func:`gather_step`, :class:`StepView`), and the
transcript selector that stands in for the engine's writer on every rank (rank 0 writes every rank's records).

The collectives are :mod:`comlrl.distributed`'s (shared with comlrl's trainers): launch any script that builds
an :class:`~pettingllms.trainer.at_grpo.ATGRPOTrainer` or calls :func:`~pettingllms.trainer.sft.sft_warm_start`
with::

    accelerate launch --multi_gpu --num_processes N --num_machines 1 --mixed_precision no \\
        --dynamo_backend no SCRIPT        # or: torchrun --standalone --nproc_per_node N SCRIPT

(on a machine without GPUs this gives N CPU processes over gloo; accelerate's ``--cpu`` silently runs
one process). The trainers call :func:`comlrl.distributed.init_distributed`, which joins the process group the
launcher's environment variables (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) describe. With a
world size above 1:

- **sharded**: each rank takes a contiguous slice (:func:`comlrl.distributed.shard`) of a step's problems
  (AT-GRPO: the ids :func:`~pettingllms.trainer.problems.draw_problem_ids` draws, the same global ids and seeds
  as one process) or of the demonstrations (SFT), and rolls out / scores only those. Groups are per problem,
  so advantages stay local;
- **reduced**: per optimizer step, the completion-token count (``num_items_in_batch``, the ``dapo`` /
  SFT normaliser) is summed over ranks, and after the local backward passes the trainable gradients (and,
  for the row-mean loss types, the rows the step divides by) are summed
  (:func:`comlrl.trainers.core.data_parallel.attach_engine`) before clipping, so one optimizer step is the
  one-process step over the same global rows (up to float summation order). The number of optimizer steps is
  agreed with a max, so a rank whose shard holds fewer (or no) rows of a policy still joins every collective,
  contributing zero gradients; a non-finite loss on any rank skips the step on every rank;
- **gathered**: the step's samples (slimmed of prompts and log-probs), episode outcomes, counts and the
  update statistics (:func:`comlrl.distributed.gather_objects`), so every rank computes, and rank 0 logs, the
  metrics one process computes over the same rows (not an average of per-rank averages);
- **written by rank 0 only**: ``metrics.jsonl`` (ranks > 0 log into a :class:`comlrl.distributed.RankMetricsLogger`
  that writes nothing), transcripts, checkpoints and ``save_model`` (the shared rank-0 path of
  :class:`~comlrl.trainers.core.trainer_core.TrainerCore`); every rank enters those calls and waits for rank 0
  at a barrier. A checkpoint records its ``world_size``; resuming it on a different world size is an error
  naming both.

Why summed gradients instead of DDP: the update walks its own micro-batches per policy (LoRA adapters
activated one at a time, a rank may have no rows of a policy), which DDP's per-forward hooks and its
equal-call-count assumption do not fit; one flat all-reduce per optimizer step is the same traffic.

Models that do not fit one device: every rank holds a whole copy of each policy for its rollouts; with FSDP
selected (accelerate's ``distributed_type: FSDP`` with ``fsdp_version: 2``, or ``ACCELERATE_USE_FSDP=true``
under torchrun) the updates train sharded copies instead and FSDP sums the gradients
(:mod:`pettingllms.trainer.fsdp`). A multi-node launch is not tested (no GPU, one machine here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from comlrl.distributed import gather_objects

__all__ = ["StepView", "TranscriptSelector", "gather_step"]


class TranscriptSelector:
    """Stands in for the engine's transcript writer on every rank: the engine still selects a rollout's
    records (``batch.transcripts``), nothing is written; rank 0 writes every rank's records
    (:func:`gather_step`)."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def select(self, samples: Iterable[Any], step: int) -> list[dict[str, Any]]:
        return self.writer.select(samples, step)

    def write(self, records: list[dict[str, Any]]) -> None:
        """Nothing: rank 0 writes the gathered records."""

    def truncate_after(self, step: int) -> None:
        """Nothing: rank 0's trainer truncates the file on resume."""


@dataclass
class StepView:
    """What an AT-GRPO step's metrics are computed over: the whole step's finite-reward samples and counts
    (every rank's, under data parallelism; this process's otherwise)."""

    samples: list[Any]
    success_rate: float
    raw_samples: int
    dropped_samples: int
    dropped_groups: int
    dropped_what: str
    generate_calls: int
    sampled_policies: set[str]
    trained: set[str]
    continuation_completions: int = 0  # completions of credit continuations (no samples)

    @classmethod
    def local(cls, batch: Any, samples: list[Any], tensors: Mapping[str, Any], dropped_groups: int,
              dropped_what: str) -> StepView:
        """The view of a single process: its own batch."""
        return cls(
            samples=samples,
            success_rate=batch.success_rate,
            raw_samples=len(batch.samples),
            dropped_samples=batch.dropped_samples + len(batch.samples) - len(samples),
            dropped_groups=dropped_groups,
            dropped_what=dropped_what,
            generate_calls=batch.generate_calls,
            sampled_policies={s.policy for s in batch.samples},
            trained=set(tensors),
            continuation_completions=batch.continuation_completions,
        )


def _slim(sample: Any) -> Any:
    # What the metrics read, without the prompt, text and log-probs (kept small on the wire).
    return dataclasses.replace(sample, prompt=None, response="", prompt_ids=[], logprobs=[], action=None, feedback="")


def gather_step(batch: Any, samples: list[Any], tensors: Mapping[str, Any], dropped_groups: int,
                dropped_what: str, transcripts: Any = None) -> StepView:
    """Every rank's part of one AT-GRPO step, gathered into the view one process would have of the whole
    step (success over all kept episodes, counts summed, samples concatenated in rank order); rank 0's
    ``transcripts`` writer, when given, writes every rank's selected transcript records in decision order."""
    mine = {
        "samples": [_slim(s) for s in samples],
        "successes": [bool(o.success) for o in batch.outcomes if not o.dropped],
        "raw": len(batch.samples),
        "dropped": batch.dropped_samples + len(batch.samples) - len(samples),
        "groups": dropped_groups,
        "what": dropped_what,
        "calls": batch.generate_calls,
        "continuations": batch.continuation_completions,
        "sampled": sorted({s.policy for s in batch.samples}),
        "trained": sorted(tensors),
        "records": batch.transcripts,
    }
    parts = gather_objects(mine)
    successes = [ok for part in parts for ok in part["successes"]]
    if transcripts is not None:
        records = [r for part in parts for r in part["records"]]
        transcripts.write(sorted(records, key=lambda r: (r["problem_id"], r["turn"], r["agent_index"], r["candidate"])))
    return StepView(
        samples=[s for part in parts for s in part["samples"]],
        success_rate=sum(successes) / len(successes) if successes else 0.0,
        raw_samples=sum(part["raw"] for part in parts),
        dropped_samples=sum(part["dropped"] for part in parts),
        dropped_groups=sum(part["groups"] for part in parts),
        dropped_what="; ".join(part["what"] for part in parts if part["what"]),
        generate_calls=sum(part["calls"] for part in parts),
        sampled_policies={name for part in parts for name in part["sampled"]},
        trained={name for part in parts for name in part["trained"]},
        continuation_completions=sum(part["continuations"] for part in parts),
    )
