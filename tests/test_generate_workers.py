"""Many workers on one store: a job another worker finishes while this one is choosing its jobs is seen done and
not done again (docs/generate.md, "Many workers"), for `generate cues` and `generate pairs` too. The other worker
is played deterministically: it finishes the job right after this worker's selection has read the store, before
this worker registers its claims (the window `selection_start` exists to close)."""

from __future__ import annotations

from sqlalchemy import select

from fixtures_llm import stub_backend
from test_cfmm import draft_reply, images_and_facts  # noqa: F401  (images_and_facts: a fixture)

from cftools.generate.llm_task import LLMRun
from cftools.kinds.cfmm import generate as cfmm_generate
from cftools.kinds.mucr import cues as mucr_cues
from cftools.models import DRAFT, Item, WorkClaim, utcnow


def finished_elsewhere(store, generator: str, key: str) -> None:
    """Another worker's finish of KEY, committed now."""
    with store.write() as session:
        session.add(WorkClaim(generator=generator, key=key, state="done", worker="elsewhere:1:x",
                              finished_at=utcnow()))


def chat_calls(stub) -> int:
    return sum(1 for r in stub.received if r["path"].endswith("/chat/completions"))


def test_cues_finished_by_another_worker_during_the_selection_are_not_drafted_again(workspace, stub, monkeypatch):
    store = workspace.store
    with store.write() as session:
        session.add(Item(key="mucr:pair-1:photograph", kind="mucr", group="g", status=DRAFT, origin="generated",
                         question="rain -> wet street", answer="",
                         data={"cause_image": "sha256:a", "effect_image": "sha256:b", "cause_caption": "rain",
                               "effect_caption": "wet street"}))
    selected = mucr_cues.pairs_without_cues

    def and_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        found = selected(*args, **kwargs)
        with store.write() as session:  # the other worker stores its cues ...
            item = session.execute(select(Item)).scalar_one()
            item.data = {**item.data, "cue": "rain", "false_cues": ["a", "b", "c"], "explanation_draft": "x"}
            session.add(item)
        finished_elsewhere(store, "cues", f"item {found[0].key}")  # ... and finishes its claim
        return found

    monkeypatch.setattr(mucr_cues, "pairs_without_cues", and_meanwhile)
    backend = stub_backend(stub)
    try:
        mucr_cues.draft_cues(store, backend, run=LLMRun(quiet=True))
    finally:
        backend.close()
    assert chat_calls(stub) == 0  # before: the finished claim was opened again and the cues asked for twice


def test_pairs_finished_by_another_worker_during_the_selection_are_not_drafted_again(images_and_facts, stub,  # noqa: F811
                                                                                     monkeypatch):
    store = images_and_facts.store
    stub.reply = draft_reply
    selected = cfmm_generate.select_slots

    def and_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        slots = selected(*args, **kwargs)
        for slot in slots:  # the other worker picked and drafted every slot just now
            finished_elsewhere(store, cfmm_generate.PICK, f"image {slot.image_id} slot {slot.slot}")
        return slots

    monkeypatch.setattr(cfmm_generate, "select_slots", and_meanwhile)
    backend = stub_backend(stub)
    try:
        report = cfmm_generate.generate_pairs(store, backend, run=LLMRun(quiet=True),
                                              quota=cfmm_generate.parse_quota("count,color"))
    finally:
        backend.close()
    assert chat_calls(stub) == 0, report  # before: every pick was asked for again
