"""Replay buffer: option validation, weights, allotment and within-round draws as properties, and the
buffer's modes, default sizes, determinism, folder rules and state_dict round trip."""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comlrl.trainers.preference import PreferencePair, PreferenceReplayBuffer, replay_weights
from comlrl.trainers.preference.records import ensure_token_ids, sidecar_path
from comlrl.trainers.preference.replay import (
    REPLAY_MODES,
    allot_draws,
    default_sample_size,
    draw_indices,
    normalize_replay_mode,
    plan_sample,
    validate_replay_options,
)

lams = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
counts = st.integers(min_value=1, max_value=40)


# ---- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "alias, mode",
    [
        ("latest", "current"),
        ("NEW", "current"),
        ("recent_k", "nearest_k"),
        ("last_k", "nearest_k"),
        ("k", "nearest_k"),
        ("lambda", "lambda_decay"),
        ("td_lambda", "lambda_decay"),
        (" td-lambda ", "lambda_decay"),
        ("all_history", "all_history"),
    ],
)
def test_mode_aliases(alias, mode):
    assert normalize_replay_mode(alias) == mode


@pytest.mark.parametrize(
    "mode, k, lam, size, message",
    [
        (
            "current",
            2,
            None,
            None,
            "`preference_replay_k` must be None or 1 when `preference_replay_mode` is 'current', got 2",
        ),
        (
            "current",
            None,
            0.5,
            None,
            "`preference_replay_lambda` is only valid when `preference_replay_mode` is 'lambda_decay'",
        ),
        (
            "current",
            None,
            None,
            8,
            "`preference_replay_sample_size` is only valid when `preference_replay_mode` is 'nearest_k'",
        ),
        (
            "nearest_k",
            None,
            None,
            None,
            "`preference_replay_k` is required when `preference_replay_mode` is 'nearest_k'",
        ),
        ("nearest_k", 0, None, None, "`preference_replay_k` must be >= 1, got 0"),
        ("nearest_k", 2, 0.5, None, "`preference_replay_lambda` is only valid"),
        (
            "all_history",
            2,
            None,
            None,
            "`preference_replay_k` is only valid when `preference_replay_mode` is 'nearest_k'",
        ),
        ("lambda_decay", None, None, None, "`preference_replay_lambda` is required when"),
        ("lambda_decay", None, 1.5, None, r"`preference_replay_lambda` must be in \[0, 1\], got 1.5"),
        ("lambda_decay", None, -0.1, None, r"`preference_replay_lambda` must be in \[0, 1\], got -0.1"),
        ("lambda_decay", None, math.nan, None, r"`preference_replay_lambda` must be in \[0, 1\], got nan"),
        ("lambda_decay", 3, 0.5, None, "`preference_replay_k` is only valid"),
        ("all_history", None, None, 0, "`preference_replay_sample_size` must be >= 1 or None, got 0"),
        ("nearest_k", True, None, None, "`preference_replay_k` must be an integer or None, got True"),
        ("all_history", None, None, 2.5, "`preference_replay_sample_size` must be an integer or None"),
        ("newest", None, None, None, "`preference_replay_mode` must be one of current, nearest_k"),
    ],
)
def test_rejected_options_name_the_field(mode, k, lam, size, message):
    with pytest.raises(ValueError, match=message):
        validate_replay_options(mode, k, lam, size)


def test_accepted_options():
    assert validate_replay_options("current", 1).mode == "current"
    assert validate_replay_options("k", 3, None, 10) == validate_replay_options("nearest_k", 3, None, 10)
    assert validate_replay_options("lambda", None, 0, None).lam == 0.0
    assert validate_replay_options("all_history", None, None, None).sample_size is None


# ---- weights --------------------------------------------------------------------------------------


