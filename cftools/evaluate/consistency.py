"""Counterfactual consistency (issue 44): does the answer change if and only if the intervention is relevant?

Besides its relevant edit (`data.edited_image`: the counterfactual made visible, the answer must change; scored in
`cftools.evaluate.edited`), a release record may carry an **irrelevant** edit (`data.irrelevant_edited_image`:
something the question does not depend on changed, the answer must stay). Such a record gets a fourth question,
`irrelevant`: the original question (its text, options and answer type) about the irrelevant-edited image, whose
gold answer is `data.irrelevant_edited_answer` (the original answer, as people confirmed it; the record's
`original_answer` when the release gives none). A text-only (blind) run asks it too, with no image, like `edited`.

Per kind and group, `consistency_section` reports on the items asked all three (original, edited, irrelevant)
CounterBench's Counterfactual Consistency Score, in two readings:

- `consistency`: the share of items right on all three: the original question about the original image, about
  the relevant edit (the answer changed to the edited gold) and about the irrelevant edit (the answer unchanged);
- `changed_on_relevant`: the share whose reply about the relevant edit differs from the reply about the original
  image; `unchanged_on_irrelevant`: the share whose reply about the irrelevant edit equals it; `change_iff_relevant`:
  both (the answer changes if and only if the intervention is relevant, whatever the gold answers).

Replies are compared as read (the parsed answer, as the kind reads it: a number, yes/no, an option) after the VQA
normal form (`cftools.answers.normalize_answer`); an unreadable (unknown) reply counts as wrong and as neither
changed nor unchanged, so it is never consistent.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from cftools.errors import InputError

IRRELEVANT = "irrelevant"
IRRELEVANT_IMAGE = "irrelevant_edited_image"
IRRELEVANT_ANSWER = "irrelevant_edited_answer"
# The section's scores, in the order the report and the CSV give them.
METRICS = ("consistency", "changed_on_relevant", "unchanged_on_irrelevant", "change_iff_relevant")
DEFINITION = ("CounterBench's Counterfactual Consistency Score (the answer changes if and only if the intervention is "
              "relevant), in two readings. Consistency: right on all three, the original image, the relevant edit "
              "(the answer changed to its gold) and the irrelevant edit (the answer unchanged). Change iff relevant: "
              "the reply about the relevant edit differs from the reply about the original image (changed on "
              "relevant) and the reply about the irrelevant edit equals it (unchanged on irrelevant), whatever the "
              "gold answers. Replies are compared as read, in the VQA normal form; an unreadable reply counts as "
              "wrong and as neither changed nor unchanged, so it is never consistent.")


def irrelevant_image_of(record: dict[str, Any]) -> Optional[str]:
    """The release path of a record's irrelevant-edited image, or None."""
    value = (record.get("data") or {}).get(IRRELEVANT_IMAGE)
    return str(value) if value else None


def irrelevant_answer_of(record: dict[str, Any]) -> Optional[str]:
    """The gold answer of the original question about the irrelevant edit: the answer stays."""
    data = record.get("data") or {}
    answer = data.get(IRRELEVANT_ANSWER) if data.get(IRRELEVANT_ANSWER) is not None else record.get("original_answer")
    return None if answer is None else str(answer)


def irrelevant_questions(record: dict[str, Any], ctx: Any, asked: Sequence[Any]) -> list[Any]:
    """The `irrelevant` question of RECORD, built from its asked `original` question (the same text and options);
    none without an irrelevant-edited image. A blind run gets it without the image."""
    from cftools.evaluate.questions import gold_option_of

    path = irrelevant_image_of(record)
    original = next((q for q in asked if q.which == "original"), None)
    gold = irrelevant_answer_of(record)
    if path is None or original is None or gold is None:
        return []
    image = ctx.release_dir / path
    if not image.is_file():
        raise InputError(image, "irrelevant-edited image listed in the release is missing", f"id {record.get('id')}")
    prompt = replace(original.prompt, images=[image] if ctx.needs_image else [])
    options = original.options
    return [replace(original, which=IRRELEVANT, gold=gold, prompt=prompt,
                    gold_option=gold_option_of(options, gold, original.answer_type) if options else None)]


