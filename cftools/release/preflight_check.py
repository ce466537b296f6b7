"""`cftools preflight` on a release folder: its stored eval runs, the figures (`cftools.release.preflight`) and the
reviewer's checks (`cftools.release.review`). A module apart from the figures, which export writes into the data
card: the runs are read with `cftools.evaluate.run`, which imports the export's own modules (`verify`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from cftools.release.preflight import PreflightReport, preflight_figures, release_provenance


def stored_runs(release_dir: Path, store: Any = None, run_dirs: Sequence[Path] = ()) -> list[Any]:
    """The runs of this release: RUN_DIRS as given, else the store's eval runs whose release manifest is this
    release's (newest first) and whose folder is still there."""
    from cftools.evaluate.run import load_run
    from cftools.release.layout import MANIFEST_NAME, hash_file

    if run_dirs:
        return [load_run(path) for path in run_dirs]
    if store is None or not (release_dir / MANIFEST_NAME).is_file():
        return []
    from sqlalchemy import select

    from cftools.models import EvalRun

    manifest = hash_file(release_dir / MANIFEST_NAME)
    with store.session() as session:
        rows = session.execute(select(EvalRun.out_dir, EvalRun.config)
                               .order_by(EvalRun.created_at.desc(), EvalRun.id.desc())).all()
    folders = [Path(out) for out, config in rows
               if (config or {}).get("release_manifest_sha256") == manifest and Path(out).is_dir()]
    return [load_run(folder) for folder in folders]


def run_preflight(release_dir: Path | str, store: Any = None, run_dirs: Sequence[Path] = (),
                  boundary: Any = None, progress: Any = None) -> PreflightReport:
    """`cftools preflight`: the figures and the reviewer's checks of the release folder RELEASE_DIR (BOUNDARY: the
    workspace's, for the personal-data scan). PROGRESS hears each stage ("figures", "verify", "checks")."""
    from cftools.release.layout import load_manifest, load_records, stage
    from cftools.release.review import reviewer_checks

    release_dir = Path(release_dir)
    manifest = load_manifest(release_dir)
    records = load_records(release_dir)
    with stage(progress, "figures"):
        report = preflight_figures(release_dir, records, release_provenance(release_dir), store,
                                   stored_runs(release_dir, store, run_dirs),
                                   str(manifest.get("name") or release_dir.name), str(manifest.get("version") or ""))
    report.checks = reviewer_checks(release_dir, records, manifest, boundary, progress)
    return report
