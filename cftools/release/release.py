"""The release being written: one value, built once by export, that every writer takes (`write(release)`): the
native records, Parquet and card, the peer formats, croissant.json, browse.html and the manifest; and the
agreement of its items, which the card and croissant.json both report."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from sqlalchemy import select

from cftools.models import Item
from cftools.store import Store, in_chunks


@dataclass(frozen=True)
class Release:
    """FOLDER (the hidden staging folder export writes into), the ITEMS it holds (`selection.ExportItem`s, kept
    by the format), its NAME, VERSION and FORMAT, SPLITS (name -> fraction), LICENSING
    (`licensing.Licensing`), REVISION and CHANGES (with `export --previous`: croissant.json's entries and the
    card's Markdown), ANALYSIS (the annotators' figures, or None), the WORKSPACE, the format's OPTIONS
    (`--mucr-schema`, ...), whether unverified items were asked for, the images copied, and PROGRESS (how the
    writers report their stages; not written)."""

    folder: Path
    items: Sequence[Any]
    name: str
    version: str
    format: str
    splits: dict[str, float]
    licensing: Any
    workspace: Any
    revision: Optional[dict[str, Any]] = None
    changes: str = ""
    analysis: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    include_unverified: bool = False
    n_images: int = 0
    progress: Optional[Callable[[str, int, int], None]] = None

    @property
    def records(self) -> list[dict[str, Any]]:
        return [e.record for e in self.items]

    @property
    def provenance(self) -> list[dict[str, Any]]:
        return [e.provenance for e in self.items]

    @property
    def data_as_of(self) -> str:
        """The last change to a released item (the release's date: never the clock's)."""
        return max((e.updated_at for e in self.items), default="")

    @cached_property
    def agreement(self) -> list[dict[str, Any]]:
        """Inter-annotator agreement of the released items (`agreement_rows`), read once per release."""
        return agreement_rows(self.workspace.store, [e.record["id"] for e in self.items])


def agreement_rows(store: Store, item_keys: Iterable[str]) -> list[dict[str, Any]]:
    """Inter-annotator agreement of the released items only (not of the whole store), per kind and question; and
    of the released kinds' own tasks (a MuCR selection is made on the pair before the released item exists)."""
    from cftools.annotate.rules import agreement, label_agreement
    from cftools.annotate.status import agreement_project_name, own_task_pairs, verify_ratings

    item_keys = list(item_keys)
    with store.session() as session:
        ratings = verify_ratings(session, item_keys)
        kinds = {kind for part in in_chunks(item_keys)
                 for kind in session.execute(select(Item.kind).where(Item.key.in_(part)).distinct()).scalars()}
        own = own_task_pairs(session)
    rows = []
    for kind in sorted(ratings):
        for question, s in agreement(ratings[kind]).items():
            if s["n_items"]:
                rows.append({"project": agreement_project_name(kind), "question": question, **s})
    for name, pairs in sorted(own.items()):
        if name.split(" ", 1)[0] in kinds:
            rows += [{"project": name, "question": question, "n_items": s["n_pairs"], "krippendorff_alpha": None, **s}
                     for question, s in label_agreement(pairs).items()]
    return rows
