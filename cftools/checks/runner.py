"""`cftools check`: run the checks on draft items, store their flags, move clean items to `checked`.

Nothing is deleted. Each flag is (item, code) unique with a reason; a re-checked item's flags of the
checks that ran are replaced, so a fixed problem's flag goes away. Items are written in batches, each
in one transaction: a killed run keeps the batches it finished and the next run does the rest.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Optional, Sequence

from sqlalchemy import delete, exists, func, select, update

from cftools import __version__
from cftools.checks.duplicates import DEFAULT_SIMILARITY, DuplicateFinder, entry_for
from cftools.checks.edits import edit_codes, edit_scopes, run_edit_checks
from cftools.checks.embeddings import load_embedder
from cftools.item_view import ItemView
from cftools.findings import Flag, Note
from cftools.kinds import all_kinds, get_kind
from cftools.errors import CftoolsError
from cftools.models import CHECKED, DRAFT, REJECTED, CheckFlag, Item, ItemEvent, SourceQuestion, utcnow
from cftools.flags import waived_codes
from cftools.store import Store

DUPLICATE = "duplicate"
DUPLICATE_SCOPE = "every item with an image"
BATCH = 500
STAGE = "check"


class Progress:
    """What the checks tell about their progress; the command shows it with rich."""

    def stage(self, name: str, total: int) -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def waiting(self, what: str) -> AbstractContextManager:
        """A step of unknown length (the embedding model loading)."""
        return nullcontext()


@dataclass
class ItemResult:
    item: ItemView
    status: str
    flags: list[Flag] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    kept: list[Flag] = field(default_factory=list)  # stored flags of checks that did not run this time
    rechecked: bool = True  # False: a flagged draft this run left as it was, shown with its stored flags

    def as_dict(self) -> dict:
        """The `check --json` line of this item."""
        return {
            "id": self.item.id, "key": self.item.key, "image": self.item.image_name, "group": self.item.group,
            "status": self.status,
            "flags": [{"code": f.code, "reason": f.reason} for f in sorted(self.flags + self.kept, key=_flag_order)],
            "notes": [{"code": n.code, "note": n.text} for n in self.notes], "checks": self.checks,
            "rechecked": self.rechecked,
        }


def check_scopes() -> dict[str, str]:
    """Every check code of the registered kinds with the items it applies to (in the kinds' order), then duplicate."""
    scopes: dict[str, list[str]] = {}
    for name, kind in sorted(all_kinds().items()):
        for check in kind.hooks.check.checks:
            scopes.setdefault(check.code, []).append(f"{name}: {check.scope}")
    return {code: "; ".join(parts) for code, parts in scopes.items()} | {DUPLICATE: DUPLICATE_SCOPE} | edit_scopes()


def text_codes(codes: Sequence[str]) -> list[str]:
    """CODES less the edit checks' (`cftools.checks.edits`): the checks whose flags decide an item's status."""
    edits = set(edit_codes())
    return [c for c in codes if c not in edits]


def check_codes() -> list[str]:
    return list(check_scopes())


def _flag_order(flag: Flag) -> int:
    codes = check_codes()
    return codes.index(flag.code) if flag.code in codes else len(codes)


@dataclass
class CheckReport:
    codes: list[str]
    promote: bool
    candidates: int = 0
    moved_to_checked: int = 0
    flagged: int = 0  # re-checked items that stay draft for their flags
    moved_despite_waived: int = 0  # moved to checked: every flag they hold was waived by a person
    left_as_flagged: int = 0  # flagged drafts not re-checked (without --recheck)
    gone: int = 0  # items that left `draft` while the checks ran
    applied: Counter = field(default_factory=Counter)
    flags: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)
    duplicate_mode: str = ""
    embedded: int = 0  # questions embedded for the duplicate check
    edited_items: int = 0  # items whose stored edit candidates were checked again
    edit_unmeasured: int = 0  # edit candidates not checked again (no file, or no original): stored results kept

    def as_dict(self) -> dict:
        return {
            "codes": self.codes, "promote": self.promote, "candidates": self.candidates,
            "moved_to_checked": self.moved_to_checked, "flagged": self.flagged,
            "moved_despite_waived": self.moved_despite_waived,
            "left_as_flagged": self.left_as_flagged, "gone": self.gone,
            "per_check": {code: {"applied": self.applied[code], "flagged": self.flags[code],
                                 "undecided": self.notes[code]} for code in self.codes},
            "duplicate_mode": self.duplicate_mode, "embedded": self.embedded, "edited_items": self.edited_items,
            "edit_unmeasured": self.edit_unmeasured,
        }


