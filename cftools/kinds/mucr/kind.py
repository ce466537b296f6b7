"""MuCR: a cause image and an effect image with captions, the cue (the visible cause), three false cues and
three explanations.

Items carry in `data` (image references are `sha256:<hex>` in the store and release-relative paths in a release):

    cause_image, effect_image       the pair (an item `PAIR@style` made by the select task)
    cause_caption, effect_caption   the captions (MuCR's caption_0 / caption_1)
    c2e_choices, c2e_answer         candidate effect images and the index of the right one (C2E; set by export)
    e2c_choices, e2c_answer         candidate cause images and the index of the right one (E2C; set by export)
    cue_choices                     the cue and the false cues in the order every model sees (set by export)
    composites                      form-1 images of each question (set by `export --format mucr`)
    cue, false_cues                 the correct cue phrase and 3 distractors
    explanation_draft               the LLM's three-part draft (`generate cues`)
    explanations                    the 3 reference explanations (explain task; by annotator in
                                    explanations_by_annotator)

Scored as in the MuCR paper: C2E and E2C (pick the right image among 4, a letter), Cue (pick the cue among 4
phrases) — accuracies with 95% intervals, per category and style — and Exp: the judge scores each part of the
model's explanation (S1 cause image, S2 effect image, S3 causal link; 0-10) against the references, and
Exp = 0.25·S1 + 0.25·S2 + 0.5·S3 (`cftools.kinds.mucr.explanations`). Input form 3 (`--mucr-input split`, each picture
its own image) or form 1 (`composite`, the pictures of a question in one image).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from cftools.kinds.base import (AnnotateHooks, Check, CheckHooks, EvaluateHooks, ExportFormat, GenerateHooks, Generator,
                                IngestHooks, Kind, ReleaseHooks, ReportTable, TaskOutcome, TaskSpec)
from cftools.kinds.mucr.model import CHOICE_TASKS, FACETS, TASKS, MucrData, cue_options, exp_score, lines
from cftools.kinds.mucr.scores import TASK_LABELS, choice_scores, facet_groups, parts_of


class MucrIngest(IngestHooks):
    data_model = MucrData
    groups = ()

    def commands(self) -> dict[str, list]:
        from cftools.kinds.mucr import commands as mucr_commands

        return {"ingest": [mucr_commands.ingest_captions_cmd, mucr_commands.ingest_mucr_cmd],
                "generate": [mucr_commands.captions_cmd, mucr_commands.context_cmd, mucr_commands.images_cmd,
                             mucr_commands.cues_cmd]}


class MucrGenerate(GenerateHooks):
    generators = (
        Generator("captions", "caption pairs drafted from seed causalities, a group per seed",
                  inputs=("seed causality",), outputs=("cause_caption", "effect_caption", "category"),
                  templates=("mucr/captions.j2",)),
        Generator("context", "both contextual descriptions of a pair in one call (shared part, then what differs)",
                  inputs=("cause_caption", "effect_caption", "category"),
                  outputs=("context.shared", "context.cause_description", "context.effect_description"),
                  templates=("mucr/context.j2",)),
        Generator("images", "candidate cause/effect images per style from diffusers or an images API (siamese)",
                  inputs=("context.cause_description", "context.effect_description", "style"),
                  outputs=("candidates", "candidate_checks"), templates=("images/photograph.j2", "images/comic.j2")),
        Generator("cues", "the cue, three false cues and a three-part explanation draft of a selected pair",
                  inputs=("context.cause_description", "context.effect_description"),
                  outputs=("cue", "false_cues", "explanation_draft"), templates=("mucr/cues.j2",)),
    )


class MucrCheck(CheckHooks):
    def __init__(self, kind: Kind) -> None:
        super().__init__(kind)
        from cftools.kinds.mucr import checks as mucr_checks

        self.prompt_length = mucr_checks.PromptLength()
        self.identical_images = mucr_checks.IdenticalImages()
        self.checks = (
            Check("context_missing", mucr_checks.check_context_missing, mucr_checks.is_caption_pair,
                  "every MuCR caption pair"),
            Check("context_inconsistent", mucr_checks.check_context_inconsistent, mucr_checks.is_caption_pair,
                  "MuCR pairs with contextual descriptions"),
            Check("context_missing_change", mucr_checks.check_context_missing_change, mucr_checks.is_caption_pair,
                  "MuCR pairs with contextual descriptions"),
            Check("prompt_truncated", self.prompt_length, mucr_checks.is_caption_pair,
                  "MuCR pairs with contextual descriptions"),
            Check("no_candidates", mucr_checks.check_no_candidates, mucr_checks.is_caption_pair,
                  "MuCR pairs with contextual descriptions"),
            Check("cue_in_false_cues", mucr_checks.check_cue_in_false_cues, mucr_checks.has_cues,
                  "MuCR selected pairs with cues"),
            Check("false_cue_duplicate", mucr_checks.check_false_cue_duplicate, mucr_checks.has_cues,
                  "MuCR selected pairs with cues"),
            Check("cue_not_visible", mucr_checks.check_cue_not_visible, mucr_checks.has_cues,
                  "MuCR selected pairs with cues"),
            Check("explanation_form", mucr_checks.check_explanation_form, mucr_checks.has_cues,
                  "MuCR selected pairs with an explanation draft or explanations"),
            Check("identical_images", self.identical_images, mucr_checks.has_pair_images,
                  "MuCR pairs with a cause and an effect image"),
        )

    def prepare_checks(self, config: dict[str, Any]) -> None:
        self.prompt_length.configure(config)

    def use_store(self, store: Any) -> None:
        self.identical_images.use_store(store)

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        return "other"


class MucrAnnotate(AnnotateHooks):
    task_specs = {spec.name: spec for spec in (
        # tiebreak 2: a third person when two disagree, then an adjudicator when the three all differ
        TaskSpec("select", "mucr/select.xml.j2", annotators=2, tiebreak=2, statuses=("draft", "checked"),
                 description="pick the best cause and effect candidate of a pair and style"),
        TaskSpec("explain", "mucr/explain.xml.j2", annotators=3, statuses=("checked",), to_status="in_review",
                 description="three people each explain the pair and confirm its cue set"),
    )}
    # each task declared once: verify and adjudicate (the stage's own rules), then the specs' own templates
    tasks = {"verify": "mucr/verify.xml.j2", "adjudicate": "mucr/adjudicate.xml.j2",
             **{name: spec.template for name, spec in task_specs.items()}}

    def task_spec(self, task: str) -> Optional[TaskSpec]:
        return self.task_specs.get(task)

    def task_units(self, task: str, item: Any) -> list[str]:
        from cftools.kinds.mucr import annotate as mucr_annotate

        data = item.data or {}
        if task == "select":
            return mucr_annotate.select_units(data)
        if task == "explain":
            return mucr_annotate.explain_units(data)
        return [""]

    def task_payload(self, task: str, unit: str, item: Any, source: Any, image_value: str,
                     extra_images: dict[str, str]) -> dict[str, Any]:
        from cftools.kinds.mucr import annotate as mucr_annotate

        if task == "select":
            return mucr_annotate.select_payload(unit, item, extra_images)
        if task == "explain":
            return mucr_annotate.explain_payload(item, extra_images)
        return self.task_data(item, source, image_value, extra_images)

    def read_judgment(self, purpose: str, result: Any, workspace_root: Optional[str] = None) -> Any:
        from cftools.kinds.mucr import annotate as mucr_annotate

        if purpose == "select":
            return mucr_annotate.read_select(self.read_result(purpose, result, workspace_root))
        if purpose == "explain":
            return mucr_annotate.read_explain(self.read_result(purpose, result, workspace_root))
        if purpose == "adjudicate":
            from cftools.judgments import parse_answer

            answers = self.read_result(purpose, result, workspace_root)
            answer = parse_answer(purpose, answers)
            answer.fields.update(mucr_annotate.read_adjudication(answers))
            return answer
        return super().read_judgment(purpose, result, workspace_root)

    def check_judgment(self, task: str, answer: Any, task_data: dict[str, Any]) -> None:
        from cftools.kinds.mucr import annotate as mucr_annotate

        if task == "select":
            mucr_annotate.fit_select(answer, task_data)
        elif task == "explain":
            mucr_annotate.fit_explain(answer, task_data)
        elif task == "adjudicate":
            mucr_annotate.fit_adjudication(answer, task_data)

    def adjudicated(self, answer: Any, item_data: Optional[dict] = None, adjudicator: Optional[str] = None) -> Any:
        """A cue-set adjudication accepts one person's cue set (or the adjudicator's own) into the item's data."""
        from cftools.judgments import Decision, adjudicated
        from cftools.kinds.mucr import annotate as mucr_annotate
        from cftools.models import ACCEPTED

        if not (answer.fields or {}).get("chosen_from"):
            return adjudicated(answer)
        data = mucr_annotate.adjudicated_cue_set(answer, item_data or {}, adjudicator or "")
        return Decision(ACCEPTED, rule=data["cue_agreement"]["rule"], data=data)

    def decide_task(self, task: str, unit: str, item: Any, answers: Sequence[tuple[str, Any]]) -> TaskOutcome:
        from cftools.kinds.mucr import annotate as mucr_annotate

        if task == "select":
            return mucr_annotate.decide_select(unit, item, answers)
        return mucr_annotate.decide_explain(item, answers)

    def agreement_labels(self, task: str, answer: Any) -> dict[str, str]:
        from cftools.kinds.mucr.annotate import agreement_labels

        return agreement_labels(task, answer)

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        from cftools.judgments import without_emails
        from cftools.kinds.mucr import annotate as mucr_annotate

        data = item.data or {}
        return {"cause_image": extra_images.get(str(data.get("cause_image")), image_value),
                "effect_image": extra_images.get(str(data.get("effect_image")), ""),
                "cause_caption": str(data.get("cause_caption") or ""),
                "effect_caption": str(data.get("effect_caption") or ""),
                "cue": str(data.get("cue") or ""), "false_cues": lines(data.get("false_cues")),
                # people's own words, shown to the next person: no address one of them typed
                "explanations": without_emails(lines(data.get("explanations"))),
                "question": item.question, "proposed_answer": item.answer or "",
                **mucr_annotate.cue_adjudication_data(data)}