# -- the score ----------------------------------------------------------------------------------------------------

def read_answer(outcome: dict[str, Any], which: str) -> Optional[str]:
    """The reply to WHICH as read, in normal form; None when it could not be read."""
    from cftools.answers import normalize_answer

    asked = outcome[which]
    if asked.get("unknown") or asked.get("answer") is None:
        return None
    return normalize_answer(str(asked["answer"]))


def item_consistency(outcome: dict[str, Any]) -> dict[str, bool]:
    """The four verdicts of one item asked original, edited and irrelevant (see the module docstring)."""
    from cftools.evaluate.questions import EDITED

    original, relevant, irrelevant = (read_answer(outcome, w) for w in ("original", EDITED, IRRELEVANT))
    changed = original is not None and relevant is not None and relevant != original
    unchanged = original is not None and irrelevant is not None and irrelevant == original
    right = all(bool(outcome[w]["correct"]) for w in ("original", EDITED, IRRELEVANT))
    return {"consistency": right, "changed_on_relevant": changed, "unchanged_on_irrelevant": unchanged,
            "change_iff_relevant": changed and unchanged}


def consistency_row(name: str, outcomes: Sequence[dict]) -> dict[str, Any]:
    from cftools.evaluate.questions import EDITED
    from cftools.evaluate.metrics import accuracy, answered, rate

    asked = [o for o in outcomes if all(answered(o, w) for w in ("original", EDITED, IRRELEVANT))]
    verdicts = [item_consistency(o) for o in asked]
    return {"group": name, "n": len(asked),
            **{metric: accuracy([v[metric] for v in verdicts]).as_dict() for metric in METRICS},
            "irrelevant": accuracy([bool(o[IRRELEVANT]["correct"]) for o in asked]).as_dict(),
            "unknown_irrelevant": rate([bool(o[IRRELEVANT].get("unknown")) for o in asked])}


def consistency_section(outcomes: Sequence[dict]) -> Optional[list[dict[str, Any]]]:
    """Per group and in total; None when no item was asked about an irrelevant edit."""
    from cftools.evaluate.metrics import TOTAL, answered, by_group

    mine = [o for o in outcomes if answered(o, IRRELEVANT)]
    if not mine:
        return None
    return [*(consistency_row(group, items) for group, items in by_group(mine).items()), consistency_row(TOTAL, mine)]


# -- the report -----------------------------------------------------------------------------------------------------

def consistency_table(kind: str, rows: Sequence[dict[str, Any]], fmt: Any) -> Any:
    from cftools.kinds.base import ReportTable

    return ReportTable(kind, f"{kind}: counterfactual consistency (%) over the items asked about the original image, "
                       "the relevant edit and the irrelevant edit",
                       ["group", "n", "irrelevant", "unknown", "consistency", "changed on relevant",
                        "unchanged on irrelevant", "change iff relevant"],
                       [[r["group"], str(r["n"]), fmt.pct(r[IRRELEVANT]), fmt.rate(r["unknown_irrelevant"]),
                         *(fmt.pct(r[metric]) for metric in METRICS)] for r in rows], note=DEFINITION)


def consistency_tables(kind: str, section: dict[str, Any], fmt: Any) -> list[Any]:
    """The consistency table of a kind's section, when the run asked about irrelevant edits."""
    return [consistency_table(kind, section["consistency"], fmt)] if section.get("consistency") else []


def consistency_csv_rows(rows: Optional[Sequence[dict[str, Any]]]) -> list[tuple[str, str, Any, Optional[int]]]:
    out: list[tuple[str, str, Any, Optional[int]]] = []
    for r in rows or []:
        out.append((r["group"], "edited_irrelevant", r[IRRELEVANT], None))
        out += [(r["group"], metric, r[metric], None) for metric in METRICS]
        out.append((r["group"], "unknown_irrelevant", r["unknown_irrelevant"], r["n"]))
    return out
