"""`cftools check`: automatic checks on draft items."""

from __future__ import annotations

import json
from typing import Any, Mapping

import click
from cftools.terminal import escape
from rich.console import Console
from rich.table import Table

from cftools.checks import CheckOptions, CheckReport, ItemResult, check_scopes, run_checks
from cftools.checks import Progress as CheckProgress
from cftools.checks.calibration import check_calibration, low_precision
from cftools.checks.duplicates import DEFAULT_SIMILARITY
from cftools.checks.runner import text_codes
from cftools.commands.common import console, err_console, pass_workspace
from cftools.commands.summary import Line, always, print_lines
from cftools.progress import StepProgress, step_progress
from cftools.workspace import Workspace


class ShownProgress(CheckProgress):
    """The checks' stages as lines of the shared progress display: each stage its count and ETA."""

    def __init__(self, shown: StepProgress) -> None:
        self.shown = shown
        self.current = ""

    def stage(self, name: str, total: int) -> None:
        self.current = name
        self.shown(name, 0, total)

    def advance(self, n: int = 1) -> None:
        self.shown.advance(self.current, n)

    def waiting(self, what: str):  # noqa: ANN201
        return self.shown.waiting(what)


def summary_table(report: CheckReport) -> Table:
    table = Table(title="Checks", title_justify="left")
    for column, justify in (("code", "left"), ("applied to", "right"), ("flagged", "right"),
                            ("could not decide", "right")):
        table.add_column(column, justify=justify)
    for code in report.codes:
        table.add_row(escape(code), str(report.applied[code]), str(report.flags[code]), str(report.notes[code]))
    return table


def interval_text(value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0%} ({interval[0]:.0%}–{interval[1]:.0%})"


def calibration_table(checks: list[dict], shown: Mapping[str, Any]) -> Table:
    """Each check against people: its precision on the flagged drafts they measured, and what it missed."""
    misses = {row["code"]: row for row in shown["report"]["misses"]["per_check"]}
    table = Table(title="Checks against people", title_justify="left")
    for column, justify in (("code", "left"), ("measured", "right"), ("people rejected", "right"),
                            ("precision (95%)", "right"), ("missed", "right"), ("miss rate (95%)", "right")):
        table.add_column(column, justify=justify)
    for row in checks:
        miss = misses[row["code"]]
        table.add_row(escape(row["code"]) + (" [red]low[/]" if row["low"] else ""), str(row["measured"]),
                      str(row["people_rejected"]), interval_text(row["precision"], row["interval"]),
                      str(miss["missed"]), interval_text(miss["miss_rate"], miss["interval"]))
    return table


def missed_by_all(overall: dict, shown: Mapping[str, Any]) -> str:
    return (f"{overall['people_rejected']} items rejected by people, {overall['unflagged']} of them flagged by no "
            f"check: miss rate {interval_text(overall['miss_rate'], overall['interval'])}.")


def low_precision_named(checks: list[dict], shown: Mapping[str, Any]) -> str:
    low = ", ".join(row["code"] for row in checks if row["low"])
    return f"[red]Low precision[/] (below {shown['report']['low_precision_below']:g}): {escape(low)}."


CALIBRATION_LINES = (
    Line("checks", calibration_table, when=always),
    Line("misses", missed_by_all, when=always),
    Line("checks", low_precision_named, when=lambda checks, _: any(row["low"] for row in checks)),
    Line("checks", "No flagged draft measured yet: `cftools annotate push --flagged-sample N` sends some to people.",
         when=lambda checks, _: not any(row["measured"] for row in checks)),
)


def print_calibration(found: dict, out: Console) -> None:
    """`check --calibration`: the checks against people, a table per measure and the low checks named."""
    print_lines(CALIBRATION_LINES, found, out, err_console)


def drafts_checked(codes: list[str], shown: Mapping[str, Any]) -> str:
    report = shown["report"]
    moved = (f"{report.moved_to_checked} moved to checked" if report.promote
             else "none moved (only some checks ran)")
    if report.moved_despite_waived:
        moved += f" ({report.moved_despite_waived} of them with every flag waived)"
    return f"{report.candidates} draft items checked: {moved}, {report.flagged} flagged (they stay draft)."


def duplicate_mode(mode: str, shown: Mapping[str, Any]) -> str:
    embedded = shown["report"].embedded
    return f"duplicate: {mode}" + (f" ({embedded} questions embedded)" if embedded else "")


