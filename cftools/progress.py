"""What a long step shows while it runs: one line per step on stderr, a bar with its ETA where the count is known,
a spinner with the elapsed time where it is not.

Library code reports through the plain callback `(what, done, total)` (total None: not known yet); a command turns
it into lines with `step_progress`. Off with --quiet and under --json (stdout stays the
JSON, stderr stays for errors); on a stderr that is not a terminal nothing is drawn, so logs and captured output
hold only what a command says.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping, Optional, Protocol

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)


class ProgressCallback(Protocol):
    def __call__(self, what: str, done: int, total: Optional[int]) -> None: ...


def no_progress(what: str, done: int, total: Optional[int]) -> None:
    """The callback of a caller that shows nothing (the library's default)."""


class StepProgress:
    """A rich display fed by `(what, done, total)`: one line per distinct WHAT, in the order they first report."""

    def __init__(self, console: Console, *, enabled: bool = True, labels: Optional[Mapping[str, str]] = None) -> None:
        self.labels = dict(labels or {})
        self.display = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                console=console, disable=not enabled, transient=True)
        self.lines: dict[str, TaskID] = {}

    def __call__(self, what: str, done: int, total: Optional[int] = None) -> None:
        if what not in self.lines:
            self.lines[what] = self.display.add_task(self.labels.get(what, what), total=total)
        self.display.update(self.lines[what], completed=done, total=total)

    def advance(self, what: str, by: int = 1) -> None:
        """One more of WHAT done (for loops that count as they go)."""
        if what not in self.lines:
            self(what, 0, None)
        self.display.advance(self.lines[what], by)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """A spinner line for a step of unknown length (a server starting), gone when it ends."""
        self(what, 0, None)
        try:
            yield
        finally:
            self.display.remove_task(self.lines.pop(what))

    def __enter__(self) -> "StepProgress":
        self.display.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.display.stop()


def step_progress(console: Console, *, quiet: bool = False, as_json: bool = False,
                  labels: Optional[Mapping[str, str]] = None) -> StepProgress:
    """The progress display of a command: drawn on CONSOLE (stderr) unless --quiet, --json or not a terminal."""
    return StepProgress(console, enabled=not (quiet or as_json) and console.is_terminal, labels=labels)

