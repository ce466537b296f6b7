"""The report page (`cftools report --out report.html`): one self-contained HTML file, no network, a strict CSP
(browse.html's approach: `cftools.release.browse.script_json`, text drawn as DOM text nodes only).

The tables and plots (PNG, matplotlib's Agg canvas, embedded as data: URIs) are in the HTML itself, so the page shows
at once. The drill-down reads a compact index of every item (its funnel cells: row per kind/group and per generator,
stages as bits, check codes) and the items' details in chunks of CHUNK items, each its own JSON script element
parsed only when one of its items is opened: a store of 100,000 items opens in well under a second.

Images are relative references from the page's folder to the store's image files (no copy, no absolute path):
the page shows them where it is written beside the workspace, not once moved to another machine.
"""

from __future__ import annotations

import base64
import io
import os
import textwrap
from pathlib import Path
from typing import Any, Optional

from jinja2 import Environment, PackageLoader, StrictUndefined

from cftools.boundary import Boundary
from cftools.funnel.facts import STAGES, ItemFacts
from cftools.funnel.report import BY_EDITS, BY_GENERATOR, BY_GROUP, Released, Report
from cftools.release.browse import script_json

CHUNK = 1000  # items per details chunk of the drill-down
PLOT_DPI = 100
PNG_METADATA = {"Software": None}


