"""Control items: items with a settled answer, mixed into each person's queue to measure them.

A control comes from an adjudicated item (its adjudicator settled the answer) or from the lead's `controls` file
(`cftools annotate controls FILE --kind K`). `annotate push` gives each person controls at `[annotate]
control_rate` among their new verification tasks, never one they judged or were shown before; a control task is
laid out, keyed and ordered like every other task of that person's verification project (the server and the person
see a verification task: its stored purpose `control` never leaves the store). `annotate pull` scores a control's
judgment against the settled answer (`TaskOutcome`); it never counts toward the item it shows.

What is scored is the verdict every verification asks for: the question is about the image and the proposed answer
shown is right (`verdict_ok`). An item accepted as proposed shows its answer (right); one accepted with a correction
shows the answer that was corrected (wrong); a rejected one shows its answer (wrong).
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import insert, select, update

from cftools.annotate.label_studio import parse_time
from cftools.annotate.purpose import Purpose
from cftools.errors import CftoolsError, Hint, InputError
from cftools.judgments import (  # noqa: F401 (CONTROL, AUDIT, MEASURING: read from here by the annotate modules)
    ACCEPT, ACCEPT_CORRECTED, ADJUDICATE, AUDIT, CONTROL, MEASURING, REJECT, VERIFY, Answer,
)
from cftools.models import (
    ACCEPTED, CONTROL as CONTROL_STATUS, REJECTED, AnnotationTask, ControlItem, Item, ItemEvent, Judgment,
    TaskOutcome, utcnow,
)
from cftools.store import Store, in_chunks

FROM_FILE, ADJUDICATED = "file", "adjudicated"
YES_NO = {"yes": True, "y": True, "true": True, "1": True, "no": False, "n": False, "false": False, "0": False}
# The controls file: the columns of `cftools ingest table` (image, question, answer: the question and the proposed
# answer the task shows) and the settled answer.
CONTROL_COLUMNS = ("image", "question", "answer", "group", "answer_correct")


def verdict_ok(answer: Answer) -> bool:
    """One verification judgment's verdict: the question is about the image and the proposed answer is right."""
    return bool(answer.related) and bool(answer.answer_correct)


def control_rate(workspace: Any) -> float:
    from cftools.annotate.quality import DEFAULT_CONTROL_RATE

    value = workspace.section("annotate").get("control_rate")
    return float(DEFAULT_CONTROL_RATE if value is None else value)


# ---------------------------------------------------------------- the lead's controls file


@dataclass
class ControlsReport:
    path: str
    kind: str
    dataset: str
    n_records: int = 0
    controls_added: int = 0
    already_known: int = 0
    images_added: int = 0
    missing_images: int = 0
    skipped: list[dict] = field(default_factory=list)
    key_prefix: Optional[str] = None  # what the controls' item keys start with (the real items' prefix when known)
    image_folder: Optional[str] = None  # where their images are served from: beside the real items' images
    like_real_items: bool = False  # key prefix and image folder taken from the kind's real items

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _yes_no(row: dict, column: str, path: Path, line: str, default: Optional[bool] = None) -> Optional[bool]:
    value = row.get(column)
    if value is None or not str(value).strip():
        if default is None:
            raise InputError(path, f"{column!r} is empty: write yes or no", line)
        return default
    found = YES_NO.get(str(value).strip().lower())
    if found is None:
        raise InputError(path, f"{column!r} is {value!r}: write yes or no", line)
    return found


def _data_of(row: dict, path: Path, line: str) -> Optional[dict]:
    value = row.get("data")
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"'data' is not JSON: {exc.msg}", line) from None
    if not isinstance(value, dict):
        raise InputError(path, "'data' must be a JSON object (the kind's item fields)", line)
    return value


def answer_problem(kind: str, group: str, question: str, answer: str, column: str) -> Optional[str]:
    """Why ANSWER cannot be a GROUP answer of KIND, by the checks' own answer-type rule (a count is digits >= 0,
    yes/no is yes or no, a choice is an offered option), or None."""
    from cftools.checks.rules import check_answer_type
    from cftools.item_view import ItemView
    from cftools.kinds import get_kind

    view = ItemView(id=0, key="", kind=kind, group=group, status=CONTROL_STATUS, question=question, answer=answer)
    flag = check_answer_type(replace(view, answer_style=get_kind(kind).hooks.check.answer_style(view)))
    return f"{column}: {flag.reason}" if flag else None


