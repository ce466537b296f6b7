"""A byte cap on what an API may send back (`[llm] max_reply_bytes`, `[images] max_reply_bytes`).

The cap sits in the HTTP transport under the `openai` SDK: a reply is counted as it arrives and refused once it
passes the cap (or at once, when its Content-Length says it will), so an endless or hostile reply never reaches
memory whole, the request cache or the store. The refusal is not retried: the same request would get the same
reply. The defaults are far above any real reply (a chat reply is bounded by max_tokens; an images reply by n
images of the size asked for).
"""

from __future__ import annotations

from typing import Iterator, Optional

import httpx

DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024  # chat: 8 MiB, some 2 million tokens of text
DEFAULT_MAX_IMAGES_REPLY_BYTES = 256 * 1024 * 1024  # images API: 256 MiB of base64


class ReplyTooLarge(Exception):
    """A reply larger than the configured cap (refused before it was read whole)."""

    def __init__(self, limit: int, seen: Optional[int] = None) -> None:
        self.limit = limit
        size = f"{seen} bytes or more" if seen is not None else "more"
        super().__init__(f"the reply is larger than max_reply_bytes = {limit} ({size}); not stored")


def too_large(exc: BaseException) -> Optional[ReplyTooLarge]:
    """The ReplyTooLarge behind EXC (the SDK wraps what the transport raised in a connection error), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ReplyTooLarge):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class CappedStream(httpx.SyncByteStream):
    def __init__(self, stream: httpx.SyncByteStream, limit: int) -> None:
        self._stream, self._limit = stream, limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise ReplyTooLarge(self._limit, seen)
            yield chunk

    def close(self) -> None:
        self._stream.close()


class CappedTransport(httpx.BaseTransport):
    """An HTTP transport whose replies may hold at most LIMIT bytes."""

    def __init__(self, inner: httpx.BaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self._limit:
            response.close()
            raise ReplyTooLarge(self._limit, int(length))
        response.stream = CappedStream(response.stream, self._limit)
        return response

    def close(self) -> None:
        self._inner.close()


def capped_client(limit: int, timeout: httpx.Timeout, limits: httpx.Limits) -> httpx.Client:
    """An httpx client for the SDK whose replies are capped at LIMIT bytes."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        from cftools.errors import WorkspaceError

        raise WorkspaceError(f"cftools.toml: max_reply_bytes must be a whole number of bytes >= 1, got {limit!r}")
    return httpx.Client(timeout=timeout, transport=CappedTransport(httpx.HTTPTransport(limits=limits), limit))
