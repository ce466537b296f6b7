"""`cftools generate edits`: edit instructions by the LLM, then edited candidates by an edit model, checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

import click
from rich.markup import escape

from cftools.commands.common import console, err_console, pass_workspace, print_json
from cftools.commands.exit_codes import exit_for_failures
from cftools.commands.generation import (llm_options, llm_run, print_estimate, ray_run_address, run_money,
                                         run_with_llm, stop_for_budget)
from cftools.commands.summary import Line, always, print_lines
from cftools.errors import CftoolsError
from cftools.progress import StepProgress, step_progress
from cftools.workspace import Workspace

if TYPE_CHECKING:  # the command imports it where it runs, as it does the rest of cftools.generate
    from cftools.generate.edits import EditOptions


def size_option(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    from cftools.imagegen.base import check_size

    try:
        return check_size(value) if value is not None else None
    except CftoolsError as exc:
        raise click.BadParameter(str(exc), param_hint="--size") from None


@click.command("edits")
@click.option("--kind", "kinds", multiple=True, help="Only items of this kind (repeatable; default: every kind "
              "that declares edits: cvqa, cfmm).")
@click.option("--group", "groups", multiple=True, help="Only items of this group (repeatable).")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many items.")
@click.option("--edit-backend", type=click.Choice(["diffusers", "openai"]),
              help="Edit backend (default: [edits] backend, else diffusers with the embedded tiny pipeline).")
@click.option("--edit-model", help="A diffusers edit pipeline folder or hub id, or an images API model (default: "
              "[edits] model, else the embedded tiny pipeline).")
@click.option("--licence", "--license", "licence", help="The edit model's licence, when its folder's model card does not say it.")
@click.option("--allow-non-commercial", is_flag=True, default=None,
              help="Use an edit model whose licence is not for commercial use (recorded with every edit).")
@click.option("--per-item", type=click.IntRange(min=1), default=4, show_default=True, help="Candidates per item.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Base seed: candidate k of every item uses seed + k.")
@click.option("--steps", type=click.IntRange(min=1), help="Denoising steps (default: the backend's).")
@click.option("--guidance", type=float, help="Guidance scale (default: the backend's).")
@click.option("--size", callback=size_option, help="WIDTHxHEIGHT, multiples of 8 (default: the original's, "
              "or the embedded pipeline's 64x64).")
@click.option("--answerer", help="Run the answer check with this eval answerer (hf:PATH_OR_ID or openai:MODEL): "
              "the original question about the original and each edited image.")
@click.option("--irrelevant/--no-irrelevant", default=True, show_default=True,
              help="Also make each item's irrelevant edit (a change the question does not depend on: the answer "
              "stays).")
@llm_options(backend_flag="--llm-backend")
@pass_workspace
def edits_cmd(workspace: Workspace, kinds: tuple[str, ...], groups: tuple[str, ...], limit: Optional[int],
              edit_backend: Optional[str], edit_model: Optional[str], licence: Optional[str],
              allow_non_commercial: Optional[bool], per_item: int, seed: int, steps: Optional[int],
              guidance: Optional[float], size: Optional[str], answerer: Optional[str], irrelevant: bool,
              backend: Optional[str],
              model: Optional[str], template_path: Optional[Path], concurrency: Optional[int], refresh: bool,
              max_attempts: int, quiet: bool, as_json: bool) -> None:
    """Make edited images that show each item's presupposition (items with an image and a counterfactual
    condition: C-VQA, CFMM), and irrelevant edits the answer does not depend on. The LLM writes both edit
    instructions per item; the edit model makes --per-item candidates of each with recorded seeds; the edit checks
    rank them, best first. A rerun does only what is missing."""
    from cftools.generate.edits import EditOptions, editable_items, write_instructions
    from cftools.generate.llm_task import text_params
    from cftools.generate.edits import LOCAL_MAX_TOKENS

    if (edit_backend or workspace.section("edits").get("backend")) == "openai":
        given = {"--steps": steps, "--guidance": guidance}
        if ignored := [flag for flag, value in given.items() if value is not None]:
            raise click.UsageError(f"{', '.join(ignored)}: a diffusers edit pipeline's, which an images API "
                                   "(edit backend openai) does not take")
    items = editable_items(workspace.store, kinds, groups, limit)
    run = llm_run(workspace, template_path, concurrency, refresh, max_attempts, quiet or as_json)
    instructions = run_with_llm(workspace, backend, model, lambda llm, config: write_instructions(
        workspace.store, llm, items, run=replace(run, params=text_params(config, 200, llm.name, LOCAL_MAX_TOKENS)),
        irrelevant=irrelevant))
    controls = getattr(instructions, "controls", None)
    if controls is not None and controls.estimate:  # --estimate: nothing called, no image made either
        print_estimate(controls, as_json, "edit instructions")
        return
    if not as_json:
        print_lines(INSTRUCTION_LINES, instructions, console, err_console, controls=controls)
    if instructions.stats.interrupted:
        raise click.ClickException("interrupted; what finished is stored, rerun the same command to continue")
    with step_progress(err_console, quiet=quiet, as_json=as_json,
                       labels={"images": "edited images (candidates)"}) as shown:
        report = make_edits(workspace, shown, items, edit_backend, edit_model, licence, allow_non_commercial,
                            answerer, EditOptions(per_item=per_item, seed=seed, steps=steps, guidance=guidance,
                                                  size=size, irrelevant=irrelevant))
    report.instructions = {**instructions.as_dict(), **(run_money(controls) if controls is not None else {})}
    if as_json:
        print_json(report.as_dict())
    else:
        print_lines(EDIT_LINES, report, console, err_console)
    stop_for_budget(controls)
    stats = instructions.stats
    exit_for_failures(stats.done + stats.failed + report.images_made + len(report.failures),
                      stats.failed + len(report.failures), "requests (edit instructions and edit calls)")


def edits_made(items: int, shown: Mapping[str, Any]) -> str:
    report = shown["report"]
    return (f"{items} items with {escape(report.backend)}:{escape(report.model)} (licence "
            f"{escape(str(report.licence))}): {report.images_made} edits made ({report.rate:.2f} images/s), "
            f"{report.candidates_kept} kept from earlier runs, {len(report.failures)} failed, "
            f"{report.without_instruction} edits without an instruction; {report.flagged} edits whose "
            f"best candidate is flagged. Images are in {escape(report.folder)}")


def instructions_written(stats: Any, shown: Mapping[str, Any]) -> str:
    run = shown["report"]
    return (f"edit instructions with {escape(run.backend)}:{escape(run.model)}: {run.selected} asked, "
            f"{run.items_created} written, {stats.failed} failed, {stats.cached} from the cache")


def failed_edits(failures: list[dict[str, Any]], shown: Mapping[str, Any]) -> list[str]:
    """The first five failures, each with its reason."""
    return [f"  [yellow]item {failure['item_id']} {failure['edit']} edit k={failure['k']}: "
            f"{escape(str(failure['reason']))}[/]" for failure in failures[:5]]


INSTRUCTION_LINES = (
    Line("stats", instructions_written, when=always),
    Line("stats", lambda _, shown: f"  {escape(shown['controls'].usage.summary())}",
         when=lambda _, shown: shown["controls"] is not None),  # tokens, cache hits and cost
)
EDIT_LINES = (
    Line("items", edits_made, when=always, soft_wrap=True),
    Line("failures", failed_edits, when=always),
)


def make_edits(workspace: Workspace, shown: StepProgress, items: list, edit_backend: Optional[str],
               edit_model: Optional[str], licence: Optional[str], allow_non_commercial: Optional[bool],
               answerer: Optional[str], options: EditOptions):  # noqa: ANN201
    """The image step: load the edit model (and the answerer), make the missing candidates, each counted on SHOWN."""
    from cftools.generate.edits import generate_edits
    from cftools.imagegen.edits import make_edit_backend

    config = workspace.section("edits")
    address = ray_run_address()
    with shown.waiting("loading the edit model"):
        if address is not None:  # the edit model on the cluster's workers; this process writes what they make
            from cftools.imagegen.remote import remote_images

            edit = remote_images(make_edit_backend, (config, edit_backend, edit_model),
                                 dict(licence=licence, allow_non_commercial=allow_non_commercial), address,
                                 workspace.section("ray"), edit_backend or config.get("backend") or "diffusers")
        else:
            edit = make_edit_backend(config, edit_backend, edit_model, licence=licence,
                                     allow_non_commercial=allow_non_commercial)
    checker = None
    try:
        if answerer:
            from cftools.evaluate.answerers import load_answerer, parse_model_spec

            with shown.waiting(f"loading the answerer {answerer}"):
                checker = load_answerer(parse_model_spec(answerer), "auto", "auto", workspace.section("llm"),
                                        store=workspace.store)
        return generate_edits(workspace.store, workspace.root, edit, items, options=options, answerer=checker,
                              progress=lambda made, total, failed: shown("images", made + failed, total))
    finally:
        edit.close()
        if checker is not None and hasattr(checker, "close"):
            checker.close()
