"""`generate edits`: edited images that show each item's presupposition, for every kind that declares an edit
subject (`GenerateHooks.edit_subject`: C-VQA, CFMM).

Two steps, each resumable:

1. An LLM writes two edits per item (output schema `EditInstruction`, prompt `prompts/edits/instruction.j2`): the
   relevant one realises the presupposition (the answer must change), the irrelevant one changes something the
   question does not depend on (the answer must stay). Both go into `item.data["edit"]` = {condition,
   instruction, irrelevant_condition, irrelevant_instruction, generation_id, template}; a reply whose irrelevant
   condition or instruction repeats the relevant one is refused and retried; the last attempt's relevant edit is
   kept alone. Items that have both are
   not asked again; an item whose edit predates the irrelevant one is asked again and gets only the irrelevant
   fields (its relevant edit, which its candidates were made from, stays).
2. An edit backend (`cftools.imagegen.edits`) makes N candidates of the item's image per edit (`Which`: one job
   per item and edit) with shared, recorded seeds; each is stored by SHA-256 under the workspace's generated
   images, with its provenance (model, licence, seed, steps, ...). The relevant edit's fields, and the irrelevant
   edit's under the prefix `irrelevant_edit`:

       edit_candidates[k]   {"image": "sha256:…", "provenance": {…}}
       edit_checks          the candidates ranked best first, with their flags (`cftools.imagegen.edit_checks`)
       edit_failures        failed calls, with k and the reason

   Files first, then the item in one transaction per job; a rerun makes only the missing candidates, and
   several processes on one store share the jobs (`cftools.generate.claims`).

With an answerer (`answerer`, any eval answerer: `hf:`, `openai:`), the answer check runs too: the original question
about the original image and about each candidate; the relevant edit must flip the answer to the counterfactual one
(`edit_answer_not_flipped`), the irrelevant edit must keep the original answer (`edit_answer_changed`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import PIL.Image
from pydantic import Field
from sqlalchemy import select
from sqlmodel import Session

from cftools.errors import CftoolsError
from cftools.distributed import as_completed, in_flight_of
from cftools.generate.claims import Claims, selection_start
from cftools.generate.llm_task import DEFAULT_MAX_ATTEMPTS, LLMJob, LLMReport, LLMRun, LLMTask, ParseError, run_llm_task
from cftools.images import GENERATED_IMAGES_FOLDER, read_image_file, register_image
from cftools.imagegen.edit_checks import answer_flip_flag, answer_kept_flag, check_edit, rank_edits
from cftools.imagegen.edits import EditSettings
from cftools.kinds import get_kind
from cftools.kinds.base import EditSubject
from cftools.images import save_png
from cftools.llm import Backend, text_message
from cftools.llm.prompts import PromptTemplate, load_prompt
from cftools.llm.structured import OutputSchema, Reply
from cftools.models import REJECTED, Image, Item, ItemEvent, SourceQuestion, utcnow
from cftools.store import Store

GENERATOR = "edit-instruction"
IMAGES_GENERATOR = "edit-images"  # the work claims' name for (item, round) image jobs
TEMPLATE = "edits/instruction.j2"
CLAIM_WAIT_S = 0.5
LOCAL_MAX_TOKENS = 320  # two conditions and two instructions


class EditInstruction(Reply):
    """The reply: the presupposition as a fact about the edited image and the instruction for the editor, then a
    change the question does not depend on and its instruction."""

    condition: str = Field(min_length=1, max_length=200, description="The supposition as a plain fact about the "
                           "edited image")
    instruction: str = Field(min_length=1, max_length=250, description="One imperative sentence: the smallest "
                             "visible change that makes the condition true")
    irrelevant_condition: str = Field(min_length=1, max_length=200, description="A visible change the question "
                                      "does not depend on, as a plain fact about the edited image")
    irrelevant_instruction: str = Field(min_length=1, max_length=250, description="One imperative sentence: make "
                                        "that change and nothing else; the answer must stay the same")


EDIT_INSTRUCTION = OutputSchema("edit_instruction", EditInstruction)


@dataclass(frozen=True)
class Which:
    """One of an item's two edits: where its instruction and its candidates are stored."""

    name: str  # "relevant" | "irrelevant"
    prefix: str  # of its item.data fields: edit_candidates, irrelevant_edit_candidates, ...
    instruction_key: str  # in item.data["edit"]

    def field(self, suffix: str) -> str:
        return f"{self.prefix}_{suffix}"


RELEVANT = Which("relevant", "edit", "instruction")
IRRELEVANT = Which("irrelevant", "irrelevant_edit", "irrelevant_instruction")


@dataclass
class EditableItem:
    id: int
    key: str
    kind: str
    group: str
    subject: EditSubject
    image_path: Optional[Path]
    data: dict[str, Any]


