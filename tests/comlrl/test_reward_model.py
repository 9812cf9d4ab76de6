"""MARLHF's joint reward model: pooling, Bradley–Terry, one forward per batch, truncation budgets,
seeded fitting, the oracle form, save / load and the source / device rules."""

from __future__ import annotations

import logging
import math
import random
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from comlrl.trainers.core.oracle import Oracle
from comlrl.trainers.preference.config import MARLHFConfig
from comlrl.trainers.preference.records import PreferencePair
from comlrl.trainers.preference.reward_model import (
    JointRewardModel,
    RewardModelOracle,
    bradley_terry_loss,
    evaluate_reward_model,
    fair_allocation,
    fit_reward_model,
    fit_reward_model_from_config,
    format_joint_text,
    joint_budget,
    last_token_index,
    pairwise_accuracy,
    resolve_reward_model_device,
    resolve_reward_model_source,
    split_pairs,
    truncation_message,
)

WORDS = "the a cat dog red blue green tree house river road sun moon small big fast slow".split()


def _model(path, **kwargs) -> JointRewardModel:
    return JointRewardModel.from_source(path, **kwargs)


def _keyword_pairs(n: int, seed: int, agents: int = 2) -> list[dict]:
    """Winners: every agent's line holds "apple"; losers: the same kind of line with "stone" instead
    (same length distribution, so only the keyword separates them)."""
    rng = random.Random(seed)

    def line(keyword: str) -> str:
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 6))]
        words.insert(rng.randint(0, len(words)), keyword)
        return " ".join(words)

    return [
        {
            "prompts": [f"Agent {k} writes a short line." for k in range(agents)],
            "winner_completions": [line("apple") for _ in range(agents)],
            "loser_completions": [line("stone") for _ in range(agents)],
        }
        for _ in range(n)
    ]


class _ForwardCounter:
    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self.batch_sizes: list[int] = []
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module, args, output) -> None:
        self.calls += 1
        self.batch_sizes.append(output[0].shape[0])

    def remove(self) -> None:
        self._handle.remove()


# ---- pure functions ---------------------------------------------------------------------------------


def test_last_token_index_for_left_right_and_inner_padding():
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 0, 0, 0, 0], [0, 1, 1, 0, 0]])
    assert last_token_index(mask).tolist() == [2, 4, 0, 2]
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        last_token_index(torch.tensor([[1, 0], [0, 0]]))


@given(
    st.lists(
        st.tuples(st.floats(-30, 30, allow_nan=False), st.floats(-30, 30, allow_nan=False)),
        min_size=1,
        max_size=12,
    )
)
def test_bradley_terry_loss_and_gradient_match_independent_computation(pairs):
    chosen = torch.tensor([w for w, _ in pairs], dtype=torch.float64, requires_grad=True)
    rejected = torch.tensor([r for _, r in pairs], dtype=torch.float64, requires_grad=True)
    loss = bradley_terry_loss(chosen, rejected)
    loss.backward()
    count = len(pairs)
    # log(1 + e^-d) and d/dd of it, written out with math, stable for either sign of d
    expected = sum(max(-(w - r), 0.0) + math.log1p(math.exp(-abs(w - r))) for w, r in pairs) / count
    assert loss.item() == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for i, (w, r) in enumerate(pairs):
        d = w - r
        sig_neg = math.exp(-d) / (1 + math.exp(-d)) if d >= 0 else 1 / (1 + math.exp(d))
        assert chosen.grad[i].item() == pytest.approx(-sig_neg / count, rel=1e-9, abs=1e-15)
        assert rejected.grad[i].item() == pytest.approx(sig_neg / count, rel=1e-9, abs=1e-15)


def test_bradley_terry_loss_is_finite_for_huge_margins_and_checks_shapes():
    loss = bradley_terry_loss(torch.tensor([-1000.0, 1000.0]), torch.tensor([0.0, 0.0]))
    assert loss.item() == pytest.approx(500.0)
    with pytest.raises(ValueError, match="same length"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="at least one pair"):
        bradley_terry_loss(torch.zeros(0), torch.zeros(0))


def test_pairwise_accuracy_counts_ties_as_wrong():
    assert pairwise_accuracy(torch.tensor([1.0, 2.0, 3.0, 0.0]), torch.tensor([0.0, 2.0, 4.0, -1.0])) == 0.5
    assert math.isnan(pairwise_accuracy(torch.zeros(0), torch.zeros(0)))


