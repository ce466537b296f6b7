"""`cftools ingest ...`: thin wrappers over cftools.ingest; kinds add their own ingests (`IngestHooks.commands`)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click
from rich.markup import escape

from cftools.commands.common import console, err_console, json_option, pass_workspace, print_json
from cftools.ingest.licences import licence_choice
from cftools.ingest.readers import IngestReport, ingest_progress, ingest_table, ingest_vqav2
from cftools.progress import step_progress
from cftools.workspace import Workspace


@click.group()
def ingest() -> None:
    """Read source questions, images and existing items into the store."""


def report_path(workspace: Workspace, report: Path | None, name: str) -> Path:
    return report or workspace.path("reports", f"ingest-{Path(name).stem}-skipped.jsonl")


def print_ingest(report: IngestReport, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    console.print(
        f"[bold]{report.path}[/] ({report.dataset}): {report.n_records} records, "
        f"{report.sources_added} source questions and {report.items_added} items added, "
        f"{report.images_added} images added, {report.images_attached} records got an image, "
        f"{report.missing_images} still without an image; licence: {report.licence}.")
    if report.updated:
        console.print(f"[yellow]{report.updated} records already stored had another text under the same id: "
                      "replaced (--update)[/]")
    if report.bad:
        console.print(f"[yellow]{len(report.bad)} bad records skipped; listed in {report.report_path}[/]")


skip_bad_option = click.option("--skip-bad", is_flag=True,
                               help="Skip bad records and list them in a report file instead of stopping.")
report_option = click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
                             help="Where --skip-bad lists the skipped records (default: WORKSPACE/reports/).")
images_option = click.option("--images", "images_dir", type=click.Path(file_okay=False, path_type=Path),
                             help="Folder of the images; without it records are kept as missing an image.")
update_option = click.option(
    "--update", is_flag=True,
    help="Replace the stored text of records this file gives differently under the same id (by default such a "
         "re-ingest is refused naming the first). Items past draft are never replaced.")
licence_option = click.option(
    "--licence", "--license", "licence", metavar="LICENCE",
    help="The source's licence, e.g. CC-BY-4.0 (default: [sources] in cftools.toml, else what the store has for "
         "this dataset, else unknown). The release card lists it; export will not stamp another over it.")


QUIET = "cftools.ingest.quiet"
quiet_option = click.option(
    "--quiet", is_flag=True, expose_value=False, help="No progress lines on stderr (they are off under --json too).",
    callback=lambda ctx, param, value: ctx.meta.__setitem__(QUIET, value))
INGEST_LABELS = {"images": "reading images", "store": "writing to the store"}


@contextmanager
def showing_progress() -> Iterator[None]:
    """The ingest's progress (its images read, its store write) on stderr, unless --quiet or --json."""
    ctx = click.get_current_context()
    with step_progress(err_console, quiet=ctx.meta.get(QUIET, False), as_json=bool(ctx.params.get("as_json")),
                       labels=INGEST_LABELS) as shown:
        token = ingest_progress.set(shown)
        try:
            yield
        finally:
            ingest_progress.reset(token)


def ingest_options(images: bool = True, quiet: bool = True):  # noqa: ANN201
    """The options every ingest shares: [--images], --licence, --skip-bad, --report, --update, --json, [--quiet]
    (QUIET false: the command has its own, passed to its reader)."""
    shared = ([images_option] if images else []) + [licence_option, skip_bad_option, report_option, update_option,
                                                    json_option] + ([quiet_option] if quiet else [])

    def decorate(command):  # noqa: ANN001, ANN202
        for option in reversed(shared):
            command = option(command)
        return command
    return decorate


def file_ingest_options(dataset_prefix: str, images: bool = True):  # noqa: ANN201
    """An ingest of one FILE: the FILE argument, `--name` (default DATASET_PREFIX:FILE-STEM) and `ingest_options`."""
    def decorate(command):  # noqa: ANN001, ANN202
        command = ingest_options(images)(command)
        command = click.option("--name", "dataset",
                               help=f"Dataset name in the store (default: {dataset_prefix}:FILE-STEM).")(command)
        return click.argument("file", type=click.Path(dir_okay=False, path_type=Path))(command)
    return decorate


def ingest_licence(workspace: Workspace, licence: str | None):  # noqa: ANN201
    """The licence an ingest records for its dataset: --licence, else the workspace's [sources] setting."""
    return licence_choice(licence, workspace.section("sources"))


@ingest.command("vqav2")
@click.option("--questions", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="VQAv2 questions file (v2_OpenEnded_mscoco_*_questions.json).")
@click.option("--annotations", type=click.Path(dir_okay=False, path_type=Path),
              help="VQAv2 annotations file (v2_mscoco_*_annotations.json); omit for the test split.")