def editable_items(store: Store, kinds: tuple[str, ...] = (), groups: tuple[str, ...] = (),
                   limit: Optional[int] = None) -> list[EditableItem]:
    """Items (not rejected) of kinds that declare an edit subject and whose source image is in the store."""
    with store.session() as session:
        query = (select(Item, SourceQuestion, Image.path).join(SourceQuestion, Item.source_id == SourceQuestion.id)
                 .join(Image, SourceQuestion.image_id == Image.id).where(Item.status != REJECTED)
                 .order_by(Item.id))
        if kinds:
            query = query.where(Item.kind.in_(list(kinds)))
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        found = []
        for item, source, path in session.execute(query):
            try:
                subject = get_kind(item.kind).hooks.generate.edit_subject(item, source)
            except CftoolsError:  # a kind no longer installed: its items cannot be edited here
                continue
            if subject is not None:
                found.append(EditableItem(item.id, item.key, item.kind, item.group, subject, Path(path),
                                          dict(item.data or {})))
    return found[:limit] if limit is not None else found


# ------------------------------------------------------------------ step 1: the instruction
class EditInstructionTask(LLMTask):
    generator = GENERATOR
    schema = EDIT_INSTRUCTION

    def __init__(self, template: PromptTemplate, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        self.template, self.max_attempts = template, max_attempts

    def from_reply(self, reply: Any, job: LLMJob) -> dict[str, Any]:
        """The reply's fields, spaces collapsed. An irrelevant edit that repeats the relevant one is refused (a
        retry samples anew: the embedded model often repeats its first condition); at the last attempt the
        relevant edit is kept alone (the item is asked for its irrelevant edit again at the next run)."""
        parsed = {name: " ".join(getattr(reply, name).split()) for name in EditInstruction.model_fields}
        repeated = [name for name in ("condition", "instruction")
                    if parsed[name].casefold() == parsed[f"irrelevant_{name}"].casefold()]
        if not repeated:
            return parsed
        if max(len(job.attempts), 1) < self.max_attempts:  # the attempt being parsed is listed, or the first
            raise ParseError(f"the irrelevant {repeated[0]} repeats the relevant one: {parsed[repeated[0]]!r}")
        return {name: value for name, value in parsed.items() if not name.startswith("irrelevant_")}

    def write(self, store: Store, session: Session, job: LLMJob, parsed: dict[str, Any], generation_id: int,
              attempt: int) -> int:
        item = session.get(Item, job.context["item_id"])
        edit = dict((item.data or {}).get("edit") or {}) if item is not None else {}
        if item is None or (edit.get("instruction") and edit.get("irrelevant_instruction")):
            return 0  # deleted meanwhile, or another run wrote it first
        if edit.get("instruction") and "irrelevant_instruction" not in parsed:
            return 0  # asked for its irrelevant edit only, and the reply repeated the relevant one
        if edit.get("instruction"):  # its relevant candidates were made from the edit it has: only what is missing
            edit.update(irrelevant_condition=parsed["irrelevant_condition"],
                        irrelevant_instruction=parsed["irrelevant_instruction"])
        elif edit.get("irrelevant_instruction"):  # an imported irrelevant edit (`ingest edits`): its text stays
            edit.update(condition=parsed["condition"], instruction=parsed["instruction"],
                        generation_id=generation_id, template=self.template.name)
        else:
            edit = {**parsed, "generation_id": generation_id, "template": self.template.name}
        item.data = {**(item.data or {}), "edit": edit}
        item.updated_at = utcnow()
        session.add(item)
        session.add(ItemEvent(item_id=item.id, stage="generate edits", from_status=item.status,
                              to_status=item.status, detail={"generation_id": generation_id}))
        return 1


def instruction_prompt(template: PromptTemplate, item: EditableItem) -> str:
    from cftools.generate.llm_task import render

    s = item.subject
    return render(template, f"item {item.key}", original_question=s.original_question,
                  original_answer=s.original_answer, question=s.counterfactual_question,
                  answer=s.counterfactual_answer)


def write_instructions(store: Store, llm: Backend, items: list[EditableItem], *, run: LLMRun,
                       irrelevant: bool = True) -> LLMReport:
    """Both edit instructions for each of ITEMS that lacks one, as RUN says (see the module docstring); without
    IRRELEVANT an item that has its relevant instruction is not asked again."""
    template = load_prompt(TEMPLATE, run.template_path, run.workspace_root)
    selected_at = selection_start(store)
    fresh = fresh_data(store, [i.id for i in items])  # read after the start: what other workers finished shows
    jobs = [LLMJob(label=f"item {i.key}", key=f"{GENERATOR}:{i.key}", group=i.group,
                   messages=[text_message(instruction_prompt(template, i))], context={"item_id": i.id})
            for i in items if not needs_nothing(fresh.get(i.id, i.data).get("edit") or {}, irrelevant)]
    return run_llm_task(store, llm, EditInstructionTask(template, run.max_attempts), jobs, run=run,
                        selected_at=selected_at)


def needs_nothing(edit: dict[str, Any], irrelevant: bool = True) -> bool:
    return bool(edit.get("instruction") and (edit.get("irrelevant_instruction") or not irrelevant))


# ------------------------------------------------------------------ step 2: the candidates
@dataclass(frozen=True)
class EditOptions:
    """What `cftools generate edits` asks of the edit model: PER_ITEM candidates of each edit (candidate k with
    seed SEED + k), its STEPS, GUIDANCE and SIZE (None: the model's own), and with IRRELEVANT the irrelevant edits
    too."""

    per_item: int = 4
    seed: int = 0
    steps: Optional[int] = None
    guidance: Optional[float] = None
    size: Optional[str] = None
    irrelevant: bool = True


@dataclass
class EditsReport:
    backend: str
    model: str
    licence: Optional[str]
    items: int = 0
    irrelevant: bool = True  # whether irrelevant edits were made too
    without_instruction: int = 0
    images_made: int = 0
    candidates_kept: int = 0  # already there from an earlier run
    failures: list[dict[str, Any]] = field(default_factory=list)
    flagged: int = 0  # edits (an item's relevant or irrelevant one) whose best candidate still has a flag
    seconds: float = 0.0
    folder: str = ""
    instructions: Optional[dict[str, Any]] = None

    @property
    def rate(self) -> float:
        return self.images_made / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "images_per_s": round(self.rate, 3)}


