"""MuCR's own Label Studio tasks: `select` (the best candidate pair of a style) and `explain` (three explanations
and the cue set).

select — one task per caption pair and style (unit = the style, `style@round` after a regeneration). Two
annotators; when they disagree a third is asked and the majority holds; three different answers go to an
adjudicator (a fourth person, who has not judged it, gets the same task at the next pull) whose pick decides. The chosen pair becomes its own item (`PAIR-KEY@style`, a
draft with the two images, the captions and descriptions) that cues and explanations are made for; "none usable"
is recorded in the pair's `data.selection[style]`, which `generate images --regenerate-rejected` reads.

explain — one task per selected pair, three different annotators. The item is accepted when three explanations
from three distinct people are in and the cue sets agree: the first two agree, or the third person's set settles
it (equal to one of theirs). Explanations are stored per annotator (`data.explanations_by_annotator`) and in
annotation order (`data.explanations`, the release's `causal_reason`).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from typing import Any, Optional, Sequence

from cftools.judgments import Answer, InvalidResult, shown_person, without_emails
from cftools.kinds.base import TaskOutcome
from cftools.kinds.mucr.explanations import missing_parts
from cftools.models import ACCEPTED, CHECKED, DRAFT, IN_REVIEW, NEEDS_ADJUDICATION, utcnow

KIND = "mucr"
SELECT, EXPLAIN = "select", "explain"
NONE_USABLE = "none usable"
FALSE_CUES = 3


# ---------------------------------------------------------------- units


def style_unit(style: str, round_: int) -> str:
    return style if not round_ else f"{style}@{round_}"


def unit_style(unit: str) -> str:
    return unit.split("@", 1)[0]


def select_units(data: dict[str, Any]) -> list[str]:
    """The styles whose candidates wait for a choice (a decided or rejected style has a selection)."""
    rounds = data.get("image_round") or {}
    chosen = data.get("selection") or {}
    return [style_unit(style, int(rounds.get(style, 0))) for style in sorted(data.get("candidates") or {})
            if (data["candidates"][style] and style not in chosen)]


def explain_units(data: dict[str, Any]) -> list[str]:
    ready = data.get("cause_image") and data.get("effect_image") and data.get("cue")
    return [""] if ready else []


# ---------------------------------------------------------------- what the annotator sees


def ranked(data: dict[str, Any], style: str) -> list[int]:
    """Candidate numbers of STYLE, best ranked first (the automatic checks), then any unranked."""
    have = sorted(int(k) for k in ((data.get("candidates") or {}).get(style) or {}))
    order = [int(r["k"]) for r in ((data.get("candidate_checks") or {}).get(style) or []) if int(r["k"]) in have]
    return order + [k for k in have if k not in order]


def ranking_text(data: dict[str, Any], style: str) -> str:
    checks = {int(r["k"]): r for r in ((data.get("candidate_checks") or {}).get(style) or [])}
    lines = []
    for place, k in enumerate(ranked(data, style), start=1):  # numbered as the task shows them: best first
        check = checks.get(k) or {}
        flags = ", ".join(f["code"] for f in check.get("flags") or []) or "no flags"
        score = check.get("score")
        lines.append(f"candidate {place}: score {score:.3f}, {flags}" if isinstance(score, (int, float))
                     else f"candidate {place}: not ranked")
    return "\n".join(lines)


def pairs_html(causes: list[str], effects: list[str]) -> str:
    """The candidate pairs as the annotator sees them: cause k beside effect k, each image numbered k (1, 2, …)."""
    def figure(side: str, number: int, link: str) -> str:
        return (f'<figure><span class="cf-num">{number}</span><img src="{html.escape(link, quote=True)}" '
                f'alt="{side} {number}" style="width:256px;height:auto"/><figcaption>{side} {number}</figcaption>'
                '</figure>')  # one size for every candidate: a small image is not hidden under its number

    rows = [f'<div class="cf-cand" data-candidate="{n}">{figure("cause", n, cause)}{figure("effect", n, effect)}</div>'
            for n, (cause, effect) in enumerate(zip(causes, effects), start=1)]
    return '<div class="cf-cands">' + "".join(rows) + "</div>"


def select_payload(unit: str, item: Any, extra_images: dict[str, str]) -> dict[str, Any]:
    """One select task: the candidates that exist, best ranked first, shown and offered as choices by the same
    numbers (1..n); `candidate_keys` maps each number back to its candidate."""
    data = item.data or {}
    style = unit_style(unit)
    context = data.get("context") or {}
    candidates = (data.get("candidates") or {}).get(style) or {}
    order = ranked(data, style)
    causes = [extra_images.get(candidates[str(k)]["cause"], "") for k in order]
    effects = [extra_images.get(candidates[str(k)]["effect"], "") for k in order]
    return {"style": style, "unit": unit,
            "captions": f"cause: {data.get('cause_caption')}\neffect: {data.get('effect_caption')}",
            "cause_description": str(context.get("cause_description") or data.get("cause_caption") or ""),
            "effect_description": str(context.get("effect_description") or data.get("effect_caption") or ""),
            "cause_candidates": causes, "effect_candidates": effects,
            "pairs": pairs_html(causes, effects),
            "candidate_choices": [{"value": str(n)} for n in range(1, len(order) + 1)],
            "candidate_keys": order,
            "ranking": ranking_text(data, style)}


def explain_payload(item: Any, extra_images: dict[str, str]) -> dict[str, Any]:
    data = item.data or {}
    return {"cause_image": extra_images.get(str(data.get("cause_image")), ""),
            "effect_image": extra_images.get(str(data.get("effect_image")), ""),
            "captions": f"cause: {data.get('cause_caption')}\neffect: {data.get('effect_caption')}",
            "explanation_draft": str(data.get("explanation_draft") or "none"),
            # the model's cue set, shown as a reference only: the cue fields start empty
            "model_cue": "cue: " + str(data.get("cue") or "none"),
            "model_false_cues": "false cues: " + ("; ".join(data.get("false_cues") or []) or "none")}


# ---------------------------------------------------------------- reading a judgment


def read_select(answers: dict[str, Any]) -> Answer:
    """One selection: "none usable" alone, or a cause and an effect number (checked against the task's candidates
    by `fit_select`)."""
    comment = answers.get("comment")
    picked = bool(answers.get("best_cause") or answers.get("best_effect"))
    if answers.get("none_usable") == [NONE_USABLE]:
        if picked:
            raise InvalidResult("'none usable' and a pick at once: either pick the best cause and effect, or mark the "
                                "pair 'none usable'")
        return Answer(comment=comment, fields={"none_usable": True})
    if not answers.get("best_cause") or not answers.get("best_effect"):
        raise InvalidResult("pick the best cause and the best effect, or mark the pair 'none usable'")
    try:
        cause, effect = int(answers["best_cause"][0]), int(answers["best_effect"][0])
    except ValueError:
        raise InvalidResult("a pick is not a candidate number") from None
    return Answer(comment=comment, fields={"none_usable": False, "cause": cause, "effect": effect})


def fit_select(answer: Answer, task_data: dict[str, Any]) -> None:
    """The picks name candidates the task showed (numbers 1..n), stored as the candidates they are. A task pushed
    before the numbering (no `candidate_keys`) offered the candidate numbers themselves."""
    fields = answer.fields
    if fields.get("none_usable"):
        return
    keys = task_data.get("candidate_keys")
    if keys is None:
        shown = len(task_data.get("cause_candidates") or [])
        if shown and not all(0 <= fields[side] < shown for side in ("cause", "effect")):
            raise InvalidResult(f"a pick of a candidate that does not exist (only {shown} shown)")
        return
    for side in ("cause", "effect"):
        number = fields[side]
        if not 1 <= number <= len(keys):
            raise InvalidResult(f"{side} {number} does not exist: the task shows {len(keys)} candidates")
        fields[side] = int(keys[number - 1])
        fields[f"{side}_shown_as"] = number


def split_cues(text: Optional[str]) -> list[str]:
    parts = [p.strip(" .;,-•") for line in (text or "").splitlines() for p in line.split(";")]
    return [p for p in parts if p]


# A near copy: normalised Indel similarity (rapidfuzz `fuzz.ratio`, 0-100) at or above this. Chosen on the labelled
# table tests/data/explanation_pairs.csv: its copies (the draft plus " Indeed.", one or two words changed, a
# prefix or a sentence added) score 95 and above, independent explanations of the same pair 86 and below (the
# three-part template they share puts even unrelated explanations near 65); tests/test_near_copies.py keeps it so.
NEAR_COPY = 90.0


def normal_text(text: Optional[str]) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", str(text or "").lower()).split())


def similarity(a: Optional[str], b: Optional[str]) -> float:
    """How alike two explanations are once case, spaces and punctuation are set aside (0-100)."""
    from rapidfuzz import fuzz

    return float(fuzz.ratio(normal_text(a), normal_text(b)))


def same_text(a: Optional[str], b: Optional[str]) -> bool:
    """A near copy (see NEAR_COPY), not an explanation of one's own."""
    return bool(normal_text(a)) and bool(normal_text(b)) and similarity(a, b) >= NEAR_COPY


