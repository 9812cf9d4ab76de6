"""Preference pairs, their JSON records, and the round files of an iterative run.

A round is stored as ``iteration_NNNN.json`` (1-based) holding
``{"format_version": 1, "iteration": n, "num_pairs": N, "pairs": [record, ...]}`` (no ``format_version``:
version 1, written before it existed; ``iteration`` is the number in the name), where each record has exactly
the nine fields of :data:`RECORD_FIELDS`, plus the :data:`OPTIONAL_RECORD_FIELDS` ``turn`` / ``agent`` where a
pair was taken inside a multi-turn episode (files without them read as before). Beside it, ``iteration_NNNN.ids.bin`` (the *sidecar*) holds the byte
span of every record inside the JSON file and every record's sampled token ids, so a replay draw reads
only the records it drew and trains on the ids they were sampled with. Both files are written
atomically, the sidecar first: a round file without a sidecar came from elsewhere, and its pairs are
tokenized from text once, on first use. When the JSON file cannot be written, the new sidecar is removed.

Sidecar layout (little endian): the 8-byte magic ``COMLRLPI``, a uint64 header length, a JSON header
(``version``, ``iteration``, ``num_pairs``, ``json_size`` and, per array, dtype / shape / byte offset),
then 8-byte aligned arrays:

- ``spans`` int64 [N, 2]: (offset, length) of record i in the JSON file;
- ``record_slots`` int64 [N + 1]: record i owns token slots ``record_slots[i]:record_slots[i + 1]``,
  3 per agent in field-major order (prompt of every agent, then winner, then loser);
- ``slot_offsets`` int64 [S + 1] into ``tokens``; ``slot_known`` uint8 [S] (0 = ids unknown);
- ``tokens`` int32 (int64 when an id needs it) [T].
"""

from __future__ import annotations

import gc
import json
import mmap
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np

from comlrl.atomic_io import atomic_write_bytes
from comlrl.trainers.preference.record_fields import (
    optional_float,
    optional_number,
    record_index,
    record_number,
    text_list,
)

RECORD_FIELDS = (
    "prompts",
    "winner_completions",
    "loser_completions",
    "winner_reward",
    "loser_reward",
    "candidate_reward_mean",
    "raw_rewards",
    "target_raw_reward",
    "comparator_raw_reward",
)
_RECORD_FIELD_SET = frozenset(RECORD_FIELDS)
# Written only when set: where in a multi-turn episode a pair was taken (pettingllms' pairs from AT-GRPO
# trees: the 0-based turn and the acting agent's index, whose answer alone differs between the two sides).
OPTIONAL_RECORD_FIELDS = ("turn", "agent")
TOKEN_ID_FIELDS = ("prompt_token_ids", "winner_token_ids", "loser_token_ids")

# One entry per agent; an entry is None where that agent's ids are unknown (text from outside).
TokenIds = list[list[int] | None] | None

ROUND_FILE_RE = re.compile(r"^iteration_(\d{4,})\.json$")
SIDECAR_SUFFIX = ".ids.bin"
SIDECAR_MAGIC = b"COMLRLPI"
SIDECAR_VERSION = 1
ROUND_FORMAT_VERSION = 1
_ALIGN = 8


class RoundFileError(ValueError):
    """A round file or its sidecar is malformed, truncated or does not match the other."""


# --------------------------------------------------------------------------------------------------
# The pair and its record
# --------------------------------------------------------------------------------------------------


