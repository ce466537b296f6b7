"""Counterfactual rewriting, the C-VQA way: a source question and its answer, a group's chain-of-thought prompt,
a model call whose reply follows the group's output schema, and a draft item linked to its source question and
its generation record.

The schemas keep the chain of thought the method depends on: the reasoning comes before the new question and
answer (`CountRewrite`), and the boolean group flips the answer first (`BooleanRewrite.flipped_answer`).
`generate reparse` reads a stored reply with its schema, and an old free-text one with the tolerant parser.

    backend = make_backend(workspace.section("llm"))
    report = rewrite(workspace.store, backend, "numerical-direct", limit=10)

Every finished request is committed at once (generation record, cache entry, item), so a killed run loses only
what was in flight and the next run does only the sources that still have no item of the group. Item keys are
`rewrite:<source_id>:<group>`. Unparseable outputs are kept (raw text + reason) and retried with a new attempt
number, which changes the sampling parameters (temperature, seed) and so the cache key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jinja2 import TemplateError
from pydantic import Field
from rich.console import Console
from sqlalchemy import and_, exists, select
from sqlmodel import Session

from cftools.errors import CftoolsError, InputError
from cftools.llm import Backend, make_backend, text_message
from cftools.llm.base import DEFAULT_PARAMS
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.structured import OutputSchema, Reply, ReplyError
from cftools.generate.claims import selection_start
from cftools.generate.rederive import RederiveSpec
from cftools.generate.redo import RedoCase, RedoSpec
from cftools.generate.llm_task import (LLMJob, LLMRun, LLMReport as RewriteReport, LLMTask,
                                       ParsedOutput, insert_items, run_llm_task)
from cftools.kinds.cvqa.model import BOOLEAN, GROUP_ANSWER_TYPE, GROUPS as CVQA_GROUPS
from cftools.models import (DRAFT, Generation,
                            CONTROL, Item, ItemEvent, SourceQuestion, utcnow)
from cftools.kinds.cvqa.parse import RewriteParseError, parse_rewrite
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

GENERATOR = "rewrite"
LOCAL_MAX_TOKENS = 200


# ------------------------------------------------------------------ output schemas
class CountRewrite(Reply):
    """A numerical group's reply: the reasoning first (what changes, the sum), then the new question and answer."""

    reasoning: str = Field(min_length=1, max_length=300,
                           description="Steps 1-3: the count asked for, the change, the sum worked out")
    new_question: str = Field(min_length=1, max_length=200, description="The would-question with an if-clause")
    new_answer: int = Field(ge=0, le=100000, description="The new count, in digits")


class BooleanRewrite(Reply):
    """The boolean group's reply: the flipped answer FIRST, then the situation and action, the question."""

    flipped_answer: Literal["yes", "no"] = Field(description="Step 1: the original answer flipped")
    reasoning: str = Field(min_length=1, max_length=300,
                           description="Steps 2-3: the situation where the flipped answer holds, the action")
    new_question: str = Field(min_length=1, max_length=200, description="The would-question with an if-clause")
    new_answer: Literal["yes", "no"] = Field(description="The new answer")


COUNT_REWRITE = OutputSchema("count_rewrite", CountRewrite)
BOOLEAN_REWRITE = OutputSchema("boolean_rewrite", BooleanRewrite)


def rewrite_schema(group: str) -> OutputSchema:
    return BOOLEAN_REWRITE if group == BOOLEAN else COUNT_REWRITE


def rewrite_from_reply(reply: CountRewrite | BooleanRewrite) -> dict[str, Any]:
    """The parsed rewrite a draft item is made of (the shape the free-text parser gives, plus the reasoning)."""
    answer = reply.new_answer if isinstance(reply, BooleanRewrite) else str(reply.new_answer)
    return {"question": " ".join(reply.new_question.split()), "answer": answer, "candidates": [answer],
            "flipped_answer": getattr(reply, "flipped_answer", None), "reasoning": reply.reasoning}


def parse_stored(text: str | None, group: str, structured: bool) -> dict[str, Any]:
    """A stored rewrite reply, parsed again: with the group's schema when it was asked for, else (an old
    free-text generation) with the tolerant parser. Raises RewriteParseError."""
    if structured:
        try:
            return rewrite_from_reply(rewrite_schema(group).read(text))
        except ReplyError as exc:
            raise RewriteParseError(str(exc)) from None
    return parse_rewrite(text, group).as_dict()


