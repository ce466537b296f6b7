"""Export: the store's items as a versioned, verifiable release folder (see `cftools.release.layout` for the layout).

Guarantees:
- Deterministic: records are sorted by id, every time written comes from the store, JSON is written
  with sorted keys, Parquet and PNG files carry no clock time. The same store exports the same bytes.
- Safe: the release's own file names come from content hashes; names found in input data (image file
  names, paths) are never used as paths. NAME, VERSION and split names are checked to be plain names.
  The release is written to a hidden temporary folder beside the target and renamed into place only
  when complete, so a failed or killed export leaves no partial release; an existing release is
  replaced only with `force`.
- Splits are decided by a hash, so they are stable under re-export. Items that share an image are
  grouped (connected components over their images) and a group's split is decided by the hash of the
  smallest image SHA-256 in it, so no image is in two splits. An item without an image is decided by
  the hash of its id.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Iterator

from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from cftools import __version__
from cftools.images import data_image_shas
from cftools.errors import CftoolsError, naming_the_file
from cftools.images import HASH_CHUNK
from cftools.ingest.licences import clean_licence, licence_conflicts, licences_of
from cftools.ingest.readers import infer_answer_type
from cftools.kinds import all_kinds, get_kind
from cftools.models import (
    ACCEPTED, CHECKED, DRAFT, IN_REVIEW, AgreementStat, AnnotationTask, CheckFlag, Generation, Image, ItemEvent,
    Item, Judgment, Release, SourceQuestion, utcnow,
)
from cftools.release.layout import (
    DATA_DIR, DEFAULT_OUT_DIR, FORMAT_NATIVE, IMAGES_DIR, MANIFEST_NAME, RECORDS_NAME,
    SCHEMA_VERSION, hash_file, map_strings, parquet_name, release_dir_name,
)
from cftools.release.extras import shared_formats, write_release_extras
from cftools.store import Store, in_chunks
from cftools.workspace import Workspace

VERIFIED_STATUSES = (ACCEPTED,)
CHECK_STAGE = "check"  # cftools.checks.runner.STAGE, not imported: the runner loads the embedding stack
UNVERIFIED_STATUSES = (DRAFT, CHECKED)  # an in-review item is out unless asked for: its judgment is pending
DEFAULT_SPLITS = {"test": 1.0}
IMAGE_EXTENSIONS = {"jpeg": "jpg", "jpg": "jpg", "mpo": "jpg", "png": "png", "gif": "gif", "webp": "webp",
                    "bmp": "bmp", "tiff": "tif", "tif": "tif"}
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
PARQUET_BATCH = 1000

Progress = Callable[[str, int, int], None]  # (stage, done, total)


# ---------------------------------------------------------------- options


def check_plain_name(value: str, what: str) -> str:
    """A name that becomes part of a file name: letters, digits, . _ + -; no path, no '..'."""
    if not PLAIN_NAME.match(value) or ".." in value:
        raise CftoolsError(f"{what} {value!r} is not a plain name (letters, digits, '.', '_', '+', '-'; "
                           "no '/' or '..')")
    return value


def parse_splits(text: str | None) -> dict[str, float]:
    """`test=0.8,dev=0.2` -> {"test": 0.8, "dev": 0.2} (in the given order; fractions sum to 1)."""
    if not text:
        return dict(DEFAULT_SPLITS)
    splits: dict[str, float] = {}
    for part in text.split(","):
        name, sep, fraction = part.partition("=")
        name = check_plain_name(name.strip(), "split name")
        try:
            value = float(fraction) if sep else float("nan")
        except ValueError:
            value = float("nan")
        if not (0 < value <= 1):
            raise CftoolsError(f"split {part!r}: write NAME=FRACTION with a fraction in (0, 1], e.g. test=0.8,dev=0.2")
        if name in splits:
            raise CftoolsError(f"split {name!r} is given twice")
        splits[name] = value
    if abs(sum(splits.values()) - 1.0) > 1e-6:
        raise CftoolsError(f"split fractions must add up to 1 (they add up to {sum(splits.values()):g})")
    return splits


def hash_fraction(text: str) -> float:
    """A stable number in [0, 1) from TEXT (SHA-256, so the same on every machine and run)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64


def choose_split(splits: dict[str, float], text: str) -> str:
    point = hash_fraction(text)
    edge = 0.0
    names = list(splits)
    for name in names:
        edge += splits[name]
        if point < edge:
            return name
    return names[-1]


