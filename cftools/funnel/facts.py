"""One row of facts per item and the cost of every model call, read from the store for `cftools report`.

The funnel's stages of an item (each a yes or no; an item is counted in every stage it reached):

- `ingested`: every item (each comes from an ingested source question or was ingested as an item), control items
  (`annotate controls`: they only measure people) left out of every stage;
- `drafted`: a generator made it (origin `generated`, or a recorded generation);
- `flagged`: an automatic check flagged it (per check code too); `waived`: a person waived one of its flags;
- `pushed`: it went to people (a verification, adjudication or a kind's own task; never a control, audit or
  measuring task, which measure their person);
- `accepted` / `corrected` / `rejected`: its status now (accepted as drafted, accepted with the people's corrected
  answer, rejected); `adjudicated`: an adjudication decided it (also counted in the outcome it gave);
- `released`: it is in a native release the store recorded (read from that release's records.jsonl).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Optional

from sqlalchemy import func, select

from cftools.annotate.quality import counts_toward_item
from cftools.boundary import public_name
from cftools.flags import WAIVED
from cftools.judgments import ADJUDICATE, MEASURING
from cftools.llm.cost import WORST_CASE_COST, Price, price_for
from cftools.models import (ACCEPTED, CONTROL, REJECTED, AnnotationTask, CheckFlag, Generation, Image, Item, ItemEvent,
                            Judgment, Release, SourceQuestion)
from cftools.progress import ProgressCallback, no_progress

STAGES = ("ingested", "drafted", "flagged", "waived", "pushed", "accepted", "corrected", "rejected", "adjudicated",
          "released")
STAGE_MEANINGS = {
    "ingested": "every item (each comes from an ingested source question or was ingested as an item); control "
                "items only measure people and are in no stage",
    "drafted": "made by a generator (origin generated, or a recorded generation)",
    "flagged": "flagged by an automatic check (flagged_by_code: per check code)",
    "waived": "a person waived one of its flags",
    "pushed": "sent to people (verification, adjudication or a kind's own task; never a control, audit or "
              "measuring task)",
    "accepted": "accepted as drafted (status accepted, answer not corrected)",
    "corrected": "accepted with the people's corrected answer",
    "rejected": "rejected (status rejected)",
    "adjudicated": "decided by an adjudication (also counted in the outcome it gave)",
    "released": "in a native release the store recorded",
}
NO_GENERATOR = "(ingested: no generator)"
NO_EDITS = "(no edited images)"
# where an item's edit backend is recorded: its edit candidates' provenance (`cftools.generate.edits`)
EDIT_CANDIDATES = "edit_candidates"
# what the report reads of a call (never its prompt or output, which may be long)
GENERATION_COLUMNS = (Generation.id, Generation.generator, Generation.backend, Generation.model,
                      Generation.template_name, Generation.template_hash, Generation.prompt_variant,
                      Generation.source_id, Generation.group, Generation.cached, Generation.prompt_tokens,
                      Generation.completion_tokens, Generation.params[WORST_CASE_COST].as_float().label("worst"),
                      Generation.params["batch_id"].as_string().label("batch_id"))
NATIVE = "native"
RECORDS = "records.jsonl"


@dataclass(frozen=True)
class GeneratorKey:
    """What made a draft: the generator, its backend and model, the template (name and hash) and prompt variant."""

    generator: str
    backend: str
    model: str
    template_name: Optional[str]
    template_hash: Optional[str]
    prompt_variant: Optional[str]

    @property
    def label(self) -> str:
        template = f"{self.template_name or 'no template'}@{(self.template_hash or '')[:12] or '-'}"
        variant = f" · variant {self.prompt_variant}" if self.prompt_variant else ""
        return f"{self.generator} · {self.backend}:{self.model} · {template}{variant}"

    def as_dict(self) -> dict[str, Any]:
        return {"generator": self.generator, "backend": self.backend, "model": self.model,
                "template_name": self.template_name, "template_hash": self.template_hash,
                "prompt_variant": self.prompt_variant}


def generator_key(generation: Any) -> GeneratorKey:
    """A generation row's key; a model given as a local folder is named by the folder's name (nothing local leaves)."""
    return GeneratorKey(generation.generator, generation.backend, public_name(generation.model) or "",
                        generation.template_name, generation.template_hash, generation.prompt_variant)


@dataclass(frozen=True)
class Verdict:
    """One judgment that counts toward its item: who, on which task, what they said, how long it took."""

    person: str
    purpose: str
    related: Optional[bool]
    answer_correct: Optional[bool]
    corrected_answer: Optional[str]
    flags: tuple[str, ...]
    comment: Optional[str]
    decision: Optional[str]
    lead_time: Optional[float]


@dataclass
class ItemFacts:
    id: int
    key: str
    kind: str
    group: str
    status: str
    generator: str  # GeneratorKey.label, or NO_GENERATOR
    stages: set[str]
    question: str
    answer: Optional[str]
    proposed_answer: Optional[str]
    source_question: Optional[str] = None
    image_path: Optional[str] = None  # the image file on this machine (the page refers to it relatively)
    flags: dict[str, str] = field(default_factory=dict)  # code -> reason
    waived: set[str] = field(default_factory=set)
    decided_at: Optional[datetime] = None
    redo_of: Optional[int] = None
    edit_backend: str = NO_EDITS  # backend:model of its edited images
    judgments: list[Verdict] = field(default_factory=list)

    @property
    def group_row(self) -> str:
        return f"{self.kind} / {self.group}"

    @property
    def people_seconds(self) -> float:
        return sum(j.lead_time or 0.0 for j in self.judgments)


@dataclass
class CallCost:
    """The calls of one generator key on one (kind / group) row: tokens and money (None: a model without a price)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    money: Optional[float] = 0.0

    def add(self, price: Optional[Price], generation: Any) -> None:
        self.calls += 1
        if generation.cached:  # a cache hit is not paid for
            return
        prompt, output = generation.prompt_tokens or 0, generation.completion_tokens or 0
        self.prompt_tokens += prompt
        self.completion_tokens += output
        if price is None or self.money is None:
            self.money = None
            return
        worst = generation.worst
        self.money += float(worst) if worst is not None else price.cost(prompt, output, bool(generation.batch_id))

    def merge(self, other: "CallCost") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.money = None if self.money is None or other.money is None else self.money + other.money