def item_key(source_id: int, group: str, variant: str | None = None) -> str:
    """A draft's key: one per source question and group, and per prompt variant (the default has none)."""
    return f"{GENERATOR}:{source_id}:{group}" + (f":{variant}" if variant else "")


# ------------------------------------------------------------------ prompts
def load_template(group: str, path: Path | None = None, workspace_root: Path | None = None,
                  variant: str | None = None) -> PromptTemplate:
    """The group's prompt (`prompts/rewrite/<group>.j2`, a workspace's copy first), or the user's template file,
    or the group's prompt in a prompt VARIANT (`prompts/rewrite/<variant>/<group>.j2`, or a folder)."""
    return load_prompt(f"rewrite/{group}.j2", path, workspace_root, variant)


def render_prompt(template: PromptTemplate, source: dict[str, Any]) -> str:
    try:
        return template.render(question=source["question"], answer=source["answer"], source=source)
    except TemplateError as exc:
        raise InputError(template.name, f"cannot render for source question {source['id']}: {exc}") from None


# ------------------------------------------------------------------ re-deriving the answer (answer_disputed)
def rederive_variables(item: Any, source: dict[str, Any] | None) -> dict[str, Any] | None:
    """The original question and answer (a generated draft keeps them; an ingested one has its source question)."""
    data = item.data or {}
    question = data.get("original_question") or (source or {}).get("question")
    answer = data.get("original_answer") if data.get("original_question") else (source or {}).get("answer")
    if not question or answer is None or not item.question:
        return None
    return {"original_question": question, "original_answer": answer, "question": item.question}


def rederive_answer_type(item: Any) -> Any:
    """yes/no for a yes/no draft, a whole number for a count, else any short text."""
    answer = (item.answer or "").strip().lower()
    if item.group == BOOLEAN or answer in ("yes", "no"):
        return Literal["yes", "no"]
    return int if answer.isdigit() else str


CVQA_REDERIVE = RederiveSpec("cvqa", rederive_variables, rederive_answer_type)


# ------------------------------------------------------------------ selecting work
def select_sources(store: Store, group: str, limit: int | None = None,
                   include_ingested: bool = False, variant: str | None = None) -> list[dict[str, Any]]:
    """Source questions of the group's answer type with no item of that group yet (with INCLUDE_INGESTED: no
    generated item; an ingested C-VQA counterfactual of the same group does not count). Those whose image is in
    the store come first, so a small --limit gives items that can be annotated and exported. Each prompt VARIANT
    has its own drafts: only a draft of the same variant counts (None: the default template's, or any item not
    drafted with a variant)."""
    if group not in CVQA_GROUPS:
        raise CftoolsError(f"unknown group {group!r}; use one of {', '.join(CVQA_GROUPS)}")
    # a redo (`--redo`) is recorded without a variant whatever it redid: it is no variant's draft of its source
    condition = and_(Item.source_id == SourceQuestion.id, Item.group == group, Item.redo_of.is_(None),
                     drafted_with(variant))
    if include_ingested:
        condition = and_(condition, Item.origin == "generated")
    query = (select(SourceQuestion.id, SourceQuestion.question, SourceQuestion.answer, SourceQuestion.image_ref)
             .where(SourceQuestion.answer_type == GROUP_ANSWER_TYPE[group], SourceQuestion.answer.is_not(None),
                    ~exists().where(condition),
                    # a control's source question (the lead's controls file) is never rewritten into an item
                    ~exists().where(Item.source_id == SourceQuestion.id, Item.status == CONTROL))
             .order_by(SourceQuestion.image_id.is_(None), SourceQuestion.id))  # questions with an image first
    if limit is not None:
        query = query.limit(limit)
    with store.session() as session:
        return [dict(row._mapping) for row in session.execute(query)]


def drafted_with(variant: str | None) -> Any:
    """An item drafted with prompt VARIANT (None: not drafted with any variant)."""
    with_variant = exists().where(Generation.id == Item.generation_id, Generation.prompt_variant.is_not(None))
    if variant is None:
        return ~with_variant
    return exists().where(Generation.id == Item.generation_id, Generation.prompt_variant == variant)