# ---------------------------------------------------------------- reading the store


@dataclass
class ImageRef:
    sha256: str
    ext: str
    path: str  # where the store found the file

    @property
    def rel(self) -> str:
        return f"{IMAGES_DIR}/{self.sha256}.{self.ext}"


@dataclass
class ExportItem:
    record: dict[str, Any]
    images: list[ImageRef]  # the record's image first, then any in its data
    provenance: dict[str, Any]
    updated_at: str


def image_extension(fmt: str | None) -> str:
    return IMAGE_EXTENSIONS.get((fmt or "").lower(), "img")


def split_options(data: dict[str, Any]) -> tuple[dict[str, list[str]] | None, dict[str, Any]]:
    """CFMM-style option pairs move from the item's data to the record's `options` field."""
    options = data.get("options")
    if isinstance(options, dict) and isinstance(options.get("original"), list) \
            and isinstance(options.get("counterfactual"), list):
        rest = {k: v for k, v in data.items() if k != "options"}
        return {"original": [str(o) for o in options["original"]],
                "counterfactual": [str(o) for o in options["counterfactual"]]}, rest
    return None, data


def record_answer_type(kind: str, group: str, source_type: str | None, answer: str | None) -> str:
    declared = get_kind(kind).answer_type(group, answer)
    if declared:
        return declared
    if source_type in ("number", "yes/no", "other"):
        return source_type
    return infer_answer_type(answer or "")


def _by_item(session, query_for, item_ids: list[int]) -> dict[int, list]:  # noqa: ANN001
    grouped: dict[int, list] = defaultdict(list)
    for part in in_chunks(item_ids):
        for row in session.execute(query_for(part)).all():
            grouped[row[0]].append(row)
    return grouped


def checks_passed(events: list, flagged: set[str]) -> dict[str, Any]:
    """Each check that ran on the item and holds no flag now -> the cftools version that last ran it (None for
    runs recorded before versions were)."""
    versions: dict[str, Any] = {}
    for _, detail in events:  # oldest first: the last run of a check wins
        for code in (detail or {}).get("checks", []):
            versions[code] = (detail or {}).get("cftools_version")
    return {code: version for code, version in sorted(versions.items()) if code not in flagged}


def annotation_summary(tasks: list, judgments: list) -> dict[str, Any] | None:
    """Decision (adjudication wins over verification) and whether the annotators agreed."""
    if not tasks:
        return None
    decided = [t for t in tasks if t.decision]
    adjudicated = [t for t in decided if t.purpose == "adjudicate"]
    final = (adjudicated or decided or [None])[-1]
    verify_ids = {t.id for t in tasks if t.purpose != "adjudicate"}
    answers = [(j.related, j.answer_correct) for j in judgments if j.task_id in verify_ids]
    return {
        "decision": final.decision if final else None,
        "adjudicated": bool(adjudicated),
        "judgments": len(answers),
        "agreed": (len(set(answers)) == 1) if len(answers) >= 2 else None,
    }


ITEM_COLUMNS = ("id", "key", "kind", "group", "status", "question", "answer", "proposed_answer", "origin",
                "generation_id", "data", "dataset", "updated_at")
SOURCE_COLUMNS = ("dataset", "external_id", "image_ref", "question", "answer", "answer_type")
IMAGE_COLUMNS = ("sha256", "format", "path")


def read_item_rows(session, statuses: list[str]) -> list[tuple]:  # noqa: ANN001
    """(item, source or None, image or None) for the items in STATUSES, sorted by key; plain column rows,
    not ORM objects (several times faster for large releases)."""
    tables = {"item": Item.__table__, "source": SourceQuestion.__table__, "image": Image.__table__}
    wanted = {"item": ITEM_COLUMNS, "source": SOURCE_COLUMNS, "image": IMAGE_COLUMNS}
    columns = [tables[t].c[name].label(f"{t}_{name}") for t, names in wanted.items() for name in names]
    query = (select(*columns)
             .outerjoin(tables["source"], tables["source"].c.id == tables["item"].c.source_id)
             .outerjoin(tables["image"], tables["image"].c.id == tables["source"].c.image_id)
             .where(tables["item"].c.status.in_(statuses)).order_by(tables["item"].c.key))
    out = []
    for row in session.execute(query).mappings():
        parts = [SimpleNamespace(**{name: row[f"{t}_{name}"] for name in names}) for t, names in wanted.items()]
        item, source, image = parts
        out.append((item, source if source.dataset is not None else None,
                    image if image.sha256 is not None else None))
    return out


