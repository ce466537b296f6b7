"""A model that re-derives each answer: for a C-VQA or CFMM draft, the configured model answers the counterfactual
question again from the original question, its answer and the presupposition alone (reasoning first, then the
answer, in the kind's output schema), and the item keeps what it said (`data.rederived`). The check
`answer_disputed` (cftools.checks.rules) flags a draft whose answer the model disagrees with, with both answers and
the model's reasoning: what a careful reviewer does first.

It runs after `generate rewrite` and `generate pairs` when `[llm] rederive` is true; unset, it is on for a real
model and off for the embedded one (a 135M model cannot judge). One call per draft, through the task runner
(request cache, retries of replies outside the schema, provenance as generator `rederive`); a rerun does only the
drafts without a re-derivation of their current answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from pydantic import Field, create_model
from sqlalchemy import select
from sqlmodel import Session

from cftools.generate.claims import selection_start
from cftools.generate.llm_task import LLMJob, LLMReport, LLMRun, LLMTask, run_llm_task
from cftools.llm import Backend, text_message
from cftools.llm.base import DEFAULT_PARAMS
from cftools.llm.prompts import load_prompt
from cftools.llm.structured import OutputSchema, Reply
from cftools.models import DRAFT, Item, ItemEvent, SourceQuestion, utcnow
from cftools.store import Store

GENERATOR = "rederive"
MAX_TOKENS = 240


def rederive_schema(answer: Any) -> OutputSchema:
    """The reasoning first, then the answer of type ANSWER (int: a count, str: a short text, or a Literal: yes/no,
    the options)."""
    bounds = {int: {"ge": 0, "le": 100000}, str: {"min_length": 1, "max_length": 60}}.get(answer, {})
    model = create_model("Rederived", __base__=Reply,
                         reasoning=(str, Field(min_length=1, max_length=400,
                                               description="What follows from the original answer and the change")),
                         answer=(answer, Field(description="The counterfactual question's answer", **bounds)))
    return OutputSchema("rederived_answer", model)


@dataclass(frozen=True)
class RederiveSpec:
    """What a kind gives: its prompt (`prompts/rederive/<kind>.j2`), the prompt's variables for an item, and the
    type of the answer for an item (its schema)."""

    kind: str
    # (item, its source question as {"question", "answer"} or None) -> the prompt's variables; None: the item
    # cannot be re-derived (no original question)
    variables: Callable[[Item, Optional[dict[str, Any]]], Optional[dict[str, Any]]]
    answer_type: Callable[[Item], Any]

    @property
    def template_name(self) -> str:
        return f"rederive/{self.kind}.j2"


def rederive_enabled(config: dict[str, Any], backend_name: str) -> bool:
    """`[llm] rederive`, else on for a real model and off for the embedded one."""
    configured = config.get("rederive")
    return bool(configured) if configured is not None else backend_name != "local"


class RederiveTask(LLMTask):
    generator = GENERATOR

    def __init__(self, spec: RederiveSpec, template: Any) -> None:
        self.spec, self.template = spec, template

    def schema_for(self, job: LLMJob) -> OutputSchema:
        return job.context["schema"]

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return {"answer": str(reply.answer), "reasoning": " ".join(reply.reasoning.split())}

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        item = session.get(Item, job.context["item_id"])
        if item is None or item.answer != job.context["answer"]:
            return 0  # deleted or edited meanwhile: the next run re-derives the new answer
        item.data = {**(item.data or {}), "rederived": {**parsed, "for_answer": item.answer,
                                                        "generation_id": generation_id}}
        item.updated_at = utcnow()
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage="rederive", from_status=item.status, to_status=item.status,
                              detail={"generation_id": generation_id}))
        return 1


def drafts_to_rederive(store: Store, kind: str,
                       limit: Optional[int] = None) -> list[tuple[Item, Optional[dict[str, Any]]]]:
    """Drafts of KIND with an answer and no re-derivation of that answer yet, each with its source question."""
    with store.session() as session:
        query = (select(Item, SourceQuestion.question, SourceQuestion.answer)
                 .outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id)
                 .where(Item.kind == kind, Item.status == DRAFT, Item.answer.is_not(None)).order_by(Item.id))
        found = [(item, {"question": question, "answer": answer} if question else None)
                 for item, question, answer in session.execute(query)
                 if ((item.data or {}).get("rederived") or {}).get("for_answer") != item.answer]
    return found[:limit] if limit is not None else found


def rederive(store: Store, backend: Backend, spec: RederiveSpec, *, run: LLMRun = LLMRun(),
             limit: Optional[int] = None) -> LLMReport:
    """Re-derive the answers of up to LIMIT drafts of the spec's kind, as RUN says (its template is always the
    spec's own, or the workspace's copy); returns what happened."""
    template = load_prompt(spec.template_name, None, run.workspace_root)
    selected_at = selection_start(store)
    jobs = []
    for item, source in drafts_to_rederive(store, spec.kind, limit):
        variables = spec.variables(item, source)
        if variables is None:
            continue
        jobs.append(LLMJob(label=f"item {item.key}", messages=[text_message(template.render(**variables))],
                           key=f"{GENERATOR}:{item.key}:{item.answer}", group=item.group,
                           source_id=item.source_id,
                           context={"item_id": item.id, "answer": item.answer,
                                    "schema": rederive_schema(spec.answer_type(item))}))
    return run_llm_task(store, backend, RederiveTask(spec, template), jobs,
                        run=run.or_params({**DEFAULT_PARAMS, "max_tokens": MAX_TOKENS}), selected_at=selected_at)
