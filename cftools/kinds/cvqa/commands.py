"""The C-VQA kind's commands: `ingest cvqa`, `generate rewrite`, `generate reparse` (thin wrappers)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from cftools.commands.common import console, pass_workspace, print_json
from cftools.commands.generation import (llm_options, llm_run, print_llm_report, rederive_drafts, rederive_option,
                                         redo_option, run_with_llm)
from cftools.kinds.cvqa.generate import CVQA_REDERIVE, llm_params, reparse, rewrite
from cftools.commands.ingest import file_ingest_options, ingest_licence, print_ingest, report_path, showing_progress
from cftools.kinds.cvqa.ingest import ingest_cvqa
from cftools.kinds.cvqa.model import GROUPS as CVQA_GROUPS
from cftools.workspace import Workspace


@click.command("rewrite")
@click.option("--group", required=True, type=click.Choice(CVQA_GROUPS),
              help="Which C-VQA group to write: numerical-direct, numerical-indirect or boolean.")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many source questions.")
@click.option("--include-ingested", is_flag=True,
              help="Also rewrite source questions that already have an ingested (not generated) item of the group.")
@rederive_option
@redo_option
@llm_options
@pass_workspace
def rewrite_cmd(workspace: Workspace, group: str, limit: int | None, include_ingested: bool, rederive: bool | None,
                backend: str | None, model: str | None, template_path: Path | None, concurrency: int | None,
                refresh: bool, max_attempts: int, quiet: bool, as_json: bool,
                redo: str | None = None) -> None:
    """Rewrite source questions into draft counterfactual items of one group (the C-VQA method).

    Picks source questions of the group's answer type (number, or yes/no for boolean) that have no item of
    the group yet; a rerun does only what is left, and cached requests make no model call. The reply follows
    the group's output schema (reasoning first; the boolean group flips the answer first)."""
    def run(llm, config):  # noqa: ANN001, ANN202
        run = replace(llm_run(workspace, template_path, concurrency, refresh, max_attempts, quiet or as_json),
                      params=llm_params(config, llm.name))
        if redo:
            from cftools.generate.redo import redo_drafts
            from cftools.kinds.cvqa.generate import CVQA_REDO

            report = redo_drafts(workspace.store, llm, CVQA_REDO, redo, run=run, limit=limit, groups=(group,))
        else:
            report = rewrite(workspace.store, llm, group, run=run, limit=limit, include_ingested=include_ingested)
        if not report.stats.interrupted:
            report.rederived = rederive_drafts(workspace, llm, config, CVQA_REDERIVE, rederive, run, as_json)
        return report

    print_llm_report(run_with_llm(workspace, backend, model, run), as_json,
                     f"{group} {'redone' if redo else 'draft'} items")


@click.command("reparse")
@click.option("--group", type=click.Choice(CVQA_GROUPS), help="Only this group (default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_workspace
def reparse_cmd(workspace: Workspace, group: str | None, as_json: bool) -> None:
    """Parse the stored model outputs again (after a parser fix), without any model call."""
    report = reparse(workspace.store, group)
    if as_json:
        print_json(report.as_dict())
        return
    console.print(f"{report.generations} stored outputs parsed again, {report.changed} parsed differently, "
                  f"{report.items_created} items created, {report.items_updated} draft items updated")


@click.command("cvqa")
@file_ingest_options("cvqa")
@pass_workspace
def ingest_cvqa_cmd(workspace: Workspace, file: Path, dataset: str | None, images_dir: Path | None,
                    licence: str | None, skip_bad: bool, report: Path | None, update: bool, as_json: bool) -> None:
    """Ingest a C-VQA CSV as published (img_path,query,answer,new query,new answer,type)."""
    with showing_progress():
        result = ingest_cvqa(workspace.store, file, images_dir, skip_bad, report_path(workspace, report, file.name),
                             dataset, ingest_licence(workspace, licence), update=update)
    print_ingest(result, as_json)
