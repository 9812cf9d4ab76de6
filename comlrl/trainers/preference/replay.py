"""Replay buffer of the iterative preference trainers: which stored pairs a round trains on.

Each round's pairs are written first as ``iteration_NNNN.json`` (plus its id sidecar); then the mode
picks the training pairs from the eligible (non-empty) round datasets, oldest to newest:

- ``current``: every pair of the round just added, nothing else;
- ``nearest_k``: the newest k eligible datasets, equal weights whatever their size;
- ``all_history``: every eligible dataset, equal weights;
- ``lambda_decay``: every eligible dataset, weight proportional to ``(1 - lam) * lam**a`` by age a
  (a = 0 newest); lam = 0 keeps only the newest, lam = 1 is uniform.

Historical modes make ``sample_size`` independent weighted draws of a dataset (a multinomial
allotment); within a dataset a count c <= N is drawn without replacement, a larger count cycles through
freshly shuffled copies and draws the remainder without replacement, so every record appears
floor(c / N) or floor(c / N) + 1 times. The combined sample is shuffled. All randomness comes from the
buffer's own seeded generator, and a draw reads only the records it drew.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np

from comlrl.trainers.preference.records import (
    PreferencePair,
    RoundFile,
    RoundFileError,
    list_round_files,
    paused_gc,
    round_file_name,
    sidecar_path,
    write_round,
)

REPLAY_MODES = ("current", "nearest_k", "all_history", "lambda_decay")
REPLAY_MODE_ALIASES = {
    "latest": "current",
    "new": "current",
    "recent_k": "nearest_k",
    "last_k": "nearest_k",
    "k": "nearest_k",
    "lambda": "lambda_decay",
    "td_lambda": "lambda_decay",
    "td-lambda": "lambda_decay",
}

# --------------------------------------------------------------------------------------------------
# Sampling math (pure)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayOptions:
    mode: str
    k: int | None
    lam: float | None
    sample_size: int | None


def normalize_replay_mode(mode: str) -> str:
    """The canonical replay mode for ``mode`` or one of its aliases (case and spaces ignored)."""
    key = mode.strip().lower() if isinstance(mode, str) else None
    key = REPLAY_MODE_ALIASES.get(key, key)
    if key not in REPLAY_MODES:
        raise ValueError(f"`preference_replay_mode` must be one of {', '.join(REPLAY_MODES)}, got {mode!r}")
    return key


def validate_replay_options(
    mode: str, k: int | None = None, lam: float | None = None, sample_size: int | None = None
) -> ReplayOptions:
    """Check the replay options together; messages name the config fields."""
    mode = normalize_replay_mode(mode)
    if k is not None and (isinstance(k, bool) or not isinstance(k, Integral)):
        raise ValueError(f"`preference_replay_k` must be an integer or None, got {k!r}")
    if lam is not None and (isinstance(lam, bool) or not isinstance(lam, Real)):
        raise ValueError(f"`preference_replay_lambda` must be a number or None, got {lam!r}")
    if sample_size is not None and (isinstance(sample_size, bool) or not isinstance(sample_size, Integral)):
        raise ValueError(f"`preference_replay_sample_size` must be an integer or None, got {sample_size!r}")
    if mode == "current":
        if k not in (None, 1):
            raise ValueError(
                f"`preference_replay_k` must be None or 1 when `preference_replay_mode` is 'current', got {k}"
            )
        if sample_size is not None:
            raise ValueError(
                "`preference_replay_sample_size` is only valid when `preference_replay_mode` is 'nearest_k', "
                f"'all_history' or 'lambda_decay' ('current' trains on the whole round), got {sample_size}"
            )
    elif mode == "nearest_k":
        if k is None:
            raise ValueError("`preference_replay_k` is required when `preference_replay_mode` is 'nearest_k'")
        if k < 1:
            raise ValueError(f"`preference_replay_k` must be >= 1, got {k}")
    elif k is not None:
        raise ValueError(
            f"`preference_replay_k` is only valid when `preference_replay_mode` is 'nearest_k', got {k} with "
            f"{mode!r}"
        )
    if mode == "lambda_decay":
        if lam is None:
            raise ValueError(
                "`preference_replay_lambda` is required when `preference_replay_mode` is 'lambda_decay'"
            )
        if not (math.isfinite(lam) and 0.0 <= lam <= 1.0):
            raise ValueError(f"`preference_replay_lambda` must be in [0, 1], got {lam}")
    elif lam is not None:
        raise ValueError(
            f"`preference_replay_lambda` is only valid when `preference_replay_mode` is 'lambda_decay', got "
            f"{lam} with {mode!r}"
        )
    if sample_size is not None and sample_size < 1:
        raise ValueError(f"`preference_replay_sample_size` must be >= 1 or None, got {sample_size}")
    return ReplayOptions(
        mode=mode,
        k=None if k is None else int(k),
        lam=None if lam is None else float(lam),
        sample_size=None if sample_size is None else int(sample_size),
    )


def replay_weights(
    mode: str, num_datasets: int, *, k: int | None = None, lam: float | None = None
) -> list[float]:
    """Selection weight of each eligible dataset, oldest to newest; they sum to 1 (empty for none)."""
    options = validate_replay_options(mode, k, lam)
    if isinstance(num_datasets, bool) or not isinstance(num_datasets, Integral) or num_datasets < 0:
        raise ValueError(f"`num_datasets` must be an integer >= 0, got {num_datasets!r}")
    n = int(num_datasets)
    if n == 0:
        return []
    if options.mode == "current":
        return [0.0] * (n - 1) + [1.0]
    if options.mode == "nearest_k":
        window = min(options.k, n)
        return [0.0] * (n - window) + [1.0 / window] * window
    if options.mode == "all_history" or options.lam == 1.0:
        return [1.0 / n] * n
    # lambda_decay: w_a = (1 - lam) lam^a / sum_b (1 - lam) lam^b; the (1 - lam) cancels, and 0**0 == 1
    # makes lam = 0 put all weight on the newest.
    by_age = [options.lam**a for a in range(n)]
    total = sum(by_age)
    return [w / total for w in reversed(by_age)]


def default_sample_size(current_num_pairs: int, dataset_sizes: Sequence[int]) -> int:
    """The current round's size, or, when it is empty, the newest non-empty dataset's (else 0)."""
    if current_num_pairs > 0:
        return int(current_num_pairs)
    return next((int(s) for s in reversed(dataset_sizes) if s > 0), 0)


def allot_draws(weights: Sequence[float], sample_size: int, rng: np.random.Generator) -> np.ndarray:
    """How many of ``sample_size`` independent weighted draws land on each dataset (multinomial)."""
    p = np.asarray(weights, dtype=np.float64)
    if p.ndim != 1 or len(p) == 0 or (p < 0).any() or not np.isfinite(p).all() or p.sum() <= 0:
        raise ValueError(f"`weights` must be non-negative, finite and not all zero, got {list(weights)}")
    return rng.multinomial(int(sample_size), p / p.sum()).astype(np.int64)


def draw_indices(count: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` record indices from a dataset of ``size``: whole shuffled copies, then a remainder
    drawn without replacement (no repeats when ``count <= size``)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if size < 1:
        raise ValueError(f"cannot draw {count} records from an empty dataset")
    copies, rest = divmod(int(count), int(size))
    parts = [rng.permutation(size) for _ in range(copies)]
    if rest:
        parts.append(rng.choice(size, size=rest, replace=False))
    return np.concatenate(parts).astype(np.int64)


def plan_sample(
    weights: Sequence[float], sizes: Sequence[int], sample_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(dataset index, record index) of each draw, combined and shuffled."""
    if len(weights) != len(sizes):
        raise ValueError(f"{len(weights)} weights for {len(sizes)} datasets")
    counts = allot_draws(weights, sample_size, rng)
    datasets = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
    records = np.concatenate(
        [draw_indices(int(c), int(sizes[d]), rng) for d, c in enumerate(counts)] or [np.zeros(0, np.int64)]
    )
    order = rng.permutation(len(datasets))
    return datasets[order], records[order]


