"""The edit checks as registered checks: `cftools check --list` lists them, `check` and `check --only CODE` run them.

Two families, both about an item's edit rather than its text, so neither moves an item between statuses (a flagged
draft still moves to `checked` when its text checks pass; the edit flags rank candidates for people instead):

- the image checks of `cftools.imagegen.edit_checks` (its `EDIT_CODES`, read at run time so new codes appear),
  recomputed over the STORED candidates of every item with `edit_candidates` (and `irrelevant_edit_candidates`),
  which are then re-ranked into `data.edit_checks` (`data.irrelevant_edit_checks`). With only some codes, only
  those codes' flags are replaced; the others are kept as stored. The answer checks (`EDIT_ANSWER_*`, e.g.
  `edit_answer_not_flipped`) need an answerer (`cftools generate edits --answerer`), so `check` keeps their
  stored results;
- `edit_condition_repeated`: an item whose `data.edit.condition` repeats another item's (any kind; compared
  normalised: case, whitespace and punctuation, and near-duplicates by rapidfuzz's token sort ratio from
  `CONDITION_SIMILARITY`) gets a stored flag naming the other items.

Items are written in batches, one transaction each: a killed run keeps the batches it finished, and a rerun
recomputes the same results (flags are replaced, never added twice).
"""

from __future__ import annotations

import re
import string
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from sqlalchemy import delete, select

from cftools.errors import CftoolsError, Hint
from cftools.imagegen import edit_checks
from cftools import __version__
from cftools.models import REJECTED, CheckFlag, Image, Item, ItemEvent, SourceQuestion, utcnow
from cftools.store import Store

CONDITION_REPEATED = "edit_condition_repeated"
CONDITION_SIMILARITY = 92  # rapidfuzz token sort ratio (0-100): "the lamp is on"/"off" score 89.7, not one
# each edit's candidates and their ranking (`cftools.flags.EDIT_CHECK_SETS` names them for people)
CANDIDATE_SETS = (("edit_candidates", "edit_checks"), ("irrelevant_edit_candidates", "irrelevant_edit_checks"))
STAGE = "check"  # the item history's stage, as the other checks'
BATCH = 100  # items per transaction (each item opens its candidates' files)
NAMED = 5  # other items a repeated-condition flag names before "and N more"

# What each check flags, for `check --list`: read from the edit checks' own table where it has the code.
_CONDITION_FLAGS = "the edit condition repeats another item's (normalised, or near-identical): names the items"


def edit_kinds() -> list[str]:
    """The kinds whose items can be edited (they declare `edit_subject`)."""
    from cftools.kinds import all_kinds

    return sorted(name for name, kind in all_kinds().items() if kind.hooks.generate.fills("edit_subject"))


def image_codes() -> tuple[str, ...]:
    return tuple(edit_checks.EDIT_CODES)


def answer_codes() -> list[str]:
    """The edit checks that ask a model about the images (`EDIT_ANSWER_*`): `check` has no answerer to run them."""
    return [value for name, value in vars(edit_checks).items() if name.startswith("EDIT_ANSWER_")
            and value in image_codes()]


def edit_codes() -> list[str]:
    """Every code this module runs: the image checks, then the repeated condition."""
    return [*image_codes(), CONDITION_REPEATED]


def _described() -> dict[str, str]:
    """Code -> what it flags, from the table in `cftools.imagegen.edit_checks`' docstring."""
    found: dict[str, list[str]] = {}
    current = None
    for line in (edit_checks.__doc__ or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) < 2 or (cells[0] and set(cells[0]) <= set("-")):
            current = None if not cells else current
            continue
        code = cells[0].strip("`")
        if code:
            current = code if code in image_codes() else None
            if current:
                found[current] = [cells[1]]
        elif current:
            found[current].append(cells[1])
    return {code: _with_values(" ".join(parts)) for code, parts in found.items()}


def _with_values(text: str) -> str:
    """`NAME` of a setting of the edit checks replaced by its value (`MIN_CHANGED_SHARE` -> 0.002)."""
    return re.sub(r"`([A-Z_]+)`", lambda m: str(getattr(edit_checks, m.group(1), m.group(1))), text)


def edit_scopes() -> dict[str, str]:
    """Code -> "kinds: items ... — what it flags" for `check --list`."""
    kinds = ", ".join(edit_kinds()) or "no kind"
    what = _described()
    scopes = {code: f"{kinds}: items with edit candidates — {what.get(code, 'see docs/check.md')}"
              for code in image_codes()}
    for code in answer_codes():
        scopes[code] += " (needs an answerer: run by `generate edits --answerer`)"
    scopes[CONDITION_REPEATED] = f"{kinds}: items with an edit condition — {_CONDITION_FLAGS}"
    return scopes


@dataclass
class EditCheckReport:
    items: int = 0  # items whose candidates were checked
    candidates: int = 0
    applied: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    flagged: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    missing: int = 0  # candidates not measured (their file, or the item's original, is not in the store): kept


# ---------------------------------------------------------------- the image checks over stored candidates