@ingest_options()
@pass_workspace
def ingest_vqav2_cmd(workspace: Workspace, questions: Path, annotations: Path | None, images_dir: Path | None,
                     licence: str | None, skip_bad: bool, report: Path | None, update: bool, as_json: bool) -> None:
    """Ingest the official VQAv2 question and annotation files."""
    with showing_progress():
        result = ingest_vqav2(workspace.store, questions, annotations, images_dir, skip_bad,
                              report_path(workspace, report, questions.name), ingest_licence(workspace, licence),
                              update)
    print_ingest(result, as_json)


@ingest.command("table")
@file_ingest_options("table")
@pass_workspace
def ingest_table_cmd(workspace: Workspace, file: Path, dataset: str | None, images_dir: Path | None,
                     licence: str | None, skip_bad: bool, report: Path | None, update: bool, as_json: bool) -> None:
    """Ingest your own image,question,answer records (CSV or JSONL)."""
    with showing_progress():
        result = ingest_table(workspace.store, file, images_dir, skip_bad, report_path(workspace, report, file.name),
                              dataset, ingest_licence(workspace, licence), update)
    print_ingest(result, as_json)


@ingest.command("edits")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--images", "images_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the edited images; every row's image is a path under it.")
@click.option("--licence", "--license", "licence", metavar="LICENCE",
              help="The edited images' licence, recorded with each candidate (a row's own licence column wins).")
@json_option
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (they are off under --json too).")
@pass_workspace
def ingest_edits_cmd(workspace: Workspace, file: Path, images_dir: Path, licence: str | None, as_json: bool,
                     quiet: bool) -> None:
    """Import edited images made anywhere (CSV or JSONL: item, image, optional instruction, condition, tool, licence,
    edit = relevant|irrelevant) as edit candidates of their items, checked and ranked like generated ones."""
    from cftools.ingest.edits import ingest_edits

    with step_progress(err_console, quiet=quiet, as_json=as_json) as shown:
        report = ingest_edits(workspace.store, workspace.root, file, images_dir, licence, progress=shown)
    if as_json:
        print_json(report.as_dict())
        return
    console.print(f"[bold]{escape(file.name)}[/]: {report.n_records} edits read, {report.candidates_added} candidates "
                  f"added to {report.items} items ({report.already_there} already there, {report.images_added} new "
                  f"images); {report.flagged} edits whose best candidate is flagged (`cftools flags list`).")


@ingest.command("hf")
@click.argument("source")
@click.option("--split", help="The split to read (a Hub dataset's, or the Parquet files of a folder named after it); "
                              "needed when there are several.")
@click.option("--config", help="The Hub dataset's configuration (subset), when it has several.")
@click.option("--question-column", metavar="NAME", help="The question column (default: question).")
@click.option("--answer-column", metavar="NAME",
              help="The answer column (default: answers, else multiple_choice_answer, else answer); a list of answers "
                   "gives its most frequent, as `ingest vqav2` does. Without one, or with '' (a test split's empty "
                   "answers), the questions have no answer.")
@click.option("--image-column", metavar="NAME",
              help="The image column (default: image): the datasets Image feature, image bytes, or a path.")
@click.option("--id-column", metavar="NAME",
              help="The id column (default: question_id, else id); without one a row is known by its image, "
                   "question and answer.")
@click.option("--images", "images_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder that image paths are relative to (default: the dataset's folder).")
@click.option("--name", "dataset", help="Dataset name in the store (default: hf:NAME[:CONFIG][:SPLIT]).")
@ingest_options(images=False, quiet=False)
@click.option("--quiet", is_flag=True, help="No progress bar.")
@pass_workspace
def ingest_hf_cmd(workspace: Workspace, source: str, split: str | None, config: str | None,
                  question_column: str | None, answer_column: str | None, image_column: str | None,
                  id_column: str | None, images_dir: Path | None, dataset: str | None, licence: str | None,
                  skip_bad: bool, report: Path | None, update: bool, as_json: bool, quiet: bool) -> None:
    """Ingest a Hugging Face dataset (a Hub id, read offline from the local cache under HF_HUB_OFFLINE=1, a
    save_to_disk folder, or Parquet files) with a question, an answer and an image column."""
    from cftools.ingest.hf import HfSource, ingest_hf
    from cftools.progress import step_progress

    hf = HfSource(source, split=split, config=config, question_column=question_column, answer_column=answer_column,
                  image_column=image_column, id_column=id_column, images_dir=images_dir, dataset=dataset)
    with step_progress(err_console, quiet=quiet, as_json=as_json) as progress:
        result = ingest_hf(workspace.store, workspace.root, hf, skip_bad=skip_bad,
                           report_path=report_path(workspace, report, source),
                           licence=ingest_licence(workspace, licence), update=update, progress=progress)
    print_ingest(result, as_json)
