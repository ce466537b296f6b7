"""The `edit` Label Studio task that the kinds with edited images share (C-VQA, CFMM; see `GenerateHooks.edit_subject`);
the kinds declare it (`task_spec`, `read_judgment`, `decide_task`, ...) by calling these functions.

One task per item and candidate (unit = the candidate number, purpose `edit:<k>`; an irrelevant edit's candidate,
`data.irrelevant_edit_candidates`, has the unit `irrelevant:<k>`, purpose `edit:irrelevant:<k>`): the original image
beside the edited one, the condition (the presupposition as a fact about the edited image; for an irrelevant edit the
change the question does not depend on) and the edit instruction. Both edits look the same to people: nothing says
which kind of edit a task shows, or which answer is expected. Each person answers: (i) does the edited image show
the condition, (ii) is anything else changed (and what), (iii) the original question about the edited image, in
the kind's answer form (C-VQA: free text; CFMM: one of the pair's options). The counterfactual answer is not shown: each person's answer is their own reading of the image.

Only a checked candidate goes to people: the best-ranked candidate without an `edit_*` flag (or whose flags a person
waived) that people have not rejected (`edit_units`). A task whose original or edited image cannot be shown (its file
missing or outside the document root, without `--data-uri`) is refused before anything is pushed. Two people decide
it (`decide_edit`):

- both say it shows the condition, nothing else changed, and give the same answer (compared as the kind compares
  answers: C-VQA's normal form, CFMM's exact option) -> accepted: `data.edit_selected` = k (what the release
  prefers, `cftools.release.edited`) and `data.edit_answer` = their answer (the edited image's answer in the
  release); an irrelevant edit is accepted only when that answer is the original answer (the answer stays):
  `data.irrelevant_edit_selected` = k, `data.irrelevant_edit_answer`; both agreeing on another answer rejects it;
- both say the edit fails (it does not show the condition, or changes something else) -> rejected: the next
  checked candidate, if any, becomes a task of its own;
- otherwise an adjudicator, a third person who has not judged the item, gets the same task; their judgment
  decides (accepted only when they say it shows the condition and nothing else changed, and for an irrelevant
  edit when their answer is the original one).

Every decision is recorded under `data.edit_verification[k]` (`data.irrelevant_edit_verification[k]`): decision,
rule, annotators, answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from cftools.answers import normalize_answer
from cftools.errors import CftoolsError, Hint
from cftools.flags import waived_codes
from cftools.judgments import NO, YES, Answer, InvalidResult
from cftools.kinds.base import TaskOutcome, TaskSpec
from cftools.models import ACCEPTED, CHECKED, IN_REVIEW, NEEDS_ADJUDICATION

EDIT = "edit"
ACCEPTED_EDIT, REJECTED_EDIT = "accepted", "rejected"
# The item's text may be anywhere in its own verification: the edit is judged apart from it.
EDIT_STATUSES = (CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, ACCEPTED)


IRRELEVANT_UNIT = "irrelevant:"  # the unit of an irrelevant edit's candidate k: irrelevant:<k>


@dataclass(frozen=True)
class EditUnit:
    """One candidate of one of an item's edits, as a task's unit names it."""

    k: str
    irrelevant: bool = False

    @property
    def prefix(self) -> str:  # of the item's data fields: edit_candidates, irrelevant_edit_candidates, ...
        return "irrelevant_edit" if self.irrelevant else "edit"

    def field(self, suffix: str) -> str:
        return f"{self.prefix}_{suffix}"

    @property
    def unit(self) -> str:
        return f"{IRRELEVANT_UNIT}{self.k}" if self.irrelevant else self.k

    @classmethod
    def parse(cls, unit: str) -> "EditUnit":
        return cls(unit.removeprefix(IRRELEVANT_UNIT), irrelevant=unit.startswith(IRRELEVANT_UNIT))


def edit_spec(kind: str) -> TaskSpec:
    return TaskSpec(EDIT, f"{kind}/edit.xml.j2", annotators=2, tiebreak=1, statuses=EDIT_STATUSES,
                    description="two people verify an edited image; a third adjudicates a disagreement")


# ---------------------------------------------------------------- which candidate


def edit_units(data: dict[str, Any]) -> list[str]:
    """The candidates people are to verify, one per edit (the relevant one, then the irrelevant one): the
    best-ranked one without an edit_* flag (but those a person waived, `cftools flags waive`) that people have not
    rejected; none of an edit once one of its candidates is accepted."""
    return [unit.unit for unit in (next_unit(data, False), next_unit(data, True)) if unit is not None]


def next_unit(data: dict[str, Any], irrelevant: bool) -> Optional[EditUnit]:
    prefix = EditUnit("", irrelevant)
    if data.get(prefix.field("selected")) is not None:
        return None
    candidates = data.get(prefix.field("candidates")) or {}
    verdicts = data.get(prefix.field("verification")) or {}
    waived = waived_codes(data)
    for check in data.get(prefix.field("checks")) or []:
        k = str(check.get("k"))
        if k not in candidates or any(flag.get("code") not in waived for flag in check.get("flags") or []):
            continue
        if (verdicts.get(k) or {}).get("decision") == REJECTED_EDIT:
            continue
        return EditUnit(k, irrelevant)
    return None


# ---------------------------------------------------------------- what people see


def edit_payload(unit: str, item: Any, original_question: str, image_value: str, extra_images: dict[str, str],
                 answer_choices: Optional[list[str]] = None) -> dict[str, Any]:
    data = item.data or {}
    which = EditUnit.parse(unit)
    candidate = (data.get(which.field("candidates")) or {}).get(which.k) or {}
    edit = data.get("edit") or {}
    said = "irrelevant_" if which.irrelevant else ""  # where the edit's condition and instruction are
    if not image_value:
        raise CftoolsError(unshowable(item, "original image", "its file is outside [label_studio] document_root"),
                           hint=UNSHOWABLE_HINT)
    payload = {"image": image_value, "edited_image": edited_image(item, unit, candidate, extra_images),
               "condition": str(edit.get(f"{said}condition") or ""),
               "instruction": str(edit.get(f"{said}instruction") or ""),
               "question": original_question, "edit_candidate": unit}
    if answer_choices is not None:
        payload["answer_choices"] = [{"value": str(v)} for v in answer_choices]
    return payload


def edited_image(item: Any, unit: str, candidate: dict[str, Any], extra_images: dict[str, str]) -> str:
    """How the task shows candidate UNIT's image; one that cannot be shown is refused (a task with an empty image
    asks people to judge nothing)."""
    ref = str(candidate.get("image") or "")
    if not extra_images.get(ref):
        raise CftoolsError(unshowable(item, f"edited image of candidate {unit} ({ref or 'none recorded'})",
                                      "its file is missing or outside [label_studio] document_root"),
                           hint=UNSHOWABLE_HINT)
    return extra_images[ref]


UNSHOWABLE_HINT = Hint("{message} (move it under the document root, or embed it: push {data_uri}); nothing was pushed",
                       data_uri="--data-uri")


def unshowable(item: Any, what: str, why: str) -> str:
    return f"item {item.key}: the {what} cannot be shown in Label Studio: {why}"


# ---------------------------------------------------------------- reading a judgment


def read_edit(answers: dict[str, Any]) -> Answer:
    """One edit judgment. Saying something else changed needs the what (an empty field is not an answer)."""
    shows, changed = answers.get("shows_condition") == [YES], answers.get("other_change") == [YES]
    what = (answers.get("other_change_what") or "").strip() or None
    if changed and not what:
        raise InvalidResult("you said something else changed: write what changed in (iii)")
    answer = answers.get("edited_answer")
    if isinstance(answer, list):  # picked among the options
        answer = answer[0] if answer else None
    if not (answer or "").strip():
        raise InvalidResult("no answer to the question about the edited image")
    return Answer(comment=answers.get("comment"),
                  fields={"shows_condition": shows, "other_change": changed, "other_change_what": what,
                          "edited_answer": answer.strip()})


def fit_edit(answer: Answer, task_data: dict[str, Any]) -> None:
    """The judgment is of the candidate the task showed; a pick must be one of the task's options."""
    answer.fields["candidate"] = str(task_data.get("edit_candidate") or "")
    choices = [c["value"] for c in task_data.get("answer_choices") or [] if isinstance(c, dict)]
    if choices and answer.fields["edited_answer"] not in choices:
        raise InvalidResult(f"answer {answer.fields['edited_answer']!r} is not one of the options")


