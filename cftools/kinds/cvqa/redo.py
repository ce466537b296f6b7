"""`generate rewrite --redo`: a C-VQA draft written again from its source question, with the rejected draft and the
reasons (`cftools.generate.redo`; template `prompts/rewrite/redo.j2`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.generate.redo import RedoCase, RedoSpec
from cftools.kinds.cvqa.generate import (GENERATOR, item_row, load_template, render_prompt, rewrite_from_reply,
                                        rewrite_schema)


def original(case: RedoCase) -> dict[str, Any]:
    """The source question and answer the draft rewrote (a generated draft keeps them; an ingested one has its
    source question)."""
    data = case.item.data or {}
    if data.get("original_question") and data.get("original_answer") is not None:
        return {"id": case.item.source_id, "question": data["original_question"], "answer": data["original_answer"]}
    return case.source or {}


def has_original(case: RedoCase) -> bool:
    return bool(original(case).get("question")) and original(case).get("answer") is not None


def prompt(case: RedoCase, workspace_root: Optional[Path]) -> str:
    """The group's own rewrite prompt (the workspace's copy when it has one) for the item's source question."""
    return render_prompt(load_template(case.item.group, None, workspace_root), original(case))


def draft(case: RedoCase) -> dict[str, Any]:
    """The rejected draft as the reply gave it (the proposed answer, when people corrected it since)."""
    answer = case.item.proposed_answer if case.item.proposed_answer is not None else case.item.answer
    return {"new_question": case.item.question, "new_answer": answer}


def row(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    new = item_row(original(case), case.item.group, parsed, generation_id, attempt)
    return {k: new[k] for k in ("question", "answer", "data")}


CVQA_REDO = RedoSpec(kind="cvqa", generator=GENERATOR, template=f"{GENERATOR}/redo.j2",
                     schema=lambda case: rewrite_schema(case.item.group), from_reply=rewrite_from_reply,
                     prompt=prompt, draft=draft, row=row, eligible=has_original)