# ---------------------------------------------------------------- reading items


def _image_key(image_id: Optional[int], image_ref: Optional[str]) -> Optional[str]:
    if image_id is not None:
        return f"image:{image_id}"
    return f"name:{image_ref}" if image_ref else None


def _views(rows: Iterable) -> list[ItemView]:
    views = []
    for item, s_question, s_answer, image_ref, image_id in rows:
        if image_ref is None and isinstance(item.data, dict) and isinstance(item.data.get("image"), str):
            image_ref = item.data["image"]
        views.append(ItemView(
            id=item.id, key=item.key, kind=item.kind, group=item.group, status=item.status,
            question=item.question, answer=item.answer, source_question=s_question, source_answer=s_answer,
            image_name=image_ref, image_key=_image_key(image_id, image_ref), data=item.data))
    return views


def _item_query():
    return (select(Item, SourceQuestion.question, SourceQuestion.answer, SourceQuestion.image_ref,
                   SourceQuestion.image_id)
            .outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id))


def _flagged_and_unchanged():
    """Items with flags and no edit since their last check: a run without --recheck leaves them be."""
    text_flag = (CheckFlag.item_id == Item.id) & CheckFlag.code.not_in(edit_codes())  # edit flags never hold it
    last_flag = select(func.max(CheckFlag.created_at)).where(text_flag).scalar_subquery()
    return exists().where(text_flag) & ~(Item.updated_at > last_flag)


def select_candidates(store: Store, groups: Sequence[str] = (), recheck: bool = False,
                      limit: Optional[int] = None) -> tuple[list[ItemView], int]:
    """Drafts to check and how many flagged drafts were left out. Without RECHECK: drafts without flags,
    and flagged drafts edited since they were checked (their flags are stale)."""
    flagged = _flagged_and_unchanged()
    query = _item_query().where(Item.status == DRAFT).order_by(Item.id)
    if groups:
        query = query.where(Item.group.in_(list(groups)))
    with store.session() as session:
        left_out = 0
        if not recheck:
            count = select(func.count()).select_from(Item).where(Item.status == DRAFT, flagged)
            if groups:
                count = count.where(Item.group.in_(list(groups)))
            left_out = session.execute(count).scalar_one()
            query = query.where(~flagged)
        if limit is not None:
            query = query.limit(limit)
        return _views(session.execute(query).all()), left_out


def flagged_drafts_left(store: Store, groups: Sequence[str] = ()) -> Iterator[ItemResult]:
    """The flagged drafts a run without --recheck does not check, each with its stored flags."""
    query = _item_query().where(Item.status == DRAFT, _flagged_and_unchanged()).order_by(Item.id)
    if groups:
        query = query.where(Item.group.in_(list(groups)))
    with store.session() as session:
        views = _views(session.execute(query).all())
    for start in range(0, len(views), BATCH):
        batch = views[start:start + BATCH]
        stored: dict[int, list[Flag]] = defaultdict(list)
        with store.session() as session:
            for item_id, code, reason in session.execute(select(CheckFlag.item_id, CheckFlag.code, CheckFlag.reason)
                                                         .where(CheckFlag.item_id.in_([v.id for v in batch]))):
                stored[item_id].append(Flag(code, reason))
        for view in batch:
            yield ItemResult(item=view, status=view.status, kept=stored[view.id], rechecked=False)


def all_entries(store: Store):
    """Every item's duplicate-check entry (any status but rejected: a rejected item is in no release, so nothing
    repeats it; a redo that keeps its question and mends its answer is no duplicate)."""
    query = (select(Item.id, Item.key, Item.kind, Item.group, Item.status, Item.question, Item.answer, Item.data,
                    SourceQuestion.image_ref, SourceQuestion.image_id, SourceQuestion.question, SourceQuestion.answer)
             .outerjoin(SourceQuestion, SourceQuestion.id == Item.source_id).where(Item.status != REJECTED))
    with store.session() as session:
        for (id_, key, kind, group, status, question, answer, data, image_ref, image_id, source_question,
             source_answer) in session.execute(query):
            if image_ref is None and isinstance(data, dict) and isinstance(data.get("image"), str):
                image_ref = data["image"]
            view = ItemView(id=id_, key=key, kind=kind, group=group, status=status, question=question, answer=answer,
                            source_question=source_question, source_answer=source_answer,
                            image_name=image_ref, image_key=_image_key(image_id, image_ref))
            entry = entry_for(view)
            if entry is not None:
                yield entry


