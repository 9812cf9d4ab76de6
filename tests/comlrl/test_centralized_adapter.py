"""The centralized comparator adapter: joint prompt contents, tag parsing, and dropping unparseable text."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rollout.types import Completion
from comlrl.trainers.preference.comparators import (
    CentralizedComparatorAdapter,
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
    build_joint_prompt,
    check_adapter,
    split_joint_completions,
)
from comlrl.trainers.preference.comparators.centralized import prompt_as_text

ITEM = {"id": 3, "task": "route"}


def joint(text: str, seed: int = 0) -> Completion:
    return Completion(
        [1, 2], [5, 6, 7], [-0.1, -0.2, -0.3], text, "stop", policy="p", policy_version=2, seed=seed
    )


def test_prompt_lists_every_agent_prompt_and_its_tags():
    adapter = TaggedCentralizedComparatorAdapter()
    prompts = ["Plan a route from A to B.", "Check the plan for dead ends.", "Summarise it in one line."]
    text = adapter.build_prompt(ITEM, prompts)
    for a, p in enumerate(prompts):
        assert f"Agent {a} original prompt:\n{p}" in text
        assert f"<agent_{a}>" in text and f"</agent_{a}>" in text
    assert "<agent_3>" not in text and "3 agents" in text
    # Sections appear in agent order.
    positions = [text.index(f"Agent {a} original prompt") for a in range(3)]
    assert positions == sorted(positions)
    assert isinstance(adapter, CentralizedComparatorAdapter)


def test_prompt_accepts_chat_messages_and_rejects_other_prompts():
    adapter = TaggedCentralizedComparatorAdapter()
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan it."}]
    assert prompt_as_text(chat) == "Be brief.\n\nPlan it."
    assert "Be brief.\n\nPlan it." in adapter.build_prompt(ITEM, [chat, "Check it."])
    with pytest.raises(TypeError, match="text or chat-message agent prompts"):
        adapter.build_prompt(ITEM, [[1, 2, 3], "x"])
    with pytest.raises(ValueError, match="`agent_prompts` must hold at least one"):
        adapter.build_prompt(ITEM, [])


def test_parse_finds_blocks_case_insensitively_across_lines():
    adapter = TaggedCentralizedComparatorAdapter()
    text = "preamble <AGENT_1 >\n second  </agent_1>\n<agent_0>first\nline </ Agent_0> trailer"
    assert adapter.parse_completion(text, ITEM, 2) == ["first\nline", "second"]
    # agent_1 must not match inside agent_10
    text = "<agent_10>ten</agent_10><agent_1>one</agent_1><agent_0>zero</agent_0>"
    assert adapter.parse_completion(text, ITEM, 2) == ["zero", "one"]


def test_parse_missing_and_absent_blocks():
    lenient = TaggedCentralizedComparatorAdapter()
    strict = TaggedCentralizedComparatorAdapter(require_all=True)
    assert lenient.parse_completion("<agent_0>only</agent_0>", ITEM, 3) == ["only", "", ""]
    with pytest.raises(CentralizedComparatorParseError, match=r"lacks the block\(s\) of agent\(s\) \[1, 2\]"):
        strict.parse_completion("<agent_0>only</agent_0>", ITEM, 3)
    with pytest.raises(CentralizedComparatorParseError, match="no <agent_0>"):
        lenient.parse_completion("I refuse to use tags.", ITEM, 2)
    assert issubclass(CentralizedComparatorParseError, ValueError)


def test_custom_tag_prefix():
    adapter = TaggedCentralizedComparatorAdapter(tag_prefix="role")
    assert "<role1>" in adapter.build_prompt(ITEM, ["a", "b"])
    assert adapter.parse_completion("<role0>x</role0><role1>y</role1>", ITEM, 2) == ["x", "y"]
    with pytest.raises(ValueError, match="`tag_prefix` must start with a letter"):
        TaggedCentralizedComparatorAdapter(tag_prefix="1 bad")


role_text = st.text(
    alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=40
)


@given(parts=st.lists(role_text, min_size=1, max_size=5), noise=role_text)
def test_parse_inverts_the_tagged_layout(parts, noise):
    adapter = TaggedCentralizedComparatorAdapter()
    text = noise + "".join(f"<agent_{a}>{p}</agent_{a}>{noise}" for a, p in enumerate(parts))
    assert adapter.parse_completion(text, ITEM, len(parts)) == [p.strip() for p in parts]


def test_split_keeps_parsed_candidates_and_leaves_gaps(caplog):
    adapter = TaggedCentralizedComparatorAdapter()
    completions = [
        joint("<agent_0>a0</agent_0><agent_1>b0</agent_1>", seed=10),
        joint("no tags at all", seed=11),
        joint("<agent_1>b2</agent_1>", seed=12),
        joint("still nothing", seed=13),
    ]
    with caplog.at_level(logging.WARNING):
        split = split_joint_completions(adapter, completions, ITEM, 2, item_index=9)
    assert split.indices == [0, 2] and split.num_unparsed == 2
    assert [c.text for c in split.candidates[0]] == ["a0", ""]
    assert [c.text for c in split.candidates[1]] == ["b0", "b2"]
    assert split.joint == [completions[0], completions[2]]
    role = split.candidates[1][1]
    assert (
        role.token_ids == [] and role.seed == 12 and role.policy_version == 2 and role.finish_reason == "stop"
    )
    messages = [r.getMessage() for r in caplog.records]
    assert (
        len(messages) == 2
        and "completion 1 of item 9" in messages[0]
        and "completion 3 of item 9" in messages[1]
    )


def test_split_rejects_adapters_that_break_the_contract():
    class Returns:
        def __init__(self, value):
            self.value = value

        def build_prompt(self, batch_item, agent_prompts):
            return self.value

        def parse_completion(self, completion, batch_item, num_agents):
            return self.value

    with pytest.raises(TypeError, match="must return a sequence of 2 strings, got str"):
        split_joint_completions(Returns("ab"), [joint("x")], ITEM, 2)
    with pytest.raises(ValueError, match="must return exactly 2 outputs; got 1"):
        split_joint_completions(Returns(["a"]), [joint("x")], ITEM, 2)
    with pytest.raises(TypeError, match="must return strings"):
        split_joint_completions(Returns(["a", 3]), [joint("x")], ITEM, 2)
    with pytest.raises(TypeError, match="build_prompt must return a non-empty string"):
        build_joint_prompt(Returns("   "), ITEM, ["a", "b"])

    # Any other exception from the adapter is a bug in it, not a model output problem: it propagates.
    class Crashes(Returns):
        def parse_completion(self, completion, batch_item, num_agents):
            raise KeyError("boom")

    with pytest.raises(KeyError):
        split_joint_completions(Crashes(["a", "b"]), [joint("x")], ITEM, 2)


def test_check_adapter():
    assert isinstance(check_adapter(None), TaggedCentralizedComparatorAdapter)
    custom = TaggedCentralizedComparatorAdapter(tag_prefix="r")
    assert check_adapter(custom) is custom

    class NoPrompt:
        parse_completion = staticmethod(lambda *a: [])

    with pytest.raises(TypeError, match="centralized_comparator_adapter.build_prompt must be callable"):
        check_adapter(NoPrompt())