def fit_explain(answer: Answer, task_data: dict[str, Any]) -> None:
    """An explanation or a cue set that is (a near copy of) the model's draft, shown as a reference, is not human
    work: it goes back to its author with the reason."""
    fields = answer.fields
    if same_text(fields.get("explanation"), task_data.get("explanation_draft")):
        raise InvalidResult("the explanation is the model's draft: write your own explanation")
    if is_model_cue_set(fields.get("cue"), fields.get("false_cues") or [], *shown_model_cue_set(task_data)):
        raise InvalidResult("the cue set is the model's: write your own cue and three false cues")


def read_explain(answers: dict[str, Any]) -> Answer:
    explanation, cue = answers.get("explanation"), (answers.get("cue") or "").strip()
    false_cues = split_cues(answers.get("false_cues"))
    if not explanation:
        raise InvalidResult("no explanation")
    if not cue:
        raise InvalidResult("no cue")
    if len(false_cues) != FALSE_CUES:
        raise InvalidResult(f"{len(false_cues)} false cues, not {FALSE_CUES}")
    return Answer(comment=answers.get("comment"),
                  fields={"explanation": explanation, "cue": cue, "false_cues": false_cues,
                          "form_missing": missing_parts(explanation)})


# ---------------------------------------------------------------- decisions