@given(st.sampled_from(REPLAY_MODES), st.integers(0, 30), st.integers(1, 8), lams)
def test_weights_sum_to_one_and_follow_the_formula(mode, n, k, lam):
    kwargs = {"k": k} if mode == "nearest_k" else {"lam": lam} if mode == "lambda_decay" else {}
    w = replay_weights(mode, n, **kwargs)
    assert len(w) == n
    if n == 0:
        return
    assert math.isclose(sum(w), 1.0, rel_tol=1e-12) and min(w) >= 0
    if mode == "current":
        expected = [0.0] * (n - 1) + [1.0]
    elif mode == "nearest_k":
        m = min(k, n)
        expected = [0.0] * (n - m) + [1 / m] * m
    elif mode == "all_history":
        expected = [1 / n] * n
    else:
        # Independent computation: unnormalised (1 - lam) lam^a by age, oldest first.
        if lam == 1.0:
            expected = [1 / n] * n
        else:
            raw = [(1 - lam) * lam ** (n - 1 - i) for i in range(n)]
            expected = [r / sum(raw) for r in raw]
    assert w == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_lambda_limits_and_reference_values():
    assert replay_weights("lambda_decay", 4, lam=0.0) == [0.0, 0.0, 0.0, 1.0]
    assert replay_weights("lambda_decay", 4, lam=1.0) == [0.25] * 4
    # The seed's example: lam = 0.8 over three datasets, newest to oldest 0.410, 0.328, 0.262.
    assert [round(x, 3) for x in reversed(replay_weights("lambda_decay", 3, lam=0.8))] == [
        0.410,
        0.328,
        0.262,
    ]
    # Approaching 1 from below tends to uniform.
    assert replay_weights("lambda_decay", 5, lam=1 - 1e-9) == pytest.approx([0.2] * 5, rel=1e-6)


# ---- allotment and within-dataset draws -----------------------------------------------------------


def test_allotment_is_unbiased():
    """Mean counts over many fixed-seed allotments match sample_size * w within 4 standard errors.

    Tolerance: the per-dataset mean count over T trials has standard error sqrt(n w (1 - w) / T); a
    4-sigma band would be left by chance with probability about 6e-5 per dataset, and the fixed seed
    makes the outcome deterministic.
    """
    weights = replay_weights("lambda_decay", 5, lam=0.6)
    n, trials = 37, 4000
    rng = np.random.default_rng(2024)
    totals = np.zeros(5)
    seen_counts = set()
    for _ in range(trials):
        c = allot_draws(weights, n, rng)
        assert c.sum() == n
        totals += c
        seen_counts.add(tuple(c))
    mean = totals / trials
    for w, m in zip(weights, mean):
        se = math.sqrt(n * w * (1 - w) / trials)
        assert abs(m - n * w) <= 4 * se, (w, m)
    assert len(seen_counts) > 50  # independent draws: the counts vary (no largest-remainder rounding)


@given(st.integers(0, 60), st.integers(1, 25), st.integers(0, 2**32 - 1))
def test_within_dataset_multiplicities(count, size, seed):
    idx = draw_indices(count, size, np.random.default_rng(seed))
    assert len(idx) == count and all(0 <= i < size for i in idx)
    mult = Counter(idx.tolist())
    if count <= size:
        assert max(mult.values(), default=1) == 1  # no duplicates when the count fits
    else:
        low = count // size
        assert set(range(size)) == set(mult)
        assert set(mult.values()) <= {low, low + 1}


@given(st.lists(st.integers(1, 12), min_size=1, max_size=6), st.integers(1, 80), st.integers(0, 2**32 - 1))
def test_plan_sample_respects_allotment_and_sizes(sizes, sample_size, seed):
    weights = replay_weights("all_history", len(sizes))
    datasets, records = plan_sample(weights, sizes, sample_size, np.random.default_rng(seed))
    assert len(datasets) == len(records) == sample_size
    per_dataset = Counter(datasets.tolist())
    for d, c in per_dataset.items():
        mult = Counter(records[datasets == d].tolist())
        assert all(0 <= r < sizes[d] for r in mult)
        if c <= sizes[d]:
            assert set(mult.values()) == {1}
        else:
            assert len(mult) == sizes[d] and set(mult.values()) <= {c // sizes[d], c // sizes[d] + 1}
    # Determinism under the generator's seed.
    again = plan_sample(weights, sizes, sample_size, np.random.default_rng(seed))
    assert (again[0] == datasets).all() and (again[1] == records).all()


def test_default_sample_size():
    assert default_sample_size(7, [3, 5, 7]) == 7
    assert default_sample_size(0, [3, 5, 0]) == 5
    assert default_sample_size(0, [3, 0, 0]) == 3
    assert default_sample_size(0, []) == 0


# ---- the buffer -------------------------------------------------------------------------------------


def pair(round_: int, i: int) -> PreferencePair:
    """A pair whose texts say which round and record it is."""
    return PreferencePair(
        prompts=[f"r{round_}", "x"],
        winner_completions=[f"w{round_}.{i}", "w"],
        loser_completions=[f"l{round_}.{i}", "l"],
        winner_reward=1.0,
        loser_reward=0.0,
        candidate_reward_mean=0.5,
        prompt_token_ids=[[round_], [1]],
        winner_token_ids=[[round_, i, 2], [3]],
        loser_token_ids=[[i], [4]],
    )


def origin(p: PreferencePair) -> tuple[int, int]:
    r, i = p.winner_completions[0][1:].split(".")
    return int(r), int(i)


def fill(buf: PreferenceReplayBuffer, sizes: list[int]) -> list[list[PreferencePair]]:
    """Add rounds of the given sizes, sampling after each; returns the samples."""
    out = []
    for size in sizes:
        buf.add_round([pair(len(buf.rounds) + 1, i) for i in range(size)])
        out.append(buf.sample())
    return out


def test_current_mode_is_exactly_the_round(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "replay")
    rounds = [[pair(1, i) for i in range(3)], [], [pair(3, i) for i in range(2)]]
    for pairs in rounds:
        path = buf.add_round(pairs)
        assert buf.sample() == pairs
    assert path.name == "iteration_0003.json"
    assert [r.num_pairs for r in buf.rounds] == [3, 0, 2]


# Buffer-level properties write and fsync real files per example: fewer examples keep them quick.
@settings(max_examples=20)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=7), st.integers(1, 4), st.integers(0, 1000))
def test_nearest_k_window_skips_empty_rounds(sizes, k, seed):
    with tempfile.TemporaryDirectory() as tmp:
        buf = PreferenceReplayBuffer(Path(tmp) / "r", mode="nearest_k", k=k, seed=seed)
        samples = fill(buf, sizes)
    for t, sample in enumerate(samples):
        history = sizes[: t + 1]
        nonempty = [r + 1 for r, s in enumerate(history) if s > 0]
        window = set(nonempty[-k:])
        # Default size: this round's pairs, or the newest non-empty round's when this one is empty.
        assert len(sample) == default_sample_size(history[-1], history)
        assert {origin(p)[0] for p in sample} <= window
        for p in sample:
            assert p.has_token_ids and p.winner_token_ids[0][:2] == list(origin(p))  # the sampled ids