def render_report(report: Report, boundary: Boundary, out: Path, workspace_root: Path) -> str:
    """The page's HTML, its image references relative to OUT's folder."""
    items = report.facts.items
    pictures, people = Pictures(out.resolve().parent, workspace_root), People(boundary)
    names = {by: list(rows) for by, rows in report.tables.items()}
    codes = sorted({code for item in items for code in item.flags})
    places = {by: {name: n for n, name in enumerate(listed)} for by, listed in names.items()}
    code_places = {code: n for n, code in enumerate(codes)}
    index = [[people.text(item.key), *item_index(item, places, code_places)] for item in items]
    details = [item_detail(item, people, pictures.src(item.image_path)) for item in items]
    rows = {by: [people.text(name) for name in listed] for by, listed in names.items()}
    codes = [people.text(code) for code in codes]
    chunks = [script_json(details[n:n + CHUNK]) for n in range(0, len(details), CHUNK)]
    env = Environment(loader=PackageLoader("cftools.funnel", "."), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    drill = {"stages": list(STAGES), "rows": rows, "codes": codes, "chunk": CHUNK, "items": index,
             "images": pictures.values, "people": people.values}
    return env.get_template("report.html.j2").render(
        r=report.data, stages=STAGES, rows=rows, codes=codes, plots=plots(report.data),
        drill_json=script_json(drill), chunks=chunks, fmt=figure)


def write_report(report: Report, boundary: Boundary, out: Path, workspace_root: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(report, boundary, out, workspace_root), encoding="utf-8")


def figure(value: Any, digits: int = 2) -> str:
    """A number as the tables show it ("-" for none)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def item_index(item: ItemFacts, places: dict[str, dict[str, int]], codes: dict[str, int]) -> list[Any]:
    """[kind/group row, generator row, edit backend row, stage bits, check codes]: what filtering by a funnel cell
    reads (after the item's key)."""
    bits = sum(1 << n for n, stage in enumerate(STAGES) if stage in item.stages)
    return [places[BY_GROUP][item.group_row], places[BY_GENERATOR][item.generator],
            places[BY_EDITS][item.edit_backend], bits,
            sorted(codes[code] for code in item.flags)]


class Listed:
    """Values listed once (each image reference, each person's pseudonym): an item refers to them by place."""

    def __init__(self) -> None:
        self.places: dict[str, int] = {}

    def place(self, value: str) -> int:
        return self.places.setdefault(value, len(self.places))

    @property
    def values(self) -> list[str]:
        return list(self.places)


class Pictures(Listed):
    """Each image file as the page refers to it: relative to the page's FOLDER (one lookup per file, not per item)."""

    def __init__(self, folder: Path, workspace_root: Path) -> None:
        super().__init__()
        self.folder, self.root = os.path.abspath(folder), Path(workspace_root)
        self.seen: dict[str, int] = {}

    def src(self, path: Optional[str]) -> int:
        """The place of PATH's reference (-1: the item has no image)."""
        if not path:
            return -1
        if path not in self.seen:
            where = Path(path) if Path(path).is_absolute() else self.root / path
            # relative: the boundary would cut an absolute path to its last part, which the page could not show
            self.seen[path] = self.place(Path(os.path.relpath(os.path.abspath(where), self.folder)).as_posix())
        return self.seen[path]


class People(Listed):
    """People's pseudonyms listed once (an item's judgments refer to them by place), their texts released."""

    def __init__(self, boundary: Boundary) -> None:
        super().__init__()
        self.released = Released(boundary)
        self.text = self.released.text

    def pseudonym(self, person: str) -> int:
        return self.place(self.released.pseudonym(person))


def item_detail(item: ItemFacts, people: People, image: int) -> list[Any]:
    """What the drill-down shows of one item beyond its index entry, packed (the page's script reads it): [question,
    answer, drafted answer, source question, image place, status, flags [[code, reason, waived]], judgments [[person
    place, task, related, answer right, corrected answer, flags, decision, comment, lead time]]]; people as
    pseudonyms, every text through the boundary."""
    text = people.text
    judgments = [[people.pseudonym(row.person), row.purpose, row.related, row.answer_correct,
                  text(row.corrected_answer), [text(f) for f in row.flags], row.decision, text(row.comment),
                  row.lead_time] for row in item.judgments]
    flags = [[code, text(reason), int(code in item.waived)] for code, reason in sorted(item.flags.items())]
    return [text(item.question), text(item.answer), text(item.proposed_answer), text(item.source_question), image,
            item.status, flags, judgments]


# ---------------------------------------------------------------- plots


def plots(data: dict[str, Any]) -> dict[str, str]:
    """The page's plots as data: URIs (PNG): the funnel, cost per accepted item, acceptance over time."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    drawn = {}
    for name, draw in (("funnel", draw_funnel), ("cost", draw_cost), ("over_time", draw_over_time)):
        fig = Figure(figsize=(7.5, 3.6), dpi=PLOT_DPI)
        axes = fig.add_subplot()
        draw(axes, data)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", metadata=PNG_METADATA)
        drawn[name] = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return drawn


def draw_funnel(axes: Any, data: dict[str, Any]) -> None:
    counts = data["funnel"]["total"]["counts"]
    axes.barh(list(reversed(STAGES)), [counts[s] for s in reversed(STAGES)], color="#4C72B0")
    axes.set_xlabel("items")
    axes.set_title("The funnel: items reaching each stage")


def draw_cost(axes: Any, data: dict[str, Any]) -> None:
    rows = [row for row in data["cost"][BY_GENERATOR] if row["accepted"]]
    priced = all(row["money_per_accepted"] is not None for row in rows) and any(row["money"] for row in rows)
    key, label = (("money_per_accepted", "money per accepted item") if priced
                  else ("tokens_per_accepted", "tokens per accepted item"))
    # bars at their own places: two generators under one label would be one category, one bar drawn over the other
    axes.barh(range(len(rows)), [row[key] or 0 for row in rows], color="#DD8452")
    axes.set_yticks(range(len(rows)), plot_labels([row["name"] for row in rows]))
    axes.set_xlabel(label)
    axes.set_title(f"Cost per accepted item, per generator ({label})")
    axes.tick_params(axis="y", labelsize=7)
    if not rows:
        axes.text(0.5, 0.5, "no accepted item yet", ha="center", transform=axes.transAxes)


def short(name: str, width: int = 44) -> str:
    """A generator's name as a plot's label: its end (model, template and variant tell generators apart)."""
    return name if len(name) <= width else "…" + name[-(width - 1):]


def plot_labels(names: list[str], width: int = 44) -> list[str]:
    """Generators' names as a plot's labels: each one's end, or where two ends are alike (one template and variant
    for two models) the whole name, over lines."""
    ends = [short(name, width) for name in names]
    alike = {end for end in ends if ends.count(end) > 1}
    return [textwrap.fill(name, width) if end in alike else end for name, end in zip(names, ends)]


def draw_over_time(axes: Any, data: dict[str, Any]) -> None:
    """One series per kind that has decisions (its own colour and marker), all kinds together dashed behind them."""
    every = data["acceptance_over_time"]
    if every:  # drawn first: its days (every day, in order) set the order of the axis's categories
        axes.plot([d["day"] for d in every], [d["acceptance"] for d in every], linestyle="--", color="#999999",
                  label="all kinds", zorder=1)
    markers = "osD^v<>"
    drawn = {kind: days for kind, days in data["acceptance_over_time_by_kind"].items() if days}
    for n, (kind, days) in enumerate(drawn.items()):
        axes.plot([d["day"] for d in days], [d["acceptance"] for d in days], marker=markers[n % len(markers)],
                  label=kind, zorder=2)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("accepted / decided")
    axes.set_title("Acceptance over time per kind (per day of decision)")
    axes.tick_params(axis="x", labelrotation=30, labelsize=7)
    if every:
        axes.legend(fontsize=7, loc="lower left")
    else:
        axes.text(0.5, 0.5, "no decided item yet", ha="center", transform=axes.transAxes)
