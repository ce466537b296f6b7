"""`cftools doctor`: a thin wrapper over cftools.doctor."""

from __future__ import annotations

import click
from cftools.terminal import escape

from cftools.commands.common import console, pass_workspace, print_json
from cftools.doctor import diagnose
from cftools.workspace import Workspace


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the findings and changes as JSON.")
@click.option("--repair", is_flag=True,
              help="Fix what is safe to fix: send the tasks a stopped pull returned or handed over but never sent, "
                   "re-queue stuck items, free dead work claims, forget tasks the server lacks, remove half-written exports (restore a killed export's copy when the release is "
                   "missing, only one whose manifest is the one the store recorded; other copies are moved aside as "
                   ".unrecorded, .broken, .unverified or .kept) and image files cftools wrote that no row points to. Every "
                   "change is listed.")
@click.option("--offline", is_flag=True, help="Do not ask the Label Studio server about pushed tasks.")
@pass_workspace
def doctor_cmd(workspace: Workspace, as_json: bool, repair: bool, offline: bool) -> None:
    """Check a workspace: store integrity (naming damaged pages), missing or changed image files, generated image
    files no row points to, items stuck in an intermediate state, items waiting only on people no longer on the
    team, tasks a pull returned or handed over but never sent, work claims of dead workers, tasks the store
    believes pushed but the server lacks (when Label Studio is configured), releases of any format that no longer
    verify or whose manifest is not the one exported.

    Exit codes: 0 nothing wrong (or everything found was repaired); 1 a problem is left (missing or changed
    images and releases that fail to verify are never changed: only a person knows which copy is right)."""
    report = diagnose(workspace, repair=repair, server=False if offline else None)
    if as_json:
        print_json(report.as_dict())
    else:
        checked = ", ".join(f"{n} {what.replace('_', ' ')}" for what, n in report.checked.items())
        console.print(f"[bold]{escape(str(workspace.root))}[/]: checked {checked or 'nothing'}")
        for finding in report.findings:
            mark = "[green]repaired[/]" if finding.repaired else "[red]problem[/]"
            console.print(f"  {mark} {finding.code}: {escape(finding.message)}", soft_wrap=True)
        for change in report.changes:
            console.print(f"  changed: {escape(change)}", soft_wrap=True)
        if not report.findings:
            console.print("  no problems found")
    if not report.ok:
        click.get_current_context().exit(1)
