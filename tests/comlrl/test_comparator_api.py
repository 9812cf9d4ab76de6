"""The ``api`` comparator against the real local HTTP server in tests/http_fixture.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from comlrl.rollout import SamplingParams
from comlrl.trainers.preference.comparators import (
    APIComparator,
    ComparatorContext,
    TaggedCentralizedComparatorAdapter,
    api_key_headers,
    build_comparator,
)
from comlrl.trainers.preference.config import MADPOIterConfig
from tests.helpers.http_fixture import APIServer, http_error, json_reply, malformed
from tests.helpers.http_fixture import (
    api_server as api_server,  # the fixture; "as" marks the re-export for ruff
)

SEED = 5
KEY = "sk-comparator-test-key"
FAST = {"backoff_base": 0.001, "backoff_max": 0.005, "max_concurrency": 1}
PARAMS = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=64)
ITEMS = [{"id": 1, "question": "2+2"}, {"id": 2, "question": "3+3"}]
PROMPTS = [[f"solver {i['id']}: {i['question']}", f"checker {i['id']}: {i['question']}"] for i in ITEMS]


def make(server: APIServer, fmt: str, tmp_path, adapter=None, **overrides) -> APIComparator:
    values = dict(
        num_agents=2,
        preference_num_candidates=3,
        output_dir=str(tmp_path),
        seed=SEED,
        comparator_policy="api",
        comparator_api_url=server.url(fmt),
        comparator_api_format=fmt,
        comparator_api_model=None if fmt == "generic" else "test-model",
        comparator_api_timeout=2.0,
        comparator_api_max_retries=2,
    )
    values.update(overrides)
    args = MADPOIterConfig(**values)
    context = ComparatorContext(None, None, args, args.output_dir, SEED, centralized_adapter=adapter)
    comp = build_comparator(args, context, backend_options=FAST)
    assert isinstance(comp, APIComparator)
    return comp


def texts(out) -> list[list[str]]:
    return [[c.text for c in agent] for agent in out.candidates]


def test_generic_format_sends_the_public_payload(api_server, tmp_path):
    comp = make(api_server, "generic", tmp_path, comparator_num_candidates=2)
    outputs = comp.sample(ITEMS, PROMPTS, PARAMS, round_index=1, item_indices=[0, 1])
    for out, prompts in zip(outputs, PROMPTS):
        assert out.error is None and not out.same_tokenizer and out.indices == [0, 1]
        assert texts(out) == [[f"re: {p} #0", f"re: {p} #1"] for p in prompts]
        assert all(c.token_ids == [] for agent in out.candidates for c in agent)
    bodies = api_server.bodies()
    assert len(bodies) == 4  # one request per (item, agent), both candidates in it
    expected = [(item, a, PROMPTS[i][a]) for i, item in enumerate(ITEMS) for a in range(2)]
    for body, (item, agent, prompt) in zip(bodies, expected):
        assert body["prompt"] == prompt and body["agent_idx"] == agent and body["batch_item"] == item
        assert body["num_return_sequences"] == 2 and body["n"] == 2
        assert (body["max_new_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (
            64,
            0.7,
            0.9,
            20,
        )
        assert "model" not in body


def test_generic_format_reads_the_response_field_and_extra_body(tmp_path):
    with APIServer(generic_field="data.outputs") as server:
        comp = make(
            server,
            "generic",
            tmp_path,
            comparator_api_response_field="data.outputs",
            comparator_api_extra_body={"temperature": None, "stream": False},
        )
        [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
        assert texts(out)[1] == [f"re: {PROMPTS[0][1]} #{k}" for k in range(3)]
        body = server.bodies()[0]
        assert body["stream"] is False and "temperature" not in body


def test_openai_format_with_key_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPARATOR_TEST_KEY", KEY)
    with APIServer(api_key=KEY) as server:
        comp = make(server, "openai", tmp_path, comparator_api_key_env="COMPARATOR_TEST_KEY")
        [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
        assert texts(out) == [[f"re: {p} #{k}" for k in range(3)] for p in PROMPTS[0]]
        first = server.requests[0]
        assert first.headers["authorization"] == f"Bearer {KEY}"
        assert first.body["messages"] == [{"role": "user", "content": PROMPTS[0][0]}]
        assert first.body["n"] == 3 and first.body["model"] == "test-model"


def test_openai_format_respects_max_n_per_request(api_server, tmp_path):
    comp = make(
        api_server, "openai", tmp_path, comparator_api_max_n_per_request=2, comparator_num_candidates=5
    )
    [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    assert [len(agent) for agent in out.candidates] == [5, 5] and out.indices == list(range(5))
    assert [b["n"] for b in api_server.bodies()] == [2, 2, 1, 2, 2, 1]


@pytest.mark.parametrize("fmt", ["anthropic", "openai_responses", "codex", "responses"])
def test_single_candidate_formats_send_one_request_per_candidate(tmp_path, monkeypatch, fmt):
    monkeypatch.setenv("COMPARATOR_TEST_KEY", KEY)
    with APIServer(api_key=KEY) as server:
        comp = make(server, fmt, tmp_path, comparator_api_key_env="COMPARATOR_TEST_KEY")
        [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
        assert texts(out) == [[f"re: {p} #{k}" for k in range(3)] for p in PROMPTS[0]]
        assert server.request_count == 6
        headers = server.requests[0].headers
        if fmt == "anthropic":
            # The Authorization/Bearer default becomes Anthropic's x-api-key with the bare key.
            assert headers["x-api-key"] == KEY and "authorization" not in headers
            assert headers["anthropic-version"]
        else:
            assert headers["authorization"] == f"Bearer {KEY}"


def test_key_headers():
    def args(**kw):
        base = dict(
            comparator_api_key=None,
            comparator_api_key_env=None,
            comparator_api_key_header="Authorization",
            comparator_api_key_prefix="Bearer",
            comparator_api_format="openai",
            comparator_api_headers=None,
        )
        base.update(kw)
        return SimpleNamespace(**base)

    assert api_key_headers(args()) == {}
    assert api_key_headers(args(comparator_api_key="k")) == {"Authorization": "Bearer k"}
    assert api_key_headers(args(comparator_api_key_env="E"), {"E": " k2 "}) == {"Authorization": "Bearer k2"}
    custom = args(comparator_api_key="k", comparator_api_key_header="X-Token", comparator_api_key_prefix="")
    assert api_key_headers(custom) == {"X-Token": "k"}
    assert api_key_headers(args(comparator_api_key="k", comparator_api_format="anthropic")) == {
        "x-api-key": "k"
    }
    # Explicit headers win over the key header, whatever the case.
    assert api_key_headers(
        args(comparator_api_key="k", comparator_api_headers={"authorization": "Basic z"})
    ) == {"authorization": "Basic z"}
    with pytest.raises(ValueError, match="`comparator_api_key_env` names the environment variable 'MISSING'"):
        api_key_headers(args(comparator_api_key_env="MISSING"), {})


def test_rate_limits_and_server_errors_are_retried(api_server, tmp_path):
    comp = make(api_server, "openai", tmp_path)

    def agent(a):
        return lambda r: r.body["messages"][0]["content"] == PROMPTS[0][a]

    api_server.script(http_error(429, retry_after="0"), http_error(500), match=agent(0))
    api_server.script(http_error(503), match=agent(1))
    [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    assert out.error is None and texts(out)[0] == [f"re: {PROMPTS[0][0]} #{k}" for k in range(3)]
    assert comp.stats["retries"] == 3 and comp.stats["rate_limited"] == 1 and comp.stats["server_errors"] == 2
    assert api_server.request_count == 5  # agent 0: 2 retries, success on its 3rd try; agent 1: 1 retry
    assert texts(out)[1] == [f"re: {PROMPTS[0][1]} #{k}" for k in range(3)]


def test_an_item_that_still_fails_becomes_an_error_item(api_server, tmp_path):
    comp = make(api_server, "generic", tmp_path)
    api_server.always(http_error(500), match=lambda r: r.body["batch_item"]["id"] == 2)
    first, second = comp.sample(ITEMS, PROMPTS, PARAMS, round_index=1, item_indices=[0, 1])
    assert first.error is None and len(first.candidates) == 2
    assert second.candidates == [] and second.indices == [] and "HTTP 500" in second.error
    assert "3 attempt(s)" in second.error  # 1 try + comparator_api_max_retries=2
    failing = [r for r in api_server.requests if r.body["batch_item"]["id"] == 2]
    assert len(failing) == 6  # both agents' requests, 3 attempts each


def test_a_malformed_answer_is_retried_then_dropped(api_server, tmp_path):
    comp = make(api_server, "openai", tmp_path)
    api_server.script(malformed())
    [ok] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    assert ok.error is None and comp.stats["malformed"] == 1
    api_server.always(json_reply({"choices": "not a list"}))
    [bad] = comp.sample(ITEMS[1:], PROMPTS[1:], PARAMS, round_index=1, item_indices=[1])
    assert bad.candidates == [] and "field `choices` is missing or not a list" in bad.error


def test_centralized_generation_through_the_api(api_server, tmp_path):
    adapter = TaggedCentralizedComparatorAdapter()
    comp = make(
        api_server,
        "generic",
        tmp_path,
        comparator_generation_mode="centralized",
        comparator_centralized_agent_index=1,
        comparator_num_candidates=4,
        adapter=adapter,
    )
    api_server.script(
        json_reply(
            {
                "completions": [
                    "<agent_0>4</agent_0> <agent_1>correct</agent_1>",
                    "I will not use tags",
                    {"text": "<AGENT_1>only the checker</AGENT_1>"},
                    "<agent_0>5</agent_0><agent_1>wrong</agent_1>",
                ]
            }
        )
    )
    [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    body = api_server.bodies()[0]
    assert api_server.request_count == 1 and body["agent_idx"] == 1
    assert body["prompt"] == adapter.build_prompt(ITEMS[0], PROMPTS[0]) and body["n"] == 4
    assert out.indices == [0, 2, 3] and out.num_unparsed == 1 and out.error is None
    assert texts(out) == [["4", "", "5"], ["correct", "only the checker", "wrong"]]
    assert [c.text for c in out.joint][1] == "<AGENT_1>only the checker</AGENT_1>"
    assert not out.same_tokenizer and not out.joint_same_tokenizer


def test_centralized_openai_answers_parse_with_the_default_adapter(api_server, tmp_path):
    # The server echoes the prompt, whose layout section holds every tag pair: every candidate parses.
    comp = make(api_server, "openai", tmp_path, comparator_generation_mode="centralized")
    [out] = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    assert out.indices == [0, 1, 2] and texts(out) == [["..."] * 3, ["..."] * 3]
    # Cut to 10 words the echo loses its tags: every candidate is dropped, the run goes on.
    [cut] = comp.sample(
        ITEMS[:1], PROMPTS[:1], PARAMS.with_(max_new_tokens=10), round_index=2, item_indices=[0]
    )
    assert cut.indices == [] and cut.num_unparsed == 3 and cut.error is None