def test_historic_modes_draw_from_every_eligible_round_with_equal_weight(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="all_history", sample_size=3000, seed=1)
    fill(buf, [2, 0, 50])
    sample = buf.sample()
    rounds = Counter(origin(p)[0] for p in sample)
    assert set(rounds) == {1, 3}
    assert abs(rounds[1] - 1500) < 4 * math.sqrt(3000 * 0.25)  # equal weight whatever the size
    # ~1500 draws from round 1's two records: each appears floor(c / 2) or floor(c / 2) + 1 times.
    records_of_1 = Counter(origin(p) for p in sample if origin(p)[0] == 1)
    assert abs(records_of_1[(1, 0)] - records_of_1[(1, 1)]) <= 1
    # The combined sample is shuffled: round 1's draws are not all at one end.
    first_half = sum(origin(p)[0] == 1 for p in sample[:1500])
    assert 0.35 * rounds[1] < first_half < 0.65 * rounds[1]


def test_lambda_zero_samples_only_the_newest(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="lambda_decay", lam=0.0, sample_size=40, seed=2)
    samples = fill(buf, [5, 5, 5])
    assert {origin(p)[0] for p in samples[-1]} == {3}
    assert Counter(origin(p) for p in samples[-1]).most_common(1)[0][1] == 8  # 40 / 5, cycled exactly


def test_no_eligible_round_gives_an_empty_sample(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="all_history", sample_size=5)
    buf.add_round([])
    assert buf.sample() == []
    with pytest.raises(RuntimeError, match=r"call `add_round\(\)` first"):
        PreferenceReplayBuffer(tmp_path / "other").sample()


def test_same_seed_same_samples_whatever_the_global_rngs(tmp_path):
    def run(folder, disturb):
        buf = PreferenceReplayBuffer(folder, mode="lambda_decay", lam=0.7, sample_size=25, seed=9)
        out = []
        for size in (6, 0, 4, 9):
            if disturb:
                random.seed(size)
                np.random.seed(size)
                torch.manual_seed(size)
                random.random(), np.random.rand(), torch.rand(1)
            buf.add_round([pair(len(buf.rounds) + 1, i) for i in range(size)])
            out.append([origin(p) for p in buf.sample()])
        return out

    a, b = run(tmp_path / "a", False), run(tmp_path / "b", True)
    assert a == b
    other = PreferenceReplayBuffer(tmp_path / "c", mode="lambda_decay", lam=0.7, sample_size=25, seed=10)
    fill(other, [6, 0, 4])
    other.add_round([pair(4, i) for i in range(9)])
    assert [origin(p) for p in other.sample()] != a[-1]