def _edited_items(store: Store, groups: Sequence[str]) -> list[int]:
    with store.session() as session:
        query = select(Item.id, Item.data).where(Item.status != REJECTED).order_by(Item.id)
        if groups:
            query = query.where(Item.group.in_(list(groups)))
        return [item_id for item_id, data in session.execute(query)
                if isinstance(data, dict) and any(data.get(c) for c, _ in CANDIDATE_SETS)]


def _image_paths(session: Any, refs: Iterable[str]) -> dict[str, Path]:
    shas = [r.removeprefix("sha256:") for r in refs]
    rows = session.execute(select(Image.sha256, Image.path).where(Image.sha256.in_(shas))).all()
    return {f"sha256:{sha}": Path(path) for sha, path in rows}


def _original_path(session: Any, item: Item) -> Optional[Path]:
    if item.source_id is None:
        return None
    row = session.execute(select(Image.path).join(SourceQuestion, SourceQuestion.image_id == Image.id)
                          .where(SourceQuestion.id == item.source_id)).scalar_one_or_none()
    return Path(row) if row else None


def recheck_candidates(original: Path, candidates: dict[str, dict], stored: list[dict], paths: dict[str, Path],
                       codes: Sequence[str], report: EditCheckReport) -> list[dict]:
    """The candidates' checks, best first: CODES recomputed, every other code's flags kept from STORED."""
    import PIL.Image

    before = {str(c.get("k")): c for c in stored}
    base = PIL.Image.open(original).convert("RGB")
    reports = []
    for k in sorted(candidates, key=int):
        path = paths.get(candidates[k].get("image", ""))
        old = before.get(k, {})
        if path is None or not path.is_file():
            report.missing += 1
            reports.append(_as_report(int(k), old, [_flag(f) for f in old.get("flags") or []]))
            continue
        fresh = edit_checks.check_edit(base, PIL.Image.open(path).convert("RGB"), int(k))
        kept = [_flag(f) for f in old.get("flags") or [] if f.get("code") not in codes]
        fresh.flags = [f for f in fresh.flags if f.code in codes] + kept
        report.candidates += 1
        for code in codes:
            report.applied[code] += 1
        for code in {f.code for f in fresh.flags if f.code in codes}:
            report.flagged[code] += 1
        reports.append(fresh)
    return [r.as_dict() for r in edit_checks.rank_edits(reports)]


def _flag(stored: dict) -> "edit_checks.EditFlag":
    return edit_checks.EditFlag(str(stored.get("code")), str(stored.get("reason") or ""), stored.get("value"))


def _as_report(k: int, stored: dict, flags: list) -> "edit_checks.EditReport":
    return edit_checks.EditReport(k, changed_share=float(stored.get("changed_share") or 0.0),
                                  ssim_outside=stored.get("ssim_outside"), flags=flags)


def run_image_checks(store: Store, codes: Sequence[str], groups: Sequence[str] = (),
                     on_start: Optional[Callable[[int], None]] = None,
                     on_batch: Optional[Callable[[int], None]] = None) -> EditCheckReport:
    """Recompute CODES (of the image checks) over every edited item's stored candidates and re-rank them;
    ON_START is told how many items there are, ON_BATCH how many each batch did."""
    report = EditCheckReport()
    codes = [c for c in codes if c in image_codes() and c not in answer_codes()]
    if not codes:
        return report
    ids = _edited_items(store, groups)
    if on_start:
        on_start(len(ids))
    for start in range(0, len(ids), BATCH):
        batch = ids[start:start + BATCH]
        # measured outside the write transaction (files and SSIM take long), written in one transaction
        with store.session() as session:
            results = {item_id: _rechecked(session, session.get(Item, item_id), codes, report) for item_id in batch}
        with store.write() as session:
            for item_id, (read, checks) in results.items():
                _write_checks(session, session.get(Item, item_id), read, checks, codes, report)
        if on_batch:
            on_batch(len(batch))
    return report


def _rechecked(session: Any, item: Optional[Item], codes: Sequence[str],
               report: EditCheckReport) -> tuple[dict, dict[str, list]]:
    """The item's candidate sets as read, and each set's checks recomputed ({} when there is nothing to do)."""
    if item is None or item.status == REJECTED:
        return {}, {}
    data = item.data or {}
    original = _original_path(session, item)
    if original is None or not original.is_file():
        report.missing += sum(len(data.get(key) or {}) for key, _ in CANDIDATE_SETS)
        return {}, {}  # nothing to compare with: the stored results stay
    read, checks = {}, {}
    for candidates_key, checks_key in CANDIDATE_SETS:
        candidates = data.get(candidates_key) or {}
        if candidates:
            paths = _image_paths(session, [c.get("image", "") for c in candidates.values()])
            read[candidates_key] = candidates
            checks[checks_key] = recheck_candidates(original, candidates, data.get(checks_key) or [], paths, codes,
                                                    report)
    return read, checks


