"""An evaluation run's report: rich tables in the terminal, report.md, report.csv, report.png; and compare.

Each kind lays out its own table the way its paper does (`report_table`). Accuracies are percentages with their
95% bootstrap interval; the unknown rate (replies that could not be read) stands next to every generated score. The
files name a model given as a local folder by its name only (`cftools.boundary.public_spec`): reports are shared.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Optional, Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cftools.boundary import public_spec
from cftools.kinds import all_kinds
from cftools.kinds.base import ReportTable, ScoreFormat

REPORT_MD = "report.md"
REPORT_CSV = "report.csv"
REPORT_PNG = "report.png"
TERMINAL_HEADERS = {"original": "orig", "counterfactual": "cf", "unknown": "unk"}
LABEL_WIDTH = 24  # a terminal table's row names (group, type) keep this width at least
CSV_FIELDS = ("section", "group", "metric", "value", "low", "high", "n")
# The readings other than cftools' own (`eval --reading`): how the report names each, and what it follows.
READING_TITLES = {"paper": "the papers' way", "vlmevalkit": "as VLMEvalKit's own scorers read them",
                  "lmms-eval": "as lmms-eval's own tasks read them"}
READING_NAMES = {"paper": "paper", "vlmevalkit": "VLMEvalKit", "lmms-eval": "lmms-eval"}
READING_SOURCES = {
    "paper": "C-VQA as its format_response.py and calc_acc.py read them",
    "vlmevalkit": "yes/no as YOrN_Extraction, multiple choice as can_infer, without its LLM judge; other "
                  "questions as cftools reads them",
    "lmms-eval": "yes/no as its MME task, image letters as its SEED-Bench task; other questions as cftools "
                 "reads them",
}


def pct(score: Optional[dict]) -> str:
    if not score or score.get("value") is None:
        return "–"
    text = f"{100 * score['value']:.1f}"
    if score.get("low") is not None:
        text += f" [{100 * score['low']:.1f}, {100 * score['high']:.1f}]"
    return text


def rate(value: Optional[float]) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def points(score: Optional[dict]) -> str:
    if not score or score.get("value") is None:
        return "–"
    return f"{score['value']:.2f} [{score['low']:.2f}, {score['high']:.2f}]"


def pct_bare(score: Optional[dict]) -> str:
    """'63.2': the value alone, for a terminal too narrow for the interval."""
    return "–" if not score or score.get("value") is None else f"{100 * score['value']:.1f}"


def points_bare(score: Optional[dict]) -> str:
    return "–" if not score or score.get("value") is None else f"{score['value']:.2f}"


def pct_compact(score: Optional[dict]) -> str:
    """'63.2 (58–68)': the terminal's narrower form of `pct`."""
    if not score or score.get("value") is None:
        return "–"
    text = f"{100 * score['value']:.1f}"
    if score.get("low") is not None:
        text += f" ({100 * score['low']:.0f}–{100 * score['high']:.0f})"
    return text


