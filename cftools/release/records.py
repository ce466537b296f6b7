"""Writing a release's files: images under their content hash, records.jsonl, Parquet, the native card.

Deterministic: JSON is written with sorted keys, Parquet and PNG files carry no clock time. The release's own
file names come from content hashes; names found in input data (image file names, paths) are never used as paths.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cftools.errors import CftoolsError
from cftools.release.layout import DATA_DIR, IMAGES_DIR, RECORDS_NAME, parquet_name
from cftools.release.selection import ExportItem, ImageRef, released_image_bytes

if TYPE_CHECKING:
    from cftools.release.release import Release

PARQUET_BATCH = 1000

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def json_line(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(", ", ": ")) + "\n"


def copy_image(ref: ImageRef, release: Path) -> None:
    """Write one image under its content-addressed name: the stored file without its metadata."""
    target = release / ref.rel
    if target.exists():
        return
    data = released_image_bytes(ref)
    if hashlib.sha256(data).hexdigest() != ref.released_sha256:
        raise CftoolsError(f"image file {ref.path} changed while it was exported; export again")
    target.write_bytes(data)


def copy_images(items: list[ExportItem], release: Path, progress: Progress | None) -> int:
    (release / IMAGES_DIR).mkdir()
    unique = sorted({ref.rel: ref for entry in items for ref in entry.images}.values(), key=lambda r: r.rel)
    if progress and unique:
        progress("images", 0, len(unique))
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
        # how many people judged the item, their pseudonymous ids, whether each was on a server proven their own,
        # and whether it was blind (and why not)
        "verification": {"people": Value("int32"), "annotators": List(text), "separate_servers": Value("bool"),
                         "how": text, "blind": Value("bool"), "why_not_blind": text},
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


def write_native(release: Release) -> None:
    """The records, Parquet and the card (with the release's changes since the previous one and the annotators'
    figures)."""
    from cftools.release.datacard import write_card

    progress = release.progress
    write_records(release.items, release.folder / RECORDS_NAME)
    if progress:
        progress("records", 1, 3)
    write_parquet(release.items, release.folder, release.splits)
    if progress:
        progress("records", 2, 3)
    write_card(release, preflight=card_preflight(release))
    if progress:
        progress("records", 3, 3)


def card_preflight(release: Release) -> list[str]:
    """The data card's "What this release can show" section (`cftools preflight`'s figures, from the store's
    judgments; no run of a release exists before it is written, so the detectable difference rests on assumptions)."""
    from cftools.release.preflight import figures_markdown, preflight_figures

    report = preflight_figures(release.folder, release.records,
                               {e.record["id"]: e.provenance for e in release.items}, release.workspace.store,
                               name=release.name, version=release.version)
    return figures_markdown(report) + ["", "`cftools preflight` on this folder adds the runs stored since, and the "
                                           "reviewer's checks."]
