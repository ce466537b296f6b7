"""What an annotation task is for: its `Purpose`, parsed once from the string the store keeps.

A purpose is verify, adjudicate, a measuring task (control, audit: shown as a verification) or one of a kind's own
tasks; a kind's task with units (MuCR's select per style, CVQA's edit per candidate) is one purpose per unit,
stored as `TASK:UNIT` (`AnnotationTask.purpose`, a task's `meta.purpose`). Inside the library a purpose is this
value; `str(purpose)` is the stored string, written back only to the store and to JSON.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cftools.errors import CftoolsError
from cftools.judgments import MEASURING, VERIFY

TASK_NAME = re.compile(r"[^\s:]+")  # a task name: no space, no colon (what a unit follows)


@dataclass(frozen=True)
class Purpose:
    """A task's purpose: TASK (verify, adjudicate, control, audit or a kind's task name) and the UNIT of a kind's
    task that has units ("" for none)."""

    task: str
    unit: str = ""

    @classmethod
    def parse(cls, text: str) -> "Purpose":
        """The purpose a stored `TASK` or `TASK:UNIT` names (a unit may hold colons: `edit:irrelevant:2`)."""
        task, colon, unit = str(text).partition(":")
        if not TASK_NAME.fullmatch(task) or (colon and not unit.strip()) or unit != unit.strip():
            raise CftoolsError(f"malformed task purpose {text!r}: expected TASK or TASK:UNIT "
                               "(a task name such as verify, adjudicate or a kind's task, and its unit)")
        return cls(task, unit)

    def __str__(self) -> str:
        return f"{self.task}:{self.unit}" if self.unit else self.task

    def __eq__(self, other: object) -> bool:
        # A purpose compared with a string is a slip that would be silently False: say so instead.
        if isinstance(other, str):
            raise TypeError(f"a Purpose compared with the string {other!r}: compare its .task, or Purpose.parse it")
        if not isinstance(other, Purpose):
            return NotImplemented
        return (self.task, self.unit) == (other.task, other.unit)

    @property
    def measuring(self) -> bool:
        """A control or an audit: it measures its person and never counts toward its item."""
        return self.task in MEASURING

    @property
    def shown(self) -> "Purpose":
        """The purpose its server and person see: a control or audit task is a verification task there."""
        return Purpose(VERIFY) if self.measuring else self

    @property
    def project(self) -> "Purpose":
        """The purpose of the project its task lives in: one per task (not per unit), a measuring task's in the
        verification project."""
        return Purpose(self.shown.task)
