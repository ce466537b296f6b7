"""MuCR: a cause image and an effect image with captions, the cue (the visible cause), three false cues and
three explanations.

Items carry in `data` (image references are `sha256:<hex>` in the store and release-relative paths in a release):

    cause_image, effect_image       the pair
    cause_caption, effect_caption   the captions (MuCR's caption_0 / caption_1)
    c2e_choices, c2e_answer         candidate effect images and the index of the right one (C2E)
    e2c_choices, e2c_answer         candidate cause images and the index of the right one (E2C)
    cue, false_cues                 the correct cue phrase and 3 distractors
    explanations                    the 3 reference explanations

Scored as in the MuCR paper: C2E and E2C (pick the right image among 4, a letter), Cue (pick the cue among 4
phrases shown in an order fixed by the item id) and Exp (a free explanation judged 0-10 against each reference
by `--judge`, weighted 0.25 / 0.25 / 0.5 in the references' stored order; without a judge Exp is not judged).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from cftools.kinds.base import Check, Generator, ItemData, Kind, ReportTable

CATEGORIES = ("human", "animal", "plant", "character", "mixture")
CHOICE_TASKS = (("c2e", "cause_image"), ("e2c", "effect_image"))
TASKS = ("c2e", "e2c", "cue")
EXP_WEIGHTS = (0.25, 0.25, 0.5)


class MucrData(ItemData):
    cause_image: Optional[str] = None
    effect_image: Optional[str] = None
    cause_caption: Optional[str] = None
    effect_caption: Optional[str] = None
    c2e_choices: Optional[list[str]] = None
    c2e_answer: Optional[int] = None
    e2c_choices: Optional[list[str]] = None
    e2c_answer: Optional[int] = None
    cue: Optional[str] = None
    false_cues: Optional[list[str]] = None
    explanations: Optional[list[str]] = None
    style: Optional[str] = None
    category: Optional[str] = None
    link_id: Optional[str] = None
    context: Optional[dict[str, Any]] = None
    candidates: Optional[dict[str, dict[str, dict[str, Any]]]] = None


def exp_score(similarities: Sequence[float], weights: Sequence[float] = EXP_WEIGHTS) -> float:
    """MuCR Exp: the judge's 0–10 similarities to the three references, weighted 0.25 / 0.25 / 0.5."""
    if len(similarities) != len(weights):
        raise ValueError(f"Exp needs {len(weights)} similarities (one per reference), got {len(similarities)}")
    for s in similarities:
        if not 0 <= s <= 10:
            raise ValueError(f"a similarity is on a 0–10 scale, got {s}")
    return float(sum(w * s for w, s in zip(weights, similarities)))


def lines(values: Optional[Sequence[Any]]) -> str:
    return "\n".join(str(v) for v in values) if values else "none"


