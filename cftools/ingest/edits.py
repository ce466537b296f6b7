"""`ingest edits`: edited images made anywhere (by hand, another pipeline, a GPU box) as edit candidates.

A CSV or JSONL file names one edit a row: `item` (the number `cftools show` takes, or the item's key), `image` (a
path under --images), optional `instruction`, `condition`, `tool`, `licence` and `edit` (`relevant`, the default:
the presupposition made visible; `irrelevant`: a change the question does not depend on). Each row becomes a
candidate of its item, stored like a generated one (`cftools.generate.edits`):

    edit_candidates[k] / irrelevant_edit_candidates[k]   {"image": "sha256:…", "provenance": {"source": "imported",
                                                          "tool", "file" (the table's name only), "model", "licence"}}

then the edit checks rank all of the item's candidates again. The whole file is validated first (any bad row stops
it, naming the file and row, with the store unchanged), then written in one transaction; a candidate whose image
the item already has (same SHA-256) is not added again, so a rerun adds nothing.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import PIL.Image
from sqlalchemy import select

from cftools.boundary import public_name
from cftools.errors import CftoolsError, Hint, InputError, NoRecordsError
from cftools.generate.edits import EditableItem, check_candidates, editable_items
from cftools.images import GENERATED_IMAGES_FOLDER, read_image_file, register_image, save_png, sha256_file
from cftools.ingest.licences import clean_licence
from cftools.ingest.readers import BadRecords, image_path_problem, records
from cftools.models import Image, IngestRun, Item, ItemEvent, utcnow
from cftools.store import Store

FORMAT = "edits"
STAGE = "ingest edits"
RELEVANT, IRRELEVANT = "relevant", "irrelevant"
PREFIXES = {RELEVANT: "edit", IRRELEVANT: "irrelevant_edit"}  # where each kind of edit lives in item.data
# what data.edit holds of each kind of edit (the LLM's reply, or an imported row's when the item has none)
EDIT_TEXT = {RELEVANT: ("condition", "instruction"), IRRELEVANT: ("irrelevant_condition", "irrelevant_instruction")}
REQUIRED = ("item", "image")
COLUMNS = (*REQUIRED, "instruction", "condition", "tool", "licence", "license", "edit")  # license: licence's other spelling


@dataclass
class EditRow:
    """One validated row: the item it edits, which of its edits, the image file and what it says about it."""

    line: str
    item: EditableItem
    which: str
    path: Path
    sha256: str  # of the PNG the image is stored as
    tool: Optional[str]
    licence: Optional[str]
    condition: Optional[str]
    instruction: Optional[str]


@dataclass
class EditIngestReport:
    format: str
    path: str
    n_records: int = 0
    items: int = 0  # items that got a new candidate
    candidates_added: int = 0
    already_there: int = 0  # rows whose image the item already had (an earlier run, or a repeated row)
    images_added: int = 0
    flagged: int = 0  # (item, edit) pairs whose best candidate has a flag after the checks
    licence: Optional[str] = None  # --licence (a row's own licence column wins for its candidate)
    added: list[dict[str, Any]] = field(default_factory=list)  # {item_id, edit, k, line}

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ---------------------------------------------------------------- reading and validating


def png_of(path: Path) -> bytes:
    """The image as the PNG a candidate is stored as (RGB, like a generated one)."""
    buffer = io.BytesIO()
    with PIL.Image.open(path) as image:
        image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def is_jsonl(file: Path) -> bool:
    return file.suffix.lower() in (".jsonl", ".ndjson")  # as `cftools.ingest.readers.records` reads it


def text_field(row: dict, name: str) -> Optional[str]:
    value = row.get(name)
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text or None


class ItemIndex:
    """Every item by id and by key, and the ones that can take edits (`editable_items`)."""

    def __init__(self, store: Store) -> None:
        self.editable = {item.id: item for item in editable_items(store)}
        with store.session() as session:
            rows = session.execute(select(Item.id, Item.key, Item.kind, Item.status)).all()
        self.by_id = {row.id: row for row in rows}
        self.by_key = {row.key: row for row in rows}

    def find(self, given: str) -> tuple[Optional[EditableItem], Optional[str]]:
        """(the item, None), or (None, why GIVEN names no item that takes edits)."""
        by_id = self.by_id.get(int(given)) if given.isdigit() else None
        by_key = self.by_key.get(given)
        if by_id is not None and by_key is not None and by_id.id != by_key.id:
            return None, f"item {given!r} is ambiguous: item {by_id.id}, and the key of item {by_key.id}"
        row = by_id or by_key
        if row is None:
            return None, f"no item {given!r} (give the number `cftools show` takes, or the item's key)"
        if row.id not in self.editable:
            return None, (f"item {row.id} ({row.kind}, {row.status}) takes no edits: its kind has no edited images, "
                          "it has no image in the store, or it was rejected")
        return self.editable[row.id], None


def edit_row(file: Path, line: str, row: dict, images_dir: Path, items: ItemIndex,
             licence: Optional[str]) -> EditRow:
    """ROW checked against the store and the images folder; a bad one is an InputError naming FILE and LINE."""
    def bad(reason: str, hint: Optional[Hint] = None) -> InputError:
        return InputError(file, reason, line, hint=hint)

    unknown = sorted(str(k) for k in row if k not in COLUMNS)
    if unknown:  # a CSV's columns are its header's
        raise InputError(file, f"unknown column(s) {', '.join(map(repr, unknown))}; the columns are "
                               f"{', '.join(COLUMNS)}", line if is_jsonl(file) else "line 1")
    which = (text_field(row, "edit") or RELEVANT).lower()
    if which not in PREFIXES:
        raise bad(f"edit is {row.get('edit')!r}: give {RELEVANT} or {IRRELEVANT}")
    item, problem = items.find(str(row["item"]).strip())
    if item is None:
        raise bad(problem)
    given = str(row["image"]).strip()
    problem = image_path_problem(given, images_dir)
    if problem:
        raise bad(problem)
    path = images_dir / given
    if not path.is_file():
        raise bad(f"image {given!r} is not in the images folder",
                  hint=Hint(f"image {given!r} is not in the {{images}} folder", images="--images"))
    try:
        read_image_file(path)
        blob = png_of(path)
    except InputError as exc:
        raise bad(f"image {given!r}: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise bad(f"image {given!r}: not a readable image ({exc})") from None
    try:
        row_licence = clean_licence(text_field(row, "licence") or text_field(row, "license"))
    except CftoolsError as exc:
        raise bad(str(exc)) from None
    # a tool given as a local model folder is kept by its name only: the candidate's provenance is released
    return EditRow(line, item, which, path, hashlib.sha256(blob).hexdigest(), public_name(text_field(row, "tool")),
                   row_licence or licence, text_field(row, "condition"), text_field(row, "instruction"))


def read_edit_rows(store: Store, file: Path, images_dir: Path, licence: Optional[str] = None,
                   progress: Optional[Callable[[int], None]] = None) -> list[EditRow]:
    """Every row of FILE, validated; the first bad one is raised (nothing is written before all are read)."""
    if not images_dir.is_dir():
        raise InputError(images_dir, "the images folder does not exist",
                         hint=Hint("the {images} folder does not exist", images="--images"))
    items = ItemIndex(store)
    rows = []
    for line, row in records(file, REQUIRED, BadRecords(skip_bad=False)):
        rows.append(edit_row(file, line, row, images_dir, items, licence))
        if progress:
            progress(len(rows))
    if not rows:
        raise NoRecordsError(file)
    return rows


# ---------------------------------------------------------------- writing


def next_free(data: dict[str, Any], prefix: str) -> int:
    """The next candidate number: past every stored candidate and every failed call's (which a rerun of
    `generate edits` would fill)."""
    taken = [int(k) for k in data.get(f"{prefix}_candidates") or {}]
    taken += [int(f["k"]) for f in data.get(f"{prefix}_failures") or [] if str(f.get("k", "")).isdigit()]
    return max(taken, default=-1) + 1


def provenance(row: EditRow, file: Path) -> dict[str, Any]:
    """Where an imported candidate came from: the table's file name only (never a local path)."""
    out = {"source": "imported", "tool": row.tool, "file": file.name, "model": row.tool, "licence": row.licence}
    out.update({k: v for k, v in (("condition", row.condition), ("instruction", row.instruction)) if v})
    return out