# ---------------------------------------------------------------- checking


def check_item(item: ItemView, codes: Sequence[str], duplicates: Optional[DuplicateFinder]) -> ItemResult:
    """Run the checks named in CODES that apply to ITEM (pure: reads and writes nothing)."""
    kind = get_kind(item.kind)
    if item.answer_style is None:
        item = replace(item, answer_style=kind.hooks.check.answer_style(item))
    result = ItemResult(item=item, status=item.status)
    for check in kind.hooks.check.checks:
        if check.code not in codes or not check.applies(item):
            continue
        result.checks.append(check.code)
        outcome = check.run(item)
        if isinstance(outcome, Flag):
            result.flags.append(outcome)
        elif isinstance(outcome, Note):
            result.notes.append(outcome)
    if duplicates is not None and DUPLICATE in codes:
        entry = entry_for(item)
        if entry is not None:
            result.checks.append(DUPLICATE)
            flag = duplicates.check(entry)
            if flag:
                result.flags.append(flag)
    return result


def write_results(store: Store, results: list[ItemResult], codes: Sequence[str], promote: bool) -> None:
    """Store one batch: replace the flags of the checks that ran, move clean items, record history."""
    if not results:
        return
    now = utcnow()
    ids = [r.item.id for r in results]
    with store.write() as session:
        status = dict(session.execute(select(Item.id, Item.status).where(Item.id.in_(ids))).all())
        live = [r for r in results if status.get(r.item.id) == DRAFT]
        for r in results:
            if status.get(r.item.id) != DRAFT:
                r.status = status.get(r.item.id, "deleted")
        live_ids = [r.item.id for r in live]
        old: dict[int, dict[str, str]] = defaultdict(dict)
        for item_id, code, reason in session.execute(
                select(CheckFlag.item_id, CheckFlag.code, CheckFlag.reason).where(CheckFlag.item_id.in_(live_ids))):
            old[item_id][code] = reason
        session.execute(delete(CheckFlag).where(CheckFlag.item_id.in_(live_ids), CheckFlag.code.in_(list(codes))))
        store.insert_ignore(session, CheckFlag.__table__, [
            {"item_id": r.item.id, "code": f.code, "reason": f.reason, "created_at": now} for r in live for f in r.flags])
        promoted = []
        for r in live:
            before = {c: why for c, why in old[r.item.id].items() if c in codes}
            after = {f.code: f.reason for f in r.flags}
            r.kept = [Flag(c, why) for c, why in old[r.item.id].items() if c not in codes]
            # a flag a person waived (`cftools flags waive`) no longer blocks the item, nor does an edit check's
            remaining = set(text_codes([*after, *(f.code for f in r.kept)])) - waived_codes(r.item.data)
            to_status = CHECKED if promote and not remaining else DRAFT
            if to_status == CHECKED:
                promoted.append(r.item.id)
            r.status = to_status
            if to_status != DRAFT or before != after:
                session.add(ItemEvent(item_id=r.item.id, stage=STAGE, from_status=DRAFT, to_status=to_status,
                                      detail={"checks": r.checks, "flags": sorted(after),
                                              "cftools_version": __version__,
                                              "notes": [f"{n.code}: {n.text}" for n in r.notes]},
                                      created_at=now))
        if promoted:
            session.execute(update(Item).where(Item.id.in_(promoted), Item.status == DRAFT)
                            .values(status=CHECKED, updated_at=now))


@dataclass(frozen=True)
class CheckOptions:
    """Which drafts `check` looks at, and how it finds duplicates (the command's options)."""

    recheck: bool = False  # check drafts already checked with these codes again
    groups: tuple[str, ...] = ()
    limit: Optional[int] = None
    use_embeddings: bool = True
    similarity: float = DEFAULT_SIMILARITY