def collect_items(store: Store, statuses: Iterable[str], splits: dict[str, float]) -> list[ExportItem]:
    """The items in STATUSES as records with provenance, sorted by id, splits assigned."""
    statuses = list(statuses)
    with store.session() as session:
        rows = read_item_rows(session, statuses)
        item_ids = [item.id for item, _, _ in rows]
        generation_ids = sorted({item.generation_id for item, _, _ in rows if item.generation_id})
        generations = {}
        for part in in_chunks(generation_ids):
            for gen in session.execute(select(Generation).where(Generation.id.in_(part))).scalars():
                generations[gen.id] = gen
        flags = _by_item(session,
                         lambda part: select(CheckFlag.item_id, CheckFlag.code).where(CheckFlag.item_id.in_(part)),
                         item_ids)
        tasks = _by_item(session,
                         lambda part: select(AnnotationTask.item_id, AnnotationTask)
                         .where(AnnotationTask.item_id.in_(part)).order_by(AnnotationTask.id), item_ids)
        check_events = _by_item(session, lambda part: select(ItemEvent.item_id, ItemEvent.detail).where(
            ItemEvent.item_id.in_(part), ItemEvent.stage == CHECK_STAGE).order_by(ItemEvent.id), item_ids)
        task_ids = [row[1].id for rows_ in tasks.values() for row in rows_]
        judgments: dict[int, list] = defaultdict(list)
        for part in in_chunks(task_ids):
            for judgment in session.execute(select(Judgment).where(Judgment.task_id.in_(part))
                                            .order_by(Judgment.id)).scalars():
                judgments[judgment.task_id].append(judgment)
        extra_shas = sorted({sha for item, _, _ in rows for sha in data_image_shas(item.data or {})})
        extra_images = {}
        for part in in_chunks(extra_shas):
            for image in session.execute(select(Image).where(Image.sha256.in_(part))).scalars():
                extra_images[image.sha256] = image

    items = []
    for item, source, image in rows:
        data = dict(item.data or {})
        options, data = split_options(data)
        refs = []
        if image is not None:
            refs.append(ImageRef(image.sha256, image_extension(image.format), image.path))
        for sha in data_image_shas(data):
            extra = extra_images.get(sha)
            if extra is None:
                raise CftoolsError(f"item {item.key}: its data names image {sha[:12]}… which is not in the store")
            ref = ImageRef(sha, image_extension(extra.format), extra.path)
            if all(r.sha256 != sha for r in refs):
                refs.append(ref)
        if len(refs) > (image is not None):
            paths = {f"sha256:{r.sha256}": r.rel for r in refs}
            data = map_strings(data, lambda text: paths.get(text, text))
        item_tasks = [row[1] for row in tasks.get(item.id, [])]
        item_judgments = [j for t in item_tasks for j in judgments.get(t.id, [])]
        gen = generations.get(item.generation_id)
        record = {
            "id": item.key,
            "kind": item.kind,
            "group": item.group,
            "split": None,
            "verified": item.status in VERIFIED_STATUSES,
            "status": item.status,
            "image": refs[0].rel if image is not None else None,
            "image_sha256": image.sha256 if image is not None else None,
            "original_question": source.question if source else None,
            "original_answer": source.answer if source else None,
            "answer_type": record_answer_type(item.kind, item.group, source.answer_type if source else None, item.answer),
            "question": item.question,
            "answer": item.answer,
            "options": options,
            "data": data,
        }
        record = get_kind(item.kind).export_record(record)
        provenance = {
            "origin": item.origin,
            # the dataset the item came from (its licence is in the manifest's source_licences); none for
            # items made without a source
            "dataset": source.dataset if source else item.dataset,
            "source": ({"dataset": source.dataset, "external_id": source.external_id, "image_ref": source.image_ref}
                       if source else None),
            "generation": ({"generator": gen.generator, "backend": gen.backend, "model": gen.model,
                            "template_name": gen.template_name, "template_hash": gen.template_hash}
                           if gen else None),
            "check_flags": sorted({row[1] for row in flags.get(item.id, [])}),
            "checks_passed": checks_passed(check_events.get(item.id, []), {row[1] for row in flags.get(item.id, [])}),
            "annotation": annotation_summary(item_tasks, item_judgments),
            "corrected_from": item.proposed_answer if item.proposed_answer not in (None, item.answer) else None,
        }
        items.append(ExportItem(record, refs, provenance, _iso(item.updated_at)))
    assign_splits(items, splits)
    return items


