"""CFMM pairs (issue 14): the checks, drafting, ingest/export, the per-type scores as the paper sums them, prompt
variants and the position bias of --swap-options."""

from __future__ import annotations

import json
import os
import shutil
import re
from collections import Counter
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from fixtures_eval import png_bytes, write_release
from llm_stub import StubServer
from cftools.generate.llm_task import LLMRun
from cftools.item_view import ItemView
from cftools.findings import Flag
from cftools.errors import CftoolsError
from cftools.evaluate.run import EvalOptions, run_eval
from cftools.kinds.cfmm import checks as c
from cftools.kinds import get_kind
from cftools.kinds.cfmm.model import EXPORT_FIELDS
from cftools.kinds.cfmm.generate import DRAFT_SCHEMA, draft_from_reply, generate_pairs, parse_quota, type_targets
from cftools.llm.structured import ReplyError
from cftools.llm import make_backend
from cftools.models import DRAFT, Generation, Item

ROOT = Path(__file__).resolve().parent.parent


def pair(basic: str, cf: str, cf_answer: str, *, basic_answer: str = "x", basic_options=None, cf_options=None,
         group: str = "count") -> ItemView:
    basic_options = basic_options if basic_options is not None else [basic_answer, "other"]
    cf_options = cf_options if cf_options is not None else [cf_answer, "something else"]
    return ItemView(id=1, key="k", kind="cfmm", group=group, status=DRAFT, question=cf, answer=cf_answer,
                    data={"type": group, "basic_question": basic, "basic_answer": basic_answer,
                          "options": {"original": basic_options, "counterfactual": cf_options}})


def flagged(check, item) -> bool:  # noqa: ANN001
    result = check(item)
    if isinstance(result, Flag):
        assert result.reason  # every flag says why
        return True
    assert result is None, result
    return False


# ---------------------------------------------------------------- leakage

LEAKY = [
    pair("What colour is the bus?", "If I painted this bus blue, what colour would it be?", "blue", group="color"),
    pair("How many birds are on the wire?", "If there were only two birds on the wire, how many birds would be on "
         "the wire?", "2"),
    pair("How big is the dog?", "If the cat grew bigger than the dog, which would be bigger, the dog or the cat?",
         "the cat", group="size"),
    pair("Which way is the car facing?", "If the car turned to face left, which way would it face?", "left",
         group="direction"),
    pair("What shape is the ball?", "If the ball were squashed flat, what shape would it be?", "flat", group="shape"),
    pair("What colour is the wall?", "If the wall were painted gray, what colour would it be?", "Grey", group="color"),
    pair("What is in the glass?", "Suppose the ice melted into water, what would be in the glass?", "water",
         group="common"),
    pair("How many kites are there?", "If 3 kites were left in the sky, how many kites would there be?", "three"),
    # the question asks for the change itself
    pair("How many cups are on the table?", "If one cup fell off the table, how many cups fell off the table?",
         "1", cf_options=["1", "2"]),
]
NOT_LEAKY = [
    pair("Which is bigger, the dog or the cat?", "If the dog shrank to the size of a mouse, which would be bigger, "
         "the dog or the cat?", "the cat", group="size"),
    pair("Which is bigger, the dog or the cat?", "If the cat shrank to the size of a mouse, which would be bigger, "
         "the dog or the cat?", "the dog", group="size"),
    pair("What colour is the bus?", "If the bus were repainted in the colour of grass, what colour would it be?",
         "green", group="color"),
    pair("How many dogs are on the grass?", "If one more dog ran onto the grass, how many dogs would there be?", "3"),
    pair("Is the arrow pointing up or down?", "If the sign were rotated half a turn, would the arrow point up or "
         "down?", "down", group="direction"),
    pair("What is in the glass?", "If the glass were left in the sun for an hour, would it hold water or ice?",
         "water", group="common"),
    pair("How many dogs are there?", "How many dogs would there be?", "2"),  # no condition: another check's business
    # the if-clause names a change of 1 and the answer is the count after it, which happens to be 1
    pair("How many cups are on the table?", "If one cup fell off the table, how many cups would be on the table?",
         "1", basic_answer="2", cf_options=["1", "2"]),
    pair("How many dogs are there?", "If two more dogs came, how many dogs would there be?", "2", basic_answer="0"),
]