# ------------------------------------------------------------------ the task
class RewriteTask(LLMTask):
    """C-VQA rewriting of one group: the group's prompt, the rewrite parser, a draft item per source question."""

    generator = GENERATOR

    def __init__(self, group: str, template: PromptTemplate) -> None:
        self.group, self.template = group, template
        self.schema = rewrite_schema(group)

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return rewrite_from_reply(reply)

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        return insert_items(store, session, [item_row(job.context["source"], self.group, parsed, generation_id,
                                                      attempt, self.template.variant)], "generate")

    def write_many(self, store: Store, session: Session, outputs: list[ParsedOutput]) -> int:
        return insert_items(store, session, [item_row(o.job.context["source"], self.group, o.parsed, o.generation_id,
                                                      o.attempt, self.template.variant) for o in outputs], "generate")


def item_row(source: dict[str, Any], group: str, parsed: dict[str, Any], generation_id: int,
             attempt: int, variant: str | None = None) -> dict[str, Any]:
    now = utcnow()
    return {
        "key": item_key(source["id"], group, variant), "kind": "cvqa", "group": group, "source_id": source["id"],
        "question": parsed["question"], "answer": parsed["answer"], "status": DRAFT, "origin": "generated",
        "generation_id": generation_id, "created_at": now, "updated_at": now,
        "data": {"original_question": source["question"], "original_answer": source["answer"],
                 "candidates": parsed.get("candidates"), "flipped_answer": parsed.get("flipped_answer"),
                 "attempt": attempt},
    }


# ------------------------------------------------------------------ redoing a rejected draft (`--redo`)
def redo_original(case: RedoCase) -> dict[str, Any]:
    """The source question and answer the draft rewrote (a generated draft keeps them; an ingested one has its
    source question)."""
    data = case.item.data or {}
    if data.get("original_question") and data.get("original_answer") is not None:
        return {"id": case.item.source_id, "question": data["original_question"], "answer": data["original_answer"]}
    return case.source or {}


def can_redo(case: RedoCase) -> bool:
    original = redo_original(case)
    return bool(original.get("question")) and original.get("answer") is not None


def redo_prompt(case: RedoCase, workspace_root: Path | None) -> str:
    """The group's own rewrite prompt (the workspace's copy when it has one) for the item's source question."""
    return render_prompt(load_template(case.item.group, None, workspace_root), redo_original(case))


def rejected_draft(case: RedoCase) -> dict[str, Any]:
    """The rejected draft as the reply gave it (the proposed answer, when people corrected it since)."""
    answer = case.item.proposed_answer if case.item.proposed_answer is not None else case.item.answer
    return {"new_question": case.item.question, "new_answer": answer}


