"""The automatic checks: each check on cases that must and must not fire, the peer sample's known-bad
rows through a real ingest, status transitions, reruns, --json and duplicate detection."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from sqlalchemy import func, select, update

from cftools.checks import CheckOptions, ItemView, check_codes, check_item, run_checks

CODES = tuple(check_codes())
from cftools.checks.embeddings import load_embedder
from cftools.checks.presupposition import find_condition, parse_change
from cftools.kinds.cvqa.model import BOOLEAN, NUMERICAL_DIRECT, NUMERICAL_INDIRECT
from cftools.models import CHECKED, DRAFT, CheckFlag, Image, Item, ItemEvent, SourceQuestion, utcnow
KIND_CVQA = "cvqa"
from tests.conftest import CVQA_SYNTHETIC

# ---------------------------------------------------------------- helpers


def view(question: str, answer: str, group: str = NUMERICAL_DIRECT, source_answer: str | None = "2",
         source_question: str = "How many dogs are there?", item_id: int = 1, image: str = "a.jpg") -> ItemView:
    return ItemView(id=item_id, key=f"t:{item_id}", kind=KIND_CVQA, group=group, status=DRAFT, question=question,
                    answer=answer, source_question=source_question, source_answer=source_answer, image_name=image,
                    image_key=f"name:{image}")


def codes_of(item: ItemView, only: tuple[str, ...] = CODES) -> set[str]:
    return {flag.code for flag in check_item(item, only, None).flags}


def add_item(store, question: str, answer: str, group: str = NUMERICAL_DIRECT, source_answer: str = "2",
             image: str = "a.jpg", key: str | None = None, source_question: str = "How many dogs are there?") -> int:
    """A source question and one draft item on it, written to the real store."""
    now = utcnow()
    with store.write() as session:
        source = SourceQuestion(dataset="test", external_id=key or question + image, image_ref=image,
                                question=source_question, answer=source_answer, answer_type="number")
        session.add(source)
        session.flush()
        item = Item(key=key or f"test:{question}:{image}:{answer}", kind=KIND_CVQA, group=group,
                    source_id=source.id, question=question, answer=answer, status=DRAFT, created_at=now,
                    updated_at=now)
        session.add(item)
        session.flush()
        return item.id


def flags_of(store, item_id: int) -> dict[str, str]:
    with store.session() as session:
        return dict(session.execute(select(CheckFlag.code, CheckFlag.reason)
                                    .where(CheckFlag.item_id == item_id)).all())


def status_of(store, item_id: int) -> str:
    with store.session() as session:
        return session.get(Item, item_id).status


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


# ---------------------------------------------------------------- presuppositions


@pytest.mark.parametrize("question, original, expected", [
    ("How many dogs would there be if 2 more dogs were added?", 1, 3),
    ("How many dogs would there be if two more dogs came?", 1, 3),
    ("How many dogs would there be if 3 dogs joined?", 1, 4),
    ("How many kids would there be if three more kids arrived?", 2, 5),
    ("How many birds would there be if 4 birds appeared?", 0, 4),
    ("How many pillows would there be if three pillows were removed?", 6, 3),
    ("How many women would there be if one left the scene?", 2, 1),
    ("How many birds would there be if 2 birds flew away?", 5, 3),
    ("How many donuts would there be if 2 donuts were eaten?", 6, 4),
    ("How many cones would there be if one cone disappeared?", 2, 1),
    ("How many skiers would there be if the number of skiers was doubled?", 3, 6),
    ("How many cats would there be if there were twice as many cats?", 3, 6),
    ("How many cats would there be if there were three times as many cats?", 2, 6),
    ("How many wheels would there be if the number of wheels tripled?", 2, 6),
    ("How many pillows would there be if the number of pillows were halved?", 4, 2),
    ("How many glasses would there be if half of the glasses were taken away?", 8, 4),
    ("How many birds would there be if all the birds flew away?", 7, 0),
    ("How many chairs would be in the picture if there were no chairs?", 1, 0),
    ("How many men would there be if the only man was removed?", 1, 0),
    ("How many dogs would there be if one brown dog disappeared and two black dogs joined?", 2, 3),
    ("How many people would there be if 1 person left and 2 people came?", 3, 4),
    ("How many dogs would there be if 2 dogs came in and 1 dog went away?", 1, 2),
    ("How many elephants would there be if another elephant joined?", 1, 2),
    ("How many people would there be if a person was added?", 1, 2),
    ("How many players would be visible if there was 1 less player?", 4, 3),
    ("How many dogs would there be if 2 dogs on the left were removed?", 5, 3),
    ("Suppose 2 more cats came in, how many cats would there be?", 1, 3),
    ("If twenty one ducks arrived, how many ducks would there be?", 0, 21),
])
def test_parse_change_reads_the_change(question, original, expected):
    condition = find_condition(question)
    change = parse_change(condition.text)
    assert change.unreadable is None
    assert change.apply(Fraction(original)) == expected


@pytest.mark.parametrize("presupposition", [
    "3 cows were laying",          # a state, not a change
    "there were 5 dogs in total",
    "some dogs were removed",      # an unstated amount
    "dogs came",
    "a third of the dogs left",
    "2 dogs were added or removed",  # both directions in one clause
])
def test_parse_change_says_when_it_cannot_read(presupposition):
    change = parse_change(presupposition)
    assert change.ops == () and change.unreadable


# ---------------------------------------------------------------- one check at a time


@pytest.mark.parametrize("original, question, new, fires", [
    ("1", "How many hydrants would there be if 2 more hydrants were added?", "3", False),
    ("0", "How many clouds would there be if 5 clouds were added above the animals?", "0", True),
    ("9", "How many glasses would there be if the number of glasses was reduced by half?", "5", True),  # 4.5
    ("9", "How many glasses would there be if the number of glasses was reduced by half?", "4", True),  # 4.5
    ("1", "How many dogs would there be if 3 dogs were removed?", "0", True),  # negative
    ("4", "How many cups would there be if 3 more cups were on the table?", "7", False),
    ("2", "How many dogs would there be if two dogs left?", "0", False),
    ("2", "How many dogs would there be if two dogs left?", "1", True),
    ("0", "How many cows would there be if 3 cows were laying?", "3", False),  # unreadable: a note, not a flag
])
def test_arithmetic(original, question, new, fires):
    item = view(question, new, source_answer=original)
    result = check_item(item, ("arithmetic",), None)
    assert ("arithmetic" in {f.code for f in result.flags}) is fires
    if question.endswith("laying?"):
        assert [n.code for n in result.notes] == ["arithmetic"]


def test_arithmetic_reason_names_the_numbers():
    item = view("How many clouds would there be if 5 clouds were added?", "0", source_answer="0")
    reason = check_item(item, ("arithmetic",), None).flags[0].reason
    assert "5" in reason and "0" in reason


def test_arithmetic_only_for_direct_groups():
    item = view("How many clouds would there be if 5 clouds were added?", "0", group=NUMERICAL_INDIRECT,
                source_answer="0")
    assert "arithmetic" not in check_item(item, CODES, None).checks


@pytest.mark.parametrize("original, new, fires", [
    ("yes", "no", False), ("no", "yes", False), ("yes", "yes", True), ("No", "no", True),
])
def test_not_flipped(original, new, fires):
    item = view("Would there be a dog if the dog left?", new, group=BOOLEAN, source_answer=original,
                source_question="Is there a dog?")
    assert ("not_flipped" in codes_of(item)) is fires


@pytest.mark.parametrize("question, fires", [
    ("Would any cars be visible in this photo?", True),
    ("How many dogs are there?", True),
    ("How many dogs would there be if 2 left?", False),
    ("If there were no red food, how many tomatoes would there be?", False),
    ("Suppose two dogs came, how many dogs would there be?", False),
    ("Assuming the dog left, how many dogs would there be?", False),
    ("How many dogs would there be were the black dog to leave?", False),
    ("How many dogs would there be had two dogs left?", False),
    ("Had the dog left, would there be a dog?", False),
    ("Had the dog eaten?", True),
])
def test_no_presupposition(question, fires):
    assert ("no_presupposition" in codes_of(view(question, "2"), ("no_presupposition",))) is fires


@pytest.mark.parametrize("group, answer, fires", [
    (NUMERICAL_DIRECT, "3", False), (NUMERICAL_DIRECT, "0", False), (NUMERICAL_DIRECT, "three", True),
    (NUMERICAL_DIRECT, "-1", True), (NUMERICAL_DIRECT, "2.5", True), (NUMERICAL_INDIRECT, "3 dogs", True),
    (BOOLEAN, "yes", False), (BOOLEAN, "No", False), (BOOLEAN, "maybe", True), (BOOLEAN, "2", True),
])
def test_answer_type(group, answer, fires):
    item = view("How many dogs would there be if 1 more dog came?", answer, group=group)
    assert ("answer_type" in codes_of(item, ("answer_type",))) is fires


@pytest.mark.parametrize("question, answer, fires", [
    ("How many dogs would there be if there were 5 dogs in total?", "5", True),
    ("How many cows would there be if 3 cows were laying?", "3", True),
    ("How many dogs would there be if 2 more dogs came, making 4 dogs?", "4", True),
    ("How many dogs would there be if the number of dogs increased to 6?", "6", True),
    ("How many dogs would there be if 2 more dogs came?", "4", False),
    ("How many animals would there be if 2 animals were removed?", "2", False),  # 4 - 2 = 2, a change
    ("How many dogs would there be if there were 5 dogs in total?", "6", False),
])
def test_leakage(question, answer, fires):
    assert ("leakage" in codes_of(view(question, answer), ("leakage",))) is fires


@pytest.mark.parametrize("question, fires", [
    ("How many of the dogs would be black and how many would be brown if one brown dog disappeared?", True),
    ("How many dogs would there be if 2 left? What color would they be?", True),
    ("How many dogs would there be if 2 left, and which one would be left?", True),
    ("If there were no red food, how many tomatoes would there be?", False),
    ("How many dogs and cats would there be if 2 dogs left?", False),
    ("How many dogs would there be if the dog, which was brown, left?", False),
    ("How many dogs would there be if 2 dogs came and 1 left?", False),
])
def test_two_questions(question, fires):
    assert ("two_questions" in codes_of(view(question, "2"), ("two_questions",))) is fires


@pytest.mark.parametrize("group, original, new, fires", [
    (NUMERICAL_DIRECT, "2", "2", True), (NUMERICAL_INDIRECT, "1", "1", True), (NUMERICAL_DIRECT, "2", "3", False),
    (BOOLEAN, "yes", "yes", False),  # booleans get not_flipped instead
])
def test_unchanged_answer(group, original, new, fires):
    item = view("How many dogs would there be if the TV was off?", new, group=group, source_answer=original)
    assert ("unchanged_answer" in codes_of(item, ("unchanged_answer",))) is fires


@pytest.mark.parametrize("question, fires", [
    ("How many dogs would there be if one dog left and one arrived?", False),  # a correct net-zero change
    ("How many dogs would there be if two dogs came and two dogs left?", False),
    ("How many dogs would there be if one dog left?", True),  # 2 - 1 is not 2
])
def test_unchanged_answer_accepts_changes_that_cancel_out(question, fires):
    item = view(question, "2", source_answer="2")
    assert ("unchanged_answer" in codes_of(item, ("unchanged_answer",))) is fires


def test_a_negative_count_is_its_own_value():
    from cftools.answers import answers_match, extract_answer

    assert extract_answer("-1", "number") == "-1" and not answers_match("-1", "1", "number")
    assert extract_answer("\u22123 dogs", "number") == "-3" and extract_answer("5-6", "number") is None
    item = view("How many dogs would there be if 3 dogs left?", "-1", source_answer="2")
    results = check_item(item, ("answer_type", "unchanged_answer", "arithmetic"), None).flags
    assert {f.code: f.reason for f in results}["answer_type"] == ("the answer '-1' is a negative count; a count is "
                                                                  "a whole number >= 0")
    assert "unchanged_answer" not in {f.code for f in results}  # -1 is not the original 1
    one = view("How many dogs would there be if the TV was off?", "-1", group=NUMERICAL_INDIRECT, source_answer="1")
    assert "unchanged_answer" not in codes_of(one, ("unchanged_answer",))


def test_multiple_choice_items_get_the_checks_that_apply():
    question = ("How many dots would there be in all the circles together if 14 dots were removed from the circles? "
                "Select the correct answer:A:0  B:7  C:3  D:6")
    source = "How many dots are there in all the circles together? Select the correct answer:A:15  B:20  C:16  D:17"
    right = view(question, "C", group="abs_counting_4", source_answer="D", source_question=source)
    result = check_item(right, CODES, None)
    assert result.flags == []
    assert set(result.checks) == {"arithmetic", "no_presupposition", "answer_type", "leakage", "two_questions",
                                  "unchanged_answer"}
    wrong = view(question, "B", group="abs_counting_4", source_answer="D", source_question=source)
    assert codes_of(wrong) == {"arithmetic"}
    assert codes_of(view(question, "E", group="abs_counting_4", source_answer="D", source_question=source)) == {
        "answer_type"}
    indirect = view(question.replace("14 dots were removed", "all circles were green"), "C", group="abs_counting_1",
                    source_answer="D", source_question=source)
    assert "arithmetic" not in check_item(indirect, CODES, None).checks


# ---------------------------------------------------------------- the peer sample, through a real ingest

KNOWN_BAD = {  # image -> (group, code) from the peer README
    "COCO_val2014_000000482062.jpg": (NUMERICAL_DIRECT, "arithmetic"),
    "COCO_val2014_000000527445.jpg": (NUMERICAL_DIRECT, "arithmetic"),
    "COCO_val2014_000000411484.jpg": (NUMERICAL_DIRECT, "two_questions"),
    "COCO_val2014_000000057006.jpg": (BOOLEAN, "no_presupposition"),
}


def test_peer_known_bad_rows_are_flagged(workspace, run_cli, peer_cvqa_real):
    assert run_cli("ingest", "cvqa", peer_cvqa_real).exit_code == 0
    result = run_cli("check", "--json", "--no-embeddings")
    assert result.exit_code == 0, result.output
    lines = json_lines(result.stdout)
    assert len(lines) == 300
    by_key = {(line["image"], line["group"]): line for line in lines}
    for image, (group, code) in KNOWN_BAD.items():
        line = by_key[(image, group)]
        assert code in {f["code"] for f in line["flags"]}, line
        assert line["status"] == DRAFT
    direct = [line for line in lines if line["group"] == NUMERICAL_DIRECT]
    assert len(direct) == 100
    failing = {line["image"] for line in direct if "arithmetic" in {f["code"] for f in line["flags"]}}
    assert failing == {"COCO_val2014_000000482062.jpg", "COCO_val2014_000000527445.jpg"}
    # the one direct row whose presupposition is a state, not a change: reported, not flagged
    undecided = {line["image"] for line in direct if any(n["code"] == "arithmetic" for n in line["notes"])}
    assert undecided == {"COCO_val2014_000000415990.jpg"}


def test_peer_synthetic_direct_types_pass_arithmetic(workspace):
    from cftools.kinds.cvqa.ingest import ingest_cvqa

    ingest_cvqa(workspace.store, CVQA_SYNTHETIC)
    report = run_checks(workspace.store, options=CheckOptions(use_embeddings=False))
    assert report.applied["arithmetic"] == 100  # abs_counting_2 and abs_counting_4, 50 rows each
    assert report.flags["arithmetic"] == 0 and report.notes["arithmetic"] == 0
    assert report.applied["not_flipped"] == 0
    assert report.candidates == 300


# ---------------------------------------------------------------- statuses, reruns, options


def test_clean_items_move_to_checked_and_flagged_stay_draft(workspace):
    store = workspace.store
    good = add_item(store, "How many dogs would there be if 2 more dogs came?", "4")
    bad = add_item(store, "How many dogs would there be if 2 more dogs came?", "5", image="b.jpg")
    report = run_checks(store, options=CheckOptions(use_embeddings=False))
    assert (report.candidates, report.moved_to_checked, report.flagged) == (2, 1, 1)
    assert status_of(store, good) == CHECKED and flags_of(store, good) == {}
    assert status_of(store, bad) == DRAFT and set(flags_of(store, bad)) == {"arithmetic"}
    with store.session() as session:
        events = session.execute(select(ItemEvent).where(ItemEvent.stage == "check")).scalars().all()
    moved = [e for e in events if e.item_id == good]
    assert [(e.from_status, e.to_status) for e in moved] == [(DRAFT, CHECKED)]
    assert [(e.from_status, e.to_status) for e in events if e.item_id == bad] == [(DRAFT, DRAFT)]


def _counts(store):
    with store.session() as session:
        return (session.execute(select(func.count()).select_from(CheckFlag)).scalar_one(),
                session.execute(select(func.count()).select_from(ItemEvent)).scalar_one())


def test_rerun_is_idempotent_and_recheck_replaces_stale_flags(workspace):
    store = workspace.store
    bad = add_item(store, "How many dogs would there be if 2 more dogs came?", "5")
    run_checks(store, options=CheckOptions(use_embeddings=False))
    before = _counts(store)
    again = run_checks(store, options=CheckOptions(use_embeddings=False))
    assert again.candidates == 0 and again.left_as_flagged == 1
    assert _counts(store) == before
    # same flags: nothing new recorded
    again = run_checks(store, options=CheckOptions(recheck=True, use_embeddings=False))
    assert again.candidates == 1 and _counts(store) == before
    # a person fixes the answer in the store without touching updated_at: only --recheck sees it
    with store.write() as session:
        session.execute(update(Item).where(Item.id == bad).values(answer="4"))
    assert run_checks(store, options=CheckOptions(use_embeddings=False)).candidates == 0
    run_checks(store, options=CheckOptions(recheck=True, use_embeddings=False))
    assert flags_of(store, bad) == {} and status_of(store, bad) == CHECKED


def test_drafts_edited_after_their_check_are_checked_again(workspace):
    store = workspace.store
    bad = add_item(store, "How many dogs would there be if 2 more dogs came?", "5")
    run_checks(store, options=CheckOptions(use_embeddings=False))
    with store.write() as session:
        session.execute(update(Item).where(Item.id == bad).values(answer="4", updated_at=utcnow()))
    report = run_checks(store, options=CheckOptions(use_embeddings=False))
    assert report.candidates == 1 and status_of(store, bad) == CHECKED


def test_only_runs_some_checks_and_moves_nothing(workspace, run_cli):
    store = workspace.store
    good = add_item(store, "How many dogs would there be if 2 more dogs came?", "4")
    two = add_item(store, "How many dogs would be black and how many brown if 2 more dogs came?", "4", image="b.jpg")
    result = run_cli("check", "--only", "arithmetic", "--json")
    assert result.exit_code == 0
    assert {line["id"]: line["checks"] for line in json_lines(result.stdout)} == {good: ["arithmetic"],
                                                                                 two: ["arithmetic"]}
    assert status_of(store, good) == DRAFT and flags_of(store, two) == {}
    run_cli("check", "--only", "two_questions")
    assert set(flags_of(store, two)) == {"two_questions"}
    # arithmetic again: the two_questions flag is kept and still shown
    lines = json_lines(run_cli("check", "--only", "arithmetic", "--json").stdout)
    assert [f["code"] for f in next(line for line in lines if line["id"] == two)["flags"]] == ["two_questions"]
    run_cli("check")
    assert status_of(store, good) == CHECKED and status_of(store, two) == DRAFT


def test_json_lines_shape_and_summary(workspace, run_cli):
    add_item(workspace.store, "How many dogs would there be if 2 more dogs came?", "5", image="x.jpg")
    add_item(workspace.store, "How many dogs would there be if 1 more dog came?", "3", image="y.jpg")
    result = run_cli("check", "--json", "--no-embeddings")
    assert result.exit_code == 0
    lines = json_lines(result.stdout)
    assert len(lines) == len(result.stdout.splitlines()) == 2  # stdout holds JSON lines only
    for line in lines:
        assert {"id", "image", "status", "flags"} <= set(line)
        assert all(set(flag) == {"code", "reason"} and flag["reason"] for flag in line["flags"])
    assert {(line["image"], line["status"]) for line in lines} == {("x.jpg", DRAFT), ("y.jpg", CHECKED)}
    assert "arithmetic" in result.stderr  # the summary table goes to stderr in --json mode
    table = run_cli("check", "--recheck", "--no-embeddings")
    assert "arithmetic" in table.stdout and "1 flagged" in table.stdout


def test_list_and_bad_code(workspace, run_cli):
    listing = run_cli("check", "--list")
    assert all(code in listing.stdout for code in CODES)
    assert "[llm] rederive" in " ".join(listing.stdout.split())  # a config section's name survives the markup
    assert run_cli("check", "--only", "spelling").exit_code != 0


# ---------------------------------------------------------------- duplicates


def test_duplicate_by_normalised_text(workspace):
    store = workspace.store
    first = add_item(store, "How many dogs would there be if two more dogs came?", "4", key="k1")
    again = add_item(store, "how many dogs would there be, if 2 more dogs came", "4", key="k2")
    elsewhere = add_item(store, "How many dogs would there be if two more dogs came?", "4", image="b.jpg", key="k3")
    other_answer = add_item(store, "How many dogs would there be if two more dogs came?", "5", image="c.jpg",
                            key="k5", source_answer="3")  # another count on another image: not a copy
    report = run_checks(store, options=CheckOptions(use_embeddings=False))
    assert "normalised text only" in report.duplicate_mode
    assert flags_of(store, first) == {} and flags_of(store, other_answer) == {}
    reason = flags_of(store, again)["duplicate"]
    assert f"item {first}" in reason
    # the same question pair with the same answers on another image: an item of its own (issue 46)
    assert flags_of(store, elsewhere) == {}
    # an exact repeat of an item that is already checked is a duplicate too
    repeat = add_item(store, "How many dogs would there be if two more dogs came?", "4", key="k4")
    run_checks(store, options=CheckOptions(use_embeddings=False))
    assert set(flags_of(store, repeat)) == {"duplicate"}


def add_stored_image(store, sha256: str, *names: str) -> None:
    """One stored image (one SHA-256) that the source questions refer to under each of NAMES."""
    with store.write() as session:
        image = Image(sha256=sha256, width=4, height=4, format="PNG", size_bytes=64, path=names[0])
        session.add(image)
        session.flush()
        session.execute(update(SourceQuestion).where(SourceQuestion.image_ref.in_(names)).values(image_id=image.id))


def test_duplicate_compares_the_items_of_one_image_only(workspace):
    """Issue 46: one source question rewritten alike on many images (29 of 40 flagged) is no duplicate; the same
    image, by name or by its bytes under another name, with nearly the same question is."""
    store = workspace.store
    question = "How many people would there be if one more person came?"
    rewrites = [add_item(store, question, "3", image=f"vqa-{n}.jpg", key=f"r{n}",
                         source_question="How many people are in the picture?") for n in range(4)]
    same_name = add_item(store, "how many people would there be, if 1 more person came", "3", image="vqa-0.jpg",
                         key="r-again", source_question="How many people are in the picture?")
    same_bytes = add_item(store, "How many people would there be if 1 more person came?", "3", image="copy-of-1.jpg",
                          key="r-copy", source_question="How many people are in the picture?")
    add_stored_image(store, "a" * 64, "vqa-1.jpg", "copy-of-1.jpg")
    report = run_checks(store, ["duplicate"], options=CheckOptions(use_embeddings=False))
    assert [flags_of(store, i) for i in rewrites] == [{}] * 4
    assert flags_of(store, same_name)["duplicate"].startswith(f"the same question as item {rewrites[0]} on the "
                                                              "same image")
    assert flags_of(store, same_bytes)["duplicate"].startswith(f"the same question as item {rewrites[1]} on the "
                                                               "same image")
    assert report.flags["duplicate"] == 2


@pytest.mark.slow
def test_near_duplicate_by_embeddings(workspace):
    embedder, message = load_embedder()
    assert embedder is not None, message
    store = workspace.store
    first = add_item(store, "How many dogs would there be if 2 more dogs were added?", "4", key="e1")
    paraphrase = add_item(store, "How many dogs would be there if we added 2 more dogs?", "4", key="e2")
    other_number = add_item(store, "How many dogs would there be if 3 more dogs were added?", "5", key="e3")
    other_question = add_item(store, "How many dogs would there be if the number of dogs doubled?", "4", key="e4")
    text_only = run_checks(store, ["duplicate"], options=CheckOptions(use_embeddings=False))
    assert text_only.flags["duplicate"] == 0
    report = run_checks(store, ["duplicate"])
    assert "all-MiniLM-L6-v2" in report.duplicate_mode
    assert "cosine similarity" in flags_of(store, paraphrase)["duplicate"]
    assert flags_of(store, first) == {} and flags_of(store, other_number) == {}
    assert flags_of(store, other_question) == {}


def test_an_interrupted_run_keeps_finished_batches_and_the_next_run_does_the_rest(workspace, monkeypatch):
    from cftools.checks import runner

    monkeypatch.setattr(runner, "BATCH", 2)
    store = workspace.store
    ids = [add_item(store, f"How many dogs would there be if {n} more dogs came?", str(2 + n), image=f"{n}.jpg")
           for n in range(1, 6)]
    seen = []

    def stop_after_first_batch(result):
        seen.append(result.item.id)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_checks(store, on_result=stop_after_first_batch, options=CheckOptions(use_embeddings=False))
    assert [status_of(store, i) for i in ids] == [CHECKED, CHECKED, DRAFT, DRAFT, DRAFT]
    report = run_checks(store, options=CheckOptions(use_embeddings=False))
    assert report.candidates == 3 and all(status_of(store, i) == CHECKED for i in ids)
    with store.session() as session:
        moves = session.execute(select(func.count()).select_from(ItemEvent)
                                .where(ItemEvent.stage == "check", ItemEvent.to_status == CHECKED)).scalar_one()
    assert moves == 5  # each item moved once


def test_group_and_limit_select_the_drafts(workspace, run_cli):
    store = workspace.store
    direct = add_item(store, "How many dogs would there be if 2 more dogs came?", "4")
    boolean = add_item(store, "Would there be a dog if the dog left?", "no", group=BOOLEAN, source_answer="yes",
                       image="b.jpg")
    lines = json_lines(run_cli("check", "--json", "--group", BOOLEAN).stdout)
    assert [line["id"] for line in lines] == [boolean]
    assert status_of(store, boolean) == CHECKED and status_of(store, direct) == DRAFT
    add_item(store, "How many dogs would there be if 3 more dogs came?", "5", image="c.jpg")
    assert len(json_lines(run_cli("check", "--json", "--limit", "1").stdout)) == 1
    assert len(json_lines(run_cli("check", "--json").stdout)) == 1


def test_a_rejected_item_is_no_original_for_the_duplicate_check(workspace):
    """A redo that keeps the rejected draft's question (people found only its answer wrong) is no duplicate: the
    rejected item is in no release."""
    store = workspace.store
    rejected = add_item(store, "How many dogs would there be if two more dogs came?", "5", key="k1")
    with store.write() as session:
        session.get(Item, rejected).status = "rejected"
    redo = add_item(store, "How many dogs would there be if two more dogs came?", "4", key="k1~redo1")
    run_checks(store, ["duplicate"], options=CheckOptions(use_embeddings=False))
    assert flags_of(store, redo) == {}  # before: "the same question as item 1 on the same image"


def test_answer_disputed_on_an_answer_edited_since_its_rederivation_says_it_could_not_decide():
    from dataclasses import replace as with_data

    stale = with_data(view("How many dogs would there be if two more dogs came?", "4"),
                      data={"rederived": {"answer": "9", "reasoning": "r", "for_answer": "5"}})
    result = check_item(stale, ["answer_disputed"], None)
    # before: counted as applied, neither flagged nor noted: it had checked nothing
    assert result.checks == ["answer_disputed"] and not result.flags
    assert [n.code for n in result.notes] == ["answer_disputed"] and "'5', not '4'" in result.notes[0].text
    current = with_data(stale, data={"rederived": {"answer": "9", "reasoning": "r", "for_answer": "4"}})
    assert [f.code for f in check_item(current, ["answer_disputed"], None).flags] == ["answer_disputed"]


def test_similarity_without_embeddings_is_bad_usage(workspace, run_cli):
    out = run_cli("check", "--no-embeddings", "--similarity", "0.5")
    assert out.exit_code == 2 and "--similarity" in out.output  # before: exit 0, the threshold unused
    assert run_cli("check", "--no-embeddings").exit_code == 0


def test_list_with_json_is_json(workspace, run_cli):
    out = run_cli("check", "--list", "--json")
    assert out.exit_code == 0, out.output
    listed = {row["code"]: row["applies_to"] for row in json.loads(out.output)["checks"]}  # before: a table
    assert "duplicate" in listed and "answer_disputed" in listed and "[llm] rederive" in listed["answer_disputed"]


@pytest.mark.parametrize("stop", ["--list", "--calibration"])
def test_what_selects_drafts_is_bad_usage_with_a_report_that_checks_none(workspace, run_cli, stop):
    out = run_cli("check", stop, "--group", "boolean", "--limit", "3")
    # before: exit 0, the whole list or calibration as if --group and --limit had not been given
    assert out.exit_code == 2 and "--group, --limit" in out.output, out.output
    assert run_cli("check", stop, "--json").exit_code == 0
