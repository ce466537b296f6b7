"""`annotate push --flagged-sample N [--seed S]`: a seeded sample of flagged drafts goes to people as measuring tasks,
so that each check's precision can be measured against people (`cftools.checks.calibration`).

A flagged draft is an item held in `draft` by a check's flag that no person waived (`cftools flags waive`). Each drawn
draft goes to one person, the least loaded (nobody paused), as a verification task in their verification project:
laid out like every other task there and blind to the flags (its `check_flags` shows "none", as an unflagged item's
does). `annotate pull` stores the judgment as a `TaskOutcome` of role `measure` (`given_ok` False: the person rejects
the draft); it never decides the item, whose status and flags stay as they are.

The sample is the flagged drafts in the order of a hash of the seed and each item's key: the same store and seed give
the same sample, a draft's place does not move as other drafts come and go, and N is a total: a rerun with the same
N adds nothing, a larger N adds the difference (drafts measured before count toward it)."""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

from sqlalchemy import exists, select

from cftools.annotate.assign import Sender, choose_people, current_load
from cftools.annotate.label_studio import LabelStudioError, server_settings
from cftools.annotate.pauses import paused_people
from cftools.annotate.projects import DELETED
from cftools.annotate.purpose import Purpose
from cftools.annotate.push import resume
from cftools.annotate.separation import refuse_document_root, verify_separation
from cftools.annotate.servers import Servers
from cftools.annotate.task_import import PushOptions, PushReport, PushRun
from cftools.checks.edits import edit_codes
from cftools.errors import CftoolsError, Hint
from cftools.flags import waived_codes
from cftools.judgments import MEASURE, VERIFY
from cftools.kinds import get_kind
from cftools.models import DRAFT, AnnotationTask, CheckFlag, Item
from cftools.store import Store
from cftools.workspace import Workspace


@dataclass
class FlaggedSampleReport:
    seed: int
    sample: int  # the N asked for: how many flagged drafts are to be measured in all
    flagged: int = 0  # flagged drafts (held by a flag no one waived)
    measured_before: int = 0  # of the drawn drafts, those measured by an earlier push
    pushed: int = 0
    items: list[str] = field(default_factory=list)  # the keys pushed now
    by_kind: dict[str, int] = field(default_factory=dict)
    assigned: dict[str, int] = field(default_factory=dict)
    reconciled: int = 0  # tasks a killed push imported but did not record, linked first
    skipped_no_image: int = 0  # drawn drafts left out: no image (--allow-missing-images pushes them)
    skipped_outside_root: int = 0  # drawn drafts left out: image outside the document root

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def flagged_drafts(store: Store, kind: Optional[str] = None) -> list[Item]:
    """The drafts (of KIND) that a check's flag holds: a flag of a text check whose code the item has not waived."""
    held_by = exists().where(CheckFlag.item_id == Item.id, CheckFlag.code.not_in(edit_codes()))
    query = select(Item).where(Item.status == DRAFT, held_by)
    if kind is not None:
        query = query.where(Item.kind == kind)
    with store.session() as session:
        items = list(session.execute(query).scalars())
        codes: dict[int, set[str]] = defaultdict(set)
        for item_id, code in session.execute(select(CheckFlag.item_id, CheckFlag.code).where(
                CheckFlag.item_id.in_(select(Item.id).where(Item.status == DRAFT)))):
            codes[item_id].add(code)
        session.expunge_all()
    ignored = set(edit_codes())
    return [item for item in items if codes[item.id] - ignored - waived_codes(item.data)]


def sample_order(items: list[Item], seed: int) -> list[Item]:
    """ITEMS in the order SEED gives them: by a hash of the seed and the item's key (stable as items come and go)."""
    return sorted(items, key=lambda item: hashlib.sha256(f"{seed}:{item.key}".encode()).hexdigest())


def measured_items(store: Store) -> set[int]:
    """Items with a measuring task on record (any state but deleted on the server)."""
    with store.session() as session:
        return set(session.execute(select(AnnotationTask.item_id).where(
            AnnotationTask.purpose == MEASURE, AnnotationTask.state != DELETED)).scalars())


def flagged_sample(store: Store, sample: int, seed: int, kind: Optional[str] = None) -> tuple[list[Item], int, int]:
    """(the drawn drafts not measured yet, how many flagged drafts there are, how many drawn were measured before)."""
    drafts = flagged_drafts(store, kind)
    drawn = sample_order(drafts, seed)[:sample]
    measured = measured_items(store)
    return [item for item in drawn if item.id not in measured], len(drafts), sum(i.id in measured for i in drawn)


def push_flagged_sample(workspace: Workspace, sample: int, seed: int = 0, kind: Optional[str] = None,
                        options: PushOptions = PushOptions()) -> FlaggedSampleReport:
    """Send SAMPLE flagged drafts (of KIND, else of every kind), drawn by SEED, to people as measuring tasks; OPTIONS:
    how images go (data_uri, allow_missing_images)."""
    settings = server_settings(workspace)
    if not settings.configured:
        raise LabelStudioError(settings.how_to_configure())
    if not settings.assigns:
        raise CftoolsError("a sample of flagged drafts needs [label_studio] annotators (or people tables): a "
                           "measuring task goes to one named person",
                           hint=Hint("{sample} needs [label_studio] annotators (or people tables): a measuring task "
                                     "goes to one named person", sample="--flagged-sample"))
    if kind is not None:
        get_kind(kind)  # an unknown kind is an error before anything is sent
    refuse_document_root(workspace)
    store = workspace.store
    report = FlaggedSampleReport(seed, sample)
    servers = Servers(settings)
    try:
        servers.check()
        verify_separation(workspace, settings, servers, "push")
        sender = Sender(workspace, servers, settings, options.data_uri, options.allow_missing_images)
        kinds = [kind] if kind else sorted({item.kind for item in flagged_drafts(store)})
        for each in kinds:  # a killed push's measuring tasks are linked before anything is drawn
            report.reconciled += resume(PushRun(workspace, servers, settings, each, Purpose(VERIFY), PushOptions()), sender)
        items, report.flagged, report.measured_before = flagged_sample(store, sample, seed, kind)
        wanted = assign_measurers(store, settings.annotators, items)
        by_kind: dict[str, list] = defaultdict(list)
        for entry in wanted:
            by_kind[entry[0].kind].append(entry)
        for each, entries in sorted(by_kind.items()):
            sent = PushReport(purpose=MEASURE, kind=each)
            report.by_kind[each] = sender.send(each, entries, sent)
            report.pushed += report.by_kind[each]
            report.skipped_no_image += sent.skipped_no_image
            report.skipped_outside_root += sent.skipped_outside_root
        linked = measured_items(store)  # what was sent, as the store recorded it (an image-less draft is not)
        sent_now = [(item, person) for item, _, person in wanted if item.id in linked]
        report.items = sorted(item.key for item, _ in sent_now)
        report.assigned = dict(sorted(Counter(person for _, person in sent_now).items()))
    finally:
        servers.close()
    return report


def assign_measurers(store: Store, annotators: tuple[str, ...], items: list[Item]) -> list[tuple[Item, Purpose, str]]:
    """(item, MEASURE, person) for each of ITEMS: one person each, the least loaded, nobody paused."""
    load, paused = current_load(store), set(paused_people(store))
    return [(item, Purpose(MEASURE), choose_people(annotators, load, 1, paused, f"item {item.key}")[0]) for item in items]
