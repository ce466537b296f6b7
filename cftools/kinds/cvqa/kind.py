"""C-VQA: a VQA question rewritten with a presupposition; groups numerical-direct, numerical-indirect, boolean.

Built by LLM chain-of-thought rewriting (booleans: the answer is flipped first); scored as accuracy on the
original vs the counterfactual question per group, and the drop (C-VQA, Table 1).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from cftools.kinds.base import (AnnotateHooks, Check, CheckHooks, EditSubject, EvaluateHooks, ExportFormat, Generator,
                                GenerateHooks, IngestHooks, Kind, ReleaseHooks, ReportTable)
from cftools.kinds.cvqa.checks import declared_checks
from cftools.kinds.cvqa.model import BOOLEAN, COUNT_GROUPS, GROUP_ANSWER_TYPE, GROUPS, CvqaData
from cftools.kinds.cvqa.release import write_csv



class CvqaIngest(IngestHooks):
    data_model = CvqaData
    groups = GROUPS

    def commands(self) -> dict[str, list]:
        from cftools.kinds.cvqa import commands as cvqa_commands

        return {"ingest": [cvqa_commands.ingest_cvqa_cmd],
                "generate": [cvqa_commands.rewrite_cmd, cvqa_commands.reparse_cmd]}


class CvqaGenerate(GenerateHooks):
    generators = (
        Generator("rewrite", "chain-of-thought rewriting of a source question into a counterfactual one; "
                  "booleans flip the answer first", inputs=("source question", "answer"),
                  outputs=("question", "answer", "flipped_answer"),
                  templates=tuple(f"rewrite/{g}.j2" for g in GROUPS)),
        Generator("reparse", "the rewrite parser over stored outputs again, no model call",
                  inputs=("stored outputs",), outputs=("question", "answer")),
    )

    def edit_subject(self, item: Any, source: Any) -> Optional[EditSubject]:
        """The source question about the edited image must get the rewritten question's answer."""
        data = item.data or {}
        question = data.get("original_question") or (source.question if source else None)
        answer = data.get("original_answer") if data.get("original_question") else (source.answer if source else None)
        if not question or answer is None or not item.question or item.answer is None:
            return None
        return EditSubject(question, str(answer), item.question, str(item.answer), GROUP_ANSWER_TYPE.get(item.group))


class CvqaCheck(CheckHooks):
    @property
    def checks(self) -> tuple[Check, ...]:  # type: ignore[override]
        return declared_checks()

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        return GROUP_ANSWER_TYPE.get(group)

    def answer_style(self, item) -> Optional[str]:  # noqa: ANN001
        from cftools.item_view import options

        if item.group in COUNT_GROUPS:
            return "count"
        if item.group == BOOLEAN:
            return "yes/no"
        if options(item.question):
            return "choice"
        # a counting type without options (abs_counting_*) still takes a count: the check flags "zero"
        return "count" if (item.group or "").startswith("abs_counting_") else None


class CvqaAnnotate(AnnotateHooks):
    tasks = {"verify": "cvqa/verify.xml.j2", "adjudicate": "cvqa/adjudicate.xml.j2", "edit": "cvqa/edit.xml.j2"}

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        # item.data (the source row's type and line) is cftools' record, not something to judge: not shown.
        return {"image": image_value,
                "original_question": source.question if source else "",
                "original_answer": (source.answer or "") if source else "",
                "question": item.question, "proposed_answer": item.answer or ""}

    # -- the edit task (cftools.annotate.edit_task) ------------------------------------------------------------

    def task_spec(self, task: str):  # noqa: ANN201
        from cftools.annotate.edit_task import EDIT, edit_spec

        return edit_spec(self.kind.name) if task == EDIT else None

    def task_units(self, task: str, item: Any) -> list[str]:
        from cftools.annotate.edit_task import edit_units

        return edit_units(item.data or {})

    def task_payload(self, task: str, unit: str, item: Any, source: Any, image_value: str,
                     extra_images: dict[str, str]) -> dict[str, Any]:
        from cftools.annotate.edit_task import edit_payload

        subject = self.kind.hooks.generate.edit_subject(item, source)
        return edit_payload(unit, item, subject.original_question if subject else "", image_value, extra_images)

    def read_judgment(self, purpose: str, result: Any, workspace_root: Optional[str] = None) -> Any:
        from cftools.annotate.edit_task import EDIT, read_edit

        if purpose == EDIT:
            return read_edit(self.read_result(purpose, result, workspace_root))
        return super().read_judgment(purpose, result, workspace_root)

    def check_judgment(self, task: str, answer: Any, task_data: dict[str, Any]) -> None:
        from cftools.annotate.edit_task import EDIT, fit_edit

        if task == EDIT:
            fit_edit(answer, task_data)

    def decide_task(self, task: str, unit: str, item: Any, answers: Sequence[tuple[str, Any]]):  # noqa: ANN201
        from cftools.annotate.edit_task import decide_edit, free_text_answer, item_source

        # an irrelevant edit's answer must stay the original
        subject = self.kind.hooks.generate.edit_subject(item, item_source(item))
        return decide_edit(unit, answers, free_text_answer, subject.original_answer if subject else None)

    def agreement_labels(self, task: str, answer: Any) -> dict[str, str]:
        from cftools.annotate.edit_task import EDIT, edit_agreement_labels

        return edit_agreement_labels(answer) if task == EDIT else {}


