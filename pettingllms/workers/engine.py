"""The driver's rollout engine under ``run.backend=ray``: a step's problems sharded over EnvWorkers.

:class:`WorkerEngine` has the :class:`~pettingllms.execution.RolloutEngine` interface the trainer uses
(``rollout`` / ``evaluate`` and their async forms, ``state_dict``, ``router``, ``agents``, ``config``,
``transcripts``). A call splits the problem ids into contiguous shards (:func:`shard_problem_ids`), one per
EnvWorker, runs them concurrently and merges the results (:func:`merge_worker_batches`) into the batch a
one-process engine returns for the same ids: the same samples (token ids, rewards, selections) in the same
order. Generation batches are per shard, so log-probs may differ from the one-process ones by float
rounding (the HF backend's batch-independence holds for the sampled ids, and to ~1e-5 for log-probs).
``generate_calls`` counts the calls really made: one per policy per decision point per EnvWorker.

The run's failure budget lives here: each worker reports what its engine counted for the call and the
driver's budget adds it, stopping the run past ``max_infra_failure_rate`` as one engine would. Transcripts
are selected and written here from the merged samples.

A worker that dies: an EnvWorker is restarted by Ray and its call retried (a shard's rollout depends only
on its ids, the step and the weights, so the retry returns the same batch); anything else (a dead
RolloutWorker, or a second death) stops the run with :class:`WorkerFailure` naming the worker and how to
resume from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from pettingllms.execution.engine import RolloutEngine, check_problem_ids
from pettingllms.execution.independent import EvalResult, summarize_eval
from pettingllms.execution.samples import RolloutBatch, Sample

__all__ = ["WorkerEngine", "WorkerFailure", "merge_worker_batches", "shard_problem_ids"]

RESUME_HINT = "the run stops here; resume it from its last checkpoint (`run.resume=true`, or `pettingllms train ... --resume`)"


class WorkerFailure(RuntimeError):
    """A Ray worker died or failed outside the environment's own failure handling."""


