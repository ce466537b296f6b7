"""`cftools preflight RELEASE`: thin over cftools.release.preflight (the figures) and cftools.release.review (the
reviewer's checks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import click

from cftools.commands.common import err_console, optional_workspace, release_boundary
from cftools.progress import step_progress

STAGE_LABELS = {"figures": "Figures (items, power, ceiling, floors)", "verify": "Hashing and scanning every file",
                "checks": "The reviewer's checks"}

if TYPE_CHECKING:
    from cftools.release.preflight import PreflightReport


@click.command("preflight")
@click.argument("release", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--run", "run_dirs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="An eval run folder of RELEASE to use (repeatable): the first two that are not text-only give the "
                   "MDD's discordance and intra-image correlation, a blind one the blind floor. Default: the runs "
                   "of RELEASE the workspace's store recorded, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of Markdown.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the report (Markdown, or JSON with --json) to this file.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Draw the smallest detectable difference against the number of items (PNG) into this file. "
                   "Default: RELEASE-preflight.png beside the release folder (never inside it: verify would find an "
                   "extra file).")
@click.option("--no-verify", "no_verify", is_flag=True,
              help="Report on a release whose manifest is not the one the workspace's store recorded at export, and "
                   "name it in a warning. By default such a release is refused.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr (they are off under --json too).")
@click.pass_context
def preflight_cmd(ctx: click.Context, release: Path, run_dirs: tuple[Path, ...], as_json: bool,
                  out_file: Optional[Path], plot_file: Optional[Path], no_verify: bool, quiet: bool) -> None:
    """What RELEASE can show, per kind and group: items, questions and images; the smallest accuracy difference
    between two models it detects (80% power, alpha 0.05, paired test clustered by image); the human ceiling with
    its Wilson interval; chance and the blind floor. Then the reviewer's checks: croissant, rai_fields, licence,
    sha256, images, personal_data. Draws the detectable difference against the number of items (--plot). Exit 1
    naming each check that failed."""
    from cftools.release.preflight import render_json, render_markdown
    from cftools.release.preflight_check import run_preflight

    from cftools.release.verify import refuse_unrecorded_manifest

    workspace = optional_workspace(ctx)
    changed = refuse_unrecorded_manifest(workspace.store if workspace is not None else None, release,
                                         verify=not no_verify, unverified="reports on it as it is")
    if changed:
        click.secho(f"Warning: {changed}", fg="yellow", err=True)
    refuse_plot_inside(plot_file, release)
    with step_progress(err_console, quiet=quiet, as_json=as_json, labels=STAGE_LABELS) as shown:
        report = run_preflight(release, workspace.store if workspace is not None else None, run_dirs,
                               release_boundary(ctx), progress=shown)
        with shown.waiting("drawing the plot"):
            report.plot = draw_plot(report, plot_file, release)
    text = render_json(report) if as_json else render_markdown(report)
    click.echo(text, nl=False)
    if out_file is not None:
        out_file.write_text(text, encoding="utf-8")
    if report.plot is not None and not as_json:  # JSON gives it as "plot"
        click.echo(f"MDD against the number of items drawn in {report.plot}", err=True)
    if report.failed:
        names = ", ".join(f"{c.name} ({c.detail})" for c in report.failed)
        raise click.ClickException(f"preflight failed: {names}")


def refuse_plot_inside(plot_file: Optional[Path], release: Path) -> None:
    if plot_file is not None and plot_file.resolve().is_relative_to(release.resolve()):
        raise click.BadParameter(f"{plot_file} is inside the release folder, whose manifest lists every file "
                                 "(`cftools verify` would fail): give a path outside it", param_hint="--plot")


def draw_plot(report: PreflightReport, plot_file: Optional[Path], release: Path) -> Optional[str]:
    """Draw the MDD picture into PLOT_FILE, or beside RELEASE; its path, or None when the default place cannot be
    written (a warning: that costs the picture, not the report; a --plot PATH that cannot be written is an error)."""
    from cftools.release.preflight_plot import default_plot_path, write_preflight_plot

    path = plot_file or default_plot_path(release)
    try:
        write_preflight_plot(report, path)
    except OSError as exc:
        reason = f"the MDD plot could not be written to {path}: {exc.strerror or exc}"
        if plot_file is not None:
            raise click.ClickException(reason) from None
        click.secho(f"Warning: {reason} (--plot PATH writes it elsewhere)", fg="yellow", err=True)
        return None
    return str(path)