@settings(max_examples=15)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=6), st.integers(1, 5), st.integers(0, 99))
def test_state_dict_round_trip_gives_the_same_future_samples(sizes, cut, seed):
    cut = min(cut, len(sizes) - 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        straight = PreferenceReplayBuffer(tmp / "a", mode="all_history", sample_size=7, seed=seed)
        expected = fill(straight, sizes)

        first = PreferenceReplayBuffer(tmp / "b", mode="all_history", sample_size=7, seed=seed)
        fill(first, sizes[:cut])
        state = json.loads(json.dumps(first.state_dict()))  # plain values
        # Restore into another folder, as a checkpoint restore would, with the files copied back.
        for path in first.files():
            (tmp / "c").mkdir(exist_ok=True)
            shutil.copy(path, tmp / "c" / path.name)
        resumed = PreferenceReplayBuffer(
            tmp / "c", mode="all_history", sample_size=7, seed=12345, resume=True
        )
        resumed.load_state_dict(state)
        rest = fill(resumed, sizes[cut:])
    assert [[p.to_record() for p in s] for s in rest] == [[p.to_record() for p in s] for s in expected[cut:]]


def test_state_survives_torch_weights_only(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="nearest_k", k=2, seed=3)
    fill(buf, [3, 4])
    torch.save(buf.state_dict(), tmp_path / "state.pt")
    assert torch.load(tmp_path / "state.pt", weights_only=True) == buf.state_dict()


def test_current_mode_after_restore_reads_the_round_back(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r")
    fill(buf, [3])
    resumed = PreferenceReplayBuffer(tmp_path / "r", resume=True)
    resumed.load_state_dict(buf.state_dict())
    assert [p.to_record() for p in resumed.sample()] == [pair(1, i).to_record() for i in range(3)]


def test_fresh_buffer_refuses_a_folder_with_round_files(tmp_path):
    fill(PreferenceReplayBuffer(tmp_path / "r"), [2])
    with pytest.raises(FileExistsError, match=r"`preference_replay_dir` .*/r already holds round files"):
        PreferenceReplayBuffer(tmp_path / "r")
    waiting = PreferenceReplayBuffer(tmp_path / "r", resume=True)
    with pytest.raises(FileExistsError, match=r"already holds iteration_0001.json.*load_state_dict"):
        waiting.add_round([pair(1, 0)])


def test_restore_overwrites_rounds_after_the_checkpoint(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="all_history", seed=4)
    fill(buf, [2])
    state = buf.state_dict()
    fill(buf, [3])  # a round the crashed run wrote after the checkpoint
    resumed = PreferenceReplayBuffer(tmp_path / "r", mode="all_history", seed=4, resume=True)
    resumed.load_state_dict(state)
    resumed.add_round([pair(2, 0)])
    assert [r.num_pairs for r in resumed.rounds] == [2, 1]
    assert {origin(p) for p in resumed.sample()} <= {(1, 0), (1, 1), (2, 0)}


def test_load_state_dict_errors(tmp_path):
    buf = PreferenceReplayBuffer(tmp_path / "r", mode="nearest_k", k=2)
    fill(buf, [2, 2])
    state = buf.state_dict()
    with pytest.raises(ValueError, match=r"checkpoint's `preference_replay_k` is 2 but this buffer's is 3"):
        PreferenceReplayBuffer(tmp_path / "r", mode="nearest_k", k=3, resume=True).load_state_dict(state)
    with pytest.raises(ValueError, match=r"checkpoint's `preference_replay_mode` is 'nearest_k'"):
        PreferenceReplayBuffer(tmp_path / "r", resume=True).load_state_dict(state)
    with pytest.raises(
        FileNotFoundError, match="round file iteration_0001.json of the checkpoint is missing"
    ):
        PreferenceReplayBuffer(tmp_path / "empty", mode="nearest_k", k=2).load_state_dict(state)


def test_rounds_without_sidecar_are_tokenized_once(tmp_path):
    class Tok:
        calls = 0

        def encode(self, text, add_special_tokens=True):
            Tok.calls += 1
            return [len(text)]

    buf = PreferenceReplayBuffer(tmp_path / "r", mode="all_history", sample_size=20, seed=5)
    buf.add_round([pair(1, 0), pair(1, 1)])
    sidecar_path(tmp_path / "r" / "iteration_0001.json").unlink()  # as if written elsewhere
    buf.add_round([pair(2, 0)])
    first = buf.sample()
    from_file = [p for p in first if origin(p)[0] == 1]
    assert from_file and all(p.prompt_token_ids is None for p in from_file)
    ensure_token_ids(first, Tok())
    assert Tok.calls == 2 * 6  # two distinct records x 6 sequences, whatever the draw count
    ensure_token_ids(buf.sample(), Tok())
    assert Tok.calls == 12
