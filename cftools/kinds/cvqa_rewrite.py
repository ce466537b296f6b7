"""Counterfactual rewriting, the C-VQA way: a source question and its answer, a group's chain-of-thought prompt,
a model call, a tolerant parse, and a draft item linked to its source question and its generation record.

    backend = make_backend(workspace.section("llm"))
    report = rewrite(workspace.store, backend, "numerical-direct", limit=10)

Every finished request is committed at once (generation record, cache entry, item), so a killed run loses only
what was in flight and the next run does only the sources that still have no item of the group. Item keys are
`rewrite:<source_id>:<group>`. Unparseable outputs are kept (raw text + reason) and retried with a new attempt
number, which changes the sampling parameters (temperature, seed) and so the cache key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from rich.console import Console
from sqlalchemy import and_, exists, insert, select
from sqlmodel import Session

from cftools.errors import CftoolsError, InputError
from cftools.llm import Backend, Completion, LLMError, make_backend, request_key, text_message
from cftools.llm.base import DEFAULT_PARAMS, render_messages
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.cache import cached_completion, cached_completions, save_completions
from cftools.llm.runner import JobResult, RunStats, run_jobs
from cftools.kinds.cvqa import GROUP_ANSWER_TYPE, GROUPS as CVQA_GROUPS
from cftools.models import (DRAFT, Generation,
                            Item, ItemEvent, SourceQuestion, utcnow)
from cftools.kinds.cvqa_parser import RewriteParseError, parse_rewrite
from cftools.store import Store
from cftools.workspace import Workspace

GENERATOR = "rewrite"
DEFAULT_MAX_ATTEMPTS = 3
RETRY_TEMPERATURE = 0.7
DEFAULT_CONCURRENCY = {"local": 1, "openai": 8}
# The prompts' examples start with "Question:"; a model that goes on to invent another example stops there.
REWRITE_STOP = ["\nQuestion:"]
# The embedded model also stops once its "New answer:" line is complete (OpenAI-compatible servers ignore this).
REWRITE_STOP_REGEX = r"(?i)new answer\s*:[^\n]*\S[^\n]*\n"
LOCAL_MAX_TOKENS = 160


def item_key(source_id: int, group: str) -> str:
    return f"{GENERATOR}:{source_id}:{group}"


# ------------------------------------------------------------------ prompts
def load_template(group: str, path: Path | None = None, workspace_root: Path | None = None) -> PromptTemplate:
    """The group's prompt (`prompts/rewrite/<group>.j2`, a workspace's copy first), or the user's template file."""
    return load_prompt(f"rewrite/{group}.j2", path, workspace_root)


def render_prompt(template: PromptTemplate, source: dict[str, Any]) -> str:
    try:
        return template.render(question=source["question"], answer=source["answer"], source=source)
    except TemplateError as exc:
        raise InputError(template.name, f"cannot render for source question {source['id']}: {exc}") from None


