"""Errors a user can act on. The CLI prints their message on one line and exits non-zero."""

from __future__ import annotations


class CftoolsError(Exception):
    """Base class: the message is meant for a person and carries no secret."""


class WorkspaceError(CftoolsError):
    pass


class StoreError(CftoolsError):
    pass


class InputError(CftoolsError):
    """Bad input: names the file and the record (line or index)."""

    def __init__(self, path: object, reason: str, record: object | None = None) -> None:
        self.path = str(path)
        self.record = record
        self.reason = reason
        where = f"{self.path}" if record is None else f"{self.path}, {record}"
        super().__init__(f"{where}: {reason}")
