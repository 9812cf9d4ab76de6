"""Pair records, round files and id sidecars: round trips, partial reads, and malformed-file errors."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comlrl.trainers.preference import PreferencePair, RoundFile, RoundFileError, read_round, write_round
from comlrl.trainers.preference.records import (
    RECORD_FIELDS,
    ensure_token_ids,
    list_round_files,
    round_file_name,
    sidecar_path,
)

SEED_RECORD = {
    "prompts": ["<agent 1 prompt>", "<agent 2 prompt>"],
    "winner_completions": ["<agent 1 response>", "<agent 2 response>"],
    "loser_completions": ["<agent 1 response>", "<agent 2 response>"],
    "winner_reward": 0.92,
    "loser_reward": 0.41,
    "candidate_reward_mean": 0.63,
    "raw_rewards": [0.92, 0.41],
    "target_raw_reward": 0.92,
    "comparator_raw_reward": 0.41,
}


class CountingTokenizer:
    """Byte-level toy tokenizer: id = byte + 10; a BOS of 1 with special tokens; counts calls."""

    eos_token_id = 2

    def __init__(self, offset: int = 10) -> None:
        self.offset = offset
        self.calls = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls += 1
        return ([1] if add_special_tokens else []) + [b + self.offset for b in text.encode()]


def make_pair(i: int, agents: int = 2, ids: bool = True) -> PreferencePair:
    return PreferencePair(
        prompts=[f"prompt {i}/{a} ü" for a in range(agents)],
        winner_completions=[f"win {i}/{a}" for a in range(agents)],
        loser_completions=[f'lose {i}/{a} "q"\n' for a in range(agents)],
        winner_reward=1.0 + i,
        loser_reward=float(i),
        candidate_reward_mean=0.5 + i,
        raw_rewards=[2.0 + i, 1.0],
        target_raw_reward=2.0 + i,
        comparator_raw_reward=1.0,
        prompt_token_ids=[[1, i, a] for a in range(agents)] if ids else None,
        winner_token_ids=[[i, a, 2] for a in range(agents)] if ids else None,
        loser_token_ids=[[i + 1000 * a] for a in range(agents)] if ids else None,
    )


def records(pairs):
    return [p.to_record() for p in pairs]


def all_ids(p):
    return (p.prompt_token_ids, p.winner_token_ids, p.loser_token_ids)


# ---- the record ---------------------------------------------------------------------------------


def test_record_has_exactly_the_seed_fields_and_round_trips():
    pair = PreferencePair.from_record(SEED_RECORD)
    assert list(pair.to_record()) == list(SEED_RECORD) == list(RECORD_FIELDS)
    assert pair.to_record() == SEED_RECORD
    assert all_ids(pair) == (None, None, None) and not pair.has_token_ids
    base = PreferencePair(["p"], ["w"], ["l"], 1.0, 0.0, 0.5)
    assert base.to_record()["raw_rewards"] == [] and base.to_record()["target_raw_reward"] is None


@pytest.mark.parametrize(
    "change, message",
    [
        ({"winner_reward": None}, "'winner_reward' must be a number, got NoneType"),
        ({"loser_reward": True}, "'loser_reward' must be a number, got bool"),
        ({"prompts": "one"}, "'prompts' must be a list of strings"),
        ({"loser_completions": ["a", 3]}, "'loser_completions' must be a list of strings"),
        ({"raw_rewards": 0.5}, "'raw_rewards' must be a list of numbers"),
        ({"raw_rewards": [0.5, "x"]}, r"'raw_rewards\[1\]' must be a number"),
        ({"comparator_raw_reward": "0.4"}, "'comparator_raw_reward' must be a number"),
        ({"extra": 1}, "unknown field.*'extra'"),
        (
            {"winner_completions": ["only one"]},
            r"`winner_completions` must hold one completion per agent \(2\), got 1",
        ),
    ],
)
def test_from_record_errors_name_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        PreferencePair.from_record({**SEED_RECORD, **change})


def test_from_record_missing_field_and_non_object():
    record = dict(SEED_RECORD)
    del record["candidate_reward_mean"]
    with pytest.raises(ValueError, match="missing field.*'candidate_reward_mean'"):
        PreferencePair.from_record(record)
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        PreferencePair.from_record([1, 2])


def test_token_id_fields_need_one_entry_per_agent():
    with pytest.raises(ValueError, match=r"`loser_token_ids` must hold one id list per agent \(2\)"):
        PreferencePair(["a", "b"], ["w", "w"], ["l", "l"], 1.0, 0.0, 0.5, loser_token_ids=[[1]])


# ---- tokenizing what is unknown ------------------------------------------------------------------


def test_ensure_token_ids_fills_only_unknown_ids_and_only_once():
    pair = make_pair(3)
    pair.winner_token_ids = [None, [9, 9]]  # agent 0's winner came from outside
    pair.loser_token_ids = None
    tok_a, tok_b = CountingTokenizer(10), CountingTokenizer(20)
    ensure_token_ids([pair, pair], [tok_a, tok_b], append_eos=True)
    assert pair.prompt_token_ids == [[1, 3, 0], [1, 3, 1]]  # sampled ids untouched
    assert pair.winner_token_ids == [[b + 10 for b in b"win 3/0"] + [2], [9, 9]]
    assert pair.loser_token_ids[1] == [b + 20 for b in b'lose 3/1 "q"\n'] + [2]
    assert (tok_a.calls, tok_b.calls) == (2, 1)  # the second pass found everything known
    assert pair.has_token_ids


def test_ensure_token_ids_prompt_gets_special_tokens_and_one_shared_tokenizer():
    pair = PreferencePair.from_record(SEED_RECORD)
    tok = CountingTokenizer()
    pair.ensure_token_ids(tok)
    assert pair.prompt_token_ids[0][0] == 1 and pair.winner_token_ids[0][0] != 1
    assert tok.calls == 6
    with pytest.raises(ValueError, match="`tokenizers` must hold 1 or 2 tokenizers, got 3"):
        PreferencePair.from_record(SEED_RECORD).ensure_token_ids([tok] * 3)


# ---- round files -------------------------------------------------------------------------------


def test_round_file_round_trip_with_ids(tmp_path):
    pairs = [make_pair(i) for i in range(5)]
    pairs[2].winner_token_ids = [None, [5, 5]]  # partially known ids survive too
    pairs[4] = make_pair(4, ids=False)
    path = write_round(tmp_path / round_file_name(1), 1, pairs)
    assert path.name == "iteration_0001.json" and sidecar_path(path).name == "iteration_0001.ids.bin"
    payload = json.loads(path.read_text(encoding="utf-8"))
    assert payload == {"format_version": 1, "iteration": 1, "num_pairs": 5, "pairs": records(pairs)}
    assert "ü" in path.read_text(encoding="utf-8")  # written as UTF-8, not \u escapes
    back = read_round(path)
    assert back.iteration == 1 and records(back.pairs) == records(pairs)
    assert [all_ids(p) for p in back.pairs] == [all_ids(p) for p in pairs]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iteration_0001.ids.bin", "iteration_0001.json"]


def test_empty_round_is_written(tmp_path):
    path = write_round(tmp_path / round_file_name(2), 2, [])
    assert json.loads(path.read_text()) == {"format_version": 1, "iteration": 2, "num_pairs": 0, "pairs": []}
    assert read_round(path).pairs == [] and RoundFile(path).num_pairs == 0


@settings(max_examples=25)  # one written round per example
@given(st.lists(st.integers(0, 9), max_size=12), st.integers(1, 3))
def test_partial_load_returns_the_requested_records(tmp_path_factory, indices, agents):
    folder = tmp_path_factory.mktemp("partial")
    pairs = [make_pair(i, agents=agents) for i in range(10)]
    path = write_round(folder / round_file_name(7), 7, pairs)
    loaded = RoundFile(path).load(indices)
    assert records(loaded) == [pairs[i].to_record() for i in indices]
    assert [all_ids(p) for p in loaded] == [all_ids(pairs[i]) for i in indices]


def test_a_draw_reads_only_the_drawn_records(tmp_path):
    pairs = [make_pair(i) for i in range(4)]
    path = write_round(tmp_path / round_file_name(1), 1, pairs)
    data = bytearray(path.read_bytes())
    start = data.index(b'{"prompts"')
    data[start : start + 10] = b"#" * 10  # damage record 0 only, keeping every byte offset
    path.write_bytes(bytes(data))
    assert records(RoundFile(path).load([3, 1])) == [pairs[3].to_record(), pairs[1].to_record()]
    with pytest.raises(
        RoundFileError, match=r"iteration_0001.json: record 0 \(bytes \d+\.\.\d+\) is damaged"
    ):
        RoundFile(path).load([2, 0])
    with pytest.raises(RoundFileError, match="iteration_0001.json: not valid JSON"):
        read_round(path)


def test_load_index_out_of_range(tmp_path):
    path = write_round(tmp_path / round_file_name(1), 1, [make_pair(0)])
    with pytest.raises(IndexError, match=r"record 1 out of range \(the round holds 1\)"):
        RoundFile(path).load([1])


def test_round_without_sidecar_is_parsed_once_and_tokenized_once(tmp_path):
    pairs = [make_pair(i) for i in range(3)]
    path = write_round(tmp_path / round_file_name(1), 1, pairs)
    sidecar_path(path).unlink()
    rf = RoundFile(path)
    assert not rf.has_sidecar and rf.num_pairs == 3
    first = rf.load([2, 0])
    assert records(first) == [pairs[2].to_record(), pairs[0].to_record()]
    assert all_ids(first[0]) == (None, None, None)
    tok = CountingTokenizer()
    ensure_token_ids(first, tok)
    again = rf.load([0, 2])
    assert again[0] is first[1] and again[1].has_token_ids
    ensure_token_ids(again, tok)
    assert tok.calls == 2 * 6  # two pairs x (prompt, winner, loser) x two agents, once each


def test_list_round_files_sorted_and_filtered(tmp_path):
    for n in (10, 2, 1):
        write_round(tmp_path / round_file_name(n), n, [])
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "iteration_3.json").write_text("{}")  # fewer than four digits: not a round file
    assert [p.name for p in list_round_files(tmp_path)] == [
        "iteration_0001.json",
        "iteration_0002.json",
        "iteration_0010.json",
    ]
    assert list_round_files(tmp_path / "absent") == []


def test_write_errors(tmp_path):
    bad = make_pair(0)
    bad.winner_reward = math.nan
    with pytest.raises(ValueError, match="pair 0 of iteration 3 cannot be written as JSON"):
        write_round(tmp_path / round_file_name(3), 3, [bad])
    with pytest.raises(ValueError, match="`iteration` must be an integer >= 1, got 0"):
        round_file_name(0)
    negative = make_pair(1)
    negative.loser_token_ids = [[-1], [2]]
    with pytest.raises(ValueError, match="token ids must be >= 0"):
        write_round(tmp_path / round_file_name(4), 4, [negative])
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left behind


# ---- malformed files -----------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path):
    pairs = [make_pair(i) for i in range(3)]
    return write_round(tmp_path / round_file_name(1), 1, pairs), pairs


def test_truncated_round_without_sidecar(written):
    path, _ = written
    sidecar_path(path).unlink()
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(
        RoundFileError, match=r"iteration_0001.json: not valid JSON \(the file looks truncated\)"
    ):
        RoundFile(path).load([0])


def test_truncated_round_with_sidecar(written):
    path, _ = written
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(
        RoundFileError, match="iteration_0001.json: is \\d+ bytes but its sidecar .* describes"
    ):
        RoundFile(path).load([0])
    with pytest.raises(RoundFileError, match="iteration_0001.json"):
        read_round(path)


@pytest.mark.parametrize(
    "payload, message",
    [
        ([], "expected a JSON object, got list"),
        ({"iteration": 1, "pairs": []}, "missing key 'num_pairs'"),
        ({"iteration": 0, "num_pairs": 0, "pairs": []}, "'iteration' must be an integer >= 1, got 0"),
        ({"iteration": 1, "num_pairs": 2, "pairs": [SEED_RECORD]}, "'num_pairs' is 2 but 'pairs' holds 1"),
        ({"iteration": 1, "num_pairs": 1, "pairs": {}}, "'pairs' must be a list"),
        (
            {"iteration": 1, "num_pairs": 2, "pairs": [SEED_RECORD, {**SEED_RECORD, "winner_reward": "x"}]},
            "record 1: record field 'winner_reward' must be a number",
        ),
    ],
)
def test_malformed_round_contents(tmp_path, payload, message):
    path = tmp_path / "iteration_0001.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(RoundFileError, match=f"iteration_0001.json: {message}"):
        read_round(path)


def test_missing_round_file(tmp_path):
    with pytest.raises(RoundFileError, match="iteration_0009.json: round file not found"):
        read_round(tmp_path / "iteration_0009.json")
    with pytest.raises(RoundFileError, match="round file not found"):
        RoundFile(tmp_path / "iteration_0009.json")


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b"", "sidecar is empty"),
        (lambda b: b"NOTMAGIC" + b[8:], "not a preference id sidecar"),
        (lambda b: b[:20], "truncated header"),
        (lambda b: b[: len(b) // 2], "truncated \\(array"),
        (lambda b: b[:16] + b"{" * 8 + b[24:], "malformed sidecar header"),
    ],
    ids=["empty", "magic", "header", "arrays", "json"],
)
def test_malformed_sidecar(written, damage, message):
    path, _ = written
    side = sidecar_path(path)
    side.write_bytes(damage(side.read_bytes()))
    with pytest.raises(RoundFileError, match=f"iteration_0001.ids.bin: {message}"):
        RoundFile(path)


def test_sidecar_of_another_round_is_detected(tmp_path):
    a = write_round(tmp_path / "a" / round_file_name(1), 1, [make_pair(i) for i in range(3)])
    b = write_round(tmp_path / "b" / round_file_name(1), 1, [make_pair(i) for i in range(4)])
    sidecar_path(a).write_bytes(sidecar_path(b).read_bytes())
    with pytest.raises(RoundFileError, match="do not belong together"):
        read_round(a)
    with pytest.raises(RoundFileError, match="do not belong together"):
        RoundFile(a).load([0])


def test_ensure_token_ids_with_a_real_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    pair = PreferencePair.from_record(SEED_RECORD)
    pair.ensure_token_ids([tok, tok], append_eos=True)
    assert pair.prompt_token_ids[1] == tok.encode("<agent 2 prompt>", add_special_tokens=True)
    assert pair.winner_token_ids[0] == tok.encode("<agent 1 response>", add_special_tokens=False) + [
        tok.eos_token_id
    ]
    assert all(isinstance(t, int) for ids in pair.loser_token_ids for t in ids)
