"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server) through the `openai` SDK.

The SDK's own retries are off; ours (tenacity) retry 429, 5xx, connection errors and time-outs with
exponential backoff, and wait what a Retry-After (or retry-after-ms) header asks for. Until the endpoint has
answered once, a connection that does not open (refused, unknown host, none within CONNECT_TIMEOUT_S) is tried
UNANSWERED_ATTEMPTS times only, and then the run stops with `EndpointUnreachable`, naming the URL (without
credentials) and the setting to change. The API key is read from the environment variable the configuration
names; it is never stored, printed, logged or put in error text.
"""

from __future__ import annotations

import email.utils
import os
import socket
import time
from typing import Any, Callable

import httpx
import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential, wait_random

from cftools.errors import CftoolsError, error_text, scrub_known_secrets
from cftools.llm.base import Completion, EndpointUnreachable, LLMError, Message
from cftools.llm.reply_cap import DEFAULT_MAX_REPLY_BYTES, capped_client, too_large

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
SDK_PARAMS = ("temperature", "max_tokens", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty",
              "response_format")  # response_format: a generator's output schema (cftools.llm.structured)
ERROR_CHARS = 500
CONNECT_TIMEOUT_S = 5.0  # a TCP connection takes milliseconds; one that has not opened in seconds will not
UNANSWERED_ATTEMPTS = 2  # tries of a request that cannot connect while the endpoint has never answered
UNANSWERED_WAIT_S = 0.5  # the longest wait between those tries


def retry_after_seconds(exc: BaseException) -> float | None:
    """The wait a 429/503 response asks for (retry-after-ms, or Retry-After in seconds or as an HTTP date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    if headers.get("retry-after-ms"):
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, LLMError):
        return exc.retryable
    if too_large(exc) is not None:  # the same request would get the same reply
        return False
    return isinstance(exc, (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError))


