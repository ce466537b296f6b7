"""Errors a user can act on. The CLI prints their message on one line and exits non-zero."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

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


PLACEHOLDER = re.compile(r"\{(\w+)\}")


class Hint:
    """How a person acts on an error from the command line, kept out of the library's own words (its message names
    no option): TEXT, what the CLI says, where `{message}` stands for the error's message and `{name}` for the
    command-line option OPTIONS[name] (`Hint("{message}; pass {force} to replace it", force="--force")`). The error's
    `str`, the line the CLI's one error translator prints, is the hint's text so filled in."""

    __slots__ = ("text", "options")

    def __init__(self, text: str, **options: str) -> None:
        self.text, self.options = text, dict(options)

    def around(self, message: str) -> str:
        """TEXT with MESSAGE and the options put in, in one pass (not str.format: what is put in is not read again,
        and braces of any other name stay as they are)."""
        values = {**self.options, "message": message}
        return PLACEHOLDER.sub(lambda found: values.get(found.group(1), found.group(0)), self.text)

    def __repr__(self) -> str:
        return f"Hint({self.text!r}, **{self.options!r})"


class CftoolsError(Exception):
    """Base class: the message is meant for a person and carries no secret. A HINT says which command-line option
    acts on it; the text a person reads (`str`, the CLI's line) is the message with its hint."""

    # A warning: nothing went wrong but nothing was done either; the CLI says "Warning:", still exits non-zero.
    is_warning = False
    exit_code = 1  # the CLI's exit code for it (see cftools.commands.exit_codes)

    def __init__(self, *args: object, hint: Optional[Hint] = None) -> None:
        super().__init__(*args)
        self.hint = hint

    @property
    def message(self) -> str:
        """The library's own words: what went wrong, naming no command-line option."""
        return super().__str__()

    def __str__(self) -> str:
        """What a person reads (the CLI's one line): the message, with its hint's option put in where there is one."""
        return self.message if self.hint is None else self.hint.around(self.message)


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

    def __init__(self, path: object, reason: str, record: object | None = None, *,
                 hint: Optional[Hint] = None) -> None:
        self.path = str(path)
        self.record = record
        self.where = f"{self.path}" if record is None else f"{self.path}, {record}"
        self.reason = hint.around(reason) if hint is not None else reason  # as a person reads it (and re-raised)
        super().__init__(f"{self.where}: {reason}", hint=hint)

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"  # the hint goes with the reason, after the file and record


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
