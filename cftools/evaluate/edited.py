"""Scoring edited images (issue 34): the original question asked about the item's edited image.

A record with an edited image (`data.edited_image`, see `cftools.release.edited`) gets a third question,
`edited`: the original question's text about the edited image, whose gold answer is `data.edited_answer` (the
verifiers' answer for a verified edit, else the counterfactual answer; a multiple-choice item shows the
counterfactual question's options). A text-only (blind) run asks it too, with no image: its text is the original
question's, so a blind model answers both alike and its paired score is the floor the images have to lift.

Per kind and group, `edited_section` reports on the items asked all three:

- `original`: accuracy of the original question about the original image;
- `edited`: accuracy of the original question about the edited image (gold: `data.edited_answer`);
- `paired`: the share of items with both of those right (NaturalBench's group score over the image pair: a model
  that answers without looking at the image cannot get both);
- `counterfactual`: accuracy of the text-only counterfactual question (about the original image), beside them;
- `unknown_edited`: the share of unreadable replies about the edited image.

A record with an irrelevant edit as well gets a fourth question, `irrelevant`, and the kind's section a
`consistency` part beside `edited` (`cftools.evaluate.consistency`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Sequence

from cftools.errors import InputError
from cftools.evaluate.questions import EDITED
from cftools.release.edited import edited_answer_of, edited_image_of


def edited_questions(record: dict[str, Any], ctx: Any, kind: Any, asked: Sequence[Any]) -> list[Any]:
    """The `edited` question of RECORD, built from its asked `original` question (none without an edited image),
    and its `irrelevant` question where it has an irrelevant edit (`cftools.evaluate.consistency`). A blind run gets
    them without the image."""
    from cftools.evaluate.consistency import irrelevant_questions
    from cftools.evaluate.questions import gold_option_of, question_answer_type

    irrelevant = irrelevant_questions(record, ctx, asked)
    path = edited_image_of(record)
    original = next((q for q in asked if q.which == "original"), None)
    gold = edited_answer_of(record)
    if path is None or original is None or gold is None:
        return irrelevant
    image = ctx.release_dir / path
    if not image.is_file():
        raise InputError(image, "edited image listed in the release is missing", f"id {record.get('id')}")
    answer_type = question_answer_type(record, "counterfactual", gold, kind)
    record_options = record.get("options") if isinstance(record.get("options"), dict) else {}
    shown = record_options.get("counterfactual")
    shown = [str(o) for o in shown] if shown is not None else None
    options = shown if shown is not None else original.options  # rank mode: the derived options, as asked
    text = ctx.templates.question(question=record.get("original_question"), options=shown, mode=ctx.mode,
                                  kind=record.get("kind"), which="original", answer_type=answer_type)
    prompt = replace(original.prompt, text=text, images=[image] if ctx.needs_image else [], options=options)
    return [replace(original, which=EDITED, gold=gold, answer_type=answer_type, prompt=prompt, options=options,
                    gold_option=gold_option_of(options, gold, answer_type) if options else None, choices=None),
            *irrelevant]


def edited_row(name: str, outcomes: Sequence[dict]) -> dict[str, Any]:
    from cftools.evaluate.metrics import accuracy, answered, rate

    asked = [o for o in outcomes if answered(o, "original") and answered(o, EDITED)]
    right = {which: [bool(o[which]["correct"]) for o in asked] for which in ("original", EDITED)}
    text_only = [bool(o["counterfactual"]["correct"]) for o in asked if answered(o, "counterfactual")]
    return {"group": name, "n": len(asked), "original": accuracy(right["original"]).as_dict(),
            EDITED: accuracy(right[EDITED]).as_dict(),
            "paired": accuracy([a and b for a, b in zip(right["original"], right[EDITED])]).as_dict(),
            "counterfactual": accuracy(text_only).as_dict(),
            "unknown_edited": rate([bool(o[EDITED].get("unknown")) for o in asked])}


def edited_section(outcomes: Sequence[dict]) -> Optional[list[dict[str, Any]]]:
    """Per group and in total (see the module docstring); None when no item was asked about an edited image."""
    from cftools.evaluate.metrics import TOTAL, answered, by_group

    mine = [o for o in outcomes if answered(o, EDITED)]
    if not mine:
        return None
    return [*(edited_row(group, items) for group, items in by_group(mine).items()), edited_row(TOTAL, mine)]


def edited_sections(outcomes: Sequence[dict]) -> dict[str, Any]:
    """A kind's `edited` and `consistency` parts, each where the run asked its questions."""
    from cftools.evaluate.consistency import consistency_section

    parts = {"edited": edited_section(outcomes), "consistency": consistency_section(outcomes)}
    return {name: rows for name, rows in parts.items() if rows}


def edited_table(kind: str, rows: Sequence[dict[str, Any]], fmt: Any) -> Any:
    from cftools.kinds.base import ReportTable

    return ReportTable(kind, f"{kind}: the original question about the edited image (%): original image, edited "
                       "image, paired (both right), beside the text-only counterfactual question",
                       ["group", "n", "original", "edited", "unknown", "paired", "counterfactual (text)"],
                       [[r["group"], str(r["n"]), fmt.pct(r["original"]), fmt.pct(r[EDITED]),
                         fmt.rate(r["unknown_edited"]), fmt.pct(r["paired"]), fmt.pct(r["counterfactual"])]
                        for r in rows])


def edited_tables(kind: str, section: dict[str, Any], fmt: Any) -> list[Any]:
    """The edited-image table of a kind's section, when the run asked about edited images, and the consistency
    table beside it, when it asked about irrelevant edits."""
    from cftools.evaluate.consistency import consistency_tables

    return ([edited_table(kind, section["edited"], fmt)] if section.get("edited") else []) + consistency_tables(
        kind, section, fmt)


def edited_csv_rows(section: dict[str, Any]) -> list[tuple[str, str, Any, Optional[int]]]:
    """The CSV rows of a kind's `edited` and `consistency` parts."""
    from cftools.evaluate.consistency import consistency_csv_rows

    out: list[tuple[str, str, Any, Optional[int]]] = []
    for r in section.get("edited") or []:
        out += [(r["group"], f"edited_{metric}", r[metric], None)
                for metric in ("original", EDITED, "paired", "counterfactual")]
        out.append((r["group"], "edited_unknown", r["unknown_edited"], r["n"]))
    return out + consistency_csv_rows(section.get("consistency"))