def _iso(value: Any) -> str:
    return value.isoformat() if value is not None else ""


def assign_splits(items: list[ExportItem], splits: dict[str, float]) -> None:
    """Items sharing an image form one group; a group's split comes from the hash of its smallest image."""
    parent: dict[str, str] = {}

    def find(node: str) -> str:
        while parent.setdefault(node, node) != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for entry in items:
        nodes = [f"image:{ref.sha256}" for ref in entry.images] or [f"item:{entry.record['id']}"]
        for node in nodes[1:]:
            a, b = find(nodes[0]), find(node)
            if a != b:
                parent[max(a, b)] = min(a, b)  # the root is the smallest name: independent of order
    for entry in items:
        nodes = [f"image:{ref.sha256}" for ref in entry.images] or [f"item:{entry.record['id']}"]
        root = find(nodes[0])
        entry.record["split"] = choose_split(splits, root.split(":", 1)[1])


# ---------------------------------------------------------------- writing files


def json_line(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(", ", ": ")) + "\n"


def read_chunks(ref: ImageRef, source: Path) -> Iterator[bytes]:
    """The image file's bytes; one that cannot be read is named with its hash (a failed write is not this)."""
    try:
        with open(source, "rb") as src:
            while chunk := src.read(HASH_CHUNK):
                yield chunk
    except OSError as exc:
        raise CftoolsError(f"image {ref.sha256[:12]}… cannot be read from {source}: {exc.strerror or exc}") from None


def copy_image(ref: ImageRef, release: Path) -> None:
    """Copy one image under its content-addressed name, checking the bytes still have that hash."""
    source = Path(ref.path)
    target = release / ref.rel
    if target.exists():
        return
    digest = hashlib.sha256()
    with open(target, "wb") as dst:
        for chunk in read_chunks(ref, source):
            digest.update(chunk)
            dst.write(chunk)
    if digest.hexdigest() != ref.sha256:
        raise CftoolsError(f"image file {source} has changed since it was ingested (its SHA-256 is no longer "
                           f"{ref.sha256[:12]}…); re-ingest it")


def copy_images(items: list[ExportItem], release: Path, progress: Progress | None) -> int:
    (release / IMAGES_DIR).mkdir()
    unique = sorted({ref.sha256: ref for entry in items for ref in entry.images}.values(), key=lambda r: r.sha256)
    for done, ref in enumerate(unique, start=1):
        copy_image(ref, release)
        if progress:
            progress("images", done, len(unique))
    return len(unique)


