"""One LLM generator run, whatever it writes: jobs, the request cache, retries of unparseable outputs, provenance.

A generator (C-VQA rewriting, MuCR contextual descriptions and cues, CFMM pairs, ...) is an `LLMTask`: its name,
its prompt template, its output schema (`schema`, a `cftools.llm.structured.OutputSchema`) and `from_reply(reply,
job)` (or, for free text, `parse(text, job)`, which raises `ParseError`), and `write(session, job, parsed,
generation_id, attempt)` (creates or updates items). `run_llm_task` does the rest the same way for all of them:

- the schema goes to the backend as its `structured_output` says (`response_format`, or into the prompt; the
  embedded model decodes under it), every reply is validated against it, and the generation record's params
  keep `output_schema` = {name, hash, mode, constrained};

- every finished request is committed at once (cache entry, generation record, what `write` makes), so a killed
  run loses only what was in flight and the next run does only the jobs the task still selects;
- a job's first attempt is looked up in the cache in bulk; a cached, parseable reply needs no thread;
- an unparseable output is kept (raw text + reason, in its generation record only: the request cache holds only
  replies that parsed) and retried with a new attempt number, which changes the sampling parameters (temperature,
  seed) and so the cache key; a reply past `[llm] max_reply_bytes` is a failed call, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Optional

from jinja2 import TemplateError
from rich.console import Console
from sqlalchemy import insert, select
from sqlmodel import Session

from cftools.distributed import InFlight
from cftools.errors import CftoolsError, Hint, InputError
from cftools.llm import Backend, Completion, LLMError, request_key
from cftools.llm.base import DEFAULT_PARAMS, render_messages
from cftools.llm.cost import BudgetReached
from cftools.llm.cache import cached_completion, cached_completions, save_completions
from cftools.llm.prompts import PromptTemplate
from cftools.llm.structured import (OutputSchema, ReplyError, backend_mode, schema_provenance,
                                    structured_request)
from cftools.generate.claims import DEFAULT_LEASE_S, Claims
from cftools.llm.runner import JobResult, RunStats, Shown, run_jobs
from cftools.models import DRAFT, Generation, Item, ItemEvent, utcnow
from cftools.store import Store

DEFAULT_MAX_ATTEMPTS = 3
RETRY_TEMPERATURE = 0.7
DEFAULT_CONCURRENCY = {"local": 1, "openai": 8}


@dataclass(frozen=True)
class LLMRun:
    """How a generator's model calls run, the same for every generator (`llm_options`: --template, --concurrency,
    --refresh, --max-attempts, --quiet); built once by the command and passed as one value.

    PARAMS: the backend's sampling parameters (None: the generator's own defaults, `LLMRun.or_params`);
    TEMPLATE_PATH: the user's own prompt template (else the workspace's copy under WORKSPACE_ROOT, else the
    packaged one); PROMPT_VARIANT: a named prompt variant or a folder of templates (`--prompt-variant`,
    `cftools.llm.prompts.variant_folder`)."""

    params: Optional[dict[str, Any]] = None
    template_path: Optional[Path] = None
    workspace_root: Optional[Path] = None
    concurrency: Optional[int] = None
    refresh: bool = False
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    console: Optional[Console] = None
    quiet: bool = False
    prompt_variant: Optional[str] = None

    def or_params(self, params: dict[str, Any]) -> "LLMRun":
        """This run, with PARAMS when it names none of its own."""
        return self if self.params else replace(self, params=params)


class ParseError(ValueError):
    """A model output the task's parser cannot read (the reason is stored with the output)."""


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
class LLMJob:
    """One request of a generator: what it is about (a source question or an item) and its messages."""

    label: str  # for people: "source 12", "item mucr:3"
    messages: list[dict[str, Any]]
    key: str = ""  # what the job makes, unique per generator (the claim key); defaults to the label
    source_id: Optional[int] = None
    group: Optional[str] = None
    context: dict[str, Any] = field(default_factory=dict)  # what `write` needs
    attempts: list[Attempt] = field(default_factory=list)
    first_missed: bool = False  # the bulk cache lookup found no response for attempt 1
    params: dict[str, Any] = field(default_factory=dict)  # on top of the run's (the output schema)
    provenance: dict[str, Any] = field(default_factory=dict)  # on top of the generation record's params


@dataclass
class ParsedOutput:
    """A job's final, parsed output and the generation record that made it (what `LLMTask.write` stores)."""

    job: LLMJob
    parsed: dict[str, Any]
    generation_id: int
    attempt: int


