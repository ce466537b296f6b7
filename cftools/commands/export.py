"""`cftools export`, `cftools verify` and `cftools ingest release`: thin wrappers over cftools.export."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import click
from cftools.terminal import escape

from cftools.commands.common import console, err_console, pass_workspace, print_json, release_boundary
from cftools.commands.summary import Line, always, print_lines
from cftools.progress import step_progress
from cftools.release.edited import edits_line
from cftools.release.export import ExportOptions, export_release
from cftools.release.ingest import ingest_release
from cftools.release.verify import verification_failure, verify_release
from cftools.release.selection import count_exportable
from cftools.release.splits import parse_splits
from cftools.workspace import Workspace

STAGE_LABELS = {"items": "Reading the items", "images": "Copying images", "analysis": "Annotators' figures",
                "records": "Writing records, Parquet and card", "format": "Writing the format's files",
                "extras": "Writing browse.html and croissant.json", "manifest": "Hashing files into the manifest",
                "personal data": "Scanning for personal data"}


def edits_text(edits: dict[str, int], shown: Mapping[str, Any]) -> list[str]:
    """The release's edits in one line (`edits_line`), loud when unverified edits were released."""
    line = edits_line(edits, shown["include_unverified_edits"])
    if not line:
        return []
    loud = shown["include_unverified_edits"] and edits.get("unverified")
    return [f"[bold red]{escape(line)}[/]" if loud else escape(line)]


def written(path: Path, shown: Mapping[str, Any]) -> str:
    result = shown["report"]
    splits = ", ".join(f"{name} {n}" for name, n in result.by_split.items()) or "-"
    return (f"Release written to [bold]{path}[/]: {result.n_items} items ({result.n_verified} verified, "
            f"{result.n_unverified} unverified), {result.n_images} images; splits {splits}.")


def no_items(n_items: int, shown: Mapping[str, Any]) -> str:
    hint = "" if shown["include_unverified"] else (
        f" ({count_exportable(shown['workspace'].store, True)} unverified items would be included with "
        "--include-unverified)")
    return f"[yellow]The release holds no items: no item is accepted yet{hint}.[/]"


EXPORT_LINES = (
    Line("warnings", "[yellow]warning: {value}[/]", each=True, to_stderr=True, soft_wrap=True),
    Line("path", written, when=always, soft_wrap=True),
    Line("edits", edits_text, when=always, soft_wrap=True),
    Line("changes", lambda changes, _: "Changes since the previous release: " + ", ".join(
        f"{n} {category.replace('_', ' ')}" for category, n in changes.items()) + "."),
    Line("cleared", "[yellow]a killed export's copy: {value}[/]", each=True, soft_wrap=True),
    Line("skipped", "[yellow]{value} items do not fit the {fmt} format and were left out of it.[/]"),
    Line("n_items", no_items, when=lambda n_items, _: n_items == 0),
    Line("path", "Check it with: cftools verify {value}", when=always, soft_wrap=True),
)


@click.command("export")
@click.argument("name")
@click.option("--version", "version", required=True, help="Release version, e.g. 0.1.0.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder that receives NAME-VERSION/ (default: WORKSPACE/releases).")
@click.option("--format", "fmt", default="native", show_default=True,
              help="native: records, Parquet, images, manifest and data card; lmms-eval: a task folder per kind; "
                   "vlmevalkit: VLMEvalKit TSVs; or a kind's peer format (`cftools kinds` lists them, e.g. the C-VQA "
                   "CSV). Every release has croissant.json and browse.html.")
@click.option("--include-unverified", is_flag=True,
              help="Also export draft and checked items, marked verified: false.")
@click.option("--include-unverified-edits", is_flag=True,
              help="Also release, for items people have not judged, the best-ranked edit candidate without an "
                   "unwaived flag, marked unverified in the records, the card and browse.html (by default only edits "
                   "two people accepted are released). A flagged candidate is never released as an edit.")
@click.option("--include-in-review", is_flag=True,
              help="Also export items still under annotation review, marked verified: false.")
@click.option("--split", "split_spec", metavar="NAME=FRACTION,...",
              help="Splits by hash, e.g. test=0.8,dev=0.2 (default: everything in test).")
