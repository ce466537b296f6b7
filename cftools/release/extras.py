"""What every release gets beside its format's own files, and the formats that take every kind.

- `browse.html` (cftools.release.browse) and `croissant.json` (cftools.release.croissant), written into every
  release, native or peer, after the format's files and before the manifest (which lists both).
- `--format lmms-eval` (cftools.release.lmms_eval) and `--format vlmevalkit` (cftools.release.vlmevalkit): formats
  of the evaluation harnesses, holding the items of every kind (the kinds' own peer formats hold one kind each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from cftools.kinds.base import ExportFormat


def shared_formats() -> tuple[ExportFormat, ...]:
    from cftools.release.lmms_eval import write_lmms_eval
    from cftools.release.vlmevalkit import write_vlmevalkit

    return (
        ExportFormat("lmms-eval", "an lmms-eval task folder per kind (YAML + utils.py + data; "
                     "`lmms-eval --include_path FOLDER --tasks NAME_KIND`)", write_lmms_eval, takes_context=True),
        ExportFormat("vlmevalkit", "a VLMEvalKit custom dataset per kind (TSV with base64 images)", write_vlmevalkit,
                     takes_context=True),
    )


def write_release_extras(items: Sequence[Any], folder: Path, workspace: Any, name: str, version: str, fmt: str,
                         licensing: Any, revision: dict[str, Any] | None = None, analysis: Any = None) -> list[str]:
    """browse.html and croissant.json (with REVISION: the previous release and the changes since it; ANALYSIS: the
    annotators' figures); returns the warnings to show the exporter."""
    from cftools.release.browse import write_browse
    from cftools.release.croissant import write_croissant

    write_browse(folder, items, name, version, fmt)
    return write_croissant(folder, items, workspace, name, version, fmt, licensing, revision=revision,
                           analysis=analysis)