@dataclass
class StoreFacts:
    items: list[ItemFacts]
    generators: dict[str, GeneratorKey]  # label -> key
    costs: dict[tuple[str, str], CallCost]  # (group row or "(unattributed)", generator label) -> calls
    source_questions: int = 0
    sources_drafted: int = 0


UNATTRIBUTED = "(unattributed)"


def read_facts(store: Any, llm_config: dict[str, Any], progress: ProgressCallback = no_progress) -> StoreFacts:
    """Every item's facts and every call's cost, from the store (and the recorded native releases' record ids)."""
    with store.session() as session:
        progress("items", 0, None)
        generations = {g.id: g for g in session.execute(select(*GENERATION_COLUMNS))}
        keys = {gid: generator_key(g) for gid, g in generations.items()}
        items = item_rows(session, keys)
        progress("items", len(items), len(items))
        by_id = {item.id: item for item in items}
        progress("flags and tasks", 0, None)
        add_flags(session, by_id)
        add_tasks(session, by_id)
        add_decision_times(session, by_id)
        progress("judgments", 0, None)
        add_judgments(session, by_id)
        add_released(session, items)
        costs = call_costs(session, generations, keys, items, llm_config)
        sources = session.execute(select(func.count()).select_from(SourceQuestion)).scalar_one()
    drafted_from = {item.source for item in items if "drafted" in item.stages and item.source}
    generators = {key.label: key for key in keys.values()}
    return StoreFacts([item.facts for item in items], generators, costs, sources, len(drafted_from))


@dataclass
class _Reading:
    """An item while its facts are gathered (its source id and generation id are not part of the facts)."""

    facts: ItemFacts
    source: Optional[int]
    generation_id: Optional[int]

    @property
    def id(self) -> int:
        return self.facts.id

    @property
    def stages(self) -> set[str]:
        return self.facts.stages


def item_rows(session: Any, keys: dict[int, GeneratorKey]) -> list[Any]:
    columns = (Item.id, Item.key, Item.kind, Item.group, Item.status, Item.origin, Item.generation_id, Item.source_id,
               Item.question, Item.answer, Item.proposed_answer, Item.data[WAIVED].label("waived"), Item.redo_of,
               Item.data[EDIT_CANDIDATES].label("candidates"), SourceQuestion.question,
               Image.path)
    query = (select(*columns).outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id)
             .outerjoin(Image, Image.id == SourceQuestion.image_id)
             .where(Item.status != CONTROL)  # a control item only measures people: never drafted, decided or released
             .order_by(Item.id))
    rows = []
    for (item_id, key, kind, group, status, origin, generation_id, source_id, question, answer, proposed, data,
         redo_of, candidates, source_question, image_path) in session.execute(query):
        stages = {"ingested"}
        if origin == "generated" or generation_id is not None:
            stages.add("drafted")
        corrected = proposed is not None and proposed != answer
        if status == ACCEPTED:
            stages.add("corrected" if corrected else "accepted")
        elif status == REJECTED:
            stages.add("rejected")
        waived = set(data) if isinstance(data, dict) else set()  # only its waivers are read, not the whole data
        if waived:
            stages.add("waived")
        key_of = keys.get(generation_id) if generation_id else None
        facts = ItemFacts(item_id, key, kind, group, status, key_of.label if key_of else NO_GENERATOR, stages,
                          question, answer, proposed, source_question, image_path,
                          waived=waived, redo_of=redo_of)
        facts.edit_backend = edit_backend_of(candidates) or NO_EDITS
        rows.append(_Reading(facts, source_id, generation_id))
    return rows