def attempt_params(base: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Attempt 1 uses the configured (greedy) parameters; a retry samples with its own seed, so it is a new
    request for the cache too."""
    if attempt <= 1:
        return dict(base)
    return {**base, "temperature": max(float(base.get("temperature") or 0.0), RETRY_TEMPERATURE), "seed": attempt}


# ------------------------------------------------------------------ selecting work
def select_sources(store: Store, group: str, limit: int | None = None,
                   include_ingested: bool = False) -> list[dict[str, Any]]:
    """Source questions of the group's answer type with no item of that group yet (with INCLUDE_INGESTED: no
    generated item; an ingested C-VQA counterfactual of the same group does not count). Those whose image is in
    the store come first, so a small --limit gives items that can be annotated and exported."""
    if group not in CVQA_GROUPS:
        raise CftoolsError(f"unknown group {group!r}; use one of {', '.join(CVQA_GROUPS)}")
    condition = and_(Item.source_id == SourceQuestion.id, Item.group == group)
    if include_ingested:
        condition = and_(condition, Item.origin == "generated")
    query = (select(SourceQuestion.id, SourceQuestion.question, SourceQuestion.answer, SourceQuestion.image_ref)
             .where(SourceQuestion.answer_type == GROUP_ANSWER_TYPE[group], SourceQuestion.answer.is_not(None),
                    ~exists().where(condition))
             .order_by(SourceQuestion.image_id.is_(None), SourceQuestion.id))  # questions with an image first
    if limit is not None:
        query = query.limit(limit)
    with store.session() as session:
        return [dict(row._mapping) for row in session.execute(query)]


# ------------------------------------------------------------------ one request
@dataclass
class Attempt:
    number: int
    params: dict[str, Any]
    key: str
    completion: Completion | None = None
    fresh: bool = False  # a new model call (goes into the cache)
    parsed: dict[str, Any] | None = None
    parse_error: str | None = None
    error: str | None = None


@dataclass
class RewriteJob:
    source: dict[str, Any]
    messages: list[dict[str, Any]]
    attempts: list[Attempt] = field(default_factory=list)
    first_missed: bool = False  # the bulk cache lookup found no response for attempt 1


@dataclass
class RewriteReport:
    group: str
    backend: str
    model: str
    template: str
    selected: int = 0
    stats: RunStats = field(default_factory=RunStats)
    items_created: int = 0
    parse_failures: int = 0
    call_errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "backend": self.backend, "model": self.model, "template": self.template,
                "selected": self.selected, "items_created": self.items_created,
                "parse_failures": self.parse_failures, "call_errors": self.call_errors, **self.stats.as_dict(),
                "errors": self.stats.errors[:5]}


class Rewriter:
    """Runs the attempts for one source question: cache or model, then the parser."""

    def __init__(self, store: Store, backend: Backend, group: str, base_params: dict[str, Any],
                 max_attempts: int, refresh: bool) -> None:
        self.store = store
        self.backend = backend
        self.group = group
        self.base_params = base_params
        self.max_attempts = max(1, max_attempts)
        self.refresh = refresh

    def new_attempt(self, job: RewriteJob) -> Attempt:
        number = len(job.attempts) + 1
        params = attempt_params(self.base_params, number)
        return Attempt(number=number, params=params,
                       key=request_key(self.backend.cache_id, self.backend.model, job.messages, params))

    def parse_into(self, attempt: Attempt) -> bool:
        try:
            attempt.parsed = parse_rewrite(attempt.completion.text, self.group).as_dict()
            return True
        except RewriteParseError as exc:
            attempt.parse_error = str(exc)
            return False

    def try_cached_first(self, job: RewriteJob, cache: dict[str, Completion]) -> JobResult | None:
        """A finished result when the first attempt's response is cached and parses (no thread needed)."""
        attempt = self.new_attempt(job)
        completion = cache.get(attempt.key)
        if completion is None:
            job.first_missed = True
            return None
        attempt.completion = completion
        if not self.parse_into(attempt):
            return None
        job.attempts.append(attempt)
        return JobResult(job=job, ok=True, cached=True)

    def work(self, job: RewriteJob) -> JobResult:
        while len(job.attempts) < self.max_attempts:
            attempt = self.new_attempt(job)
            job.attempts.append(attempt)
            looked_up = attempt.number == 1 and job.first_missed
            attempt.completion = None if self.refresh or looked_up else cached_completion(self.store, attempt.key)
            if attempt.completion is None:
                try:
                    attempt.completion = self.backend.complete(job.messages, attempt.params)
                    attempt.fresh = True
                except LLMError as exc:
                    attempt.error = str(exc)
                    return JobResult(job=job, ok=False, error=f"source {job.source['id']}: {exc}")
            if self.parse_into(attempt):
                return JobResult(job=job, ok=True, cached=all(not a.fresh for a in job.attempts))
        return JobResult(job=job, ok=False, cached=all(not a.fresh for a in job.attempts),
                         error=f"source {job.source['id']}: unparseable after {len(job.attempts)} attempts "
                               f"({job.attempts[-1].parse_error})")


