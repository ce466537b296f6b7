"""MuCR cues: for each selected pair (`PAIR@style`), the LLM drafts from the two contextual descriptions the cue (the
visible cause, a short phrase), three false cues (visible and striking, not the cause) and one explanation in the
three-part form, as one reply of the output schema `CuesReply` (constrained on the embedded model,
`response_format` to a server). Runs on `cftools.generate.llm_task` (cache, retries of replies that do not fit,
provenance, resume): a rerun drafts only pairs without a cue. The checks (`cue_in_false_cues`, `false_cue_duplicate`,
`cue_not_visible`, `explanation_form`) then flag what a person should look at in the explain task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import Field
from sqlalchemy import select
from sqlmodel import Session

from cftools.flags import WAIVED
from cftools.generate.claims import selection_start
from cftools.generate.llm_task import LLMJob, LLMReport, LLMRun, LLMTask, run_llm_task
from cftools.generate.redo import RedoCase, RedoSpec
from cftools.kinds.mucr.generate import clean, render, text_params
from cftools.llm import Backend, text_message
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.structured import OutputSchema, Reply
from cftools.models import CHECKED, DRAFT, Item, ItemEvent, utcnow
from cftools.store import Store

KIND = "mucr"
CUES_MAX_TOKENS = 320
LOCAL_CUES_MAX_TOKENS = 260
CUES_TEMPLATE, REDO_TEMPLATE = "mucr/cues.j2", "mucr/cues-redo.j2"


class CuesReply(Reply):
    """The cue first, then three false cues, then the explanation in MuCR's three-part form."""

    cue: str = Field(min_length=1, max_length=40, description="The visible cause linking the images, 1-3 words")
    false_cues: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(min_length=3, max_length=3,
                                  description="Three visible, striking things that are not the cause")
    explanation: str = Field(min_length=1, max_length=500, description=(
        'In three parts: "In the first image, ... In the second image, ... The causal link is that ..."'))


CUES_SCHEMA = OutputSchema("mucr_cues", CuesReply)


def cues_from_reply(reply: CuesReply) -> dict[str, Any]:
    return {"cue": clean(reply.cue).strip(" ."), "false_cues": [clean(c).strip(" .") for c in reply.false_cues],
            "explanation_draft": clean(reply.explanation)}


class CuesTask(LLMTask):
    generator = "cues"
    schema = CUES_SCHEMA

    def __init__(self, template: PromptTemplate) -> None:
        self.template = template

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return cues_from_reply(reply)

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        item = session.get(Item, job.context["item_id"])
        if item is None or (item.data or {}).get("cue"):
            return 0
        item.data = {**(item.data or {}), **parsed,
                     "cue_generation": {"generation_id": generation_id, "template": self.template.name}}
        before = item.status
        item.status = DRAFT  # the new cues are checked before anyone explains the pair
        item.updated_at = utcnow()
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage="generate cues", from_status=before, to_status=DRAFT,
                              detail={"generation_id": generation_id}))
        return 1


def select_from_ranking(store: Store, limit: Optional[int] = None, groups: tuple[str, ...] = ()) -> int:
    """Without annotators (a demo, a first look): make the selected pair of every style still to choose from its
    best-ranked candidate, marked `selection.by = "ranking"` (unverified like any draft). Returns how many."""
    from cftools.kinds.mucr.annotate import ranked, select_units, style_item, unit_style

    made = 0
    with store.write() as session:
        query = select(Item).where(Item.kind == KIND, Item.status.in_([DRAFT, CHECKED])).order_by(Item.id)
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        pairs = [i for i in session.execute(query).scalars() if (i.data or {}).get("candidates")]
        for item in pairs[:limit] if limit is not None else pairs:
            for unit in select_units(item.data or {}):
                style = unit_style(unit)
                best = ranked(item.data, style)[0]
                row = style_item(item, style, best, best, [])
                row["data"]["selection"]["by"] = "ranking"
                row["origin"] = "selected by ranking"
                if session.execute(select(Item.id).where(Item.key == row["key"])).first() is None:
                    new = Item(**row)
                    session.add(new)
                    session.flush()
                    session.add(ItemEvent(item_id=new.id, stage="generate cues", from_status=None, to_status=DRAFT,
                                          detail={"selected_by": "ranking", "from_item": item.key}))
                    made += 1
                item.data = {**item.data, "selection": {**(item.data.get("selection") or {}),
                                                        style: {"cause": best, "effect": best, "by": "ranking",
                                                                "unit": unit}}}
                session.add(item)
    return made


