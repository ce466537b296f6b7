"""MuCR text generators: caption pairs drafted from seed causalities, and the contextual descriptions of a pair.

Both run on `cftools.generate.llm_task` (request cache, retries of unparseable outputs, provenance, resume), with
an output schema each (`ContextReply`, `CaptionPairs`): the reply is JSON of the schema, constrained on the
embedded model, `response_format` to a server.

- `draft_captions`: one call per seed line ("speeding -> pulled over") drafts a group of caption pairs (the
  group is the seed); each pair is a draft item like an ingested one, linked to its generation record.
- `write_context`: one call per pair returns both descriptions together, a shared part (appearance, clothing and
  colours, place, light, atmosphere) and what differs, so the two cannot drift apart. The item's data gets
  `context = {shared, cause, effect, cause_description, effect_description, generation_id, template}`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, create_model
from sqlalchemy import select
from sqlmodel import Session

from cftools.errors import InputError
from cftools.generate.claims import selection_start
from cftools.generate.llm_task import (LLMJob, LLMReport, LLMRun, LLMTask, insert_items, render,
                                      run_llm_task, text_params)
from cftools.kinds.mucr.model import CATEGORIES
from cftools.kinds.mucr.ingest import pair_item
from cftools.llm import Backend, text_message
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.structured import OutputSchema, Reply
from cftools.models import DRAFT, Item, ItemEvent, utcnow
from cftools.store import Store

KIND = "mucr"
MARKUP = re.compile(r"[*_`#]+")
SEED_ARROW = re.compile(r"\s*(?:->|→|=>|⇒)\s*")
CONTEXT_MAX_TOKENS = 220
CAPTIONS_MAX_TOKENS = 320
CAPTION_PAIR_TOKENS = 90  # what one pair of the captions schema's bounded length may take
LOCAL_CONTEXT_MAX_TOKENS = 240


# ------------------------------------------------------------------ output schemas
class ContextReply(Reply):
    """Both descriptions of a pair in one reply: the shared part first, so the two cannot drift apart."""

    shared: str = Field(min_length=1, max_length=300, description="Who or what is shown, where, light, atmosphere")
    cause: str = Field(min_length=1, max_length=200, description="What the cause image shows happening")
    effect: str = Field(min_length=1, max_length=200, description="What the effect image shows, with time cues")


class CaptionPair(Reply):
    cause: str = Field(min_length=1, max_length=120, description="The cause caption: one drawable sentence")
    effect: str = Field(min_length=1, max_length=120, description="The effect caption: one drawable sentence")
    category: Literal[CATEGORIES] = Field(description="Who the pair is about")  # type: ignore[valid-type]


def captions_schema(n: int) -> OutputSchema:
    """One to N caption pairs (N: the pairs asked for per seed)."""
    model = create_model("CaptionPairs", __base__=Reply,
                         pairs=(list[CaptionPair], Field(min_length=1, max_length=max(1, n))))
    return OutputSchema("mucr_caption_pairs", model)


CONTEXT_SCHEMA = OutputSchema("mucr_context", ContextReply)


def context_from_reply(reply: ContextReply) -> dict[str, str]:
    shared, cause, effect = clean(reply.shared), clean(reply.cause), clean(reply.effect)
    return {"shared": shared, "cause": cause, "effect": effect, "cause_description": f"{shared} {cause}".strip(),
            "effect_description": f"{shared} {effect}".strip()}


def clean(text: str) -> str:
    return re.sub(r"\s+", " ", MARKUP.sub("", text)).strip()


# ------------------------------------------------------------------ contextual descriptions
class ContextTask(LLMTask):
    generator = "context"
    schema = CONTEXT_SCHEMA

    def __init__(self, template: PromptTemplate) -> None:
        self.template = template

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return context_from_reply(reply)

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        item = session.get(Item, job.context["item_id"])
        if item is None or (item.data or {}).get("context"):
            return 0  # deleted meanwhile, or another run wrote it first
        item.data = {**(item.data or {}), "context": {**parsed, "generation_id": generation_id,
                                                       "template": self.template.name}}
        item.updated_at = utcnow()
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage="generate context", from_status=item.status,
                              to_status=item.status, detail={"generation_id": generation_id}))
        return 1


def pairs_without_context(store: Store, limit: Optional[int] = None, groups: tuple[str, ...] = ()) -> list[Item]:
    """Draft caption pairs whose data has no contextual descriptions yet (a rerun does only these)."""
    with store.session() as session:
        query = select(Item).where(Item.kind == KIND, Item.status == DRAFT).order_by(Item.id)
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        found = [i for i in session.execute(query).scalars() if not (i.data or {}).get("context")]
    return found[:limit] if limit is not None else found


def write_context(store: Store, backend: Backend, *, run: LLMRun = LLMRun(), limit: Optional[int] = None,
                  groups: tuple[str, ...] = ()) -> LLMReport:
    """Contextual descriptions for up to LIMIT caption pairs that have none, as RUN says."""
    template = load_prompt("mucr/context.j2", run.template_path, run.workspace_root)
    selected_at = selection_start(store)
    jobs = []
    for item in pairs_without_context(store, limit, groups):
        data = item.data or {}
        prompt = render(template, f"item {item.key}", cause=data.get("cause_caption"),
                        effect=data.get("effect_caption"), category=data.get("category"), style=data.get("style"))
        jobs.append(LLMJob(label=f"item {item.key}", messages=[text_message(prompt)], group=item.group,
                           key=f"context:{item.key}",
                           context={"item_id": item.id}))
    return run_llm_task(store, backend, ContextTask(template), jobs,
                        run=run.or_params(text_params({}, CONTEXT_MAX_TOKENS)), selected_at=selected_at)


# ------------------------------------------------------------------ caption pairs from seeds
def read_seeds(path: Path) -> list[tuple[int, str]]:
    """(line number, seed) for every non-empty line of the seeds file; a line without an arrow is an error."""
    seeds = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read the seeds file: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(SEED_ARROW.split(line.strip())) != 2:
            raise InputError(path, "a seed is one causality written 'cause -> effect'", f"line {number}")
        seeds.append((number, line.strip()))
    if not seeds:
        raise InputError(path, "0 seeds: the file has no 'cause -> effect' line")
    return seeds


def seed_group(seed: str, variant: str | None = None) -> str:
    """The group of a seed's caption pairs: the seed's first 60 letters and digits (a variant's: -VARIANT after)."""
    return "seed-" + re.sub(r"[^a-z0-9]+", "-", seed.lower()).strip("-")[:60] + (f"-{variant}" if variant else "")


def seed_groups(path: Path, variant: str | None = None) -> list[tuple[int, str, str]]:
    """(line number, seed, group) for every seed of the file; two lines whose seeds make one group are an error
    (the later one's pairs would never be drafted: a group is drafted once)."""
    first: dict[str, int] = {}
    found = []
    for line, seed in read_seeds(path):
        group = seed_group(seed, variant)
        if group in first:
            raise InputError(path, f"the seed makes the same group {group!r} as line {first[group]} (a group is "
                                   "named by the seed's first 60 letters and digits): reword one or drop it",
                             f"line {line}")
        first[group] = line
        found.append((line, seed, group))
    return found


class CaptionsTask(LLMTask):
    generator = "captions"

    def __init__(self, template: PromptTemplate, dataset: str, per_group: int) -> None:
        self.template, self.dataset, self.per_group = template, dataset, per_group
        self.schema = captions_schema(per_group)

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        return {"pairs": [{"cause": clean(p.cause).strip(" ."), "effect": clean(p.effect).strip(" ."),
                           "category": p.category} for p in reply.pairs]}

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        rows = [pair_item(self.dataset, f"seed line {job.context['line']}",
                          {**pair, "group": job.group, "id": f"{job.group}:{k}"}, origin="generated",
                          generation_id=generation_id)
                for k, pair in enumerate(parsed["pairs"][:self.per_group])]
        return insert_items(store, session, rows, "generate")


def draft_captions(store: Store, backend: Backend, seeds_path: Path, *, run: LLMRun = LLMRun(),
                   per_group: int = 4) -> LLMReport:
    """A group of PER_GROUP caption pairs per seed line, as RUN says; seeds that already have their group are
    skipped. A prompt variant's pairs of a seed are a group of their own (its name ends in -VARIANT)."""
    template = load_prompt("mucr/captions.j2", run.template_path, run.workspace_root, run.prompt_variant)
    dataset = f"captions:{Path(seeds_path).stem}"
    selected_at = selection_start(store)
    seeds = seed_groups(seeds_path, template.variant)
    with store.session() as session:  # a group is drafted once, from whichever seeds file named it first
        done = set(session.execute(select(Item.group).where(
            Item.kind == KIND, Item.group.in_([group for *_, group in seeds]))).scalars())
    jobs = []
    for line, seed, group in seeds:
        if group in done:
            continue
        prompt = render(template, f"seed line {line}", seed=seed, n=per_group)
        jobs.append(LLMJob(label=f"seed line {line}", messages=[text_message(prompt)], group=group,
                           key=f"{dataset}:{group}",
                           context={"line": line}))
    return run_llm_task(store, backend, CaptionsTask(template, dataset, per_group), jobs,
                        run=run.or_params(text_params({}, max(CAPTIONS_MAX_TOKENS, CAPTION_PAIR_TOKENS * per_group))),
                        selected_at=selected_at)