# ------------------------------------------------------------------ writing
class RewriteWriter:
    """Commits finished jobs: cache entries, generation records, draft items and their history."""

    def __init__(self, store: Store, backend: Backend, group: str, template: PromptTemplate,
                 report: RewriteReport) -> None:
        self.store = store
        self.backend = backend
        self.group = group
        self.template = template
        self.report = report

    def __call__(self, results: list[JobResult]) -> None:
        with self.store.write() as session:
            fresh = [(a.key, a.completion) for r in results for a in r.job.attempts if a.fresh and a.completion]
            save_completions(session, self.backend.cache_id, self.backend.model, fresh)
            rows = [self._generation(r.job, a) for r in results for a in r.job.attempts]
            ids = iter(session.execute(insert(Generation).returning(Generation.id, sort_by_parameter_order=True),
                                       rows).scalars().all() if rows else [])
            items = []
            for result in results:
                job: RewriteJob = result.job
                generation_ids = [next(ids) for _ in job.attempts]
                self.report.parse_failures += sum(1 for a in job.attempts if a.parse_error)
                self.report.call_errors += sum(1 for a in job.attempts if a.error)
                final = job.attempts[-1] if job.attempts else None
                if result.ok and final is not None and final.parsed:
                    items.append(self._item(job, final, generation_ids[-1]))
            self.report.items_created += insert_items(self.store, session, items, "generate")

    def _generation(self, job: RewriteJob, attempt: Attempt) -> dict[str, Any]:
        completion = attempt.completion
        return dict(
            source_id=job.source["id"], generator=GENERATOR, group=self.group, backend=self.backend.name,
            model=self.backend.model, template_name=self.template.name, template_hash=self.template.hash,
            params={**attempt.params, "cache_backend": self.backend.cache_id}, prompt=render_messages(job.messages),
            raw_output=completion.text if completion else None, parsed=attempt.parsed,
            parse_error=attempt.parse_error, prompt_tokens=completion.prompt_tokens if completion else None,
            completion_tokens=completion.completion_tokens if completion else None,
            latency_s=completion.latency_s if completion else None, error=attempt.error, cache_key=attempt.key,
            cached=bool(completion and completion.cached), attempt=attempt.number, created_at=utcnow())

    def _item(self, job: RewriteJob, attempt: Attempt, generation_id: int) -> dict[str, Any]:
        return item_row(job.source, self.group, attempt.parsed, generation_id, attempt.number)


def item_row(source: dict[str, Any], group: str, parsed: dict[str, Any], generation_id: int,
             attempt: int) -> dict[str, Any]:
    now = utcnow()
    return {
        "key": item_key(source["id"], group), "kind": "cvqa", "group": group, "source_id": source["id"],
        "question": parsed["question"], "answer": parsed["answer"], "status": DRAFT, "origin": "generated",
        "generation_id": generation_id, "created_at": now, "updated_at": now,
        "data": {"original_question": source["question"], "original_answer": source["answer"],
                 "candidates": parsed.get("candidates"), "flipped_answer": parsed.get("flipped_answer"),
                 "attempt": attempt},
    }


def insert_items(store: Store, session: Session, items: list[dict[str, Any]], stage: str) -> int:
    """Insert draft items (a key already there is skipped) and their first history event; returns how many."""
    if not items:
        return 0
    keys = [i["key"] for i in items]
    before = set(session.execute(select(Item.key).where(Item.key.in_(keys))).scalars())
    store.insert_ignore(session, Item.__table__, [i for i in items if i["key"] not in before])
    new_ids = session.execute(select(Item.id).where(Item.key.in_([k for k in keys if k not in before]))).scalars().all()
    if new_ids:
        session.execute(ItemEvent.__table__.insert(), [
            {"item_id": item_id, "stage": stage, "to_status": DRAFT, "detail": None, "created_at": utcnow()}
            for item_id in new_ids])
    return len(new_ids)