@pytest.mark.parametrize("item", LEAKY, ids=lambda i: i.question[:40])
def test_leakage_flags_an_answer_named_in_the_condition(item):
    assert flagged(c.check_leakage, item)


@pytest.mark.parametrize("item", NOT_LEAKY, ids=lambda i: i.question[:40])
def test_leakage_leaves_the_subject_and_unnamed_answers_alone(item):
    assert not flagged(c.check_leakage, item)


def test_the_paper_example_names_the_clause():
    result = c.check_leakage(LEAKY[0])
    assert "'I painted this bus blue'" in result.reason and "'blue'" in result.reason


# ---------------------------------------------------------------- options_invalid

BAD_OPTIONS = [
    pair("How many cats?", "If one left, how many cats?", "2", cf_options=["2", "2"]),
    pair("How many cats?", "If one left, how many cats?", "2", cf_options=["Two", "2"]),  # same once normalised
    pair("How many cats?", "If one left, how many cats?", "2", cf_options=["3", "4"]),  # correct one missing
    pair("How many cats?", "If one left, how many cats?", "2", cf_options=["2", "  "]),  # empty
    pair("How many cats?", "If one left, how many cats?", "2", cf_options=["2", "3", "4"]),  # three
    pair("How many cats?", "If one left, how many cats?", "2", basic_answer="3", basic_options=["1", "2"]),
    pair("How many cats?", "If one left, how many cats?", "2", basic_options=[]),
]
GOOD_OPTIONS = [
    pair("How many cats?", "If one left, how many cats?", "2", basic_answer="3", basic_options=["3", "4"]),
    pair("What colour?", "If painted, what colour?", "green", basic_answer="red", basic_options=["red", "green"],
         cf_options=["red", "green"]),
    pair("Which is bigger?", "If it shrank, which is bigger?", "the cat", basic_answer="The dog",
         basic_options=["the dog", "the cat"], cf_options=["The dog", "The cat"]),
    pair("How many?", "If doubled, how many?", "4", basic_answer="2", basic_options=["two", "three"],
         cf_options=["4", "6"]),
    pair("Left or right?", "If flipped, left or right?", "right", basic_answer="left", basic_options=["left", "right"],
         cf_options=["left", "right"]),
]


@pytest.mark.parametrize("item", BAD_OPTIONS, ids=range(len(BAD_OPTIONS)))
def test_options_invalid_flags(item):
    assert flagged(c.check_options_invalid, item)


@pytest.mark.parametrize("item", GOOD_OPTIONS, ids=range(len(GOOD_OPTIONS)))
def test_options_invalid_passes_two_distinct_options_holding_the_answer(item):
    assert not flagged(c.check_options_invalid, item)


# ---------------------------------------------------------------- no_condition

NO_CONDITION = [
    pair("How many dogs are there?", "How many dogs would there be?", "2"),
    pair("How many dogs are there?", "How many dogs are there?", "2"),
    pair("How many dogs are there?", "how many dogs are there", "2"),
    pair("What colour is the bus?", "What colour would the bus be when painted?", "red"),
    pair("Where is the clock?", "Where would the clock be after the flip?", "left"),
    pair("Is the man wet?", "Would the man be wet in the rain?", "yes"),
]
WITH_CONDITION = [
    pair("How many dogs are there?", "If one more dog came, how many dogs would there be?", "3"),
    pair("How many dogs are there?", "Suppose two dogs left, how many dogs would remain?", "0"),
    pair("What colour is the bus?", "Imagine the bus is painted like grass. What colour is it?", "green"),
    pair("Is the man wet?", "Assuming it rained all day, would the man be wet?", "yes"),
    pair("Where is the clock?", "Where would the clock be if the picture were flipped?", "right"),
]


@pytest.mark.parametrize("item", NO_CONDITION, ids=range(len(NO_CONDITION)))
def test_no_condition_flags(item):
    assert flagged(c.check_no_condition, item)


@pytest.mark.parametrize("item", WITH_CONDITION, ids=range(len(WITH_CONDITION)))
def test_no_condition_passes_an_if_clause(item):
    assert not flagged(c.check_no_condition, item)


