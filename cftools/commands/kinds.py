"""`cftools kinds`: the registered benchmark shapes; and the commands kinds add to the CLI."""

from __future__ import annotations

import click
from cftools.terminal import escape
from rich.table import Table

from cftools.commands.common import console, print_json
from cftools.kinds import all_kinds


def add_kind_commands(groups: dict[str, click.Group]) -> None:
    """Add every registered kind's commands to those of their parent groups (ingest, generate) given."""
    for kind in all_kinds().values():
        for parent, commands in kind.hooks.ingest.commands().items():
            for command in commands if parent in groups else ():
                groups[parent].add_command(command)


def add_kind_options(commands: dict[str, click.Command]) -> None:
    """Add every registered kind's options to the stage commands (export, eval) they name; a command passes
    their values on to the kind (`ReleaseHooks.command_options`)."""
    for kind in all_kinds().values():
        for name, command in commands.items():
            taken = {p.name for p in command.params}
            for option in kind.hooks.release.command_options(name):
                if option.name not in taken:
                    command.params.append(option)
                    taken.add(option.name)


@click.command("kinds")
@click.option("--json", "as_json", is_flag=True, help="Print the kinds as JSON.")
def kinds_cmd(as_json: bool) -> None:
    """List the registered kinds with the stages they fill, their generators, checks, task configs, export formats
    and metrics."""
    described = [kind.describe() for _, kind in sorted(all_kinds().items())]
    if as_json:
        print_json(described)
        return
    for d in described:
        console.print(f"[bold]{escape(d['name'])}[/]: {escape(d['title'])}", soft_wrap=True)
    table = Table(title="Registered kinds (entry point group cftools.kinds)", title_justify="left", show_lines=True)
    for column in ("kind", "stages", "generators", "checks", "tasks", "formats", "metrics"):
        table.add_column(column, overflow="fold")
    for d in described:
        table.add_row(escape(d["name"]), "\n".join(d["stages"]), "\n".join(g["name"] for g in d["generators"]) or "–",
                      "\n".join(c["code"] for c in d["checks"]) or "–",
                      "\n".join(escape(task) for task in d["tasks"]) or "–",
                      "\n".join(["native", *(f["name"] for f in d["export_formats"])]),
                      "\n".join(d["metrics"]) or "–")
    console.print(table)