def missing_candidates(data: dict[str, Any], per_item: int, which: Which = RELEVANT) -> list[int]:
    have = data.get(which.field("candidates")) or {}
    return [k for k in range(per_item) if str(k) not in have]


def ask_about_images(answerer: Any, question: str, paths: list[Path]) -> list[Optional[str]]:
    """The answerer's replies to QUESTION about each image (one fresh conversation each)."""
    from cftools.evaluate.vlm import Prompt

    return list(answerer.generate([Prompt(text=f"{question}\nAnswer with a single word or number.",
                                          images=[p]) for p in paths]))


def check_candidates(item: EditableItem, candidates: dict[str, dict], paths: dict[str, Path],
                     answerer: Any = None, which: Which = RELEVANT) -> list[dict[str, Any]]:
    """The edit checks of an item's candidates of one edit, best first; with ANSWERER the answer check too (the
    relevant edit must flip the answer, the irrelevant one keep it)."""
    original = PIL.Image.open(item.image_path).convert("RGB")
    ks = sorted(candidates, key=int)
    files = [paths[candidates[k]["image"]] for k in ks]
    reports = [check_edit(original, PIL.Image.open(f).convert("RGB"), int(k)) for k, f in zip(ks, files)]
    if answerer is not None:
        s = item.subject
        replies = ask_about_images(answerer, s.original_question, [item.image_path, *files])
        for report, reply in zip(reports, replies[1:]):
            if which == IRRELEVANT:
                flag = answer_kept_flag(reply, replies[0], s.original_answer, s.answer_type)
            else:
                flag = answer_flip_flag(reply, replies[0], s.counterfactual_answer, s.original_answer, s.answer_type)
            if flag:
                report.flags.append(flag)
    return [r.as_dict() for r in rank_edits(reports)]


@dataclass
class EditsRun:
    """One `generate_edits` run, as its steps share it: the store, the images' folder, the base seed, the answerer
    that checks the candidates (or None), and the report being filled."""

    store: Store
    folder: Path
    seed: int
    answerer: Any
    report: EditsReport


def record_candidates(run: EditsRun, item: EditableItem, results: list, finish: Callable[[Any, bool], None],
                      which: Which = RELEVANT) -> None:
    """Store one item's new candidates of one edit (files first, then one transaction) and rank all of that edit's
    candidates."""
    store, report = run.store, run.report
    candidates_field, failures_field, checks_field = (which.field(f) for f in ("candidates", "failures", "checks"))
    new: dict[str, dict] = {}
    made: list[Path] = []
    failures = []
    try:
        for result in results:
            if not result.ok:
                failures.append({"item_id": item.id, "edit": which.name, **result.as_dict()})
                continue
            path = save_png(result.image, run.folder, made)
            new[str(result.k)] = {"image": f"sha256:{path.stem}", "provenance": result.provenance, "_path": path}
            report.images_made += 1
        measured = [read_image_file(c.pop("_path")) for c in new.values()]
        with store.write() as session:
            for image in measured:
                register_image(store, session, image)
            stored = session.get(Item, item.id)
            data = dict(stored.data or {})
            candidates = {**(data.get(candidates_field) or {}), **new}
            data[candidates_field] = candidates
            earlier = [f for f in data.get(failures_field) or [] if str(f.get("k")) not in new]
            data[failures_field] = [*earlier, *failures]
            if not data[failures_field]:
                del data[failures_field]
            session.flush()
            shas = [c["image"].removeprefix("sha256:") for c in candidates.values()]
            rows = session.execute(select(Image.sha256, Image.path).where(Image.sha256.in_(shas))).all()
            paths = {f"sha256:{sha}": Path(p) for sha, p in rows} | {f"sha256:{m.sha256}": Path(m.path)
                                                                     for m in measured}
            if candidates:
                data[checks_field] = check_candidates(item, candidates, paths, run.answerer, which)
                report.flagged += bool(data[checks_field][0]["flags"])
            stored.data, stored.updated_at = data, utcnow()
            session.add(stored)
            session.add(ItemEvent(item_id=item.id, stage="generate edits", from_status=stored.status,
                                  to_status=stored.status, detail={"edit": which.name, "new": sorted(new, key=int),
                                                                   "failed": len(failures), "seed": run.seed}))
            finish(session, not failures)
        report.failures += failures
    except BaseException:
        for path in made:  # no image file without its row
            path.unlink(missing_ok=True)
        raise