# ---------------------------------------------------------------- subject_drift

DRIFT = [
    pair("How many dogs are on the grass?", "If it rained, how many umbrellas would people open?", "3"),
    pair("What colour is the bus?", "If the sky turned dark, what colour would the clouds be?", "grey"),
    pair("Which is bigger, the dog or the cat?", "If the tree grew, which would be taller, the tree or the house?",
         "the tree"),
    pair("What shape is the ball?", "If an elephant sat on the box, what shape would the box be?", "flat"),
    pair("Where is the clock?", "If the lamp were moved, where would the lamp be?", "left"),
]
SAME_SUBJECT = [
    pair("How many dogs are on the grass?", "If one more dog ran in, how many dogs would be on the grass?", "3"),
    pair("What colour is the bus?", "If I painted this bus like grass, what colour would it be?", "green"),
    pair("Which is bigger, the dog or the cat?", "If the dog shrank, which would be bigger?", "the cat"),
    pair("What shape is the ball?", "If an elephant sat on the balls, what shape would they be?", "flat"),
    pair("Where is the clock?", "If the picture were flipped, where would the clock be?", "right"),
]


@pytest.mark.parametrize("item", DRIFT, ids=range(len(DRIFT)))
def test_subject_drift_flags(item):
    assert flagged(c.check_subject_drift, item)


@pytest.mark.parametrize("item", SAME_SUBJECT, ids=range(len(SAME_SUBJECT)))
def test_subject_drift_passes_the_same_subject(item):
    assert not flagged(c.check_subject_drift, item)


# ---------------------------------------------------------------- blind_answerable


def word_overlap_ranker(question, options):  # noqa: ANN001, ANN201
    """A text-only 'model' that prefers the option whose words the question repeats (what blind models exploit)."""
    words = set(re.findall(r"[a-z0-9]+", question.lower()))
    return [2.0 * len(words & set(re.findall(r"[a-z0-9]+", o.lower()))) for o in options]


BLIND_YES = [
    pair("What colour?", "If painted blue, what colour would the bus be?", "blue", cf_options=["blue", "red"]),
    pair("How many?", "If there were 2 dogs left, how many dogs?", "2", cf_options=["2", "5"]),
    pair("Which way?", "If it turned left, which way would it face?", "left", cf_options=["left", "right"]),
    pair("What shape?", "If squashed flat, what shape?", "flat", cf_options=["flat", "round"]),
    pair("What in glass?", "If the ice melted to water, what would the glass hold?", "water",
         cf_options=["water", "sand"]),
]
BLIND_NO = [
    pair("What colour?", "If painted like grass, what colour would the bus be?", "green", cf_options=["green", "red"]),
    pair("How many?", "If one more dog came, how many dogs?", "3", cf_options=["3", "2"]),
    pair("Which way?", "If the picture were flipped, which way?", "right", cf_options=["right", "up"]),
    pair("What shape?", "If an elephant stepped on it, what shape?", "flat", cf_options=["flat", "round"]),
    pair("Which is bigger?", "If the dog shrank, which is bigger, the dog or the cat?", "the cat",
         cf_options=["the cat", "the dog"]),  # the question names both: no preference
]


@pytest.fixture
def blind_model():
    c.set_blind_ranker(word_overlap_ranker, margin=1.0)
    yield
    c.set_blind_ranker(None)


@pytest.mark.parametrize("item", BLIND_YES, ids=range(len(BLIND_YES)))
def test_blind_answerable_flags_what_the_text_gives_away(blind_model, item):
    assert flagged(c.check_blind_answerable, item)
    assert "without the image" in c.check_blind_answerable(item).reason


@pytest.mark.parametrize("item", BLIND_NO, ids=range(len(BLIND_NO)))
def test_blind_answerable_passes_what_needs_the_image(blind_model, item):
    assert not flagged(c.check_blind_answerable, item)


