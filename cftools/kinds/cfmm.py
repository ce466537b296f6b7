"""CFMM: a basic question and its counterfactual version about one image, two options each.

Types: count, color, size, shape, direction, common. Scored by answer ranking or generation: acc_b (basic
right), acc_c (counterfactual right) and acc+ (both right), per type and in total — the CFMM paper's
definition (Tables 2 and 3: acc+ counts a pair only when both of its questions are right).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from pydantic import field_validator

from cftools.kinds.base import Check, ItemData, Kind, ReportTable

TYPES = ("count", "color", "size", "shape", "direction", "common")
CORRECT_MARK = "✓ correct"


class CfmmData(ItemData):
    """`options` = {"original": [a, b], "counterfactual": [a, b]}; the gold answers are the item's answers."""

    options: Optional[dict[str, list[str]]] = None
    type: Optional[str] = None

    @field_validator("options")
    @classmethod
    def _two_lists(cls, value: Optional[dict[str, list[str]]]) -> Optional[dict[str, list[str]]]:
        if value is not None and not {"original", "counterfactual"} <= set(value):
            raise ValueError("needs the options of both questions: 'original' and 'counterfactual'")
        return value


def options_text(options: Optional[list[str]], correct: Optional[str]) -> str:
    """One option per line, the correct one marked, for annotators."""
    if not options:
        return "none"
    letters = "ABCDEFGH"
    return "\n".join(f"{letters[i]}. {option}" + (f"  {CORRECT_MARK}" if option == correct else "")
                     for i, option in enumerate(options))


def _checks() -> tuple[Check, ...]:
    from cftools.checks import rules

    return (Check("two_questions", rules.check_two_questions, lambda i: True, "all CFMM items"),)


class CfmmKind(Kind):
    name = "cfmm"
    title = "CFMM: basic/counterfactual question pairs with two options each"
    data_model = CfmmData
    groups = TYPES
    tasks = {"verify": "cfmm/verify.xml.j2", "adjudicate": "cfmm/adjudicate.xml.j2"}
    metrics = ("acc_b", "acc_c", "acc_plus", "unknown_b", "unknown_c")

    @property
    def checks(self) -> tuple[Check, ...]:  # type: ignore[override]
        return _checks()

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        data = item.data or {}
        options = data.get("options") or {}
        basic_question = data.get("basic_question") or (source.question if source else "")
        basic_answer = data.get("basic_answer") or ((source.answer or "") if source else "")
        return {"image": image_value, "type": str(data.get("type") or item.group),
                "basic_question": basic_question,
                "basic_options": options_text(options.get("original"), basic_answer),
                "counterfactual_question": item.question,
                "counterfactual_options": options_text(options.get("counterfactual"), item.answer),
                "question": item.question, "proposed_answer": item.answer or ""}

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.evaluate.questions import pair_questions

        return pair_questions(record, ctx, self)

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        """Per type and in total: acc_b (basic question right), acc_c (counterfactual right), acc+ (both)."""
        from cftools.evaluate.metrics import TOTAL, by_group, pair_row

        rows = []
        for group, items in [*by_group(outcomes).items(), (TOTAL, list(outcomes))]:
            row = pair_row(group, items, "original", "counterfactual")
            rows.append({"type": group, "n": row["n"], "acc_b": row["original"], "acc_c": row["counterfactual"],
                         "acc_plus": row["both"], "unknown_b": row["unknown_original"],
                         "unknown_c": row["unknown_counterfactual"]})
        return {"rows": rows}

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        rows = [[r["type"], str(r["n"]), fmt.pct(r["acc_b"]), fmt.rate(r["unknown_b"]), fmt.pct(r["acc_c"]),
                 fmt.rate(r["unknown_c"]), fmt.pct(r["acc_plus"])] for r in section["rows"]]
        return ReportTable(self.name, "CFMM accuracy (%): basic, counterfactual, both (acc+)",
                           ["type", "n", "acc_b", "unknown", "acc_c", "unknown", "acc+"], rows)

    def csv_rows(self, section: dict[str, Any]) -> list:
        out = []
        for r in section["rows"]:
            out += [(r["type"], metric, r[metric], None) for metric in ("acc_b", "acc_c", "acc_plus")]
            out += [(r["type"], "unknown_b", r["unknown_b"], r["n"]), (r["type"], "unknown_c", r["unknown_c"], r["n"])]
        return out

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        rows = section["rows"]
        return ("CFMM accuracy", [r["type"] for r in rows],
                [("basic (acc_b)", [r["acc_b"] for r in rows]), ("counterfactual (acc_c)", [r["acc_c"] for r in rows])])
