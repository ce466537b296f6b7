"""The data card of a release: statistics, PNG plots and README.md rendered from a Jinja2 template.

Everything here is a function of the records and the store's provenance, so the card and the plots
are the same bytes for the same store (matplotlib's Agg canvas, fixed size, no Software/date metadata).
"""

from __future__ import annotations

from cftools.annotate.verification import NOT_PROVEN, SEPARATE, SHARED, release_words

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from cftools import __version__
from cftools.release.layout import CARD_NAME, DATA_DIR, PLOTS_DIR, parquet_name

if TYPE_CHECKING:
    from cftools.release.release import Release

PLOT_SIZE_INCHES = (10.0, 4.5)
PLOT_DPI = 100  # so every plot is 1000 x 450 pixels
PLOT_SIZE_PIXELS = (int(PLOT_SIZE_INCHES[0] * PLOT_DPI), int(PLOT_SIZE_INCHES[1] * PLOT_DPI))
MAX_COUNT_BIN = 15  # answers above are shown as "16+"
PNG_METADATA = {"Software": None}
ANSWER_PLOT = "answer_distribution.png"
LENGTH_PLOT = "question_lengths.png"
PAPER_QUESTION_WORDS = (5.75, 13.12)  # C-VQA paper: average words before/after the rewrite
PAPER_NO_SHARE = 65.7  # C-VQA paper: % "no" among the boolean counterfactual answers


def word_count(text: str | None) -> int:
    return len((text or "").split())


