"""The reviewer's checks of `cftools preflight`: what a dataset track checks of a submission, each a named check that
passes, warns or fails (a failed one makes `preflight` exit non-zero, naming it).

- `croissant`: croissant.json is there, lists the manifest's SHA-256s and mlcroissant validates it (both from
  `cftools verify`'s `check_croissant`), and every record set it declares loads with mlcroissant, every record.
- `rai_fields`: the Responsible-AI properties: every one cftools writes (RAI_WRITTEN) and every one only people can
  write (`croissant.RELEASE_FIELDS`) is present; those still empty are named (a warning: the people's texts of
  `[release]` in cftools.toml). A property cftools writes missing from the file fails.
- `licence`: the manifest names a licence, and it is compatible with every source's licence
  (`licensing.licence_compatibility`); an incompatible one fails, an unknown one (not stated, or one the rule
  does not know) warns.
- `sha256`: every file against the manifest (`cftools verify`: changed, missing and extra files, and the kinds'
  rules of each record).
- `images`: every image file of the release opens with Pillow, passes `verify()` and decodes (`load()`).
- `personal_data`: no file holds an email of a person the workspace knows, any email address or a local absolute
  path, and no image metadata that could name a person, a place or a file (`cftools.release.scan`: text, Parquet
  cells, images, file names).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

PASS, WARN, FAIL = "pass", "warn", "fail"
# The RAI properties croissant.json always carries when cftools writes it (`croissant.croissant_document`).
RAI_WRITTEN = ("rai:dataCollection", "rai:dataCollectionType", "rai:dataAnnotationProtocol",
               "rai:dataAnnotationPlatform", "rai:dataAnnotationAnalysis", "rai:dataLimitations",
               "rai:hasSyntheticData", "rai:machineAnnotationTools", "rai:dataPreprocessingProtocol")
SHOWN_PROBLEMS = 3


@dataclass
class Check:
    name: str
    status: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return dict(self.__dict__)


def listed(problems: Sequence[str]) -> str:
    return "; ".join(problems[:SHOWN_PROBLEMS]) + (f"; and {len(problems) - SHOWN_PROBLEMS} more"
                                                    if len(problems) > SHOWN_PROBLEMS else "")


def load_croissant(release_dir: Path) -> dict[str, Any] | None:
    from cftools.release.croissant import CROISSANT_NAME

    try:
        doc = json.loads((release_dir / CROISSANT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def record_set_problems(release_dir: Path) -> tuple[list[str], int]:
    """(what fails, record sets loaded): every record set of croissant.json read whole with mlcroissant."""
    from cftools.release.croissant import CROISSANT_NAME

    try:
        import mlcroissant as mlc
    except ImportError:
        return ["mlcroissant is not installed (pip install cftools[export])"], 0
    try:
        dataset = mlc.Dataset(jsonld=str(release_dir / CROISSANT_NAME))
    except Exception as exc:  # noqa: BLE001 - mlcroissant's errors are of many types; each is a finding
        return [f"mlcroissant cannot read it: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"], 0
    problems, loaded = [], 0
    for record_set in dataset.metadata.record_sets:
        try:
            for _ in dataset.records(record_set.uuid):
                pass
            loaded += 1
        except Exception as exc:  # noqa: BLE001
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            problems.append(f"record set {record_set.name!r} does not load: {first}")
    return problems, loaded


def croissant_check(release_dir: Path, verify_problems: Sequence[str]) -> Check:
    from cftools.release.croissant import CROISSANT_NAME

    if not (release_dir / CROISSANT_NAME).is_file():
        return Check("croissant", FAIL, f"{CROISSANT_NAME} is missing")
    problems = [p for p in verify_problems if p.startswith(f"{CROISSANT_NAME}:")]
    if problems:
        return Check("croissant", FAIL, listed(problems))
    failed, loaded = record_set_problems(release_dir)
    if failed:
        return Check("croissant", FAIL, listed(failed))
    return Check("croissant", PASS, f"{CROISSANT_NAME} validated by mlcroissant; {loaded} record sets loaded whole")


def rai_check(release_dir: Path) -> Check:
    from cftools.release.croissant import RELEASE_FIELDS

    doc = load_croissant(release_dir)
    if doc is None:
        return Check("rai_fields", FAIL, "croissant.json is missing or not JSON")
    people = [prop for prop in RELEASE_FIELDS.values() if prop.startswith("rai:")]
    missing = [prop for prop in RAI_WRITTEN if prop not in doc]
    empty = [prop for prop in dict.fromkeys([*RAI_WRITTEN, *people]) if prop in doc and doc[prop] in ("", [], None)]
    empty += [prop for prop in people if prop not in doc and prop not in RAI_WRITTEN]
    if missing:
        return Check("rai_fields", FAIL, f"missing: {', '.join(missing)}"
                     + (f"; still empty: {', '.join(empty)}" if empty else ""))
    if empty:
        return Check("rai_fields", WARN, f"present; still empty: {', '.join(empty)} (write them under [release] in "
                                         "cftools.toml and export again)")
    return Check("rai_fields", PASS, "every RAI field present and filled")


def licence_check(manifest: dict[str, Any]) -> Check:
    from cftools.release.licensing import INCOMPATIBLE, UNKNOWN_COMPATIBILITY, licence_compatibility

    licence = manifest.get("license")
    sources = manifest.get("source_licences") or {}
    if not licence or str(licence).strip().lower() == "unknown":
        return Check("licence", WARN, "the release states no licence (`cftools export --licence`)")
    verdicts = {dataset: licence_compatibility(str(licence), str(lic)) for dataset, lic in sorted(sources.items())}
    bad = [f"{d} ({sources[d]})" for d, v in verdicts.items() if v == INCOMPATIBLE]
    unsure = [f"{d} ({sources[d]})" for d, v in verdicts.items() if v == UNKNOWN_COMPATIBILITY]
    if bad:
        return Check("licence", FAIL, f"{licence} is not compatible with the sources {', '.join(bad)}")
    if unsure:
        return Check("licence", WARN, f"{licence}; cannot tell whether it is compatible with {', '.join(unsure)}")
    return Check("licence", PASS, f"{licence}, compatible with every source's licence" if sources
                 else f"{licence} (no source dataset named)")


def sha256_check(report: Any) -> Check:
    from cftools.release.croissant import CROISSANT_NAME

    problems = [p for p in report.problems() if not p.startswith(f"changed: {CROISSANT_NAME}:")
                and not p.startswith("personal data: ")]
    if problems:
        return Check("sha256", FAIL, listed(problems))
    return Check("sha256", PASS, f"{report.checked} files match the manifest's SHA-256")


def image_files(release_dir: Path, records: Sequence[dict[str, Any]]) -> list[str]:
    """The release's image files: those under images/ and every image path a record names."""
    from cftools.release.layout import IMAGES_DIR, record_image_paths

    found = {p.relative_to(release_dir).as_posix() for p in (release_dir / IMAGES_DIR).rglob("*") if p.is_file()} \
        if (release_dir / IMAGES_DIR).is_dir() else set()
    found |= {path for record in records for _, path in record_image_paths(record)}
    return sorted(found)


