"""A small store that has been through the whole funnel, for `cftools report`'s tests (and a later whole-loop test):
drafts by two generators (one a prompt variant), check flags (one waived), verification judgments by two people
(with Label Studio's lead_time, a comment that names a person's email), an adjudication, a rejected draft and its
redo, an ingested item still under review, a control item and a control task that must not count, a failed call without an item, and a
real native release of the accepted items (cftools' own export).

Judgments and decisions are written into the store the way `annotate pull` leaves them (tasks decided, item
events into accepted / rejected), each item's status the one the decision rules (`cftools.judgments.decide`) give
its judgments (checked as it is written), so the report reads what a real loop leaves."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import PIL.Image

PEOPLE = ("alice@example.com", "bob@example.com", "carol@example.com")
COMMENT = "two readings: ask carol@example.com, see /home/alice/notes.txt"
DAY = datetime(2026, 11, 20, 9, 0, tzinfo=timezone.utc)
LICENCE = "CC-BY-4.0"
PRICES = {"stub-a": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
          "stub-b": {"input_per_mtok": 3.0, "output_per_mtok": 6.0}}
TOKENS = (1000, 200)  # each call's prompt and completion tokens

# key -> (generator: "a", "b" or None (ingested), group, status, flags {code: waived}, judgments, extra)
# a judgment: (person, related, answer_correct, corrected, flags, comment, lead_time)
ITEMS = {
    "cvqa:f1": ("a", "numerical_direct", "accepted", {}, [
        (PEOPLE[0], True, True, None, [], None, 10.0), (PEOPLE[1], True, True, None, [], None, 20.0)], {}),
    "cvqa:f2": ("a", "numerical_direct", "accepted", {}, [
        (PEOPLE[0], True, False, "4", [], "it is four", 30.0), (PEOPLE[1], True, False, "4", [], None, 40.0)],
        {"proposed_answer": "3"}),
    "cvqa:f3": ("b", "numerical_direct", "rejected", {}, [
        (PEOPLE[0], False, False, None, ["ambiguous"], COMMENT, 5.0),
        (PEOPLE[1], False, False, None, ["ambiguous"], None, 7.0)], {}),
    "cvqa:f4": ("b", "numerical_indirect", "draft", {"arithmetic": False}, [], {"control_task": True, "edits": True}),
    "cvqa:f5": ("b", "numerical_indirect", "accepted", {"leakage": True}, [
        (PEOPLE[0], True, True, None, [], None, 11.0), (PEOPLE[1], True, False, None, [], None, 13.0)],
        {"adjudicated_by": PEOPLE[2]}),
    "cvqa:f6": (None, "boolean", "in_review", {}, [(PEOPLE[0], True, True, None, [], None, 3.0)], {}),
    "cvqa:f7": ("b", "numerical_direct", "accepted", {}, [
        (PEOPLE[0], True, True, None, [], None, 9.0), (PEOPLE[1], True, True, None, [], None, 8.0)],
        {"redo_of": "cvqa:f3"}),
}
GENERATORS = {"a": dict(generator="rewrite", backend="openai", model="stub-a", template_name="rewrite_numerical",
                        template_hash="a1" * 32, prompt_variant=None),
              "b": dict(generator="rewrite", backend="openai", model="stub-b", template_name="rewrite_numerical_terse",
                        template_hash="b2" * 32, prompt_variant="terse")}


def draw(path: Path, shade: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.new("RGB", (40, 30), (shade, 200 - shade, 90)).save(path)
    return path


def stock_funnel(workspace, folder: Path) -> dict[str, int]:
    """Write the funnel's store into WORKSPACE (images under FOLDER), export the accepted items; item ids by key."""
    from cftools.images import read_image_file, register_image
    from cftools.models import CheckFlag, Generation, Image, Item, SourceQuestion
    from sqlalchemy import select

    ids: dict[str, int] = {}
    with workspace.store.write() as session:
        for n, (key, (gen, group, status, flags, judgments, extra)) in enumerate(ITEMS.items()):
            image = read_image_file(draw(folder / f"img{n}.png", 20 * n))
            register_image(workspace.store, session, image)
            image_id = session.execute(select(Image.id).where(Image.sha256 == image.sha256)).scalar_one()
            source = SourceQuestion(dataset="vqav2:test", external_id=str(n), image_ref=f"img{n}.png",
                                    image_id=image_id, question=f"How many cups are there? ({n})", answer="2",
                                    answer_type="number")
            session.add(source)
            session.flush()
            generation_id = None
            if gen is not None:
                generation = Generation(source_id=source.id, group=group, prompt_tokens=TOKENS[0],
                                        completion_tokens=TOKENS[1], **GENERATORS[gen])
                session.add(generation)
                session.flush()
                generation_id = generation.id
            answer = "4" if extra.get("proposed_answer") else "3"
            item = Item(key=key, kind="cvqa", group=group, source_id=source.id, question=f"How many cups if {n}?",
                        answer=answer, proposed_answer=extra.get("proposed_answer"), status=status,
                        origin="generated" if gen else "ingested", generation_id=generation_id, dataset="vqav2:test",
                        redo_of=ids.get(extra.get("redo_of")),
                        data=item_data(flags, extra))
            session.add(item)
            session.flush()
            ids[key] = item.id
            for code in flags:
                session.add(CheckFlag(item_id=item.id, code=code, reason=f"{code} failed on {key}"))
            add_people(session, item, judgments, extra, n)
        # a control item (`annotate controls`): it measures people and is in no stage of the funnel
        session.add(Item(key="cvqa:control:1", kind="cvqa", group="boolean", question="Is the cup red?", answer="yes",
                         status="control", origin="ingested"))
        # a failed retry of generator a's first draft (no item points at it): its cost is still a's
        session.add(Generation(source_id=session.get(Item, ids["cvqa:f1"]).source_id, group="numerical_direct",
                               prompt_tokens=TOKENS[0], completion_tokens=0, error="parse error", **GENERATORS["a"]))
    export_accepted(workspace, folder)
    return ids