@dataclass
class PreferencePair:
    """One preference between two joint responses to the same task item.

    The nine record fields are those of the public record format: one prompt and one winner / loser
    completion per agent, the processed oracle scores of winner and loser, the mean processed score of
    the candidates compared for the item, and (iterative runs) the raw scores. The token-id fields are
    not part of the record: they hold, per agent, the sampled ids of the prompt and of the winner and
    loser completions (None where unknown) and travel in the round's sidecar.
    """

    prompts: list[str]
    winner_completions: list[str]
    loser_completions: list[str]
    winner_reward: float
    loser_reward: float
    candidate_reward_mean: float
    raw_rewards: list[float] = field(default_factory=list)
    target_raw_reward: float | None = None
    comparator_raw_reward: float | None = None
    prompt_token_ids: TokenIds = field(default=None, repr=False)
    winner_token_ids: TokenIds = field(default=None, repr=False)
    loser_token_ids: TokenIds = field(default=None, repr=False)
    turn: int | None = None
    agent: int | None = None

    def __post_init__(self) -> None:
        n = len(self.prompts)
        if n < 1:
            raise ValueError("`prompts` must hold one prompt per agent, got an empty list")
        for name in ("winner_completions", "loser_completions"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"`{name}` must hold one completion per agent ({n}), got {len(getattr(self, name))}"
                )
        for name in TOKEN_ID_FIELDS:
            ids = getattr(self, name)
            if ids is not None and len(ids) != n:
                raise ValueError(f"`{name}` must hold one id list per agent ({n}) or be None, got {len(ids)}")

    @property
    def num_agents(self) -> int:
        return len(self.prompts)

    @property
    def has_token_ids(self) -> bool:
        """True when every agent's prompt, winner and loser ids are known."""
        return all(
            ids is not None and all(agent_ids is not None for agent_ids in ids)
            for ids in (self.prompt_token_ids, self.winner_token_ids, self.loser_token_ids)
        )

    def to_record(self) -> dict[str, Any]:
        """The JSON record (the nine record fields; token ids go to the sidecar)."""
        return {
            "prompts": list(self.prompts),
            "winner_completions": list(self.winner_completions),
            "loser_completions": list(self.loser_completions),
            "winner_reward": float(self.winner_reward),
            "loser_reward": float(self.loser_reward),
            "candidate_reward_mean": float(self.candidate_reward_mean),
            "raw_rewards": [float(r) for r in self.raw_rewards],
            "target_raw_reward": optional_float(self.target_raw_reward),
            "comparator_raw_reward": optional_float(self.comparator_raw_reward),
            **{name: int(getattr(self, name)) for name in OPTIONAL_RECORD_FIELDS if getattr(self, name) is not None},
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PreferencePair:
        """Build a pair from a JSON record (it has no token ids yet); errors name the bad field."""
        if not isinstance(record, dict):
            raise ValueError(f"a preference record must be a JSON object, got {type(record).__name__}")
        if record.keys() - set(OPTIONAL_RECORD_FIELDS) != _RECORD_FIELD_SET:
            missing = [name for name in RECORD_FIELDS if name not in record]
            if missing:
                raise ValueError(f"record is missing field(s) {', '.join(repr(m) for m in missing)}")
            unknown = sorted(set(record) - _RECORD_FIELD_SET - set(OPTIONAL_RECORD_FIELDS))
            raise ValueError(f"record has unknown field(s) {', '.join(repr(u) for u in unknown)}")
        where = {name: record_index(record[name], name) for name in OPTIONAL_RECORD_FIELDS if name in record}
        texts = {name: text_list(record, name) for name in RECORD_FIELDS[:3]}
        raw = record["raw_rewards"]
        if not isinstance(raw, list):
            raise ValueError(
                f"record field 'raw_rewards' must be a list of numbers, got {type(raw).__name__}"
            )
        return cls(
            prompts=texts["prompts"],
            winner_completions=texts["winner_completions"],
            loser_completions=texts["loser_completions"],
            winner_reward=record_number(record["winner_reward"], "winner_reward"),
            loser_reward=record_number(record["loser_reward"], "loser_reward"),
            candidate_reward_mean=record_number(record["candidate_reward_mean"], "candidate_reward_mean"),
            raw_rewards=[record_number(r, f"raw_rewards[{i}]") for i, r in enumerate(raw)],
            target_raw_reward=optional_number(record["target_raw_reward"], "target_raw_reward"),
            comparator_raw_reward=optional_number(record["comparator_raw_reward"], "comparator_raw_reward"),
            **where,
        )

    def ensure_token_ids(self, tokenizers: Any, *, append_eos: bool = False) -> PreferencePair:
        """Tokenize, once, whatever ids are unknown (texts from a file or a remote comparator).

        ``tokenizers`` is one tokenizer per agent (or one shared by all). Prompts are encoded with the
        tokenizer's special tokens, completions without; ``append_eos`` adds the EOS id to completions
        that are encoded here (ids that were sampled are never changed). Returns ``self``.
        """
        if self.has_token_ids:
            return self
        toks = _per_agent_tokenizers(tokenizers, self.num_agents)
        texts = (self.prompts, self.winner_completions, self.loser_completions)
        for name, field_texts, is_prompt in zip(TOKEN_ID_FIELDS, texts, (True, False, False)):
            ids = list(getattr(self, name) or [None] * self.num_agents)
            for agent, agent_ids in enumerate(ids):
                if agent_ids is None:
                    ids[agent] = _encode(toks[agent], field_texts[agent], is_prompt, append_eos, agent, name)
            setattr(self, name, ids)
        return self


def ensure_token_ids(pairs: Iterable[PreferencePair], tokenizers: Any, *, append_eos: bool = False) -> None:
    """:meth:`PreferencePair.ensure_token_ids` on every pair (a pair drawn twice is tokenized once)."""
    for pair in pairs:
        pair.ensure_token_ids(tokenizers, append_eos=append_eos)


def _per_agent_tokenizers(tokenizers: Any, num_agents: int) -> list[Any]:
    if isinstance(tokenizers, (list, tuple)):
        if len(tokenizers) == 1:
            return list(tokenizers) * num_agents
        if len(tokenizers) != num_agents:
            raise ValueError(f"`tokenizers` must hold 1 or {num_agents} tokenizers, got {len(tokenizers)}")
        return list(tokenizers)
    return [tokenizers] * num_agents


def _encode(tokenizer: Any, text: str, is_prompt: bool, append_eos: bool, agent: int, name: str) -> list[int]:
    ids = [int(t) for t in tokenizer.encode(text, add_special_tokens=is_prompt)]
    if append_eos and not is_prompt:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError(
                f"`append_eos=True` but agent {agent}'s tokenizer has no `eos_token_id` ({name})"
            )
        ids.append(int(eos))
    return ids


# --------------------------------------------------------------------------------------------------
# Round files
# --------------------------------------------------------------------------------------------------


DEFAULT_REPLAY_SUBDIR = "preference_replay"


def default_replay_dir(output_dir: str | Path) -> Path:
    """Where a run keeps its rounds unless ``preference_replay_dir`` says otherwise."""
    return Path(output_dir) / DEFAULT_REPLAY_SUBDIR


def round_file_name(iteration: int) -> str:
    """``iteration_0001.json`` for iteration 1 (1-based, at least four digits)."""
    if isinstance(iteration, bool) or not isinstance(iteration, Integral) or iteration < 1:
        raise ValueError(f"`iteration` must be an integer >= 1, got {iteration!r}")
    return f"iteration_{int(iteration):04d}.json"


def sidecar_path(round_path: str | Path) -> Path:
    """The sidecar beside a round file: ``iteration_0001.json`` -> ``iteration_0001.ids.bin``."""
    round_path = Path(round_path)
    return round_path.with_name(round_path.name[: -len(".json")] + SIDECAR_SUFFIX)


def list_round_files(folder: str | Path) -> list[Path]:
    """Round files in ``folder``, by iteration (an absent folder holds none)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := ROUND_FILE_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def _round_head(iteration: int, num_pairs: int) -> bytes:
    head = f'"format_version": {ROUND_FORMAT_VERSION}, "iteration": {int(iteration)}, "num_pairs": {num_pairs}'
    return ("{" + head + ', "pairs": [').encode()


def write_round(path: str | Path, iteration: int, pairs: Sequence[PreferencePair]) -> Path:
    """Write one round atomically: the sidecar, then the JSON file. Returns the JSON file's path.

    The JSON text is assembled record by record so each record's byte span is known.
    """
    path = Path(path)
    round_file_name(iteration)  # validates
    pieces = [_round_head(iteration, len(pairs))]
    size = len(pieces[0])
    spans = np.zeros((len(pairs), 2), dtype=np.int64)
    for i, pair in enumerate(pairs):
        try:
            text = json.dumps(pair.to_record(), ensure_ascii=False, allow_nan=False)
        except ValueError as exc:
            raise ValueError(f"pair {i} of iteration {iteration} cannot be written as JSON: {exc}") from exc
        sep = b"\n  " if i == 0 else b",\n  "
        data = text.encode("utf-8")
        spans[i] = (size + len(sep), len(data))
        pieces += [sep, data]
        size += len(sep) + len(data)
    pieces.append(b"\n]}\n" if pairs else b"]}\n")
    blob = b"".join(pieces)
    atomic_write_bytes(sidecar_path(path), _sidecar_bytes(iteration, pairs, spans, len(blob)))
    try:
        atomic_write_bytes(path, blob)
    except BaseException:
        sidecar_path(path).unlink(missing_ok=True)  # it describes a file that was not written
        raise
    return path


def _sidecar_bytes(
    iteration: int, pairs: Sequence[PreferencePair], spans: np.ndarray, json_size: int
) -> bytes:
    record_slots = np.zeros(len(pairs) + 1, dtype=np.int64)
    seqs: list[list[int]] = []
    known: list[int] = []
    for i, pair in enumerate(pairs):
        for name in TOKEN_ID_FIELDS:
            ids = getattr(pair, name)
            for agent in range(pair.num_agents):
                agent_ids = None if ids is None else ids[agent]
                known.append(agent_ids is not None)
                seqs.append(agent_ids if agent_ids is not None else [])
        record_slots[i + 1] = len(seqs)
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    slot_offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=slot_offsets[1:])
    total = int(slot_offsets[-1])
    tokens = np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=total)
    if total and tokens.min() < 0:
        raise ValueError(f"token ids must be >= 0; iteration {iteration} holds {int(tokens.min())}")
    if not total or tokens.max() < 2**31:
        tokens = tokens.astype(np.int32)
    arrays = {
        "spans": spans,
        "record_slots": record_slots,
        "slot_offsets": slot_offsets,
        "slot_known": np.asarray(known, dtype=np.uint8),
        "tokens": tokens,
    }
    layout, cursor = {}, 0
    for name, arr in arrays.items():
        layout[name] = {"dtype": arr.dtype.str, "shape": list(arr.shape), "offset": cursor}
        cursor = _aligned(cursor + arr.nbytes)
    header = {
        "version": SIDECAR_VERSION,
        "iteration": int(iteration),
        "num_pairs": len(pairs),
        "json_size": int(json_size),
        "arrays": layout,
    }
    # Offsets in the header count from the file start, so they depend on the header's own length:
    # grow the data start until the header that names it fits in front of it (two rounds at most).
    data_start = 0
    while True:
        header["arrays"] = {n: dict(v, offset=v["offset"] + data_start) for n, v in layout.items()}
        text = json.dumps(header).encode()
        needed = _aligned(len(SIDECAR_MAGIC) + 8 + len(text))
        if needed <= data_start:
            break
        data_start = needed
    out = bytearray(SIDECAR_MAGIC + struct.pack("<Q", len(text)) + text)
    for name, arr in arrays.items():
        out += b"\0" * (header["arrays"][name]["offset"] - len(out))
        out += np.ascontiguousarray(arr).tobytes()
    out += b"\0" * (_aligned(len(out)) - len(out))
    return bytes(out)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while many acyclic objects are built: the collections that
    the tens of thousands of small lists of a draw trigger would cost as much as the load itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass
class Round:
    """A whole round read from its JSON file."""

    iteration: int
    pairs: list[PreferencePair]


def read_round(path: str | Path) -> Round:
    """Read and check a whole round file (token ids are attached when its sidecar is present)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RoundFileError(f"{path}: round file not found") from None
    with paused_gc():
        return _parse_round(path, raw)


def _parse_round(path: Path, raw: bytes) -> Round:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RoundFileError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = " (the file looks truncated)" if exc.pos >= len(text.rstrip()) else ""
        raise RoundFileError(f"{path}: not valid JSON{hint}: {exc}") from None
    if not isinstance(payload, dict):
        raise RoundFileError(f"{path}: expected a JSON object, got {type(payload).__name__}")
    for key in ("iteration", "num_pairs", "pairs"):
        if key not in payload:
            raise RoundFileError(f"{path}: missing key {key!r}")
    if unknown := sorted(set(payload) - {"format_version", "iteration", "num_pairs", "pairs"}):
        raise RoundFileError(f"{path}: unknown key(s) {unknown}")
    if (version := payload.get("format_version", 1)) != ROUND_FORMAT_VERSION:
        raise RoundFileError(f"{path}: 'format_version' is {version!r}, this comlrl reads {ROUND_FORMAT_VERSION}")
    iteration, num_pairs, records = payload["iteration"], payload["num_pairs"], payload["pairs"]
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 1:
        raise RoundFileError(f"{path}: 'iteration' must be an integer >= 1, got {iteration!r}")
    named = ROUND_FILE_RE.match(path.name)
    if named and iteration != int(named.group(1)):
        raise RoundFileError(f"{path}: 'iteration' is {iteration} but the file name says {int(named.group(1))}")
    if not isinstance(records, list):
        raise RoundFileError(f"{path}: 'pairs' must be a list, got {type(records).__name__}")
    if isinstance(num_pairs, bool) or not isinstance(num_pairs, int) or num_pairs != len(records):
        raise RoundFileError(f"{path}: 'num_pairs' is {num_pairs!r} but 'pairs' holds {len(records)} records")
    pairs = []
    for i, record in enumerate(records):
        try:
            pairs.append(PreferencePair.from_record(record))
        except ValueError as exc:
            raise RoundFileError(f"{path}: record {i}: {exc}") from None
    if sidecar_path(path).exists():
        ids = RoundFile(path)
        if ids.num_pairs != len(pairs) or ids._header["json_size"] != len(raw):
            raise RoundFileError(
                f"{ids.sidecar}: describes {ids.num_pairs} pairs in {ids._header['json_size']} bytes, but "
                f"{path.name} holds {len(pairs)} pairs in {len(raw)} bytes; the two files do not belong together"
            )
        for i, pair in enumerate(pairs):
            ids._attach_ids(i, pair)
    return Round(iteration=iteration, pairs=pairs)


class RoundFile:
    """Random access to the records of one round file.

    With a sidecar, :meth:`load` reads only the requested records (memory-mapped ids, one read per
    record). Without one, the whole file is parsed once on first use and kept by this object, so a
    caller that keeps the object hands out the same pair objects, and their ids are tokenized once.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.sidecar = sidecar_path(self.path)
        self._all: list[PreferencePair] | None = None
        self._arrays: dict[str, np.ndarray] | None = None
        self._header: dict[str, Any] | None = None
        if not self.path.exists():
            raise RoundFileError(f"{self.path}: round file not found")
        if self.sidecar.exists():
            self._open_sidecar()

    @property
    def has_sidecar(self) -> bool:
        return self._arrays is not None

    @property
    def num_pairs(self) -> int:
        if self._header is not None:
            return int(self._header["num_pairs"])
        return len(self._load_all())

    def load(self, indices: Sequence[int]) -> list[PreferencePair]:
        """The pairs at ``indices`` (in that order), with their sampled token ids when known."""
        if self._arrays is None:
            pairs = self._load_all()
            bad = [i for i in indices if not 0 <= i < len(pairs)]
            if bad:
                raise IndexError(f"{self.path}: record {bad[0]} out of range (the round holds {len(pairs)})")
            return [pairs[i] for i in indices]
        arrays = self._arrays
        json_size = int(self._header["json_size"])
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        num = len(arrays["spans"])
        if len(idx) and (idx.min() < 0 or idx.max() >= num):
            bad = int(idx[(idx < 0) | (idx >= num)][0])
            raise IndexError(f"{self.path}: record {bad} out of range (the round holds {num})")
        # Bulk conversions keep the per-record work in plain Python objects.
        spans = arrays["spans"][idx].tolist()
        firsts = arrays["record_slots"][idx].tolist()
        lasts = arrays["record_slots"][idx + 1].tolist()
        out = []
        with (
            paused_gc(),
            open(self.path, "rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mm,
        ):
            if len(mm) != json_size:
                raise RoundFileError(
                    f"{self.path}: is {len(mm)} bytes but its sidecar {self.sidecar.name} describes "
                    f"{json_size}; the two files do not belong together"
                )
            for i, (start, length), first, last in zip(idx.tolist(), spans, firsts, lasts):
                if start < 0 or length <= 0 or start + length > json_size:
                    raise RoundFileError(f"{self.sidecar}: span of record {i} lies outside {self.path.name}")
                try:
                    record = json.loads(mm[start : start + length].decode("utf-8"))
                    pair = PreferencePair.from_record(record)
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                    raise RoundFileError(
                        f"{self.path}: record {i} (bytes {start}..{start + length}) is damaged or does not "
                        f"match the sidecar {self.sidecar.name}: {exc}"
                    ) from None
                self._set_ids(pair, i, first, last)
                out.append(pair)
        return out

    def load_all(self) -> list[PreferencePair]:
        return self.load(range(self.num_pairs))

    def _load_all(self) -> list[PreferencePair]:
        if self._all is None:
            self._all = read_round(self.path).pairs
        return self._all

    def _open_sidecar(self) -> None:
        path = self.sidecar
        try:
            mm = np.memmap(path, dtype=np.uint8, mode="r")
        except ValueError:  # numpy refuses to map an empty file
            raise RoundFileError(f"{path}: sidecar is empty") from None
        prefix = len(SIDECAR_MAGIC) + 8
        if len(mm) < prefix or bytes(mm[: len(SIDECAR_MAGIC)]) != SIDECAR_MAGIC:
            raise RoundFileError(f"{path}: not a preference id sidecar (bad magic bytes)")
        (header_len,) = struct.unpack("<Q", bytes(mm[len(SIDECAR_MAGIC) : prefix]))
        if prefix + header_len > len(mm):
            raise RoundFileError(
                f"{path}: truncated header ({len(mm)} bytes, header needs {prefix + header_len})"
            )
        try:
            header = json.loads(bytes(mm[prefix : prefix + header_len]))
            if header["version"] != SIDECAR_VERSION:
                raise RoundFileError(f"{path}: unsupported sidecar version {header['version']!r}")
            arrays = {}
            for name in ("spans", "record_slots", "slot_offsets", "slot_known", "tokens"):
                spec = header["arrays"][name]
                dtype, shape, offset = np.dtype(spec["dtype"]), tuple(spec["shape"]), int(spec["offset"])
                count = int(np.prod(shape))
                if offset + count * dtype.itemsize > len(mm):
                    raise RoundFileError(f"{path}: truncated (array {name!r} ends past the end of the file)")
                arrays[name] = np.frombuffer(mm, dtype=dtype, count=count, offset=offset).reshape(shape)
            num_pairs = int(header["num_pairs"])
            int(header["json_size"])
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, RoundFileError):
                raise
            raise RoundFileError(f"{path}: malformed sidecar header ({type(exc).__name__}: {exc})") from None
        slots, offsets = arrays["record_slots"], arrays["slot_offsets"]
        if (
            arrays["spans"].shape != (num_pairs, 2)
            or slots.shape != (num_pairs + 1,)
            or offsets.shape != (int(slots[-1]) + 1,)
            or arrays["slot_known"].shape != (int(slots[-1]),)
            or int(offsets[-1]) != len(arrays["tokens"])
        ):
            raise RoundFileError(f"{path}: array sizes do not agree with num_pairs={num_pairs}")
        self._header, self._arrays = header, arrays

    def _attach_ids(self, i: int, pair: PreferencePair) -> None:
        if self._arrays is not None:
            slots = self._arrays["record_slots"]
            self._set_ids(pair, i, int(slots[i]), int(slots[i + 1]))

    def _set_ids(self, pair: PreferencePair, i: int, first: int, last: int) -> None:
        arrays = self._arrays
        n = pair.num_agents
        if last - first != 3 * n:
            raise RoundFileError(
                f"{self.sidecar}: record {i} has {last - first} id slots, expected {3 * n} for {n} agents"
            )
        offsets = arrays["slot_offsets"][first : last + 1].tolist()
        known = arrays["slot_known"][first:last].tolist()
        base, end = offsets[0], offsets[-1]
        if base < 0 or end > len(arrays["tokens"]) or offsets != sorted(offsets):
            raise RoundFileError(f"{self.sidecar}: the id slots of record {i} are out of bounds")
        flat = arrays["tokens"][base:end].tolist()
        seqs = [flat[offsets[s] - base : offsets[s + 1] - base] if known[s] else None for s in range(3 * n)]
        for f, name in enumerate(TOKEN_ID_FIELDS):
            ids = seqs[f * n : (f + 1) * n]
            setattr(pair, name, None if ids.count(None) == n else ids)