@given(st.lists(st.integers(0, 40), min_size=1, max_size=6), st.integers(0, 200))
def test_fair_allocation_is_max_min_fair(lengths, budget):
    keep = fair_allocation(lengths, budget)
    assert sum(keep) == min(budget, sum(lengths))
    assert all(0 <= k <= length for k, length in zip(keep, lengths))
    for k, length in zip(keep, lengths):
        if k < length:  # a cut piece is never more than one token below any other piece
            assert all(k >= other - 1 for other in keep), (lengths, budget, keep)


@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=4),
    st.integers(0, 150),
)
def test_joint_budget_cuts_prompts_first_and_keeps_every_response(lengths, budget):
    prompts, responses = [p for p, _ in lengths], [r for _, r in lengths]
    if budget < len(lengths) and sum(responses) > budget:
        with pytest.raises(ValueError, match="cannot keep one response token"):
            joint_budget(prompts, responses, budget)
        return
    p_keep, r_keep = joint_budget(prompts, responses, budget)
    assert sum(p_keep) + sum(r_keep) == min(budget, sum(prompts) + sum(responses))
    if any(k < r for k, r in zip(r_keep, responses)):
        assert p_keep == [0] * len(prompts)  # responses are cut only once prompts are gone
    assert all(k >= min(1, r) for k, r in zip(r_keep, responses))
    assert joint_budget(prompts, responses, None) == (prompts, responses)


def test_split_pairs_is_seeded_disjoint_and_validates_the_fraction():
    pairs = list(range(30))
    train, held = split_pairs(pairs, 0.1, seed=3)
    assert len(held) == 3 and sorted(train + held) == pairs
    assert split_pairs(pairs, 0.1, seed=3) == (train, held)
    assert split_pairs(pairs, 0.1, seed=4) != (train, held)
    assert split_pairs(pairs, 0.0, seed=3) == (pairs, [])
    assert split_pairs([7], 0.5, seed=3) == ([7], [])
    assert len(split_pairs(pairs[:3], 0.9, seed=0)[0]) == 1  # at least one training pair stays
    with pytest.raises(ValueError, match="reward_eval_fraction"):
        split_pairs(pairs, 1.0, seed=0)


def test_reward_model_source_needs_a_name_for_unnamed_actors():
    assert resolve_reward_model_source("test-tiny", [None, None]) == "test-tiny"
    assert resolve_reward_model_source(None, ["small", "small"]) == "small"
    with pytest.raises(ValueError, match="`reward_model_name` must be set"):
        resolve_reward_model_source(None, [None, None])
    with pytest.raises(ValueError, match="`reward_model_name` must be set"):
        resolve_reward_model_source(None, [])
    with pytest.raises(ValueError, match="reward_model_name"):
        resolve_reward_model_source("  ", ["small"])


def test_reward_model_device_defaults_to_the_first_agent_device():
    assert resolve_reward_model_device(None, torch.device("cpu")) == "cpu"
    assert resolve_reward_model_device(None, "cuda:1") == "cuda:1"  # parsed, never a fixed cuda:0
    assert resolve_reward_model_device("cpu", "cuda:1") == "cpu"
    with pytest.raises(ValueError, match="reward_model_device"):
        resolve_reward_model_device("gpu-7", "cpu")


# ---- the model --------------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["left", "right"])
def test_pooling_at_last_real_token_matches_unpadded_forward(tiny_model_path, side):
    model = _model(tiny_model_path, seed=1, padding_side=side)
    prompts = [["Say hi", "Say bye"], ["Count", "Sing a very long song about the river and the sun"], ["x", "y"]]
    responses = [["hi there", "bye"], ["one two three four five", "la la"], ["z", "w"]]
    encoding = model.encode(prompts, responses)
    assert len({len(ids) for ids in encoding.input_ids}) == 3  # padding really happens
    batched = model.score_ids(encoding.input_ids).detach()
    single = torch.stack([model.score_ids([ids]).detach()[0] for ids in encoding.input_ids])
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)
    # the scalar is the head at the last hidden state of the unpadded sequence
    ids = torch.tensor([encoding.input_ids[0]])
    with torch.no_grad():
        hidden = model.base(input_ids=ids, attention_mask=torch.ones_like(ids))[0][0, -1]
        torch.testing.assert_close(batched[0], model.head(hidden.float())[0], atol=1e-5, rtol=1e-5)