def test_blind_answerable_does_not_decide_with_the_embedded_model_and_runs_the_configured_one(tmp_path):
    """Without a configured model (or with the embedded 135M one) the check says it could not decide; a configured
    GGUF file is loaded through transformers and scores both options without any image."""
    from cftools.findings import Note
    from cftools.llm.local import smollm2_gguf

    c.set_blind_ranker(None)
    for config in ({}, {"checks": {"blind_answerable_model": str(smollm2_gguf())}}):
        c.configure_blind_model(config)
        result = c.check_blind_answerable(LEAKY[0])
        assert isinstance(result, Note) and "could not decide" in result.text and "7 of 12" in result.text
    configured = tmp_path / "text-model.gguf"  # a model of the user's; here the same small file under its name
    try:
        os.link(smollm2_gguf(), configured)
    except OSError:
        shutil.copyfile(smollm2_gguf(), configured)
    c.configure_blind_model({"checks": {"blind_answerable_model": str(configured)}})
    try:
        scores = c.blind_ranker()("If I painted this bus blue, what colour would it be?", ["red", "blue"])
        assert len(scores) == 2 and all(isinstance(s, float) for s in scores)
        result = c.check_blind_answerable(LEAKY[0])
        assert result is None or result.code == "blind_answerable"
    finally:
        c.configure_blind_model({})


# ---------------------------------------------------------------- ambiguity is a judgment


def test_cannot_be_determined_votes_decide():
    from cftools.judgments import Answer
    from cftools.kinds.cfmm.model import CANNOT_DETERMINE

    kind = get_kind("cfmm").hooks.annotate
    fine = Answer(related=True, answer_correct=True, fields={"basic_correct": True, "cf_answer": "blue"})
    cannot = Answer(related=True, answer_correct=False, fields={"basic_correct": True, "cf_answer": CANNOT_DETERMINE})
    assert kind.decide(fine, fine).status == "accepted"
    assert kind.decide(cannot, fine).status == "needs_adjudication"
    assert kind.decide(cannot, cannot).status == "rejected"
    assert kind.agreement_labels("verify", cannot) == {"basic_correct": "yes",
                                                       "counterfactual_answer": "cannot be determined"}


def verify_result(related: str, basic: str, pick: str) -> list[dict]:
    return [{"from_name": "related", "value": {"choices": [related]}},
            {"from_name": "basic_correct", "value": {"choices": [basic]}},
            {"from_name": "cf_answer", "value": {"choices": [pick]}}]


def test_verify_reads_the_basic_and_the_counterfactual_answer_apart_among_the_options():
    from cftools.judgments import InvalidResult
    from cftools.kinds.cfmm.annotate import option_choices

    kind = get_kind("cfmm").hooks.annotate
    task = {"proposed_answer": "blue", "cf_option_choices": option_choices(["red", "blue"], with_cannot=False)}

    def judged(related, basic, pick):
        answer = kind.read_judgment("verify", verify_result(related, basic, pick))
        kind.check_judgment("verify", answer, task)
        return answer

    right = judged("yes", "yes", "blue")
    assert (right.answer_correct, right.corrected_answer) == (True, None)
    other = judged("yes", "yes", "red")
    assert (other.answer_correct, other.corrected_answer) == (False, "red")
    with pytest.raises(InvalidResult, match="'Red' is not one of the item's options"):  # options by exact text
        judged("yes", "yes", "Red")
    basic_wrong = judged("yes", "no", "blue")
    assert (basic_wrong.answer_correct, basic_wrong.corrected_answer) == (False, None)
    cannot = judged("yes", "yes", "cannot be determined")
    assert cannot.fields["cf_answer"] == "cannot be determined" and "ambiguous" not in cannot.flags
    with pytest.raises(InvalidResult, match="'green' is not one of the item's options"):
        judged("yes", "yes", "green")


# ---------------------------------------------------------------- drafting


FACTS = [("dogs.png", "How many dogs are on the grass?", "2"), ("bus.png", "What color is the bus?", "red"),
         ("blank.png", "Is this picture empty?", "yes")]