def count_in_digits(kind: str, group: str, question: str, value: Optional[str], column: str,
                    converted: dict[str, list[str]]) -> Optional[str]:
    """VALUE, with number words converted to digits when GROUP's answers are counts (`cftools.answer_rules`, as
    every reader does); a conversion is recorded in CONVERTED as [as given, as stored]."""
    from cftools.answer_rules import read_count
    from cftools.item_view import ItemView
    from cftools.kinds import get_kind

    if not value:
        return value
    view = ItemView(id=0, key="", kind=kind, group=group, status=CONTROL_STATUS, question=question, answer=value)
    if get_kind(kind).hooks.check.answer_style(view) != "count":
        return value
    stored, _ = read_count(value)
    if stored is None or stored == value:
        return value
    converted[column] = [value, stored]
    return stored


# Said of a missing image read from the controls file's own folder (no images folder was given).
NO_IMAGES_FOLDER_HINT = Hint("{message} (the controls file's folder: name the images' folder with {images})",
                             images="--images")


def image_missing(image: str, images_dir: Path) -> Optional[str]:
    """Why a control's image cannot be shown (a control is always shown with its image), or None."""
    if (images_dir / image).is_file():
        return None
    return f"image {image!r} is not a file in {images_dir}"


def read_controls(path: Path, kind: str, dataset: str, images_dir: Path, bad: Any,
                  key_prefix: Optional[str] = None, images_given: bool = True) -> tuple[list, list, dict]:
    """(source questions, control items, item key -> settled answer) of a controls FILE, each record checked as
    `ingest` checks its records (image inside IMAGES_DIR and present, ids unique, answers of the group's type).
    Item keys are KEY_PREFIX (default DATASET) and a hash, the shape of an ingested item's key."""
    from cftools.ingest.readers import checked_records, image_ref_path, infer_answer_type, stable_key
    from cftools.kinds import get_kind

    groups = get_kind(kind).hooks.ingest.groups

    now = utcnow()
    sources: dict[str, dict] = {}
    items: dict[str, dict] = {}
    settled: dict[str, dict] = {}
    for line, row in checked_records(path, CONTROL_COLUMNS, bad, images_dir, ("image",)):
        image, question, answer, group = (str(row[c]).strip() for c in ("image", "question", "answer", "group"))
        corrected = str(row.get("corrected_answer") or "").strip() or None
        converted: dict[str, list[str]] = {}
        if not groups or group in groups:
            answer = count_in_digits(kind, group, question, answer, "answer", converted) or answer
            corrected = count_in_digits(kind, group, question, corrected, "corrected_answer", converted)
        try:
            answer_correct = _yes_no(row, "answer_correct", path, line)
            related = _yes_no(row, "related", path, line, default=True)
            data = _data_of(row, path, line)
            if groups and group not in groups:
                raise InputError(path, f"group {group!r} is not one of {kind}'s: {', '.join(groups)}", line)
            missing = image_missing(image, images_dir)
            if missing:
                raise InputError(path, missing, line, hint=None if images_given else NO_IMAGES_FOLDER_HINT)
            problem = (answer_problem(kind, group, question, answer, "answer")
                       or (corrected and answer_problem(kind, group, question, corrected, "corrected_answer")))
            if problem:
                raise InputError(path, problem, line)
        except InputError as exc:
            bad.add(exc)
            continue
        original_q = str(row.get("original_question") or question).strip()
        original_a = str(row.get("original_answer") or "").strip() or None
        given_id = str(row.get("id") or "").strip() or None
        external = given_id or stable_key(image, original_q, original_a or "")
        sources.setdefault(external, {
            "dataset": dataset, "external_id": external, "image_ref": image_ref_path(image), "question": original_q,
            "answer": original_a, "answer_type": infer_answer_type(original_a or answer), "answers": None,
            "meta": {"line": line, "image": image, **({"id": given_id} if given_id else {})}, "created_at": now})
        # An ingested item's key shape (dataset:hash): nothing in it tells a control from another item.
        key = f"{key_prefix or dataset}:{stable_key(kind, image, question, answer, group)}"
        items.setdefault(key, {"key": key, "kind": kind, "group": group, "question": question,
                               "answer": answer, "status": CONTROL_STATUS, "origin": "ingested", "data": data,
                               "source_external_id": external, "created_at": now, "updated_at": now})
        settled[key] = {"related": related, "answer_correct": answer_correct, "corrected_answer": corrected,
                        **({"converted_answers": converted} if converted else {})}
    return list(sources.values()), list(items.values()), settled