class MucrRelease(ReleaseHooks):
    def __init__(self, kind: Kind) -> None:
        super().__init__(kind)
        from cftools.kinds.mucr import release as mucr_release

        self.export_formats = (ExportFormat("mucr", "the MuCR JSONL (--mucr-schema readme-2024-08-31|readme-2024-08-14|"
                                      "cause-effect), images, form-1 composites beside the split images, recorded "
                                      "choice sets and the data card",
                                      mucr_release.write_mucr, keeps=mucr_release.keeps),)

    def command_options(self, command: str) -> list:
        from cftools.kinds.mucr import commands as mucr_commands

        return mucr_commands.stage_options(command)

    def card_section(self, records: Sequence[dict], provenance: Sequence[dict], context: dict[str, Any]) -> list[str]:
        from cftools.kinds.mucr.release import card_section

        return card_section(records, provenance, context)

    def record_problem(self, record: dict[str, Any]) -> Optional[str]:
        from cftools.kinds.mucr.annotate import record_problem

        return record_problem(record)

    def diff_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        """A MuCR item's questions are fixed by the templates; its answer is the selected cause/effect pair, the
        right choice of each choice task, the cue and the explanations (the references of Exp); its options the
        choice images and the cue's false cues (a changed pair or choice image is also a new image)."""
        data = record.get("data") or {}
        return {"question": None,
                "answer": {k: data.get(k) for k in ("cause_image", "effect_image", "c2e_answer", "e2c_answer", "cue",
                                                   "explanations")},
                "options": {k: data.get(k) for k in ("c2e_choices", "e2c_choices", "cue_choices", "false_cues")}}


