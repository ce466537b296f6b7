"""`cftools annotate controls | resume | requeue | audit`: measuring the people who verify, and acting on it."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import click
from rich.console import Console

from cftools.commands.common import console, err_console, pass_workspace, print_json
from cftools.commands.summary import Line, always, print_lines
from cftools.terminal import escape
from cftools.workspace import Workspace

PIPED_WIDTH = 10_000  # columns: wider than any line or table the annotate commands print; rich pads nothing to it


def full_width_console() -> Console:
    """stdout's console; when stdout is not a terminal, one as wide as any line (a line is not broken, nor a table
    cut with "…", at 80 columns where nobody sees a window's edge)."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=PIPED_WIDTH, highlight=False, soft_wrap=True)


@click.command("controls")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--kind", required=True, help="The kind whose verification tasks these controls look like.")
@click.option("--images", "images_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the images (a record's image path is taken relative to it; default: the file's "
                   "folder). They are copied beside the real items' images.")
@click.option("--name", "dataset", help="Dataset name of the controls in the store (default: table:KIND) and, when "
                                        "given, the start of each control's item key, which the task carries "
                                        "(default: the start of the kind's real items' keys).")
@click.option("--skip-bad", is_flag=True, help="Skip bad records (listed in the result) instead of stopping.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_workspace
def controls_cmd(workspace: Workspace, file: Path, kind: str, images_dir: Optional[Path], dataset: Optional[str],
                 skip_bad: bool, as_json: bool) -> None:
    """Load the lead's controls FILE (CSV or JSONL): the columns of `ingest table` (image, question, answer: the
    question and the proposed answer its task shows) with group, and the settled answer (answer_correct yes/no;
    related, default yes; corrected_answer). Controls are mixed into people's queues; they are never released."""
    from cftools.annotate.controls import load_controls

    report = load_controls(workspace.store, file, kind, images_dir, dataset, skip_bad)
    if as_json:
        print_json(report.as_dict())
        return
    print_lines(CONTROLS_LINES, report, full_width_console(), err_console, file=escape(str(file)), kind=kind)


CONTROLS_LINES = (
    Line("n_records", "[bold]{file}[/]: {value} records, {report.controls_added} {kind} controls added "
                      "({report.already_known} known already), {report.images_added} images added, "
                      "{report.missing_images} without an image.", when=always),
    Line("skipped", lambda skipped, _: f"[yellow]{len(skipped)} bad records skipped[/]"),
    Line("like_real_items", "[yellow]No {kind} items with an ingested key and an image in the store yet:[/] these "
                            "controls' keys and image folder are their own, and a person could tell them apart. "
                            "Load controls after the items they hide among.", when=lambda like, _: not like),
)


@click.command("resume")
@click.argument("person")
@pass_workspace
def resume_cmd(workspace: Workspace, person: str) -> None:
    """Give PERSON new work again after `annotate push` paused them (their accuracy on controls lay wholly below
    [annotate] min_accuracy); only controls they judge from now on can pause them again."""
    from cftools.annotate.pauses import resume

    pause = resume(workspace.store, person)
    when = pause.paused_at.strftime("%Y-%m-%d %H:%M")
    out = full_width_console()
    out.print(f"{escape(person)} resumed by {escape(str(pause.resumed_by))} (paused {when}: "
              f"{escape(pause.reason)}).")


def _date(value: Optional[datetime]) -> Optional[datetime]:
    return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value


@click.command("requeue")
@click.option("--by", "person", required=True, help="The person whose judged items go to others.")
@click.option("--since", type=click.DateTime(), help="Only items they judged on or after this date (UTC).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_workspace
def requeue_cmd(workspace: Workspace, person: str, since: Optional[datetime], as_json: bool) -> None:
    """Send the items PERSON judged (since DATE) to other people as new verification tasks; their judgments stay on
    record but no longer count, and each item's history says so. All or nothing: too few people changes nothing."""
    from cftools.annotate.requeue import requeue

    report = requeue(workspace, person, _date(since))
    if as_json:
        print_json(report.as_dict())
        return
    out = full_width_console()
    out.print(f"{report.tasks} judgments of {escape(person)} no longer count; {len(report.items)} items sent "
              "to " + (", ".join(f"{escape(p)} ({n})" for p, n in sorted(report.assigned.items())) or "no one")
              + (f"; {report.adjudications_closed} set-aside adjudication tasks deleted on their servers"
                 if report.adjudications_closed else ""))


@click.command("audit")
@click.option("--sample", "sample", required=True, type=click.IntRange(min=1),
              help="How many accepted items to audit (a seeded random sample).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option("--person", help="The auditor (default: the configured person who judged the fewest accepted items). "
                               "The sample holds only items they had no task of.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@pass_workspace
def audit_cmd(workspace: Workspace, sample: int, seed: int, person: Optional[str], as_json: bool) -> None:
    """Push a seeded random sample of accepted items to an auditor as verification tasks; `annotate pull` stores
    their verdicts as audit outcomes, from which the release's error rate is estimated (data card, croissant.json,
    `cftools verify`)."""
    from cftools.annotate.audit import audit

    report = audit(workspace, sample, seed, person)
    if as_json:
        print_json(report.as_dict())
        return
    out = full_width_console()
    out.print(f"Pushed {report.pushed} audit tasks (seed {report.seed}, {report.eligible} accepted items "
              f"eligible) to {escape(report.person)}'s verification projects.")