def with_edit_text(data: dict[str, Any], row: EditRow, file: Path) -> dict[str, Any]:
    """DATA with the row's condition and instruction in `data.edit` where the item has none (an LLM's is kept; an
    imported one has no generation_id, and the candidate's provenance keeps what its row said)."""
    condition_key, instruction_key = EDIT_TEXT[row.which]
    edit = dict(data.get("edit") or {})
    given = {condition_key: row.condition, instruction_key: row.instruction}
    missing = {k: v for k, v in given.items() if v and not edit.get(k)}
    if missing:
        data = {**data, "edit": {**edit, **missing}}
    return data


def add_rows(data: dict[str, Any], rows: list[EditRow], file: Path, report: EditIngestReport) -> set[str]:
    """Add ROWS (all of one item) to its DATA in place; returns the kinds of edit that got a new candidate."""
    touched = set()
    for row in rows:
        prefix = PREFIXES[row.which]
        candidates = dict(data.get(f"{prefix}_candidates") or {})
        if any(c.get("image") == f"sha256:{row.sha256}" for c in candidates.values()):
            report.already_there += 1
            continue
        k = next_free(data, prefix)
        candidates[str(k)] = {"image": f"sha256:{row.sha256}", "provenance": provenance(row, file)}
        data[f"{prefix}_candidates"] = candidates
        data.update(with_edit_text(data, row, file))
        report.candidates_added += 1
        report.added.append({"item_id": row.item.id, "edit": row.which, "k": k, "line": row.line})
        touched.add(row.which)
    return touched


