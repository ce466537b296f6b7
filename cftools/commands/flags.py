"""`cftools flags`: a person overrules a check (thin wrappers over cftools.flags)."""

from __future__ import annotations

from typing import Optional

import click
from rich.markup import escape
from rich.table import Table

from cftools.commands.common import console, pass_workspace, print_json
from cftools.flags import current_user, list_flags, undo, waive
from cftools.workspace import Workspace


@click.group("flags")
def flags_group() -> None:
    """List check flags, and waive one a person has looked at (recorded with who and when in the item's history;
    a waived flag no longer blocks the item: the next `cftools check` moves it on)."""


@flags_group.command("waive")
@click.argument("item")
@click.argument("code")
@click.option("--reason", required=True, help="Why the flag does not hold for this item (kept in its history).")
@click.option("--json", "as_json", is_flag=True, help="Print the waiver as JSON.")
@pass_workspace
def waive_cmd(workspace: Workspace, item: str, code: str, reason: str, as_json: bool) -> None:
    """Waive flag CODE of ITEM (its key or id)."""
    done = waive(workspace.store, item, code, reason, current_user(workspace.config))
    if as_json:
        print_json(done)
    else:
        console.print(f"waived {escape(code)} of {escape(done['item'])} by {escape(done['by'])}: "
                      f"{escape(done['reason'])}")


@flags_group.command("undo")
@click.argument("item")
@click.argument("code")
@click.option("--json", "as_json", is_flag=True, help="Print what was undone as JSON.")
@pass_workspace
def undo_cmd(workspace: Workspace, item: str, code: str, as_json: bool) -> None:
    """Withdraw the waiver of flag CODE of ITEM: the flag blocks the item again."""
    done = undo(workspace.store, item, code, current_user(workspace.config))
    if as_json:
        print_json(done)
    else:
        console.print(f"waiver of {escape(code)} on {escape(done['item'])} withdrawn by {escape(done['by'])}")


@flags_group.command("list")
@click.argument("item", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the flags as JSON.")
@pass_workspace
def list_cmd(workspace: Workspace, item: Optional[str], as_json: bool) -> None:
    """Every item's check flags (ITEM's only, when given), each with its waiver."""
    rows = list_flags(workspace.store, item)
    if as_json:
        print_json(rows)
        return
    table = Table(title="Check flags", title_justify="left")
    for column in ("item", "status", "code", "reason", "waived"):
        table.add_column(column)
    for row in rows:
        waived = row["waived"]
        table.add_row(escape(row["item"]), row["status"], row["code"], escape(row["reason"]),
                      escape(f"by {waived['by']} at {waived['at']}: {waived['reason']}") if waived else "")
    console.print(table)