# --------------------------------------------------------------------------------------------------
# The buffer
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayRound:
    """One stored round: its iteration, file name inside the replay folder, and number of pairs."""

    iteration: int
    file: str
    num_pairs: int


class PreferenceReplayBuffer:
    """Stores each round's pairs as files and samples the training pairs of the round just added.

    The buffer keeps an index of rounds, not their pairs. ``resume=True`` allows a folder that already
    holds round files, for a buffer about to be restored with :meth:`load_state_dict`. ``write=False``: another
    process writes the round files (rank 0 of a data-parallel run); this buffer keeps the same index and
    generator, so it draws the same sample, reading the records from the files that process wrote.
    """

    def __init__(
        self,
        replay_dir: str | Path,
        mode: str = "current",
        k: int | None = None,
        lam: float | None = None,
        sample_size: int | None = None,
        seed: int = 0,
        *,
        resume: bool = False,
        write: bool = True,
    ) -> None:
        options = validate_replay_options(mode, k, lam, sample_size)
        if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
            raise ValueError(f"`seed` must be an integer >= 0, got {seed!r}")
        self.replay_dir = Path(replay_dir)
        self.mode = options.mode
        self.k = options.k
        self.lam = options.lam
        self.sample_size = options.sample_size
        self.seed = int(seed)
        self.write = bool(write)
        existing = list_round_files(self.replay_dir)
        if existing and not resume and self.write:
            raise FileExistsError(
                f"`preference_replay_dir` {self.replay_dir} already holds round files ({existing[0].name}"
                f"{', ...' if len(existing) > 1 else ''}) from another run; resume from a checkpoint instead, "
                "or choose another folder"
            )
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._rounds: list[ReplayRound] = []
        self._current_pairs: list[PreferencePair] | None = None
        self._files: dict[str, RoundFile] = {}
        self._restored = False

    @property
    def rounds(self) -> tuple[ReplayRound, ...]:
        """Every stored round, empty ones included, oldest first."""
        return tuple(self._rounds)

    def files(self) -> list[Path]:
        """The round files and sidecars in the index (what a checkpoint must keep)."""
        out = []
        for r in self._rounds:
            path = self.replay_dir / r.file
            out += [path] + ([sidecar_path(path)] if sidecar_path(path).exists() else [])
        return out

    def add_round(self, pairs: Sequence[PreferencePair]) -> Path:
        """Write the next round (``iteration_NNNN.json`` and its sidecar; ``write=False``: only index it) and make
        it current."""
        iteration = len(self._rounds) + 1
        path = self.replay_dir / round_file_name(iteration)
        if path.exists() and not self._restored and self.write:
            raise FileExistsError(
                f"`preference_replay_dir` {self.replay_dir} already holds {path.name}, which this buffer did "
                "not write; resume from a checkpoint (load_state_dict) instead, or choose another folder"
            )
        pairs = list(pairs)
        if self.write:
            write_round(path, iteration, pairs)
        self._files.pop(path.name, None)
        self._rounds.append(ReplayRound(iteration=iteration, file=path.name, num_pairs=len(pairs)))
        self._current_pairs = pairs
        return path

    def sample(self) -> list[PreferencePair]:
        """The training pairs for the round just added (empty when there is nothing to train on)."""
        if not self._rounds:
            raise RuntimeError("`sample()` needs a round: call `add_round()` first")
        current = self._rounds[-1]
        if self.mode == "current":
            if self._current_pairs is None:  # restored from a checkpoint: read the round back
                self._current_pairs = self._round_file(current).load_all() if current.num_pairs else []
            return list(self._current_pairs)
        eligible = [r for r in self._rounds if r.num_pairs > 0]
        sizes = [r.num_pairs for r in eligible]
        size = self.sample_size or default_sample_size(current.num_pairs, sizes)
        if size == 0 or not eligible:
            return []
        weights = replay_weights(self.mode, len(eligible), k=self.k, lam=self.lam)
        datasets, records = plan_sample(weights, sizes, size, self._rng)
        return self._load(eligible, datasets, records)

    def _load(
        self, rounds: list[ReplayRound], datasets: np.ndarray, records: np.ndarray
    ) -> list[PreferencePair]:
        # Each distinct record is read once; a record drawn several times appears as the same object.
        keys = datasets * (max(r.num_pairs for r in rounds) + 1) + records
        unique, inverse = np.unique(keys, return_inverse=True)
        unique_ds, unique_recs = np.divmod(unique, max(r.num_pairs for r in rounds) + 1)
        loaded: list[PreferencePair | None] = [None] * len(unique)
        with paused_gc():
            for d in np.unique(unique_ds):
                where = np.flatnonzero(unique_ds == d)
                for j, pair in zip(where.tolist(), self._round_file(rounds[int(d)]).load(unique_recs[where])):
                    loaded[j] = pair
            return [loaded[j] for j in inverse.tolist()]

    def _round_file(self, entry: ReplayRound) -> RoundFile:
        if entry.file not in self._files:
            self._files[entry.file] = RoundFile(self.replay_dir / entry.file)
        return self._files[entry.file]

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the options, the index of rounds and the generator state.

        Plain JSON-able values (the generator's 128-bit integers as hex strings).
        """
        bit_state = self._rng.bit_generator.state
        return {
            "version": 1,
            "mode": self.mode,
            "k": self.k,
            "lam": self.lam,
            "sample_size": self.sample_size,
            "seed": self.seed,
            "rounds": [
                {"iteration": r.iteration, "file": r.file, "num_pairs": r.num_pairs} for r in self._rounds
            ],
            "rng": {
                "state": hex(bit_state["state"]["state"]),
                "inc": hex(bit_state["state"]["inc"]),
                "has_uint32": int(bit_state["has_uint32"]),
                "uinteger": int(bit_state["uinteger"]),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the index and generator; the round files must already be in ``replay_dir``."""
        if state.get("version") != 1:
            raise ValueError(f"unsupported replay buffer state version {state.get('version')!r}")
        for key, field in (("mode", "mode"), ("k", "k"), ("lam", "lambda"), ("sample_size", "sample_size")):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"the checkpoint's `preference_replay_{field}` is {state[key]!r} but this buffer's is "
                    f"{getattr(self, key)!r}"
                )
        rounds = []
        for position, entry in enumerate(state["rounds"], start=1):
            r = ReplayRound(
                iteration=int(entry["iteration"]), file=str(entry["file"]), num_pairs=int(entry["num_pairs"])
            )
            if r.iteration != position:
                raise ValueError(f"replay state lists iteration {r.iteration} at position {position}")
            path = self.replay_dir / r.file
            if not path.exists():
                raise FileNotFoundError(
                    f"round file {r.file} of the checkpoint is missing from `preference_replay_dir` "
                    f"{self.replay_dir}; copy the checkpoint's round files back first"
                )
            if sidecar_path(path).exists() and RoundFile(path).num_pairs != r.num_pairs:
                raise RoundFileError(
                    f"{path}: holds {RoundFile(path).num_pairs} pairs, the checkpoint says {r.num_pairs}"
                )
            rounds.append(r)
        rng = state["rng"]
        self._rng.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": int(rng["state"], 16), "inc": int(rng["inc"], 16)},
            "has_uint32": int(rng["has_uint32"]),
            "uinteger": int(rng["uinteger"]),
        }
        self._rounds = rounds
        self._current_pairs = None
        self._files = {}
        self._restored = True