# ------------------------------------------------------------------ the whole run
def llm_params(config: dict[str, Any], backend: str | None = None) -> dict[str, Any]:
    """Sampling parameters for rewriting: the defaults, the stops, and [llm] temperature/max_tokens/top_p."""
    params = {**DEFAULT_PARAMS, "stop": REWRITE_STOP}
    if (backend or config.get("backend") or "local") == "local":
        params.update(stop_regex=REWRITE_STOP_REGEX, max_tokens=LOCAL_MAX_TOKENS)
    for name in ("temperature", "max_tokens", "top_p"):
        if config.get(name) is not None:
            params[name] = config[name]
    return params


def rewrite(store: Store, backend: Backend, group: str, *, limit: int | None = None,
            template_path: Path | None = None, concurrency: int | None = None, refresh: bool = False,
            max_attempts: int = DEFAULT_MAX_ATTEMPTS, params: dict[str, Any] | None = None,
            include_ingested: bool = False, console: Console | None = None, quiet: bool = False,
            workspace_root: Path | None = None) -> RewriteReport:
    """Rewrite up to LIMIT source questions into draft items of GROUP; returns what happened. The group's prompt
    is the workspace's copy when it has one (`init --with-prompts`)."""
    template = load_template(group, template_path, workspace_root)
    sources = select_sources(store, group, limit, include_ingested)
    report = RewriteReport(group=group, backend=backend.name, model=backend.model, template=template.name,
                           selected=len(sources))
    rewriter = Rewriter(store, backend, group, params or llm_params({}, backend.name), max_attempts, refresh)
    jobs = [RewriteJob(source=s, messages=[text_message(render_prompt(template, s))]) for s in sources]
    ready: list[JobResult] = []
    pending = jobs
    if not refresh and jobs:
        first_keys = [rewriter.new_attempt(job).key for job in jobs]
        cache = cached_completions(store, first_keys)
        pending = []
        for job in jobs:
            result = rewriter.try_cached_first(job, cache)
            (ready.append(result) if result else pending.append(job))
    workers = concurrency or DEFAULT_CONCURRENCY.get(backend.name, 4)
    report.stats = run_jobs(pending, rewriter.work, RewriteWriter(store, backend, group, template, report),
                            concurrency=workers, description=f"rewrite {group}", console=console, quiet=quiet,
                            ready=ready)
    return report


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
        best: dict[tuple[int, str], Generation] = {}
        for gen in generations:
            report.generations += 1
            try:
                parsed, error = parse_rewrite(gen.raw_output, gen.group).as_dict(), None
            except RewriteParseError as exc:
                parsed, error = None, str(exc)
            if parsed != gen.parsed or error != gen.parse_error:
                report.changed += 1
                gen.parsed, gen.parse_error = parsed, error
                session.add(gen)
            if parsed and gen.source_id is not None:
                best.setdefault((gen.source_id, gen.group), gen)
        session.flush()
        items = {i.key: i for i in session.execute(select(Item).where(Item.origin == "generated",
                                                                      Item.key.like(f"{GENERATOR}:%"))).scalars()}
        new_rows = []
        for (source_id, grp), gen in best.items():
            item = items.get(item_key(source_id, grp))
            if item is None:
                source = session.get(SourceQuestion, source_id)
                new_rows.append(item_row({"id": source_id, "question": source.question, "answer": source.answer},
                                         grp, gen.parsed, gen.id, gen.attempt))
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
    return report


# ------------------------------------------------------------------ for the quickstart
def generate_examples(workspace: Workspace, per_group: int = 2, backend: str | None = None,
                      model: str | None = None, console: Console | None = None,
                      quiet: bool = False) -> list[RewriteReport]:
    """A few draft items per group with the configured backend (the embedded model by default). Ingested C-VQA
    counterfactuals do not count as done, so every group gets its items after a C-VQA ingest."""
    config = workspace.section("llm")
    llm = make_backend(config, backend, model)
    try:
        return [rewrite(workspace.store, llm, group, limit=per_group, params=llm_params(config, llm.name),
                        include_ingested=True, console=console, quiet=quiet, workspace_root=workspace.root)
                for group in CVQA_GROUPS]
    finally:
        llm.close()
