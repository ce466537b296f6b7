"""The OpenAI-compatible backend against a loopback chat server process (tests/llm_stub.py) scripted per test:
retries, Retry-After, 5xx, time-outs, malformed bodies, image parts, no key leak. The scripted replies are
the documented shapes of OpenAI responses (tests/data/openai_exchanges.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cftools.llm import LLMError, make_backend
from cftools.llm.openai_backend import OpenAIBackend

EXCHANGES = json.loads((Path(__file__).parent / "data" / "openai_exchanges.json").read_text())
KEY = "sk-test-SECRET-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Question: How many cats are there?\nAnswer: 2"}]
PARAMS = {"temperature": 0.0, "max_tokens": 64, "stop": ["\nQuestion:"]}


def reply(name: str) -> dict:
    """One recorded exchange as a scripted reply of the stub."""
    exchange = EXCHANGES[name]
    return {"status": exchange["status"], "headers": exchange["headers"], "body": exchange["body"]}


def late(seconds: float) -> dict:
    """A reply that comes after SECONDS: past the backend's time-out."""
    return {"text": "too late", "delay": seconds}


@pytest.fixture
def sleeps():
    return []


def make(llm_server, monkeypatch, sleeps, timeout: float = 5.0) -> OpenAIBackend:
    monkeypatch.setenv("MY_LLM_KEY", KEY)
    return OpenAIBackend(model="gpt-4o-mini", base_url=llm_server.base_url, api_key_env="MY_LLM_KEY",
                         timeout=timeout, request_attempts=4, backoff_initial=0.5, backoff_max=30.0,
                         sleep=sleeps.append)


@pytest.fixture
def backend(llm_server, monkeypatch, sleeps):
    b = make(llm_server, monkeypatch, sleeps)
    yield b
    b.close()


@pytest.fixture
def impatient(llm_server, monkeypatch, sleeps):
    """A backend that gives up on a reply after 0.3 s."""
    b = make(llm_server, monkeypatch, sleeps, timeout=0.3)
    yield b
    b.close()


def test_success_records_text_tokens_latency_and_sends_the_request(backend, llm_server):
    llm_server.script(reply("success"))
    completion = backend.complete(MESSAGES, PARAMS)
    assert completion.text.endswith("New answer: 3")
    assert (completion.prompt_tokens, completion.completion_tokens) == (412, 57)
    assert completion.latency_s is not None and completion.latency_s >= 0
    [request] = llm_server.requests()
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert body["model"] == "gpt-4o-mini" and body["messages"] == MESSAGES
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["stop"] == ["\nQuestion:"]
    assert request["headers"]["authorization"] == f"Bearer {KEY}"


def test_429_then_success_waits_what_retry_after_asks(backend, llm_server, sleeps):
    llm_server.script(reply("rate_limited"), reply("success"))
    completion = backend.complete(MESSAGES, PARAMS)
    assert completion.text.endswith("New answer: 3")
    assert len(llm_server.requests()) == 2
    assert sleeps == [2.0]


def test_retry_after_ms_is_honoured(backend, llm_server, sleeps):
    llm_server.script(reply("rate_limited_ms"), reply("success"))
    backend.complete(MESSAGES, PARAMS)
    assert sleeps == [pytest.approx(0.35)]


def test_retry_after_as_an_http_date_is_honoured(backend, llm_server, sleeps):
    from email.utils import formatdate
    import time

    limited = reply("rate_limited")
    limited["headers"] = {**limited["headers"], "retry-after": formatdate(time.time() + 20, usegmt=True)}
    llm_server.script(limited, reply("success"))
    backend.complete(MESSAGES, PARAMS)
    assert len(sleeps) == 1 and 15 <= sleeps[0] <= 21


def test_500_is_retried_with_growing_backoff_then_succeeds(backend, llm_server, sleeps):
    llm_server.script(reply("server_error"), reply("server_error"), reply("success"))
    assert backend.complete(MESSAGES, PARAMS).text
    assert len(llm_server.requests()) == 3
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] and sleeps[1] >= 1.0  # exponential with jitter


def test_persistent_500_gives_up_after_the_configured_attempts(backend, llm_server, sleeps):
    llm_server.script(*[reply("server_error")] * 5)
    with pytest.raises(LLMError) as err:
        backend.complete(MESSAGES, PARAMS)
    assert len(llm_server.requests()) == 4 and len(sleeps) == 3
    assert "HTTP 500" in str(err.value) and err.value.retryable


def test_503_is_retried(backend, llm_server, sleeps):
    llm_server.script(503, reply("success"))
    assert backend.complete(MESSAGES, PARAMS).text.endswith("New answer: 3")
    assert len(llm_server.requests()) == 2 and len(sleeps) == 1


def test_timeout_is_retried_then_succeeds(impatient, llm_server, sleeps):
    llm_server.script(late(1.5))  # then the default reply: a rewrite ending in the count plus one
    assert impatient.complete(MESSAGES, PARAMS).text.endswith("New answer: 3")
    assert len(llm_server.requests()) == 2 and len(sleeps) == 1


def test_persistent_timeout_becomes_a_retryable_error(impatient, llm_server):
    llm_server.script(*[late(1.5)] * 4)
    with pytest.raises(LLMError) as err:
        impatient.complete(MESSAGES, PARAMS)
    assert len(llm_server.requests()) == 4
    assert "Timeout" in str(err.value) and err.value.retryable


@pytest.mark.parametrize("name", ["malformed_no_choices", "malformed_null_content"])
def test_malformed_completion_is_an_error_and_not_retried(backend, llm_server, sleeps, name):
    llm_server.script(reply(name))
    with pytest.raises(LLMError, match="malformed completion"):
        backend.complete(MESSAGES, PARAMS)
    assert len(llm_server.requests()) == 1 and sleeps == []


def test_non_json_body_is_a_malformed_completion(backend, llm_server):
    llm_server.script({"status": 200, "headers": {"content-type": "application/json"},
                       "raw": "<html>upstream proxy error</html>"})
    with pytest.raises(LLMError, match="malformed completion"):
        backend.complete(MESSAGES, PARAMS)


def test_401_is_not_retried_and_the_key_never_reaches_the_error(backend, llm_server, sleeps):
    llm_server.script(reply("unauthorized"))
    with pytest.raises(LLMError) as err:
        backend.complete(MESSAGES, PARAMS)
    assert len(llm_server.requests()) == 1 and sleeps == []
    assert "HTTP 401" in str(err.value)
    assert KEY not in str(err.value) and KEY not in repr(err.value) and KEY not in repr(backend)
    assert err.value.__cause__ is None and err.value.__context__ is None


def test_image_parts_are_sent_as_data_urls(backend, llm_server):
    image = "data:image/png;base64,iVBORw0KGgo="
    messages = [{"role": "user", "content": [{"type": "text", "text": "How many cats?"},
                                             {"type": "image_url", "image_url": {"url": image}}]}]
    backend.complete(messages, {"temperature": 0.0, "max_tokens": 8})
    [request] = llm_server.requests()
    sent = request["body"]["messages"][0]["content"]
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
