"""`generate pairs`: LLM drafts of CFMM pairs from an image's source questions (VQAv2, C-VQA, a table).

Two LLM tasks on the shared runner (`cftools.generate.llm_task`: cache, retries, provenance, resume):

1. pick (`prompts/cfmm/pick.j2`): from the image's source questions and answers, the LLM picks a type among the
   allowed ones, most wanted first (or "none": the image is skipped and counted);
2. draft (`prompts/cfmm/<type>.j2`, one per type, with checked in-context examples): the basic question, its
   counterfactual version with an if-condition, two options each and the correct ones.

Each reply follows an output schema (`TypePick`, built per image from its allowed types, and `PairDraft`, whose
correct options are given by number so that an answer is one of its options by construction); the embedded
model decodes under it, a server gets it as `response_format`.

The drafter sees no image, so every draft is marked `needs_image_check`. Item keys are `pairs:<image id>:<slot>`
(slot 1..--per-image), so a rerun drafts only the slots still empty.

The type quota (`--types count=0.3,color=0.2,...`, else `[cfmm] types` in cftools.toml, else the paper's
shares) steers drafting: a type whose share of the kind's items (existing + this run) is reached is no longer
offered, and drafts beyond a type's target are left for a later run (counted as over quota).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, create_model
from sqlalchemy import func, select
from sqlmodel import Session

from cftools.answers import normalize_answer
from cftools.errors import CftoolsError, Hint
from cftools.generate.claims import selection_start
from cftools.generate.rederive import RederiveSpec
from cftools.generate.redo import RedoCase, RedoSpec
from cftools.generate.llm_task import (LLMJob, LLMRun, LLMTask, ParseError, insert_items,
                                       run_llm_task)
from cftools.kinds.cfmm.model import NO_TYPE, PAPER_COUNTS, TYPES
from cftools.llm import Backend, text_message
from cftools.llm.base import DEFAULT_PARAMS
from cftools.llm.prompts import PromptTemplate, load_prompt, variant_folder
from cftools.llm.structured import OutputSchema, Reply
from cftools.models import DRAFT, Item, SourceQuestion, utcnow
from cftools.store import Store

TYPES_HINT = Hint("{types}: {message}", types="--types")  # the quota's option, then what is wrong

GENERATOR = "pairs"
PICK = "pairs-pick"
LOCAL_MAX_TOKENS = 220
PICK_MAX_TOKENS = 16
Option = Annotated[str, Field(min_length=1, max_length=60)]


class PairDraft(Reply):
    """A basic question and its counterfactual version, two options each; the correct option by its number."""

    basic_question: str = Field(min_length=1, max_length=160, description="Answerable from the facts")
    basic_options: list[Option] = Field(min_length=2, max_length=2, description="Two options, one correct")
    basic_correct: Literal[1, 2] = Field(description="The number of the correct basic option")
    cf_question: str = Field(min_length=1, max_length=200,
                             description="The basic question with an if-condition that changes the world")
    cf_options: list[Option] = Field(min_length=2, max_length=2, description="Two options, one correct")
    cf_correct: Literal[1, 2] = Field(description="The number of the correct counterfactual option")


DRAFT_SCHEMA = OutputSchema("cfmm_pair", PairDraft)


def pick_schema(allowed: list[str]) -> OutputSchema:
    """The type of an image's pair among ALLOWED (its own enum, so a constrained model cannot pick another), or
    "none"."""
    choices = tuple(allowed) + (NO_TYPE,)
    return OutputSchema("cfmm_type_pick", create_model("TypePick", __base__=Reply,
                                                       type=(Literal[choices], Field(description="The pair's type"))))


# -- the quota -------------------------------------------------------------------------------------------------

def paper_quota() -> dict[str, float]:
    total = sum(PAPER_COUNTS.values())
    return {t: PAPER_COUNTS[t] / total for t in TYPES}


def parse_quota(text: Optional[str]) -> dict[str, float]:
    """'count,color' (equal shares) or 'count=0.3,color=0.2' (shares, normalised to sum 1); None: the paper's."""
    if not text or not str(text).strip():
        return paper_quota()
    shares: dict[str, float] = {}
    for part in str(text).split(","):
        name, _, value = part.strip().partition("=")
        name = name.strip()
        if name not in TYPES:
            raise CftoolsError(f"unknown type {name!r}; use some of {', '.join(TYPES)}", hint=TYPES_HINT)
        try:
            share = float(value) if value.strip() else 1.0
        except ValueError:
            raise CftoolsError(f"{part.strip()!r} is not TYPE=SHARE (a number)", hint=TYPES_HINT) from None
        if not math.isfinite(share) or share < 0:
            raise CftoolsError(f"the share of {name} is {value.strip()}: a share is a number >= 0", hint=TYPES_HINT)
        shares[name] = share
    total = sum(shares.values())
    if total <= 0:
        raise CftoolsError("the shares add up to 0", hint=TYPES_HINT)
    return {t: shares.get(t, 0.0) / total for t in TYPES}


