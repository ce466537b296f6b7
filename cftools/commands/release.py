"""`cftools release diff A B`: thin over cftools.release.diff (the items) and cftools.evaluate.rescore (the runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import click

from cftools.commands.common import console, optional_workspace


@click.group("release")
def release_group() -> None:
    """Compare releases: `cftools release diff A B` lists what changed and traces the stored runs' scores."""


def workspace_or_none(ctx: click.Context) -> Optional[Any]:
    """The workspace when there is one: two release folders can be compared without (there are no runs then). One
    named but unreadable is an error: the report would say no run of A is stored."""
    return optional_workspace(ctx)


@release_group.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--run", "run_dirs", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A run folder of A to trace beside the store's runs of A (repeatable).")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report (Markdown, or JSON with --json) to this file instead of printing it.")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON, every item listed.")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="Diff a release whose manifest is not the one the workspace's store recorded at export, and name "
                   "it in a warning. By default such a release is refused.")
@click.pass_context
def diff_cmd(ctx: click.Context, a: str, b: str, run_dirs: tuple[Path, ...], out_file: Optional[Path],
             as_json: bool, no_verify: bool) -> None:
    """Items added, removed, relabelled, reworded and with new images from release A to release B (folders or
    NAME@VERSION), and every stored run of A rescored on B: each score change split into the part due to each kind
    of edit."""
    from cftools.evaluate.rescore import score_changes, score_changes_markdown
    from cftools.release.diff import changelog_markdown, diff_releases, release_folder, summary_line
    from cftools.release.verify import refuse_unrecorded_manifest

    workspace = workspace_or_none(ctx)
    store = workspace.store if workspace is not None else None
    folders = [release_folder(a, store), release_folder(b, store)]
    for folder in folders:
        changed = refuse_unrecorded_manifest(store, folder, verify=not no_verify, unverified="diffs it as it is")
        if changed:
            click.secho(f"Warning: {changed}", fg="yellow", err=True)
    diff = diff_releases(*folders)
    runs = score_changes(diff, store, run_dirs, workspace.root if workspace is not None else None)
    if as_json:
        text = json.dumps({**diff.as_dict(), "runs": [run.as_dict() for run in runs]}, indent=2, ensure_ascii=False)
    else:
        text = (f"# {diff.a.label} → {diff.b.label}\n\n" + changelog_markdown(diff) + "\n"
                + score_changes_markdown(diff, runs))
    if out_file is None:
        click.echo(text.rstrip("\n"))
        return
    out_file.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    console.print(f"{out_file}: {summary_line(diff)} {len(runs)} stored runs of {diff.a.label} traced.",
                  soft_wrap=True, markup=False)