def test_absolute_position_backbone_scores_left_padded_rows_as_unpadded(tiny_model_path):
    """GPT-2 adds absolute position embeddings, so left padding is right only with mask-based positions
    (a rotary model like test-tiny cannot tell a uniform shift)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from comlrl.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_path)
    torch.manual_seed(0)
    backbone = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=256))
    model = JointRewardModel(backbone.eval(), tokenizer, seed=0, padding_side="left")
    assert model.hidden_size == 32 and model.effective_max_length == 256
    encoding = model.encode([["a", "b"], ["a long prompt with many words", "b"]], [["c", "d"], ["e", "f g h"]])
    batched = model.score_ids(encoding.input_ids).detach()
    single = torch.stack([model.score_ids([ids]).detach()[0] for ids in encoding.input_ids])
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)


def test_left_and_right_padding_give_the_same_scores(tiny_model_path):
    left = _model(tiny_model_path, seed=1, padding_side="left")
    right = _model(tiny_model_path, seed=1, padding_side="right")
    prompts, responses = [["a", "b"], ["a much longer prompt here", "b"]], [["c", "d"], ["e", "f g h i j"]]
    torch.testing.assert_close(left.score(prompts, responses)[0], right.score(prompts, responses)[0], atol=1e-5, rtol=1e-5)


def test_joint_text_round_trips_through_the_tokenizer(tiny_model_path):
    model = _model(tiny_model_path)
    prompts, responses = ["Plan the route.", "Check the plan."], ["Go north then east.", "Looks right."]
    encoding = model.encode([prompts], [responses])
    assert encoding.truncated == [False]
    text = format_joint_text(prompts, responses)
    assert text.startswith("Joint multi-agent response\n\nAgent 1 prompt:\nPlan the route.\n\nAgent 1 response:\n")
    assert model.tokenizer.decode(encoding.input_ids[0]) == text + model.tokenizer.eos_token


def test_head_initialisation_is_seeded(tiny_model_path):
    a, b, c = (_model(tiny_model_path, seed=s) for s in (5, 5, 6))
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)
    assert a.head.bias is None and a.head.weight.dtype == torch.float32


def test_winners_and_losers_share_one_forward(tiny_model_path):
    model = _model(tiny_model_path, seed=2)
    pairs = _keyword_pairs(3, seed=0)
    winners = model.encode([p["prompts"] for p in pairs], [p["winner_completions"] for p in pairs])
    losers = model.encode([p["prompts"] for p in pairs], [p["loser_completions"] for p in pairs])
    counter = _ForwardCounter(model.base)
    chosen, rejected = model.pair_rewards(winners.input_ids, losers.input_ids)
    counter.remove()
    assert counter.calls == 1 and counter.batch_sizes == [6]
    torch.testing.assert_close(chosen, model.score_ids(winners.input_ids), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rejected, model.score_ids(losers.input_ids), atol=1e-5, rtol=1e-5)


def _find(ids: list[int], pattern: list[int]) -> int:
    for start in range(len(ids) - len(pattern) + 1):
        if ids[start : start + len(pattern)] == pattern:
            return start
    raise AssertionError(f"{pattern} not in {ids}")


@given(
    st.lists(st.tuples(st.integers(0, 25), st.integers(0, 25)), min_size=1, max_size=3),
    st.integers(0, 60),
)
def test_truncation_never_drops_a_response_and_keeps_heads(shared_model, agents, slack):
    model = shared_model
    rng = random.Random(len(agents) * 1000 + slack)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(p)) for p, _ in agents]
    responses = [" ".join(rng.choice(WORDS) for _ in range(r)) for _, r in agents]
    full = model.encode([prompts], [responses]).input_ids[0]
    fixed = len(full) - sum(len(model._ids([t])[0]) for t in prompts + responses)
    model.max_length = fixed + len(agents) + slack
    try:
        encoding = model.encode([prompts], [responses])
    finally:
        model.max_length = None
    ids = encoding.input_ids[0]
    assert len(ids) <= fixed + len(agents) + slack
    assert encoding.truncated == [len(ids) < len(full)]
    for k, response in enumerate(responses):
        label = model._ids([f"\n\nAgent {k + 1} response:\n"])[0]
        after = _find(ids, label) + len(label)
        response_ids = model._ids([response])[0]
        if response_ids:  # the response's first token survives every cut
            assert ids[after] == response_ids[0]


@pytest.fixture(scope="module")
def shared_model(tiny_model_path):
    """One model for the hypothesis test above (it only reads the model, except ``max_length``)."""
    return _model(tiny_model_path)


def test_truncated_texts_are_counted_and_logged(tiny_model_path, caplog):
    model = _model(tiny_model_path, max_length=80)
    long = " ".join(["river"] * 60)
    pairs = [
        {"prompts": ["p1", "p2"], "winner_completions": ["short", "also short"], "loser_completions": [long, "x"]},
        {"prompts": ["p1", "p2"], "winner_completions": ["a", "b"], "loser_completions": ["c", "d"]},
    ]
    encoding = model.encode([p["prompts"] for p in pairs], [p["loser_completions"] for p in pairs])
    assert encoding.truncated == [True, False] and encoding.num_truncated == 1
    assert all(len(ids) <= 80 for ids in encoding.input_ids)
    with caplog.at_level(logging.WARNING, logger="comlrl.trainers.preference.reward_model"):
        metrics = fit_reward_model(model, pairs, epochs=1, batch_size=2, lr=1e-4, seed=0)
    assert metrics["reward_model/truncated"] == 1.0
    assert truncation_message(1, 4) in caplog.text
    with pytest.raises(ValueError, match=r"`reward_max_length` \(20\) is too small"):
        _model(tiny_model_path, max_length=20).encode([["p", "q"]], [["r", "s"]])


def test_fitting_learns_a_keyword_preference(tiny_model_path):
    model = _model(tiny_model_path, seed=0)
    train, held = _keyword_pairs(64, seed=0), _keyword_pairs(32, seed=1)
    counter = _ForwardCounter(model.base)
    start = time.perf_counter()
    metrics = fit_reward_model(model, train, held, epochs=2, batch_size=8, lr=1e-3, seed=0)
    elapsed = time.perf_counter() - start
    counter.remove()
    assert metrics["reward_model/eval_accuracy"] >= 0.9, metrics
    assert metrics["reward_model/eval_loss"] < math.log(2)
    assert metrics["reward_model/steps"] == 16 and metrics["reward_model/skipped_steps"] == 0
    assert metrics["reward_model/train_pairs"] == 64 and metrics["reward_model/eval_pairs"] == 32
    # 16 training steps + 4 eval batches of 8 pairs, each ONE forward over winners and losers
    assert counter.calls == 20 and set(counter.batch_sizes) == {16}
    assert elapsed < 10
    again = evaluate_reward_model(model, held, batch_size=5)
    assert again["accuracy"] == metrics["reward_model/eval_accuracy"]
    assert again["loss"] == pytest.approx(metrics["reward_model/eval_loss"], abs=1e-5)


def test_fitting_is_deterministic_and_updates_every_used_parameter(tiny_model_path):
    pairs = [PreferencePair(**p, winner_reward=1.0, loser_reward=0.0, candidate_reward_mean=0.5)
             for p in _keyword_pairs(12, seed=2)]
    runs = []
    for _ in range(2):
        model = _model(tiny_model_path, seed=3)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        steps: list[dict] = []
        metrics = fit_reward_model(model, pairs[:9], pairs[9:], epochs=1, batch_size=4, lr=1e-3, seed=7,
                                   on_step=steps.append)
        runs.append((metrics, model.head.weight.detach().clone(), steps))
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][1], runs[1][1])
    assert [s["reward_model/step"] for s in runs[0][2]] == [1.0, 2.0, 3.0]
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    used = {f"backbone.{n}" for n, _ in model.backbone.named_parameters()} | {"head.weight"}
    assert used <= changed | {n for n in used if "lm_head" in n}  # lm_head is tied or unused
    other = _model(tiny_model_path, seed=3)
    fit_reward_model(other, pairs[:9], pairs[9:], epochs=1, batch_size=4, lr=1e-3, seed=8)
    assert not torch.equal(other.head.weight, runs[0][1])  # another shuffle seed, another fit


def test_frozen_backbone_trains_only_the_head(tiny_model_path):
    model = _model(tiny_model_path, seed=0, freeze_backbone=True)
    backbone_before = {n: p.detach().clone() for n, p in model.backbone.named_parameters()}
    head_before = model.head.weight.detach().clone()
    fit_reward_model(model, _keyword_pairs(8, seed=0), epochs=1, batch_size=4, lr=1e-2, seed=0)
    assert all(torch.equal(p, backbone_before[n]) for n, p in model.backbone.named_parameters())
    assert not torch.equal(model.head.weight, head_before)


def test_fit_from_config_uses_the_reward_fields(tiny_model_path, tmp_path):
    config = MARLHFConfig(
        output_dir=str(tmp_path), reward_eval_fraction=0.25, reward_num_train_epochs=2,
        reward_train_batch_size=3, reward_learning_rate=1e-3,
    )
    metrics = fit_reward_model_from_config(_model(tiny_model_path), _keyword_pairs(12, seed=4), config, seed=1)
    assert metrics["reward_model/eval_pairs"] == 3 and metrics["reward_model/train_pairs"] == 9
    assert metrics["reward_model/steps"] == 2 * 3


def test_fit_rejects_bad_arguments_and_non_finite_losses(tiny_model_path):
    model = _model(tiny_model_path)
    pairs = _keyword_pairs(4, seed=0)
    with pytest.raises(ValueError, match="`epochs` must be an integer >= 1"):
        fit_reward_model(model, pairs, epochs=0)
    with pytest.raises(ValueError, match="`train_pairs` is empty"):
        fit_reward_model(model, [])
    with pytest.raises(ValueError, match="pair 1 needs `prompts`"):
        fit_reward_model(model, [pairs[0], {"prompts": ["a"]}])
    with torch.no_grad():
        model.head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="max_nonfinite_fraction"):
        fit_reward_model(model, pairs, batch_size=1, lr=1e-3)


# ---- the oracle form, save / load --------------------------------------------------------------------


def test_oracle_batched_scoring_equals_per_candidate_scoring(tiny_model_path):
    model = _model(tiny_model_path, seed=4)
    item = {"task": "fruit"}

    def agent_prompts(it):
        return [f"Agent A: {it['task']}", f"Agent B: {it['task']} please"]

    completions = [["apple pie", "stone", "red apple tree"], ["yes", "no no no", "maybe"]]
    scorer = RewardModelOracle(model, agent_prompts=agent_prompts)
    counter = _ForwardCounter(model.base)
    batched = Oracle(scorer).score(completions, prompts=["Agent A: fruit", "x"], item=item)
    assert counter.calls == 1
    single = Oracle(scorer, batched=False).score(completions, prompts=["Agent A: fruit", "x"], item=item)
    counter.remove()
    assert counter.calls == 4
    assert batched.raw == pytest.approx(single.raw, abs=1e-5)
    direct = [model.score([agent_prompts(item)], [[completions[0][k], completions[1][k]]])[0].item()
              for k in range(3)]
    assert batched.raw == pytest.approx(direct, abs=1e-5)
    assert scorer.score_item(agent_prompts(item), completions) == pytest.approx(direct, abs=1e-5)
    assert scorer.scored_texts == 3 + 3 + 3 and scorer.truncated_texts == 0


def test_oracle_needs_every_agent_prompt(tiny_model_path):
    scorer = RewardModelOracle(_model(tiny_model_path))
    with pytest.raises(ValueError, match="`agent_prompts`"):
        scorer(["a"], ["b"], prompts=["only agent 0's prompt"])
    assert len(scorer(["a", "c"], ["b", "d"], prompts=[["p0", "p1"], ["p0", "p1"]])) == 2
    assert len(RewardModelOracle(_model(tiny_model_path))(["a"], prompts=["p"])) == 1


def test_save_load_round_trip_gives_identical_scores(tiny_model_path, tmp_path):
    model = _model(tiny_model_path, seed=9, max_length=200, padding_side="right")
    fit_reward_model(model, _keyword_pairs(4, seed=0), epochs=1, batch_size=2, lr=1e-3, seed=0)
    prompts, responses = [["p", "q"], ["a longer prompt", "q"]], [["apple", "x"], ["stone", "y z"]]
    expected, _ = model.score(prompts, responses)
    model.save(tmp_path / "rm")
    model.save(tmp_path / "rm")  # replacing an existing folder works
    loaded = JointRewardModel.load(tmp_path / "rm")
    assert torch.equal(loaded.score(prompts, responses)[0], expected)
    assert loaded.options() == model.options()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rm"]  # no temporary folders left
    with pytest.raises(FileNotFoundError, match="reward_model.json"):
        JointRewardModel.load(tmp_path / "missing")
