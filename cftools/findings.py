"""What an automatic check finds about one item: a Flag (with a reason a person can read), a Note (the check
applies but could not decide) or nothing. Below both the checks stage and the kinds that declare checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(frozen=True)
class Flag:
    code: str
    reason: str


@dataclass(frozen=True)
class Note:
    """A check that applies but could not decide (e.g. a change the arithmetic check cannot read)."""

    code: str
    text: str


Result = Optional[Union[Flag, Note]]
