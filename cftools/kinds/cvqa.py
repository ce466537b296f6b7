"""C-VQA: a VQA question rewritten with a presupposition; groups numerical-direct, numerical-indirect, boolean.

Built by LLM chain-of-thought rewriting (booleans: the answer is flipped first); scored as accuracy on the
original vs the counterfactual question per group, and the drop (C-VQA, Table 1).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Optional, Sequence

from cftools.kinds.base import Check, ExportFormat, Generator, ItemData, Kind, ReportTable

NUMERICAL_DIRECT = "numerical-direct"
NUMERICAL_INDIRECT = "numerical-indirect"
BOOLEAN = "boolean"
GROUPS = (NUMERICAL_DIRECT, NUMERICAL_INDIRECT, BOOLEAN)
GROUP_ANSWER_TYPE = {NUMERICAL_DIRECT: "number", NUMERICAL_INDIRECT: "number", BOOLEAN: "yes/no"}
# The `type` column of the published CSV.
TYPE_TO_GROUP = {"direct": NUMERICAL_DIRECT, "indirect": NUMERICAL_INDIRECT, "boolean": BOOLEAN}
GROUP_TO_TYPE = {group: cvqa_type for cvqa_type, group in TYPE_TO_GROUP.items()}
CSV_COLUMNS = ("img_path", "query", "answer", "new query", "new answer", "type")
# Groups whose presupposition adds, removes or multiplies the counted things by name, so the new count follows
# from the old one: numerical-direct and two C-VQA-Synthetic types (abs_counting_2: "if we removed 5 flowers
# in yellow polygons"; abs_counting_4: "if 14 dots were removed from the circles"). The other abs_counting
# types change the count indirectly.
DIRECT_GROUPS = frozenset({NUMERICAL_DIRECT, "abs_counting_2", "abs_counting_4"})
COUNT_GROUPS = frozenset({NUMERICAL_DIRECT, NUMERICAL_INDIRECT})


class CvqaData(ItemData):
    cvqa_type: Optional[str] = None  # the published CSV's `type`
    line: Optional[int] = None  # where an ingested item was read
    original_question: Optional[str] = None
    original_answer: Optional[str] = None
    candidates: Optional[list[str]] = None  # answers the rewrite named besides the chosen one
    flipped_answer: Optional[str] = None
    attempt: Optional[int] = None


def _is_count(item) -> bool:  # noqa: ANN001
    return item.answer_style in ("count", "choice")


def _checks() -> tuple[Check, ...]:
    from cftools.checks import rules

    return (
        Check("arithmetic", rules.check_arithmetic, lambda i: i.group in DIRECT_GROUPS,
              "numerical-direct, abs_counting_2, abs_counting_4"),
        Check("not_flipped", rules.check_not_flipped, lambda i: i.group == BOOLEAN, "boolean"),
        Check("no_presupposition", rules.check_no_presupposition, lambda i: True, "all C-VQA items"),
        Check("answer_type", rules.check_answer_type, lambda i: i.answer_style is not None,
              "numerical (digits), boolean (yes/no), multiple choice (an offered option)"),
        Check("leakage", rules.check_leakage, _is_count, "numerical and multiple-choice counts"),
        Check("two_questions", rules.check_two_questions, lambda i: True, "all C-VQA items"),
        Check("unchanged_answer", rules.check_unchanged_answer, _is_count, "numerical and multiple-choice counts"),
    )


def csv_type(record: dict[str, Any]) -> str:
    return GROUP_TO_TYPE.get(record["group"]) or str((record.get("data") or {}).get("cvqa_type") or record["group"])


def csv_img_path(entry: Any) -> str:
    """The image's content-addressed name in images/ when there is one; else the name the input used."""
    if entry.record["image"]:
        return entry.record["image"].split("/", 1)[1]
    source = entry.provenance.get("source") or {}
    return str(source.get("image_ref") or "")


def csv_name(name: str, split: Optional[str] = None) -> str:
    """The CSV of a `--format cvqa` release, named like the peer's `C-VQA-Real_questions.csv`."""
    return f"{name}_questions.csv" if split is None else f"{name}_{split}_questions.csv"