def select_key(fields: dict[str, Any]) -> tuple:
    return ("none",) if fields.get("none_usable") else (fields.get("cause"), fields.get("effect"))


def style_item(item: Any, style: str, cause_k: int, effect_k: int, annotators: list[str]) -> dict[str, Any]:
    """The draft item of the chosen pair of STYLE: the two images, what the cues and the card need."""
    data = item.data or {}
    candidates = data["candidates"][style]
    cause, effect = candidates[str(cause_k)], candidates[str(effect_k)]
    keep = ("cause_caption", "effect_caption", "category", "link_id", "context")
    now = utcnow()
    return {"key": f"{item.key}@{style}", "kind": KIND, "group": item.group, "question": item.question,
            "answer": None, "status": DRAFT, "origin": "selected", "generation_id": None,
            "data": {**{k: data[k] for k in keep if data.get(k) is not None}, "style": style, "pair_key": item.key,
                     "cause_image": cause["cause"], "effect_image": effect["effect"],
                     "selection": {"cause": cause_k, "effect": effect_k, "annotators": annotators,
                                   "candidates": len(candidates),
                                   "rounds": int((data.get("image_round") or {}).get(style, 0)) + 1,
                                   "cause_provenance": cause.get("cause_provenance"),
                                   "effect_provenance": effect.get("effect_provenance")}},
            "created_at": now, "updated_at": now}