def unreadable(path: Path) -> str | None:
    """Why Pillow cannot read the image at PATH (verify, then a full decode), or None."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:  # verify() leaves the image unusable: open again to decode it
            image.load()
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for a bad file
        return f"{type(exc).__name__}: {exc}"
    return None


def images_check(release_dir: Path, records: Sequence[dict[str, Any]]) -> Check:
    paths = image_files(release_dir, records)
    problems = [f"{rel}: {why}" for rel in paths if (why := unreadable(release_dir / rel))]
    if problems:
        return Check("images", FAIL, f"{len(problems)} of {len(paths)} images unreadable: {listed(problems)}")
    return Check("images", PASS, f"{len(paths)} images open, verify and decode with Pillow")


def personal_data_check(report: Any) -> Check:
    if report.personal:
        return Check("personal_data", FAIL, listed(report.personal))
    return Check("personal_data", PASS, "no email address, no local path and no image metadata in any file")


def reviewer_checks(release_dir: Path, records: Sequence[dict[str, Any]], manifest: dict[str, Any],
                    boundary: Any = None, progress: Any = None) -> list[Check]:
    """The checks; BOUNDARY: the workspace's (its people and folders), else any email and local path. PROGRESS
    (`cftools.release.records.Progress`) hears the stages "verify" (hashing and scanning every file) and "checks"."""
    from cftools.boundary import outside_boundary
    from cftools.release.layout import stage
    from cftools.release.verify import verify_release

    with stage(progress, "verify"):
        report = verify_release(release_dir, boundary or outside_boundary())
    with stage(progress, "checks"):
        return [croissant_check(release_dir, report.mismatched), rai_check(release_dir), licence_check(manifest),
                sha256_check(report), images_check(release_dir, records), personal_data_check(report)]
