"""The item store's tables (SQLModel). Later stages add columns through migrations in `db/`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

# Status life cycle of an item.
DRAFT = "draft"
CHECKED = "checked"
IN_REVIEW = "in_review"
ACCEPTED = "accepted"
REJECTED = "rejected"
NEEDS_ADJUDICATION = "needs_adjudication"
STATUSES = (DRAFT, CHECKED, IN_REVIEW, ACCEPTED, REJECTED, NEEDS_ADJUDICATION)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def json_column(**kwargs: Any) -> Any:
    return Field(default=None, sa_column=Column(JSON, **kwargs))


class Image(SQLModel, table=True):
    """One image file, identified by the SHA-256 of its bytes."""

    __tablename__ = "images"
    id: Optional[int] = Field(default=None, primary_key=True)
    sha256: str = Field(index=True, unique=True, max_length=64)
    width: int
    height: int
    format: str
    size_bytes: int
    path: str = Field(sa_column=Column(Text, nullable=False))  # where the file was found first
    created_at: datetime = Field(default_factory=utcnow)


class ImageName(SQLModel, table=True):
    """A file name under which an image was seen; inputs refer to images by name."""

    __tablename__ = "image_names"
    __table_args__ = (UniqueConstraint("name", "image_id"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    name: str = Field(index=True)
    image_id: int = Field(foreign_key="images.id", index=True)


class SourceQuestion(SQLModel, table=True):
    """An original question about an image, as ingested (VQAv2, C-VQA original, a user's table)."""

    __tablename__ = "source_questions"
    __table_args__ = (UniqueConstraint("dataset", "external_id"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    dataset: str = Field(index=True)  # e.g. vqav2:val2014, cvqa:C-VQA-Real_questions, table:mine
    external_id: str  # question_id, or a stable key of the record
    image_ref: str = Field(index=True)  # the file name the input refers to
    image_id: Optional[int] = Field(default=None, foreign_key="images.id", index=True)
    question: str = Field(sa_column=Column(Text, nullable=False))
    answer: Optional[str] = None  # most frequent human answer
    answer_type: Optional[str] = Field(default=None, index=True)  # number | yes/no | other
    answers: Optional[list] = json_column()  # all human answers
    meta: Optional[dict] = json_column()
    created_at: datetime = Field(default_factory=utcnow)


class Generation(SQLModel, table=True):
    """Provenance of one model call."""

    __tablename__ = "generations"
    id: Optional[int] = Field(default=None, primary_key=True)
    source_id: Optional[int] = Field(default=None, foreign_key="source_questions.id", index=True)
    generator: str = "rewrite"
    group: Optional[str] = None
    backend: str
    model: str
    template_name: Optional[str] = None
    template_hash: Optional[str] = None
    # The named prompt variant (`--prompt-variant`); None: the generator's default template
    prompt_variant: Optional[str] = Field(default=None, index=True)
    params: Optional[dict] = json_column()
    prompt: Optional[str] = Field(default=None, sa_column=Column(Text))
    raw_output: Optional[str] = Field(default=None, sa_column=Column(Text))
    parsed: Optional[dict] = json_column()
    parse_error: Optional[str] = None
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    latency_s: Optional[float] = None
    error: Optional[str] = Field(default=None, sa_column=Column(Text))
    cache_key: Optional[str] = Field(default=None, index=True)
    cached: bool = False
    attempt: int = 1
    created_at: datetime = Field(default_factory=utcnow)


class CachedResponse(SQLModel, table=True):
    """The request cache: keyed on backend, model, rendered prompt and parameters, never on a parser."""

    __tablename__ = "llm_cache"
    id: Optional[int] = Field(default=None, primary_key=True)
    key: str = Field(index=True, unique=True, max_length=64)
    backend: str
    model: str
    output: str = Field(sa_column=Column(Text, nullable=False))
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    latency_s: Optional[float] = None
    created_at: datetime = Field(default_factory=utcnow)


class Item(SQLModel, table=True):
    """A counterfactual item: the thing that is checked, annotated, released and evaluated."""

    __tablename__ = "items"
    id: Optional[int] = Field(default=None, primary_key=True)
    key: str = Field(index=True, unique=True)  # stable identity used for idempotent writes
    kind: str = Field(index=True)  # a registered kind (cftools.kinds)
    group: str = Field(index=True)
    source_id: Optional[int] = Field(default=None, foreign_key="source_questions.id", index=True)
    question: str = Field(sa_column=Column(Text, nullable=False))
    answer: Optional[str] = None
    proposed_answer: Optional[str] = None  # the answer before an annotator's correction
    status: str = Field(default=DRAFT, index=True)
    origin: str = "ingested"  # ingested | generated | release
    generation_id: Optional[int] = Field(default=None, foreign_key="generations.id")
    data: Optional[dict] = json_column()  # shape-specific fields (options, cues, explanations...)
    # The dataset an ingested item came from, for items without a source question (caption pairs); an item
    # with a source question comes from its source's dataset. Its licence is in dataset_licences.
    dataset: Optional[str] = None
    # The item (rejected by people, or flagged) this one was drafted again from (`generate --redo`); None: a first draft
    redo_of: Optional[int] = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class ItemEvent(SQLModel, table=True):
    """History of an item: every status change and edit, with the stage that made it."""

    __tablename__ = "item_events"
    id: Optional[int] = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="items.id", index=True)
    stage: str
    from_status: Optional[str] = None
    to_status: Optional[str] = None
    detail: Optional[dict] = json_column()
    created_at: datetime = Field(default_factory=utcnow)


class CheckFlag(SQLModel, table=True):
    __tablename__ = "check_flags"
    __table_args__ = (UniqueConstraint("item_id", "code"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="items.id", index=True)
    code: str = Field(index=True)
    reason: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class AnnotationTask(SQLModel, table=True):
    """An item pushed to a Label Studio project as a task."""

    __tablename__ = "annotation_tasks"
    __table_args__ = (UniqueConstraint("server", "ls_project_id", "ls_task_id"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="items.id", index=True)
    purpose: str = "verify"  # verify | adjudicate
    server: str = ""  # server URL, without credentials
    ls_project_id: int
    ls_task_id: Optional[int] = None
    state: str = "open"  # open | decided | deleted | returned (invalid: a new task went back to its assignee)
    decision: Optional[str] = None
    # The one person whose judgment this task takes (`[label_studio] annotators`; None: a shared project of old)
    assignee: Optional[str] = Field(default=None, index=True)
    pushed_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class Judgment(SQLModel, table=True):
    """One annotator's judgment of one task."""

    __tablename__ = "judgments"
    __table_args__ = (UniqueConstraint("task_id", "annotator"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    task_id: int = Field(foreign_key="annotation_tasks.id", index=True)
    annotator: str
    ls_annotation_id: Optional[int] = None
    related: Optional[bool] = None
    answer_correct: Optional[bool] = None
    corrected_answer: Optional[str] = None
    flags: Optional[list] = json_column()
    comment: Optional[str] = Field(default=None, sa_column=Column(Text))
    decision: Optional[str] = None  # adjudicator's decision
    raw: Optional[dict] = json_column()
    annotated_at: Optional[datetime] = None
    updated_at: datetime = Field(default_factory=utcnow)
    # The separation check of its server that covers it (cftools.annotate.separation); None: never checked
    separation_check_id: Optional[int] = Field(default=None, index=True)


class AgreementStat(SQLModel, table=True):
    """Inter-annotator agreement for one question of one project, as last computed."""

    __tablename__ = "agreement_stats"
    __table_args__ = (UniqueConstraint("project", "question"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    project: str
    question: str
    n_pairs: int
    percent_agreement: Optional[float] = None
    cohen_kappa: Optional[float] = None
    computed_at: datetime = Field(default_factory=utcnow)


class Release(SQLModel, table=True):
    __tablename__ = "releases"
    __table_args__ = (UniqueConstraint("name", "version", "format"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    name: str
    version: str
    format: str = "native"
    path: str = Field(sa_column=Column(Text, nullable=False))
    n_items: int = 0
    manifest_sha256: Optional[str] = None
    created_at: datetime = Field(default_factory=utcnow)


class EvalRun(SQLModel, table=True):
    __tablename__ = "eval_runs"
    id: Optional[int] = Field(default=None, primary_key=True)
    release: str = Field(sa_column=Column(Text, nullable=False))
    model_spec: str
    mode: str
    config: Optional[dict] = json_column()
    out_dir: str = Field(sa_column=Column(Text, nullable=False))
    summary: Optional[dict] = json_column()
    created_at: datetime = Field(default_factory=utcnow)


class Prediction(SQLModel, table=True):
    __tablename__ = "predictions"
    __table_args__ = (UniqueConstraint("run_id", "item_key", "which"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="eval_runs.id", index=True)
    item_key: str
    which: str  # original | counterfactual | option question name
    raw: Optional[str] = Field(default=None, sa_column=Column(Text))
    parsed: Optional[str] = None
    scores: Optional[dict] = json_column()
    correct: Optional[bool] = None
    created_at: datetime = Field(default_factory=utcnow)


class IngestRun(SQLModel, table=True):
    """One ingest of one input file: what it added, so a re-ingest can say it added nothing."""

    __tablename__ = "ingest_runs"
    id: Optional[int] = Field(default=None, primary_key=True)
    format: str
    path: str = Field(sa_column=Column(Text, nullable=False))
    file_sha256: Optional[str] = None
    n_records: int = 0
    n_sources_added: int = 0
    n_items_added: int = 0
    n_images_added: int = 0
    n_skipped: int = 0
    dataset: Optional[str] = None
    licence: Optional[str] = None  # the licence this ingest recorded for its dataset
    created_at: datetime = Field(default_factory=utcnow)


class DatasetLicence(SQLModel, table=True):
    """The licence of a source dataset, as its ingest stated it ("unknown" when none was given): the release
    card lists these for the datasets a release draws on, and export will not stamp one licence over others."""

    __tablename__ = "dataset_licences"
    dataset: str = Field(primary_key=True)
    licence: str
    updated_at: datetime = Field(default_factory=utcnow)


class WorkClaim(SQLModel, table=True):
    """A unit of generation work that one worker holds at a time (a lease that lapses when the worker dies), so
    many `cftools generate` processes on one store never make the same thing twice."""

    __tablename__ = "work_claims"
    __table_args__ = (UniqueConstraint("generator", "key"),)
    id: Optional[int] = Field(default=None, primary_key=True)
    generator: str = Field(index=True)
    key: str  # what the job makes (an item key, "context:<item key>", ...)
    state: str = "free"  # free | leased | done | failed
    worker: Optional[str] = None
    lease_expires: Optional[datetime] = None
    finished_at: Optional[datetime] = None


Index("ix_items_kind_group_status", Item.kind, Item.group, Item.status)


class LLMBatch(SQLModel, table=True):
    """One request file sent to an OpenAI-compatible Batches API (`generate … --batch-api`), kept until its results
    are stored, so a killed run collects its batch instead of submitting the requests again."""

    __tablename__ = "llm_batches"
    id: Optional[int] = Field(default=None, primary_key=True)
    generator: str = Field(index=True)
    backend: str  # the backend's cache id (endpoint): results are cached under its keys
    model: str
    input_file_id: str
    batch_id: Optional[str] = Field(default=None, index=True)  # None until the create call has answered
    state: str = Field(default="submitted", index=True)  # submitted | finished | collected
    status: Optional[str] = None  # the API's own: validating, in_progress, completed, expired, cancelled, ...
    requests: int = 0
    completed: int = 0
    failed: int = 0
    completion_window: str = "24h"
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


# An item that exists only to be shown as a control (from a lead's `controls` file): never pushed, never released.
CONTROL = "control"


class ControlItem(SQLModel, table=True):
    """An item with a settled answer that is mixed into people's queues to measure them (`annotate push`): an
    adjudicated item, or one of the lead's `controls` file. `shown_answer` is the proposed answer its task shows
    (an item accepted with a correction shows the answer that was corrected); `expected_ok` whether that answer,
    for that question and image, is right."""

    __tablename__ = "control_items"
    id: Optional[int] = Field(default=None, primary_key=True)
    item_id: int = Field(foreign_key="items.id", index=True, unique=True)
    kind: str = Field(index=True)
    origin: str  # adjudicated | file
    shown_answer: Optional[str] = Field(default=None, sa_column=Column(Text))
    expected_ok: bool
    settled: Optional[dict] = json_column()  # related, answer_correct, corrected_answer as settled
    created_at: datetime = Field(default_factory=utcnow)


class TaskOutcome(SQLModel, table=True):
    """What one control or audit task showed about its person (`annotate pull`): their judgment against the
    settled answer (a control) or their verdict on a released item (an audit). Never counts toward the item."""

    __tablename__ = "task_outcomes"
    id: Optional[int] = Field(default=None, primary_key=True)
    task_id: int = Field(foreign_key="annotation_tasks.id", index=True, unique=True)
    item_id: int = Field(foreign_key="items.id", index=True)
    kind: str = Field(index=True)
    role: str = Field(index=True)  # control | audit
    person: str = Field(index=True)
    expected_ok: Optional[bool] = None  # control: the settled verdict on the shown answer
    given_ok: bool  # the person's verdict: the question is about the image and the shown answer is right
    correct: Optional[bool] = None  # control: given_ok == expected_ok
    lead_time: Optional[float] = None  # seconds (Label Studio's lead_time)
    judged_at: Optional[datetime] = None
    updated_at: datetime = Field(default_factory=utcnow)


class PersonPause(SQLModel, table=True):
    """A person `annotate push` gives no new work (their control accuracy fell wholly below `[annotate]
    min_accuracy`), until `annotate resume`: who, when, why, and who resumed them."""

    __tablename__ = "person_pauses"
    id: Optional[int] = Field(default=None, primary_key=True)
    person: str = Field(index=True)
    paused_at: datetime = Field(default_factory=utcnow)
    paused_by: str = "annotate push"
    reason: str = Field(sa_column=Column(Text, nullable=False))
    detail: Optional[dict] = json_column()
    resumed_at: Optional[datetime] = None
    resumed_by: Optional[str] = None


class SeparationCheck(SQLModel, table=True):
    """What cftools found, on one person's own server, about whether that server is theirs alone (its users, which
    other tokens it accepts, what its document root exposes): when, how, and the result with its reason."""

    __tablename__ = "separation_checks"
    id: Optional[int] = Field(default=None, primary_key=True)
    server: str = Field(index=True)  # server URL, without credentials
    person: str = Field(index=True)
    checked_at: datetime = Field(default_factory=utcnow)
    during: str  # serve | push | pull
    method: str = Field(sa_column=Column(Text, nullable=False))  # what was asked, of whom
    ok: bool
    problems: Optional[list] = json_column()  # codes of what failed (no personal data), [] when ok
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))  # in words, naming people (local only)