def write_csv(items: list, folder: Path, name: str, splits: dict[str, float]) -> None:
    """The C-VQA CSV as the peer publishes it: its header, minimal quoting, LF line ends."""
    names = list(splits) if len(splits) > 1 else [None]
    for split in names:
        rows = [e for e in items if split is None or e.record["split"] == split]
        with open(folder / csv_name(name, split), "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
            writer.writerow(CSV_COLUMNS)
            for entry in rows:
                r = entry.record
                writer.writerow([csv_img_path(entry), r["original_question"], r["original_answer"] or "",
                                 r["question"], r["answer"] or "", csv_type(r)])


class CvqaKind(Kind):
    name = "cvqa"
    title = "C-VQA: rewritten VQA questions (numerical direct, numerical indirect, boolean)"
    data_model = CvqaData
    groups = GROUPS
    generators = (
        Generator("rewrite", "chain-of-thought rewriting of a source question into a counterfactual one; "
                  "booleans flip the answer first", inputs=("source question", "answer"),
                  outputs=("question", "answer", "flipped_answer"),
                  templates=tuple(f"rewrite/{g}.j2" for g in GROUPS)),
        Generator("reparse", "the rewrite parser over stored outputs again, no model call",
                  inputs=("stored outputs",), outputs=("question", "answer")),
    )
    tasks = {"verify": "cvqa/verify.xml.j2", "adjudicate": "cvqa/adjudicate.xml.j2"}
    export_formats = (ExportFormat("cvqa", "the C-VQA CSV columns as published (items with an original question)",
                                   write_csv, keeps=lambda r: bool(r.get("original_question"))),)
    metrics = ("original", "counterfactual", "drop", "unknown_original", "unknown_counterfactual")

    @property
    def checks(self) -> tuple[Check, ...]:  # type: ignore[override]
        return _checks()

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        return GROUP_ANSWER_TYPE.get(group)

    def answer_style(self, item) -> Optional[str]:  # noqa: ANN001
        from cftools.checks.items import options

        if item.group in COUNT_GROUPS:
            return "count"
        if item.group == BOOLEAN:
            return "yes/no"
        return "choice" if options(item.question) else None

    def commands(self) -> dict[str, list]:
        from cftools.kinds import cvqa_commands

        return {"ingest": [cvqa_commands.ingest_cvqa_cmd],
                "generate": [cvqa_commands.rewrite_cmd, cvqa_commands.reparse_cmd]}

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        from cftools.annotate.tasks import details_text

        return {"image": image_value,
                "original_question": source.question if source else "",
                "original_answer": (source.answer or "") if source else "",
                "question": item.question, "proposed_answer": item.answer or "",
                "details": details_text(item.data)}

    # -- eval --------------------------------------------------------------------------------------------------

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.evaluate.questions import pair_questions

        return pair_questions(record, ctx, self)

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        """Per group and in total: original and counterfactual accuracy, their drop, unknown rates."""
        from cftools.evaluate.metrics import TOTAL, by_group, pair_row

        rows = [pair_row(group, items, "original", "counterfactual") for group, items in by_group(outcomes).items()]
        rows.append(pair_row(TOTAL, outcomes, "original", "counterfactual"))
        return {"rows": rows}

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        rows = [[r["group"], str(r["n"]), fmt.pct(r["original"]), fmt.rate(r["unknown_original"]),
                 fmt.pct(r["counterfactual"]), fmt.rate(r["unknown_counterfactual"]), fmt.pct(r["drop"])]
                for r in section["rows"]]
        return ReportTable(self.name, "C-VQA accuracy (%), original vs counterfactual",
                           ["group", "n", "original", "unknown", "counterfactual", "unknown", "drop"], rows)

    def csv_rows(self, section: dict[str, Any]) -> list:
        out = []
        for r in section["rows"]:
            out += [(r["group"], metric, r[metric], None) for metric in ("original", "counterfactual", "drop")]
            out += [(r["group"], "unknown_original", r["unknown_original"], r["n"]),
                    (r["group"], "unknown_counterfactual", r["unknown_counterfactual"], r["n"])]
        return out

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        rows = section["rows"]
        return ("C-VQA accuracy", [r["group"] for r in rows],
                [("original", [r["original"] for r in rows]), ("counterfactual", [r["counterfactual"] for r in rows])])