def quota_from_config(workspace: Any) -> dict[str, float]:
    """`[cfmm] types` of the workspace (a string like --types), else the paper's shares."""
    section = workspace.section("cfmm") if workspace is not None else {}
    return parse_quota(section.get("types"))


def type_status_counts(store: Store) -> dict[str, dict[str, int]]:
    """CFMM items per type and status."""
    with store.session() as session:
        rows = session.execute(select(Item.group, Item.status, func.count()).where(Item.kind == "cfmm")
                               .group_by(Item.group, Item.status)).all()
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    for group, status, n in rows:
        counts[group][status] = n
    return dict(counts)


def type_targets(existing: Counter, planned: int, quota: dict[str, float]) -> dict[str, int]:
    """How many more drafts each type may get: its share of (existing + planned) minus what it has."""
    total = sum(existing.values()) + planned
    return {t: max(0, math.ceil(quota.get(t, 0.0) * total) - existing.get(t, 0)) for t in TYPES}


# -- selecting work --------------------------------------------------------------------------------------------

@dataclass
class Slot:
    """One pair to draft for one image: its sources (questions with answers) and the types it already has."""

    image_id: int
    slot: int
    sources: list[dict[str, Any]]
    taken: list[str] = field(default_factory=list)
    variant: Optional[str] = None  # the prompt variant drafting it: each variant has its own slots

    @property
    def key(self) -> str:
        return slot_key(self.image_id, self.slot, self.variant)


def slot_key(image_id: int, slot: int, variant: Optional[str] = None) -> str:
    return f"{GENERATOR}:{image_id}:{slot}" + (f":{variant}" if variant else "")


def select_slots(store: Store, per_image: int = 1, limit: Optional[int] = None,
                 skip_images: frozenset[int] = frozenset(), variant: Optional[str] = None) -> list[Slot]:
    """Empty slots of images that have answered source questions, image by image (lowest id first); SKIP_IMAGES
    (those the LLM found no type for in this run) are left out. A prompt VARIANT's slots are its own."""
    with store.session() as session:
        rows = session.execute(select(SourceQuestion.id, SourceQuestion.image_id, SourceQuestion.question,
                                      SourceQuestion.answer)
                               .where(SourceQuestion.image_id.is_not(None), SourceQuestion.answer.is_not(None))
                               .order_by(SourceQuestion.image_id, SourceQuestion.id)).all()
        drafted = {key: group for key, group in session.execute(
            select(Item.key, Item.group).where(Item.key.like(f"{GENERATOR}:%")))}
    by_image: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for source_id, image_id, question, answer in rows:
        by_image[image_id].append({"id": source_id, "question": question, "answer": answer})
    slots: list[Slot] = []
    for image_id, sources in by_image.items():
        if image_id in skip_images:
            continue
        taken = [drafted[slot_key(image_id, n, variant)] for n in range(1, per_image + 1)
                 if slot_key(image_id, n, variant) in drafted]
        for n in range(1, per_image + 1):
            if slot_key(image_id, n, variant) not in drafted:
                slots.append(Slot(image_id, n, sources[:8], list(taken), variant))
                break  # one slot of an image per run round: the next knows what this one took
        if limit is not None and len(slots) >= limit:
            break
    return slots


# -- the tasks -------------------------------------------------------------------------------------------------

class PickTask(LLMTask):
    """Step 1: the type of an image's pair; stores nothing but the generation record."""

    generator = PICK

    def __init__(self, template: PromptTemplate) -> None:
        self.template = template

    def schema_for(self, job: LLMJob) -> OutputSchema:
        return pick_schema(job.context["allowed"])

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return {"type": reply.type}

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        job.context["picked"] = parsed["type"]
        return 0


class DraftTask(LLMTask):
    """Step 2: the pair of one type, as a draft item that needs an image check."""

    generator = GENERATOR
    schema = DRAFT_SCHEMA

    def __init__(self, pair_type: str, template: PromptTemplate) -> None:
        self.pair_type, self.template = pair_type, template

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return draft_from_reply(reply)

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        return insert_items(store, session, [draft_row(job.context["slot"], self.pair_type, parsed, generation_id,
                                                       attempt)], "generate")


