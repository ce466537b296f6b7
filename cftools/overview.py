"""What the store holds: counts for `status`, one item's full record for `show`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session

from cftools.models import CheckFlag, Generation, Image, Item, ItemEvent, Judgment, AnnotationTask, SourceQuestion
from cftools.store import Store


def _counts(session: Session, column) -> dict[str, int]:  # noqa: ANN001
    rows = session.execute(select(column, func.count()).group_by(column).order_by(column)).all()
    return {str(name): n for name, n in rows}


def store_counts(store: Store) -> dict[str, Any]:
    """Totals and counts by status, group and source dataset (the `status --json` object)."""
    with store.session() as session:
        by_source = dict(session.execute(
            select(SourceQuestion.dataset, func.count(Item.id))
            .join(Item, Item.source_id == SourceQuestion.id).group_by(SourceQuestion.dataset)
            .order_by(SourceQuestion.dataset)).all())
        no_source = session.execute(select(func.count()).select_from(Item).where(Item.source_id.is_(None))).scalar_one()
        if no_source:
            by_source["(none)"] = no_source
        return {
            "items": session.execute(select(func.count()).select_from(Item)).scalar_one(),
            "sources": session.execute(select(func.count()).select_from(SourceQuestion)).scalar_one(),
            "images": session.execute(select(func.count()).select_from(Image)).scalar_one(),
            "sources_missing_image": session.execute(
                select(func.count()).select_from(SourceQuestion).where(SourceQuestion.image_id.is_(None))).scalar_one(),
            "by_status": _counts(session, Item.status),
            "by_group": _counts(session, Item.group),
            "by_source": by_source,
            "sources_by_dataset": _counts(session, SourceQuestion.dataset),
            "sources_by_answer_type": _counts(session, SourceQuestion.answer_type),
        }


def item_detail(store: Store, item_id: int) -> dict[str, Any] | None:
    """One item with its source question, image, generation, flags, judgments and history."""
    with store.session() as session:
        item = session.get(Item, item_id)
        if item is None:
            return None
        source = session.get(SourceQuestion, item.source_id) if item.source_id else None
        image = session.get(Image, source.image_id) if source and source.image_id else None
        generation = session.get(Generation, item.generation_id) if item.generation_id else None
        flags = session.execute(select(CheckFlag).where(CheckFlag.item_id == item_id)).scalars().all()
        events = session.execute(select(ItemEvent).where(ItemEvent.item_id == item_id)
                                 .order_by(ItemEvent.created_at, ItemEvent.id)).scalars().all()
        judgments = session.execute(
            select(Judgment).join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
            .where(AnnotationTask.item_id == item_id).order_by(Judgment.id)).scalars().all()
        return {
            "item": item.model_dump(mode="json"),
            "source": source.model_dump(mode="json") if source else None,
            "image": image.model_dump(mode="json") if image else None,
            "generation": generation.model_dump(mode="json") if generation else None,
            "flags": [{"code": f.code, "reason": f.reason} for f in flags],
            "judgments": [j.model_dump(mode="json", exclude={"raw"}) for j in judgments],
            "history": [e.model_dump(mode="json") for e in events],
        }
