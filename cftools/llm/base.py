"""What every LLM backend shares: chat messages in, one `Completion` out, errors without secrets."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from cftools.errors import ALL_FAILED, CftoolsError, Hint

# A chat message is the OpenAI shape: {"role": "user", "content": "text"} or content as a list of parts,
# [{"type": "text", "text": ...}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}].
Message = dict[str, Any]

DEFAULT_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 320}


class LLMError(CftoolsError):
    """A failed model call; the message names what went wrong and never carries a key."""

    def __init__(self, message: str, retryable: bool = False, *, hint: Optional[Hint] = None) -> None:
        super().__init__(message, hint=hint)
        self.retryable = retryable


class EndpointUnreachable(CftoolsError):
    """An endpoint that has not answered once (connection refused, unknown host, no connection or no answer in
    time): the run stops at once with one line naming the URL and the setting to change, instead of failing each
    request in turn after its retries. Not an LLMError: no request of the run is recorded as failed."""

    exit_code = ALL_FAILED  # every request failed: nothing new was stored (cftools.commands.exit_codes)
    stops_run = True  # cftools.llm.runner ends the run with it


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """One model behind one interface. `cache_id` names backend+endpoint+loader for the request cache."""

    name: str
    model: str

    @property
    def cache_id(self) -> str: ...

    def complete(self, messages: list[Message], params: dict[str, Any]) -> Completion: ...

    def close(self) -> None: ...


def text_message(text: str, role: str = "user") -> Message:
    return {"role": role, "content": text}


def message_text(message: Message) -> str:
    """The text of a message; raises if it holds anything but text (for text-only backends)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if part.get("type") != "text":
            raise LLMError(f"this backend takes text only, got a {part.get('type')!r} part")
        parts.append(part.get("text", ""))
    return "\n".join(parts)


def request_key(cache_id: str, model: str, messages: list[Message], params: dict[str, Any]) -> str:
    """The request cache key: backend, model, rendered messages and sampling parameters (never a parser)."""
    blob = json.dumps({"backend": cache_id, "model": model, "messages": messages, "params": params},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def render_messages(messages: list[Message]) -> str:
    """Messages as one readable text for provenance (image parts shown by their size, not their bytes)."""
    lines = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.get("type") == "text":
                    texts.append(part.get("text", ""))
                else:
                    url = str((part.get("image_url") or {}).get("url", ""))
                    texts.append(f"[{part.get('type')} {len(url)} chars]")
            content = "\n".join(texts)
        lines.append(content if len(messages) == 1 else f"<{message.get('role')}>\n{content}")
    return "\n".join(lines)