class MucrEvaluate(EvaluateHooks):
    metrics = ("c2e", "e2c", "cue", "exp_s1", "exp_s2", "exp_s3", "exp")
    eval_templates = ("mucr_choice", "mucr_cue", "mucr_explain", "mucr_judge")
    paper_settings = {"mucr_input": "composite"}  # the paper's main table: one composite image (form 1)

    def setting_used(self, setting: str, config: dict[str, Any], section: dict[str, Any]) -> Optional[str]:
        if setting == "mucr_input":
            return section.get("input")  # decided per item: composite where the release has it
        return super().setting_used(setting, config, section)

    def prepare_eval_items(self, items: Sequence[Any], options: dict[str, Any]) -> None:
        from cftools.kinds.mucr.release import add_choice_sets

        add_choice_sets(items, int(options.get("mucr_seed") or 0))

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.errors import Hint, InputError
        from cftools.evaluate.questions import LETTER, LETTERS, Question
        from cftools.evaluate.vlm import Prompt
        from cftools.release.layout import resolve_image

        data = record.get("data") or {}
        item_id, group = str(record["id"]), str(record.get("group") or "")
        # The paper's main table uses the composite input (form 1); a release without composites (not --format
        # mucr) can only be asked with split images.
        form = str((ctx.options or {}).get("mucr_input") or ("composite" if data.get("composites") else "split"))
        facets = {"category": str(data.get("category") or "-"), "style": str(data.get("style") or "-"),
                  "input": form}
        if not data.get("cause_image") or not data.get("effect_image"):
            return []  # a caption pair without a chosen image pair: nothing to ask

        def image(path: Any) -> Path:
            resolved = resolve_image(ctx.release_dir, {"id": item_id, "image": path})
            if resolved is None:
                raise InputError(Path(ctx.release_dir) / "records.jsonl", "MuCR item is missing an image path",
                                 f"id {item_id}")
            return resolved

        def shown(question: str, split: list) -> list[Path]:
            if form == "split":
                return [image(p) for p in split]
            composite = (data.get("composites") or {}).get(question)
            if not composite:
                raise InputError(Path(ctx.release_dir) / "records.jsonl",
                                 f"no composite image for {question} (form 1)", f"id {item_id}",
                                 hint=Hint("{message}: export with {format} mucr", format="--format"))
            return [image(composite)]

        def ask(which: str, gold: str, answer_type: str, prompt: Any, options: Any = None, gold_option: Any = None,
                references: Any = None) -> Question:
            return Question(item_id, which, self.kind.name, group, gold, answer_type, prompt, options, gold_option,
                            references, facets=facets)

        questions = []
        for task, first in CHOICE_TASKS:
            choices = data.get(f"{task}_choices")
            if not choices:
                continue
            letters = LETTERS[:len(choices)]
            answer = letters[int(data[f"{task}_answer"])]
            text = ctx.templates.named("mucr_choice").render(task=task, letters=letters, form=form).strip()
            questions.append(ask(task, answer, LETTER, Prompt(text, shown(task, [data[first], *choices]), letters,
                                                              max_new_tokens=4), letters, answer))
        pair = [data["cause_image"], data["effect_image"]]
        if data.get("cue"):
            options = cue_options(data, item_id)
            text = ctx.templates.named("mucr_cue").render(options=options, form=form).strip()
            questions.append(ask("cue", str(data["cue"]), "other",
                                 Prompt(text, shown("pair", pair), options, max_new_tokens=16), options,
                                 str(data["cue"])))
        if data.get("explanations"):
            text = ctx.templates.named("mucr_explain").render(form=form).strip()
            questions.append(ask("exp", "", "other", Prompt(text, shown("pair", pair), None,
                                                            max_new_tokens=ctx.explain_tokens),
                                 references=[str(e) for e in data["explanations"]]))
        return questions

    def judge_prompts(self, question: Any, answer: str, templates: Any) -> list[str]:
        from cftools.kinds.mucr.explanations import judge_prompts

        return judge_prompts(templates.named("mucr_judge"), answer, question.references or [])

    def judge_schema(self) -> Any:
        from cftools.kinds.mucr.explanations import JUDGE_SCHEMA

        return JUDGE_SCHEMA

    def judge_reply(self, reply: Any) -> str:
        from cftools.kinds.mucr.explanations import scores_line

        return scores_line(reply)

    def judge_result(self, question: Any, replies: Sequence[str], aggregate: str) -> dict[str, Any]:
        from cftools.kinds.mucr.explanations import judge_result

        return judge_result(replies, aggregate)

    def summarize(self, outcomes: Sequence[dict]) -> dict[str, Any]:
        """C2E, E2C and Cue accuracy (a choice among 4) overall, per category and per style, and Exp with its
        part scores S1, S2, S3 (0–10), each with its 95% interval."""
        from cftools.kinds.mucr.explanations import PARTS

        result: dict[str, Any] = choice_scores(outcomes)
        result["by"] = {facet: {value: choice_scores(part) for value, part in facet_groups(outcomes, facet).items()}
                        for facet in FACETS}
        judged = [parts_of(o["exp"]) for o in outcomes if isinstance(o.get("exp"), dict)]
        scored = [p for p in judged if p is not None]
        from cftools.evaluate.metrics import mean_score

        result["exp_parts"] = {part: mean_score([p[part] for p in scored]).as_dict() for part in PARTS}
        result["exp"] = mean_score([exp_score(p) for p in scored]).as_dict()
        result["exp_not_judged"] = len(judged) - len(scored)
        aggregates = sorted({str(o["exp"].get("aggregate")) for o in outcomes
                             if isinstance(o.get("exp"), dict) and o["exp"].get("aggregate")})
        result["exp_aggregate"] = ", ".join(aggregates) or None
        inputs = sorted({str((o.get("facets") or {}).get("input")) for o in outcomes if o.get("facets")})
        result["input"] = ", ".join(inputs) or None
        return result

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        from cftools.kinds.mucr.explanations import PART_NAMES, PARTS

        unasked = [t for t, _ in CHOICE_TASKS if not section[t]["n"]]

        def rows_for(label: str, scores: dict[str, Any]) -> list[list[str]]:
            return [[f"{TASK_LABELS[t]}{label}", str(scores[t]["n"]),
                     "not asked" if not label and t in unasked else fmt.pct(scores[t]),
                     fmt.rate(scores[f"unknown_{t}"])] for t in TASKS if scores[t]["n"] or not label]

        rows = rows_for("", section)
        for facet in FACETS:
            for value, scores in sorted((section.get("by") or {}).get(facet, {}).items()):
                rows += rows_for(f" · {facet} {value}", scores)
        parts = section.get("exp_parts") or {}
        for part in PARTS:
            if part in parts:
                rows.append([f"Exp {part} ({PART_NAMES[part]}, 0-10)", str(parts[part]["n"]),
                             fmt.points(parts[part]), "–"])
        rows.append(["Exp = 0.25·S1 + 0.25·S2 + 0.5·S3", str(section["exp"]["n"]), fmt.points(section["exp"]),
                     f"{section['exp_not_judged']} not judged" if section["exp_not_judged"] else "–"])
        how = section.get("exp_aggregate")
        title = (f"MuCR ({section.get('input') or 'split'} input"
                 + (("; each Exp part from its best-matching reference" if how == "best-match"
                     else f"; Exp parts: the {how}" + (" of the references" if how == "mean" else "")) if how else "")
                 + ")")
        note = (f"{' and '.join(TASK_LABELS[t] for t in unasked)} not asked: the release's MuCR records have no "
                "candidate images to choose among (`c2e_choices`, `e2c_choices`), which `cftools export --format "
                "mucr` (and the lmms-eval export) draw; a native release has none (docs/eval.md, \"MuCR C2E and "
                "E2C\")") if unasked else ""
        return ReportTable(self.kind.name, title, ["task", "n", "score", "unknown"], rows, note=note)

    def csv_rows(self, section: dict[str, Any]) -> list:
        rows = [("total", metric, section[metric], None) for metric in (*TASKS, "exp")]
        rows += [("total", f"exp_{part.lower()}", score, None)
                 for part, score in (section.get("exp_parts") or {}).items()]
        for facet in FACETS:
            for value, scores in sorted((section.get("by") or {}).get(facet, {}).items()):
                rows += [(f"{facet}:{value}", t, scores[t], None) for t in TASKS]
        return rows

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        return "MuCR accuracy", [t.upper() for t in TASKS], [("accuracy", [section[t] for t in TASKS])]


class MucrKind(Kind):
    name = "mucr"
    title = "MuCR: cause/effect image pairs with cue, false cues and explanations"
    ingest = MucrIngest
    generate = MucrGenerate
    check = MucrCheck
    annotate = MucrAnnotate
    release = MucrRelease
    evaluate = MucrEvaluate