class OpenAIBackend:
    name = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = DEFAULT_KEY_ENV,
                 timeout: float = 120.0, request_attempts: int = 6, backoff_initial: float = 1.0,
                 backoff_max: float = 60.0, sleep: Callable[[float], None] = time.sleep,
                 max_connections: int = 128, max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
                 setting: str = "[llm] base_url") -> None:
        """SETTING: where the endpoint is configured, named when it cannot be reached."""
        self.model = model
        self.setting = setting
        self.timeout = timeout
        self._answered = False  # the endpoint has answered (any HTTP reply): its failures are passing ones
        self._unreachable: EndpointUnreachable | None = None
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._cache_id = f"openai@{_without_userinfo(self.base_url)}"  # asked per request: parsed once
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env)
        if not key:
            if self.base_url == DEFAULT_BASE_URL:
                raise LLMError(f"the OpenAI backend needs an API key in the environment variable {api_key_env}")
            key = "none"  # local servers (vLLM, Ollama, llama.cpp) accept any key
        self._secrets = [key] if key != "none" else []
        self.request_attempts = request_attempts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.max_reply_bytes = max_reply_bytes
        # the SDK puts its own time-out on every request: it gets the short connect time-out too
        timeouts = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S))
        http = capped_client(max_reply_bytes, timeouts,
                             httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=timeouts,
                                     http_client=http)

    def __repr__(self) -> str:  # never the key
        return f"OpenAIBackend(model={self.model!r}, base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    @property
    def cache_id(self) -> str:
        return self._cache_id

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc) if exc is not None else None
        if asked is not None:
            return min(asked, self.backoff_max)
        # exponential plus up to one initial step of jitter, built from waits every tenacity >= 8.2 has
        # (wait_exponential_jitter's keywords changed between releases)
        backoff = wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max) + wait_random(
            0, self.backoff_initial)
        wait = min(backoff(state), self.backoff_max)
        return wait if self._answered else min(wait, UNANSWERED_WAIT_S)

    def _stop(self, state: RetryCallState) -> bool:
        """The configured attempts; UNANSWERED_ATTEMPTS for a connection that fails before the first answer."""
        if state.attempt_number >= self.request_attempts:
            return True
        exc = state.outcome.exception() if state.outcome else None
        return not self._answered and not_connected(exc) and state.attempt_number >= UNANSWERED_ATTEMPTS

    def retrying(self) -> Retrying:
        """The retry policy of one request (chat or images)."""
        return Retrying(stop=self._stop, wait=self._wait, retry=retry_if_exception(is_retryable),
                        sleep=self._sleep, reraise=True)

    def attempt(self, call: Callable[..., Any], *args: Any) -> Any:
        """One try of CALL, noting whether the endpoint answered; none once it is known to be unreachable."""
        if self._unreachable is not None:
            raise EndpointUnreachable(str(self._unreachable))
        try:
            result = call(*args)
        except openai.APIConnectionError:
            raise
        except Exception:  # an HTTP error status or an unreadable body: the server answered
            self._answered = True
            raise
        self._answered = True
        return result

    def unreachable(self, exc: BaseException) -> EndpointUnreachable | None:
        """EXC as the run-stopping error when the endpoint never answered, else None."""
        if self._answered or not not_connected(exc):
            return None
        self._unreachable = EndpointUnreachable(self.describe_text(unreachable_message(
            shown_url(self.base_url), exc, self.setting, self.timeout)))
        return self._unreachable

    def complete(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        started = time.perf_counter()
        failure: CftoolsError | None = None
        try:
            completion = self.retrying()(self.attempt, self._call_once, messages, params)
        except EndpointUnreachable as exc:
            failure = exc
        except LLMError as exc:
            failure = LLMError(self.describe_text(str(exc)), retryable=exc.retryable)
        except openai.APIError as exc:
            capped = too_large(exc)
            failure = self.unreachable(exc) or LLMError(str(capped) if capped else self.describe(exc),
                                                        retryable=is_retryable(exc))
        except Exception as exc:  # a body the SDK cannot read
            failure = LLMError("malformed completion: " + self.describe(exc))
        if failure is not None:
            raise failure  # raised outside the handler: no chained exception can carry the key
        completion.latency_s = time.perf_counter() - started
        return completion

    def _call_once(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        kwargs = {k: v for k, v in params.items() if k in SDK_PARAMS and v is not None}
        response = self._client.chat.completions.create(model=self.model, messages=messages, **kwargs)
        return self._read(response)

    def _read(self, response: Any) -> Completion:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise LLMError("malformed completion: no choices in the response")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None)
        if not isinstance(text, str):
            raise LLMError("malformed completion: the first choice has no text content")
        usage = getattr(response, "usage", None)
        # a reply that repeats the key (an echoing proxy, a prompt injection) must not carry it into the store
        return Completion(text=scrub_known_secrets(text, self._secrets),
                          prompt_tokens=getattr(usage, "prompt_tokens", None),
                          completion_tokens=getattr(usage, "completion_tokens", None),
                          extra={"finish_reason": getattr(choices[0], "finish_reason", None)})

    def describe(self, exc: BaseException) -> str:
        """A one-line reason for a failed call, with the API key (and anything key-shaped) removed."""
        status = getattr(exc, "status_code", None)
        return self.describe_text(f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {exc}")

    def describe_text(self, text: str) -> str:
        return error_text(text, self._secrets, ERROR_CHARS)

    def close(self) -> None:
        self._client.close()


def shown_url(url: str) -> str:
    """URL as an error message may show it: no user name, password, query or fragment (they may hold a key)."""
    try:
        parsed = httpx.URL(url)
        return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "the configured URL"


def error_chain(exc: BaseException) -> list[BaseException]:
    """EXC and the errors it was raised from, outermost first."""
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in seen:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def not_connected(exc: BaseException | None) -> bool:
    """EXC is a connection that never opened (refused, unknown host, connect time-out); a server that accepted and
    then was slow or hung up is left to the ordinary retries."""
    return isinstance(exc, openai.APIConnectionError) and any(
        isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout)) for error in error_chain(exc))


def connection_reason(exc: BaseException, timeout: float) -> str:
    """Why a connection failed, in a few words: from the OSError (or time-out) at the bottom of EXC's chain."""
    seen = error_chain(exc)
    for error in seen:
        if isinstance(error, httpx.ConnectTimeout):
            return f"no connection within {min(timeout, CONNECT_TIMEOUT_S):g} s"
        if isinstance(error, socket.gaierror):
            return "host name not found"
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
    for error in reversed(seen):
        if isinstance(error, OSError) and error.strerror:
            return error.strerror.lower()
    return str(seen[-1]).strip() or type(seen[-1]).__name__


def unreachable_message(url: str, exc: BaseException, setting: str, timeout: float) -> str:
    """The one line an unreachable endpoint gets: the URL, why, and what to change."""
    reason = connection_reason(exc, timeout)
    return f"cannot reach {url} ({reason}): start the server, or set {setting} in cftools.toml"


def _without_userinfo(url: str) -> str:
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None)) if parsed.userinfo else url