# ---------------------------------------------------------------- decisions


def free_text_answer(text: Optional[str]) -> Optional[str]:
    """C-VQA's comparison: the normal form model answers are read in ("Three" -> "3")."""
    return normalize_answer(text) or None


def exact_option(text: Optional[str]) -> Optional[str]:
    """CFMM's comparison: the option as written."""
    return text or None


def edit_ok(fields: dict[str, Any]) -> bool:
    return bool(fields.get("shows_condition")) and not fields.get("other_change")


def verdict(unit: str, decision: str, rule: str, annotators: list[str], answer: Optional[str] = None,
            selected: bool = False) -> dict[str, Any]:
    which = EditUnit.parse(unit)
    data: dict[str, Any] = {which.field("verification"): {which.k: {
        "decision": decision, "rule": rule, "annotators": annotators,
        **({"answer": answer} if answer is not None else {})}}}
    if selected:
        data.update({which.field("selected"): int(which.k), which.field("answer"): answer})
    return data


def decide_edit(unit: str, answers: Sequence[tuple[str, Answer]], same: Callable[[Optional[str]], Optional[str]],
                original_answer: Optional[str] = None) -> TaskOutcome:
    """The outcome of one edit task from its (annotator, judgment) pairs in annotation order; SAME is how the
    kind compares answers, ORIGINAL_ANSWER what an irrelevant edit's answer must stay (see the module docstring)."""
    mine = [(name, a) for name, a in answers if str(a.fields.get("candidate", unit)) == unit]
    if len(mine) < 2:
        return TaskOutcome()
    (first_name, first), (second_name, second) = mine[0], mine[1]
    names = [first_name, second_name]
    # an irrelevant edit is good only where its answer stays the original one; a relevant edit's answer is free
    kept = same(original_answer) if original_answer is not None else None
    stays = (lambda answer: kept is not None and answer == kept) if EditUnit.parse(unit).irrelevant else (
        lambda _: True)
    if len(mine) >= 3:  # the adjudicator's judgment decides
        name, third = mine[2]
        answer = same(third.fields["edited_answer"])
        if edit_ok(third.fields) and stays(answer):
            return TaskOutcome(decided=True, rule="adjudicated: accepted",
                               data=verdict(unit, ACCEPTED_EDIT, "adjudicated: accepted", [name], answer, True))
        return TaskOutcome(decided=True, rule="adjudicated: rejected",
                           data=verdict(unit, REJECTED_EDIT, "adjudicated: rejected", [name]))
    a, b = same(first.fields.get("edited_answer")), same(second.fields.get("edited_answer"))
    both_ok = edit_ok(first.fields) and edit_ok(second.fields)
    if both_ok and a is not None and a == b and stays(a):
        rule = "both: shows the condition, nothing else changed, same answer"
        return TaskOutcome(decided=True, rule=rule, data=verdict(unit, ACCEPTED_EDIT, rule, names, a, True))
    if both_ok and a is not None and a == b:  # an irrelevant edit both read with another answer: it changed it
        rule = "both: the answer about the edited image is not the original answer"
        return TaskOutcome(decided=True, rule=rule, data=verdict(unit, REJECTED_EDIT, rule, names, a))
    if not edit_ok(first.fields) and not edit_ok(second.fields):
        rule = "both: the edit does not show the condition or changes something else"
        return TaskOutcome(decided=True, rule=rule, data=verdict(unit, REJECTED_EDIT, rule, names))
    return TaskOutcome(wants=3, rule="the two judgments of the edit disagree: an adjudicator decides")


def item_source(item: Any) -> Any:
    """The stored item's source question (what a kind's `edit_subject` may need at a decision), None for an item
    outside a session."""
    from sqlalchemy.orm import object_session
    from sqlalchemy.orm.exc import UnmappedInstanceError

    from cftools.models import SourceQuestion

    try:
        session = object_session(item)
    except UnmappedInstanceError:
        return None
    source_id = getattr(item, "source_id", None)
    return session.get(SourceQuestion, source_id) if session is not None and source_id is not None else None


def edit_agreement_labels(answer: Answer) -> dict[str, str]:
    fields = answer.fields or {}
    return {"edit_shows_condition": YES if fields.get("shows_condition") else NO,
            "edit_other_change": YES if fields.get("other_change") else NO}

