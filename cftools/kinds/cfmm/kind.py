"""CFMM: a basic question and its counterfactual version about one image, two options each (Eyes Can Deceive).

An item: image, type (count, color, size, shape, direction, common), the basic question with two options and the
correct one, the counterfactual question (the basic one with an if-condition) with two options and the correct
one. The item's `question`/`answer` are the counterfactual ones; `data` holds the type, `basic_question`,
`basic_answer`, `options` = {"original": [a, b], "counterfactual": [a, b]} and `needs_image_check` (an LLM draft
that no person has looked at with the image yet).

Authored three ways: `generate pairs` (LLM drafts from an image's source questions, `cfmm.generate`), the
`author` Label Studio task (annotators write pairs; `annotate pull` makes them drafts) and `ingest cfmm` (pairs
written elsewhere, `cfmm.ingest`). Checked for leakage, invalid options, a missing condition, subject drift and
answers a text-only model finds without the image (`cfmm.checks`); ambiguity is the annotators' judgment.
Scored per type with the paper's summed totals (`cfmm.scores`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict

from cftools.kinds.base import (AnnotateHooks, Check, CheckHooks, EditSubject, EvaluateHooks, ExportFormat,
                                GenerateHooks, Generator, IngestHooks, Kind, ReleaseHooks, ReportTable)
from cftools.kinds.cfmm.checks import declared_checks
from cftools.kinds.cfmm.model import PAPER_COUNTS, PROMPT_VARIANTS, TYPES, CfmmData, options_text
from cftools.kinds.cfmm.release import has_pair, write_jsonl


class CfmmSettings(BaseModel):
    """`[cfmm]` in cftools.toml."""
    model_config = ConfigDict(strict=True, extra="allow")
    types: Optional[str] = None  # the drafting quota of `generate pairs` (as --types)


class CfmmIngest(IngestHooks):
    data_model = CfmmData
    config_section = CfmmSettings
    groups = TYPES

    def commands(self) -> dict[str, list]:
        from cftools.kinds.cfmm import commands as cfmm_commands

        return {"ingest": [cfmm_commands.ingest_cfmm_cmd], "generate": [cfmm_commands.pairs_cmd]}


class CfmmGenerate(GenerateHooks):
    generators = (
        Generator("pairs", "an LLM picks a type for an image from its source questions (or none), then writes the "
                  "basic question, its counterfactual version and two options each; drafts need an image check",
                  inputs=("source questions", "answers"),
                  outputs=("type", "basic_question", "options", "question", "answer"),
                  templates=("cfmm/pick.j2", *(f"cfmm/{t}.j2" for t in TYPES))),
    )

    def edit_subject(self, item: Any, source: Any) -> Optional[EditSubject]:
        """The basic question about the edited image must get the counterfactual answer; both are asked with the
        options of both questions (the counterfactual answer is among them)."""
        data = item.data or {}
        if not data.get("basic_question") or not data.get("basic_answer") or not item.answer:
            return None
        options = data.get("options") or {}
        choices = list(dict.fromkeys([*options.get("original", []), *options.get("counterfactual", [])]))
        question = data["basic_question"] + (f" Options: {', '.join(choices)}." if choices else "")
        return EditSubject(question, str(data["basic_answer"]), item.question, str(item.answer), "other")


class CfmmCheck(CheckHooks):
    @property
    def checks(self) -> tuple[Check, ...]:  # type: ignore[override]
        return declared_checks()

    def prepare_checks(self, config: dict[str, Any]) -> None:
        from cftools.kinds.cfmm.checks import configure_blind_model

        configure_blind_model(config)

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        return "other"  # always a choice between two written options


class CfmmAnnotate(AnnotateHooks):
    tasks = {"verify": "cfmm/verify.xml.j2", "adjudicate": "cfmm/adjudicate.xml.j2", "author": "cfmm/author.xml.j2",
             "edit": "cfmm/edit.xml.j2"}
    authoring_tasks = ("author",)

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        from cftools.kinds.cfmm.annotate import option_choices

        data = item.data or {}
        options = data.get("options") or {}
        basic_question = data.get("basic_question") or (source.question if source else "")
        basic_answer = data.get("basic_answer") or ((source.answer or "") if source else "")
        return {"image": image_value, "type": str(data.get("type") or item.group),
                "basic_question": basic_question,
                "basic_options": options_text(options.get("original"), basic_answer),
                "counterfactual_question": item.question,
                "counterfactual_options": options_text(options.get("counterfactual"), item.answer),
                "needs_image_check": "yes: drafted from text only" if data.get("needs_image_check") else "no",
                "question": item.question, "proposed_answer": item.answer or "",
                "cf_choices": option_choices(options.get("counterfactual"), with_cannot=True),
                "cf_option_choices": option_choices(options.get("counterfactual"), with_cannot=False)}

    def read_judgment(self, purpose: str, result: Any, workspace_root: Optional[str] = None) -> Any:
        """Verify: the basic verdict and the counterfactual pick apart (`cfmm.annotate.read_verify`); adjudicate:
        as for every kind, the correction picked among the options."""
        from cftools.judgments import VERIFY, parse_answer
        from cftools.kinds.cfmm.annotate import read_verify

        answers = self.read_result(purpose, result, workspace_root)
        if purpose == VERIFY:
            return read_verify(answers)
        from cftools.annotate.edit_task import EDIT, read_edit

        if purpose == EDIT:
            return read_edit(answers)
        if isinstance(answers.get("corrected_answer"), list):  # picked among the options
            answers["corrected_answer"] = answers["corrected_answer"][0]
        return parse_answer(purpose, answers)

    def check_judgment(self, task: str, answer: Any, task_data: dict[str, Any]) -> None:
        from cftools.judgments import ADJUDICATE, VERIFY
        from cftools.kinds.cfmm.annotate import fit_adjudication, fit_verify

        if task == VERIFY:
            fit_verify(answer, task_data)
        elif task == ADJUDICATE:
            fit_adjudication(answer, task_data)
        else:
            from cftools.annotate.edit_task import EDIT, fit_edit

            if task == EDIT:
                fit_edit(answer, task_data)

    def decide(self, first: Any, second: Any) -> Any:
        """"Cannot be determined" first: both annotators say so -> rejected; one -> adjudication; otherwise the
        shared rules."""
        from cftools.judgments import Decision, decide
        from cftools.kinds.cfmm.annotate import cannot_determine
        from cftools.models import NEEDS_ADJUDICATION, REJECTED

        votes = sum(cannot_determine(a) for a in (first, second))
        if votes == 2:
            return Decision(REJECTED, rule="both: the answer cannot be determined from the image")
        if votes == 1:
            return Decision(NEEDS_ADJUDICATION, rule="one annotator: the answer cannot be determined from the image")
        decision = decide(first, second)
        if decision.corrected_answer is not None:  # both picked the same option: its exact text, not a normal form
            decision = replace(decision, corrected_answer=first.corrected_answer)
        return decision

    def adjudicated(self, answer: Any, item_data: Optional[dict] = None, adjudicator: Optional[str] = None) -> Any:
        """The adjudicator's corrected answer is the option they picked, by its exact text."""
        from cftools.judgments import adjudicated

        decision = adjudicated(answer)
        if decision.corrected_answer is not None:
            decision = replace(decision, corrected_answer=answer.corrected_answer)
        return decision

    def agreement_labels(self, task: str, answer: Any) -> dict[str, str]:
        """Verify: the basic verdict and the counterfactual answer (an option, or "cannot be determined")."""
        fields = answer.fields or {}
        if task == "verify" and "cf_answer" in fields:
            return {"basic_correct": "yes" if fields.get("basic_correct") else "no",
                    "counterfactual_answer": str(fields["cf_answer"])}
        from cftools.annotate.edit_task import EDIT, edit_agreement_labels

        return edit_agreement_labels(answer) if task == EDIT else {}

    # -- the edit task (cftools.annotate.edit_task) ------------------------------------------------------------

    def task_spec(self, task: str):  # noqa: ANN201
        from cftools.annotate.edit_task import EDIT, edit_spec

        return edit_spec(self.kind.name) if task == EDIT else None

    def task_units(self, task: str, item: Any) -> list[str]:
        from cftools.annotate.edit_task import edit_units

        return edit_units(item.data or {})

    def task_payload(self, task: str, unit: str, item: Any, source: Any, image_value: str,
                     extra_images: dict[str, str]) -> dict[str, Any]:
        """The basic question about the edited image, answered by picking one of the pair's options."""
        from cftools.annotate.edit_task import edit_payload

        data = item.data or {}
        options = data.get("options") or {}
        choices = list(dict.fromkeys([*options.get("original", []), *options.get("counterfactual", [])]))
        question = data.get("basic_question") or (source.question if source else "")
        return edit_payload(unit, item, question, image_value, extra_images, choices)

    def decide_task(self, task: str, unit: str, item: Any, answers: Sequence[tuple[str, Any]]):  # noqa: ANN201
        from cftools.annotate.edit_task import decide_edit, exact_option

        # an irrelevant edit's answer must stay the original (basic) one
        subject = self.kind.hooks.generate.edit_subject(item, None)
        return decide_edit(unit, answers, exact_option, subject.original_answer if subject else None)

    def author_task_data(self, image_value: str, sources: Sequence[Any]) -> dict[str, Any]:
        lines = [f"Q: {s.question}  A: {s.answer or '?'}" for s in sources]
        return {"image": image_value, "sources": "\n".join(lines) or "none"}

    def authored_item(self, task: str, result: Any, workspace_root: Optional[str] = None) -> Optional[dict[str, Any]]:
        from cftools.kinds.cfmm.annotate import authored_pair

        return authored_pair(self.read_result(task, result, workspace_root))

    def status_table(self, store: Any, workspace: Any = None) -> Optional[ReportTable]:
        from cftools.kinds.cfmm.generate import quota_from_config, type_status_counts

        quota = quota_from_config(workspace)
        counts = type_status_counts(store)
        statuses = sorted({status for per in counts.values() for status in per})
        total = sum(sum(per.values()) for per in counts.values())
        rows = []
        for group in TYPES:
            per = counts.get(group, {})
            n = sum(per.values())
            rows.append([group, *(str(per.get(s, 0)) for s in statuses), str(n),
                         f"{100 * n / total:.1f}%" if total else "–", f"{100 * quota.get(group, 0):.1f}%"])
        return ReportTable(self.kind.name, "CFMM items per type and status, beside the quota",
                           ["type", *statuses, "total", "share", "quota"], rows)