def pairs_without_cues(store: Store, limit: Optional[int] = None, groups: tuple[str, ...] = ()) -> list[Item]:
    """Selected pairs (they have both images) without a cue yet."""
    with store.session() as session:
        query = select(Item).where(Item.kind == KIND, Item.status.in_([DRAFT, CHECKED])).order_by(Item.id)
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        found = [i for i in session.execute(query).scalars()
                 if (i.data or {}).get("cause_image") and (i.data or {}).get("effect_image")
                 and not (i.data or {}).get("cue")]
    return found[:limit] if limit is not None else found


def cues_prompt(template: PromptTemplate, item: Item) -> str:
    """The cues prompt of a selected pair, from its two contextual descriptions (else its captions)."""
    data = item.data or {}
    context = data.get("context") or {}
    return render(template, f"item {item.key}",
                  cause=context.get("cause_description") or data.get("cause_caption"),
                  effect=context.get("effect_description") or data.get("effect_caption"),
                  cause_caption=data.get("cause_caption"), effect_caption=data.get("effect_caption"),
                  category=data.get("category"), style=data.get("style"))


# ------------------------------------------------------------------ redoing rejected cues (`--redo`)
def can_redo(case: RedoCase) -> bool:
    """A selected pair (both images) whose cues were drafted."""
    data = case.item.data or {}
    return bool(data.get("cause_image") and data.get("effect_image") and data.get("cue"))


def redo_prompt(case: RedoCase, workspace_root: Optional[Path]) -> str:
    """The cues prompt (the workspace's copy when it has one) for the pair."""
    return cues_prompt(load_prompt(CUES_TEMPLATE, None, workspace_root), case.item)


def rejected_cues(case: RedoCase) -> dict[str, Any]:
    """The rejected cues in the reply's form."""
    data = case.item.data or {}
    return {"cue": data.get("cue"), "false_cues": list(data.get("false_cues") or []),
            "explanation": data.get("explanation_draft")}


def redone_cues(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    """The same pair with the new cues (a waiver was given to the old cues, not to these)."""
    data = {k: v for k, v in (case.item.data or {}).items() if k != WAIVED}
    return {"question": case.item.question, "answer": case.item.answer,
            "data": {**data, **parsed, "cue_generation": {"generation_id": generation_id,
                                                          "template": REDO_TEMPLATE}}}


MUCR_CUES_REDO = RedoSpec(kind=KIND, generator=CuesTask.generator, template=REDO_TEMPLATE,
                          schema=lambda case: CUES_SCHEMA, from_reply=cues_from_reply, prompt=redo_prompt,
                          draft=rejected_cues, row=redone_cues, eligible=can_redo)


def draft_cues(store: Store, backend: Backend, *, run: LLMRun = LLMRun(), limit: Optional[int] = None,
               groups: tuple[str, ...] = ()) -> LLMReport:
    """The cue, false cues and explanation of up to LIMIT pairs that have both images and no cue, as RUN says."""
    template = load_prompt(CUES_TEMPLATE, run.template_path, run.workspace_root)
    selected_at = selection_start(store)  # before the selection: what another worker finished since stays done
    jobs = [LLMJob(label=f"item {item.key}", messages=[text_message(cues_prompt(template, item))], group=item.group,
                   context={"item_id": item.id}) for item in pairs_without_cues(store, limit, groups)]
    return run_llm_task(store, backend, CuesTask(template), jobs, run=run.or_params(text_params({}, CUES_MAX_TOKENS)),
                        selected_at=selected_at)