def draft_reply(request, prompt: str):  # noqa: ANN001, ANN201
    """A scripted LLM: picks count for dogs, color for the bus, none for the blank picture; drafts accordingly, in the
    schema that arrived as response_format."""
    schema = request["response_format"]["json_schema"]
    if schema["name"] == "cfmm_type_pick":
        facts = prompt.split("Pick the type")[0]
        assert schema["schema"]["properties"]["type"]["enum"][-1] == "none"
        picked = "count" if "dogs" in facts else "color" if "bus" in facts else "none"
        return json.dumps({"type": picked})
    assert schema["name"] == "cfmm_pair"
    if "dogs" in prompt.rsplit("Facts:", 1)[1]:
        return json.dumps({"basic_question": "How many dogs are on the grass?", "basic_options": ["2", "3"],
                           "basic_correct": 1, "cf_question": "If one more dog ran onto the grass, how many dogs "
                           "would be on the grass?", "cf_options": ["2", "3"], "cf_correct": 2})
    return json.dumps({"basic_question": "What color is the bus?", "basic_options": ["red", "green"], "basic_correct": 1,
                       "cf_question": "If the bus were repainted in the colour of grass, what colour would it be?",
                       "cf_options": ["red", "green"], "cf_correct": 2})


@pytest.fixture
def images_and_facts(workspace, tmp_path):
    from cftools.ingest.readers import ingest_table

    folder = tmp_path / "images"
    folder.mkdir()
    rows = ["image,question,answer"]
    for n, (name, question, answer) in enumerate(FACTS):
        PIL.Image.new("RGB", (10 + n, 10), (40 * n, 80, 120)).save(folder / name)
        rows.append(f"{name},{question},{answer}")
    (tmp_path / "facts.csv").write_text("\n".join(rows) + "\n")
    ingest_table(workspace.store, tmp_path / "facts.csv", folder)
    return workspace


@pytest.fixture
def scripted_llm():
    server = StubServer(delay=0.0, reply=draft_reply).start_in_thread()
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url,
                            "backoff_initial": 0.01, "backoff_max": 0.05})
    yield backend
    backend.close()
    server.shutdown()
    server.server_close()


def test_generate_pairs_picks_a_type_skips_unsuitable_images_and_marks_drafts(images_and_facts, scripted_llm):
    store = images_and_facts.store
    report = generate_pairs(store, scripted_llm, run=LLMRun(quiet=True), quota=parse_quota("count,color"))
    assert report.selected == 3 and report.no_type == 1 and report.items_created == 2
    assert report.picked == {"count": 1, "color": 1}
    with store.session() as session:
        items = {i.group: i for i in session.execute(select(Item)).scalars()}
        generators = sorted(g.generator for g in session.execute(select(Generation)).scalars())
    assert set(items) == {"count", "color"}
    assert generators == ["pairs", "pairs", "pairs-pick", "pairs-pick", "pairs-pick"]
    count = items["count"]
    assert (count.question, count.answer, count.kind, count.status) == (
        "If one more dog ran onto the grass, how many dogs would be on the grass?", "3", "cfmm", DRAFT)
    assert count.data["needs_image_check"] is True
    assert count.data["options"] == {"original": ["2", "3"], "counterfactual": ["2", "3"]}
    again = generate_pairs(store, scripted_llm, run=LLMRun(quiet=True), quota=parse_quota("count,color"))
    assert again.items_created == 0 and again.no_type == 1  # only the empty slot is asked again, from the cache


def test_the_quota_steers_and_caps_types(images_and_facts, scripted_llm):
    report = generate_pairs(images_and_facts.store, scripted_llm, run=LLMRun(quiet=True), quota=parse_quota("count=1"))
    assert report.items_created == 1 and report.picked == {"count": 1}
    assert type_targets(Counter({"count": 3}), 2, parse_quota("count=0.5,color=0.5")) == {
        "count": 0, "color": 3, "size": 0, "shape": 0, "direction": 0, "common": 0}
    with pytest.raises(CftoolsError, match="unknown type 'colour'"):
        parse_quota("colour=1")


def test_a_draft_names_its_correct_options_by_number_and_two_same_options_are_refused():
    from cftools.generate.llm_task import ParseError

    reply = DRAFT_SCHEMA.read(json.dumps({"basic_question": "How many?", "basic_options": ["1", "2"], "basic_correct": 1,
                                          "cf_question": "If one left, how many?", "cf_options": ["0", "2"],
                                          "cf_correct": 1}))
    assert draft_from_reply(reply)["cf_answer"] == "0" and draft_from_reply(reply)["basic_answer"] == "1"
    with pytest.raises(ReplyError, match="cf_correct"):
        DRAFT_SCHEMA.read(json.dumps({**reply.model_dump(), "cf_correct": 3}))
    with pytest.raises(ParseError, match="two options are the same"):
        draft_from_reply(reply.model_copy(update={"cf_options": ["2", " 2"]}))