CHECK_LINES = (
    Line("codes", lambda _, shown: summary_table(shown["report"]), when=always),
    Line("codes", drafts_checked, when=lambda codes, _: bool(text_codes(codes))),
    Line("left_as_flagged", "{value} flagged drafts were not re-checked (use --recheck)."),
    Line("gone", "{value} items left draft while the checks ran and were not written."),
    Line("notes", "[yellow]Some checks could not decide on some items (see --json 'notes'); those items are not "
                  "flagged for it.[/]"),
    Line("edited_items", "{value} items' stored edit candidates checked again and re-ranked (edit flags rank "
                         "candidates; they do not keep an item draft)."),
    Line("edit_unmeasured", "[yellow]{value} edit candidates were not checked again (their file, or their item's "
                            "original image, is not in the store): their stored results are kept.[/]"),
    Line("duplicate_mode", duplicate_mode, markup=False),
)


def print_summary(report: CheckReport, out: Console) -> None:
    """The checks' table and what became of the drafts, on OUT (stderr under --json)."""
    print_lines(CHECK_LINES, report, out, err_console)


@click.command("check")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per draft asked for (JSON lines): id, image, status, flags (current ones, "
                   "re-checked or not: see 'rechecked'); summary on stderr.")
@click.option("--recheck", is_flag=True, help="Also re-check drafts that already have flags (their flags are replaced).")
@click.option("--only", "only", multiple=True, metavar="CODE",
              help="Run only this check (repeatable; --list shows the codes). Items then keep their status: only a full run moves them.")
@click.option("--group", "groups", multiple=True, help="Only items of this group (repeatable), (a C-VQA group, a CFMM type, ...).")
@click.option("--limit", type=click.IntRange(min=1), help="Check at most N drafts (the flagged drafts a run without --recheck leaves "
              "as they are are not counted: --json lists them all).")
@click.option("--no-embeddings", is_flag=True, help="Find duplicates by normalised text only (no embedding model).")
@click.option("--similarity", type=click.FloatRange(0.0, 1.0), default=DEFAULT_SIMILARITY, show_default=True,
              help="Cosine similarity from which two questions on the same image are near-duplicates.")
@click.option("--list", "list_checks", is_flag=True,
              help="List the checks and the items each applies to, then stop; with --json, one JSON object.")
@click.option("--calibration", is_flag=True,
              help="Show each check's precision against people (flagged drafts measured with annotate push "
                   "--flagged-sample) and the checks' misses (items people rejected that no check flagged), then "
                   "stop; with --json, one JSON object.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (they are off under --json too).")
@pass_workspace
def check(workspace: Workspace, as_json: bool, recheck: bool, only: tuple[str, ...], groups: tuple[str, ...],
          limit: int | None, no_embeddings: bool, similarity: float, list_checks: bool, calibration: bool,
          quiet: bool) -> None:
    """Run the automatic checks on draft items; clean items move to 'checked'.

    Each problem becomes a flag on the item (code and reason); nothing is deleted and flagged items
    stay draft. Each kind declares its checks (--list shows every code and the items it applies to),
    plus `duplicate` for every item with an image, and the edit checks (edit_*) over the stored edit candidates of
    every item that has them (re-ranked; they do not change an item's status). A rerun checks only new drafts and drafts edited
    since their check; --recheck checks every draft again.
    """
    context = click.get_current_context()
    given = [param.opts[0] for param in context.command.params
             if param.name in ("recheck", "only", "groups", "limit", "no_embeddings", "similarity")
             and context.get_parameter_source(param.name) != click.core.ParameterSource.DEFAULT]
    stops = [flag for flag, on in (("--list", list_checks), ("--calibration", calibration)) if on]
    if stops and given:  # they report and stop: what selects and checks drafts would be dropped
        raise click.UsageError(f"{' and '.join(stops)} checks no drafts: {', '.join(given)} would do nothing")
    if list_checks and as_json:
        click.echo(json.dumps({"checks": [{"code": code, "applies_to": scope}
                                          for code, scope in check_scopes().items()]}, ensure_ascii=False))
        return
    if list_checks:
        table = Table(title="Checks", title_justify="left")
        table.add_column("code")
        table.add_column("applies to")
        for code, scope in check_scopes().items():
            table.add_row(code, escape(scope))  # scopes name config sections: [llm] ...
        console.print(table)
        return
    if calibration:
        with workspace.store.session() as session:
            found = check_calibration(session, low_precision(workspace))
        if as_json:
            click.echo(json.dumps(found, ensure_ascii=False))
        else:
            print_calibration(found, console)
        return

    if no_embeddings and "--similarity" in given:
        raise click.UsageError("--similarity is a cosine similarity of embeddings, which --no-embeddings turns off")

    def emit(result: ItemResult) -> None:
        if as_json:
            click.echo(json.dumps(result.as_dict(), ensure_ascii=False))

    with step_progress(err_console, quiet=quiet, as_json=as_json) as shown:
        options = CheckOptions(recheck=recheck, groups=tuple(groups), limit=limit, use_embeddings=not no_embeddings,
                               similarity=similarity)
        report = run_checks(workspace.store, list(only) or None, options=options, progress=ShownProgress(shown),
                            on_result=emit, config=workspace.config)
    print_summary(report, err_console if as_json else console)