def kind_sections(summary: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(kind, its section) for every kind with scores in SUMMARY, in the summary's order."""
    kinds = all_kinds()
    return [(kinds[name], section) for name, section in summary.items() if name in kinds]


def report_tables(summary: dict[str, Any], compact: bool = False, intervals: bool = True) -> list[ReportTable]:
    """Each kind's table; without INTERVALS (a narrow terminal) scores are shown bare, never cut."""
    fmt = ScoreFormat(pct=(pct_compact if compact else pct) if intervals else pct_bare, rate=rate,
                      points=points if intervals else points_bare)
    tables = [kind.hooks.evaluate.report_table(section, fmt) for kind, section in kind_sections(summary)]
    return [t for t in tables if t is not None]


def csv_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The report flattened: one row per section, group and metric (fractions, not percentages)."""
    out: list[dict[str, Any]] = []
    for kind, section in kind_sections(summary):
        for group, metric, score, n in kind.hooks.evaluate.csv_rows(section):
            if isinstance(score, dict):
                out.append({"section": kind.name, "group": group, "metric": metric, "value": score.get("value"),
                            "low": score.get("low"), "high": score.get("high"), "n": score.get("n", n)})
            else:
                out.append({"section": kind.name, "group": group, "metric": metric, "value": score, "low": None,
                            "high": None, "n": n})
    return out


def settings_lines(config: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """Per kind: the settings of its paper's main table and whether this run used them; where a release mixes
    kinds whose papers answer differently, why a kind's mode is not its paper's."""
    lines = []
    mixed = mixed_paper_modes(summary)
    for kind, section in kind_sections(summary):
        if not kind.hooks.evaluate.paper_settings:
            continue
        parts = []
        for setting, paper in kind.hooks.evaluate.paper_settings.items():
            used = kind.hooks.evaluate.setting_used(setting, config, section)
            verdict = "as in the paper" if used == paper else "not the paper's"
            if setting == "mode" and used != paper and mixed and used in mixed.values():
                verdict += (": one run has one mode and this release mixes kinds whose papers answer differently ("
                            + ", ".join(f"{name} {mode}" for name, mode in mixed.items())
                            + f"); evaluate a release of {kind.name} alone to {paper} as its paper does")
            parts.append(f"{setting} {paper} in the paper, {used or 'not set'} in this run ({verdict})")
        lines.append(f"{kind.name} settings: " + "; ".join(parts))
    return lines


def mixed_paper_modes(summary: dict[str, Any]) -> dict[str, str]:
    """Kind -> its paper's mode, for the kinds of SUMMARY when their papers answer differently (else empty)."""
    modes = {kind.name: kind.hooks.evaluate.paper_settings["mode"] for kind, _ in kind_sections(summary)
             if kind.hooks.evaluate.paper_settings.get("mode")}
    return modes if len(set(modes.values())) > 1 else {}


def _header_lines(config: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    skipped = summary.get("skipped") or {}
    lines = [f"model `{public_spec(config['model'])}`, mode **{config['mode']}**"
             + (f", score **{config['score']}** ({config['score_rule']})" if config.get("score") else ""),
             f"release `{config['release_name']}`: {config['items']} items, {summary.get('answered', 0)} of "
             f"{config['questions']} questions answered; prompt template `{config['template']}`",
             f"skipped: {skipped.get('no_image', 0)} items without an image, "
             f"{skipped.get('no_options', 0)} items without options (rank mode)",
             f"prompt variant **{config.get('prompt') or 'plain'}**"
             + (", every question with options asked again with the options swapped" if config.get("swap_options")
                else "")]
    if config.get("imported_from"):
        harnesses = sorted({source["harness"] for source in config["imported_from"]})
        lines.append(f"predictions imported from {len(config['imported_from'])} {'/'.join(harnesses)} files "
                     f"(`cftools eval import`); {(config.get('skipped') or {}).get('not_answered', 0)} questions "
                     "of the release not answered in them")
    if config.get("verified") is False:
        lines.append("**not verified** (--no-verify): the release's files were not checked against its manifest")
    if config.get("kind_options"):
        lines.append("options: " + ", ".join(f"{k} = {v}" for k, v in sorted(config["kind_options"].items())))
    if config.get("reading") in READING_TITLES:
        differing = summary.get("reading_differences") or []
        lines.append(f"replies read **{READING_TITLES[config['reading']]}** (--reading {config['reading']}: "
                     f"{READING_SOURCES[config['reading']]}); cftools' strict reading differs on {len(differing)} "
                     "questions (both scores side by side below)")
    if config.get("judge"):
        lines.append(f"judge `{public_spec(config['judge'])}`, scores over the references: "
                     f"{config.get('judge_aggregate')}")
    return lines + settings_lines(config, summary)


def render_markdown(config: dict[str, Any], summary: dict[str, Any]) -> str:
    out = [f"# Evaluation: {public_spec(config['model'])} on {config['release_name']}", ""]
    out += [f"- {line}" for line in _header_lines(config, summary)]
    out.append("")
    out.append("Accuracies in %, with the 95% bootstrap interval; unknown = replies that could not be read "
               "(counted as wrong).")
    fmt = ScoreFormat(pct=pct, rate=rate, points=points)
    paper = [t for kind, section in kind_sections(summary) for t in kind.hooks.evaluate.paper_tables(section, fmt)]
    for table in report_tables(summary) + paper:
        out += ["", f"## {table.title}", *(["", table.note] if table.note else []), "",
                "| " + " | ".join(table.columns) + " |",
                "|" + "|".join("---" for _ in table.columns) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in table.rows]
    bias = summary.get("position_bias")
    if bias:
        out += ["", "## Position bias (--swap-options)", "",
                "Every question with options was asked twice, the options in reverse order the second time.", "",
                "| pairs | choice follows the position | same option both times | first position chosen |",
                "|---|---|---|---|",
                f"| {bias['pairs']} | {rate(bias['follows_position'])} | {rate(bias['same_option'])} | "
                f"{rate(bias['first_position'])} |"]
    if summary.get("strict_reading") is not None:
        reading = config.get("reading")
        out += ["", f"## {READING_NAMES.get(reading, reading)}'s reading beside cftools' (--reading {reading})", "",
                f"| section | group | metric | n | {READING_NAMES.get(reading, reading)} | cftools | difference |",
                "|---|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(row) + " |" for row in side_by_side_rows(summary)]
    if summary.get("reading_differences"):
        reading = config.get("reading") or "paper"
        out += ["", f"## Where cftools' strict reading differs (--reading {reading})", "",
                f"| id | question | reply | gold | {READING_NAMES.get(reading, reading)} | strict |",
                "|---|---|---|---|---|---|"]
        out += [f"| `{d['id']}` | {d['which']} | {cell(d['raw'])} | {cell(d['gold'])} | "
                f"{cell(d['paper'])} ({'right' if d['paper_correct'] else 'wrong'}) | "
                f"{cell(d['strict'])} ({'right' if d['strict_correct'] else 'wrong'}) |"
                for d in summary["reading_differences"]]
    if "blind_correct" in summary:
        right = summary["blind_correct"]
        out += ["", f"## Answered right without the image ({len(right)})", ""]
        out += [f"- `{p['id']}` {p['which']}: {p['raw']!r} (gold {p['gold']!r})" for p in right] or ["- none"]
    out.append("")
    return "\n".join(out)


def side_by_side_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Every score of a run read another way (paper, harness) beside the same score under cftools' strict
    reading: section, group, metric, n, theirs, cftools', difference in points."""
    ours = {(r["section"], r["group"], r["metric"]): r for r in csv_rows(summary["strict_reading"])}
    rows = []
    for row in csv_rows(summary):
        key = (row["section"], row["group"], row["metric"])
        theirs, mine = row["value"], (ours.get(key) or {}).get("value")
        if row["metric"].startswith("exp") or (theirs is None and mine is None):
            continue  # judged explanations are read by no harness
        show = (lambda v: "–" if v is None else f"{100 * v:.1f}")  # in %, as `cftools eval compare` shows them
        difference = "–" if theirs is None or mine is None else f"{100 * (theirs - mine):+.1f}"
        rows.append([*map(str, key), str(row["n"] if row["n"] is not None else ""), show(theirs), show(mine),
                     difference])
    return rows


def cell(value: Any) -> str:
    """A value as one Markdown table cell: unread shown as –, pipes and line breaks escaped."""
    if value is None:
        return "–"
    return repr(str(value)).replace("|", "\\|").replace("\n", " ")


def render_csv(summary: dict[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in csv_rows(summary):
        writer.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_FIELDS})
    return buffer.getvalue()


def plot_series(summary: dict[str, Any]) -> tuple[str, list[str], list[tuple[str, list[Optional[dict]]]]]:
    """(title, groups, [(label, scores per group)]) for the bar plot: the first kind that has a plot."""
    for kind, section in kind_sections(summary):
        series = kind.hooks.evaluate.plot_series(section)
        if series is not None:
            return series
    return "no scores", [], []


def write_plot(path: Path, title: str, groups: Sequence[str], series: Sequence[tuple[str, Sequence]]) -> None:
    """Grouped bars (percent) with 95% interval whiskers; deterministic bytes (no timestamps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(groups) + 2), 3.6), dpi=100)
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    colors = ["#4C72B0", "#DD8452", "#55A868"]
    for i, (label, scores) in enumerate(series):
        values = [100 * (s["value"] or 0) if s and s.get("value") is not None else 0.0 for s in scores]
        low = [v - 100 * s["low"] if s and s.get("low") is not None else 0.0 for v, s in zip(values, scores)]
        high = [100 * s["high"] - v if s and s.get("high") is not None else 0.0 for v, s in zip(values, scores)]
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=label, color=colors[i % len(colors)],
               yerr=[low, high], capsize=3)
    ax.set_xticks(x)
    ax.set_xticklabels(groups)
    ax.set_ylim(0, 100)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    if series:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)


def write_reports(result: Any) -> None:
    out = Path(result.out_dir)
    (out / REPORT_MD).write_text(render_markdown(result.config, result.summary), encoding="utf-8")
    (out / REPORT_CSV).write_text(render_csv(result.summary), encoding="utf-8")
    title, groups, series = plot_series(result.summary)
    write_plot(out / REPORT_PNG, f"{title}: {public_spec(result.config['model'])} ({result.config['mode']})", groups,
               series)


def table_width(table: ReportTable) -> int:
    """The width a rich Table of TABLE needs with every cell on one line: cells, padding and borders."""
    widths = [max([len(TERMINAL_HEADERS.get(column, column))] + [len(row[i]) for row in table.rows])
              for i, column in enumerate(table.columns)]
    return sum(widths) + 3 * len(widths) + 1


def rich_tables(config: dict[str, Any], summary: dict[str, Any], width: int = 80) -> list[Any]:
    """The report for the terminal: a header and one rich Table per item shape. Numbers are never cut: a table
    too wide for WIDTH columns (80 in a non-TTY) drops its intervals, which stay in report.md and report.csv."""
    items: list[Any] = ["\n".join(line.replace("**", "").replace("`", "") for line in _header_lines(config, summary))]
    with_intervals = report_tables(summary, compact=True)
    bare = report_tables(summary, intervals=False)
    for table, narrow in zip(with_intervals, bare):
        fits = table_width(table) <= width
        if not fits:
            table = narrow
        note = ", 95% CI in ( )" if fits else " (95% CIs in report.md)"
        items.append(Text(table.title + note))  # a line of its own: a table's title is cut at the table's width
        if table.note:
            items.append(Text(table.note))  # what the table's scores mean (a task not asked, ...)
        rich = Table()
        for i, column in enumerate(table.columns):
            # every column keeps its widest cell (the row names too: squeezed, rich drops that column whole);
            # the row names wrap only past LABEL_WIDTH
            widest = max([len(row[i]) for row in table.rows] or [len(column)])
            rich.add_column(TERMINAL_HEADERS.get(column, column), justify="left" if i == 0 else "right",
                            no_wrap=i > 0, overflow="fold", min_width=widest if i > 0 else min(widest, LABEL_WIDTH))
        for row in table.rows:
            rich.add_row(*(escape(str(cell)) for cell in row))  # group names come from the data
        items.append(rich)
    edits = edit_scores_table(summary)
    if edits is not None:
        items += edits
    if summary.get("strict_reading") is not None:
        reading = config.get("reading")
        name = READING_NAMES.get(reading, reading)
        items.append(Text(f"{name}'s reading beside cftools' (--reading {reading})"))
        rich = Table()
        rows = side_by_side_rows(summary)
        for i, column in enumerate(("section", "group", "metric", "n", name, "cftools", "difference")):
            # the numbers keep their width (never cut); the names wrap where the terminal is narrow
            widest = max([len(row[i]) for row in rows] or [len(column)])
            rich.add_column(column, justify="left" if i < 3 else "right", no_wrap=i >= 3, overflow="fold",
                            min_width=widest if i >= 3 else None)
        for row in rows:
            rich.add_row(*(escape(c) for c in row))
        items.append(rich)
    if "blind_correct" in summary:
        items.append(f"{len(summary['blind_correct'])} questions answered right without the image "
                     f"(listed in report.md)")
    return items


def edit_totals(summary: dict[str, Any]) -> list[tuple[str, Optional[dict], Optional[dict]]]:
    """(kind, its `edited` total row, its `consistency` total row) for every kind whose run asked about edited
    images (`cftools.evaluate.edited`, `cftools.evaluate.consistency`)."""
    out = []
    for kind, section in kind_sections(summary):
        edited = (section.get("edited") or [None])[-1] if isinstance(section, dict) else None
        consistency = (section.get("consistency") or [None])[-1] if isinstance(section, dict) else None
        if edited or consistency:
            out.append((kind.name, edited, consistency))
    return out


def edit_scores_table(summary: dict[str, Any]) -> Optional[list[Any]]:
    """The terminal's lines for edited images: per kind, the paired score (the original question right about both the
    original and the edited image) and the consistency score, over all groups (report.md has them per group)."""
    totals = edit_totals(summary)
    if not totals:
        return None
    table = Table()
    for i, column in enumerate(("kind", "n", "paired", "n", "consistency", "change iff relevant")):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for name, edited, consistency in totals:
        edited, consistency = edited or {}, consistency or {}
        table.add_row(escape(name), str(edited.get("n", "–")), pct_compact(edited.get("paired")),
                      str(consistency.get("n", "–")), pct_compact(consistency.get("consistency")),
                      pct_compact(consistency.get("change_iff_relevant")))
    return [Text("Edited images (%), all groups, 95% CI in ( ): paired = the original question right about both the "
                 "original and the edited image; consistency = right about the original, the relevant and the "
                 "irrelevant edit (per group in report.md)"), table]


def on_ten_point_scale(metric: str) -> bool:
    """Whether METRIC is a 0-10 score (MuCR Exp and its parts S1-S3), not a fraction shown in percent."""
    return metric == "exp" or metric.startswith("exp_s")


def compare_table(a: Any, b: Any) -> Table:
    """Two runs side by side: every metric of either, A, B and B - A (in points)."""
    rows_a = {(r["section"], r["group"], r["metric"]): r for r in csv_rows(a.summary)}
    rows_b = {(r["section"], r["group"], r["metric"]): r for r in csv_rows(b.summary)}
    title = (f"A: {public_spec(a.config['model'])} ({a.config['mode']})   "
             f"B: {public_spec(b.config['model'])} ({b.config['mode']})")
    table = Table(title=escape(title),
                  title_justify="left")
    for column in ("section", "group", "metric", "A", "B", "B - A"):
        table.add_column(column, justify="left" if column in ("section", "group", "metric") else "right")
    for key in list(dict.fromkeys([*rows_a, *rows_b])):
        va = rows_a.get(key, {}).get("value")
        vb = rows_b.get(key, {}).get("value")
        scale = 1 if on_ten_point_scale(key[2]) else 100
        fmt = (lambda v: "–" if v is None else f"{scale * v:.1f}")
        diff = "–" if va is None or vb is None else f"{scale * (vb - va):+.1f}"
        table.add_row(*(escape(str(part)) for part in key), fmt(va), fmt(vb), diff)
    return table
