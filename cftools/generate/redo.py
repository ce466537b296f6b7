"""`generate rewrite|pairs|cues --redo rejected|flagged`: draft again what people rejected (or what the checks hold),
giving the model the rejected draft and the reasons.

- rejected: items of the generator's kind whose status is `rejected` (the pull's decision, an adjudicated one
  included); the reasons are the people's: judgment flags, answers they found wrong, corrected answers, comments
  (email addresses taken out), the adjudicator's decision and the decision's rule. A person's name or address never
  goes into a prompt.
- flagged: drafts the checks hold (status `draft`, a flag that decides the status and is not waived); the reasons
  are the flags' own, with whatever people said about the draft (a measuring task) too.

Each redo is one call through the generator's own reply schema (`cftools.generate.llm_task`: cache, retries,
provenance, claims), with the generator's redo template beside its default (`prompts/rewrite/redo.j2`,
`prompts/cfmm/redo.j2`, `prompts/mucr/cues-redo.j2`), which is given the generator's own prompt for the item, the
rejected draft in the reply's form and the reasons. The result is a NEW draft item keyed `<old key>~redo<n>`, with
`items.redo_of` = the old item's id and an item event (stage `redo`) on both; the old item keeps its status. An item
is redone once: a rerun skips every item that has a redo, so only a redo that was rejected in turn is redone again
(a redo of the redo, linked the same way).

Each kind says how, beside its generator (a `RedoSpec`: `CVQA_REDO`, `CFMM_REDO`, `MUCR_CUES_REDO`); this module
asks the spec and never branches on the kind. What became of the redos is counted in one place: `cftools report`'s
`redo` (`cftools.funnel.report.redo_counts`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sqlalchemy import exists, select, update
from sqlalchemy.orm import aliased
from sqlmodel import Session

from cftools.errors import CftoolsError
from cftools.flags import waived_codes
from cftools.generate.claims import selection_start
from cftools.generate.llm_task import (LLMJob, LLMReport, LLMRun, LLMTask, ParsedOutput, insert_items, render,
                                       run_llm_task)
from cftools.judgments import FLAG_CHOICES, MEASURING, without_emails
from cftools.llm import Backend, text_message
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.structured import OutputSchema
from cftools.models import (DRAFT, REJECTED, AnnotationTask, CheckFlag, Item, ItemEvent, Judgment, SourceQuestion,
                            utcnow)
from cftools.store import Store, in_chunks

STAGE = "redo"
REJECTED_DRAFTS, FLAGGED_DRAFTS = "rejected", "flagged"
REDO_CHOICES = (REJECTED_DRAFTS, FLAGGED_DRAFTS)
KEY_MARK = "~redo"
FLAG_LABELS = dict(FLAG_CHOICES)
MAX_IMAGE_SOURCES = 8  # as many as `generate pairs` gives its drafter


@dataclass
class RedoCase:
    """One item to draft again: the item, its source question ({"id", "question", "answer"}, or None), the answered
    source questions about the same image (what a drafter that sees no image is given) and the reasons its draft
    was turned down."""

    item: Item
    source: Optional[dict[str, Any]] = None
    image_sources: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def new_key(self) -> str:
        return redo_key(self.item.key)


@dataclass(frozen=True)
class RedoSpec:
    """What a generator says about redoing its drafts (beside the generator, in its kind's package)."""

    kind: str
    generator: str  # the generator's name in provenance (`rewrite`, `pairs`, `cues`)
    template: str  # the redo template under prompts/ (`rewrite/redo.j2`)
    schema: Callable[[RedoCase], OutputSchema]  # the reply schema (the generator's own)
    from_reply: Callable[[Any], dict[str, Any]]  # a validated reply -> the parsed draft (the generator's own)
    prompt: Callable[[RedoCase, Optional[Path]], str]  # the generator's own prompt for the item (workspace root)
    draft: Callable[[RedoCase], dict[str, Any]]  # the rejected draft, in the reply's form
    # (case, parsed reply, generation id, attempt) -> the new draft's question, answer, data (the rest is shared)
    row: Callable[[RedoCase, dict[str, Any], int, int], dict[str, Any]]
    eligible: Callable[[RedoCase], bool] = lambda case: True  # an item the generator can draft again


def redo_key(key: str) -> str:
    """The key of the next redo of the item keyed KEY: `k` -> `k~redo1`, `k~redo1` -> `k~redo2`."""
    match = re.fullmatch(rf"(.*){re.escape(KEY_MARK)}(\d+)", key)
    return f"{match.group(1)}{KEY_MARK}{int(match.group(2)) + 1}" if match else f"{key}{KEY_MARK}1"


# ------------------------------------------------------------------ selecting what to redo
def not_yet_redone() -> Any:
    """No item is a redo of this one yet."""
    redo = aliased(Item)
    return ~exists().where(redo.redo_of == Item.id)


def select_cases(store: Store, spec: RedoSpec, which: str, *, limit: Optional[int] = None,
                 groups: tuple[str, ...] = ()) -> list[RedoCase]:
    """The spec's items to redo (WHICH: rejected or flagged; only GROUPS when given), with their reasons; an item
    with a redo already is left out."""
    if which not in REDO_CHOICES:
        raise ValueError(f"redo {which!r}: use one of {', '.join(REDO_CHOICES)}")
    status = REJECTED if which == REJECTED_DRAFTS else DRAFT
    query = (select(Item, SourceQuestion.question, SourceQuestion.answer, SourceQuestion.image_id)
             .outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id)
             .where(Item.kind == spec.kind, Item.status == status, not_yet_redone()).order_by(Item.id))
    if groups:
        query = query.where(Item.group.in_(list(groups)))
    with store.session() as session:
        found = session.execute(query).all()
        about = image_sources(session, {image_id for *_, image_id in found if image_id is not None})
        cases = [RedoCase(item, {"id": item.source_id, "question": question, "answer": answer}
                          if question is not None else None, about.get(image_id, []))
                 for item, question, answer, image_id in found]
        cases = [c for c in cases if spec.eligible(c)]
        flags = check_reasons(session, cases)
        if which == FLAGGED_DRAFTS:
            cases = [c for c in cases if flags.get(c.item.id)]
        if limit is not None:
            cases = cases[:limit]
        ids = [c.item.id for c in cases]
        people = people_reasons(session, ids)
        decided = decision_reasons(session, ids) if which == REJECTED_DRAFTS else {}
    for case in cases:
        said = decided.get(case.item.id, []) + people.get(case.item.id, [])
        case.reasons = unique(said + (flags.get(case.item.id, []) if which == FLAGGED_DRAFTS else []))
    return cases