def draft_from_reply(reply: PairDraft) -> dict[str, Any]:
    """The parsed draft: questions, options, and the correct options' texts; two options that read the same are
    refused."""
    parsed: dict[str, Any] = {"basic_question": " ".join(reply.basic_question.split()),
                              "cf_question": " ".join(reply.cf_question.split())}
    for which, what in (("basic", "basic"), ("cf", "counterfactual")):
        options = [" ".join(o.split()) for o in getattr(reply, f"{which}_options")]
        if normalize_answer(options[0]) == normalize_answer(options[1]):
            raise ParseError(f"the {what} question's two options are the same: {options[0]!r}")
        parsed[f"{which}_options"] = options
        parsed[f"{which}_answer"] = options[getattr(reply, f"{which}_correct") - 1]
    return parsed


def draft_row(slot: Slot, pair_type: str, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    now = utcnow()
    return {
        "key": slot.key, "kind": "cfmm", "group": pair_type, "source_id": slot.sources[0]["id"],
        "question": parsed["cf_question"], "answer": parsed["cf_answer"], "status": DRAFT, "origin": "generated",
        "generation_id": generation_id, "created_at": now, "updated_at": now,
        "data": {"type": pair_type, "basic_question": parsed["basic_question"], "basic_answer": parsed["basic_answer"],
                 "options": {"original": parsed["basic_options"], "counterfactual": parsed["cf_options"]},
                 "needs_image_check": True, "attempt": attempt},
    }


# -- redoing a rejected pair (`--redo`) ---------------------------------------------------------------------------

def redo_type(case: RedoCase) -> str:
    return (case.item.data or {}).get("type") or case.item.group


def can_redo(case: RedoCase) -> bool:
    """A pair of a known type with its basic question and the image's facts to draft from."""
    return redo_type(case) in TYPES and bool((case.item.data or {}).get("basic_question")) and bool(case.image_sources)


def redo_prompt(case: RedoCase, workspace_root: Optional[Path]) -> str:
    """The type's own drafting prompt (the workspace's copy when it has one) for the item's image."""
    template = load_prompt(f"cfmm/{redo_type(case)}.j2", None, workspace_root)
    return template.render(sources=case.image_sources, type=redo_type(case))


def rejected_pair(case: RedoCase) -> dict[str, Any]:
    """The rejected pair in the reply's form (options and the correct ones by number)."""
    data = case.item.data or {}
    options = data.get("options") or {}
    basic, counterfactual = list(options.get("original") or []), list(options.get("counterfactual") or [])
    answer = case.item.proposed_answer if case.item.proposed_answer is not None else case.item.answer
    return {"basic_question": data.get("basic_question"), "basic_options": basic,
            "basic_correct": option_number(data.get("basic_answer"), basic), "cf_question": case.item.question,
            "cf_options": counterfactual, "cf_correct": option_number(answer, counterfactual)}


def option_number(answer: Any, options: list[str]) -> Optional[int]:
    return options.index(answer) + 1 if answer in options else None


def redone_pair(case: RedoCase, parsed: dict[str, Any], generation_id: int, attempt: int) -> dict[str, Any]:
    # a slot only names the key and the first source, which a redo has of its own
    new = draft_row(Slot(0, 0, [{"id": case.item.source_id}]), redo_type(case), parsed, generation_id, attempt)
    return {k: new[k] for k in ("question", "answer", "data")}


CFMM_REDO = RedoSpec(kind="cfmm", generator=GENERATOR, template="cfmm/redo.j2", schema=lambda case: DRAFT_SCHEMA,
                     from_reply=draft_from_reply, prompt=redo_prompt, draft=rejected_pair, row=redone_pair,
                     eligible=can_redo)


# -- re-deriving the answer (answer_disputed) --------------------------------------------------------------------

def rederive_variables(item: Any, source: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    data = item.data or {}
    options = (data.get("options") or {}).get("counterfactual")
    if not data.get("basic_question") or not options or not item.question:
        return None
    return {"original_question": data["basic_question"], "original_answer": data.get("basic_answer"),
            "question": item.question, "options": list(options)}


def rederive_answer_type(item: Any) -> Any:
    """One of the counterfactual options, as written."""
    return Literal[tuple((item.data or {}).get("options", {}).get("counterfactual") or [item.answer])]


CFMM_REDERIVE = RederiveSpec("cfmm", rederive_variables, rederive_answer_type)


# -- the run ---------------------------------------------------------------------------------------------------

@dataclass
class PairsReport:
    backend: str = ""
    model: str = ""
    selected: int = 0
    picked: dict[str, int] = field(default_factory=dict)
    no_type: int = 0
    over_quota: int = 0
    items_created: int = 0
    parse_failures: int = 0
    call_errors: int = 0
    cached: int = 0
    errors: list[str] = field(default_factory=list)
    quota: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    done: int = 0  # requests (every step) that gave a parsed reply, from the model or the cache
    failed: int = 0  # requests that gave none (replies that did not parse, call errors)

    def add(self, report: Any) -> None:
        self.done += report.stats.done
        self.failed += report.stats.failed
        self.items_created += report.items_created
        self.parse_failures += report.parse_failures
        self.call_errors += report.call_errors
        self.cached += report.stats.cached
        self.errors += report.stats.errors[:5]
        self.interrupted = self.interrupted or report.stats.interrupted

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def llm_params(config: dict[str, Any], backend: Optional[str] = None) -> dict[str, Any]:
    params = dict(DEFAULT_PARAMS)
    if (backend or config.get("backend") or "local") == "local":
        params["max_tokens"] = LOCAL_MAX_TOKENS
    for name in ("temperature", "max_tokens", "top_p"):
        if config.get(name) is not None:
            params[name] = config[name]
    return params


def existing_types(store: Store) -> Counter:
    return Counter({t: sum(per.values()) for t, per in type_status_counts(store).items()})


def generate_pairs(store: Store, backend: Backend, *, run: LLMRun = LLMRun(),
                   quota: Optional[dict[str, float]] = None, per_image: int = 1,
                   limit: Optional[int] = None) -> PairsReport:
    """Draft up to LIMIT pairs (at most PER_IMAGE per image), steered by QUOTA, as RUN says; returns what
    happened. A prompt variant words the drafts (its folder holds a template per type); the type is picked with
    the default pick.j2, so both variants of a slot get the same type."""
    quota = quota or paper_quota()
    run = run.or_params(llm_params({}, backend.name))
    workspace_root = run.workspace_root
    variant = variant_folder("cfmm", run.prompt_variant, workspace_root)[0] if run.prompt_variant else None
    for pair_type in (t for t, share in quota.items() if share > 0 and variant):  # a missing one: before any call
        load_prompt(f"cfmm/{pair_type}.j2", None, workspace_root, run.prompt_variant)
    report = PairsReport(backend=backend.name, model=backend.model, quota=quota)
    picks: Counter = Counter()
    no_type_images: set[int] = set()
    pick_template = load_prompt("cfmm/pick.j2", None, workspace_root)
    for _ in range(per_image):  # one round per slot: a later slot knows the types the earlier ones took
        left = None if limit is None else limit - report.selected
        if left is not None and left <= 0:
            break
        selected_at = selection_start(store)  # before the selection: what another worker finished since stays done
        slots = select_slots(store, per_image, left, frozenset(no_type_images), variant)
        if not slots:
            break
        report.selected += len(slots)
        remaining = type_targets(existing_types(store), len(slots), quota)
        jobs = []
        offered: Counter = Counter()  # the types earlier slots of this round were offered first
        for slot in slots:
            # most wanted first, counting what the slots before this one will likely take (a model tends to take
            # the first type offered), so a round's slots spread over the quota instead of all asking for one type
            allowed = sorted((t for t in TYPES if remaining[t] > 0 and t not in slot.taken),
                             key=lambda t: (-(remaining[t] - offered[t]), TYPES.index(t)))
            if allowed:
                offered[allowed[0]] += 1
            if not allowed:
                report.over_quota += 1
                continue
            prompt = pick_template.render(sources=slot.sources, types=allowed, taken=slot.taken)
            jobs.append(LLMJob(label=f"image {slot.image_id} slot {slot.slot}", messages=[text_message(prompt)],
                               source_id=slot.sources[0]["id"], context={"slot": slot, "allowed": allowed}))
        report.add(run_llm_task(store, backend, PickTask(pick_template), jobs,
                                run=replace(run, params={**run.params, "max_tokens": PICK_MAX_TOKENS},
                                            prompt_variant=None), selected_at=selected_at))
        by_type: dict[str, list[LLMJob]] = defaultdict(list)
        for job in jobs:
            picked = job.context.get("picked")
            if picked == NO_TYPE:
                report.no_type += 1
                no_type_images.add(job.context["slot"].image_id)
            elif picked:
                picks[picked] += 1
                if len(by_type[picked]) >= remaining[picked]:
                    report.over_quota += 1
                    continue
                by_type[picked].append(job)
        for pair_type, picked_jobs in by_type.items():
            template = load_prompt(f"cfmm/{pair_type}.j2", None, workspace_root, run.prompt_variant)
            drafts = [LLMJob(label=job.label, key=job.context["slot"].key, source_id=job.source_id, group=pair_type,
                             context=job.context,
                             messages=[text_message(template.render(sources=job.context["slot"].sources,
                                                                    type=pair_type))])
                      for job in picked_jobs]
            report.add(run_llm_task(store, backend, DraftTask(pair_type, template), drafts, run=run,
                                    group=pair_type, selected_at=selected_at))
        if report.interrupted:
            break
    report.picked = dict(picks)
    return report