def generate_edits(store: Store, workspace_root: Path, backend: Any, items: list[EditableItem], *,
                   options: EditOptions = EditOptions(), answerer: Any = None,
                   progress: Optional[Callable[[int, int, int], None]] = None) -> EditsReport:
    """The missing candidates of every edit of ITEMS that has its instruction (with `options.irrelevant` the
    irrelevant edit too), checked by ANSWERER when given; returns what happened."""
    per_item, seed, irrelevant = options.per_item, options.seed, options.irrelevant
    folder = Path(workspace_root) / GENERATED_IMAGES_FOLDER
    report = EditsReport(backend=backend.name, model=backend.model, licence=getattr(backend, "licence", None),
                         items=len(items), irrelevant=irrelevant, folder=str(folder))
    if hasattr(backend, "request_cache"):
        from cftools.images import StoreImageCache

        backend.request_cache = StoreImageCache(store, folder)
    selected_at = selection_start(store)
    fresh = fresh_data(store, [i.id for i in items])
    todo: dict[str, tuple[EditableItem, Which, str, list[int]]] = {}
    for item in items:
        item.data = fresh.get(item.id, item.data)
        edit = item.data.get("edit") or {}
        for which in (RELEVANT, IRRELEVANT) if irrelevant else (RELEVANT,):
            instruction = edit.get(which.instruction_key)
            if not instruction:
                report.without_instruction += 1
                continue
            missing = missing_candidates(item.data, per_item, which)
            report.candidates_kept += per_item - len(missing)
            if missing:
                todo[job_key(item, which, seed)] = (item, which, instruction, missing)
    total = sum(len(m) for *_, m in todo.values())
    started = time.perf_counter()
    claims = Claims(store, IMAGES_GENERATOR, list(todo), selected_at=selected_at)
    if progress:  # the first item's candidates can take a while: the count shows from the start
        progress(0, total, 0)

    def edit(job: str) -> list:
        item, _, instruction, missing = todo[job]
        original = PIL.Image.open(item.image_path).convert("RGB")
        return backend.edit(original, instruction, EditSettings(
            n=per_item, seed=seed, steps=options.steps, guidance=options.guidance, size=options.size,
            candidates=missing))

    # a backend on a Ray cluster (`--ray`) edits as many items at once as it has workers; this process writes each
    in_flight = in_flight_of(backend)  # grows as nodes join the cluster
    run = EditsRun(store, folder, seed, answerer, report)
    try:
        for keys in claims.batches(in_flight):
            if keys is None:  # the rest is held by other workers: wait for them to finish or die
                time.sleep(CLAIM_WAIT_S)
                continue
            for job, results in as_completed(keys, edit, in_flight):
                item, which = todo[job][:2]
                record_candidates(run, item, results, which=which,
                                  finish=lambda session, ok, job=job: claims.finish(session, [job], ok))
                report.seconds = time.perf_counter() - started
                if progress:
                    progress(report.images_made, total, len(report.failures))
    finally:
        claims.close()
    report.seconds = time.perf_counter() - started
    return report


def job_key(item: EditableItem, which: Which, seed: int) -> str:
    """The work claim's key of one edit's candidates (the relevant edit's as before irrelevant edits existed)."""
    return f"{item.key}:{seed}" if which == RELEVANT else f"{item.key}:{which.name}:{seed}"


def fresh_data(store: Store, ids: list[int]) -> dict[int, dict[str, Any]]:
    """The items' data as stored now (the instruction step may have written to it since they were selected)."""
    with store.session() as session:
        return {i: dict(d or {}) for i, d in session.execute(select(Item.id, Item.data).where(Item.id.in_(ids)))}