class MucrKind(Kind):
    name = "mucr"
    title = "MuCR: cause/effect image pairs with cue, false cues and explanations"
    data_model = MucrData
    groups = ()
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
    )
    tasks = {"verify": "mucr/verify.xml.j2", "adjudicate": "mucr/adjudicate.xml.j2"}
    metrics = ("c2e", "e2c", "cue", "exp")
    eval_templates = ("mucr_choice", "mucr_cue", "mucr_explain", "mucr_judge")

    def __init__(self) -> None:
        from cftools.kinds import mucr_checks

        self.prompt_length = mucr_checks.PromptLength()
        self._checks = (
            Check("context_missing", mucr_checks.check_context_missing, lambda i: True, "every MuCR pair"),
            Check("context_inconsistent", mucr_checks.check_context_inconsistent, lambda i: True,
                  "MuCR pairs with contextual descriptions"),
            Check("context_missing_change", mucr_checks.check_context_missing_change, lambda i: True,
                  "MuCR pairs with contextual descriptions"),
            Check("prompt_truncated", self.prompt_length, lambda i: True, "MuCR pairs with contextual descriptions"),
            Check("no_candidates", mucr_checks.check_no_candidates, lambda i: True,
                  "MuCR pairs with contextual descriptions"),
        )

    @property
    def checks(self) -> tuple[Check, ...]:  # type: ignore[override]
        return self._checks

    def prepare_checks(self, config: dict[str, Any]) -> None:
        self.prompt_length.configure(config)

    def commands(self) -> dict[str, list]:
        from cftools.kinds import mucr_commands

        return {"ingest": [mucr_commands.ingest_captions_cmd],
                "generate": [mucr_commands.captions_cmd, mucr_commands.context_cmd, mucr_commands.images_cmd]}

    def answer_type(self, group: str, answer: Optional[str]) -> Optional[str]:
        return "other"

    def task_data(self, item: Any, source: Any, image_value: str, extra_images: dict[str, str]) -> dict[str, Any]:
        data = item.data or {}
        return {"cause_image": extra_images.get(str(data.get("cause_image")), image_value),
                "effect_image": extra_images.get(str(data.get("effect_image")), ""),
                "cause_caption": str(data.get("cause_caption") or ""),
                "effect_caption": str(data.get("effect_caption") or ""),
                "cue": str(data.get("cue") or ""), "false_cues": lines(data.get("false_cues")),
                "explanations": lines(data.get("explanations")),
                "question": item.question, "proposed_answer": item.answer or ""}

    # -- eval --------------------------------------------------------------------------------------------------

    def eval_questions(self, record: dict, ctx) -> list:  # noqa: ANN001
        from cftools.errors import InputError
        from cftools.evaluate.questions import LETTER, LETTERS, Question, shuffled
        from cftools.evaluate.vlm import Prompt
        from cftools.release.layout import resolve_image

        data = record.get("data") or {}
        item_id, group = str(record["id"]), str(record.get("group") or "")

        def image(path: Any) -> Path:
            resolved = resolve_image(ctx.release_dir, {"id": item_id, "image": path})
            if resolved is None:
                raise InputError(Path(ctx.release_dir) / "records.jsonl", "MuCR item is missing an image path",
                                 f"id {item_id}")
            return resolved

        questions = []
        for task, first in CHOICE_TASKS:
            choices = data.get(f"{task}_choices")
            if not choices:
                continue
            letters = LETTERS[:len(choices)]
            answer = letters[int(data[f"{task}_answer"])]
            text = ctx.templates.named("mucr_choice").render(task=task, letters=letters).strip()
            images = [image(data[first])] + [image(c) for c in choices]
            questions.append(Question(item_id, task, self.name, group, answer, LETTER,
                                      Prompt(text, images, letters, max_new_tokens=4), letters, answer))
        pair = [image(data["cause_image"]), image(data["effect_image"])] if data.get("cause_image") else []
        if data.get("cue") and pair:
            options = shuffled([str(data["cue"])] + [str(c) for c in data.get("false_cues") or []], item_id)
            text = ctx.templates.named("mucr_cue").render(options=options).strip()
            questions.append(Question(item_id, "cue", self.name, group, str(data["cue"]), "other",
                                      Prompt(text, pair, options, max_new_tokens=16), options, str(data["cue"])))
        if data.get("explanations") and pair:
            text = ctx.templates.named("mucr_explain").render().strip()
            questions.append(Question(item_id, "exp", self.name, group, "", "other",
                                      Prompt(text, pair, None, max_new_tokens=ctx.explain_tokens),
                                      references=[str(e) for e in data["explanations"]]))
        return questions

    def judged_score(self, similarities: Sequence[float]) -> Optional[float]:
        return exp_score(similarities)

    def summarize(self, outcomes: Sequence[dict], weights: Sequence[float] = EXP_WEIGHTS) -> dict[str, Any]:
        """C2E, E2C and Cue accuracy (a choice among 4) and the mean Exp score (0–10), each with its interval."""
        from cftools.evaluate.metrics import accuracy, answered, mean_score, rate

        result: dict[str, Any] = {}
        for task in TASKS:
            asked = [o[task] for o in outcomes if answered(o, task)]
            result[task] = accuracy([a["correct"] for a in asked]).as_dict()
            result[f"unknown_{task}"] = rate([bool(a.get("unknown")) for a in asked])
        judged = [o["exp"]["similarities"] for o in outcomes
                  if isinstance(o.get("exp"), dict) and o["exp"].get("similarities") is not None]
        result["exp"] = mean_score([exp_score(s, weights) for s in judged]).as_dict()
        result["exp_not_judged"] = sum(1 for o in outcomes if isinstance(o.get("exp"), dict)) - len(judged)
        return result

    def report_table(self, section: dict[str, Any], fmt) -> ReportTable:  # noqa: ANN001
        rows = [[task.upper() if task != "cue" else "Cue", str(section[task]["n"]), fmt.pct(section[task]),
                 fmt.rate(section[f"unknown_{task}"])] for task in TASKS]
        rows.append(["Exp (0-10)", str(section["exp"]["n"]), fmt.points(section["exp"]),
                     f"{section['exp_not_judged']} not judged" if section["exp_not_judged"] else "–"])
        return ReportTable(self.name, "MuCR", ["task", "n", "score", "unknown"], rows)

    def csv_rows(self, section: dict[str, Any]) -> list:
        return [("total", metric, section[metric], None) for metric in (*TASKS, "exp")]

    def plot_series(self, section: dict[str, Any]):  # noqa: ANN201
        return "MuCR accuracy", [t.upper() for t in TASKS], [("accuracy", [section[t] for t in TASKS])]