def run_checks(store: Store, codes: Optional[Sequence[str]] = None, *, options: CheckOptions = CheckOptions(),
               progress: Optional[Progress] = None, on_result: Optional[Callable[[ItemResult], None]] = None,
               config: Optional[dict] = None) -> CheckReport:
    """Check drafts. With all checks, clean items move to `checked`; with some (CODES), none moves. CONFIG is the
    workspace's configuration, for kinds whose checks depend on it (`CheckHooks.prepare_checks`)."""
    groups = options.groups
    for kind in all_kinds().values():
        kind.hooks.check.prepare_checks(config or {})
        kind.hooks.check.use_store(store)
    known = check_codes()
    unknown = [c for c in codes or () if c not in known]
    if unknown:
        raise CftoolsError(f"unknown check code(s) {', '.join(unknown)}; known: {', '.join(known)}")
    promote = not codes or set(codes) == set(known)
    only = bool(codes)
    codes = known if not codes else [c for c in known if c in codes]
    progress = progress or Progress()
    report = CheckReport(codes=codes, promote=promote)
    _run_edit_checks(store, codes, groups, only, report, progress)
    codes = text_codes(codes)
    if not codes:
        return report
    candidates, report.left_as_flagged = select_candidates(store, groups, options.recheck or not promote,
                                                           options.limit)
    report.candidates = len(candidates)

    duplicates = None
    if DUPLICATE in codes and candidates:
        duplicates, report.duplicate_mode = _duplicate_finder(store, candidates, options, progress)
        report.embedded = len(duplicates.vectors)

    progress.stage("checking", len(candidates))
    for start in range(0, len(candidates), BATCH):
        batch = [check_item(item, codes, duplicates) for item in candidates[start:start + BATCH]]
        write_results(store, batch, codes, promote)
        for r in batch:
            _count(report, r)
            if on_result:
                on_result(r)
        progress.advance(len(batch))
    if on_result and report.left_as_flagged:
        # whoever follows the results (check --json) is told the current flags of every draft asked for
        for result in flagged_drafts_left(store, groups):
            on_result(result)
    return report


def _run_edit_checks(store: Store, codes: Sequence[str], groups: Sequence[str], only: bool, report: CheckReport,
                     progress: Progress) -> None:
    """The edit checks asked for (over items of any status: they rank candidates, the item's status is left)."""
    wanted = [c for c in codes if c in edit_codes()]
    if not wanted:
        return
    done = run_edit_checks(store, wanted, groups, only=only,
                           on_start=lambda total: progress.stage("checking edit candidates", total),
                           on_batch=progress.advance)
    report.edited_items = done.items
    report.edit_unmeasured = done.missing
    report.applied.update(done.applied)
    report.flags.update(done.flagged)


def _duplicate_finder(store: Store, candidates: list[ItemView], options: CheckOptions,
                      progress: Progress) -> tuple[DuplicateFinder, str]:
    finder = DuplicateFinder(all_entries(store), similarity=options.similarity)
    entries = [e for e in (entry_for(c) for c in candidates) if e is not None]
    if not options.use_embeddings:
        return finder, "normalised text only (embeddings turned off)"
    to_embed = finder.to_embed(entries)
    if not to_embed:
        return finder, "normalised text (no two items on one image hold the same numbers: nothing to embed)"
    with progress.waiting("loading the embedding model"):
        embedder, message = load_embedder()
    if embedder is None:
        return finder, f"normalised text only: {message}"
    finder.embedder = embedder
    progress.stage("embedding questions", len(to_embed))
    finder.embed(to_embed, on_batch=progress.advance)
    return finder, f"normalised text and {message}, cosine >= {options.similarity}"


def _count(report: CheckReport, result: ItemResult) -> None:
    if result.status == CHECKED:
        report.moved_to_checked += 1
        # its flags are all waived: it moved on, so it is not among the flagged that stay draft
        report.moved_despite_waived += bool(result.flags)
    elif result.status != DRAFT:
        report.gone += 1
        return
    elif result.flags:
        report.flagged += 1
    report.applied.update(result.checks)
    report.flags.update({f.code for f in result.flags})
    report.notes.update({n.code for n in result.notes})
