"""The API rollout backend against a real HTTP server on 127.0.0.1 (tests/http_fixture.py)."""

from __future__ import annotations

import logging
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comlrl.rollout.api import (
    KNOWN_FORMATS,
    APIBackend,
    APIRequestError,
    APIResponseError,
    apply_stop,
    backoff_delay,
    dotted_get,
    json_safe,
    map_finish_reason,
    normalize_format,
    parse_retry_after,
)
from comlrl.rollout.types import Completion, GenerationRequest, RolloutBackend, SamplingParams
from tests.helpers.http_fixture import (
    APIServer,
    drop_field,
    http_error,
    json_reply,
    malformed,
    prompt_text,
    slow,
)
from tests.helpers.http_fixture import (
    api_server as api_server,  # the fixture; "as" marks the re-export for ruff
)

KEY = "sk-test-0123456789abcdef"
FAST = dict(timeout=2.0, backoff_base=0.001, backoff_max=0.01)


def backend(server: APIServer, fmt: str, **kwargs) -> APIBackend:
    options = {**FAST, **kwargs}
    model = options.pop("model", None if fmt == "generic" else "test-model")
    return APIBackend(fmt, server.url(fmt), model, **options)


# ---------------------------------------------------------------------------------------------------
# Pure helpers


def test_normalize_format_aliases_and_case():
    assert normalize_format(" OpenAI ") == "openai"
    assert normalize_format("RESPONSES") == "openai_responses"
    assert normalize_format("codex") == "openai_responses"
    assert normalize_format("anthropic") == "anthropic"
    with pytest.raises(ValueError) as info:
        normalize_format("gemini")
    message = str(info.value)
    assert "'gemini'" in message and "`format`" in message
    for name in (*KNOWN_FORMATS, "responses", "codex"):
        assert name in message