@click.option("--licence", "--license", "licence", metavar="LICENCE",
              help="The release's licence, stamped even over sources under other or unknown licences (without "
                   "it: [release] license, refused over such sources). The card lists every source's licence.")
@click.option("--force", is_flag=True, help="Replace an existing release of this name and version.")
@click.option("--previous", metavar="RELEASE",
              help="The release this one follows (a native release folder or NAME@VERSION): the changes since it "
                   "(items added, removed, relabelled, with new images) go into the card's 'Changes since' section "
                   "and croissant.json's prov:wasRevisionOf.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (they are off under --json too).")
@pass_workspace
def export_cmd(workspace: Workspace, name: str, version: str, out_dir: Path | None, fmt: str,
               include_unverified: bool, include_in_review: bool, split_spec: str | None, licence: str | None,
               force: bool, previous: str | None, as_json: bool, include_unverified_edits: bool, quiet: bool,
               **kind_options: object) -> None:
    """Export the accepted items as the release NAME-VERSION (a verifiable, byte-reproducible folder)."""
    splits = parse_splits(split_spec)
    previous_dir = None
    if previous:
        from cftools.release.diff import release_folder

        previous_dir = release_folder(previous, workspace.store)
    with step_progress(err_console, quiet=quiet, as_json=as_json, labels=STAGE_LABELS) as shown:
        options = ExportOptions(fmt=fmt, include_unverified=include_unverified, include_in_review=include_in_review,
                                include_unverified_edits=include_unverified_edits, splits=splits, force=force,
                                licence=licence, previous=previous_dir, kind_options=kind_options)
        result = export_release(workspace, name, version, out_dir, options=options, progress=shown)
    if as_json:
        print_json(result.as_dict())  # its `warnings` list them
        return
    print_lines(EXPORT_LINES, result, console, err_console, fmt=fmt, workspace=workspace,
                include_unverified=include_unverified, include_unverified_edits=include_unverified_edits)


def annotation_words(annotation: Any, shown: Mapping[str, Any]) -> list[str]:
    from cftools.release.annotator_analysis import summary_words

    words = summary_words(annotation)
    return [f"Annotation: {escape(words)}."] if words else []


def problems(ok: bool, shown: Mapping[str, Any]) -> list[str]:
    return [f"[red]{escape(problem)}[/]" for problem in shown["report"].problems()]


VERIFY_LINES = (
    Line("ok", "[green]OK[/]: {report.checked} files in {release} match the manifest.", soft_wrap=True),
    Line("annotation", annotation_words, when=lambda _, shown: shown["report"].ok, soft_wrap=True),
    Line("ok", problems, when=lambda ok, _: not ok, to_stderr=True, soft_wrap=True),
)


@click.command("verify")
@click.argument("release", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def verify_cmd(ctx: click.Context, release: Path, as_json: bool) -> None:
    """Re-hash every file of RELEASE against its manifest, check croissant.json (the SHA-256s it lists; mlcroissant
    reads it, when installed) and scan every file for personal data (an email, a local absolute path, an image's
    metadata); exit 1 naming each changed, missing or extra file and each finding."""
    report = verify_release(release, release_boundary(ctx))
    if as_json:
        print_json(report.as_dict())
    else:
        print_lines(VERIFY_LINES, report, console, err_console, release=release)
    if report.ok:
        return
    if as_json:
        raise SystemExit(1)
    raise click.ClickException(verification_failure(report, limit=0))


INGEST_RELEASE_LINES = (
    Line("path", "[bold]{report.path}[/]: {report.n_records} records, {report.sources_added} source questions and "
                 "{report.items_added} items added, {report.images_added} images added.", when=always, soft_wrap=True),
)


@click.command("release")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--licence", "--license", "licence", metavar="LICENCE",
              help="Licence of the release's items that name no source dataset (default: the manifest's "
                   "license); the source datasets' licences come from the manifest.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_workspace
def ingest_release_cmd(workspace: Workspace, directory: Path, licence: str | None, as_json: bool) -> None:
    """Read a native release folder back into the store (images, source questions, items and statuses)."""
    report = ingest_release(workspace.store, directory, licence)
    if as_json:
        print_json(report.as_dict())
        return
    print_lines(INGEST_RELEASE_LINES, report, console, err_console)