class LLMTask:
    """A generator's own part: its name, template, parser and writer."""

    generator: str = ""
    template: PromptTemplate
    schema: Optional[OutputSchema] = None

    def schema_for(self, job: LLMJob) -> Optional[OutputSchema]:
        """The job's output schema (a task whose choices depend on the job builds one per job)."""
        return self.schema

    def parse(self, text: str, job: LLMJob) -> dict[str, Any]:
        schema = self.schema_for(job)
        if schema is None:
            raise NotImplementedError
        return self.from_reply(schema.read(text), job)

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        """What a validated reply (the schema's pydantic model) makes: the parsed dict `write` stores; raises
        ParseError for what a schema cannot say (an answer that is not one of the options)."""
        raise NotImplementedError

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        """Store what a parsed output makes (items created or updated); returns how many."""
        raise NotImplementedError

    def write_many(self, store: Store, session: Session, outputs: list[ParsedOutput]) -> int:
        """Store what a batch of parsed outputs makes; a task whose rows go in together overrides this (one
        statement per batch instead of one per output)."""
        return sum(self.write(store, session, o.job, o.parsed, o.generation_id, o.attempt) for o in outputs)


@dataclass
class LLMReport:
    generator: str
    group: Optional[str]
    backend: str
    model: str
    template: str
    selected: int = 0
    stats: RunStats = field(default_factory=RunStats)
    items_created: int = 0
    parse_failures: int = 0
    call_errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"generator": self.generator, "group": self.group, "backend": self.backend, "model": self.model,
                "template": self.template, "selected": self.selected, "items_created": self.items_created,
                "parse_failures": self.parse_failures, "call_errors": self.call_errors, **self.stats.as_dict(),
                "errors": self.stats.errors[:5]}