def _mean(values: list[int]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _percent(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def count_answer(answer: str | None) -> int | None:
    text = (answer or "").strip()
    return int(text) if text.isdigit() else None


def group_table(records: list[dict]) -> list[dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        row = rows.setdefault((r["kind"], r["group"]), {"kind": r["kind"], "group": r["group"], "verified": 0,
                                                        "unverified": 0, "total": 0})
        row["verified" if r["verified"] else "unverified"] += 1
        row["total"] += 1
    return [rows[key] for key in sorted(rows)]


def yes_no_balance(records: list[dict]) -> dict[str, Any]:
    yn = [r for r in records if r["answer_type"] == "yes/no"]
    original = Counter((r["original_answer"] or "").strip().lower() for r in yn if r["original_answer"])
    counterfactual = Counter((r["answer"] or "").strip().lower() for r in yn)
    n_cf = counterfactual["yes"] + counterfactual["no"]
    n_or = original["yes"] + original["no"]
    return {"n_items": len(yn), "counterfactual_yes": counterfactual["yes"], "counterfactual_no": counterfactual["no"],
            "counterfactual_no_percent": _percent(counterfactual["no"], n_cf),
            "original_no_percent": _percent(original["no"], n_or),
            "flipped": sum(1 for r in yn if r["original_answer"] and
                           (r["original_answer"] or "").strip().lower() != (r["answer"] or "").strip().lower())}


def question_lengths(records: list[dict]) -> dict[str, Any]:
    paired = [r for r in records if r["original_question"]]
    return {"paired_items": len(paired),
            "original_words": _mean([word_count(r["original_question"]) for r in paired]),
            "counterfactual_words": _mean([word_count(r["question"]) for r in paired]),
            "all_counterfactual_words": _mean([word_count(r["question"]) for r in records])}


def provenance_summary(provenance: list[dict]) -> dict[str, Any]:
    generators: Counter = Counter()
    for p in provenance:
        gen = p.get("generation")
        if gen:
            generators[(gen["generator"], gen["backend"], gen["model"], gen.get("template_name") or "",
                        (gen.get("template_hash") or "")[:12])] += 1
    decisions = Counter((p.get("annotation") or {}).get("decision") or "none" for p in provenance)
    annotated = [p["annotation"] for p in provenance if p.get("annotation")]
    flags = Counter(code for p in provenance for code in p.get("check_flags", []))
    verifications = [p.get("verification") or {} for p in provenance]
    return {
        "origins": sorted(Counter(p.get("origin") or "unknown" for p in provenance).items()),
        "datasets": sorted(Counter((p.get("source") or {}).get("dataset") or "(none)" for p in provenance).items()),
        "generators": [{"generator": k[0], "backend": k[1], "model": k[2], "template_name": k[3],
                        "template_hash": k[4], "n_items": n} for k, n in sorted(generators.items())],
        "decisions": sorted(decisions.items()),
        "annotated": len(annotated),
        "adjudicated": sum(1 for a in annotated if a.get("adjudicated")),
        "agreed": sum(1 for a in annotated if a.get("agreed")),
        "with_two_judgments": sum(1 for a in annotated if a.get("agreed") is not None),
        "flags": sorted(flags.items()),
        "flagged_items": sum(1 for p in provenance if p.get("check_flags")),
        "waived_flags": sum(len(p.get("waived_flags") or []) for p in provenance),
        "waived_items": sum(1 for p in provenance if p.get("waived_flags")),
        "corrected": sum(1 for p in provenance if p.get("corrected_from") is not None),
        "separate_servers": sum(1 for v in verifications if v.get("people") and v.get("separate_servers")),
        "shared_server": sum(1 for v in verifications if v.get("people") and not v.get("separate_servers")),
        "verification_words": release_words(verifications), "separate_words": SEPARATE, "shared_words": SHARED,
        "not_proven_words": NOT_PROVEN,
    }


def edit_models(records: list[dict]) -> list[dict[str, Any]]:
    from cftools.release.edited import edit_models as models

    return models(records)


def unverified_edits(records: list[dict]) -> int:
    from cftools.release.edited import unverified_edits as count

    return count(records)


def card_stats(records: list[dict], provenance: list[dict]) -> dict[str, Any]:
    return {
        "n_items": len(records),
        "verified": sum(1 for r in records if r["verified"]),
        "unverified": sum(1 for r in records if not r["verified"]),
        "without_image": sum(1 for r in records if r["image"] is None),
        "images": len({r["image_sha256"] for r in records if r["image_sha256"]}),
        "groups": group_table(records),
        "splits": sorted(Counter(r["split"] for r in records).items()),
        "statuses": sorted(Counter(r["status"] for r in records).items()),
        "lengths": question_lengths(records),
        "yes_no": yes_no_balance(records),
        "provenance": provenance_summary(provenance),
        "edit_models": edit_models(records),
        "unverified_edits": unverified_edits(records),
    }


# ---------------------------------------------------------------- plots


def _figure():  # noqa: ANN202
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=PLOT_SIZE_INCHES, dpi=PLOT_DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> None:  # noqa: ANN001
    figure.savefig(path, format="png", dpi=PLOT_DPI, metadata=PNG_METADATA)


def _paired_bars(axes, labels: list[str], left: list[int], right: list[int], names: tuple[str, str],  # noqa: ANN001
                 legend: bool = True) -> None:
    positions = list(range(len(labels)))
    width = 0.4
    axes.bar([p - width / 2 for p in positions], left, width, label=names[0], color="#7f9cc4")
    axes.bar([p + width / 2 for p in positions], right, width, label=names[1], color="#d9825b")
    axes.set_xticks(positions)
    axes.set_xticklabels(labels)
    if legend:
        axes.legend(frameon=False)


def _empty(axes, text: str) -> None:  # noqa: ANN001
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes)
    axes.set_xticks([])
    axes.set_yticks([])


def count_bins(values: list[int | None]) -> list[int]:
    bins = [0] * (MAX_COUNT_BIN + 2)
    for value in values:
        if value is not None:
            bins[min(value, MAX_COUNT_BIN + 1)] += 1
    return bins


def plot_answer_distribution(records: list[dict], path: Path) -> None:
    """Like the C-VQA paper's Figure 3: counts of each numerical answer, and yes/no answers, before and
    after the counterfactual rewrite."""
    figure = _figure()
    numeric_axes, yes_no_axes = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    numeric = [r for r in records if r["answer_type"] == "number"]
    if numeric:
        labels = [str(i) for i in range(MAX_COUNT_BIN + 1)] + [f"{MAX_COUNT_BIN + 1}+"]
        _paired_bars(numeric_axes, labels, count_bins([count_answer(r["original_answer"]) for r in numeric]),
                     count_bins([count_answer(r["answer"]) for r in numeric]), ("original", "counterfactual"))
        numeric_axes.set_xlabel("answer")
        numeric_axes.set_ylabel("items")
    else:
        _empty(numeric_axes, "no numerical items")
    numeric_axes.set_title("Numerical answers")
    yes_no = [r for r in records if r["answer_type"] == "yes/no"]
    if yes_no:
        def tally(key: str) -> list[int]:
            counts = Counter((r[key] or "").strip().lower() for r in yes_no)
            return [counts["yes"], counts["no"]]

        _paired_bars(yes_no_axes, ["yes", "no"], tally("original_answer"), tally("answer"),
                     ("original", "counterfactual"), legend=not numeric)
    else:
        _empty(yes_no_axes, "no yes/no items")
    yes_no_axes.set_title("Yes/no answers")
    figure.tight_layout()
    _save(figure, path)


def plot_question_lengths(records: list[dict], path: Path) -> None:
    figure = _figure()
    axes = figure.subplots()
    paired = [r for r in records if r["original_question"]]
    if paired:
        before = [word_count(r["original_question"]) for r in paired]
        after = [word_count(r["question"]) for r in paired]
        top = max(before + after)
        bins = list(range(0, top + 2))
        axes.hist(before, bins=bins, alpha=0.7, label="original question", color="#7f9cc4")
        axes.hist(after, bins=bins, alpha=0.7, label="counterfactual question", color="#d9825b")
        axes.set_xlabel("words")
        axes.set_ylabel("items")
        axes.legend(frameon=False)
    else:
        _empty(axes, "no items with an original question")
    axes.set_title("Question length before and after the counterfactual rewrite")
    figure.tight_layout()
    _save(figure, path)


# ---------------------------------------------------------------- the card


def kind_tables(records: list[dict]) -> list[Any]:
    """Each kind's own data card tables (`ReleaseHooks.card_tables`) over its records in the release."""
    from cftools.kinds import all_kinds

    tables = []
    for name, kind in sorted(all_kinds().items()):
        mine = [r for r in records if r.get("kind") == name]
        if mine:
            tables.extend(kind.hooks.release.card_tables(mine))
    return tables


def card_header(license: str | None, parquet_files: list[str]) -> str:
    """The card's YAML header (the Hub's dataset-card metadata), written by a YAML library: a licence like
    `a: b` or a name with quotes stays one string that `datasets` reads back."""
    import yaml

    header: dict[str, Any] = {"license": license.lower()} if license else {}
    header["configs"] = [{"config_name": "default", "data_files": [
        {"split": path.split("/")[-1].split("-00000-of-")[0], "path": path} for path in parquet_files]}]
    return yaml.safe_dump(header, sort_keys=False, allow_unicode=True, default_flow_style=False)


def render_card(context: dict[str, Any]) -> str:
    env = Environment(loader=PackageLoader("cftools.release", "."), keep_trailing_newline=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    header = card_header(context.get("license"), context["parquet_files"])
    return env.get_template("datacard.md.j2").render(card_header=header, **context)


def kind_sections(records: list[dict], provenance: list[dict], context: dict[str, Any]) -> str:
    """Each kind's own section of the card (`ReleaseHooks.card_section`), for the kinds present, in name order."""
    from cftools.kinds import all_kinds

    kinds = all_kinds()
    text = ""
    for name in sorted({str(r.get("kind")) for r in records} & set(kinds)):
        mine = [i for i, r in enumerate(records) if r.get("kind") == name]
        lines = kinds[name].hooks.release.card_section([records[i] for i in mine], [provenance[i] for i in mine],
                                                       context)
        if lines:
            text += "\n" + "\n".join(lines) + "\n"
    return text


def write_card(release: Release, *, kind_context: dict[str, Any] | None = None,
               preflight: list[str] | None = None) -> None:
    """Plots under plots/ and README.md in the release's folder; KIND_CONTEXT reaches the kinds' own sections; the
    release's changes are the "Changes since" section (Markdown, `cftools.release.diff.changelog_markdown`), when
    there is a previous release; its analysis: each person's figures and the release's error rate
    (`cftools.annotate.quality`); PREFLIGHT is the section of what the release can show
    (`cftools.release.preflight.figures_markdown`), last."""
    folder, records, provenance, agreement = release.folder, release.records, release.provenance, release.agreement
    licensing = release.licensing
    (folder / PLOTS_DIR).mkdir()
    plot_answer_distribution(records, folder / PLOTS_DIR / ANSWER_PLOT)
    plot_question_lengths(records, folder / PLOTS_DIR / LENGTH_PLOT)
    stats = card_stats(records, provenance)
    present = {r["split"] for r in records}
    context = {
        "name": release.name, "version": release.version, "license": licensing.licence,
        "data_as_of": release.data_as_of, "license_given": licensing.given, "source_licences": licensing.card_rows(),
        "cftools_version": __version__, "stats": stats, "agreement": agreement,
        "parquet_files": [f"{DATA_DIR}/{parquet_name(s)}" for s in release.splits if s in present],
        "answer_plot": f"{PLOTS_DIR}/{ANSWER_PLOT}", "length_plot": f"{PLOTS_DIR}/{LENGTH_PLOT}",
        "paper_words": PAPER_QUESTION_WORDS, "paper_no_share": PAPER_NO_SHARE,
        "kind_tables": kind_tables(records), "changes": release.changes,
    }
    sections = kind_sections(records, provenance, {"agreement": agreement, **(kind_context or {})})
    if release.analysis is not None:
        from cftools.annotate.quality import analysis_markdown

        sections += "\n" + analysis_markdown(release.analysis)
    shown = "\n" + "\n".join(preflight) + "\n" if preflight else ""
    (folder / CARD_NAME).write_text(render_card(context) + sections + shown, encoding="utf-8")
