"""The request cache (table `llm_cache`): a response per (backend, model, rendered messages, parameters).

The parser is not part of the key, so re-parsing stored outputs never calls a model again.
"""

from __future__ import annotations

from typing import Iterable

from sqlalchemy import insert, select
from sqlmodel import Session

from cftools.llm.base import Completion
from cftools.models import CachedResponse, utcnow
from cftools.store import Store, in_chunks



def cached_completions(store: Store, keys: Iterable[str]) -> dict[str, Completion]:
    """The cached responses for these keys (missing keys are absent from the result)."""
    keys = list(dict.fromkeys(keys))
    found: dict[str, Completion] = {}
    with store.session() as session:
        for part in in_chunks(keys):
            rows = session.execute(select(CachedResponse).where(CachedResponse.key.in_(part))).scalars()
            for row in rows:
                found[row.key] = Completion(text=row.output, prompt_tokens=row.prompt_tokens,
                                            completion_tokens=row.completion_tokens, latency_s=row.latency_s,
                                            cached=True)
    return found


def cached_completion(store: Store, key: str) -> Completion | None:
    return cached_completions(store, [key]).get(key)


def save_completion(session: Session, key: str, backend: str, model: str, completion: Completion) -> None:
    """Insert or replace (after --refresh) the cached response for KEY, inside the caller's transaction."""
    row = session.execute(select(CachedResponse).where(CachedResponse.key == key)).scalar_one_or_none()
    if row is None:
        row = CachedResponse(key=key, backend=backend, model=model, output=completion.text)
    row.output = completion.text
    row.prompt_tokens = completion.prompt_tokens
    row.completion_tokens = completion.completion_tokens
    row.latency_s = completion.latency_s
    row.created_at = utcnow()
    session.add(row)


def save_completions(session: Session, backend: str, model: str, completions: list[tuple[str, Completion]]) -> None:
    """Insert or replace many cached responses in one go (keys already cached are updated)."""
    if not completions:
        return
    latest = dict(completions)
    existing = set(session.execute(select(CachedResponse.key).where(CachedResponse.key.in_(list(latest)))).scalars())
    for key in existing:
        save_completion(session, key, backend, model, latest[key])
    now = utcnow()
    rows = [{"key": key, "backend": backend, "model": model, "output": c.text, "prompt_tokens": c.prompt_tokens,
             "completion_tokens": c.completion_tokens, "latency_s": c.latency_s, "created_at": now}
            for key, c in latest.items() if key not in existing]
    if rows:
        session.execute(insert(CachedResponse), rows)