def attempt_params(base: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Attempt 1 uses the configured (greedy) parameters; a retry samples with its own seed, so it is a new
    request for the cache too."""
    if attempt <= 1:
        return dict(base)
    return {**base, "temperature": max(float(base.get("temperature") or 0.0), RETRY_TEMPERATURE), "seed": attempt}


class Attempts:
    """Runs the attempts of one job: cache or model, then the task's parser."""

    def __init__(self, store: Store, backend: Backend, task: LLMTask, base_params: dict[str, Any],
                 max_attempts: int, refresh: bool) -> None:
        self.store, self.backend, self.task = store, backend, task
        self.base_params = base_params
        self.max_attempts = max(1, max_attempts)
        self.refresh = refresh

    def params_of(self, job: LLMJob, number: int) -> dict[str, Any]:
        """The request parameters of JOB's attempt NUMBER (the run's, the job's own schema, the attempt's seed)."""
        return attempt_params({**self.base_params, **job.params}, number)

    def new_attempt(self, job: LLMJob) -> Attempt:
        number = len(job.attempts) + 1
        params = self.params_of(job, number)
        return Attempt(number=number, params=params,
                       key=request_key(self.backend.cache_id, self.backend.model, job.messages, params))

    def parse_into(self, attempt: Attempt, job: LLMJob) -> bool:
        try:
            attempt.parsed = self.task.parse(attempt.completion.text, job)
            return True
        except (ParseError, ReplyError) as exc:
            attempt.parse_error = str(exc)
            return False

    def try_cached_first(self, job: LLMJob, cache: dict[str, Completion]) -> JobResult | None:
        """A finished result when the first attempt's response is cached and parses (no thread needed)."""
        attempt = self.new_attempt(job)
        completion = cache.get(attempt.key)
        if completion is None:
            job.first_missed = True
            return None
        attempt.completion = completion
        if not self.parse_into(attempt, job):
            return None
        job.attempts.append(attempt)
        return JobResult(job=job, ok=True, cached=True)

    def work(self, job: LLMJob) -> JobResult:
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
                    if isinstance(exc, BudgetReached):  # never sent: nothing to record, a rerun does it
                        job.attempts.pop()
                        return JobResult(job=job, ok=False, not_started=True)
                    attempt.error = str(exc)
                    return JobResult(job=job, ok=False, error=f"{job.label}: {exc}")
            if self.parse_into(attempt, job):
                return JobResult(job=job, ok=True, cached=all(not a.fresh for a in job.attempts))
        return JobResult(job=job, ok=False, cached=all(not a.fresh for a in job.attempts),
                         error=f"{job.label}: no reply parsed in {len(job.attempts)} attempts "
                               f"({job.attempts[-1].parse_error})")


class Writer:
    """Commits finished jobs: cache entries, generation records, and what the task makes of them."""

    def __init__(self, store: Store, backend: Backend, task: LLMTask, report: LLMReport,
                 claims: Optional[Claims] = None) -> None:
        self.store, self.backend, self.task, self.report, self.claims = store, backend, task, report, claims

    def __call__(self, results: list[JobResult]) -> None:
        with self.store.write() as session:
            # an unparseable reply is stored once, in its generation record (raw output and reason), not also in
            # the request cache: only replies a run can use are cached
            fresh = [(a.key, a.completion) for r in results for a in r.job.attempts
                     if a.fresh and a.completion and not a.parse_error]
            save_completions(session, self.backend.cache_id, self.backend.model, fresh)
            rows = [self.generation_row(r.job, a) for r in results for a in r.job.attempts]
            ids = iter(session.execute(insert(Generation).returning(Generation.id, sort_by_parameter_order=True),
                                       rows).scalars().all() if rows else [])
            outputs: list[ParsedOutput] = []
            finished: dict[bool, list[str]] = {True: [], False: []}
            for result in results:
                job: LLMJob = result.job
                generation_ids = [next(ids) for _ in job.attempts]
                self.report.parse_failures += sum(1 for a in job.attempts if a.parse_error)
                self.report.call_errors += sum(1 for a in job.attempts if a.error)
                final = job.attempts[-1] if job.attempts else None
                ok = result.ok and final is not None and bool(final.parsed)
                if ok:
                    outputs.append(ParsedOutput(job, final.parsed, generation_ids[-1], final.number))
                if not result.not_started:  # a job the budget did not start stays claimed until close() frees it
                    finished[ok].append(job_key(job))
            if outputs:
                self.report.items_created += self.task.write_many(self.store, session, outputs)
            if self.claims is not None:
                self.claims.finish(session, finished[True], ok=True)
                self.claims.finish(session, finished[False], ok=False)
        if (controls := getattr(self.backend, "controls", None)) is not None:
            controls.record(results)

    def generation_row(self, job: LLMJob, attempt: Attempt) -> dict[str, Any]:
        completion = attempt.completion
        template = self.task.template
        return dict(
            source_id=job.source_id, generator=self.task.generator, group=job.group, backend=self.backend.name,
            model=self.backend.model, template_name=template.name, template_hash=template.hash,
            prompt_variant=template.variant,
            params={**{k: v for k, v in attempt.params.items() if k != "response_format"},
                    "cache_backend": self.backend.cache_id, **job.provenance, **batch_provenance(completion)},
            prompt=render_messages(job.messages),
            raw_output=completion.text if completion else None, parsed=attempt.parsed,
            parse_error=attempt.parse_error, prompt_tokens=completion.prompt_tokens if completion else None,
            completion_tokens=completion.completion_tokens if completion else None,
            latency_s=completion.latency_s if completion else None, error=attempt.error, cache_key=attempt.key,
            cached=bool(completion and completion.cached), attempt=attempt.number, created_at=utcnow())


def batch_provenance(completion: Completion | None) -> dict[str, Any]:
    """The batch that answered a fresh call (`--batch-api`), and what a reply without usage was charged (its worst
    case), beside the call's parameters."""
    if completion is None or completion.cached:
        return {}
    from cftools.llm.cost import WORST_CASE_COST

    return {k: completion.extra[k] for k in ("batch_id", WORST_CASE_COST) if completion.extra.get(k) is not None}


def job_key(job: LLMJob) -> str:
    return job.key or job.label


def claimed_jobs(store: Store, jobs: list[LLMJob], attempts: Attempts, claims: Claims, refresh: bool,
                 batch: InFlight) -> Iterator[Any]:
    """The jobs this worker has claimed, batch by batch; a job whose first reply is cached and parses comes out
    finished (a JobResult, no thread); None while other workers hold the rest."""
    by_key = {job_key(job): job for job in jobs}
    for keys in claims.batches(batch):
        if keys is None:
            yield None
            continue
        chosen = [by_key[k] for k in keys]
        if refresh:
            yield from chosen
            continue
        cache = cached_completions(store, [attempts.new_attempt(job).key for job in chosen])
        for job in chosen:
            yield attempts.try_cached_first(job, cache) or job


UNSTRUCTURED_ONLY = ("stop", "stop_regex")  # free-text stops could cut a JSON reply short


def structure_jobs(task: LLMTask, jobs: list[LLMJob], backend: Backend) -> None:
    """Give each job its output schema the way BACKEND takes it (`cftools.llm.structured.structured_request`)."""
    mode = backend_mode(backend)
    for job in jobs:
        schema = task.schema_for(job)
        if schema is None:
            continue
        job.messages, job.params = structured_request(backend, schema, job.messages, job.params)
        job.provenance = {**job.provenance, "output_schema": schema_provenance(schema, mode)}


def refuse_prompt_variant(generator: str, run: LLMRun) -> None:
    """Stop before anything is written when RUN names a prompt variant that GENERATOR does not run."""
    if run.prompt_variant is not None:
        raise CftoolsError(f"the {generator} generator does not run prompt variants yet; generate rewrite, pairs "
                           "and captions do", hint=Hint(f"the {generator} generator does not run prompt variants "
                                                        "({variant}) yet; generate rewrite, pairs and captions do",
                                                        variant="--prompt-variant"))


def run_llm_task(store: Store, backend: Backend, task: LLMTask, jobs: list[LLMJob], *, run: LLMRun,
                 group: Optional[str] = None, lease_s: float = DEFAULT_LEASE_S,
                 selected_at: Optional[datetime] = None) -> LLMReport:
    """Run JOBS for TASK with BACKEND as RUN says; other workers on the same store share the jobs
    (`cftools.generate.claims`). SELECTED_AT is when the caller started choosing the jobs. Returns what this worker
    did."""
    if task.template.variant is None:
        refuse_prompt_variant(task.generator, run)
    report = LLMReport(generator=task.generator, group=group, backend=backend.name, model=backend.model,
                       template=task.template.name, selected=len(jobs))
    params = dict(run.params or {})
    if jobs and task.schema_for(jobs[0]) is not None:
        params = {k: v for k, v in params.items() if k not in UNSTRUCTURED_ONLY}
    structure_jobs(task, jobs, backend)
    attempts = Attempts(store, backend, task, params, run.max_attempts, run.refresh)
    per_worker = run.concurrency or DEFAULT_CONCURRENCY.get(backend.name, 4)
    workers: InFlight = per_worker
    if getattr(backend, "ray_workers", None) is not None:
        # on a Ray cluster (`--ray`) each worker answers CONCURRENCY calls at once: keep every one of them busy,
        # those of a node that joins mid-run too (the pool's size is asked again before each hand-out)
        workers = lambda: per_worker * max(1, int(backend.ray_workers or 1))  # noqa: E731
    # --max-cost, --estimate, --batch-api: a ControlledBackend's (cftools.generate.run_controls, which imports this)
    controls = getattr(backend, "controls", None)
    if controls is not None:
        jobs = controls.start(store, backend, task, jobs, attempts, run.refresh, run.console, run.quiet)
        if jobs is None:  # an estimate only
            return report
        workers = controls.workers(backend, workers)
    claims = Claims(store, task.generator, [job_key(job) for job in jobs], lease_s, selected_at)
    # a claim no larger than the requests in flight: the last jobs spread over every worker, not queued behind one
    source = claimed_jobs(store, jobs, attempts, claims, run.refresh, batch=workers)
    ran = False
    try:
        report.stats = run_jobs(controls.gate(source) if controls else source, attempts.work,
                                Writer(store, backend, task, report, claims),
                                concurrency=workers, total=len(jobs),
                                shown=Shown(f"{task.generator} {group or ''}".strip(), run.console, run.quiet))
        ran = not report.stats.interrupted
    finally:
        claims.close()
        if controls is not None:
            controls.finish(backend, stored_all=ran)
    return report


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


def render(template: PromptTemplate, what: str, **variables: Any) -> str:
    try:
        return template.render(**variables)
    except TemplateError as exc:
        raise InputError(template.name, f"cannot render for {what}: {exc}") from None


def text_params(config: dict[str, Any], max_tokens: int, backend: Optional[str] = None,
                local_max_tokens: Optional[int] = None) -> dict[str, Any]:
    """Sampling parameters: the defaults, the generator's length, and [llm] temperature/max_tokens/top_p; the
    embedded model gets the length its schema's bounds fit in."""
    params = {**DEFAULT_PARAMS, "max_tokens": max_tokens}
    if (backend or config.get("backend") or "local") == "local" and local_max_tokens:
        params["max_tokens"] = local_max_tokens
    for name in ("temperature", "max_tokens", "top_p"):
        if config.get(name) is not None:
            params[name] = config[name]
    return params
