"""The Files and Batches endpoints of an OpenAI-compatible API: one JSONL file of chat requests in, results out.

Each request line carries its request-cache key as `custom_id`, so a result is stored under exactly the key a
synchronous call would have used. The body is what `OpenAIBackend` sends for the same messages and parameters.
Calls are retried like chat calls (429, 5xx, connection errors); errors never carry the API key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import httpx
import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt

from cftools.llm.base import Completion, LLMError, Message
from cftools.llm.openai_backend import SDK_PARAMS, OpenAIBackend, is_retryable
from cftools.llm.reply_cap import capped_client

ENDPOINT = "/v1/chat/completions"
BATCH_MAX_REQUESTS = 50_000  # the Batch API's own limit of requests in one batch
DEFAULT_WINDOW = "24h"
FINAL_STATUSES = ("completed", "failed", "expired", "cancelled")


@dataclass(frozen=True)
class BatchRequest:
    key: str  # the request-cache key, sent as custom_id
    messages: list[Message]
    params: dict[str, Any]


@dataclass
class BatchState:
    """What the API says about a batch now."""

    batch_id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: Optional[str] = None
    error_file_id: Optional[str] = None
    expires_at: Optional[int] = None
    input_file_id: Optional[str] = None

    @property
    def finished(self) -> bool:
        return self.status in FINAL_STATUSES


@dataclass
class BatchResults:
    """A finished batch's answers by request key: completions, and one reason per request that failed."""

    completions: dict[str, Completion] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    # Later valid answers of a custom_id answered again, in the files' order: paid for too, so the first *usable*
    # answer (one the generator's parser reads) is chosen among the first and these (`generate.batch_api`).
    later: dict[str, list[Completion]] = field(default_factory=dict)
    # What the result files held that is no request's answer, one line each naming the file's line: a custom_id
    # answered again (kept as a later answer), a custom_id the batch never sent, a line that cannot be read.
    problems: list[str] = field(default_factory=list)
    repeated: int = 0
    unknown: int = 0
    unreadable: int = 0


def request_body(model: str, messages: list[Message], params: dict[str, Any]) -> dict[str, Any]:
    """The chat request body, with the same parameters `OpenAIBackend` passes to the SDK."""
    return {"model": model, "messages": messages,
            **{k: v for k, v in params.items() if k in SDK_PARAMS and v is not None}}


def requests_jsonl(model: str, requests: list[BatchRequest]) -> bytes:
    lines = [json.dumps({"custom_id": r.key, "method": "POST", "url": ENDPOINT,
                         "body": request_body(model, r.messages, r.params)}, ensure_ascii=False, separators=(",", ":"))
             for r in requests]
    return ("\n".join(lines) + "\n").encode("utf-8")