def redone_draft(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    new = item_row(redo_original(case), case.item.group, parsed, generation_id, attempt)
    return {k: new[k] for k in ("question", "answer", "data")}


CVQA_REDO = RedoSpec(kind="cvqa", generator=GENERATOR, template=f"{GENERATOR}/redo.j2",
                     schema=lambda case: rewrite_schema(case.item.group), from_reply=rewrite_from_reply,
                     prompt=redo_prompt, draft=rejected_draft, row=redone_draft, eligible=can_redo)


# ------------------------------------------------------------------ the whole run
def llm_params(config: dict[str, Any], backend: str | None = None) -> dict[str, Any]:
    """Sampling parameters for rewriting: the defaults and [llm] temperature/max_tokens/top_p (the output schema
    ends the reply; the embedded model gets a length its schema's bounds fit in)."""
    params = dict(DEFAULT_PARAMS)
    if (backend or config.get("backend") or "local") == "local":
        params.update(max_tokens=LOCAL_MAX_TOKENS)
    for name in ("temperature", "max_tokens", "top_p"):
        if config.get(name) is not None:
            params[name] = config[name]
    return params


def rewrite(store: Store, backend: Backend, group: str, *, run: LLMRun = LLMRun(), limit: int | None = None,
            include_ingested: bool = False) -> RewriteReport:
    """Rewrite up to LIMIT source questions into draft items of GROUP as RUN says; returns what happened. The
    group's prompt is the workspace's copy when it has one (`init --with-prompts`)."""
    template = load_template(group, run.template_path, run.workspace_root, run.prompt_variant)
    selected_at = selection_start(store)
    sources = select_sources(store, group, limit, include_ingested, template.variant)
    jobs = [LLMJob(label=f"source {s['id']}", messages=[text_message(render_prompt(template, s))], source_id=s["id"],
                   key=item_key(s["id"], group, template.variant),
                   group=group, context={"source": s}) for s in sources]
    return run_llm_task(store, backend, RewriteTask(group, template), jobs,
                        run=run.or_params(llm_params({}, backend.name)), group=group, selected_at=selected_at)


# ------------------------------------------------------------------ re-parsing stored outputs
@dataclass
class ReparseReport:
    generations: int = 0
    changed: int = 0
    items_created: int = 0
    items_updated: int = 0

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def reparse(store: Store, group: str | None = None) -> ReparseReport:
    """Run the parser again over every stored rewrite output (no model call): update the generation records,
    create the items that now parse, and update draft items whose parse changed."""
    report = ReparseReport()
    with store.write() as session:
        query = select(Generation).where(Generation.generator == GENERATOR, Generation.raw_output.is_not(None))
        if group:
            query = query.where(Generation.group == group)
        generations = session.execute(query.order_by(Generation.id)).scalars().all()
        best: dict[tuple[int, str, str | None], Generation] = {}
        redone: dict[int, dict[str, Any]] = {}  # a redo's generation id -> its reply, parsed again
        for gen in generations:
            report.generations += 1
            try:
                parsed, error = parse_stored(gen.raw_output, gen.group, "output_schema" in (gen.params or {})), None
            except RewriteParseError as exc:
                parsed, error = None, str(exc)
            if parsed != gen.parsed or error != gen.parse_error:
                report.changed += 1
                gen.parsed, gen.parse_error = parsed, error
                session.add(gen)
            if parsed and (gen.params or {}).get("redo"):  # a redo has its own item, made by the redo
                redone[gen.id] = parsed
            elif parsed and gen.source_id is not None:
                best.setdefault((gen.source_id, gen.group, gen.prompt_variant), gen)
        session.flush()
        items = {i.key: i for i in session.execute(select(Item).where(Item.origin == "generated",
                                                                      Item.key.like(f"{GENERATOR}:%"))).scalars()}
        new_rows = []
        for (source_id, grp, variant), gen in best.items():
            item = items.get(item_key(source_id, grp, variant))
            if item is None:
                source = session.get(SourceQuestion, source_id)
                new_rows.append(item_row({"id": source_id, "question": source.question, "answer": source.answer},
                                         grp, gen.parsed, gen.id, gen.attempt, variant))
            elif item.status == DRAFT and item.generation_id is not None:
                current = session.get(Generation, item.generation_id)
                parsed = current.parsed if current and current.parsed else gen.parsed
                if not current or not current.parsed:
                    item.generation_id = gen.id
                if (item.question, item.answer) != (parsed["question"], parsed["answer"]):
                    item.question, item.answer, item.updated_at = parsed["question"], parsed["answer"], utcnow()
                    session.add(item)
                    session.add(ItemEvent(item_id=item.id, stage="reparse", from_status=DRAFT, to_status=DRAFT,
                                          detail={"generation_id": item.generation_id}))
                    report.items_updated += 1
        report.items_created = insert_items(store, session, new_rows, "reparse")
        report.items_updated += update_redone(session, redone)
    return report


def update_redone(session: Session, redone: dict[int, dict[str, Any]]) -> int:
    """The redo drafts whose reply (of the generation ids in REDONE) now parses differently, updated; how many."""
    updated = 0
    for part in in_chunks(list(redone)):
        for item in session.execute(select(Item).where(Item.generation_id.in_(part), Item.status == DRAFT,
                                                       Item.redo_of.is_not(None))).scalars():
            parsed = redone[item.generation_id]
            if (item.question, item.answer) != (parsed["question"], parsed["answer"]):
                item.question, item.answer, item.updated_at = parsed["question"], parsed["answer"], utcnow()
                session.add(item)
                session.add(ItemEvent(item_id=item.id, stage="reparse", from_status=DRAFT, to_status=DRAFT,
                                      detail={"generation_id": item.generation_id}))
                updated += 1
    return updated


# ------------------------------------------------------------------ for the quickstart
def generate_examples(workspace: Workspace, per_group: int = 2, backend: str | None = None,
                      model: str | None = None, console: Console | None = None,
                      quiet: bool = False) -> list[RewriteReport]:
    """A few draft items per group with the configured backend (the embedded model by default). Ingested C-VQA
    counterfactuals do not count as done, so every group gets its items after a C-VQA ingest."""
    config = workspace.section("llm")
    llm = make_backend(config, backend, model)
    try:
        run = LLMRun(params=llm_params(config, llm.name), console=console, quiet=quiet,
                     workspace_root=workspace.root)
        return [rewrite(workspace.store, llm, group, run=run, limit=per_group, include_ingested=True)
                for group in CVQA_GROUPS]
    finally:
        llm.close()
