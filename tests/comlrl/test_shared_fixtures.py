"""A replay round written by the public CoMLRL library (no sidecar) reads here and trains on ids
tokenized once from its text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import AutoTokenizer

from comlrl.trainers.preference.records import RoundFile, read_round

FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "public_comlrl_iteration_0001.json"


def test_public_round_file_reads_with_every_record_field(tmp_path):
    round_ = read_round(FIXTURE)
    assert round_.iteration == 1 and len(round_.pairs) == 2
    first = round_.pairs[0]
    assert first.winner_completions == ["apple", "red"]
    assert first.raw_rewards == [0.92, 0.41]
    assert (first.target_raw_reward, first.comparator_raw_reward) == (0.92, 0.41)
    assert not first.has_token_ids
    assert first.to_record() == json.loads(FIXTURE.read_text())["pairs"][0]


def test_records_without_sidecar_are_tokenized_once(tmp_path, tiny_model_path):
    path = Path(shutil.copy(FIXTURE, tmp_path / "iteration_0001.json"))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    source = RoundFile(path)
    pairs = source.load([1, 0])
    for pair in pairs:
        pair.ensure_token_ids([tokenizer, tokenizer])
    again = source.load([0])[0]
    assert again is pairs[1]  # the same object: its ids are not tokenized a second time
    assert again.winner_token_ids[0] == tokenizer("apple", add_special_tokens=False)["input_ids"]
