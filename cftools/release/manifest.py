"""The release's manifest.json: every file with its size and SHA-256, counts, licences and provenance."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sqlalchemy.engine import make_url

from cftools import __version__
from cftools.release.layout import MANIFEST_NAME, SCHEMA_VERSION, hash_file
from cftools.release.selection import ExportItem
from cftools.store import Store

if TYPE_CHECKING:
    from cftools.release.release import Release


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


def write_manifest(release: Release) -> None:
    """manifest.json: the release's name, version, format, licences, counts, every file's SHA-256 and each item's
    provenance."""
    items, store, licensing = release.items, release.workspace.store, release.licensing
    manifest = {
        "name": release.name,
        "version": release.version,
        "format": release.format,
        "schema_version": SCHEMA_VERSION,
        "store_schema_version": store.schema_version,
        "cftools_version": __version__,
        "store": store_label(store),
        "data_as_of": max((e.updated_at for e in items), default=None),
        "license": licensing.licence,
        "source_licences": licensing.sources,
        "counts": counts_of(items, release.n_images),
        "files": file_entries(release.folder),
        "provenance": {e.record["id"]: e.provenance for e in items},
    }
    write_manifest_json(release.folder / MANIFEST_NAME, manifest)


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
