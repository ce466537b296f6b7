"""What every release gets beside its format's own files, and the formats that take every kind.

- `browse.html` (cftools.release.browse) and `croissant.json` (cftools.release.croissant), written into every
  release, native or peer, after the format's files and before the manifest (which lists both).
- `--format lmms-eval` (cftools.release.lmms_eval) and `--format vlmevalkit` (cftools.release.vlmevalkit): formats
  of the evaluation harnesses, holding the items of every kind (the kinds' own peer formats hold one kind each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cftools.kinds.base import ExportFormat

if TYPE_CHECKING:
    from cftools.release.release import Release


def shared_formats() -> tuple[ExportFormat, ...]:
    from cftools.release.lmms_eval import write_lmms_eval
    from cftools.release.vlmevalkit import write_vlmevalkit

    return (
        ExportFormat("lmms-eval", "an lmms-eval task folder per kind (YAML + utils.py + data; "
                     "`lmms-eval --include_path FOLDER --tasks NAME_KIND`)", write_lmms_eval),
        ExportFormat("vlmevalkit", "a VLMEvalKit custom dataset per kind (TSV with base64 images)", write_vlmevalkit),
    )


def write_release_extras(release: Release) -> list[str]:
    """browse.html and croissant.json (with the release's revision: the previous release and the changes since it;
    its analysis: the annotators' figures); returns the warnings to show the exporter."""
    from cftools.release.browse import write_browse
    from cftools.release.croissant import write_croissant

    write_browse(release)
    return write_croissant(release)
