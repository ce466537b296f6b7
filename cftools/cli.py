"""The `cftools` command line: thin wrappers over the library modules."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from sqlalchemy.engine import make_url
from rich.table import Table

from cftools import __version__
from cftools.commands.common import console, get_workspace, pass_workspace, print_json
from cftools.errors import CftoolsError
from cftools.ingest import IngestReport, ingest_cvqa, ingest_table, ingest_vqav2
from cftools.overview import item_detail, store_counts
from cftools.workspace import Workspace, init_workspace


class CftoolsGroup(click.Group):
    """Turns the library's errors into one clear line and a non-zero exit."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except CftoolsError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=CftoolsGroup)
@click.version_option(__version__, prog_name="cftools")
@click.option("-w", "--workspace", type=click.Path(file_okay=False, path_type=Path),
              help="Workspace folder (default: $CFTOOLS_WORKSPACE, then the current folder).")
def main(workspace: Path | None) -> None:
    """Author, verify, release and evaluate counterfactual multimodal benchmarks.

    The flow is ingest -> generate -> check -> annotate -> export -> eval, over one item store.
    """


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--db", "db_url", help="SQLAlchemy URL of the store (default: a SQLite file in the workspace). "
                                     "A password in it is used now and never written to cftools.toml.")
@click.option("--password-env", help="Variable that holds the store's password later (default: PGPASSWORD).")
def init(directory: Path, db_url: str | None, password_env: str | None) -> None:
    """Create a workspace in DIRECTORY: cftools.toml and the item store."""
    workspace = init_workspace(directory, db_url, password_env)
    console.print(f"Workspace ready at [bold]{workspace.root}[/] (store: {workspace.store.safe_url}, "
                  f"schema {workspace.store.schema_version})")
    if db_url and make_url(db_url).password is not None:
        console.print(f"The password was not written to cftools.toml; set ${password_env or 'PGPASSWORD'} "
                      "when you use this workspace.")
    workspace.close()


@main.group()
def ingest() -> None:
    """Read source questions, images and existing items into the store."""


def _report_path(workspace: Workspace, report: Path | None, name: str) -> Path:
    return report or workspace.path("reports", f"ingest-{Path(name).stem}-skipped.jsonl")


def _print_ingest(report: IngestReport, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    console.print(
        f"[bold]{report.path}[/] ({report.dataset}): {report.n_records} records, "
        f"{report.sources_added} source questions and {report.items_added} items added, "
        f"{report.images_added} images added, {report.images_attached} records got an image, "
        f"{report.missing_images} still without an image.")
    if report.bad:
        console.print(f"[yellow]{len(report.bad)} bad records skipped; listed in {report.report_path}[/]")


skip_bad_option = click.option("--skip-bad", is_flag=True,
                               help="Skip bad records and list them in a report file instead of stopping.")
report_option = click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
                             help="Where --skip-bad lists the skipped records (default: WORKSPACE/reports/).")
