"""Errors a user can act on. The CLI prints their message on one line and exits non-zero."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterable, Iterator

# Anything shaped like a credential, scrubbed even when it is not the secret we know of: an echoed
# `Authorization: Bearer ...` / `Token ...` header (a server may swap our token for a session one),
# an `api_key=...` field, or an OpenAI-style `sk-...` key.
CREDENTIAL_PATTERNS = (
    re.compile(r"(?i)\b(authorization|proxy-authorization|x-api-key|api[-_]?key)(\s*[:=]\s*[\"']?|[\"']\s*:\s*[\"'])"
               r"((?:bearer|token|basic)\s+)?[^\s\"',;}\]]+"),
    re.compile(r"(?i)\b(bearer|token)(\s+)()(?=\S*\d)[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"\b(sk|key|tok)(-)()[A-Za-z0-9_\-]{6,}"),
)

# Exit codes of requests that failed (documented with the others in cftools.commands.exit_codes).
PARTIAL_FAILURE = 3  # some failed; what succeeded is stored
ALL_FAILED = 4  # every one failed: nothing new was stored


class CftoolsError(Exception):
    """Base class: the message is meant for a person and carries no secret."""

    # A warning: nothing went wrong but nothing was done either; the CLI says "Warning:", still exits non-zero.
    is_warning = False
    exit_code = 1  # the CLI's exit code for it (see cftools.commands.exit_codes)


class WorkspaceError(CftoolsError):
    pass


class StoreError(CftoolsError):
    pass


class ModelCallsFailed(CftoolsError):
    """Model calls that failed after their retries: exit 4 when nothing new was stored, else 3 (partial failure)."""

    def __init__(self, message: str, attempted: int, failed: int) -> None:
        super().__init__(message)
        self.attempted = attempted
        self.failed = failed
        self.nothing_stored = failed >= attempted

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        return ALL_FAILED if self.nothing_stored else PARTIAL_FAILURE


class InputError(CftoolsError):
    """Bad input: names the file and the record (line or index)."""

    def __init__(self, path: object, reason: str, record: object | None = None) -> None:
        self.path = str(path)
        self.record = record
        self.reason = reason
        where = f"{self.path}" if record is None else f"{self.path}, {record}"
        super().__init__(f"{where}: {reason}")


class NoRecordsError(InputError):
    """An input file holds no records at all: nothing is ingested and no ingest run is recorded."""

    is_warning = True

    def __init__(self, path: object) -> None:
        super().__init__(path, "0 records; nothing was ingested")


# The shortest secret scrubbed out of stored text. A shorter "key" (a local server's "x" or "abc") protects
# nothing that its length does not already give away, and it occurs inside ordinary words: replacing it blanked
# letters out of every stored reply ("six" -> "si***" for the key "x"). Error texts scrub every length.
MIN_STORED_SECRET_LENGTH = 8


def scrub_known_secrets(text: str, secrets: Iterable[str], min_length: int = MIN_STORED_SECRET_LENGTH) -> str:
    """TEXT with each of SECRETS of at least MIN_LENGTH characters replaced by ***: for outputs that are stored (a
    model's reply), where the credential-shaped patterns of `scrub_secrets` would also change honest text."""
    for secret in secrets:
        if secret and len(secret) >= min_length:
            text = text.replace(secret, "***")
    return text


def scrub_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """TEXT with every known secret and anything credential-shaped replaced by ***."""
    text = scrub_known_secrets(text, secrets, min_length=1)  # in an error text a blanked letter costs nothing
    for pattern in CREDENTIAL_PATTERNS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}***", text)
    return text


def error_text(text: str, secrets: Iterable[str] = (), limit: int = 300) -> str:
    """A server's answer made fit for an error message: secrets scrubbed, one line, at most LIMIT characters.

    Scrubbing comes first: cut first, a secret straddling the cut keeps its start and no longer
    matches whole, so that start would be printed.
    """
    text = " ".join(scrub_secrets(str(text), secrets).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


@contextmanager
def naming_the_file(path: object) -> Iterator[None]:
    """Give PATH to an OSError raised without a file name in the block. A write that fails part-way (a full disk:
    ENOSPC comes from write() or close(), not open()) carries none, and the CLI's one-line error names the file."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
        raise OSError(exc.errno, reason, str(path)) from exc