def decide_select(unit: str, item: Any, answers: Sequence[tuple[str, Answer]]) -> TaskOutcome:
    style = unit_style(unit)
    if len(answers) < 2:
        return TaskOutcome()
    keys = [select_key(a.fields) for _, a in answers]
    if keys[0] == keys[1]:
        winner, rule = keys[0], "two annotators agree"
    elif len(answers) < 3:
        return TaskOutcome(wants=3, rule="the two annotators disagree: a third is asked")
    else:
        top, count = Counter(keys[:3]).most_common(1)[0]
        if count >= 2:
            winner, rule = top, "a third annotator settled it"
        elif len(answers) < 4:  # three different choices: an adjudicator, a fourth person, is asked
            return TaskOutcome(wants=4, rule="three different choices: an adjudicator decides",
                               data={"selection": {style: {"needs_adjudication": True, "unit": unit}}})
        else:
            winner, rule = keys[3], "three different choices: the adjudicator decided"
    names = [name for name, a in answers if select_key(a.fields) == winner]
    if winner == ("none",):
        return TaskOutcome(decided=True, rule=rule,
                           data={"selection": {style: {"none_usable": True, "annotators": names, "unit": unit}}})
    cause_k, effect_k = winner
    known = (item.data or {}).get("candidates", {}).get(style) or {}
    if str(cause_k) not in known or str(effect_k) not in known:
        return TaskOutcome(decided=True, rule=f"candidate {cause_k if str(cause_k) not in known else effect_k} "
                                               f"does not exist", data={"selection": {style: {
                                                   "needs_adjudication": True, "unit": unit}}})
    return TaskOutcome(decided=True, rule=rule,
                       data={"selection": {style: {"cause": cause_k, "effect": effect_k, "annotators": names,
                                                   "unit": unit}}},
                       new_items=[style_item(item, style, cause_k, effect_k, names)])


def cue_set(fields: dict[str, Any]) -> tuple[str, frozenset]:
    norm = lambda s: " ".join(str(s).lower().split())  # noqa: E731
    return norm(fields["cue"]), frozenset(norm(c) for c in fields["false_cues"])


def independent(answers: Sequence[tuple[str, Answer]], draft: Optional[str] = None
                ) -> tuple[list[tuple[str, Answer]], list[str]]:
    """The explanations in order, less any near copy of an earlier person's or of the model's DRAFT: (kept,
    copiers)."""
    kept: list[tuple[str, Answer]] = []
    copiers: list[str] = []
    for name, answer in answers:
        text = answer.fields["explanation"]
        if same_text(text, draft) or any(same_text(text, other.fields["explanation"]) for _, other in kept):
            copiers.append(name)
        else:
            kept.append((name, answer))
    return kept, copiers


def cue_sets_of(answers: Sequence[tuple[str, Answer]]) -> dict[str, dict[str, Any]]:
    """Each person's cue set as they wrote it (a release's cue must be one of these)."""
    return {name: {"cue": a.fields["cue"], "false_cues": list(a.fields["false_cues"])} for name, a in answers}


def decide_explain(item: Any, answers: Sequence[tuple[str, Answer]]) -> TaskOutcome:
    """Accepted with three independent explanations from three people whose cue sets agree; an explanation equal to
    another person's does not count, and one more person is asked in its place."""
    kept, copiers = independent(answers, (getattr(item, "data", None) or {}).get("explanation_draft"))
    if len(kept) < 3:
        if copiers:
            return TaskOutcome(status=IN_REVIEW, wants=3 + len(copiers),
                               rule=f"explanation of {', '.join(copiers)} is a near copy of another's: one more "
                                    "person is asked")
        return TaskOutcome(status=IN_REVIEW)
    answers = list(kept[:3])
    people = {"explanations": [a.fields["explanation"] for _, a in answers],
              "explanations_by_annotator": {name: a.fields["explanation"] for name, a in answers},
              "cue_sets_by_annotator": cue_sets_of(answers)}
    sets = [cue_set(a.fields) for _, a in answers]
    if sets[0] == sets[1]:
        agreed, rule = 0, "three explanations; the cue sets agree"
    elif sets[2] in (sets[0], sets[1]):
        agreed, rule = (0 if sets[2] == sets[0] else 1), "three explanations; a third person settled the cue set"
    else:
        # the adjudicator sees all three explanations and cue sets and accepts one of them (or writes their own):
        # the model's cue set stays a reference, never the answer
        return TaskOutcome(status=NEEDS_ADJUDICATION, decided=True, rule="the three cue sets differ",
                           data={**people, "cue_adjudication": {"annotators": [name for name, _ in answers]}})
    fields = answers[agreed][1].fields
    data = {**people, "cue": fields["cue"], "false_cues": list(fields["false_cues"]),
            "cue_agreement": {"rule": rule, "annotators": [name for name, _ in answers]}}
    return TaskOutcome(status=ACCEPTED, decided=True, rule=rule, data=data)