def test_status_kind_shows_types_beside_the_quota(images_and_facts, scripted_llm, run_cli):
    generate_pairs(images_and_facts.store, scripted_llm, run=LLMRun(quiet=True), quota=parse_quota("count,color"))
    out = run_cli("status", "--kind", "cfmm", "--json")
    assert out.exit_code == 0, out.output
    table = json.loads(out.output)["kind_table"]
    rows = {r[0]: r for r in table["rows"]}
    assert table["columns"] == ["type", "draft", "total", "share", "quota"]
    assert rows["count"][1:3] == ["1", "1"] and rows["count"][-1] == "29.0%"  # the paper's share by default


# ---------------------------------------------------------------- ingest and export


def cfmm_lines(image: str) -> list[dict]:
    return [{"id": "p1", "image": image, "type": "color", "basic_question": "What colour is the bus?",
             "basic_options": ["red", "green"], "basic_answer": "red",
             "cf_question": "If the bus were repainted in the colour of grass, what colour would it be?",
             "cf_options": ["red", "green"], "cf_answer": "green"},
            {"id": "p2", "image": image, "type": "count", "basic_question": "How many buses are there?",
             "basic_options": ["1", "2"], "basic_answer": "1",
             "cf_question": "If one more bus parked, how many buses would there be?", "cf_options": ["1", "2"],
             "cf_answer": "2"}]