def image_sources(session: Session, image_ids: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The answered source questions of each image (at most MAX_IMAGE_SOURCES, lowest id first)."""
    found: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for part in in_chunks(sorted(image_ids)):
        for id_, image_id, question, answer in session.execute(
                select(SourceQuestion.id, SourceQuestion.image_id, SourceQuestion.question, SourceQuestion.answer)
                .where(SourceQuestion.image_id.in_(part), SourceQuestion.answer.is_not(None))
                .order_by(SourceQuestion.image_id, SourceQuestion.id)):
            if len(found[image_id]) < MAX_IMAGE_SOURCES:
                found[image_id].append({"id": id_, "question": question, "answer": answer})
    return found


def check_reasons(session: Session, cases: list[RedoCase]) -> dict[int, list[str]]:
    """The reasons of the check flags that hold each case's item (a flag that decides the status, not waived)."""
    from cftools.checks.edits import edit_codes  # the checks load slowly; only a --redo needs them

    edits = set(edit_codes())  # an edit check ranks candidates; it never holds an item
    waived = {c.item.id: waived_codes(c.item.data) for c in cases}
    found: dict[int, list[str]] = defaultdict(list)
    for part in in_chunks(list(waived)):
        for item_id, code, reason in session.execute(select(CheckFlag.item_id, CheckFlag.code, CheckFlag.reason)
                                                     .where(CheckFlag.item_id.in_(part))
                                                     .order_by(CheckFlag.item_id, CheckFlag.code)):
            if code not in edits and code not in waived[item_id]:
                found[item_id].append(f"check {code}: {reason}")
    return found


def people_reasons(session: Session, item_ids: list[int]) -> dict[int, list[str]]:
    """What people said against each item's draft, in the order they said it, as reasons that name nobody (the
    tasks that measure a person, controls and audits, are left out)."""
    found: dict[int, list[str]] = defaultdict(list)
    for part in in_chunks(item_ids):
        for item_id, judgment in session.execute(
                select(AnnotationTask.item_id, Judgment).join(Judgment, Judgment.task_id == AnnotationTask.id)
                .where(AnnotationTask.item_id.in_(part), AnnotationTask.purpose.not_in(MEASURING),
                       AnnotationTask.state != "deleted")
                .order_by(AnnotationTask.item_id, Judgment.annotated_at, Judgment.id)):
            found[item_id] += judgment_reasons(judgment)
    return found


def judgment_reasons(judgment: Judgment) -> list[str]:
    """One person's judgment as reasons: what they found wrong, their correction, flags and comment."""
    reasons = []
    if judgment.related is False:
        reasons.append("a person found the question not about the image")
    if judgment.answer_correct is False:
        reasons.append("a person found the answer wrong")
    if judgment.corrected_answer:
        reasons.append(f"a person corrected the answer to: {judgment.corrected_answer}")
    reasons += [f"a person flagged it: {FLAG_LABELS.get(flag, flag)}" for flag in judgment.flags or []]
    if judgment.decision:
        reasons.append(f"the adjudicator decided: {judgment.decision}")
    if judgment.comment and judgment.comment.strip():
        reasons.append(f"a person's comment: {' '.join(judgment.comment.split())}")
    return [without_emails(reason) for reason in reasons]  # what a person typed may hold an address


def decision_reasons(session: Session, item_ids: list[int]) -> dict[int, list[str]]:
    """The rule of each item's latest decision to reject (the event's detail names the people: only the rule)."""
    latest: dict[int, str] = {}
    for part in in_chunks(item_ids):
        for item_id, detail in session.execute(select(ItemEvent.item_id, ItemEvent.detail)
                                               .where(ItemEvent.item_id.in_(part), ItemEvent.to_status == REJECTED)
                                               .order_by(ItemEvent.id)):
            if (detail or {}).get("rule"):
                latest[item_id] = without_emails(str(detail["rule"]))
    return {i: [f"rejected because: {rule}"] for i, rule in latest.items()}


def unique(reasons: list[str]) -> list[str]:
    return list(dict.fromkeys(reasons))


# ------------------------------------------------------------------ the task
class RedoTask(LLMTask):
    """A redo: the generator's reply schema and parser, a new draft item linked to the old one."""

    def __init__(self, spec: RedoSpec, template: PromptTemplate) -> None:
        self.spec, self.template, self.generator = spec, template, spec.generator

    def schema_for(self, job: LLMJob) -> OutputSchema:
        return self.spec.schema(job.context["case"])

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return self.spec.from_reply(reply)

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        return self.write_many(store, session, [ParsedOutput(job, parsed, generation_id, attempt)])

    def write_many(self, store: Store, session: Session, outputs: list[ParsedOutput]) -> int:
        rows = [redo_row(self.spec, o) for o in outputs]
        there = set(session.execute(select(Item.key).where(Item.key.in_([r["key"] for r in rows]))).scalars())
        made = insert_items(store, session, rows, STAGE)
        new_ids = dict(session.execute(select(Item.key, Item.id).where(Item.key.in_([r["key"] for r in rows]))).all())
        for output, row in zip(outputs, rows):
            if row["key"] in there:
                continue
            old, which = output.job.context["case"].item, output.job.provenance["redo"]
            session.execute(update(ItemEvent).where(ItemEvent.item_id == new_ids[row["key"]], ItemEvent.stage == STAGE)
                            .values(detail={"redo_of": old.key, "redo": which}))
            session.add(ItemEvent(item_id=old.id, stage=STAGE, from_status=old.status, to_status=old.status,
                                  detail={"redone_as": row["key"], "redo": which,
                                          "generation_id": output.generation_id}))
        return made


def redo_row(spec: RedoSpec, output: ParsedOutput) -> dict[str, Any]:
    """The new draft's columns: the kind's, its own key, the link to the old item, a draft made now."""
    case: RedoCase = output.job.context["case"]
    now = utcnow()
    row = {"kind": case.item.kind, "group": case.item.group, "source_id": case.item.source_id,
           "dataset": case.item.dataset, "origin": "generated",
           **spec.row(case, output.parsed, output.generation_id, output.attempt)}
    return {**row, "key": case.new_key, "redo_of": case.item.id, "status": DRAFT, "generation_id": output.generation_id,
            "created_at": now, "updated_at": now}


def redo_job(spec: RedoSpec, template: PromptTemplate, case: RedoCase, which: str,
             workspace_root: Optional[Path]) -> LLMJob:
    prompt = render(template, f"item {case.item.key}", prompt=spec.prompt(case, workspace_root).strip(),
                    draft=spec.draft(case), reasons=case.reasons, redo=which)
    return LLMJob(label=f"item {case.item.key}", messages=[text_message(prompt)], key=case.new_key,
                  source_id=case.item.source_id, group=case.item.group, context={"case": case},
                  provenance={"redo": which, "redo_of": case.item.key})


def redo_drafts(store: Store, backend: Backend, spec: RedoSpec, which: str, *, run: LLMRun = LLMRun(),
                limit: Optional[int] = None, groups: tuple[str, ...] = ()) -> LLMReport:
    """Draft again up to LIMIT of the spec's WHICH (rejected or flagged) items, as RUN says (RUN's template path is
    the user's own redo template); returns what happened."""
    if run.prompt_variant:
        raise CftoolsError(f"a redo is drafted from its generator's redo template, not from a prompt variant "
                         f"({run.prompt_variant!r}): redo without the variant")
    template = load_prompt(spec.template, run.template_path, run.workspace_root)
    selected_at = selection_start(store)
    jobs = [redo_job(spec, template, case, which, run.workspace_root)
            for case in select_cases(store, spec, which, limit=limit, groups=groups)]
    return run_llm_task(store, backend, RedoTask(spec, template), jobs, run=run, selected_at=selected_at,
                        group=groups[0] if len(groups) == 1 else None)