class BatchClient:
    """Files + Batches calls on the endpoint (and with the key) of an `OpenAIBackend`."""

    def __init__(self, backend: OpenAIBackend) -> None:
        self.backend = backend
        self._client = backend._client  # the backend's SDK client: same endpoint, key and connection limits
        # a results file holds a batch's every reply: its download is capped per reply times the batch's size
        # (BATCH_MAX_REQUESTS), and each line is checked against max_reply_bytes as it is read
        self._files = backend._client.copy(http_client=capped_client(
            backend.max_reply_bytes * BATCH_MAX_REQUESTS, httpx.Timeout(backend._client.timeout),
            httpx.Limits(max_connections=4)))

    def _call(self, what: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        retrying = Retrying(stop=stop_after_attempt(self.backend.request_attempts), wait=self.backend._wait,
                            retry=retry_if_exception(is_retryable), sleep=self.backend._sleep, reraise=True)
        failure: LLMError | None = None
        try:
            return retrying(func, *args, **kwargs)
        except openai.APIError as exc:
            failure = LLMError(f"{what}: " + self.backend.describe(exc), retryable=is_retryable(exc))
        except Exception as exc:  # noqa: BLE001 (a body the SDK cannot read)
            failure = LLMError(f"{what}: " + self.backend.describe(exc))
        raise failure  # outside the handler: no chained exception can carry the key

    def upload(self, requests: list[BatchRequest]) -> str:
        data = requests_jsonl(self.backend.model, requests)
        uploaded = self._call("uploading the batch file", self._client.files.create,
                              file=("cftools-batch.jsonl", data, "application/jsonl"), purpose="batch")
        return uploaded.id

    def create(self, input_file_id: str, window: str = DEFAULT_WINDOW, metadata: dict[str, str] | None = None) -> BatchState:
        batch = self._call("creating the batch", self._client.batches.create, input_file_id=input_file_id,
                           endpoint=ENDPOINT, completion_window=window, metadata=metadata or None)
        return state_of(batch)

    def retrieve(self, batch_id: str) -> BatchState:
        return state_of(self._call(f"asking for batch {batch_id}", self._client.batches.retrieve, batch_id))

    def cancel(self, batch_id: str) -> BatchState:
        return state_of(self._call(f"cancelling batch {batch_id}", self._client.batches.cancel, batch_id))

    def find_by_input(self, input_file_id: str) -> Optional[BatchState]:
        """The batch made from INPUT_FILE_ID, if one was (a run killed while the create call was under way)."""
        page = self._call("listing batches", self._client.batches.list, limit=100)
        for batch in page.data:
            if batch.input_file_id == input_file_id:
                return state_of(batch)
        return None

    def file_text(self, file_id: str) -> str:
        return self._call(f"downloading file {file_id}", self._files.files.content, file_id).text

    def results(self, state: BatchState) -> BatchResults:
        """The finished batch's output and error files read into completions and errors by request key."""
        results = BatchResults()
        sent = sent_keys(self.file_text(state.input_file_id)) if state.input_file_id else None
        seen: dict[str, str] = {}
        for file_id, name in ((state.output_file_id, "output"), (state.error_file_id, "error")):
            if file_id:
                read_result_lines(self.file_text(file_id), state.batch_id, self.backend, results, sent=sent,
                                  seen=seen, file_name=f"{name} file {file_id}")
        return results


def sent_key_of(line: str) -> Optional[str]:
    """The custom_id of a result line too large to parse whole (it comes first in the API's lines)."""
    import re

    match = re.search(r'"custom_id"\s*:\s*"([^"\\]{1,200})"', line[:4096])
    return match.group(1) if match else None


def sent_keys(input_text: str) -> set[str]:
    """The custom_ids of a batch's input file (the requests it was sent)."""
    keys = set()
    for line in input_text.splitlines():
        try:
            keys.add(json.loads(line)["custom_id"])
        except (ValueError, KeyError, TypeError):
            continue
    return keys


def state_of(batch: Any) -> BatchState:
    counts = getattr(batch, "request_counts", None)
    return BatchState(batch_id=batch.id, status=batch.status, total=getattr(counts, "total", 0) or 0,
                      completed=getattr(counts, "completed", 0) or 0, failed=getattr(counts, "failed", 0) or 0,
                      output_file_id=getattr(batch, "output_file_id", None),
                      error_file_id=getattr(batch, "error_file_id", None),
                      expires_at=getattr(batch, "expires_at", None), input_file_id=getattr(batch, "input_file_id", None))


def read_result_lines(text: str, batch_id: str, backend: OpenAIBackend, into: BatchResults,
                      sent: Optional[set[str]] = None, seen: Optional[dict[str, str]] = None,
                      file_name: str = "results") -> None:
    """Result lines: a chat completion body with status 200, or an error (a request's own, or the batch's, such
    as `batch_expired`). A line that cannot be read is an error of that request, never a guess. A custom_id given
    again keeps the first valid answer (a paid answer is never replaced); the repeat, an id the batch never sent
    (not in SENT) and a line with no readable custom_id are counted and reported by line in INTO.problems. A valid
    answer repeated after the first is kept in INTO.later: the caller serves the first usable one."""
    from openai.types.chat import ChatCompletion

    seen = {} if seen is None else seen
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"batch {batch_id} {file_name} line {number}"
        if len(line) > backend.max_reply_bytes:  # one reply past the cap: a failure of its request, not stored
            key = sent_key_of(line)
            if key is not None and key not in into.completions:
                into.errors[key] = f"batch {batch_id}: the reply is larger than max_reply_bytes = " \
                                   f"{backend.max_reply_bytes}; not stored"
            else:
                into.unreadable += 1
                into.problems.append(f"{where}: a line larger than max_reply_bytes; left out")
            continue
        try:
            record = json.loads(line)
            key = record["custom_id"]
            if not isinstance(key, str):
                raise TypeError("custom_id is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            into.unreadable += 1
            into.problems.append(f"{where}: unreadable ({type(exc).__name__}: {str(exc)[:80]}); no request can "
                                 "be tied to it")
            continue
        if sent is not None and key not in sent:
            into.unknown += 1
            into.problems.append(f"{where}: custom_id {key[:40]!r} was not sent in this batch; left out")
            continue
        repeat_of_answer = key in into.completions
        if key in seen:
            into.repeated += 1
            kept = "kept after the first valid answer (the first usable one is served)" if repeat_of_answer \
                else "the first valid answer taken"
            into.problems.append(f"{where}: custom_id {key[:40]!r} repeated (first on {seen[key]}); {kept}")
        else:
            seen[key] = f"{file_name} line {number}"
        response = record.get("response") or {}
        body = response.get("body")
        if response.get("status_code") == 200 and isinstance(body, dict):
            try:
                completion = backend._read(ChatCompletion.model_validate(body))
            except Exception as exc:  # noqa: BLE001 (a malformed body fails this request only)
                into.errors[key] = backend.describe_text(f"batch {batch_id}: malformed completion: {exc}")
                continue
            completion.extra["batch_id"] = batch_id
            if repeat_of_answer:
                into.later.setdefault(key, []).append(completion)
                continue
            into.completions[key] = completion
            into.errors.pop(key, None)
        elif key not in into.completions:
            into.errors[key] = backend.describe_text(f"batch {batch_id}: {error_reason(record)}")


def error_reason(record: dict[str, Any]) -> str:
    error = record.get("error") or ((record.get("response") or {}).get("body") or {}).get("error") or {}
    status = (record.get("response") or {}).get("status_code")
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else str(error)
    prefix = f"HTTP {status}" if status else (code or "error")
    return f"{prefix}: {message or code or 'no reason given'}"