@dataclass
class RealItems:
    """What a kind's real (non-control) items look like to a person: the prefix of their ingested item keys
    (`<dataset>:<hash>`) and the folder most of their images are in (None: no such items yet)."""

    key_prefix: Optional[str] = None
    image_folder: Optional[Path] = None


INGESTED_KEY = re.compile(r"^(?P<prefix>.+):[0-9a-f]{16}$")


def real_items(store: Store, kind: str) -> RealItems:
    """The most common key prefix and image folder of KIND's items that are not controls."""
    from cftools.models import Image, SourceQuestion

    with store.session() as session:
        rows = session.execute(
            select(Item.key, Image.path).outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id)
            .outerjoin(Image, Image.id == SourceQuestion.image_id)
            .where(Item.kind == kind, Item.status != CONTROL_STATUS)).all()
    prefixes = Counter(m["prefix"] for key, _ in rows if (m := INGESTED_KEY.match(key)))
    folders = Counter(str(Path(image).parent) for _, image in rows if image)
    return RealItems(prefixes.most_common(1)[0][0] if prefixes else None,
                     Path(folders.most_common(1)[0][0]) if folders else None)


@dataclass
class Known:
    """A control already in the store under a source of the controls' dataset."""

    item_id: int
    key: str
    content: tuple
    settled: Optional[dict]
    has_control: bool


def known_controls(store: Store, dataset: str, externals: list[str]) -> dict[str, list[Known]]:
    """Source external id -> the control items already loaded under it (in DATASET)."""
    from cftools.models import SourceQuestion

    found: dict[str, list[Known]] = defaultdict(list)
    with store.session() as session:
        for part in in_chunks(externals):
            for external, ref, item_id, key, group, question, answer, data, settled, control in session.execute(
                    select(SourceQuestion.external_id, SourceQuestion.image_ref, Item.id, Item.key, Item.group,
                           Item.question, Item.answer, Item.data, ControlItem.settled, ControlItem.id)
                    .join(Item, Item.source_id == SourceQuestion.id)
                    .outerjoin(ControlItem, ControlItem.item_id == Item.id)
                    .where(SourceQuestion.dataset == dataset, SourceQuestion.external_id.in_(part),
                           Item.status == CONTROL_STATUS).order_by(Item.id)):
                found[external].append(Known(item_id, key, (ref, group, question, answer, data or None), settled,
                                             control is not None))
    return found


def real_source_ids(store: Store, externals: list[str]) -> dict[str, str]:
    """Those of EXTERNALS that are the id of a real (not control) source question: id -> its dataset."""
    from cftools.models import SourceQuestion

    control_sources = select(Item.source_id).where(Item.status == CONTROL_STATUS, Item.source_id.is_not(None))
    found: dict[str, str] = {}
    with store.session() as session:
        for part in in_chunks(externals):
            found.update(session.execute(select(SourceQuestion.external_id, SourceQuestion.dataset).where(
                SourceQuestion.external_id.in_(part), SourceQuestion.id.not_in(control_sources))).all())
    return found


def sort_out_reloads(store: Store, path: Path, dataset: str, sources: list, items: list, settled: dict,
                     bad: Any) -> tuple[list, list, dict[str, int]]:
    """(new sources, new items, key -> id of a control already loaded unchanged). A record whose id is a real
    item's source id, or that changes a control loaded before under the same id, is a bad record: a control is
    never rebound to another item's image nor silently doubled."""
    by_external = {s["external_id"]: s for s in sources}
    real = real_source_ids(store, sorted(by_external))
    known = known_controls(store, dataset, sorted(by_external))
    refused: set[str] = set()
    unchanged: dict[str, int] = {}
    for item in items:
        source = by_external[item["source_external_id"]]
        line, given_id = source["meta"]["line"], source["meta"].get("id")
        content = (source["image_ref"], item["group"], item["question"], item["answer"], item["data"] or None)
        earlier = known.get(source["external_id"], [])
        same = [k for k in earlier if k.content == content]
        problem = None
        if source["external_id"] in real:
            problem = (f"id {source['external_id']!r} is the id of a real source question (dataset "
                       f"{real[source['external_id']]}): give the control an id of its own")
        elif (given_id and earlier and not same) or (same and same[0].settled not in (None, settled[item["key"]])):
            named = repr(given_id) if given_id else f"of image {source['meta']['image']!r}"
            problem = (f"control {named} was loaded before with another image, question, answer or settled "
                       "answer: a control cannot change; give the changed one a new id")
        if problem:
            bad.add(InputError(path, problem, line))
            refused.add(item["key"])
        elif same:
            unchanged[item["key"]] = same[0].item_id
    new_items = [i for i in items if i["key"] not in refused and i["key"] not in unchanged]
    wanted = {i["source_external_id"] for i in new_items}
    return [s for s in sources if s["external_id"] in wanted], new_items, unchanged


