"""The OpenAI-compatible backend against replayed HTTP exchanges (respx): retries, Retry-After, errors, no key leak."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import respx

from cftools.llm import LLMError, make_backend
from cftools.llm.openai_backend import OpenAIBackend

EXCHANGES = json.loads((Path(__file__).parent / "data" / "openai_exchanges.json").read_text())
BASE = "https://llm.example.test/v1"
URL = BASE + "/chat/completions"
KEY = "sk-test-SECRET-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Question: How many cats are there?\nAnswer: 2"}]
PARAMS = {"temperature": 0.0, "max_tokens": 64, "stop": ["\nQuestion:"]}


def reply(name: str) -> httpx.Response:
    exchange = EXCHANGES[name]
    return httpx.Response(exchange["status"], headers=exchange["headers"], json=exchange["body"])


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def backend(monkeypatch, sleeps):
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    b = OpenAIBackend(model="gpt-4o-mini", base_url=BASE, api_key_env="MY_LLM_KEY", timeout=5.0,
                      request_attempts=4, backoff_initial=0.5, backoff_max=30.0, sleep=sleeps.append)
    yield b
    b.close()


@respx.mock
def test_success_records_text_tokens_latency_and_sends_the_request(backend):
    route = respx.post(URL).mock(return_value=reply("success"))
    completion = backend.complete(MESSAGES, PARAMS)
    assert completion.text.endswith("New answer: 3")
    assert (completion.prompt_tokens, completion.completion_tokens) == (412, 57)
    assert completion.latency_s is not None and completion.latency_s >= 0
    request = route.calls.last.request
    body = json.loads(request.content)
    assert body["model"] == "gpt-4o-mini" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["stop"] == ["\nQuestion:"]
    assert request.headers["authorization"] == f"Bearer {KEY}"


@respx.mock
def test_429_then_success_waits_what_retry_after_asks(backend, sleeps):
    route = respx.post(URL).mock(side_effect=[reply("rate_limited"), reply("success")])
    completion = backend.complete(MESSAGES, PARAMS)
    assert completion.text.endswith("New answer: 3")
    assert route.call_count == 2
    assert sleeps == [2.0]


@respx.mock
def test_retry_after_ms_is_honoured(backend, sleeps):
    respx.post(URL).mock(side_effect=[reply("rate_limited_ms"), reply("success")])
    backend.complete(MESSAGES, PARAMS)
    assert sleeps == [pytest.approx(0.35)]


@respx.mock
def test_500_is_retried_with_growing_backoff_then_succeeds(backend, sleeps):
    route = respx.post(URL).mock(side_effect=[reply("server_error"), reply("server_error"), reply("success")])
    assert backend.complete(MESSAGES, PARAMS).text
    assert route.call_count == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] and sleeps[1] >= 1.0  # exponential with jitter


@respx.mock
def test_persistent_500_gives_up_after_the_configured_attempts(backend, sleeps):
    route = respx.post(URL).mock(return_value=reply("server_error"))
    with pytest.raises(LLMError) as err:
        backend.complete(MESSAGES, PARAMS)
    assert route.call_count == 4 and len(sleeps) == 3
    assert "HTTP 500" in str(err.value) and err.value.retryable


@respx.mock
def test_timeout_is_retried_then_succeeds(backend, sleeps):
    route = respx.post(URL).mock(side_effect=[httpx.ReadTimeout("timed out"), reply("success")])
    assert backend.complete(MESSAGES, PARAMS).text.endswith("3")
    assert route.call_count == 2 and len(sleeps) == 1


@respx.mock
def test_persistent_timeout_becomes_a_retryable_error(backend):
    route = respx.post(URL).mock(side_effect=httpx.ConnectTimeout("connect timed out"))
    with pytest.raises(LLMError) as err:
        backend.complete(MESSAGES, PARAMS)
    assert route.call_count == 4
    assert "Timeout" in str(err.value)


@respx.mock
@pytest.mark.parametrize("name", ["malformed_no_choices", "malformed_null_content"])
def test_malformed_completion_is_an_error_and_not_retried(backend, sleeps, name):
    route = respx.post(URL).mock(return_value=reply(name))
    with pytest.raises(LLMError, match="malformed completion"):
        backend.complete(MESSAGES, PARAMS)
    assert route.call_count == 1 and sleeps == []


@respx.mock
def test_non_json_body_is_a_malformed_completion(backend):
    respx.post(URL).mock(return_value=httpx.Response(200, headers={"content-type": "application/json"},
                                                     content=b"<html>upstream proxy error</html>"))
    with pytest.raises(LLMError, match="malformed completion"):
        backend.complete(MESSAGES, PARAMS)


@respx.mock
def test_401_is_not_retried_and_the_key_never_reaches_the_error(backend, sleeps):
    route = respx.post(URL).mock(return_value=reply("unauthorized"))
    with pytest.raises(LLMError) as err:
        backend.complete(MESSAGES, PARAMS)
    assert route.call_count == 1 and sleeps == []
    assert "HTTP 401" in str(err.value)
    assert KEY not in str(err.value) and KEY not in repr(err.value) and KEY not in repr(backend)
    assert err.value.__cause__ is None and err.value.__context__ is None


@respx.mock
def test_image_parts_are_sent_as_data_urls(backend):
    route = respx.post(URL).mock(return_value=reply("success"))
    image = "data:image/png;base64,iVBORw0KGgo="
    messages = [{"role": "user", "content": [{"type": "text", "text": "How many cats?"},
                                             {"type": "image_url", "image_url": {"url": image}}]}]
    backend.complete(messages, {"temperature": 0.0, "max_tokens": 8})
    sent = json.loads(route.calls.last.request.content)["messages"][0]["content"]
    assert sent[1] == {"type": "image_url", "image_url": {"url": image}}


def test_api_key_comes_only_from_the_named_environment_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        make_backend({"backend": "openai", "model": "gpt-4o-mini"})
    # a local server needs no key
    local = make_backend({"backend": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"})
    assert local.cache_id == "openai@http://127.0.0.1:9/v1"
    local.close()


def test_a_key_written_into_the_config_is_refused():
    with pytest.raises(LLMError, match="api_key_env") as err:
        make_backend({"backend": "openai", "model": "m", "api_key": KEY})
    assert KEY not in str(err.value)
