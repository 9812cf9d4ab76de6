"""Episode transcripts: ``rollouts.jsonl`` under the run's output folder, one line per sampled turn.

Which episodes are written is a seeded draw per (step, problem) (:func:`episode_sampled`), so a rerun
writes the same transcripts. A written episode includes every candidate of every decision point (tree
mode marks the branch that continued with ``selected``). Each rollout appends its lines in one write;
on resume, :meth:`TranscriptWriter.truncate_after` drops lines of steps that will be rolled out again.
An evaluation writes its whole file at once (:meth:`TranscriptWriter.replace`).

Each record carries ``state``: the snapshot of the state right after the step
(:mod:`pettingllms.execution.state_snapshots`), cut to ``state_max_chars`` when that is set (the cut is
marked by ``truncated_chars`` in the snapshot, counted in :attr:`TranscriptWriter.truncated_states` and
logged); ``null`` where the sample holds none. Files written before snapshots existed have no ``state``
key; ``pettingllms show`` renders both as "state not recorded".
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from comlrl.atomic_io import append_line, atomic_write_text
from comlrl.reporting import read_jsonl
from comlrl.seeding import derive_seed
from pettingllms.config.rollout_section import MIN_STATE_MAX_CHARS, check_state_max_chars
from pettingllms.execution.samples import Sample
from pettingllms.execution.state_snapshots import limit_snapshot

__all__ = [
    "MIN_STATE_MAX_CHARS",
    "TRANSCRIPT_FILE",
    "TranscriptWriter",
    "check_state_max_chars",
    "episode_sampled",
    "transcript_record",
]

TRANSCRIPT_FILE = "rollouts.jsonl"

logger = logging.getLogger("pettingllms.execution")


def episode_sampled(seed: int, step: int, problem_id: int, rate: float) -> bool:
    """Whether the episode of ``problem_id`` at ``step`` is written (probability ``rate``)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"`transcript_rate` must be in [0, 1], got {rate}")
    if rate == 0.0:
        return False
    return random.Random(derive_seed(seed, "transcripts", step, problem_id)).random() < rate


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    return repr(value)


def transcript_record(sample: Sample, step: int, state_max_chars: int | None = None) -> dict[str, Any]:
    """The JSON record of one sample: prompt, response, parsed action or parse error, tool output, rewards,
    and the state after the step (cut to ``state_max_chars``; None where the sample holds no snapshot)."""
    state = sample.state
    return {
        "step": step,
        "mode": sample.mode,
        "problem_id": sample.problem_id,
        "turn": sample.turn,
        "agent_index": sample.agent_index,
        "role": sample.role,
        "candidate": sample.candidate,
        "selected": sample.selected,
        "policy": sample.policy,
        "policy_version": sample.policy_version,
        "prompt": _json_safe(sample.prompt),
        "response": sample.response,
        "action": _json_safe(sample.action),
        "parse_error": sample.parse_error,
        "failure": sample.failure,
        "feedback": sample.feedback,
        "local_reward": sample.local_reward,
        "global_reward": sample.global_reward,
        "alpha": sample.alpha,
        "reward": sample.reward,
        "group_reward": sample.group_reward,
        "done": sample.done,
        "success": sample.success,
        "completion_tokens": sample.num_completion_tokens,
        "state": None if state is None else limit_snapshot(state, state_max_chars),
    }


class TranscriptWriter:
    """Appends sampled episodes' records to ``output_dir/rollouts.jsonl``.

    ``rate`` is the probability that an episode is written; ``seed`` drives the draw. ``state_max_chars``
    cuts each record's state snapshot to that many characters (None: whole); :attr:`truncated_states`
    counts the snapshots cut so far.
    """

    def __init__(
        self, output_dir: str | os.PathLike, rate: float, seed: int = 0, state_max_chars: int | None = None
    ) -> None:
        episode_sampled(seed, 0, 0, rate)  # validates `rate`
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / TRANSCRIPT_FILE
        self.rate = float(rate)
        self.seed = int(seed)
        self.state_max_chars = check_state_max_chars(state_max_chars, "state_max_chars")
        self.truncated_states = 0

    def records_state(self, step: int, problem_id: int) -> bool:
        """Whether the episode of ``problem_id`` at ``step`` is written (so its samples need snapshots)."""
        return episode_sampled(self.seed, step, problem_id, self.rate)

    def select(self, samples: Iterable[Sample], step: int) -> list[dict[str, Any]]:
        """Records of the sampled episodes' samples, in decision order."""
        chosen: dict[int, bool] = {}
        records = []
        ordered = sorted(samples, key=lambda s: (s.problem_id, s.turn, s.agent_index, s.candidate))
        for sample in ordered:
            if sample.problem_id not in chosen:
                chosen[sample.problem_id] = episode_sampled(self.seed, step, sample.problem_id, self.rate)
            if chosen[sample.problem_id]:
                records.append(transcript_record(sample, step, self.state_max_chars))
        cut = sum(1 for r in records if r["state"] is not None and r["state"].get("truncated_chars", 0) > 0)
        if cut:
            self.truncated_states += cut
            logger.warning(
                "transcripts of step %s: %s state snapshot(s) cut to %s characters "
                "(rollout.transcript_state_max_chars; marked by `truncated_chars`; %s so far)",
                step, cut, self.state_max_chars, self.truncated_states,
            )
        return records

    def write(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` in one write (nothing when empty)."""
        if not records:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        # One write of every line; a failed one is truncated back (never half a line in the file).
        append_line(self.path, "\n".join(json.dumps(r, ensure_ascii=False) for r in records))

    def replace(self, records: list[dict[str, Any]]) -> None:
        """Make the file hold exactly ``records``, in one atomic write (an evaluation's transcripts: a
        repeated evaluation replaces the earlier one's)."""
        self.output_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def read(self) -> list[dict[str, Any]]:
        """The records; a torn last line (a kill mid-write) is dropped with a warning naming the file."""
        if not self.path.exists():
            return []
        return [record for _, record in read_jsonl(self.path)]

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (atomically), for an exact resume."""
        if not self.path.exists():
            return
        kept = [r for r in self.read() if r["step"] <= step]
        atomic_write_text(self.path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