@given(
    retry=st.integers(0, 80),
    base=st.floats(0, 10, allow_nan=False),
    cap=st.floats(0, 100, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_backoff_delay_is_full_jitter_within_ceiling(retry, base, cap, seed):
    delay = backoff_delay(retry, base, cap, random.Random(seed))
    assert 0.0 <= delay <= min(cap, base * 2.0 ** min(retry, 60)) + 1e-12
    # Same generator state, same delay: the jitter stream is the backend's own seeded one.
    assert delay == backoff_delay(retry, base, cap, random.Random(seed))


def test_backoff_delay_spreads_over_the_whole_interval():
    rng = random.Random(0)
    delays = [backoff_delay(3, 0.1, 10.0, rng) for _ in range(2000)]
    assert max(delays) <= 0.8
    # Full jitter is uniform on [0, 0.8]: mean 0.4, and both ends of the interval are visited.
    assert abs(sum(delays) / len(delays) - 0.4) < 0.03
    assert min(delays) < 0.02 and max(delays) > 0.78
    with pytest.raises(ValueError, match="`retry` must be >= 0"):
        backoff_delay(-1, 0.1, 1.0, rng)


def test_parse_retry_after():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert parse_retry_after("-1") is None
    assert parse_retry_after("nan") is None


def test_map_finish_reason_and_apply_stop():
    for reason in ("length", "max_tokens", "max_output_tokens", "MAX_TOKENS"):
        assert map_finish_reason(reason) == "length"
    for reason in ("stop", "end_turn", "stop_sequence", "content_filter", None, 3):
        assert map_finish_reason(reason) == "stop"
    assert apply_stop("a b STOP c END", ["END", "STOP"]) == ("a b ", True)
    assert apply_stop("abc", ["x", ""]) == ("abc", False)
    assert apply_stop("abc", []) == ("abc", False)


@given(text=st.text(max_size=40), stops=st.lists(st.text(min_size=1, max_size=3), max_size=3))
def test_apply_stop_cuts_at_earliest_stop(text, stops):
    cut, found = apply_stop(text, stops)
    assert found == any(s in text for s in stops)
    if not found:
        assert cut == text
    else:
        # The cut is where the earliest stop string starts.
        assert len(cut) == min(text.find(s) for s in stops if s in text)
        assert text.startswith(cut) and any(text[len(cut):].startswith(s) for s in stops)


def test_dotted_get_and_json_safe():
    data = {"data": {"items": [{"text": "a"}, {"text": "b"}]}}
    assert dotted_get(data, "data.items.1.text") == "b"
    with pytest.raises(ValueError, match=r"field `data\.texts` is missing \(no `texts` under data\)"):
        dotted_get(data, "data.texts")
    with pytest.raises(ValueError, match="under the top level"):
        dotted_get(data, "outputs")
    assert json_safe({"t": (1, 2), "s": {3}, 4: None, "o": object}) == {
        "t": [1, 2], "s": [3], "4": None, "o": str(object)
    }


# ---------------------------------------------------------------------------------------------------
# Construction


def test_unknown_format_and_bad_arguments_are_errors(api_server):
    with pytest.raises(ValueError, match="`format` must be one of generic, openai, anthropic, openai_responses"):
        APIBackend("palm", api_server.url("openai"), "m")
    with pytest.raises(ValueError, match="`url` must be an http"):
        APIBackend("openai", "ftp://example.org", "m")
    with pytest.raises(ValueError, match="`model` is required for the anthropic format"):
        APIBackend("anthropic", api_server.url("anthropic"))
    for field, value in (("timeout", 0), ("max_retries", -1), ("backoff_base", -0.1), ("max_concurrency", 0)):
        with pytest.raises(ValueError, match=f"`{field}` must be"):
            APIBackend("openai", api_server.url("openai"), "m", **{field: value})


def test_missing_key_env_names_the_variable(api_server, monkeypatch):
    monkeypatch.delenv("COMLRL_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(ValueError, match="'COMLRL_TEST_NO_SUCH_KEY', which is unset or empty"):
        APIBackend("openai", api_server.url("openai"), "m", api_key_env="COMLRL_TEST_NO_SUCH_KEY")
    monkeypatch.setenv("COMLRL_TEST_NO_SUCH_KEY", "  ")
    with pytest.raises(ValueError, match="COMLRL_TEST_NO_SUCH_KEY"):
        APIBackend("openai", api_server.url("openai"), "m", api_key_env="COMLRL_TEST_NO_SUCH_KEY")


def test_backend_satisfies_protocol(api_server):
    assert isinstance(backend(api_server, "openai"), RolloutBackend)


# ---------------------------------------------------------------------------------------------------
# Round trips, one per format


@pytest.fixture
def keyed_server(monkeypatch):
    monkeypatch.setenv("COMLRL_TEST_API_KEY", KEY)
    with APIServer(api_key=KEY) as server:
        yield server


def test_openai_round_trip(keyed_server):
    api = backend(keyed_server, "openai", api_key_env="COMLRL_TEST_API_KEY")
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=20, stop=("#2",))
    out = api.generate([GenerationRequest("hello there", policy="agent0", seed=11)], params)

    assert keyed_server.request_count == 1  # all n candidates in one request
    (record,) = keyed_server.requests
    assert record.path == "/v1/chat/completions"
    assert record.headers["authorization"] == f"Bearer {KEY}"
    assert record.headers["content-type"] == "application/json"
    body = record.body
    assert body["model"] == "test-model"
    assert body["messages"] == [{"role": "user", "content": "hello there"}]
    assert (body["n"], body["temperature"], body["top_p"], body["max_tokens"]) == (3, 0.7, 0.9, 20)
    assert body["stop"] == ["#2"]
    assert isinstance(body["seed"], int)
    assert "top_k" not in body  # not part of the chat completions API

    texts = [c.text for c in out[0]]
    assert texts == ["re: hello there #0", "re: hello there #1", "re: hello there "]
    for c in out[0]:
        assert isinstance(c, Completion)
        assert c.token_ids == [] and c.logprobs == [] and c.prompt_token_ids == []
        assert c.finish_reason == "stop" and c.policy == "agent0" and c.policy_version == 0
    assert len({c.seed for c in out[0]}) == 3


def test_openai_length_finish_and_chat_passthrough(keyed_server):
    api = backend(keyed_server, "openai", api_key_env="COMLRL_TEST_API_KEY")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"}]
    out = api.generate([GenerationRequest(messages)], SamplingParams(n=1, max_new_tokens=2))
    assert keyed_server.requests[0].body["messages"] == messages
    assert out[0][0].text == "re: one" and out[0][0].finish_reason == "length"


def test_openai_splits_n_and_tops_up_short_answers(api_server):
    api = backend(api_server, "openai", max_n_per_request=2, max_concurrency=1)
    out = api.generate([GenerationRequest("p")], SamplingParams(n=5))
    assert [b["n"] for b in api_server.bodies()] == [2, 2, 1]
    assert [c.text for c in out[0]] == [f"re: p #{k}" for k in range(5)]

    # A server that ignores n (answers one choice) is asked again for the remainder.
    with APIServer(max_n=1) as stingy:
        api = backend(stingy, "openai")
        out = api.generate([GenerationRequest("q", seed=3)], SamplingParams(n=3))
        assert [b["n"] for b in stingy.bodies()] == [3, 2, 1]
        assert len({b["seed"] for b in stingy.bodies()}) == 3  # a top-up never repeats a seed
        assert [c.text for c in out[0]] == [f"re: q #{k}" for k in range(3)]


def test_extra_body_merges_and_none_removes(api_server):
    api = backend(api_server, "openai", extra_body={"max_tokens": None, "max_completion_tokens": 9, "user": "u"})
    api.generate([GenerationRequest("p")])
    body = api_server.requests[0].body
    assert "max_tokens" not in body and body["max_completion_tokens"] == 9 and body["user"] == "u"


def test_anthropic_round_trip_one_request_per_candidate(keyed_server):
    api = backend(keyed_server, "anthropic", api_key_env="COMLRL_TEST_API_KEY")
    messages = [
        {"role": "system", "content": "rule one"},
        {"role": "system", "content": "rule two"},
        {"role": "user", "content": "hi"},
    ]
    params = SamplingParams(n=3, temperature=0.5, max_new_tokens=30, stop=("END",))
    out = api.generate([GenerationRequest(messages, policy="critic")], params)

    assert keyed_server.request_count == 3
    for record in keyed_server.requests:
        assert record.path == "/v1/messages"
        assert record.headers["x-api-key"] == KEY
        assert record.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in record.headers
        body = record.body
        assert body["system"] == "rule one\n\nrule two"
        assert body["messages"] == [{"role": "user", "content": "hi"}]
        assert (body["max_tokens"], body["temperature"], body["stop_sequences"]) == (30, 0.5, ["END"])
        assert "n" not in body and "top_p" not in body  # top_p only when it truncates
    assert sorted(c.text for c in out[0]) == [f"re: hi #{k}" for k in range(3)]
    assert all(c.policy == "critic" and c.finish_reason == "stop" for c in out[0])


def test_anthropic_parses_blocks_and_max_tokens(api_server):
    api = backend(api_server, "anthropic")
    api_server.script(json_reply({
        "content": [{"type": "thinking", "thinking": "..."}, {"type": "text", "text": "ab"},
                    {"type": "text", "text": "cd"}],
        "stop_reason": "max_tokens",
    }))
    out = api.generate([GenerationRequest("x")], SamplingParams(top_p=0.8, top_k=4))
    assert (out[0][0].text, out[0][0].finish_reason) == ("abcd", "length")
    assert api_server.requests[0].body["top_p"] == 0.8 and api_server.requests[0].body["top_k"] == 4


@pytest.mark.parametrize("fmt", ["openai_responses", "responses", "codex"])
def test_responses_round_trip_one_request_per_candidate(keyed_server, fmt):
    api = APIBackend(fmt, keyed_server.url("openai_responses"), "codex-mini", api_key_env="COMLRL_TEST_API_KEY", **FAST)
    out = api.generate([GenerationRequest("ping pong")], SamplingParams(n=2, max_new_tokens=50))
    assert keyed_server.request_count == 2
    for record in keyed_server.requests:
        assert record.headers["authorization"] == f"Bearer {KEY}"
        assert record.body == {
            "model": "codex-mini",
            "input": [{"role": "user", "content": "ping pong"}],
            "max_output_tokens": 50,
        }  # no temperature / top_p at their defaults: reasoning models reject them
    assert sorted(c.text for c in out[0]) == ["re: ping pong #0", "re: ping pong #1"]


def test_responses_length_stop_and_output_text_fallback(api_server):
    api = backend(api_server, "responses")
    out = api.generate([GenerationRequest("a b c d")], SamplingParams(max_new_tokens=3, temperature=0.3))
    assert (out[0][0].text, out[0][0].finish_reason) == ("re: a b", "length")
    assert api_server.requests[0].body["temperature"] == 0.3
    # The Responses API has no stop parameter: the client cuts at the stop string.
    out = api.generate([GenerationRequest("x")], SamplingParams(stop=("#",)))
    assert (out[0][0].text, out[0][0].finish_reason) == ("re: x ", "stop")
    api_server.script(json_reply({"status": "completed", "output": [], "output_text": "flat"}))
    assert api.generate([GenerationRequest("y")])[0][0].text == "flat"


def test_generic_round_trip_with_metadata(keyed_server):
    api = backend(keyed_server, "generic", api_key_env="COMLRL_TEST_API_KEY", model="remote-1")
    request = GenerationRequest("solve it", metadata={"agent_idx": 1, "batch_item": {"q": (1, 2)}}, seed=5)
    out = api.generate([request], SamplingParams(n=2, top_k=7, max_new_tokens=16, stop=("\n",)))
    (record,) = keyed_server.requests
    assert record.path == "/generate" and record.headers["authorization"] == f"Bearer {KEY}"
    body = record.body
    assert body["prompt"] == "solve it" and body["model"] == "remote-1"
    assert body["n"] == body["num_return_sequences"] == 2
    assert (body["max_new_tokens"], body["top_k"], body["temperature"], body["top_p"]) == (16, 7, 1.0, 1.0)
    assert body["stop"] == ["\n"] and isinstance(body["seed"], int)
    assert body["agent_idx"] == 1 and body["batch_item"] == {"q": [1, 2]}
    assert [c.text for c in out[0]] == ["re: solve it #0", "re: solve it #1"]


def test_generic_dotted_field_single_string_and_dict_items():
    with APIServer(generic_field="data.texts") as server:
        api = backend(server, "generic", response_field="data.texts")
        messages = [{"role": "user", "content": "m"}]
        out = api.generate([GenerationRequest(messages)], SamplingParams(n=2))
        assert server.requests[0].body["prompt"] == messages  # chat prompts pass through
        assert [c.text for c in out[0]] == ["re: m #0", "re: m #1"]

        server.script(json_reply({"data": {"texts": "only one"}}))
        out = api.generate([GenerationRequest("s")])
        assert [c.text for c in out[0]] == ["only one"]

        server.script(json_reply({"data": {"texts": [{"text": "t0", "finish_reason": "length"},
                                                     {"message": {"content": "t1"}}]}}))
        out = api.generate([GenerationRequest("s")], SamplingParams(n=2))
        assert [(c.text, c.finish_reason) for c in out[0]] == [("t0", "length"), ("t1", "stop")]


def test_generic_metadata_clash_is_an_error(api_server):
    api = backend(api_server, "generic")
    with pytest.raises(ValueError, match=r"metadata key\(s\) \['n'\] clash"):
        api.generate([GenerationRequest("p", metadata={"n": 3})])
    assert api_server.request_count == 0


def test_token_id_prompt_is_an_error_naming_the_request(api_server):
    api = backend(api_server, "openai")
    with pytest.raises(ValueError, match="request 1: the API backend cannot send a token-id prompt"):
        api.generate([GenerationRequest("ok"), GenerationRequest([1, 2, 3])])
    assert api_server.request_count == 0


# ---------------------------------------------------------------------------------------------------
# Retries and failures


@pytest.mark.parametrize("fault", [http_error(429), http_error(429, retry_after="0"), http_error(500),
                                   http_error(503), slow(1.0), malformed()],
                         ids=["429", "429-retry-after", "500", "503", "timeout", "malformed"])
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_retryable_faults_then_success(api_server, fault, fmt):
    api = backend(api_server, fmt, timeout=0.4, max_retries=3)
    api_server.script(fault, fault)
    out = api.generate([GenerationRequest("r")])
    assert out[0][0].text == "re: r #0"
    assert api_server.request_count == 3
    assert api.stats["retries"] == 2 and api.stats["http_requests"] == 3
    assert api.stats["failed_calls"] == 0 and api.stats["completions"] == 1
    counter = {"429": "rate_limited", "500": "server_errors", "503": "server_errors",
               "slow": "timeouts", "malformed": "malformed"}[str(fault.status) if fault.kind == "status" else fault.kind]
    assert api.stats[counter] == 2


def test_gives_up_after_max_retries_naming_endpoint(api_server):
    api = backend(api_server, "openai", max_retries=2)
    api_server.always(http_error(500, message="overloaded"))
    with pytest.raises(APIRequestError) as info:
        api.generate([GenerationRequest("p")])
    error = info.value
    assert api_server.request_count == 3
    assert api_server.url("openai") in str(error)
    assert "HTTP 500" in str(error) and "3 attempt(s)" in str(error) and "overloaded" in str(error)
    assert (error.status, error.attempts, error.url) == (500, 3, api_server.url("openai"))
    assert api.stats["failed_calls"] == 1 and api.stats["failed_requests"] == 1 and api.stats["retries"] == 2


def test_timeout_exhausted_names_timeout(api_server):
    api = backend(api_server, "responses", timeout=0.15, max_retries=1)
    api_server.always(slow(0.5))
    with pytest.raises(APIRequestError, match=r"2 attempt\(s\).*timed out after 0.15s") as info:
        api.generate([GenerationRequest("p")])
    assert info.value.status is None and api.stats["timeouts"] == 2


def test_connection_refused_is_retried_then_reported():
    with APIServer() as server:
        url = server.url("openai")
    api = APIBackend("openai", url, "m", max_retries=1, **FAST)  # nothing listens there any more
    with pytest.raises(APIRequestError, match="connection error") as info:
        api.generate([GenerationRequest("p")])
    assert url in str(info.value) and info.value.attempts == 2
    assert api.stats["connection_errors"] == 2


@pytest.mark.parametrize("status", [400, 401, 402, 404, 422])
def test_non_retryable_4xx_fails_immediately(api_server, status):
    api = backend(api_server, "openai", max_retries=5)
    api_server.always(http_error(status, message="bad request field"))
    with pytest.raises(APIRequestError, match=rf"1 attempt\(s\) \(non-retryable\): HTTP {status}") as info:
        api.generate([GenerationRequest("p")])
    assert api_server.request_count == 1 and info.value.status == status
    assert "bad request field" in str(info.value) and api.stats["retries"] == 0


def test_wrong_key_is_a_401_without_leaking_it(monkeypatch, caplog):
    monkeypatch.setenv("COMLRL_TEST_API_KEY", "sk-wrong-key-value")
    with APIServer(api_key=KEY) as server:
        server.always(http_error(500, message="echo sk-wrong-key-value"), match=lambda r: "retry" in str(r.body))
        api = backend(server, "openai", api_key_env="COMLRL_TEST_API_KEY", max_retries=1)
        with caplog.at_level(logging.DEBUG, logger="comlrl.rollout.api"):
            with pytest.raises(APIRequestError, match="HTTP 401") as denied:
                api.generate([GenerationRequest("p")])
            with pytest.raises(APIRequestError, match="HTTP 500") as echoed:
                api.generate([GenerationRequest("retry")])
    for text in (str(denied.value), str(echoed.value), repr(api), caplog.text):
        assert "sk-wrong-key-value" not in text
    assert "***" in str(echoed.value)


def test_malformed_json_exhausted_is_a_response_error(api_server):
    api = backend(api_server, "openai", max_retries=1)
    api_server.always(malformed(b"<html>bad gateway</html>"))
    with pytest.raises(APIResponseError, match=r"2 attempt\(s\).*malformed JSON") as info:
        api.generate([GenerationRequest("p")])
    assert api_server.url("openai") in str(info.value) and api.stats["malformed"] == 2

    strict = backend(api_server, "openai", max_retries=3, retry_malformed_json=False)
    api_server.reset()
    api_server.always(malformed())
    with pytest.raises(APIResponseError, match=r"1 attempt\(s\) \(non-retryable\)"):
        strict.generate([GenerationRequest("p")])


@pytest.mark.parametrize("fmt,field,needle", [
    ("openai", "choices", "`choices`"),
    ("anthropic", "content", "`content`"),
    ("openai_responses", "output", "`output[].content[].text` (or `output_text`)"),
    ("generic", "completions", "`completions` is missing"),
])
def test_missing_field_is_a_response_error_without_retry(api_server, fmt, field, needle):
    api = backend(api_server, fmt, max_retries=3)
    api_server.script(drop_field(field))
    with pytest.raises(APIResponseError) as info:
        api.generate([GenerationRequest("p")])
    assert needle in str(info.value) and api_server.url(fmt) in str(info.value)
    assert fmt.split("_")[0] in str(info.value)
    assert api_server.request_count == 1  # a schema mismatch does not fix itself


def test_openai_missing_message_content_names_the_path(api_server):
    api = backend(api_server, "openai")
    api_server.script(json_reply({"choices": [{"message": {"role": "assistant"}, "finish_reason": "stop"}]}))
    with pytest.raises(APIResponseError, match=r"`choices\[0\]\.message\.content` is missing"):
        api.generate([GenerationRequest("p")])


def test_generate_or_errors_keeps_good_requests(api_server):
    api = backend(api_server, "openai", max_retries=1)
    api_server.always(http_error(503), match=lambda r: "bad" in str(r.body))
    requests = [GenerationRequest(p) for p in ("a", "bad", "c")]
    results = api.generate_or_errors(requests, SamplingParams(n=2))
    assert [c.text for c in results[0]] == ["re: a #0", "re: a #1"]
    assert isinstance(results[1], APIRequestError) and results[1].status == 503
    assert [c.text for c in results[2]] == ["re: c #0", "re: c #1"]
    assert api.stats["failed_requests"] == 1 and api.stats["requests"] == 3 and api.stats["completions"] == 4
    with pytest.raises(APIRequestError, match="HTTP 503"):
        api.generate(requests)


def test_one_failed_candidate_fails_its_request(api_server):
    api = backend(api_server, "anthropic", max_retries=0, max_concurrency=1)
    api_server.script(json_reply({"content": [{"type": "text", "text": "fine"}]}), http_error(500))
    results = api.generate_or_errors([GenerationRequest("p"), GenerationRequest("q")], SamplingParams(n=2))
    assert isinstance(results[0], APIRequestError) and len(results[1]) == 2


# ---------------------------------------------------------------------------------------------------
# Backoff timing and concurrency


def test_retry_after_is_honoured_and_capped(api_server):
    api = backend(api_server, "openai", backoff_base=0.0, backoff_max=0.15)
    api_server.script(http_error(429, retry_after="0.08"), http_error(429, retry_after="30"))
    start = time.monotonic()
    api.generate([GenerationRequest("p")])
    elapsed = time.monotonic() - start
    t = [r.time for r in api_server.requests]
    assert t[1] - t[0] >= 0.08 - 0.005  # the server's 0.08 s
    assert t[2] - t[1] >= 0.15 - 0.005  # 30 s capped at backoff_max
    assert elapsed < 5.0  # the uncapped 30 s Retry-After was not slept


def test_backoff_total_is_bounded(api_server):
    # base 0.2, cap 0.25: the retries wait at most 0.2 + 0.25 + 0.25 s (uncapped: 0.2 + 0.4 + 0.8 s),
    # and with full jitter their sum is far below that bound on average.
    api = backend(api_server, "openai", backoff_base=0.2, backoff_max=0.25, max_retries=3, seed=1)
    api_server.script(*[http_error(500)] * 3)
    api.generate([GenerationRequest("p")])
    gaps = [b.time - a.time for a, b in zip(api_server.requests, api_server.requests[1:])]
    assert len(gaps) == 3
    assert all(gap < bound + 0.2 for gap, bound in zip(gaps, (0.2, 0.25, 0.25)))
    # The waits are the seeded jitter stream's draws (plus request latency), not fixed steps.
    expected_rng = random.Random(1)
    expected = [backoff_delay(k, 0.2, 0.25, expected_rng) for k in range(3)]
    assert all(e - 0.005 <= gap < e + 0.2 for gap, e in zip(gaps, expected))


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "generic"])
def test_concurrency_preserves_request_order(api_server, fmt):
    # Earlier prompts answer slower, so responses arrive in reverse order.
    prompts = [f"p{i}" for i in range(8)]
    api_server.latency = lambda r: 0.02 * (8 - int(prompt_text(fmt, r.body)[1:]))
    api = backend(api_server, fmt, max_concurrency=4)
    out = api.generate([GenerationRequest(p, policy=f"pol{i}") for i, p in enumerate(prompts)],
                       SamplingParams(n=2))
    assert len(out) == 8
    for i, completions in enumerate(out):
        assert sorted(c.text for c in completions) == [f"re: p{i} #0", f"re: p{i} #1"]
        assert all(c.policy == f"pol{i}" for c in completions)
    assert 2 <= api_server.max_in_flight <= 4
