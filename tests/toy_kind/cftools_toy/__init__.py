"""A toy benchmark shape, shipped the way a research group would ship its own: a package with a `Kind` subclass,
its Label Studio configs beside it, and an entry point in the `cftools.kinds` group (see the dist-info folder).

A toy item asks for the colour of the shape in an image; `data` holds the shape and its colour.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

from cftools.kinds import (AnnotateHooks, Check, CheckHooks, EvaluateHooks, ExportFormat, IngestHooks, ItemData, Kind,
                           ReleaseHooks, ReportTable)


class ToyData(ItemData):
    shape: str
    colour: str


def check_blob(item) -> Any:  # noqa: ANN001
    from cftools.findings import Flag

    return Flag("toy_blob", "a blob is not a shape anyone can name") if "blob" in item.question else None


def write_toy_csv(release) -> None:  # noqa: ANN001 (cftools.release.release.Release)
    with open(release.folder / f"{release.name}.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["id", "question", "answer"])
        for entry in release.items:
            writer.writerow([entry.record["id"], entry.record["question"], entry.record["answer"]])


class ToyIngest(IngestHooks):
    data_model = ToyData


class ToyCheck(CheckHooks):
    checks = (Check("toy_blob", check_blob, lambda item: True, "every toy item"),)


class ToyAnnotate(AnnotateHooks):
    tasks = {"verify": "toy/verify.xml.j2", "adjudicate": "toy/verify.xml.j2"}

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        return {"image": image_value, "question": item.question, "proposed_answer": item.answer or "",
                "shape": str((item.data or {}).get("shape"))}


class ToyRelease(ReleaseHooks):
    export_formats = (ExportFormat("toy-csv", "id, question, answer", write_toy_csv),)


class ToyEvaluate(EvaluateHooks):
    metrics = ("accuracy",)

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.evaluate.questions import Question, record_image
        from cftools.evaluate.vlm import Prompt

        image = record_image(record, ctx)
        prompt = Prompt(text=record["question"], images=[image] if image and ctx.needs_image else [],
                        options=None, max_new_tokens=ctx.max_new_tokens)
        return [Question(str(record["id"]), "colour", self.kind.name, str(record["group"]), str(record["answer"]),
                         "other", prompt)]

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        from cftools.evaluate.metrics import accuracy, answered

        asked = [o["colour"] for o in outcomes if answered(o, "colour")]
        return {"accuracy": accuracy([a["correct"] for a in asked]).as_dict()}

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        return ReportTable(self.kind.name, "Toy accuracy (%)", ["n", "accuracy"],
                           [[str(section["accuracy"]["n"]), fmt.pct(section["accuracy"])]])

    def csv_rows(self, section: dict[str, Any]) -> list:
        return [("total", "accuracy", section["accuracy"], None)]


class ToyKind(Kind):
    """It generates nothing: no `generate` hooks (the stages use their defaults)."""

    name = "toy"
    title = "Toy: the colour of a shape"
    template_root = Path(__file__).parent
    ingest = ToyIngest
    check = ToyCheck
    annotate = ToyAnnotate
    release = ToyRelease
    evaluate = ToyEvaluate