def _write_checks(session: Any, item: Optional[Item], read: dict, checks: dict[str, list], codes: Sequence[str],
                  report: EditCheckReport) -> None:
    """Store CHECKS unless the item's candidates changed since they were READ (a `generate edits` run meanwhile
    ranks them itself); an unchanged ranking is not written again."""
    if item is None or not checks:
        return
    data = dict(item.data or {})
    if any(data.get(key) != candidates for key, candidates in read.items()):
        return
    report.items += 1
    if all(data.get(key) == value for key, value in checks.items()):
        return
    now = utcnow()
    item.data, item.updated_at = {**data, **checks}, now
    session.add(item)
    # in the item's history like the other checks' runs ("edit_checks", not "checks": a release's checks_passed
    # names the text checks only)
    session.add(ItemEvent(item_id=item.id, stage=STAGE, from_status=item.status, to_status=item.status, created_at=now,
                          detail={"edit_checks": list(codes), "cftools_version": __version__,
                                  "ranking": {key: [c["k"] for c in value] for key, value in checks.items()}}))


# ---------------------------------------------------------------- conditions that repeat


def normalise_condition(text: str) -> str:
    """Lower case, punctuation dropped, whitespace collapsed."""
    dropped = text.lower().translate(str.maketrans({c: " " for c in string.punctuation + "“”‘’"}))
    return re.sub(r"\s+", " ", dropped).strip()


def repeated_conditions(conditions: dict[int, tuple[str, str]],
                        similarity: int = CONDITION_SIMILARITY) -> dict[int, list[str]]:
    """Item id -> keys of the other items whose condition is the same (normalised) or near-identical.
    CONDITIONS: item id -> (key, condition)."""
    from rapidfuzz import fuzz, process

    by_text: dict[str, list[int]] = defaultdict(list)
    for item_id, (_, condition) in conditions.items():
        normalised = normalise_condition(condition)
        if normalised:
            by_text[normalised].append(item_id)
    texts = list(by_text)
    same: dict[int, set[int]] = defaultdict(set)
    for i, text in enumerate(texts):
        near = [texts[j] for _, _, j in process.extract(text, texts, scorer=fuzz.token_sort_ratio,
                                                         score_cutoff=similarity, limit=None)]
        group = [item_id for other in near for item_id in by_text[other]]
        for item_id in by_text[text]:
            same[item_id].update(g for g in group if g != item_id)
    return {item_id: sorted(conditions[o][0] for o in others) for item_id, others in same.items() if others}


def _condition(data: Any) -> str:
    edit = data.get("edit") if isinstance(data, dict) else None
    return str(edit.get("condition") or "") if isinstance(edit, dict) else ""


def _condition_reason(condition: str, others: list[str]) -> str:
    named = ", ".join(others[:NAMED]) + (f" and {len(others) - NAMED} more" if len(others) > NAMED else "")
    return f"the edit condition {condition!r} repeats that of item(s) {named}"


def run_condition_check(store: Store, groups: Sequence[str] = ()) -> EditCheckReport:
    """Flag every item whose edit condition repeats another's (compared with all items); replace the old flags."""
    report = EditCheckReport()
    with store.session() as session:
        rows = session.execute(select(Item.id, Item.key, Item.group, Item.data).where(Item.status != REJECTED)
                               .order_by(Item.id)).all()
    conditions = {item_id: (key, _condition(data)) for item_id, key, _, data in rows if _condition(data)}
    in_scope = [item_id for item_id, _, group, _ in rows if item_id in conditions and (not groups or group in groups)]
    repeats = repeated_conditions(conditions)
    now = utcnow()
    for start in range(0, len(in_scope), BATCH * 5):
        batch = in_scope[start:start + BATCH * 5]
        with store.write() as session:
            session.execute(delete(CheckFlag).where(CheckFlag.item_id.in_(batch), CheckFlag.code == CONDITION_REPEATED))
            store.insert_ignore(session, CheckFlag.__table__, [
                {"item_id": i, "code": CONDITION_REPEATED, "reason": _condition_reason(conditions[i][1], repeats[i]),
                 "created_at": now} for i in batch if i in repeats])
    report.items = len(in_scope)
    report.applied[CONDITION_REPEATED] = len(in_scope)
    report.flagged[CONDITION_REPEATED] = sum(1 for i in in_scope if i in repeats)
    return report


def run_edit_checks(store: Store, codes: Sequence[str], groups: Sequence[str] = (), *, only: bool = False,
                    on_start: Optional[Callable[[int], None]] = None,
                    on_batch: Optional[Callable[[int], None]] = None) -> EditCheckReport:
    """Run the edit checks named in CODES. ONLY: the codes were asked for by name (`--only`), so a check that
    cannot run here says so instead of keeping its stored results silently."""
    asked = [c for c in codes if c in answer_codes()]
    if only and asked:
        raise CftoolsError(f"{', '.join(asked)} needs an answerer",
                           hint=Hint("{message}: run `cftools generate edits {answerer} MODEL` (cftools check keeps "
                                     "its stored results)", answerer="--answerer"))
    report = run_image_checks(store, codes, groups, on_start, on_batch)
    if CONDITION_REPEATED in codes:
        condition = run_condition_check(store, groups)
        report.applied.update(condition.applied)
        report.flagged.update(condition.flagged)
    return report
