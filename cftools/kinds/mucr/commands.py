"""The MuCR kind's commands: `ingest captions`, `ingest mucr`, `generate captions`, `generate context`, `generate
images`, `generate cues`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import click
from rich.markup import escape

from cftools.commands.common import console, err_console, pass_workspace, print_json, ray_option
from cftools.commands.common import ray_address as ray_address_of
from cftools.commands.exit_codes import document_exit_codes, exit_for_failures
from cftools.commands.generation import llm_options, llm_run, print_llm_report, redo_option, run_with_llm
from cftools.errors import CftoolsError
from cftools.progress import step_progress
from cftools.commands.ingest import file_ingest_options, ingest_licence, print_ingest, report_path, showing_progress
from cftools.kinds.mucr.generate import (CAPTION_PAIR_TOKENS, CAPTIONS_MAX_TOKENS, CONTEXT_MAX_TOKENS,
                                         LOCAL_CONTEXT_MAX_TOKENS, draft_captions, text_params, write_context)
from cftools.kinds.mucr.ingest import ingest_captions, ingest_mucr
from cftools.workspace import Workspace


@click.command("captions")
@file_ingest_options("captions", images=False)
@pass_workspace
def ingest_captions_cmd(workspace: Workspace, file: Path, dataset: Optional[str], licence: Optional[str],
                        skip_bad: bool, report: Optional[Path], update: bool, as_json: bool) -> None:
    """Ingest MuCR caption pairs (CSV or JSONL: cause, effect, category, group; optional style, id)."""
    with showing_progress():
        result = ingest_captions(workspace.store, file, skip_bad, report_path(workspace, report, file.name), dataset,
                                 ingest_licence(workspace, licence), update=update)
    print_ingest(result, as_json)


@click.command("mucr")
@file_ingest_options("mucr")
@pass_workspace
def ingest_mucr_cmd(workspace: Workspace, file: Path, dataset: Optional[str], images_dir: Optional[Path],
                    licence: Optional[str], skip_bad: bool, report: Optional[Path], update: bool,
                    as_json: bool) -> None:
    """Ingest MuCR records as published (JSONL: id, caption_0, caption_1, link_id, cue, false_cue, style, label,
    causal_reason, and image_0/image_1, which are optional) as draft items that can be checked, annotated,
    extended and released again. The pairs of a group are those its link_id names."""
    with showing_progress():
        result = ingest_mucr(workspace.store, file, images_dir, skip_bad, report_path(workspace, report, file.name),
                             dataset, ingest_licence(workspace, licence), update=update)
    print_ingest(result, as_json)


@click.command("captions")
@click.option("--from", "seeds", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Seed causalities, one per line: 'speeding -> pulled over'.")
@click.option("--per-group", type=click.IntRange(min=1), default=4, show_default=True,
              help="Caption pairs drafted per seed (one group).")
@llm_options
@pass_workspace
def captions_cmd(workspace: Workspace, seeds: Path, per_group: int, backend: Optional[str], model: Optional[str],
                 template_path: Optional[Path], concurrency: Optional[int], refresh: bool, max_attempts: int,
                 quiet: bool, as_json: bool) -> None:
    """Draft groups of concrete, drawable caption pairs from seed causalities (MuCR); drafts are checked and
    annotated like any other item."""
    run = llm_run(workspace, template_path, concurrency, refresh, max_attempts, quiet or as_json)
    report = run_with_llm(workspace, backend, model, lambda llm, config: draft_captions(
        workspace.store, llm, seeds, per_group=per_group, run=replace(run, params=text_params(
            config, max(CAPTIONS_MAX_TOKENS, CAPTION_PAIR_TOKENS * per_group), llm.name))))
    print_llm_report(report, as_json, "caption pairs")


@click.command("context")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many caption pairs.")
@click.option("--group", "groups", multiple=True, help="Only pairs of this group (repeatable).")
@llm_options
@pass_workspace
def context_cmd(workspace: Workspace, limit: Optional[int], groups: tuple[str, ...], backend: Optional[str],
                model: Optional[str], template_path: Optional[Path], concurrency: Optional[int], refresh: bool,
                max_attempts: int, quiet: bool, as_json: bool) -> None:
    """Expand caption pairs into contextual descriptions: one call per pair writes both (shared appearance,
    clothing, place, light; then what differs), so the two images cannot drift apart."""
    run = llm_run(workspace, template_path, concurrency, refresh, max_attempts, quiet or as_json)
    report = run_with_llm(workspace, backend, model, lambda llm, config: write_context(
        workspace.store, llm, limit=limit, groups=groups, run=replace(run, params=text_params(
            config, CONTEXT_MAX_TOKENS, llm.name, LOCAL_CONTEXT_MAX_TOKENS))))
    print_llm_report(report, as_json, "contextual descriptions")


def size_option(value: Optional[str]) -> Optional[str]:
    """--size checked before any work: a bad one is bad usage (exit 2)."""
    from cftools.imagegen.base import check_size

    try:
        return check_size(value) if value is not None else None
    except CftoolsError as exc:
        raise click.BadParameter(str(exc), param_hint="--size") from None


@click.command("images")
@click.option("--backend", type=click.Choice(["diffusers", "openai"]),
              help="Image backend (default: [images] backend, else diffusers with the embedded tiny pipeline).")
@click.option("--model", help="A diffusers pipeline folder or an images API model (default: [images] model).")
@click.option("--styles", default="photograph,comic", show_default=True,
              help="Comma-separated styles (prompts/images/<style>.j2: prompt suffix and negative prompt).")
@click.option("--per-prompt", type=click.IntRange(min=1), default=4, show_default=True,
              help="Candidates per description (cause and effect each).")
@click.option("--seed", type=int, default=0, show_default=True, help="Base seed (candidate seeds derive from it).")
@click.option("--steps", type=click.IntRange(min=1), help="Denoising steps (default: the backend's).")
@click.option("--guidance", type=float, help="Classifier-free guidance scale (default: the backend's).")
@click.option("--size", callback=lambda ctx, param, value: size_option(value),
              help="WIDTHxHEIGHT, multiples of 8 (default: the backend's).")
@click.option("--consistency", type=click.Choice(["seed", "img2img"]),
              help="seed: cause k and effect k share initial latents; img2img: effect k is made from cause k.")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many pairs.")
@click.option("--group", "groups", multiple=True, help="Only pairs of this group (repeatable).")
@click.option("--regenerate-rejected", is_flag=True,
              help="New candidates, with new seeds, for the styles an annotator marked 'none usable'.")
@click.option("--json", "as_json", is_flag=True, help="Print the run's summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (they are off under --json too).")
@ray_option()
@document_exit_codes
@pass_workspace
def images_cmd(workspace: Workspace, backend: Optional[str], model: Optional[str], styles: str, per_prompt: int,
               seed: int, steps: Optional[int], guidance: Optional[float], size: Optional[str],
               consistency: Optional[str], limit: Optional[int], groups: tuple[str, ...], regenerate_rejected: bool,
               as_json: bool, quiet: bool, ray_address: Optional[str]) -> None:
    """Make candidate cause/effect images for pairs with contextual descriptions (siamese: candidate k of the
    cause and of the effect start from the same latents). A rerun makes only what is missing."""
    from cftools.imagegen import ClipScorer, PairSettings, make_image_backend, parse_styles
    from cftools.kinds.mucr.images import ImagesOptions, generate_images

    config = workspace.section("images")
    if (backend or config.get("backend")) == "openai":
        given = {"--steps": steps, "--guidance": guidance, "--consistency": consistency}
        if ignored := [flag for flag, value in given.items() if value is not None]:
            raise click.UsageError(f"{', '.join(ignored)}: a diffusers pipeline's, which an images API (backend "
                                   "openai) does not take")
    chosen = parse_styles(styles, Path(config["styles_dir"]) if config.get("styles_dir") else None)
    address = ray_address_of(click.get_current_context(), ray_address)
    with step_progress(err_console, quiet=quiet, as_json=as_json, labels={"images": "candidate images"}) as shown:
        with shown.waiting("loading the image pipeline"):
            if address is not None:  # the pipeline on the cluster's workers; this process writes what they make
                from cftools.imagegen.remote import remote_images

                image_backend = remote_images(make_image_backend, (config, backend, model),
                                              {"consistency": consistency}, address, workspace.section("ray"),
                                              backend or config.get("backend") or "diffusers")
            else:
                image_backend = make_image_backend(config, backend, model, consistency=consistency)
        try:
            scorer = None
            if config.get("score_model"):
                with shown.waiting("loading the scoring model"):
                    scorer = ClipScorer(config["score_model"])
            options = ImagesOptions(styles=tuple(chosen), limit=limit, groups=groups,
                                    regenerate_rejected=regenerate_rejected,
                                    draw=PairSettings(n=per_prompt, seed=seed, steps=steps, guidance=guidance,
                                                      size=size))
            report = generate_images(workspace.store, workspace.root, image_backend, options=options, scorer=scorer,
                                     progress=lambda done, total, failed: shown("images", done + failed, total))
        finally:
            image_backend.close()
    if as_json:
        print_json(report.as_dict())
    else:
        print_images_report(report)
    # a candidate is a cause and an effect image (two made), a failure one candidate: counted in candidates
    exit_for_failures(report.images_made // 2 + len(report.failures), len(report.failures), "candidates")


def print_images_report(report) -> None:  # noqa: ANN001
    console.print(f"{report.pairs} pairs with {escape(report.backend)}:{escape(report.model)}, styles "
                  f"{', '.join(report.styles)}: {report.images_made} images made ({report.rate:.2f} images/s), "
                  f"{report.candidates_kept} candidates kept from earlier runs, {len(report.failures)} failed. "
                  f"Images are in {escape(report.folder)}", soft_wrap=True)
    for failure in report.failures[:5]:
        console.print(f"  [yellow]item {failure['item_id']} {failure['style']} k={failure['k']}: "
                      f"{escape(str(failure['reason']))}[/]")


@click.command("cues")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many selected pairs.")
@click.option("--group", "groups", multiple=True, help="Only pairs of this group (repeatable).")
@click.option("--from-ranking", is_flag=True,
              help="Without annotators (a demo): first select each style's best-ranked candidate pair "
                   "(recorded as selected by ranking; people choose with `annotate push --task select`).")
@redo_option
@llm_options
@pass_workspace
def cues_cmd(workspace: Workspace, limit: Optional[int], groups: tuple[str, ...], from_ranking: bool,
             backend: Optional[str],
             model: Optional[str], template_path: Optional[Path], concurrency: Optional[int], refresh: bool,
             max_attempts: int, quiet: bool, as_json: bool, redo: Optional[str] = None) -> None:
    """Draft the cue, three false cues and a three-part explanation of every selected pair (MuCR) from its two
    descriptions; the checks flag cue problems, and the explain task shows the draft to three people."""
    from cftools.generate.llm_task import refuse_prompt_variant
    from cftools.kinds.mucr.cues import (CUES_MAX_TOKENS, LOCAL_CUES_MAX_TOKENS, CuesTask, draft_cues,
                                         select_from_ranking)

    run = llm_run(workspace, template_path, concurrency, refresh, max_attempts, quiet or as_json)
    if from_ranking:
        refuse_prompt_variant(CuesTask.generator, run)  # before the ranking's selections are written, not after
        made = select_from_ranking(workspace.store, limit, groups)
        err_console.print(f"{made} pairs selected by the candidates' ranking (unverified).")
    if redo:
        from cftools.generate.redo import redo_drafts
        from cftools.kinds.mucr.cues import MUCR_CUES_REDO

        def draft(store, llm, **kwargs):  # noqa: ANN001, ANN202
            return redo_drafts(store, llm, MUCR_CUES_REDO, redo, **kwargs)
    else:
        draft = draft_cues
    report = run_with_llm(workspace, backend, model, lambda llm, config: draft(
        workspace.store, llm, limit=limit, groups=groups, run=replace(run, params=text_params(
            config, CUES_MAX_TOKENS, llm.name, LOCAL_CUES_MAX_TOKENS))))
    print_llm_report(report, as_json, "redone cue drafts" if redo else "cue drafts")


def stage_options(command: str) -> list[click.Option]:
    """The MuCR options of `cftools export` and `cftools eval`."""
    if command == "export":
        from cftools.kinds.mucr.release import DEFAULT_SCHEMA, SCHEMA_ALIASES, SCHEMAS

        return [click.Option(["--mucr-schema"], type=click.Choice([*SCHEMAS, *SCHEMA_ALIASES]), default=DEFAULT_SCHEMA,
                             show_default=True,
                             help="--format mucr: the record fields: those of MuCR's README since 2024-08-31 "
                                  "(readme-2024-08-31, with image_0/image_1), of its README 2024-08-14 to 08-30 "
                                  "(readme-2024-08-14, no images), or the cause/effect variant (cause-effect, "
                                  "source unconfirmed). v1 and v2 are the old names of the first and the last."),
                click.Option(["--mucr-seed"], type=int, default=0, show_default=True,
                             help="--format mucr: the seed that shuffles the choice sets (recorded)."),
                click.Option(["--allow-small-groups"], is_flag=True,
                             help="--format mucr: keep groups of fewer than 4 pairs (fewer choices; the card says so).")]
    if command == "eval":
        return [click.Option(["--mucr-input"], type=click.Choice(["split", "composite"]), default=None,
                             help="MuCR: each picture as its own image (form 3) or one composite image (form 1). "
                                  "Default: composite, the paper's main setting, where the release has composites "
                                  "(--format mucr), else split.")]
    return []