images_option = click.option("--images", "images_dir", type=click.Path(file_okay=False, path_type=Path),
                             help="Folder of the images; without it records are kept as missing an image.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@ingest.command("vqav2")
@click.option("--questions", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="VQAv2 questions file (v2_OpenEnded_mscoco_*_questions.json).")
@click.option("--annotations", type=click.Path(dir_okay=False, path_type=Path),
              help="VQAv2 annotations file (v2_mscoco_*_annotations.json); omit for the test split.")
@images_option
@skip_bad_option
@report_option
@json_option
@pass_workspace
def ingest_vqav2_cmd(workspace: Workspace, questions: Path, annotations: Path | None, images_dir: Path | None,
                     skip_bad: bool, report: Path | None, as_json: bool) -> None:
    """Ingest the official VQAv2 question and annotation files."""
    result = ingest_vqav2(workspace.store, questions, annotations, images_dir, skip_bad,
                          _report_path(workspace, report, questions.name))
    _print_ingest(result, as_json)


@ingest.command("cvqa")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", "dataset", help="Dataset name in the store (default: cvqa:FILE-STEM).")
@images_option
@skip_bad_option
@report_option
@json_option
@pass_workspace
def ingest_cvqa_cmd(workspace: Workspace, file: Path, dataset: str | None, images_dir: Path | None,
                    skip_bad: bool, report: Path | None, as_json: bool) -> None:
    """Ingest a C-VQA CSV as published (img_path,query,answer,new query,new answer,type)."""
    result = ingest_cvqa(workspace.store, file, images_dir, skip_bad, _report_path(workspace, report, file.name),
                         dataset)
    _print_ingest(result, as_json)


@ingest.command("table")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", "dataset", help="Dataset name in the store (default: table:FILE-STEM).")
@images_option
@skip_bad_option
@report_option
@json_option
@pass_workspace
def ingest_table_cmd(workspace: Workspace, file: Path, dataset: str | None, images_dir: Path | None,
                     skip_bad: bool, report: Path | None, as_json: bool) -> None:
    """Ingest your own image,question,answer records (CSV or JSONL)."""
    result = ingest_table(workspace.store, file, images_dir, skip_bad, _report_path(workspace, report, file.name),
                          dataset)
    _print_ingest(result, as_json)


def _count_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(title.split()[-1].capitalize())
    table.add_column("count", justify="right")
    for name, n in counts.items():
        table.add_row(name, str(n))
    return table


@main.command()
@json_option
@pass_workspace
def status(workspace: Workspace, as_json: bool) -> None:
    """Counts of items by source, group and status."""
    counts = store_counts(workspace.store)
    if as_json:
        print_json(counts)
        return
    console.print(f"[bold]{workspace.root}[/]: {counts['items']} items, {counts['sources']} source questions, "
                  f"{counts['images']} images ({counts['sources_missing_image']} source questions without an image)")
    console.print(_count_table("Items by status", counts["by_status"]))
    console.print(_count_table("Items by group", counts["by_group"]))
    console.print(_count_table("Items by source", counts["by_source"]))
    console.print(_count_table("Source questions by dataset", counts["sources_by_dataset"]))


@main.command()
@click.argument("item_id", type=int)
@json_option
@pass_workspace
def show(workspace: Workspace, item_id: int, as_json: bool) -> None:
    """Show one item with its source question, image, flags and history."""
    detail = item_detail(workspace.store, item_id)
    if detail is None:
        raise click.ClickException(f"no item with id {item_id}")
    if as_json:
        print_json(detail)
        return
    item, source, image = detail["item"], detail["source"], detail["image"]
    console.print(f"[bold]Item {item['id']}[/] ({item['kind']}, {item['group']}) — status [bold]{item['status']}[/]")
    console.print(f"  question: {escape(item['question'])}")
    console.print(f"  answer:   {escape(str(item['answer']))}")
    if item.get("proposed_answer"):
        console.print(f"  proposed answer (before correction): {escape(item['proposed_answer'])}")
    if source:
        console.print(escape(f"  source ({source['dataset']} {source['external_id']}): {source['question']} -> {source['answer']}"))
    if image:
        console.print(f"  image: {escape(image['path'])} ({image['width']}x{image['height']} {image['format']}, "
                      f"sha256 {image['sha256'][:12]}…)")
    elif source:
        console.print(f"  image: {escape(source['image_ref'])} [yellow](missing)[/]")
    if detail["generation"]:
        gen = detail["generation"]
        console.print(f"  generated by {gen['backend']}:{gen['model']} with {gen['template_name']} "
                      f"({(gen['template_hash'] or '')[:12]})")
    for flag in detail["flags"]:
        console.print(f"  [red]flag {flag['code']}[/]: {escape(flag['reason'])}")
    for judgment in detail["judgments"]:
        console.print(escape(f"  judgment by {judgment['annotator']}: related={judgment['related']} "
                             f"correct={judgment['answer_correct']} corrected={judgment['corrected_answer']}"))
    table = Table(title="History", title_justify="left")
    for column in ("when", "stage", "from", "to", "detail"):
        table.add_column(column)
    for event in detail["history"]:
        table.add_row(str(event["created_at"]), event["stage"], event["from_status"] or "", event["to_status"] or "",
                      escape(str(event["detail"] or "")))
    console.print(table)


# The later stages' commands live in cftools.commands.<area>, registered here.
from cftools.commands.export import export_cmd, ingest_release_cmd, verify_cmd  # noqa: E402
main.add_command(export_cmd)
main.add_command(verify_cmd)
ingest.add_command(ingest_release_cmd)
from cftools.commands.generate import generate  # noqa: E402
main.add_command(generate)
from cftools.commands.check import check  # noqa: E402
main.add_command(check)
from cftools.commands.evaluate import eval_group  # noqa: E402
main.add_command(eval_group)
from cftools.commands.annotate import annotate  # noqa: E402
main.add_command(annotate)

if __name__ == "__main__":
    main()
