"""The `duplicate` check: the same or nearly the same counterfactual question on the same image.

Two items are compared only when they refer to the same image: the stored image (images are stored once per SHA-256,
so two files of the same bytes are one image), else the same file name. The same question on another image is not a
duplicate, even with the same answers: a common source question ("How many people are there?") rewritten for many
images gives the same counterfactual question and answer on each, and each is an item of its own. The later
one is flagged: an item is a duplicate of another that is further along the flow
(not a draft) or of a draft created before it (a lower id), so one of a pair always stays clean.

- *Same*: the questions' normal forms are equal (lowercase, no punctuation or articles, number
  words as digits), which also catches an exact repeat of an item.
- *Nearly the same*: the cosine similarity of their all-MiniLM-L6-v2 embeddings reaches the
  threshold and they hold the same numbers ("if 2 dogs were added" and "if 3 dogs were added" are
  different questions, however close their embeddings).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from cftools.checks.embeddings import Embedder
from cftools.answers import normalize_answer
from cftools.item_view import ItemView
from cftools.checks.presupposition import strip_options
from cftools.findings import Flag
from cftools.models import DRAFT

if TYPE_CHECKING:
    import numpy as np  # imported where vectors are compared, not at `cftools --help` (bench/bench_startup.py)

DEFAULT_SIMILARITY = 0.93


def normal_question(question: str) -> str:
    """The question's normal form for comparing texts (VQA answer normalisation, options left out)."""
    return normalize_answer(strip_options(question))



@dataclass(frozen=True)
class Entry:
    """One item as the duplicate check sees it."""

    id: int
    status: str
    image_key: str
    question: str
    normal: str

    @property
    def numbers(self) -> tuple[str, ...]:
        return tuple(sorted(re.findall(r"\d+(?:\.\d+)?", self.normal)))


def entry_for(item: ItemView) -> Optional[Entry]:
    if not item.image_key or not item.question:
        return None
    return Entry(item.id, item.status, item.image_key, item.question, normal_question(item.question))


def precedes(other: Entry, item: Entry) -> bool:
    """Whether OTHER came first, so that ITEM is the duplicate."""
    return other.id != item.id and (other.status != DRAFT or other.id < item.id)


class DuplicateFinder:
    """Holds every item's entry, grouped by image (the only items compared), and (optionally) their embeddings."""

    def __init__(self, entries: Iterable[Entry], embedder: Optional[Embedder] = None,
                 similarity: float = DEFAULT_SIMILARITY) -> None:
        self.by_image: dict[str, list[Entry]] = defaultdict(list)
        for entry in entries:
            self.by_image[entry.image_key].append(entry)
        self.embedder = embedder
        self.similarity = similarity
        self.vectors: dict[int, np.ndarray] = {}

    def to_embed(self, candidates: Iterable[Entry]) -> list[Entry]:
        """The entries whose embeddings the candidates need: those sharing an image and the same numbers
        with another item (embeddings decide nothing for other pairs)."""
        wanted: dict[int, Entry] = {}
        for key in sorted({c.image_key for c in candidates}):
            buckets: dict[tuple[str, ...], list[Entry]] = defaultdict(list)
            for entry in self.by_image.get(key, ()):
                buckets[entry.numbers].append(entry)
            for bucket in buckets.values():
                if len(bucket) > 1:
                    wanted.update((e.id, e) for e in bucket if e.id not in self.vectors)
        return list(wanted.values())

    def embed(self, entries: list[Entry], on_batch: Optional[Callable[[int], None]] = None) -> None:
        if self.embedder is None or not entries:
            return
        texts = [strip_options(e.question) for e in entries]
        for entry, vector in zip(entries, self.embedder.encode(texts, on_batch=on_batch)):
            self.vectors[entry.id] = vector

    def check(self, entry: Entry) -> Optional[Flag]:
        others = [o for o in self.by_image.get(entry.image_key, ()) if precedes(o, entry)]
        for other in sorted(others, key=lambda o: o.id):
            if other.normal == entry.normal:
                return Flag("duplicate", f"the same question as item {other.id} on the same image "
                                         f"('{strip_options(other.question)}')")
        mine = self.vectors.get(entry.id)
        if mine is None:
            return None
        import numpy

        best: tuple[float, Optional[Entry]] = (0.0, None)
        for other in others:
            theirs = self.vectors.get(other.id)
            if theirs is None or other.numbers != entry.numbers:
                continue
            cosine = float(numpy.dot(mine, theirs))
            if cosine >= self.similarity and cosine > best[0]:
                best = (cosine, other)
        if best[1] is not None:
            return Flag("duplicate", f"nearly the same question as item {best[1].id} on the same image "
                                     f"(cosine similarity {best[0]:.3f}): '{strip_options(best[1].question)}'")
        return None