class CfmmRelease(ReleaseHooks):
    export_formats = (ExportFormat("cfmm", "JSONL: id, image, type, basic_question, basic_options, basic_answer, "
                                   "cf_question, cf_options, cf_answer", write_jsonl, keeps=has_pair),)

    def record_problem(self, record: dict[str, Any]) -> Optional[str]:
        from cftools.kinds.cfmm.annotate import record_problem

        return record_problem(record)

    def export_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """The basic question and answer are the pair's own (a draft may rephrase its source question)."""
        data = record.get("data") or {}
        if data.get("basic_question"):
            record["original_question"] = data["basic_question"]
        if data.get("basic_answer") is not None:
            record["original_answer"] = data["basic_answer"]
        return record  # its edits: cftools.release.edited, after this

    def card_tables(self, records: Sequence[dict[str, Any]]) -> list[ReportTable]:
        counts = Counter((r.get("data") or {}).get("type") or r["group"] for r in records)
        paper_total = sum(PAPER_COUNTS.values())
        total = sum(counts.values())
        rows = [[t, str(counts.get(t, 0)), f"{100 * counts.get(t, 0) / total:.1f}%" if total else "–",
                 str(PAPER_COUNTS[t]), f"{100 * PAPER_COUNTS[t] / paper_total:.1f}%"] for t in TYPES]
        rows.append(["total", str(total), "100%" if total else "–", str(paper_total), "100%"])
        return [ReportTable(self.kind.name, "CFMM pairs per type, against the paper's release",
                            ["type", "here", "share", "paper", "paper share"], rows)]