def place_images(path: Path, sources: list, images_dir: Path, folder: Optional[Path], bad: Any) -> Path:
    """Copy the controls' images beside the real items' images (FOLDER), each under the path the file gives it, so
    that a task's image path says nothing; returns the folder the images are now read from. A file of another
    content already there under that path is a bad record (nothing is copied until every image is checked)."""
    if folder is None or not folder.is_dir() or folder.resolve() == images_dir.resolve():
        return images_dir
    copies = []
    for source in sources:
        given = source["meta"]["image"]
        origin, target = images_dir / given, folder / given
        if target.exists() and target.resolve() != origin.resolve() and target.read_bytes() != origin.read_bytes():
            bad.add(InputError(path, f"image {given!r} would replace another file in {folder}, where the real "
                                     "items' images are: rename it", source["meta"]["line"]))
            continue
        if not target.exists():
            copies.append((origin, target))
    for origin, target in copies:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, target)
        except OSError as exc:
            raise CftoolsError(f"{target}: cannot copy the control's image beside the real items' images "
                               f"({exc.strerror or exc})",
                               hint=Hint("{message}; pass {images} with a folder of your own",
                                         images="--images")) from None
    return folder


def load_controls(store: Store, path: Path, kind: str, images_dir: Optional[Path] = None,
                  dataset: Optional[str] = None, skip_bad: bool = False) -> ControlsReport:
    """Read the lead's controls FILE for KIND: each record an item (status `control`: never pushed as an item,
    never released) with its settled answer. Its item key and image path have the shape of the kind's real items'
    (their key prefix, their image folder), unless DATASET names the controls. Loading the same file again adds
    nothing; a record that would change a loaded control is refused. A bad record stops the load with nothing
    written (SKIP_BAD: it is left out and listed)."""
    from cftools.ingest.readers import BadRecords, ReadInput, finish
    from cftools.kinds import get_kind

    get_kind(kind)
    path = Path(path)
    images_given = images_dir is not None
    images_dir = Path(images_dir) if images_dir else path.parent
    looks = real_items(store, kind)
    key_prefix = dataset or looks.key_prefix
    dataset = dataset or f"table:{kind}"
    bad = BadRecords(skip_bad)
    sources, items, settled = read_controls(path, kind, dataset, images_dir, bad, key_prefix, images_given)
    n_records = len(items)
    sources, new_items, unchanged = sort_out_reloads(store, path, dataset, sources, items, settled, bad)
    images_dir = place_images(path, sources, images_dir, looks.image_folder, bad)
    ingest = finish(store, ReadInput("controls", path, dataset, sources, new_items, n_records, bad),
                    images_dir=images_dir)
    report = ControlsReport(str(path), kind, dataset, n_records=n_records, images_added=ingest.images_added,
                            missing_images=ingest.missing_images, skipped=[b.__dict__ for b in ingest.bad],
                            key_prefix=key_prefix or dataset, image_folder=str(images_dir),
                            like_real_items=looks.key_prefix is not None and looks.image_folder is not None)
    with store.write() as session:
        ids: dict[str, int] = dict(unchanged)
        for part in in_chunks(sorted(i["key"] for i in new_items)):
            ids.update(session.execute(select(Item.key, Item.id).where(Item.key.in_(part))).all())
        known = set(session.execute(select(ControlItem.item_id)).scalars())
        rows = []
        for key, item_id in sorted(ids.items()):
            if item_id in known:
                report.already_known += 1
                continue
            answer = settled[key]
            expected = answer["related"] and answer["answer_correct"]
            rows.append({"item_id": item_id, "kind": kind, "origin": FROM_FILE, "shown_answer": None,
                         "expected_ok": expected, "settled": answer, "created_at": utcnow()})
        if rows:
            session.execute(insert(ControlItem.__table__), rows)
            session.execute(update(ItemEvent).where(ItemEvent.item_id.in_([r["item_id"] for r in rows]),
                                                    ItemEvent.stage == "ingest").values(to_status=CONTROL_STATUS))
        report.controls_added = len(rows)
    return report


