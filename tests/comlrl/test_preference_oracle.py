"""The oracle: public reward-function calling conventions, the batched form, raw vs processed scores,
and errors that name the item and the candidate."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comlrl.rollout.types import Completion
from comlrl.trainers.preference import Oracle, OracleError, OracleScores, batched_reward

# Two agents, three joint candidates.
CANDS = [["a0", "a1", "a22"], ["b0", "b11", "b2"]]
PROMPTS = ["prompt A", "prompt B"]


def length_score(c1, c2):
    # The joint score of candidate k is the total text length of the joint response.
    return [float(len(c1[0]) + len(c2[0]))]


def test_per_agent_positional_lists_get_one_completion_each():
    seen = []

    def reward(c1, c2):
        seen.append((c1, c2))
        return len(c1[0]) + len(c2[0])

    scores = Oracle(reward).score(CANDS)
    assert seen == [(["a0"], ["b0"]), (["a1"], ["b11"]), (["a22"], ["b2"])]
    assert scores.raw == [4.0, 5.0, 5.0]
    assert scores.processed == scores.raw


def test_prompts_first_with_n_plus_one_parameters():
    seen = []

    def reward(p, c1, c2):  # n + 1 required parameters: prompts first, whatever the name
        seen.append(p)
        return 1.0

    Oracle(reward).score(CANDS, prompts=PROMPTS)
    # The public convention passes the first agent's prompt, as a one-element list.
    assert seen == [["prompt A"]] * 3


def test_one_parameter_gets_the_list_of_per_agent_lists():
    seen = []

    def reward(completions):
        seen.append(completions)
        return 0.5

    Oracle(reward).score(CANDS)
    assert seen[1] == [["a1"], ["b11"]]


def test_varargs_and_keywords_only_when_accepted():
    seen = {}

    def with_kwargs(*completions, **kw):
        seen["args"], seen["kw"] = completions, kw
        return 1.0

    Oracle(with_kwargs).score(CANDS, prompts=PROMPTS, item={"id": 7})
    assert seen["args"] == (["a22"], ["b2"])
    assert seen["kw"] == {"prompts": ["prompt A"], "batch_items": [{"id": 7}]}

    def plain(c1, c2):
        return 1.0

    # No `prompts` / `batch_items` parameters: none are passed (a TypeError would surface otherwise).
    assert Oracle(plain).score(CANDS, prompts=PROMPTS, item={"id": 7}).raw == [1.0, 1.0, 1.0]


def test_prompts_keyword_is_not_taken_for_a_completion_slot():
    seen = []

    def reward(c1, c2, prompts=None, batch_items=None):
        seen.append((c1, c2, prompts, batch_items))
        return 2.0

    Oracle(reward).score(CANDS[:1] + CANDS[1:], prompts=PROMPTS, item="item")
    assert seen[0] == (["a0"], ["b0"], ["prompt A"], ["item"])


def test_single_agent_forms():
    one = [["x", "yy"]]
    assert Oracle(lambda c: len(c[0])).score(one).raw == [1.0, 2.0]
    got = []
    Oracle(lambda p, c: got.append((p, c)) or 0.0).score(one, prompts=["P"])
    assert got == [(["P"], ["x"]), (["P"], ["yy"])]


@pytest.mark.parametrize(
    "result",
    [0.25, [0.25], (0.25,), torch.tensor(0.25), torch.tensor([0.25]), np.array([0.25]), np.float32(0.25)],
    ids=["float", "list", "tuple", "tensor0d", "tensor1", "ndarray", "npfloat"],
)
def test_result_shapes(result):
    assert Oracle(lambda c1, c2: result).score(CANDS).raw == [0.25] * 3


def test_tensor_with_grad_is_accepted():
    w = torch.tensor(2.0, requires_grad=True)
    assert Oracle(lambda c1, c2: w * 0.5).score(CANDS).raw == [1.0] * 3


def test_processor_applies_to_raw_and_both_are_kept():
    scores = Oracle(length_score, reward_processor=lambda r: r / 10 - 0.2).score(CANDS)
    assert scores.raw == [4.0, 5.0, 5.0]
    assert scores.processed == pytest.approx([0.2, 0.3, 0.3])
    assert scores.mean == pytest.approx(sum(scores.processed) / 3)


def test_completion_objects_are_scored_by_text():
    comps = [[Completion([1], [5, 6], [-0.1, -0.2], text, "stop") for text in agent] for agent in CANDS]
    assert Oracle(length_score).score(comps).raw == Oracle(length_score).score(CANDS).raw


def test_batched_form_scores_all_candidates_in_one_call():
    calls = []

    @batched_reward
    def reward(c1, c2, prompts=None, batch_items=None):
        calls.append((c1, c2, prompts, batch_items))
        return torch.tensor([float(len(a) + len(b)) for a, b in zip(c1, c2)])

    scores = Oracle(reward, reward_processor=lambda r: -r).score(CANDS, prompts=PROMPTS, item="it")
    assert len(calls) == 1
    assert calls[0] == (CANDS[0], CANDS[1], ["prompt A"] * 3, ["it"] * 3)
    assert scores.raw == [4.0, 5.0, 5.0] and scores.processed == [-4.0, -5.0, -5.0]
    # The opt-in can also be given to the oracle directly.
    plain_calls = []
    Oracle(lambda c1, c2: plain_calls.append(1) or [0.0] * len(c1), batched=True).score(CANDS)
    assert plain_calls == [1]


def test_no_candidates_gives_empty_scores():
    assert Oracle(length_score).score([[], []]) == OracleScores(raw=[], processed=[])


# ---- errors ------------------------------------------------------------------------------------


def test_raising_reward_names_item_and_candidate():
    def reward(c1, c2):
        if c1[0] == "a1":
            raise KeyError("boom")
        return 1.0

    with pytest.raises(OracleError, match=r"raised KeyError on item 4, candidate 1") as info:
        Oracle(reward).score(CANDS, item_index=4)
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_score_is_an_error_not_a_zero(bad):
    with pytest.raises(OracleError, match=rf"returned {bad} on item 2, candidate 0"):
        Oracle(lambda c1, c2: bad).score(CANDS, item_index=2)


def test_wrong_count_is_an_error():
    with pytest.raises(OracleError, match=r"returned 2 scores on item 0, candidate 0, expected 1"):
        Oracle(lambda c1, c2: [1.0, 2.0]).score(CANDS, item_index=0)
    with pytest.raises(OracleError, match=r"returned 2 scores on item 1, candidates 0..2, expected 3"):
        Oracle(batched_reward(lambda c1, c2: [1.0, 2.0])).score(CANDS, item_index=1)


def test_non_numeric_result_is_an_error():
    with pytest.raises(OracleError, match=r"must return numbers.*got str on item 0, candidate 0"):
        Oracle(lambda c1, c2: "high").score(CANDS, item_index=0)


def test_processor_errors_name_the_candidate():
    with pytest.raises(
        OracleError, match=r"`reward_processor` raised ZeroDivisionError on item 9, candidate 0"
    ):
        Oracle(length_score, reward_processor=lambda r: 1 / 0).score(CANDS, item_index=9)
    with pytest.raises(OracleError, match=r"`reward_processor` returned nan on item 9, candidate 0"):
        Oracle(length_score, reward_processor=lambda r: math.nan).score(CANDS, item_index=9)


def test_signature_that_fits_no_convention_is_rejected():
    def reward(a, b, c, d):
        return 0.0

    with pytest.raises(
        TypeError, match=r"`reward_func` \(reward\) takes 4 positional argument\(s\); with 2 agent"
    ):
        Oracle(reward).score(CANDS)


def test_prompts_first_without_prompts_is_an_error():
    with pytest.raises(OracleError, match="takes prompts first but no `prompts` were given"):
        Oracle(lambda prompts, c1, c2: 0.0).score(CANDS, item_index=0)


def test_unequal_candidate_counts_across_agents():
    with pytest.raises(ValueError, match="agent 0 has 3, agent 1 has 2"):
        Oracle(length_score).score([["a", "b", "c"], ["x", "y"]])


def test_constructor_checks():
    with pytest.raises(TypeError, match="`reward_func` must be callable"):
        Oracle(3)
    with pytest.raises(TypeError, match="`reward_processor` must be callable or None"):
        Oracle(length_score, reward_processor="x")