def edit_backend_of(candidates: Any) -> Optional[str]:
    """backend:model of an item's edited images: its lowest-numbered candidate's provenance (only the candidates made
    are stored: when the first one failed there is no "0")."""
    if not isinstance(candidates, dict) or not candidates:
        return None
    first = candidates[min(candidates, key=lambda k: int(k) if str(k).isdigit() else float("inf"))]
    provenance = first.get("provenance") if isinstance(first, dict) else None
    backend = provenance.get("backend") if isinstance(provenance, dict) else None
    return f"{backend}:{public_name(provenance.get('model')) or '?'}" if backend else None


def add_flags(session: Any, by_id: dict[int, _Reading]) -> None:
    for item_id, code, reason in session.execute(select(CheckFlag.item_id, CheckFlag.code, CheckFlag.reason)):
        if item_id in by_id:
            by_id[item_id].facts.flags[code] = reason
            by_id[item_id].stages.add("flagged")


def add_tasks(session: Any, by_id: dict[int, _Reading]) -> None:
    query = select(AnnotationTask.item_id, AnnotationTask.purpose, AnnotationTask.state)
    for item_id, purpose, state in session.execute(query):
        item = by_id.get(item_id)
        if item is None or purpose in MEASURING:
            continue
        item.stages.add("pushed")
        if purpose == ADJUDICATE and state == "decided":
            item.stages.add("adjudicated")


def add_judgments(session: Any, by_id: dict[int, _Reading]) -> None:
    """The judgments that count (`cftools.annotate.quality.counts_toward_item`: a live task that judges its item, by
    its assignee), read as columns: a store of 100,000 items has some 200,000 of them."""
    query = (select(AnnotationTask.item_id, AnnotationTask.purpose, Judgment.annotator, Judgment.related,
                    Judgment.answer_correct, Judgment.corrected_answer, Judgment.flags, Judgment.comment,
                    Judgment.decision, Judgment.raw["lead_time"].as_float())
             .join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
             .where(*counts_toward_item())
             .order_by(Judgment.annotated_at, Judgment.ls_annotation_id, Judgment.id))
    for item_id, purpose, person, related, correct, corrected, flags, comment, decision, lead in session.execute(query):
        item = by_id.get(item_id)
        if item is not None:
            item.facts.judgments.append(Verdict(person, purpose, related, correct, corrected, tuple(flags or ()),
                                                comment, decision, lead))


def add_decision_times(session: Any, by_id: dict[int, _Reading]) -> None:
    """When each decided item was last decided (its last event into accepted or rejected)."""
    query = (select(ItemEvent.item_id, ItemEvent.created_at).where(ItemEvent.to_status.in_((ACCEPTED, REJECTED)))
             .order_by(ItemEvent.id))
    for item_id, when in session.execute(query):
        item = by_id.get(item_id)
        if item is not None and item.facts.status in (ACCEPTED, REJECTED):
            item.facts.decided_at = when


def add_released(session: Any, items: list[_Reading]) -> None:
    keys = released_keys(session.execute(select(Release.path).where(Release.format == NATIVE)).scalars())
    for item in items:
        if item.facts.key in keys:
            item.stages.add("released")


def released_keys(folders: Iterable[str]) -> set[str]:
    """The record ids (item keys) of the recorded native releases whose folder is still here (a damaged records file
    is one error naming it and the line)."""
    from cftools.release.layout import stream_records

    keys: set[str] = set()
    for folder in folders:
        path = Path(folder) / RECORDS
        if path.is_file():
            keys.update(str(record["id"]) for _, record in stream_records(path))
    return keys


def call_costs(session: Any, generations: dict[int, Any], keys: dict[int, GeneratorKey], items: list[_Reading],
               llm_config: dict[str, Any]) -> dict[tuple[str, str], CallCost]:
    """Every call's tokens and money, on the (kind / group) row of the items it drafted: a call no item points at
    (a retry, a failed parse) goes to the row of the items drafted by the same generator from the same source and
    group, else to UNATTRIBUTED."""
    row_of_generation = {item.generation_id: item.facts.group_row for item in items if item.generation_id}
    row_of_work: dict[tuple[str, Any, Any], str] = {}
    for item in items:
        generation = generations.get(item.generation_id) if item.generation_id else None
        if generation is not None:
            row_of_work[(generation.generator, generation.source_id, generation.group)] = item.facts.group_row
    prices: dict[str, Optional[Price]] = {}
    costs: dict[tuple[str, str], CallCost] = defaultdict(CallCost)
    for gid, generation in generations.items():
        if generation.model not in prices:
            prices[generation.model] = price_for(llm_config, generation.model)
        row = row_of_generation.get(gid) or row_of_work.get(
            (generation.generator, generation.source_id, generation.group), UNATTRIBUTED)
        costs[(row, keys[gid].label)].add(prices[generation.model], generation)
    return dict(costs)