# ---------------------------------------------------------------- adjudicating the cue set


def cue_set_people(data: dict[str, Any]) -> list[str]:
    """The people of a cue-set disagreement in the order the adjudicator sees them numbered (Person 1, 2, 3): read
    from the item's data in the store, so the numbers map back to people without the task naming anyone."""
    waiting = data.get("cue_adjudication")
    sets = data.get("cue_sets_by_annotator") or {}
    if not waiting or not sets:
        return []
    return [n for n in waiting.get("annotators") or sets if n in sets]


def cue_adjudication_data(data: dict[str, Any]) -> dict[str, Any]:
    """What the adjudicator of a cue-set disagreement sees: each person's explanation and cue set, numbered, and
    the numbers as choices; empty fields for any other adjudication. No field names a person (the task's JSON
    reaches the adjudicator's browser, hidden fields too)."""
    names = cue_set_people(data)
    if not names:
        return {"people_judgments": "", "cue_set_choices": []}
    sets, explained = data["cue_sets_by_annotator"], data.get("explanations_by_annotator") or {}
    blocks = [f"{shown_person(n)}: {explained.get(name, '')}\n  cue: {sets[name]['cue']}; false cues: "
              f"{'; '.join(sets[name]['false_cues'])}" for n, name in enumerate(names, start=1)]
    return {"people_judgments": without_emails("\n\n".join(blocks)),
            "cue_set_choices": [{"value": str(n)} for n in range(1, len(names) + 1)]}


def read_adjudication(answers: dict[str, Any]) -> dict[str, Any]:
    """The cue-set part of a MuCR adjudication: the person whose set is accepted, or the adjudicator's own."""
    return {"cue_set": (answers.get("cue_set") or [None])[0],
            "own_false_cues": split_cues(answers.get("own_false_cues"))}


def cue_set_text(cue: Optional[str], false_cues: Sequence[str]) -> str:
    """A cue set as one text for the near-copy rule: the cue, then the false cues in a fixed order (a retyped set
    in another order is still a copy)."""
    return "; ".join([str(cue or ""), *sorted(normal_text(c) for c in false_cues)])


def is_model_cue_set(cue: Optional[str], false_cues: Sequence[str], model_cue: Optional[str],
                     model_false_cues: Sequence[str]) -> bool:
    """A cue set that is a near copy of the model's drafted set (the rule of explanations, `same_text`): the
    model's work, not a person's."""
    return same_text(cue_set_text(cue, false_cues), cue_set_text(model_cue, model_false_cues))


def shown_model_cue_set(task_data: dict[str, Any]) -> tuple[str, list[str]]:
    """The model's cue set as the task showed it: an explain task's reference (`model_cue`, `model_false_cues`),
    or a cue-set adjudication's "cue on record" (the item has no cue of people's yet: it is the model's draft)."""
    if "model_cue" in task_data:
        cue = str(task_data["model_cue"]).removeprefix("cue: ")
        false_cues = str(task_data.get("model_false_cues") or "").removeprefix("false cues: ")
    else:
        cue, false_cues = str(task_data.get("cue") or ""), str(task_data.get("false_cues") or "")
    return ("" if cue == "none" else cue), ([] if false_cues == "none" else split_cues(false_cues))


def fit_adjudication(answer: Answer, task_data: dict[str, Any]) -> None:
    """A cue-set adjudication accepts one person's cue set (accept, with its number) or the adjudicator's own (accept
    with the corrected cue and three false cues of their own); the accepted set is put in the answer's fields, a
    person's as their number (`cue_set_people` says who that is). An own set retyped from the model's is the
    model's: it goes back to the adjudicator with the reason."""
    shown = len(task_data.get("cue_set_choices") or task_data.get("cue_set_people") or [])  # the latter: old tasks
    if not shown or answer.decision == "reject":
        return
    fields = answer.fields
    if answer.decision == "accept_corrected":
        if len(fields.get("own_false_cues") or []) != FALSE_CUES:
            raise InvalidResult(f"your own cue set needs {FALSE_CUES} false cues, one per line")
        if is_model_cue_set(answer.corrected_answer, fields["own_false_cues"], *shown_model_cue_set(task_data)):
            raise InvalidResult("your own cue set is the model's (the cue on record): accept one person's cue set, "
                                "or write a set of your own")
        fields.update(cue=answer.corrected_answer, false_cues=fields["own_false_cues"], chosen_from="adjudicator")
    else:
        number = fields.get("cue_set")
        if number is None or not str(number).isdigit() or not 1 <= int(number) <= shown:
            raise InvalidResult("pick the person whose cue set you accept (or write your own and accept it corrected)")
        fields.update(chosen_from=int(number))
    answer.corrected_answer = None  # the cue set goes into the item's data, not its answer


