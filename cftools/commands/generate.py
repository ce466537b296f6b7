"""`cftools generate ...`: the group; each kind adds its generators' commands (`IngestHooks.commands`)."""

from __future__ import annotations

import click


@click.group()
def generate() -> None:
    """Generate counterfactual items with an LLM (the embedded offline model by default) or an image model."""


@generate.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the batches as JSON.")
def generate_status(as_json: bool) -> None:
    """List the Batch API batches in flight (`generate … --batch-api`): submitted, or finished but not yet stored.

    A rerun of the command that submitted a batch collects it; nothing is submitted twice."""
    from cftools.terminal import escape
    from rich.table import Table

    from cftools.commands.common import console, get_workspace, print_json
    from cftools.generate.batch_api import open_batches

    batches = open_batches(get_workspace(click.get_current_context()).store)
    if as_json:
        print_json({"batches": batches})
        return
    if not batches:
        console.print("no batches in flight")
        return
    table = Table(title="Batches in flight", title_justify="left")
    for column in ("batch", "generator", "model", "status", "requests", "done", "failed", "window", "submitted"):
        table.add_column(column)
    for b in batches:
        table.add_row(escape(b["batch_id"] or f"(being created from {b['input_file_id']})"), escape(b["generator"]),
                      escape(b["model"]), escape(b["status"] or b["state"]), str(b["requests"]), str(b["completed"]),
                      str(b["failed"]), b["window"], str(b["submitted_at"])[:19])
    console.print(table)


from cftools.commands.edits import edits_cmd  # noqa: E402  (every kind that declares edits shares it)

generate.add_command(edits_cmd)