# ---------------------------------------------------------------- adjudicated items


def settle_adjudicated(store: Store, kind: str) -> int:
    """Make a control of every adjudicated KIND item whose adjudicator accepted, corrected or rejected it (and
    that is not one yet). Returns how many were added."""
    with store.session() as session:
        known = set(session.execute(select(ControlItem.item_id)).scalars())
        rows = session.execute(
            select(Item.id, Item.status, Item.answer, Item.proposed_answer, Judgment.decision,
                   Judgment.corrected_answer)
            .join(AnnotationTask, AnnotationTask.item_id == Item.id)
            .join(Judgment, Judgment.task_id == AnnotationTask.id)
            .where(Item.kind == kind, Item.status.in_([ACCEPTED, REJECTED]), AnnotationTask.purpose == ADJUDICATE,
                   AnnotationTask.state == "decided")
            .order_by(AnnotationTask.id)).all()
    latest = {row.id: row for row in rows}  # the last adjudication of an item is what settled it
    new = []
    for item_id, row in sorted(latest.items()):
        if item_id in known:
            continue
        if row.decision == ACCEPT and row.status == ACCEPTED:
            shown, expected = row.answer, True
        elif row.decision == ACCEPT_CORRECTED and row.status == ACCEPTED and row.proposed_answer is not None:
            shown, expected = row.proposed_answer, False
        elif row.decision == REJECT and row.status == REJECTED:
            shown, expected = row.answer, False
        else:
            continue  # a kind's own adjudication (MuCR's cue sets): no verdict on one shown answer
        new.append({"item_id": item_id, "kind": kind, "origin": ADJUDICATED, "shown_answer": shown,
                    "expected_ok": expected, "created_at": utcnow(),
                    "settled": {"decision": row.decision, "answer": row.answer}})
    if new:
        with store.write() as session:
            session.execute(insert(ControlItem.__table__), new)
    return len(new)


# ---------------------------------------------------------------- push


def seen_items(store: Store, people: list[str]) -> dict[str, set[int]]:
    """Per person: every item they were given or judged a task of (any purpose, any state)."""
    seen: dict[str, set[int]] = defaultdict(set)
    with store.session() as session:
        for item_id, assignee, annotator in session.execute(
                select(AnnotationTask.item_id, AnnotationTask.assignee, Judgment.annotator)
                .outerjoin(Judgment, Judgment.task_id == AnnotationTask.id)):
            for person in (assignee, annotator):
                if person in people:
                    seen[person].add(item_id)
    return seen


def _tasks_per_person(store: Store, purpose: str) -> Counter:
    from sqlalchemy import func

    with store.session() as session:
        return Counter(dict(session.execute(
            select(AnnotationTask.assignee, func.count()).where(
                AnnotationTask.assignee.is_not(None), AnnotationTask.purpose == purpose,
                AnnotationTask.state != "deleted").group_by(AnnotationTask.assignee)).all()))


def controls_due(given: int, real: int, rate: float) -> int:
    """How many more controls a person with REAL verification tasks (the new ones included) and GIVEN controls is
    owed, so that controls make RATE of all their tasks over time."""
    if rate <= 0:
        return 0
    return max(0, math.floor(real * rate / (1 - rate) + 0.5) - given)


def plan_controls(store: Store, kind: str, wanted: list[tuple[Item, Purpose, Optional[str]]],
                  rate: float) -> list[tuple[Item, Purpose, str]]:
    """(control item, CONTROL, person) for the people WANTED gives new verification tasks of KIND: each gets
    `controls_due` controls, drawn at random among the kind's controls they never saw."""
    new = Counter(person for _, purpose, person in wanted if purpose.task == VERIFY and person)
    if not new or rate <= 0:
        return []
    settle_adjudicated(store, kind)
    with store.session() as session:
        pool = list(session.execute(select(ControlItem.item_id).where(ControlItem.kind == kind)
                                    .order_by(ControlItem.item_id)).scalars())
    if not pool:
        return []
    real, given = _tasks_per_person(store, VERIFY), _tasks_per_person(store, CONTROL)
    seen = seen_items(store, sorted(new))
    picks: dict[str, list[int]] = {}
    for person in sorted(new):
        due = controls_due(given[person], real[person] + new[person], rate)
        mine = seen[person] | {item.id for item, _, p in wanted if p == person}
        free = [item_id for item_id in pool if item_id not in mine]
        chosen = random.Random(f"{person}:{given[person]}:{len(pool)}").sample(free, min(due, len(free)))
        if chosen:
            picks[person] = chosen
    items = control_items(store, sorted({i for chosen in picks.values() for i in chosen}))
    return [(items[item_id], Purpose(CONTROL), person) for person, chosen in picks.items() for item_id in chosen]


