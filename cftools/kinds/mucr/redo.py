"""`generate cues --redo`: a MuCR pair's cue, false cues and explanation drafted again from its two descriptions, with
the rejected draft and the reasons (`cftools.generate.redo`; template `prompts/mucr/cues-redo.j2`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.flags import WAIVED
from cftools.generate.redo import RedoCase, RedoSpec
from cftools.kinds.mucr.cues import CUES_SCHEMA, cues_from_reply, cues_prompt
from cftools.llm.prompts import load_prompt

CUES_TEMPLATE = "mucr/cues.j2"


def can_redo(case: RedoCase) -> bool:
    """A selected pair (both images) whose cues were drafted."""
    data = case.item.data or {}
    return bool(data.get("cause_image") and data.get("effect_image") and data.get("cue"))


def prompt(case: RedoCase, workspace_root: Optional[Path]) -> str:
    """The cues prompt (the workspace's copy when it has one) for the pair."""
    return cues_prompt(load_prompt(CUES_TEMPLATE, None, workspace_root), case.item)


def draft(case: RedoCase) -> dict[str, Any]:
    """The rejected cues in the reply's form."""
    data = case.item.data or {}
    return {"cue": data.get("cue"), "false_cues": list(data.get("false_cues") or []),
            "explanation": data.get("explanation_draft")}


def row(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    """The same pair with the new cues (a waiver was given to the old cues, not to these)."""
    data = {k: v for k, v in (case.item.data or {}).items() if k != WAIVED}
    return {"question": case.item.question, "answer": case.item.answer,
            "data": {**data, **parsed, "cue_generation": {"generation_id": generation_id,
                                                          "template": "mucr/cues-redo.j2"}}}


MUCR_CUES_REDO = RedoSpec(kind="mucr", generator="cues", template="mucr/cues-redo.j2",
                          schema=lambda case: CUES_SCHEMA, from_reply=cues_from_reply, prompt=prompt, draft=draft,
                          row=row, eligible=can_redo)