def adjudicated_cue_set(answer: Answer, item_data: dict[str, Any], adjudicator: str) -> dict[str, Any]:
    """The item's data after a cue-set adjudication: the accepted person's set (their number mapped back to them
    through the store's `cue_set_people`), or the adjudicator's own."""
    fields = answer.fields or {}
    sets = dict(item_data.get("cue_sets_by_annotator") or {})
    chosen = fields.get("chosen_from")
    if chosen == "adjudicator":
        sets[adjudicator] = {"cue": fields["cue"], "false_cues": list(fields["false_cues"])}
        chosen = adjudicator
    elif isinstance(chosen, int):
        chosen = cue_set_people(item_data)[chosen - 1]
    picked = sets[chosen]
    return {"cue": picked["cue"], "false_cues": list(picked["false_cues"]), "cue_sets_by_annotator": sets,
            "cue_agreement": {"rule": "adjudicated: the cue set of " + ("the adjudicator" if chosen == adjudicator
                                                                       else "one of the three people"),
                              "annotators": list((item_data.get("cue_adjudication") or {}).get("annotators") or []),
                              "adjudicator": adjudicator, "accepted": chosen}}


def agreement_labels(task: str, answer: Answer) -> dict[str, str]:
    fields = answer.fields or {}
    if task == SELECT:
        none = bool(fields.get("none_usable"))
        return {"none_usable": "yes" if none else "no", "best_cause": "none" if none else str(fields.get("cause")),
                "best_effect": "none" if none else str(fields.get("effect"))}
    if task == EXPLAIN and fields.get("cue"):
        cue, false = cue_set(fields)
        return {"cue": cue, "false_cues": "; ".join(sorted(false))}
    return {}


CHECKED_OR_DRAFT = (DRAFT, CHECKED)


def record_problem(record: dict[str, Any]) -> Optional[str]:
    """A MuCR release record that breaks the select or explain rules: a selection of a candidate that does not
    exist; a verified pair without three independent explanations (none the model's draft, no two the same)."""
    data = record.get("data") or {}
    for style, chosen in (data.get("selection") or {}).items():
        known = ((data.get("candidates") or {}).get(style) or {})
        for side in ("cause", "effect"):
            if isinstance(chosen, dict) and chosen.get(side) is not None and known \
                    and str(chosen[side]) not in known:
                return f"its {style} selection names {side} candidate {chosen[side]}, which does not exist"
    if record.get("verified") and data.get("cause_image") and data.get("effect_image"):
        return explanation_problem(data)
    return None


def explanation_problem(data: dict[str, Any]) -> Optional[str]:
    """Why a verified pair's explanations and cue set are not three people's own work: fewer than three
    independent explanations (none a near copy of the model's draft or of another's), fewer than three people
    behind them, or a cue that no person chose."""
    explanations = [str(e) for e in data.get("explanations") or []]
    draft = data.get("explanation_draft")
    if draft and any(same_text(e, draft) for e in explanations):
        return "an explanation is the model's draft, not a person's"
    kept, copies = independent([("", Answer(fields={"explanation": e})) for e in explanations])
    if len(kept) < 3:
        return (f"{len(kept)} independent explanations, not 3"
                + (" (some are copies of each other)" if copies else ""))
    people = data.get("explanations_by_annotator")
    if people is not None and len(people) < 3:
        return f"explanations of {len(people)} people, not 3"
    chosen = data.get("cue_sets_by_annotator")
    if chosen is not None:
        norm = lambda s: " ".join(str(s).lower().split())  # noqa: E731
        if norm(data.get("cue")) not in {norm(c.get("cue")) for c in chosen.values()}:
            return f"the cue {data.get('cue')!r} is no person's choice"
    return None