EDIT_MODEL = "/root/models/instruct-pix2pix"  # a local folder: the report names it by its name only


def item_data(flags: dict[str, bool], extra: dict) -> dict:
    data: dict = {"waived_flags": {code: {"by": "lead", "reason": "fine"} for code, waived in flags.items() if waived}}
    if extra.get("edits"):  # edited images (`generate edits`): their backend is the edit backend's row
        data["edit_candidates"] = {"0": {"image": "sha256:" + "c" * 64,
                                         "provenance": {"backend": "diffusers", "model": EDIT_MODEL}}}
    return data


def check_decision(item, judgments, extra) -> None:
    """The status written is the one the decision rules give these judgments (`cftools.judgments.decide`, as pull
    applies it; a disagreement goes to adjudication, whose accept settles it)."""
    from cftools.judgments import Answer, decide

    if len(judgments) < 2:
        return
    answers = [Answer(related=related, answer_correct=correct, corrected_answer=corrected, flags=list(flags),
                      comment=comment) for _, related, correct, corrected, flags, comment, _ in judgments[:2]]
    decision = decide(*answers)
    expected = "needs_adjudication" if extra.get("adjudicated_by") else item.status
    assert decision.status == expected, (item.key, decision)
    if item.proposed_answer is not None:
        assert decision.corrected_answer == item.answer, (item.key, decision)


def add_people(session, item, judgments, extra, n: int) -> None:
    from cftools.models import AnnotationTask, ItemEvent, Judgment

    decided = item.status in ("accepted", "rejected")
    check_decision(item, judgments, extra)
    if judgments:
        task_state = "decided" if decided or extra.get("adjudicated_by") else "open"
        for m, (person, related, correct, corrected, flags, comment, lead) in enumerate(judgments):
            task = AnnotationTask(item_id=item.id, purpose="verify", server=f"http://127.0.0.1:80{m}", ls_project_id=1,
                                  ls_task_id=100 * n + m, assignee=person, state=task_state,
                                  decision=item.status if decided and not extra.get("adjudicated_by") else None)
            session.add(task)
            session.flush()
            session.add(Judgment(task_id=task.id, annotator=person, related=related, answer_correct=correct,
                                 corrected_answer=corrected, flags=flags, comment=comment,
                                 raw={"lead_time": lead}, annotated_at=DAY + timedelta(days=n)))
    if extra.get("adjudicated_by"):
        task = AnnotationTask(item_id=item.id, purpose="adjudicate", server="http://127.0.0.1:802", ls_project_id=2,
                              ls_task_id=900 + n, assignee=extra["adjudicated_by"], state="decided",
                              decision=item.status)
        session.add(task)
        session.flush()
        session.add(Judgment(task_id=task.id, annotator=extra["adjudicated_by"], decision="accept",
                             raw={"lead_time": 60.0}, annotated_at=DAY + timedelta(days=n)))
    if extra.get("control_task"):  # measures its person: never pushes the item
        session.add(AnnotationTask(item_id=item.id, purpose="control", ls_project_id=3, ls_task_id=800 + n,
                                   assignee=PEOPLE[0], state="open"))
    if decided:
        session.add(ItemEvent(item_id=item.id, stage="annotate pull", from_status="in_review", to_status=item.status,
                              created_at=DAY + timedelta(days=n % 3)))


def export_accepted(workspace, folder: Path) -> Path:
    from cftools.release.export import ExportOptions, export_release

    result = export_release(workspace, "funnel", "1.0", folder / "releases", options=ExportOptions(licence=LICENCE))
    return result.path


def price_workspace(workspace) -> None:
    """Prices for the two stub models in cftools.toml (the report prices calls the way `status --cost` does)."""
    lines = ["", "[llm.prices.\"stub-a\"]", "input_per_mtok = 1.0", "output_per_mtok = 2.0",
             "[llm.prices.\"stub-b\"]", "input_per_mtok = 3.0", "output_per_mtok = 6.0", ""]
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text(encoding="utf-8") + "\n".join(lines), encoding="utf-8")
