"""Training checkpoints under a run's ``output_dir``, shared by comlrl's and pettingllms' trainers.

Layout of ``output_dir/checkpoint-{step}/``::

    policy_layout.json, <policy>/ ...   the weights (MultiAgentPolicy.save: one folder per policy)
    optimizer-<name>.pt                 optimizer state dicts, one per named optimizer
    scheduler-<name>.pt                 LR scheduler state dicts
    rng_state.json                      every random stream: the global ones and the trainer's generators
    extra/<name>/                       trainer payloads (replay index, comparator snapshots, ...)
    trainer_state.json                  step, data cursor, metrics so far, and the size of every other
                                        file (written last)

A checkpoint is built in a hidden temporary folder inside ``output_dir`` and renamed into place, so a
``checkpoint-{step}`` folder is always complete; a crash leaves at most a hidden ``.tmp-*`` folder, which
:func:`latest_checkpoint` ignores and :func:`comlrl.atomic_io.remove_stale_temporaries` removes on resume.
A write that fails (a full disk) raises :class:`~comlrl.atomic_io.WriteError` naming the checkpoint and
leaves the earlier checkpoints as they were.

``trainer_state.json`` and ``rng_state.json`` carry ``format_version`` (files written before it was added
read as version 1). Loading checks everything it can before it changes any live object: both JSON files
parse and have a supported version, and every file listed in the trainer state is there with its recorded
size; a damaged checkpoint raises :class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from comlrl.atomic_io import (
    atomic_replace_dir,
    atomic_write_json,
    atomic_write_stream,
    scratch_dir,
    write_error,
)
from comlrl.seeding import rng_state, set_rng_state

CHECKPOINT_PREFIX = "checkpoint-"
TRAINER_STATE_FILE = "trainer_state.json"
RNG_STATE_FILE = "rng_state.json"
EXTRA_DIR = "extra"
CHECKPOINT_FORMAT_VERSION = 1
MANIFEST_KEY = "files"
_CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Generator = torch.Generator | np.random.Generator | random.Random


class CheckpointError(ValueError):
    """A checkpoint file is damaged, missing or of an unsupported format (the message names the file)."""


def check_format_version(data: Mapping, path: str | os.PathLike, supported: int = CHECKPOINT_FORMAT_VERSION) -> int:
    """The ``format_version`` of a JSON object read from ``path`` (absent: 1, the files written before the
    field existed); any other than ``supported`` raises :class:`CheckpointError` naming both."""
    version = data.get("format_version", 1)
    if version != supported:
        raise CheckpointError(
            f"{path}: `format_version` is {version!r}, this version of comlrl reads {supported}; it was written "
            "by another version"
        )
    return version


def read_json_object(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``; a missing file, invalid JSON or another JSON type raises
    :class:`CheckpointError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


@dataclass
class TrainerState:
    """What a trainer needs besides weights, optimizers and random streams to continue exactly.

    ``data_cursor`` is any JSON value locating the next batch (e.g. ``{"epoch": 1, "index": 40}``);
    ``log_history`` holds the metrics logged so far; ``extra`` is free JSON for the trainer.
    """

    step: int
    data_cursor: Any = None
    log_history: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 0:
            raise ValueError(f"`step` must be an int >= 0, got {self.step!r}")

    def to_json(self) -> dict:
        return {"format_version": CHECKPOINT_FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping, path: str | os.PathLike = TRAINER_STATE_FILE) -> TrainerState:
        """Parse :meth:`to_json` output (the file manifest of a checkpoint aside); errors name ``path`` and
        the field."""
        check_format_version(data, path)
        fields = {k: v for k, v in data.items() if k not in ("format_version", MANIFEST_KEY)}
        unknown = set(fields) - {"step", "data_cursor", "log_history", "extra"}
        if unknown:
            raise CheckpointError(f"{path} has unknown fields {sorted(unknown)}")
        if "step" not in fields:
            raise CheckpointError(f"{path}: field 'step' is missing")
        for name, kind in (("log_history", list), ("extra", dict)):
            if name in fields and not isinstance(fields[name], kind):
                raise CheckpointError(
                    f"{path}: field {name!r} must be a {kind.__name__}, got {type(fields[name]).__name__}"
                )
        try:
            return cls(**fields)
        except ValueError as exc:
            raise CheckpointError(f"{path}: {exc}") from None


# ---------------------------------------------------------------------------------------- random streams
def _encode(value: Any) -> Any:
    """JSON form of random-stream states (tuples, numpy arrays, byte tensors, big ints) without pickle."""
    if isinstance(value, torch.Tensor):
        return {"__torch_bytes__": base64.b64encode(value.cpu().numpy().tobytes()).decode(), "dtype": "uint8"}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"random state dict keys must be strings, got {list(value)}")
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, np.integer):
        return int(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot store a {type(value).__name__} in {RNG_STATE_FILE}")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "__torch_bytes__" in value:
            raw = bytearray(base64.b64decode(value["__torch_bytes__"]))
            return torch.frombuffer(raw, dtype=torch.uint8).clone()
        if "__ndarray__" in value:
            return np.asarray(value["__ndarray__"], dtype=value["dtype"])
        if "__tuple__" in value:
            return tuple(_decode(v) for v in value["__tuple__"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def generator_state(generator: Generator) -> dict:
    """``{"kind", "state"}`` of a torch, numpy or Python random generator."""
    if isinstance(generator, torch.Generator):
        return {"kind": "torch", "device": str(generator.device), "state": generator.get_state()}
    if isinstance(generator, np.random.Generator):
        return {"kind": "numpy", "state": generator.bit_generator.state}
    if isinstance(generator, random.Random):
        return {"kind": "python", "state": generator.getstate()}
    raise TypeError(f"unsupported generator type {type(generator).__name__} (torch, numpy or random.Random)")


def set_generator_state(generator: Generator, saved: Mapping, name: str) -> None:
    """Restore :func:`generator_state` output into a generator of the same kind."""
    kind = generator_state(generator)["kind"]
    if saved["kind"] != kind:
        raise TypeError(f"generator {name!r} was saved as {saved['kind']} but the live one is {kind}")
    if kind == "torch":
        generator.set_state(saved["state"])
    elif kind == "numpy":
        generator.bit_generator.state = saved["state"]
    else:
        generator.setstate(saved["state"])


def capture_rng(generators: Mapping[str, Generator] | None = None) -> dict:
    """JSON-ready snapshot of the global streams (Python, numpy, torch, CUDA) and named generators."""
    named = {name: generator_state(g) for name, g in (generators or {}).items()}
    return _encode({"global": rng_state(), "generators": named})


def restore_rng(
    snapshot: Mapping, generators: Mapping[str, Generator] | None = None, restore_global: bool = True
) -> None:
    """Restore :func:`capture_rng` output. Every named generator passed must be in the snapshot."""
    state = _decode(dict(snapshot))
    saved = state["generators"]
    for name, generator in (generators or {}).items():
        if name not in saved:
            raise KeyError(f"generator {name!r} is not in the checkpoint; saved: {sorted(saved)}")
        set_generator_state(generator, saved[name], name)
    if restore_global:
        set_rng_state(state["global"])


# ---------------------------------------------------------------------------------------- finding checkpoints
def checkpoint_path(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / f"{CHECKPOINT_PREFIX}{step}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints as (step, path), oldest step first. Temporary and half-deleted folders are
    hidden names and never match; a ``checkpoint-N`` without its trainer state is not complete."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for entry in output_dir.iterdir():
        match = _CHECKPOINT_NAME.match(entry.name)
        if match and entry.is_dir() and (entry / TRAINER_STATE_FILE).is_file():
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


class CheckpointNotFoundError(FileNotFoundError, ValueError):
    """No checkpoint where one was asked for (a ``FileNotFoundError`` and, for older callers, a
    ``ValueError``)."""


def find_checkpoint(
    path: str | os.PathLike, *, output_dir: str | os.PathLike | None = None, field: str = "resume_from_checkpoint"
) -> Path:
    """The checkpoint a resume names, for every trainer: ``path`` True means the latest complete checkpoint
    in ``output_dir``; a ``checkpoint-N`` folder is itself; a folder holding ``checkpoint-N`` folders gives
    its latest complete one. Anything else raises :class:`CheckpointNotFoundError` naming ``field``."""
    if path is True:
        if output_dir is None:
            raise ValueError(f"`{field}` is True but no output_dir was given to look in")
        found = latest_checkpoint(output_dir)
        if found is None:
            raise CheckpointNotFoundError(f"`{field}` is True but {output_dir} holds no complete checkpoint")
        return found
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`{field}` must be a path or True, got {path!r}")
    folder = Path(path)
    if (folder / TRAINER_STATE_FILE).is_file():
        return folder
    found = latest_checkpoint(folder) if folder.is_dir() else None
    if found is None:
        raise CheckpointNotFoundError(
            f"`{field}` {os.fspath(path)!r}: no checkpoint at {folder} (expected a checkpoint-N folder or a "
            "folder holding them)"
        )
    return found


def rotate_checkpoints(
    output_dir: str | os.PathLike, save_total_limit: int, keep: str | os.PathLike
) -> list[Path]:
    """Delete the oldest complete checkpoints so at most ``save_total_limit`` remain, never ``keep``
    (the one just written). Each is renamed to a hidden name before removal, so a crash mid-delete never
    leaves a partial ``checkpoint-N``. Returns the deleted paths."""
    if isinstance(save_total_limit, bool) or not isinstance(save_total_limit, int) or save_total_limit < 1:
        raise ValueError(f"`save_total_limit` must be an int >= 1, got {save_total_limit!r}")
    keep = Path(keep).resolve()
    others = [path for _, path in list_checkpoints(output_dir) if path.resolve() != keep]
    doomed = others[: max(0, len(others) - (save_total_limit - 1))]
    for path in doomed:
        trash = path.with_name(f".deleting-{path.name}-{os.getpid()}")
        os.replace(path, trash)
        shutil.rmtree(trash)
    return doomed


# ---------------------------------------------------------------------------------------- save / load
def _check_names(names, field_name: str) -> None:
    for name in names:
        if not isinstance(name, str) or not _FILE_NAME.match(name):
            raise ValueError(
                f"`{field_name}` keys become file names: letters, digits, '_', '-', '.'; got {name!r}"
            )


def save_checkpoint(
    output_dir: str | os.PathLike,
    state: TrainerState,
    *,
    policy=None,
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
    schedulers: Mapping[str, Any] | None = None,
    generators: Mapping[str, Generator] | None = None,
    extra: Mapping[str, Callable[[Path], None]] | None = None,
    save_total_limit: int | None = None,
) -> Path:
    """Write ``output_dir/checkpoint-{state.step}/`` atomically and return its path.

    ``policy`` is a :class:`~comlrl.policy.MultiAgentPolicy`; ``optimizers`` / ``schedulers`` are keyed
    by name (usually the policy name); ``generators`` are the trainer's own named random streams (the
    global ones are always saved); each ``extra[name]`` callback writes its payload into the folder it is
    given (``extra/<name>/``). If anything raises, no ``checkpoint-{step}`` appears and an existing one of
    the same step is left untouched. With ``save_total_limit`` the oldest others are then deleted.
    """
    optimizers, schedulers, extra = dict(optimizers or {}), dict(schedulers or {}), dict(extra or {})
    _check_names(optimizers, "optimizers")
    _check_names(schedulers, "schedulers")
    _check_names(extra, "extra")
    if policy is not None and EXTRA_DIR in policy.layout()["groups"]:
        raise ValueError(f"a policy folder may not be named {EXTRA_DIR!r} (reserved for trainer payloads)")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(output_dir, state.step)
    # Snapshot the random streams before anything else runs: saving must not shift them.
    rng = capture_rng(generators)
    scratch = scratch_dir(output_dir, final.name)
    try:
        if policy is not None:
            policy.save(scratch)
        for kind, objects in (("optimizer", optimizers), ("scheduler", schedulers)):
            for name, obj in objects.items():
                state_dict = obj.state_dict()
                atomic_write_stream(scratch / f"{kind}-{name}.pt", lambda f, sd=state_dict: torch.save(sd, f))
        atomic_write_json(scratch / RNG_STATE_FILE, {"format_version": CHECKPOINT_FORMAT_VERSION, **rng})
        for name, write in extra.items():
            target = scratch / EXTRA_DIR / name
            target.mkdir(parents=True)
            write(target)
        record = {**state.to_json(), MANIFEST_KEY: _manifest(scratch)}
        atomic_write_json(scratch / TRAINER_STATE_FILE, record)
        atomic_replace_dir(scratch, final)
    except BaseException as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        kept = f"latest complete checkpoint: {latest_checkpoint(output_dir) or 'none'} (unchanged)"
        wrapped = write_error(final, exc, note=kept)
        if wrapped is None:
            raise
        raise wrapped from exc
    if save_total_limit is not None:
        rotate_checkpoints(output_dir, save_total_limit, keep=final)
    return final


def extra_dir(checkpoint: str | os.PathLike, name: str) -> Path:
    """Folder holding the payload the ``extra[name]`` callback wrote."""
    path = Path(checkpoint) / EXTRA_DIR / name
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint {checkpoint} has no extra payload {name!r}")
    return path


def _manifest(folder: Path) -> dict[str, int]:
    """``{relative path: size in bytes}`` of every file under ``folder``."""
    return {
        path.relative_to(folder).as_posix(): path.stat().st_size
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def read_trainer_state(checkpoint: str | os.PathLike) -> TrainerState:
    path = Path(checkpoint) / TRAINER_STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {TRAINER_STATE_FILE} in {checkpoint}: not a complete checkpoint")
    return TrainerState.from_json(read_json_object(path), path)


def verify_checkpoint(checkpoint: str | os.PathLike) -> None:
    """Check, without loading anything, that a checkpoint is whole: its trainer state and random streams
    parse with a supported version, and every file its trainer state lists is there with the recorded
    size (checkpoints written before the list existed are checked for the first two only). Raises
    :class:`CheckpointError` naming the first bad file."""
    checkpoint = Path(checkpoint)
    state_path = checkpoint / TRAINER_STATE_FILE
    if not state_path.is_file():
        raise FileNotFoundError(f"no {TRAINER_STATE_FILE} in {checkpoint}: not a complete checkpoint")
    data = read_json_object(state_path)
    TrainerState.from_json(data, state_path)
    manifest = data.get(MANIFEST_KEY, {})
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{state_path}: field {MANIFEST_KEY!r} must map file names to sizes")
    for name, size in manifest.items():
        path = checkpoint / name
        if not path.is_file():
            raise CheckpointError(f"{path}: file is missing from the checkpoint (listed in {TRAINER_STATE_FILE})")
        found = path.stat().st_size
        if found != size:
            raise CheckpointError(
                f"{path}: is {found} bytes but {TRAINER_STATE_FILE} recorded {size}; the file is damaged "
                f"({'truncated' if found < size else 'changed'} since the checkpoint was written)"
            )
    rng_path = checkpoint / RNG_STATE_FILE
    check_format_version(read_json_object(rng_path), rng_path)


def load_checkpoint(
    checkpoint: str | os.PathLike,
    *,
    policy=None,
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
    schedulers: Mapping[str, Any] | None = None,
    generators: Mapping[str, Generator] | None = None,
    restore_global_rng: bool = True,
) -> TrainerState:
    """Restore a checkpoint into live objects and return its trainer state.

    The policy's weights and versions are copied in place (optimizers built on its parameters stay
    valid); each named optimizer / scheduler / generator must be in the checkpoint. The global random
    streams are restored last, so nothing done while loading shifts them. To rebuild the policy instead
    of filling an existing one, use ``MultiAgentPolicy.load(checkpoint)`` (the layout is at its root).
    """
    checkpoint = Path(checkpoint)
    # Everything is read and checked before the first live object changes: no partial load.
    verify_checkpoint(checkpoint)
    state = read_trainer_state(checkpoint)
    rng = read_json_object(checkpoint / RNG_STATE_FILE)
    rng.pop("format_version", None)
    saved: list[tuple[Any, dict]] = []
    for kind, objects in (("optimizer", optimizers), ("scheduler", schedulers)):
        for name, obj in (objects or {}).items():
            path = checkpoint / f"{kind}-{name}.pt"
            if not path.is_file():
                raise FileNotFoundError(f"checkpoint {checkpoint} has no {kind} {name!r} ({path.name})")
            try:
                saved.append((obj, torch.load(path, map_location="cpu", weights_only=True)))
            except Exception as exc:
                raise CheckpointError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from None
    if policy is not None:
        policy.load_weights_(checkpoint)
    for obj, state_dict in saved:
        obj.load_state_dict(state_dict)
    restore_rng(rng, generators, restore_global=restore_global_rng)
    return state