class CvqaRelease(ReleaseHooks):
    export_formats = (ExportFormat("cvqa", "the C-VQA CSV columns as published (items with an original question)",
                                   write_csv, keeps=lambda r: bool(r.get("original_question"))),)


class CvqaEvaluate(EvaluateHooks):
    metrics = ("original", "counterfactual", "drop", "unknown_original", "unknown_counterfactual")
    paper_settings = {"mode": "generate"}  # the paper reads the models' generated answers

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.evaluate.edited import edited_questions  # the original question about the edited image
        from cftools.evaluate.questions import pair_questions

        questions = pair_questions(record, ctx, self.kind)
        return questions + edited_questions(record, ctx, self.kind, questions)

    def read_as_paper(self, question: Any, raw: Optional[str]) -> Optional[tuple[Optional[str], bool]]:
        """The C-VQA scripts' reading (format_response.py + calc_acc.py; see cftools.kinds.cvqa.scores)."""
        from cftools.kinds.cvqa.scores import read_as_scripts

        return read_as_scripts(question, raw)

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        """Per group and in total: original and counterfactual accuracy, their drop, unknown rates."""
        from cftools.evaluate.metrics import TOTAL, by_group, pair_row

        rows = [pair_row(group, items, "original", "counterfactual") for group, items in by_group(outcomes).items()]
        rows.append(pair_row(TOTAL, outcomes, "original", "counterfactual"))
        from cftools.evaluate.edited import edited_sections

        return {"rows": rows, **edited_sections(outcomes)}

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        rows = [[r["group"], str(r["n"]), fmt.pct(r["original"]), fmt.rate(r["unknown_original"]),
                 fmt.pct(r["counterfactual"]), fmt.rate(r["unknown_counterfactual"]), fmt.pct(r["drop"])]
                for r in section["rows"]]
        return ReportTable(self.kind.name, "C-VQA accuracy (%), original vs counterfactual",
                           ["group", "n", "original", "unknown", "counterfactual", "unknown", "drop"], rows,
                           note=DEFINITION)

    def paper_tables(self, section: dict[str, Any], fmt) -> list[ReportTable]:  # noqa: ANN001
        """C-VQA's Table 1 layout: the groups as columns; original, counterfactual and the drop as rows (and the
        edited-image table when the run asked about edited images)."""
        from cftools.evaluate.edited import edited_tables

        rows = section["rows"]
        return [ReportTable(self.kind.name, "C-VQA accuracy (%) in the paper's Table 1 layout",
                            ["", *[r["group"] for r in rows]],
                            [["original", *[fmt.pct(r["original"]) for r in rows]],
                             ["counterfactual", *[fmt.pct(r["counterfactual"]) for r in rows]],
                             ["drop", *[fmt.pct(r["drop"]) for r in rows]]]),
                *edited_tables(self.kind.name, section, fmt)]

    def csv_rows(self, section: dict[str, Any]) -> list:
        out = []
        for r in section["rows"]:
            out += [(r["group"], metric, r[metric], None) for metric in ("original", "counterfactual", "drop")]
            out += [(r["group"], "unknown_original", r["unknown_original"], r["n"]),
                    (r["group"], "unknown_counterfactual", r["unknown_counterfactual"], r["n"])]
        from cftools.evaluate.edited import edited_csv_rows

        return out + edited_csv_rows(section)

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        rows = section["rows"]
        return ("C-VQA accuracy", [r["group"] for r in rows],
                [("original", [r["original"] for r in rows]), ("counterfactual", [r["counterfactual"] for r in rows])])


# What the C-VQA table's numbers are (the paper's Table 1), said under it in report.md.
DEFINITION = ("As C-VQA's Table 1: per group, the share of original questions answered right and of counterfactual "
              "questions answered right, each over the group's n items (those whose two questions were both "
              "answered); drop = original − counterfactual, in points, its interval paired over the same items.")


class CvqaKind(Kind):
    name = "cvqa"
    title = "C-VQA: rewritten VQA questions (numerical direct, numerical indirect, boolean)"
    ingest = CvqaIngest
    generate = CvqaGenerate
    check = CvqaCheck
    annotate = CvqaAnnotate
    release = CvqaRelease
    evaluate = CvqaEvaluate
