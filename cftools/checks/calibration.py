"""The checks calibrated against people: how often a check's flag is right, and how often the checks miss.

- precision, per check code: of the flagged drafts people measured (`annotate push --flagged-sample`, outcomes of
  role `measure`) that carry the code, the share the person rejected (the question is not about the image, or the
  answer is wrong); an item measured more than once counts its latest judgment;
- misses: of the items people rejected in ordinary verification (status `rejected` with a verification task), the
  share no check flagged; per check, the share that check did not flag among the rejected items of the kinds it has
  flagged items of.

Each share has its Wilson score interval (95%, `cftools.annotate.quality.wilson_interval`). A check whose precision
is below `[checks] low_precision` is named low. The same dict is what `cftools check --calibration --json` prints and
what the report renders."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select

from cftools.annotate.quality import share_with_interval
from cftools.checks.edits import edit_codes
from cftools.judgments import MEASURE, VERIFY
from cftools.models import REJECTED, AnnotationTask, CheckFlag, Item, TaskOutcome

DEFAULT_LOW_PRECISION = 0.5
DEFINITION = ("precision: of the flagged drafts people measured (annotate push --flagged-sample) carrying the check's "
              "flag, the share the person rejected (not about the image, or the answer wrong); miss rate: of the items "
              "people rejected in verification, the share no check flagged (per check: the share it did not flag, "
              "among the rejected items of the kinds it flags); Wilson score intervals, 95%")


def low_precision(workspace: Any) -> float:
    """`[checks] low_precision`: a check whose precision is below it is named low."""
    value = workspace.section("checks").get("low_precision")
    return float(DEFAULT_LOW_PRECISION if value is None else value)


def text_flags(session: Any) -> dict[int, set[str]]:
    """Item id -> the codes of the checks that flagged it (edit checks' flags are their candidates', left out)."""
    ignored = set(edit_codes())
    found: dict[int, set[str]] = defaultdict(set)
    for item_id, code in session.execute(select(CheckFlag.item_id, CheckFlag.code)):
        if code not in ignored:
            found[item_id].add(code)
    return found


def measured_verdicts(session: Any) -> dict[int, bool]:
    """Item id -> whether the person measuring it rejected it (its latest measuring judgment)."""
    verdicts: dict[int, bool] = {}
    for item_id, given_ok in session.execute(select(TaskOutcome.item_id, TaskOutcome.given_ok)
                                             .where(TaskOutcome.role == MEASURE)
                                             .order_by(TaskOutcome.judged_at, TaskOutcome.id)):
        verdicts[item_id] = not given_ok
    return verdicts


def rejected_by_people(session: Any) -> dict[int, str]:
    """Item id -> kind of every item people rejected in ordinary verification."""
    verified = select(AnnotationTask.item_id).where(AnnotationTask.purpose == VERIFY)
    return dict(session.execute(select(Item.id, Item.kind).where(Item.status == REJECTED, Item.id.in_(verified))).all())


def precision_rows(flags: dict[int, set[str]], verdicts: dict[int, bool], codes: list[str],
                   below: float) -> list[dict[str, Any]]:
    rows = []
    for code in codes:
        measured = [rejected for item_id, rejected in verdicts.items() if code in flags.get(item_id, ())]
        precision, interval = share_with_interval(sum(measured), len(measured))
        rows.append({"code": code, "measured": len(measured), "people_rejected": sum(measured),
                     "precision": precision, "interval": interval,
                     "low": precision is not None and precision < below})
    return rows


def miss_rows(flags: dict[int, set[str]], rejected: dict[int, str], kinds_of: dict[str, set[str]],
              codes: list[str]) -> dict[str, Any]:
    unflagged = sum(not flags.get(item_id) for item_id in rejected)
    miss_rate, interval = share_with_interval(unflagged, len(rejected))
    per_check = []
    for code in codes:
        among = [item_id for item_id, kind in rejected.items() if kind in kinds_of[code]]
        missed = sum(code not in flags.get(item_id, ()) for item_id in among)
        rate, code_interval = share_with_interval(missed, len(among))
        per_check.append({"code": code, "missed": missed, "miss_rate": rate, "interval": code_interval})
    return {"people_rejected": len(rejected), "unflagged": unflagged, "miss_rate": miss_rate, "interval": interval,
            "per_check": per_check}


def check_calibration(session: Any, low_precision_below: float = DEFAULT_LOW_PRECISION) -> dict[str, Any]:
    """Each check's precision against people's measuring judgments and the checks' misses (see the module)."""
    flags = text_flags(session)
    kinds = dict(session.execute(select(Item.id, Item.kind).where(Item.id.in_(select(CheckFlag.item_id)))).all())
    kinds_of: dict[str, set[str]] = defaultdict(set)
    for item_id, codes in flags.items():
        for code in codes:
            kinds_of[code].add(kinds[item_id])
    codes = sorted(kinds_of)
    return {"definition": DEFINITION,
            "checks": precision_rows(flags, measured_verdicts(session), codes, low_precision_below),
            "misses": miss_rows(flags, rejected_by_people(session), kinds_of, codes),
            "low_precision_below": low_precision_below}
