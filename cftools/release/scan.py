"""The last guard of `cftools.boundary`: every file of a release read for personal data (an email of a person the
workspace knows, any email address, a local absolute path). Export refuses to publish a release that holds any,
`cftools verify` and `cftools preflight` fail on one.

Read: text files (JSON, JSONL, CSV, TSV, Markdown, HTML, YAML, Python) as UTF-8, Parquet files cell by cell
(pyarrow; image bytes are not text, they are read for metadata) and their key-value metadata, the images for
metadata (EXIF, XMP, text chunks, a comment: `cftools.release.image_metadata`, which export cuts), those a TSV embeds
as base64 too (VLMEvalKit's `image` column), and every file's name (a peer format names images as its input did). A
finding names the file and where (line, row and column, metadata or name) and shows the email or path only in part
(a…@example.com, /home/…)."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate
from pathlib import Path
from typing import Any, Iterator, Optional

from cftools.boundary import Boundary, outside_boundary
from cftools.errors import CftoolsError
from cftools.release.image_metadata import metadata_found

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".img", ".mpo"}
PARQUET_BATCH = 256
PER_FILE = 3  # findings kept per file: enough to say what and where


def scan_release(folder: Path, boundary: Optional[Boundary] = None) -> list[str]:
    """"FILE WHERE: what" for each piece of personal data in the release FOLDER (at most PER_FILE a file)."""
    folder = Path(folder)
    boundary = boundary or outside_boundary()
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        found += [f"{rel} name: {what}" for _, what in boundary.findings(rel)]  # a format may keep its input's names
        if path.suffix.lower() in IMAGE_SUFFIXES:
            where_what = image_findings(path)
        elif path.suffix == ".parquet":
            where_what = parquet_findings(path, boundary)
        else:
            where_what = text_findings(path, boundary)
            if path.suffix == ".tsv":
                where_what += tsv_image_findings(path)
        found += [f"{rel} {where}: {what}" for where, what in where_what]
    return found


def image_findings(path: Path) -> list[tuple[str, str]]:
    """An image's metadata (a photo's author, where it was taken, its file) by kind, never its content."""
    found = metadata_found(path.read_bytes())
    return [("metadata", metadata_words(found))] if found else []


def metadata_words(found: list[str]) -> str:
    return f"image metadata a release must not carry ({', '.join(found)})"


def tsv_image_findings(path: Path) -> list[tuple[str, str]]:
    """The images a TSV embeds as base64 (VLMEvalKit's `image` column: one, or a JSON list), read for metadata."""
    import base64
    import binascii
    import csv
    import json

    csv.field_size_limit(1 << 30)  # an image cell is long
    found: list[tuple[str, str]] = []
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        for row, cells in enumerate(csv.DictReader(fh, delimiter="\t"), start=1):
            cell = (cells.get("image") or "").strip()
            try:
                encoded = json.loads(cell) if cell.startswith("[") else [cell]
                images = [base64.b64decode(e, validate=True) for e in encoded if isinstance(e, str) and e]
            except (ValueError, binascii.Error):
                continue  # not base64 images: its text was read as text
            found += dict.fromkeys((f"row {row}, column image", metadata_words(what)) for data in images
                                   if (what := metadata_found(data)))
            if len(found) >= PER_FILE:
                break
    return found[:PER_FILE]


def text_findings(path: Path, boundary: Boundary) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    found = [(f"line {text.count(chr(10), 0, offset) + 1}", what) for offset, what in boundary.findings(text)]
    return list(dict.fromkeys(found))[:PER_FILE]  # a page on one line would name the same thing many times


def parquet_findings(path: Path, boundary: Boundary) -> list[tuple[str, str]]:
    """Findings in the text of every cell (nested lists and structs included), a batch of a column read at once."""
    import pyarrow.parquet as pq

    found: list[tuple[str, str]] = []
    row = 0
    with pq.ParquetFile(path) as parquet:
        metadata = parquet.metadata.metadata or {}  # the file's key-value metadata (datasets' features, pandas')
        found += dict.fromkeys(("metadata " + key.decode("utf-8", "replace"), what) for key, value in metadata.items()
                               for _, what in boundary.findings(value.decode("utf-8", "replace")))
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH):
            for name, column in zip(batch.schema.names, batch.columns):
                values = column.to_pylist()
                found += dict.fromkeys((f"row {row + n}, column {name}", metadata_words(what))
                                       for n, value in enumerate(values) for data in image_bytes_in(value)
                                       if (what := metadata_found(data)))
                cells = ["\n".join(strings_in(value)) for value in values]
                starts = list(accumulate((len(cell) + 1 for cell in cells[:-1]), initial=0))
                found += dict.fromkeys((f"row {row + bisect_right(starts, offset)}, column {name}", what)
                                       for offset, what in boundary.findings("\n".join(cells)))
                if len(found) >= PER_FILE:
                    return found[:PER_FILE]
            row += batch.num_rows
    return found


def image_bytes_in(value: Any) -> Iterator[bytes]:
    """The image bytes a cell holds (datasets' Image struct: `bytes` beside `path`)."""
    if isinstance(value, dict):
        if isinstance(value.get("bytes"), bytes):
            yield value["bytes"]
        for inner in value.values():
            if isinstance(inner, (dict, list, tuple)):
                yield from image_bytes_in(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from image_bytes_in(inner)


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a cell's value (bytes are not text: image bytes)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from strings_in(inner)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from strings_in(inner)


def personal_data_words(findings: list[str], limit: int = 3) -> str:
    shown = "; ".join(findings[:limit]) + (f"; and {len(findings) - limit} more" if len(findings) > limit else "")
    return f"personal data in the release: {shown}"


def refuse_personal_data(folder: Path, boundary: Boundary) -> None:
    """Export's guard: a release holding personal data is not published."""
    findings = scan_release(folder, boundary)
    if findings:
        raise CftoolsError(f"export refused: {personal_data_words(findings)}; nothing was written")