class CfmmEvaluate(EvaluateHooks):
    metrics = ("acc_b", "acc_c", "acc_plus", "unknown_b", "unknown_c")
    eval_templates = tuple(f"cfmm_{v}" for v in PROMPT_VARIANTS)
    prompt_variants = PROMPT_VARIANTS
    # The paper ranks the two options by generation loss (as SEED-Bench does), not by reading free text.
    paper_settings = {"mode": "rank"}

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.evaluate.questions import pair_questions

        questions = pair_questions(record, ctx, self.kind)
        if ctx.prompt_variant in PROMPT_VARIANTS:
            template = ctx.templates.named(f"cfmm_{ctx.prompt_variant}")
            for question in questions:  # the paper adds the example or the reasoning to the counterfactual only
                if question.which.startswith("counterfactual"):
                    question.prompt.text = template.render(question=question.prompt.text,
                                                           options=question.options or []).strip()
        from cftools.evaluate.edited import edited_questions  # the basic question about the edited image

        return questions + edited_questions(record, ctx, self.kind, questions)

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        """Per type: acc_b, acc_c, acc+; the paper's totals (the sum of the per-type percentages, of 600) and the
        plain overall accuracy; the random baselines. See `cftools.kinds.cfmm.scores`."""
        from cftools.evaluate.edited import edited_sections
        from cftools.kinds.cfmm.scores import summarize

        return {**summarize(outcomes, TYPES), **edited_sections(outcomes)}

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        from cftools.kinds.cfmm.scores import table_rows

        return ReportTable(self.kind.name, "CFMM accuracy (%) per type: basic, counterfactual, both (acc+); summed as "
                           "the paper does (per-type percentages added, of 600)",
                           ["type", "n", "acc_b", "unknown", "acc_c", "unknown", "acc+"], table_rows(section, fmt))

    def paper_tables(self, section: dict[str, Any], fmt) -> list[ReportTable]:  # noqa: ANN001
        """The edited-image table when the run asked about edited images (`cftools.evaluate.edited`)."""
        from cftools.evaluate.edited import edited_tables

        return edited_tables(self.kind.name, section, fmt)

    def csv_rows(self, section: dict[str, Any]) -> list:
        from cftools.kinds.cfmm.scores import METRICS, RANDOM, SUMMED

        out = []
        for r in section["rows"]:
            out += [(r["type"], metric, r[metric], None) for metric in METRICS]
            out += [(r["type"], "unknown_b", r["unknown_b"], r["n"]), (r["type"], "unknown_c", r["unknown_c"], r["n"])]
        for metric, score in (section.get("summed") or {}).items():
            out.append((SUMMED, metric, score, None))
        for metric in METRICS:
            if section.get("random"):
                out.append((RANDOM, metric, section["random"][metric]["value"], None))
        from cftools.evaluate.edited import edited_csv_rows

        return out + edited_csv_rows(section)

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        rows = section["rows"]
        return ("CFMM accuracy", [r["type"] for r in rows],
                [("basic (acc_b)", [r["acc_b"] for r in rows]), ("counterfactual (acc_c)", [r["acc_c"] for r in rows]),
                 ("both (acc+)", [r["acc_plus"] for r in rows])])


class CfmmKind(Kind):
    name = "cfmm"
    title = "CFMM: basic/counterfactual question pairs with two options each"
    ingest = CfmmIngest
    generate = CfmmGenerate
    check = CfmmCheck
    annotate = CfmmAnnotate
    release = CfmmRelease
    evaluate = CfmmEvaluate
