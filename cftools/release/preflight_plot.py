"""`cftools preflight`'s picture: the minimum detectable difference against the number of items, per kind, with a
marker where the release stands and, where preflight knows both, the room between its floor and the human ceiling.

The curves are `cftools.release.preflight.mdd_curve` (the power computation of the report's MDD column); the PNG is
drawn headless (matplotlib's Agg canvas) with deterministic bytes (no timestamp). It is written outside the release
folder, whose every file the manifest lists (`cftools verify` would find it extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cftools.release.preflight import ALL_GROUPS, ALPHA, POWER, PreflightReport, Scope, headroom, mdd_curve

PLOT_DPI = 100
PLOT_SIZE_INCHES = (7.5, 4.5)
PNG_METADATA = {"Software": None}
COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3")


def default_plot_path(release_dir: Path) -> Path:
    """Beside the release folder (never inside it: the manifest lists every file there)."""
    folder = Path(release_dir).resolve()
    return folder.parent / f"{folder.name}-preflight.png"


def kind_scopes(report: PreflightReport) -> list[Scope]:
    """The per-kind scopes (all groups): one curve each."""
    return [s for s in report.scopes if s.group == ALL_GROUPS]


def draw_kind(axes: Any, scope: Scope, colour: str, index: int) -> None:
    curve = mdd_curve(scope)
    source = "from the runs" if scope.design.get("source") == "runs" else "assumed design"
    if curve:
        axes.plot([p.items for p in curve], [100 * p.mdd for p in curve], color=colour,
                  label=f"{scope.kind}: MDD ({source})")
    mark_release(axes, scope, colour, index)
    room = headroom(scope)
    if room is not None and room[0] > 0:
        axes.axhline(100 * room[0], color=colour, linestyle="--", linewidth=1,
                     label=f"{scope.kind}: human ceiling − {room[1]} ({100 * room[0]:.1f})")


def mark_release(axes: Any, scope: Scope, colour: str, index: int) -> None:
    """Where the release stands: a dot at its items and MDD, or a dotted line at its items when it detects no
    difference (not even the largest possible); INDEX keeps the labels of kinds with as many items apart."""
    if scope.items <= 0:
        return
    if scope.mdd is not None:
        axes.plot([scope.items], [100 * scope.mdd], "o", color=colour, markersize=7)
        axes.annotate(f"{scope.kind}: {scope.items} items, MDD {100 * scope.mdd:.1f}", (scope.items, 100 * scope.mdd),
                      textcoords="offset points", xytext=(6, 6), fontsize=8, color=colour)
        return
    axes.axvline(scope.items, color=colour, linestyle=":", linewidth=1.5)
    axes.annotate(f"{scope.kind}: {scope.items} items, no difference detectable", (scope.items, 0.98),
                  xycoords=("data", "axes fraction"), textcoords="offset points", xytext=(3 + 11 * index, 0),
                  rotation=90, va="top", fontsize=8, color=colour)


def write_preflight_plot(report: PreflightReport, path: Path) -> Path:
    """Draw REPORT's MDD curves into PATH (PNG); returns PATH."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=PLOT_SIZE_INCHES, dpi=PLOT_DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    scopes = kind_scopes(report)
    for n, scope in enumerate(scopes):
        draw_kind(axes, scope, COLOURS[n % len(COLOURS)], n)
    if not axes.lines:
        axes.text(0.5, 0.5, "no questions with an accuracy to compare", ha="center", va="center",
                  transform=axes.transAxes)
    else:
        from matplotlib.ticker import ScalarFormatter

        axes.set_xscale("log")
        axes.xaxis.set_major_formatter(ScalarFormatter())  # 20, 50, 100 rather than 2×10¹
        axes.set_ylim(bottom=0)
        axes.legend(loc="best", fontsize=8, framealpha=0.8)
    axes.set_title(f"{report.name} {report.version}".strip() + f": smallest detectable difference ({POWER:.0%} "
                   f"power, α = {ALPHA}, paired test clustered by image)", fontsize=9)
    axes.set_xlabel("items (each asked as many questions as this release's items)")
    axes.set_ylabel("MDD (accuracy points)")
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, format="png", dpi=PLOT_DPI, metadata=PNG_METADATA)
    return path
