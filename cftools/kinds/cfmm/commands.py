"""The CFMM kind's commands: `generate pairs` and `ingest cfmm` (thin wrappers)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from cftools.commands.common import console, pass_workspace, print_json, ray_address, ray_option
from cftools.commands.generation import (backend_for_run, batch_api_option, estimate_option, exit_for_failed_requests,
                                         llm_run, max_cost_option, print_estimate, print_llm_report,
                                         prompt_variant_option, rederive_drafts, rederive_option, redo_option,
                                         run_controls, run_money, stop_for_budget)
from cftools.errors import CftoolsError
from cftools.generate.run_controls import ControlledBackend
from cftools.commands.ingest import file_ingest_options, ingest_licence, print_ingest, report_path, showing_progress
from cftools.generate.llm_task import DEFAULT_MAX_ATTEMPTS
from cftools.kinds.cfmm.generate import CFMM_REDERIVE, generate_pairs, llm_params, parse_quota
from cftools.kinds.cfmm.ingest import ingest_cfmm
from cftools.llm import BACKENDS
from cftools.workspace import Workspace


@click.command("pairs")
@click.option("--types", "types_text",
              help="Types to draft and their quota: 'count,color' (equal shares) or 'count=0.3,color=0.2,...' "
                   "(default: [cfmm] types in cftools.toml, else the paper's shares).")
@click.option("--per-image", type=click.IntRange(min=1), default=1, show_default=True, help="Pairs per image.")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many pairs in this run.")
@click.option("--backend", type=click.Choice(BACKENDS), help="LLM backend (default: [llm] backend, else local).")
@click.option("--model", help="Model name (default: [llm] model).")
@click.option("--concurrency", type=click.IntRange(min=1), help="Requests in flight (default: 8 for openai, 1 local).")
@click.option("--refresh", is_flag=True, help="Ignore the request cache and call the model again.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=DEFAULT_MAX_ATTEMPTS, show_default=True,
              help="Attempts per request when the output cannot be parsed.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON.")
@prompt_variant_option
@rederive_option
@redo_option
@max_cost_option
@estimate_option
@batch_api_option
@ray_option(name="ray_address_given")
@pass_workspace
def pairs_cmd(workspace: Workspace, types_text: str | None, per_image: int, limit: int | None, backend: str | None,
              model: str | None, concurrency: int | None, refresh: bool, max_attempts: int, quiet: bool,
              as_json: bool, rederive: bool | None, ray_address_given: str | None,
              redo: str | None = None) -> None:
    """Draft CFMM basic/counterfactual pairs from the images' source questions (the LLM sees no image).

    The LLM picks a type per image (or none: the image is skipped and counted), then writes the pair with the
    type's prompt. Drafts are marked needs_image_check. A rerun drafts only empty slots."""
    try:
        quota = parse_quota(types_text or workspace.section("cfmm").get("types"))
    except CftoolsError as exc:  # the command line's --types is bad usage (exit 2); [cfmm] types an error
        if types_text:
            raise click.BadParameter(exc.message, param_hint="--types") from None
        raise
    config = workspace.section("llm")
    llm = backend_for_run(workspace, backend, model, ray_address(click.get_current_context(), ray_address_given))
    try:
        controls = run_controls(config, llm)  # --max-cost, --estimate, --batch-api
        controlled = ControlledBackend(llm, controls)
        # no --template: CFMM has a prompt per step and type (each the workspace's copy when it has one)
        run = replace(llm_run(workspace, None, concurrency, refresh, max_attempts, quiet or as_json),
                      params=llm_params(config, llm.name))
        if redo:
            from cftools.generate.redo import redo_drafts
            from cftools.kinds.cfmm.generate import CFMM_REDO

            report = redo_drafts(workspace.store, controlled, CFMM_REDO, redo, run=run, limit=limit)
        else:
            report = generate_pairs(workspace.store, controlled, run=run, quota=quota, per_image=per_image,
                                    limit=limit)
        rederived = None
        if not (report.stats.interrupted if redo else report.interrupted):
            rederived = rederive_drafts(workspace, controlled, config, CFMM_REDERIVE, rederive, run, as_json)
    finally:
        llm.close()
    if redo:
        report.controls, report.rederived = controls, rederived
        print_llm_report(report, as_json, "redone pairs")
        return
    if controls.estimate:
        print_estimate(controls, as_json, "pairs")
        return
    print_pairs(report, controls, rederived, as_json)
    if report.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    stop_for_budget(controls)
    exit_for_failed_requests(report, rederived.stats if rederived is not None else None)


def print_pairs(report: Any, controls: Any, rederived: Any, as_json: bool) -> None:
    """The pairs run's summary: slots, types picked, drafts, and the run's tokens and cost (--json: one object)."""
    if as_json:
        print_json({**report.as_dict(), **run_money(controls),
                    **({"rederive": rederived.as_dict()} if rederived is not None else {})})
        return
    picked = ", ".join(f"{t} {n}" for t, n in sorted(report.picked.items())) or "none"
    console.print(f"pairs with {report.backend}:{report.model}: {report.selected} image slots, types picked: "
                  f"{picked}; {report.no_type} images suit no type, {report.over_quota} over quota, "
                  f"{report.items_created} draft items created "
                  f"({report.parse_failures} replies that did not parse, "
                  f"{report.call_errors} call errors, {report.cached} from the cache)")
    console.print(f"  {escape(controls.usage.summary())}")
    for error in report.errors[:5]:
        console.print(f"  [yellow]{escape(str(error))}[/]")


@click.command("cfmm")
@file_ingest_options("cfmm")
@pass_workspace
def ingest_cfmm_cmd(workspace: Workspace, file: Path, dataset: str | None, images_dir: Path | None,
                    licence: str | None, skip_bad: bool, report: Path | None, update: bool, as_json: bool) -> None:
    """Ingest CFMM pairs (JSONL: id, image, type, basic_question, basic_options, basic_answer, cf_question,
    cf_options, cf_answer) as draft items."""
    with showing_progress():
        result = ingest_cfmm(workspace.store, file, images_dir, skip_bad, report_path(workspace, report, file.name),
                             dataset, ingest_licence(workspace, licence), update=update)
    print_ingest(result, as_json)