def test_ingest_then_export_cfmm_round_trips_exactly_the_fields(workspace, tmp_path, run_cli):
    folder = tmp_path / "imgs"
    folder.mkdir()
    PIL.Image.new("RGB", (12, 9), "red").save(folder / "bus.png")
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in cfmm_lines("bus.png")))
    out = run_cli("ingest", "cfmm", source, "--images", folder, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["items_added"] == 2
    out = run_cli("export", "pairs", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm", "--include-unverified")
    assert out.exit_code == 0, out.output
    release = workspace.root / "releases" / "pairs-1-cfmm"
    rows = [json.loads(line) for line in (release / "pairs.jsonl").read_text().splitlines()]
    assert [tuple(r) for r in rows] == [EXPORT_FIELDS] * 2
    by_type = {r["type"]: r for r in rows}
    assert by_type["color"]["cf_options"] == ["red", "green"] and by_type["color"]["cf_answer"] == "green"
    assert by_type["color"]["basic_question"] == "What colour is the bus?"
    assert (release / by_type["color"]["image"]).is_file()
    # the native release keeps the basic question and its card counts the types against the paper's
    out = run_cli("export", "pairs", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    assert out.exit_code == 0, out.output
    card = (workspace.root / "releases" / "pairs-1" / "README.md").read_text()
    assert "| color | 1 | 50.0% | 221 |" in card and "| count | 1 | 50.0% | 348 |" in card


def test_a_pair_id_survives_any_number_of_round_trips(tmp_path):
    from cftools.kinds.cfmm.ingest import ingest_cfmm
    from cftools.release.export import ExportOptions, export_release
    from cftools.workspace import init_workspace

    images = tmp_path / "imgs"
    images.mkdir()
    PIL.Image.new("RGB", (12, 9), "red").save(images / "bus.png")
    current = tmp_path / "pairs.jsonl"
    current.write_text("".join(json.dumps(r) + "\n" for r in cfmm_lines("bus.png")))
    for trip in range(3):  # ingest, export --format cfmm, ingest the export elsewhere, ...
        workspace = init_workspace(tmp_path / f"ws{trip}")
        try:
            ingest_cfmm(workspace.store, current, images, licence="CC0-1.0")
            result = export_release(workspace, "pairs", "1", tmp_path / f"out{trip}",
                                    options=ExportOptions(fmt="cfmm", include_unverified=True, licence="CC0-1.0"))
        finally:
            workspace.close()
        current, images = result.path / "pairs.jsonl", result.path
        assert sorted(json.loads(line)["id"] for line in current.read_text().splitlines()) == ["p1", "p2"], trip


def test_ingest_cfmm_bad_record_names_file_and_line_and_changes_nothing(workspace, tmp_path, run_cli):
    lines = cfmm_lines("bus.png")
    lines[1]["cf_options"] = ["1", "2", "3"]
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = run_cli("ingest", "cfmm", source)
    assert out.exit_code != 0
    assert f"{source}" in out.output and "line 2" in out.output and "two options" in out.output
    with workspace.store.session() as session:
        assert session.execute(select(Item)).first() is None


# ---------------------------------------------------------------- scores


def outcome(i: int, group: str, basic: bool, cf: bool) -> dict:
    return {"id": str(i), "kind": "cfmm", "group": group, "original": {"correct": basic, "unknown": False},
            "counterfactual": {"correct": cf, "unknown": False}}


def test_the_totals_are_the_sum_of_per_type_percentages_as_the_paper_reports():
    outcomes = [outcome(1, "count", True, True), outcome(2, "count", True, False), outcome(3, "count", False, False),
                outcome(4, "color", True, True)]
    section = get_kind("cfmm").hooks.evaluate.summarize(outcomes)
    rows = {r["type"]: r for r in section["rows"]}
    # by hand: count acc_b 2/3, acc_c 1/3, acc+ 1/3; color 1, 1, 1
    assert rows["count"]["acc_b"]["value"] == pytest.approx(2 / 3)
    assert section["summed"]["acc_b"]["value"] == pytest.approx(2 / 3 + 1)      # 166.7 of 200
    assert section["summed"]["acc_c"]["value"] == pytest.approx(1 / 3 + 1)      # 133.3
    assert section["summed"]["acc_plus"]["value"] == pytest.approx(1 / 3 + 1)   # 133.3
    assert rows["total"]["acc_b"]["value"] == pytest.approx(3 / 4)              # plain accuracy over pairs: 75.0
    assert section["random_summed"]["acc_plus"]["value"] == pytest.approx(0.5)  # 25 + 25
    low, high = section["summed"]["acc_b"]["low"], section["summed"]["acc_b"]["high"]
    assert low <= 5 / 3 <= high
    from cftools.evaluate.report import render_markdown

    text = render_markdown({"model": "m", "mode": "rank", "release_name": "r", "items": 4, "questions": 8,
                            "template": "short_answer"}, {"cfmm": section})
    assert "| sum of types (of 200) | 4 | 166.7 [" in text
    assert "| random (chance) | – | 50.0 | – | 50.0 | – | 25.0 |" in text
    assert "| random summed (of 200) | – | 100.0 | – | 100.0 | – | 50.0 |" in text


class PositionModel:
    """A ranker whose choice follows the position: the first option always scores best."""

    needs_image = False

    def score_options(self, prompts):  # noqa: ANN001, ANN201
        return [[{"sum_logprob": -1.0 - i, "mean_loss": 1.0 + i, "n_tokens": 1} for i in range(len(p.options))]
                for p in prompts]

    def close(self) -> None:
        pass


class ContentModel(PositionModel):
    """A ranker that reads the content: it always prefers the option "green" or "2"."""

    def score_options(self, prompts):  # noqa: ANN001, ANN201
        return [[{"sum_logprob": -1.0 if o in ("green", "2") else -3.0, "mean_loss": 1.0 if o in ("green", "2")
                  else 3.0, "n_tokens": 1} for o in p.options] for p in prompts]


def cfmm_release(tmp_path: Path) -> Path:
    records = []
    for n, row in enumerate(cfmm_lines("x")):
        records.append({"id": row["id"], "kind": "cfmm", "group": row["type"], "split": "test", "verified": True,
                        "status": "accepted", "original_question": row["basic_question"],
                        "original_answer": row["basic_answer"], "answer_type": "other",
                        "question": row["cf_question"], "answer": row["cf_answer"],
                        "options": {"original": row["basic_options"], "counterfactual": row["cf_options"]},
                        "data": {"type": row["type"]}})
    return write_release(tmp_path / "cfmm-1", records, {r["id"]: png_bytes(i) for i, r in enumerate(records)})


def test_swap_options_reports_the_position_bias_of_a_position_following_model(tmp_path):
    release = cfmm_release(tmp_path)
    result = run_eval(release, "blind", options=EvalOptions(mode="rank", out_dir=tmp_path / "pos", swap_options=True),
                      answerer=PositionModel())
    bias = result.summary["position_bias"]
    assert bias == {"pairs": 4, "follows_position": 1.0, "same_option": 0.0, "first_position": 1.0}
    report = (tmp_path / "pos" / "report.md").read_text()
    assert "## Position bias (--swap-options)" in report and "| 4 | 100.0% | 0.0% | 100.0% |" in report
    # the scores count the questions in their first order only
    assert result.summary["cfmm"]["rows"][-1]["n"] == 2
    content = run_eval(release, "blind",
                       options=EvalOptions(mode="rank", out_dir=tmp_path / "content",
                                           swap_options=True), answerer=ContentModel())
    assert content.summary["position_bias"]["follows_position"] == 0.0
    assert content.summary["position_bias"]["same_option"] == 1.0


def test_cfmm_eval_ranks_by_loss_unless_told_otherwise_and_the_report_says_so(tmp_path):
    release = cfmm_release(tmp_path)
    result = run_eval(release, "blind", options=EvalOptions(out_dir=tmp_path / "default"), answerer=PositionModel())
    assert result.config["mode"] == "rank" and result.config["score"] == "mean-loss"
    report = (tmp_path / "default" / "report.md").read_text()
    assert "cfmm settings: mode rank in the paper, rank in this run (as in the paper)" in report


def test_prompt_variants_change_the_counterfactual_question_only(tmp_path):
    from cftools.evaluate.questions import PromptTemplates, Wording, build_questions
    from cftools.release.layout import load_records

    release = cfmm_release(tmp_path)
    records = load_records(release)
    plain, _ = build_questions(release, records, PromptTemplates(), "rank", False)
    for variant, marker in (("icl1", "Here is an example"), ("cot1", "Reasoning:")):
        asked, _ = build_questions(release, records, PromptTemplates(), "rank", False,
                                   wording=Wording(prompt_variant=variant))
        for before, after in zip(plain, asked):
            if before.which == "counterfactual":
                assert marker in after.prompt.text and after.prompt.text.endswith(before.prompt.text)
            else:
                assert after.prompt.text == before.prompt.text
    with pytest.raises(CftoolsError, match="unknown --prompt"):
        run_eval(release, "blind", options=EvalOptions(mode="rank", out_dir=tmp_path / "x", prompt_variant="cot9"),
                 answerer=PositionModel())


def test_the_cfmm_example_checks_exports_and_scores_blind_in_rank_mode(workspace, run_cli):
    """The demo's path over examples/cfmm (without the slow drafting): ingest, check, export --format cfmm, and
    the embedded text-only model in rank mode, printing the per-type table with the 600-point totals."""
    example = ROOT / "examples" / "cfmm"
    assert run_cli("ingest", "table", example / "sources.csv", "--images", example / "images").exit_code == 0
    out = run_cli("ingest", "cfmm", example / "pairs.jsonl", "--images", example / "images", "--json")
    assert json.loads(out.output)["items_added"] == 6 and json.loads(out.output)["missing_images"] == 0
    c.set_blind_ranker(lambda question, options: [0.0] * len(options))
    try:
        out = run_cli("check", "--no-embeddings", "--json")
    finally:
        c.set_blind_ranker(None)
    results = [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]
    assert [r["flags"] for r in results] == [[]] * 6  # the hand-written pairs are clean
    out = run_cli("export", "ex", "--version", "1", "--licence", "CC0-1.0", "--format", "cfmm", "--include-unverified")
    assert out.exit_code == 0, out.output
    assert len((workspace.root / "releases" / "ex-1-cfmm" / "ex.jsonl").read_text().splitlines()) == 6
    assert run_cli("export", "ex", "--version", "1", "--licence", "CC0-1.0", "--include-unverified").exit_code == 0
    out = run_cli("eval", workspace.root / "releases" / "ex-1", "--model", "blind", "--mode", "rank", "--quiet")
    assert out.exit_code == 0, out.output
    report = next((workspace.root / "runs").glob("*/report.md")).read_text()
    assert "| sum of types (of 600) | 6 |" in report and "| random summed (of 600) | – | 300.0 |" in report
