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

Further images an item uses (a MuCR cause/effect pair and its distractor images) are named in the
item's `data` in the store as strings `sha256:<hex>` (at any depth); the release writes each as its
path `images/<sha256>.<ext>`, and `ingest release` turns those paths back into `sha256:<hex>`.
"""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from cftools.errors import CftoolsError, InputError

SCHEMA_VERSION = "1"
DEFAULT_OUT_DIR = "releases"
RECORDS_NAME = "records.jsonl"
MANIFEST_NAME = "manifest.json"
CARD_NAME = "README.md"
DATA_DIR = "data"
IMAGES_DIR = "images"
PLOTS_DIR = "plots"
FORMAT_NATIVE = "native"

RECORD_FIELDS = (
    "id", "kind", "group", "split", "verified", "status", "image", "image_sha256",
    "original_question", "original_answer", "answer_type", "question", "answer", "options", "data", "verification",
)

_IMAGE_PATH = re.compile(r"^images/[0-9a-f]{64}\.[a-z0-9]{1,5}$")


def is_release_image_path(value: object) -> bool:
    return isinstance(value, str) and bool(_IMAGE_PATH.match(value))


def data_image_paths(value: Any, label: str = "") -> list[tuple[str, str]]:
    """(where in the value, path) of every release image path in VALUE (an item's data), at any depth."""
    if isinstance(value, str):
        return [(label, value)] if is_release_image_path(value) else []
    if isinstance(value, list):
        return [found for n, v in enumerate(value) for found in data_image_paths(v, f"{label}[{n}]")]
    if isinstance(value, dict):
        return [found for key in sorted(value)
                for found in data_image_paths(value[key], f"{label}.{key}" if label else str(key))]
    return []


def record_image_paths(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, path) of every image a record names, once each: its `image`, then those in its data (a MuCR pair's
    cause and effect images)."""
    found = [("image", record["image"])] if record.get("image") else []
    seen = {path for _, path in found}
    for label, path in data_image_paths(record.get("data") or {}):
        if path not in seen:
            found.append((label, path))
            seen.add(path)
    return found


def map_strings(value: Any, fn) -> Any:  # noqa: ANN001
    """VALUE with FN applied to every string in it (through lists and dict values)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    return value


def release_dir_name(name: str, version: str) -> str:
    return f"{name}-{version}"


def parquet_name(split: str) -> str:
    return f"{split}-00000-of-00001.parquet"


def hash_file(path: Path) -> str:
    from cftools.images import sha256_file

    return sha256_file(path)


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
    return [record for _, record in stream_records(path)]


def stream_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a records.jsonl, one line at a time; a line that is no JSON object with an 'id' is
    an error naming the file and line."""
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
            yield number, record


def resolve_image(release_dir: Path | str, record: dict[str, Any]) -> Path | None:
    """The image file of a record, or None when it has none. Never a path outside the release."""
    rel = record.get("image")
    if not rel:
        return None
    if not isinstance(rel, str) or not _IMAGE_PATH.match(rel):
        raise InputError(Path(release_dir) / RECORDS_NAME, f"image path {rel!r} is not images/<sha256>.<ext>",
                         f"id {record.get('id')}")
    return Path(release_dir) / rel


def content_sha256(entries: list[tuple[str, str]]) -> str:
    """SHA-256 of a release's content: its files (all but the manifest) as sorted (path, SHA-256) pairs."""
    import hashlib

    return hashlib.sha256(json.dumps(sorted(entries)).encode("utf-8")).hexdigest()


def manifest_content_sha256(release_dir: Path | str) -> str:
    """The content SHA-256 the manifest describes (equal to `files_content_sha256` for a release that verifies)."""
    return content_sha256([(e["path"], e["sha256"]) for e in load_manifest(release_dir).get("files") or []])


def files_content_sha256(release_dir: Path | str) -> str:
    """The content SHA-256 of the files as they are now, each re-hashed (for a release that was not verified)."""
    release_dir = Path(release_dir)
    return content_sha256([(path.relative_to(release_dir).as_posix(), hash_file(path))
                           for path in release_dir.rglob("*")
                           if path.is_file() and path.relative_to(release_dir).as_posix() != MANIFEST_NAME])


@contextmanager
def stage(progress: Optional[Callable[[str, int, int], None]], what: str) -> Iterator[None]:
    """A stage of one step shown as 0/1 until it is done (its length is not counted in parts)."""
    if progress:
        progress(what, 0, 1)
    yield
    if progress:
        progress(what, 1, 1)