def stored_paths(session, candidates: dict[str, dict]) -> dict[str, Path]:  # noqa: ANN001
    shas = [c["image"].removeprefix("sha256:") for c in candidates.values()]
    rows = session.execute(select(Image.sha256, Image.path).where(Image.sha256.in_(shas))).all()
    return {f"sha256:{sha}": Path(p) for sha, p in rows}


def rank_again(session, item: EditableItem, data: dict[str, Any], which: str) -> bool:  # noqa: ANN001
    """Run the edit checks over all of the item's candidates of WHICH edit; True when the best one is flagged."""
    prefix = PREFIXES[which]
    candidates = data[f"{prefix}_candidates"]
    checks = check_candidates(item, candidates, stored_paths(session, candidates))
    data[f"{prefix}_checks"] = checks
    return bool(checks and checks[0]["flags"])


def save_images(rows: list[EditRow], folder: Path, made: list[Path]) -> list:
    """The rows' images saved under their SHA-256 in the workspace's generated images; each measured."""
    saved = {}
    for row in rows:
        if row.sha256 not in saved:
            with PIL.Image.open(row.path) as image:
                path = save_png(image.convert("RGB"), folder, made)
            if path.stem != row.sha256:  # the file changed since it was read
                raise InputError(row.path, "the image changed while it was ingested; run again", row.line)
            saved[row.sha256] = read_image_file(path)
    return list(saved.values())


def write_edit_rows(store: Store, workspace_root: Path, file: Path, rows: list[EditRow], licence: Optional[str] = None,
                    progress: Optional[Callable[[int], None]] = None) -> EditIngestReport:
    """Files first, then every item in one transaction (with the checks); nothing stays of a write that fails."""
    report = EditIngestReport(format=FORMAT, path=str(file), n_records=len(rows), licence=licence)
    by_item: dict[int, list[EditRow]] = {}
    for row in rows:
        by_item.setdefault(row.item.id, []).append(row)
    made: list[Path] = []
    try:
        measured = save_images(rows, Path(workspace_root) / GENERATED_IMAGES_FOLDER, made)
        with store.write() as session:
            for image in measured:
                report.images_added += register_image(store, session, image)[1]
            session.flush()
            for done, (item_id, item_rows) in enumerate(by_item.items(), 1):
                stored = session.get(Item, item_id)
                if stored is None:  # deleted since the file was checked: the whole import stops, as for a bad row
                    raise InputError(file, f"item {item_id} was deleted while the edits were read; run again",
                                     item_rows[0].line)
                data = dict(stored.data or {})
                touched = add_rows(data, item_rows, file, report)
                if touched:
                    item = item_rows[0].item
                    report.items += 1
                    report.flagged += sum(rank_again(session, item, data, which) for which in sorted(touched))
                    stored.data, stored.updated_at = data, utcnow()
                    session.add(stored)
                    session.add(ItemEvent(item_id=item_id, stage=STAGE, from_status=stored.status,
                                          to_status=stored.status, detail={"file": file.name, "added": [
                                              {k: a[k] for k in ("edit", "k", "line")}
                                              for a in report.added if a["item_id"] == item_id]}))
                if progress:
                    progress(done)
            session.add(IngestRun(format=FORMAT, path=str(file), file_sha256=sha256_file(file),
                                  n_records=len(rows), n_images_added=report.images_added, licence=licence))
    except BaseException:
        for path in made:  # no image file without its row
            path.unlink(missing_ok=True)
        raise
    return report


def ingest_edits(store: Store, workspace_root: Path, file: Path, images_dir: Path, licence: Optional[str] = None,
                 progress: Optional[Callable[[str, int, Optional[int]], None]] = None) -> EditIngestReport:
    """Import the edits FILE lists (images under IMAGES_DIR) as candidates of their items, then check and rank them.
    PROGRESS(step, done, total) hears of the reading and of the writing."""
    licence = clean_licence(licence)
    rows = read_edit_rows(store, file, images_dir, licence,
                          progress=(lambda n: progress("rows read", n, None)) if progress else None)
    n_items = len({row.item.id for row in rows})
    return write_edit_rows(store, workspace_root, file, rows, licence,
                           progress=(lambda n: progress("items checked", n, n_items)) if progress else None)
