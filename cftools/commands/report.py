"""`cftools report`: the authoring funnel, cost per accepted item, why items die, and a drill-down to items."""

from __future__ import annotations

from pathlib import Path

import click

from cftools.commands.common import console, err_console, pass_workspace, print_json
from cftools.workspace import Workspace

DEFAULT_OUT = "report.html"


@click.command("report")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help=f"Write the HTML page here (default: {DEFAULT_OUT} in the workspace).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (the page is not written "
                                                      "unless --out is given too).")
@pass_workspace
def report_cmd(workspace: Workspace, out: Path | None, as_json: bool) -> None:
    """Where items die and what they cost: the funnel per kind, group and generator, cost per accepted item, why
    items die, and a page that drills down to the items (people only as pseudonyms)."""
    from cftools.boundary import workspace_boundary
    from cftools.funnel.page import write_report
    from cftools.funnel.report import build_report, paused_collection
    from cftools.progress import step_progress

    boundary = workspace_boundary(workspace)
    with step_progress(err_console, as_json=as_json) as progress, paused_collection():
        report = build_report(workspace, boundary, progress)
        if out is not None or not as_json:
            out = out or workspace.path(DEFAULT_OUT)
            progress("page", 0, None)
            write_report(report, boundary, out, workspace.root)
    if as_json:
        print_json(report.data)
        return
    total = report.data["funnel"]["total"]["counts"]
    console.print(f"{report.data['items']} items: " + ", ".join(f"{stage} {n}" for stage, n in total.items()))
    console.print(f"Report written to [bold]{out}[/]")