def control_items(store: Store, item_ids: list[int]) -> dict[int, Item]:
    """Detached copies of control items as their tasks show them (the shown answer in place of the settled one)."""
    found: dict[int, Item] = {}
    with store.session() as session:
        for part in in_chunks(item_ids):
            for item, shown in session.execute(
                    select(Item, ControlItem.shown_answer).join(ControlItem, ControlItem.item_id == Item.id)
                    .where(Item.id.in_(part))):
                copy = Item(**{c: getattr(item, c) for c in Item.model_fields})
                if shown is not None:
                    copy.answer = shown
                found[item.id] = copy
    return found


def shuffled_batches(per_person: dict[Any, list], seed: str) -> None:
    """Shuffle each person's tasks in place when controls are among them: import order (and so task ids) then says
    nothing about which task is a control."""
    for person, batch in per_person.items():
        if any(task.get("_purpose") in MEASURING for _, task in batch):  # a payload's stored purpose
            random.Random(f"{seed}:{person}:{len(batch)}").shuffle(batch)


# ---------------------------------------------------------------- pull


def record_outcomes(session: Any, tasks: dict[int, Any], changed: set[int], chosen: dict[int, list],
                    report: Any) -> None:
    """Score the changed control and audit tasks (their assignee's judgment) and mark them decided; their items are
    left as they are."""
    ids = sorted(t for t in changed if tasks[t].purpose.measuring)
    if not ids:
        return
    expected = dict(session.execute(select(ControlItem.item_id, ControlItem.expected_ok).where(
        ControlItem.item_id.in_(sorted({tasks[t].item_id for t in ids})))).all())
    existing = dict(session.execute(select(TaskOutcome.task_id, TaskOutcome.id)
                                    .where(TaskOutcome.task_id.in_(ids))).all())
    now = utcnow()
    for task_id in ids:
        task, picks = tasks[task_id], chosen.get(task_id) or []
        if not picks:
            if task_id in existing:
                session.execute(TaskOutcome.__table__.delete().where(TaskOutcome.id == existing[task_id]))
            session.execute(update(AnnotationTask).where(AnnotationTask.id == task_id)
                            .values(state="open", decision=None, updated_at=now))
            continue
        pick = picks[0]
        given = verdict_ok(pick.answer)
        want = expected.get(task.item_id) if task.purpose.task == CONTROL else None
        row = {"task_id": task_id, "item_id": task.item_id, "kind": task.kind, "role": str(task.purpose),
               "person": pick.person, "expected_ok": want, "given_ok": given,
               "correct": None if want is None else given == want, "lead_time": pick.annotation.get("lead_time"),
               "judged_at": parse_time(pick.annotation.get("updated_at") or pick.annotation.get("created_at")),
               "updated_at": now}
        if task_id in existing:
            session.execute(TaskOutcome.__table__.update().where(TaskOutcome.id == existing[task_id]).values(**row))
        else:
            session.execute(insert(TaskOutcome.__table__), [row])
        session.execute(update(AnnotationTask).where(AnnotationTask.id == task_id)
                        .values(state="decided", decision="scored", updated_at=now))
        report.decisions[f"{task.purpose.task} scored"] += 1


def outcomes(store: Store, role: str = CONTROL, kind: Optional[str] = None) -> list[TaskOutcome]:
    """Every stored outcome of ROLE (of KIND's items when given), oldest first."""
    with store.session() as session:
        query = select(TaskOutcome).where(TaskOutcome.role == role)
        if kind is not None:
            query = query.where(TaskOutcome.kind == kind)
        found = list(session.execute(query.order_by(TaskOutcome.judged_at, TaskOutcome.id)).scalars())
        session.expunge_all()
    return found


def require_kind(kind: Optional[str]) -> str:
    if not kind:
        raise CftoolsError("a kind is required", hint=Hint("{kind} is required", kind="--kind"))
    return kind