def write_records(items: list[ExportItem], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for entry in items:
            fh.write(json_line(entry.record))


def release_features():  # noqa: ANN201
    """The records' columns as `datasets` Features (the image column is a datasets Image)."""
    from datasets import Features, Image as ImageFeature, List, Value

    text = Value("string")
    return Features({
        "id": text, "kind": text, "group": text, "split": text, "verified": Value("bool"), "status": text,
        "image": ImageFeature(), "image_sha256": text, "original_question": text, "original_answer": text,
        "answer_type": text, "question": text, "answer": text,
        "options": {"original": List(text), "counterfactual": List(text)},
        "data": text,  # the item's shape-specific fields as a JSON object (sorted keys)
    })


def parquet_row(record: dict[str, Any], release: Path) -> dict[str, Any]:
    row = dict(record)
    if record["image"]:
        row["image"] = {"bytes": (release / record["image"]).read_bytes(), "path": record["image"]}
    row["data"] = json.dumps(record["data"], sort_keys=True, ensure_ascii=False)
    return row


def write_parquet(items: list[ExportItem], release: Path, splits: dict[str, float]) -> None:
    """One Parquet file per split, HF `datasets` layout, image bytes embedded; written deterministically
    (pyarrow writes no clock time; `created_by` names the pyarrow version)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = release_features().arrow_schema
    (release / DATA_DIR).mkdir()
    for split in splits:
        rows = [entry for entry in items if entry.record["split"] == split]
        if not rows:
            continue
        with pq.ParquetWriter(release / DATA_DIR / parquet_name(split), schema, compression="snappy") as writer:
            for start in range(0, len(rows), PARQUET_BATCH):
                batch = [parquet_row(entry.record, release) for entry in rows[start:start + PARQUET_BATCH]]
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))


def file_entries(release: Path) -> list[dict[str, Any]]:
    """Every file under RELEASE except the manifest, with size and SHA-256, sorted by path."""
    entries = []
    for path in sorted(p for p in release.rglob("*") if p.is_file()):
        rel = path.relative_to(release).as_posix()
        if rel == MANIFEST_NAME:
            continue
        entries.append({"path": rel, "size": path.stat().st_size, "sha256": hash_file(path)})
    return entries


def store_label(store: Store) -> str:
    """The store's kind only ("sqlite", "postgresql"): a release carries no path, user or host name."""
    return make_url(store.url).get_backend_name()


def counts_of(items: list[ExportItem], n_images: int) -> dict[str, Any]:
    def count(key: Callable[[dict], Any]) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for entry in items:
            out[str(key(entry.record))] += 1
        return dict(sorted(out.items()))

    return {
        "items": len(items),
        "verified": sum(e.record["verified"] for e in items),
        "unverified": sum(not e.record["verified"] for e in items),
        "images": n_images,
        "items_without_image": sum(e.record["image"] is None for e in items),
        "by_kind": count(lambda r: r["kind"]),
        "by_group": count(lambda r: r["group"]),
        "by_split": count(lambda r: r["split"]),
        "by_status": count(lambda r: r["status"]),
    }


# ---------------------------------------------------------------- the release folder


@dataclass
class ExportResult:
    path: Path
    format: str
    n_items: int
    n_verified: int
    n_unverified: int
    n_images: int
    by_split: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    manifest_sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Temporary folders of TARGET left by an export that was killed (its process is gone)."""
    removed = []
    for path in sorted(target.parent.glob(f".{target.name}.pid*")):
        match = re.match(rf"^\.{re.escape(target.name)}\.pid(\d+)\.", path.name)
        if match and path.is_dir() and not _process_alive(int(match.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def atomic_release(target: Path, force: bool, write: Callable[[Path], None]) -> None:
    """Run WRITE on a temporary folder beside TARGET, then rename it into place. The temporary folder
    is named after this process, so a later export removes it if this one is killed."""
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists; pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    prefix = f".{target.name}.pid{os.getpid()}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=target.parent))
    old = None
    try:
        os.chmod(tmp, 0o755)
        with naming_the_file(target):  # a write that ran out of space names the release, not a temporary file
            write(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=prefix, suffix=".old", dir=target.parent))
            os.rename(target, old / "release")
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "release").exists() and not target.exists():
            os.rename(old / "release", target)  # put the previous release back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def export_formats() -> dict[str, Any]:
    """`native`, then every kind's peer formats: name -> (kind, ExportFormat), None for native."""
    formats: dict[str, Any] = {FORMAT_NATIVE: None}
    for name, kind in sorted(all_kinds().items()):
        for spec in kind.export_formats:
            formats.setdefault(spec.name, (name, spec))
    formats.update({spec.name: (None, spec) for spec in shared_formats()})  # lmms-eval, vlmevalkit: every kind
    return formats


def statuses_for(include_unverified: bool, include_in_review: bool = False) -> tuple[str, ...]:
    return (VERIFIED_STATUSES + (UNVERIFIED_STATUSES if include_unverified else ())
            + ((IN_REVIEW,) if include_in_review else ()))


def refuse_invalid_records(records: list[dict[str, Any]]) -> None:
    """The last guard of the decision rules: a release never holds a record its kind calls invalid."""
    problems = [f"item {r['id']}: {problem}" for r in records
                if (problem := get_kind(r["kind"]).record_problem(r)) is not None]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CftoolsError(f"export refused: {problems[0]}{more}; reject or re-verify the item")


def export_release(workspace: Workspace, name: str, version: str, out_dir: Path | None = None,
                   fmt: str = FORMAT_NATIVE, include_unverified: bool = False,
                   splits: dict[str, float] | None = None, force: bool = False,
                   progress: Progress | None = None, include_in_review: bool = False,
                   options: dict[str, Any] | None = None, licence: str | None = None) -> ExportResult:
    """Write the release NAME-VERSION (the accepted items; with include_unverified also drafts and checked
    items, with include_in_review also items under review, marked unverified) and record it in the store.

    The release's licence is LICENCE, else the workspace's `[release] license`; the latter is refused over
    source datasets under another or an unknown licence (an explicit LICENCE is the exporter's decision)."""
    check_plain_name(name, "release name")
    check_plain_name(version, "version")
    formats = export_formats()
    if fmt not in formats:
        raise CftoolsError(f"unknown format {fmt!r}; choose one of {', '.join(formats)}")
    splits = splits or dict(DEFAULT_SPLITS)
    for split in splits:
        check_plain_name(split, "split name")
    out_dir = Path(out_dir) if out_dir else workspace.path(DEFAULT_OUT_DIR)
    dir_name = release_dir_name(name, version) + ("" if fmt == FORMAT_NATIVE else f"-{fmt}")
    target = out_dir / dir_name
    if target.exists() and not force:
        raise CftoolsError(f"{target} already exists; pass --force to replace it")

    store = workspace.store
    items = collect_items(store, statuses_for(include_unverified, include_in_review), splits)
    refuse_invalid_records([e.record for e in items])
    result = ExportResult(path=target.resolve(), format=fmt, n_items=0, n_verified=0, n_unverified=0, n_images=0)
    kept = items
    peer = formats[fmt]
    if peer is not None:
        kind, spec = peer
        kept = [e for e in items if kind in (None, e.record["kind"]) and spec.keeps(e.record)]
        result.skipped = len(items) - len(kept)
    licensing = release_licensing(workspace, kept, licence)

    def write(folder: Path) -> None:
        result.n_images = copy_images(kept, folder, progress)
        if fmt == FORMAT_NATIVE:
            write_native(kept, folder, splits, workspace, name, version, progress, licensing)
        elif spec.takes_context:
            from cftools.kinds.base import ExportContext

            spec.write(kept, folder, name, splits, context=ExportContext(
                workspace, name, version, dict(options or {}), include_unverified, licensing))
        else:
            spec.write(kept, folder, name, splits)
        write_release_extras(kept, folder, workspace, name, version, fmt, licensing)  # browse.html, croissant.json
        write_manifest(kept, folder, workspace, name, version, fmt, result.n_images, licensing)
        result.n_items = len(kept)
        result.n_verified = sum(e.record["verified"] for e in kept)
        result.n_unverified = result.n_items - result.n_verified
        result.by_split = counts_of(kept, result.n_images)["by_split"]
        # Recorded before the rename: a kill between the two leaves a record without a folder (the rerun writes
        # the folder and records it again), never a finished folder the store does not know, which the rerun
        # would refuse to replace.
        result.manifest_sha256 = hash_file(folder / MANIFEST_NAME)
        record_release(store, name, version, fmt, target, result)

    atomic_release(target, force, write)
    return result


@dataclass
class Licensing:
    """The release's licence, whether the exporter gave it (--licence), and its sources' licences."""

    licence: str | None
    given: bool
    sources: dict[str, str]  # dataset -> licence
    items_per_source: dict[str, int]

    def card_rows(self) -> list[dict[str, Any]]:
        return [{"dataset": d, "licence": lic, "n_items": self.items_per_source[d]} for d, lic in self.sources.items()]


def release_licensing(workspace: Workspace, items: list[ExportItem], licence: str | None) -> Licensing:
    """The licences of the sources ITEMS come from, and the release licence; refuses (before anything is
    written) to stamp the workspace's licence over sources under another or an unknown licence."""
    given = clean_licence(licence)
    section = workspace.section("release")
    stamped = given or clean_licence(section.get("license") or section.get("licence"))
    per_source = Counter(e.provenance["dataset"] for e in items if e.provenance.get("dataset"))
    with workspace.store.session() as session:
        sources = licences_of(session, per_source)
    conflicts = licence_conflicts(stamped, sources) if stamped and not given else {}
    if conflicts:
        listed = ", ".join(f"{dataset} ({lic})" for dataset, lic in sorted(conflicts.items()))
        raise CftoolsError(
            f"will not stamp the licence {stamped} ([release] license in cftools.toml) over sources under other "
            f"or unknown licences: {listed}; state a source's licence with `cftools ingest ... --licence`, or "
            f"give the release's licence explicitly with `cftools export --licence LICENCE`")
    return Licensing(stamped, given is not None, sources, dict(per_source))


def write_native(items: list[ExportItem], folder: Path, splits: dict[str, float], workspace: Workspace,
                 name: str, version: str, progress: Progress | None, licensing: Licensing) -> None:
    from cftools.release.datacard import write_card

    write_records(items, folder / RECORDS_NAME)
    if progress:
        progress("records", 1, 3)
    write_parquet(items, folder, splits)
    if progress:
        progress("records", 2, 3)
    agreement = agreement_rows(workspace.store, [e.record["id"] for e in items])
    write_card(folder, [e.record for e in items], [e.provenance for e in items], agreement,
               name=name, version=version, license=licensing.licence, license_given=licensing.given,
               source_licences=licensing.card_rows(), splits=list(splits),
               data_as_of=max((e.updated_at for e in items), default=""))
    if progress:
        progress("records", 3, 3)


def agreement_rows(store: Store, item_keys: Iterable[str]) -> list[dict[str, Any]]:
    """Inter-annotator agreement of the released items only (not of the whole store), per kind and question; and
    of the released kinds' own tasks (a MuCR selection is made on the pair before the released item exists)."""
    from cftools.annotate.rules import agreement, label_agreement
    from cftools.annotate.status import _own_task_pairs, agreement_project_name, verify_ratings

    item_keys = list(item_keys)
    with store.session() as session:
        ratings = verify_ratings(session, item_keys)
        kinds = {kind for part in in_chunks(item_keys)
                 for kind in session.execute(select(Item.kind).where(Item.key.in_(part)).distinct()).scalars()}
        own = _own_task_pairs(session)
    rows = []
    for kind in sorted(ratings):
        for question, s in agreement(ratings[kind]).items():
            if s["n_items"]:
                rows.append({"project": agreement_project_name(kind), "question": question, **s})
    for name, pairs in sorted(own.items()):
        if name.split(" ", 1)[0] in kinds:
            rows += [{"project": name, "question": question, "n_items": s["n_pairs"], "krippendorff_alpha": None, **s}
                     for question, s in label_agreement(pairs).items()]
    return rows


def write_manifest(items: list[ExportItem], folder: Path, workspace: Workspace, name: str, version: str,
                   fmt: str, n_images: int, licensing: Licensing) -> None:
    store = workspace.store
    manifest = {
        "name": name,
        "version": version,
        "format": fmt,
        "schema_version": SCHEMA_VERSION,
        "store_schema_version": store.schema_version,
        "cftools_version": __version__,
        "store": store_label(store),
        "data_as_of": max((e.updated_at for e in items), default=None),
        "license": licensing.licence,
        "source_licences": licensing.sources,
        "counts": counts_of(items, n_images),
        "files": file_entries(folder),
        "provenance": {e.record["id"]: e.provenance for e in items},
    }
    write_manifest_json(folder / MANIFEST_NAME, manifest)


def write_manifest_json(path: Path, manifest: dict[str, Any]) -> None:
    """The manifest as indented JSON with one line per item's provenance (sorted keys throughout); the
    same text `json.dumps(indent=2)` would parse to, written several times faster for large releases."""
    parts = []
    for key in sorted(manifest):
        value = manifest[key]
        if key == "provenance" and value:
            lines = [f"    {json.dumps(item_id, ensure_ascii=False)}: "
                     f"{json.dumps(value[item_id], sort_keys=True, ensure_ascii=False)}" for item_id in sorted(value)]
            text = "{\n" + ",\n".join(lines) + "\n  }"
        else:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, indent=2).replace("\n", "\n  ")
        parts.append(f"  {json.dumps(key)}: {text}")
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n", encoding="utf-8")


def record_release(store: Store, name: str, version: str, fmt: str, path: Path, result: ExportResult) -> None:
    with store.write() as session:
        row = session.execute(select(Release).where(Release.name == name, Release.version == version,
                                                    Release.format == fmt)).scalar_one_or_none()
        if row is None:
            row = Release(name=name, version=version, format=fmt, path=str(path))
        row.path = str(path.resolve())
        row.n_items = result.n_items
        row.manifest_sha256 = result.manifest_sha256
        row.created_at = utcnow()
        session.add(row)


def count_exportable(store: Store, include_unverified: bool) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(Item)
                               .where(Item.status.in_(statuses_for(include_unverified)))).scalar_one()
