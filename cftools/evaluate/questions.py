"""The questions an eval run asks: one `Question` per question of an item, built by the item's kind.

`PromptTemplates` holds the eval prompts; `pair_questions` asks the original and the counterfactual question of
a record (C-VQA, CFMM); a kind with other questions (MuCR) builds its own from the helpers here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from cftools.answers import CHOICE, choice_options, extract_answer, infer_answer_type, normalize_answer
from cftools.errors import InputError
from cftools.item_view import options as question_options
from cftools.evaluate.vlm import Prompt
from cftools.kinds.base import EvalContext, Kind
from cftools.release.layout import resolve_image
from cftools.resources import template_env

DEFAULT_TEMPLATE = "short_answer"
COUNT_OPTIONS = [str(n) for n in range(21)]
YES_NO_OPTIONS = ["yes", "no"]
PAIR_QUESTIONS = ("original", "counterfactual")
EDITED = "edited"  # the original question about the item's relevant edit (`cftools.evaluate.edited`)
LETTER = "letter"  # answer type of a choice among images labelled A, B, C, ...
LETTERS = ["A", "B", "C", "D", "E", "F", "G", "H"]
SWAPPED = ":swapped"  # suffix of a question asked again with its options in reverse order (`--swap-options`)


@dataclass
class Question:
    """One question of one item, as the model will be asked it."""

    item_id: str
    which: str
    kind: str
    group: str
    gold: str
    answer_type: str
    prompt: Prompt
    options: Optional[list[str]] = None
    gold_option: Optional[str] = None
    references: Optional[list[str]] = None   # a judged question (MuCR Exp)
    facets: Optional[dict[str, str]] = None  # what a kind breaks its scores down by (category, style, input form)
    choices: Optional[dict[str, str]] = None  # a multiple-choice question's options in its text, letter -> text

    @property
    def judged(self) -> bool:
        """A free-text answer scored by a judge against references (MuCR Exp), not read for a gold answer."""
        return self.references is not None

    @property
    def key(self) -> tuple[str, str]:
        return (self.item_id, self.which)


@dataclass
class Skipped:
    no_image: list[str] = field(default_factory=list)
    no_options: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"no_image": len(self.no_image), "no_options": len(self.no_options),
                "no_image_ids": self.no_image[:50], "no_options_ids": self.no_options[:50]}


# -- prompts ------------------------------------------------------------------------------------------------

class PromptTemplates:
    """The eval prompt templates: packaged ones by name (prompts/eval/NAME.j2, a workspace's copy first) or a
    user's file."""

    def __init__(self, template: Optional[str] = None, workspace_root: Optional[Path] = None) -> None:
        self.package_env = template_env("prompts", workspace_root, autoescape=False)
        template = template or DEFAULT_TEMPLATE
        path = Path(template)
        if path.suffix == ".j2" and path.is_file():
            env = Environment(loader=FileSystemLoader(str(path.parent.resolve())), undefined=StrictUndefined,
                              autoescape=False)
            self.question_template = env.get_template(path.name)
            self.question_source = path.read_text(encoding="utf-8")
            self.name = str(path)
        else:
            self.question_template = self.package_env.get_template(f"eval/{template}.j2")
            self.question_source = self._source(f"eval/{template}.j2")
            self.name = template

    def _source(self, name: str) -> str:
        source, _, _ = self.package_env.loader.get_source(self.package_env, name)
        return source

    def named(self, name: str):  # noqa: ANN201
        return self.package_env.get_template(f"eval/{name}.j2")

    @property
    def sha256(self) -> str:
        """The hash of the question template and of every kind's own eval templates."""
        from cftools.kinds import all_kinds

        names = sorted({n for kind in all_kinds().values() for n in kind.hooks.evaluate.eval_templates})
        blob = self.question_source + "".join(self._source(f"eval/{n}.j2") for n in names)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def question(self, **variables: Any) -> str:
        return self.question_template.render(**variables).strip()


# -- questions ------------------------------------------------------------------------------------------------

def question_answer_type(record: dict[str, Any], which: str, gold: str, kind: Kind) -> str:
    """The kind's answer type for the record's group; else the release's for the original question; else inferred."""
    declared = kind.hooks.check.answer_type(str(record.get("group") or ""), gold)
    if declared:
        return declared
    if which == "original" and record.get("answer_type") in ("number", "yes/no", "other"):
        return record["answer_type"]
    return infer_answer_type(gold)


def derived_options(answer_type: str, choices: Optional[dict[str, str]] = None) -> Optional[list[str]]:
    if answer_type == CHOICE and choices:
        return list(choices)  # rank the option letters the question offers
    if answer_type == "yes/no":
        return list(YES_NO_OPTIONS)
    if answer_type == "number":
        return list(COUNT_OPTIONS)
    return None


def gold_option_of(options: Sequence[str], gold: str, answer_type: str) -> Optional[str]:
    """The option that reads as the gold answer (None when no option does)."""
    if answer_type == CHOICE:
        return next((o for o in options if o == gold.strip().upper()), None)
    expected = extract_answer(gold, answer_type) or normalize_answer(gold)
    for option in options:
        if (extract_answer(option, answer_type) or normalize_answer(option)) == expected:
            return option
    return None


def shuffled(values: list[str], seed_text: str) -> list[str]:
    """A fixed order that depends only on the item id (no global random state)."""
    return sorted(values, key=lambda v: hashlib.sha256(f"{seed_text}\x00{v}".encode()).hexdigest())


def record_image(record: dict[str, Any], ctx: EvalContext) -> Optional[Path]:
    """The record's image in the release (None without one); a listed but missing file is an error."""
    image = resolve_image(ctx.release_dir, record)
    if image is not None and not image.is_file():
        raise InputError(image, "image file listed in the release is missing", f"id {record.get('id')}")
    return image


def pair_questions(record: dict[str, Any], ctx: EvalContext, kind: Kind) -> list[Question]:
    """The original and the counterfactual question of a record, each with its image (C-VQA, CFMM)."""
    image = record_image(record, ctx)
    if ctx.needs_image and image is None:
        ctx.skipped.no_image.append(str(record["id"]))
        return []
    image = image if ctx.needs_image else None
    templates, mode, max_new_tokens = ctx.templates, ctx.mode, ctx.max_new_tokens
    questions = []
    options_by_which = record.get("options") or {}
    for which in PAIR_QUESTIONS:
        text, gold = ((record.get("original_question"), record.get("original_answer")) if which == "original"
                      else (record.get("question"), record.get("answer")))
        if not text or gold is None:
            continue
        gold = str(gold)
        answer_type = question_answer_type(record, which, gold, kind)
        # A gold answer that is one of the option letters the question offers: a multiple-choice question
        # (C-VQA-Synthetic), read for a letter or an option's text.
        choices = choice_options(gold, question_options(text))
        if choices:
            answer_type = CHOICE
        options = options_by_which.get(which) if isinstance(options_by_which, dict) else None
        if options is not None:
            options = [str(o) for o in options]
        shown = options
        if mode == "rank" and options is None:
            options = derived_options(answer_type, choices)
            shown = None
        orders = [(which, options, shown)]
        if ctx.swap_options and options and len(options) > 1:  # the same question, options in reverse order
            orders.append((which + SWAPPED, options[::-1], shown[::-1] if shown else shown))
        for name, ordered, ordered_shown in orders:
            prompt_text = templates.question(question=text, options=ordered_shown, mode=mode, kind=record.get("kind"),
                                             which=which, answer_type=answer_type)
            gold_option = gold_option_of(ordered, gold, answer_type) if ordered else None
            questions.append(Question(
                item_id=str(record["id"]), which=name, kind=kind.name,
                group=str(record.get("group") or ""), gold=gold, answer_type=answer_type,
                prompt=Prompt(text=prompt_text, images=[image] if image else [], options=ordered,
                              max_new_tokens=max_new_tokens),
                options=ordered, gold_option=gold_option, choices=choices))
    if mode == "rank" and any(q.options is None for q in questions):
        ctx.skipped.no_options.append(str(record["id"]))
        return []
    return questions


@dataclass(frozen=True)
class Wording:
    """How a run words its questions: reply lengths, the prompt variant, swapped options, each kind's options."""

    max_new_tokens: int = 16
    explain_tokens: int = 128
    prompt_variant: str = "plain"
    swap_options: bool = False
    options: Optional[dict[str, Any]] = None


def build_questions(release_dir: Path, records: Iterable[dict[str, Any]], templates: PromptTemplates, mode: str,
                    needs_image: bool, *, wording: Wording = Wording()) -> tuple[list[Question], Skipped]:
    """Every question of every record, as its kind asks them, minus those the model cannot be asked (counted in
    Skipped)."""
    from cftools.kinds import get_kind

    skipped = Skipped()
    ctx = EvalContext(release_dir=release_dir, templates=templates, mode=mode, needs_image=needs_image,
                      max_new_tokens=wording.max_new_tokens, explain_tokens=wording.explain_tokens, skipped=skipped,
                      prompt_variant=wording.prompt_variant, swap_options=wording.swap_options,
                      options=dict(wording.options or {}))
    questions: list[Question] = []
    for record in records:
        questions.extend(get_kind(str(record.get("kind"))).hooks.evaluate.eval_questions(record, ctx))
    if mode == "rank":
        questions = [q for q in questions if q.options is not None or q.judged]
    return questions, skipped
