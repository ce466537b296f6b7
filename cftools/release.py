"""The release format: names of the files in a release folder, and reading a release back.

A native release folder `<out>/<NAME>-<VERSION>/` holds:

    records.jsonl                          one JSON object per item, sorted by id (UTF-8, sorted keys)
    data/<split>-00000-of-00001.parquet    the same records in the Hugging Face `datasets` layout,
                                           with an `image` column (datasets Image: struct {bytes, path})
    images/<sha256>.<ext>                  the images, named by the SHA-256 of their bytes
    manifest.json                          every file with its size and SHA-256, counts, provenance
    README.md                              the data card
    plots/*.png                            the card's plots

Every record has the fields in RECORD_FIELDS; `image` is a path relative to the release folder
(`images/<sha256>.<ext>`) or null.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from cftools.errors import CftoolsError, InputError

SCHEMA_VERSION = "1"
DEFAULT_OUT_DIR = "releases"
RECORDS_NAME = "records.jsonl"
MANIFEST_NAME = "manifest.json"
CARD_NAME = "README.md"
DATA_DIR = "data"
IMAGES_DIR = "images"
PLOTS_DIR = "plots"
CVQA_CSV_NAME = "questions.csv"
FORMAT_NATIVE = "native"
FORMAT_CVQA = "cvqa"
FORMATS = (FORMAT_NATIVE, FORMAT_CVQA)

RECORD_FIELDS = (
    "id", "kind", "group", "split", "verified", "status", "image", "image_sha256",
    "original_question", "original_answer", "answer_type", "question", "answer", "options", "data",
)

_IMAGE_PATH = re.compile(r"^images/[0-9a-f]{64}\.[a-z0-9]{1,5}$")


def release_dir_name(name: str, version: str) -> str:
    return f"{name}-{version}"


def parquet_name(split: str) -> str:
    return f"{split}-00000-of-00001.parquet"


def load_manifest(release_dir: Path | str) -> dict[str, Any]:
    path = Path(release_dir) / MANIFEST_NAME
    if not path.is_file():
        raise CftoolsError(f"{release_dir} is not a cftools release (no {MANIFEST_NAME})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None


def load_records(release_dir: Path | str) -> list[dict[str, Any]]:
    """The records of a native release (checks that it has a manifest)."""
    release_dir = Path(release_dir)
    load_manifest(release_dir)
    path = release_dir / RECORDS_NAME
    if not path.is_file():
        raise CftoolsError(f"{release_dir} has no {RECORDS_NAME} (is it a native release?)")
    records = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"malformed JSON: {exc.msg}", f"line {number}") from None
            if not isinstance(record, dict) or "id" not in record:
                raise InputError(path, "expected a JSON object with an 'id'", f"line {number}")
            records.append(record)
    return records


def resolve_image(release_dir: Path | str, record: dict[str, Any]) -> Path | None:
    """The image file of a record, or None when it has none. Never a path outside the release."""
    rel = record.get("image")
    if not rel:
        return None
    if not isinstance(rel, str) or not _IMAGE_PATH.match(rel):
        raise InputError(Path(release_dir) / RECORDS_NAME, f"image path {rel!r} is not images/<sha256>.<ext>",
                         f"id {record.get('id')}")
    return Path(release_dir) / rel
