"""`generate pairs --redo`: a CFMM pair drafted again from its image's source questions, with the rejected pair and
the reasons (`cftools.generate.redo`; template `prompts/cfmm/redo.j2`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.generate.redo import RedoCase, RedoSpec
from cftools.kinds.cfmm.generate import DRAFT_SCHEMA, GENERATOR, Slot, draft_from_reply, draft_row
from cftools.kinds.cfmm.model import TYPES
from cftools.llm.prompts import load_prompt


def pair_type(case: RedoCase) -> str:
    return (case.item.data or {}).get("type") or case.item.group


def can_redo(case: RedoCase) -> bool:
    """A pair of a known type with its basic question and the image's facts to draft from."""
    return pair_type(case) in TYPES and bool((case.item.data or {}).get("basic_question")) and bool(case.image_sources)


def prompt(case: RedoCase, workspace_root: Optional[Path]) -> str:
    """The type's own drafting prompt (the workspace's copy when it has one) for the item's image."""
    template = load_prompt(f"cfmm/{pair_type(case)}.j2", None, workspace_root)
    return template.render(sources=case.image_sources, type=pair_type(case))


def draft(case: RedoCase) -> dict[str, Any]:
    """The rejected pair in the reply's form (options and the correct ones by number)."""
    data = case.item.data or {}
    options = data.get("options") or {}
    basic, counterfactual = list(options.get("original") or []), list(options.get("counterfactual") or [])
    answer = case.item.proposed_answer if case.item.proposed_answer is not None else case.item.answer
    return {"basic_question": data.get("basic_question"), "basic_options": basic,
            "basic_correct": number_of(data.get("basic_answer"), basic), "cf_question": case.item.question,
            "cf_options": counterfactual, "cf_correct": number_of(answer, counterfactual)}


def number_of(answer: Any, options: list[str]) -> Optional[int]:
    return options.index(answer) + 1 if answer in options else None


def row(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    # a slot only names the key and the first source, which a redo has of its own
    new = draft_row(Slot(0, 0, [{"id": case.item.source_id}]), pair_type(case), parsed, generation_id, attempt)
    return {k: new[k] for k in ("question", "answer", "data")}


CFMM_REDO = RedoSpec(kind="cfmm", generator=GENERATOR, template="cfmm/redo.j2", schema=lambda case: DRAFT_SCHEMA,
                     from_reply=draft_from_reply, prompt=prompt, draft=draft, row=row, eligible=can_redo)