def shard_problem_ids(problem_ids: Sequence[int], num_workers: int) -> list[tuple[int, list[int]]]:
    """``(offset, ids)`` per worker: contiguous shards in order, sizes differing by at most one; fewer
    shards than workers when there are fewer ids (no worker gets an empty call)."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"`num_workers` must be an integer >= 1, got {num_workers!r}")
    ids = list(problem_ids)
    size, extra = divmod(len(ids), num_workers)
    shards, start = [], 0
    for worker in range(num_workers):
        stop = start + size + (1 if worker < extra else 0)
        if stop > start:
            shards.append((start, ids[start:stop]))
        start = stop
    return shards


def merge_worker_batches(
    parts: Sequence[tuple[int, RolloutBatch]], *, step: int, mode: str, trajectories_per_problem: int
) -> RolloutBatch:
    """One batch from the shards' batches ``(offset, batch)``, as one engine would have returned it.

    ``env_index`` is made global (tree: offset + index; independent: offset * k + index); samples are put
    in one engine's order (tree: decision point, problem, candidate; independent: the decision point where
    the trajectory ended, then trajectory, then turn); outcomes keep shard order (every consumer of them
    is order-free); counts add up, timings take the slowest worker (they ran at the same time)."""
    merged = RolloutBatch(step=step, mode=mode, samples=[], outcomes=[])
    for offset, batch in parts:
        if batch.mode != mode:
            raise ValueError(f"a worker's batch is in mode {batch.mode!r}, expected {mode!r}")
        shift = offset if mode == "tree" else offset * trajectories_per_problem
        for sample in batch.samples:
            sample.env_index += shift
        merged.samples.extend(batch.samples)
        merged.outcomes.extend(batch.outcomes)
        merged.generate_calls += batch.generate_calls
        merged.calls_per_decision_point.extend(batch.calls_per_decision_point)
        merged.dropped_samples += batch.dropped_samples
        merged.continuation_completions += batch.continuation_completions
        for label, count in batch.failures.items():
            merged.failures[label] = merged.failures.get(label, 0) + count
        for key, seconds in batch.timings.items():
            merged.timings[key] = max(merged.timings.get(key, 0.0), seconds)
        merged.notices.extend(n for n in batch.notices if n not in merged.notices)
    merged.samples = _engine_order(merged.samples, mode)
    return merged


def _engine_order(samples: list[Sample], mode: str) -> list[Sample]:
    if mode == "tree":
        return sorted(samples, key=lambda s: (s.turn, s.agent_index, s.env_index, s.candidate))
    episodes: dict[int, list[Sample]] = {}
    for sample in samples:  # an episode's samples are contiguous and in turn order within a shard
        episodes.setdefault(sample.env_index, []).append(sample)
    ordered = sorted(episodes.values(), key=lambda e: (e[-1].turn, e[-1].agent_index, e[-1].env_index))
    return [sample for episode in ordered for sample in episode]


class WorkerEngine(RolloutEngine):
    """A rollout engine whose decision-point loops run on EnvWorker actors ``env_workers``.

    The other arguments are a one-process engine's (the templates here serve the trainer's checks and
    the failure budget; no environment is stepped in the driver)."""

    def __init__(self, *args: Any, env_workers: Sequence[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not env_workers:
            raise ValueError("`env_workers` must hold at least one EnvWorker actor")
        self.env_workers = list(env_workers)

    async def arollout(self, problem_ids: Sequence[int], step: int = 0) -> RolloutBatch:
        ids = check_problem_ids(problem_ids)
        start = time.perf_counter()
        parts = await self._fan_out("rollout", ids, step, lambda worker, shard: worker.rollout.remote(shard, step))
        mode = parts[0][1].mode
        batch = merge_worker_batches(
            parts, step=step, mode=mode, trajectories_per_problem=self.config.num_generations
        )
        batch.timings["total_s"] = time.perf_counter() - start
        self.generate_calls += batch.generate_calls
        if self.transcripts is not None:
            batch.transcripts = self.transcripts.select(batch.samples, step)
            self.transcripts.write(batch.transcripts)
        if self.on_transcripts is not None and batch.transcripts:
            self.on_transcripts(batch.transcripts)
        return batch

    async def aevaluate_batch(
        self, problem_ids: Sequence[int], num_samples: int = 1, temperature: float = 0.0, step: int = 0,
        on_progress: Any = None, *, transcripts: Any = None,
    ) -> RolloutBatch:
        _no_eval_transcripts(transcripts)
        ids = check_problem_ids(problem_ids)
        parts = await self._fan_out(
            "evaluation", ids, step,
            lambda worker, shard: worker.evaluate.remote(shard, num_samples, float(temperature), step),
        )
        batch = merge_worker_batches(parts, step=step, mode="independent", trajectories_per_problem=num_samples)
        if on_progress is not None:  # the workers report once, at the end of their shard
            on_progress(batch.outcomes, len(ids) * num_samples)
        return batch

    async def aevaluate(self, problem_ids: Sequence[int], num_samples: int = 1, temperature: float = 0.0,
                        step: int = 0, on_progress: Any = None, *, transcripts: Any = None) -> EvalResult:
        _no_eval_transcripts(transcripts)
        batch = await self.aevaluate_batch(problem_ids, num_samples, temperature, step, on_progress)
        return summarize_eval(batch.outcomes, float(temperature), batch.samples)

    async def _fan_out(self, what: str, ids: list[int], step: int, call) -> list[tuple[int, RolloutBatch]]:
        import ray

        shards = shard_problem_ids(ids, len(self.env_workers))
        refs = [call(worker, shard) for worker, (_, shard) in zip(self.env_workers, shards)]
        try:
            results = await asyncio.to_thread(ray.get, refs)
        except ray.exceptions.RayError as error:
            for ref in refs:
                ray.cancel(ref, force=False)
            raise WorkerFailure(f"step {step}: the {what} on the EnvWorkers failed: {_first_line(error)}; "
                                f"{RESUME_HINT}") from error
        for result in results:  # the run's budget, as one engine would have counted
            self._count(result)
        return [(offset, result.batch) for (offset, _), result in zip(shards, results)]

    def _count(self, result: Any) -> None:
        budget = self.budget
        for label, count in result.model_failures.items():
            for _ in range(count):
                budget.record(model_failure=label)
        for _ in range(result.infra_failed):
            budget.record(infra_failed=True)
        plain = result.attempted - result.infra_failed - sum(result.model_failures.values())
        for _ in range(plain):
            budget.record()


def _no_eval_transcripts(transcripts: Any) -> None:
    if transcripts is not None:  # held-out evaluations run in the driver (pettingllms.stages.eval)
        raise ValueError("an evaluation on EnvWorkers writes no transcripts; evaluate with a local RolloutEngine")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    worker = next((w for w in ("RolloutWorker", "EnvWorker", "UpdateWorker") if w in text), None)
    head = lines[0] if lines else type(error).__name__
    return f"{type(error).__name__} ({worker or 'a worker'}): {head}"
