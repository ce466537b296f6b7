"""The CFMM `author` task through a real Label Studio server: images pushed, pairs written by annotators, pulled
into draft items that then go through check and two-annotator verification (issue 14)."""

from __future__ import annotations

import json
import uuid

import PIL.Image
import pytest
from sqlalchemy import select

from test_annotate import TOKEN_ENV, configure
from cftools.kinds.cfmm import checks as cfmm_checks
from cftools.models import DRAFT, Image, Item, SourceQuestion
from cftools.workspace import load_workspace

FACTS = [("bus.png", "What color is the bus?", "red"), ("dogs.png", "How many dogs are there?", "2"),
         ("wall.png", "Is there a wall?", "yes")]


@pytest.fixture
def author_workspace(workspace, label_studio, monkeypatch, run_cli, request):
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    configure(workspace.root, label_studio.url, label_studio.media_root, prefix)
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    folder = label_studio.media_root / f"{request.node.name[:30]}-{uuid.uuid4().hex[:6]}"
    folder.mkdir(parents=True)
    rows = ["image,question,answer"]
    for n, (name, question, answer) in enumerate(FACTS):
        PIL.Image.new("RGB", (9 + n, 9), (60 * n, 90, 30)).save(folder / name)
        rows.append(f"{name},{question},{answer}")
    (folder / "facts.csv").write_text("\n".join(rows) + "\n")
    assert run_cli("ingest", "table", folder / "facts.csv", "--images", folder).exit_code == 0
    ws = load_workspace(workspace.root)
    yield ws
    ws.close()


def text(name: str, value: str) -> dict:
    return {"from_name": name, "to_name": "image", "type": "textarea", "value": {"text": [value]}}


def choice(name: str, value: str) -> dict:
    return {"from_name": name, "to_name": "image", "type": "choices", "value": {"choices": [value]}}


def written_pair(kind: str, basic: str, basic_options: tuple, basic_correct: str, cf: str, cf_options: tuple,
                 cf_correct: str) -> list[dict]:
    return [choice("type", kind), text("basic_question", basic), text("basic_option_a", basic_options[0]),
            text("basic_option_b", basic_options[1]), choice("basic_correct", basic_correct), text("cf_question", cf),
            text("cf_option_a", cf_options[0]), text("cf_option_b", cf_options[1]), choice("cf_correct", cf_correct)]


def verify(related: str, basic_correct: str, counterfactual: str) -> list[dict]:
    """A CFMM verification: related, the basic verdict, the counterfactual answer picked among the options."""
    return [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": [related]}},
            {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices",
             "value": {"choices": [basic_correct]}},
            {"from_name": "cf_answer", "to_name": "question", "type": "choices", "value": {"choices": [counterfactual]}}]


def test_author_task_round_trip_into_checked_and_verified_items(label_studio, author_workspace, run_cli):
    store = author_workspace.store
    out = run_cli("annotate", "push", "--kind", "cfmm", "--task", "author", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["pushed"] == 3 and report["purpose"] == "author"
    again = json.loads(run_cli("annotate", "push", "--kind", "cfmm", "--task", "author", "--json").output)
    assert again["pushed"] == 0 and again["project_id"] == report["project_id"]  # the server remembers

    admin = label_studio.client()
    with store.session() as session:
        names = {img.sha256: img.path.rsplit("/", 1)[1] for img in session.execute(select(Image)).scalars()}
    tasks = {names[t.meta["image_sha256"]]: t for t in admin.tasks.list(project=report["project_id"])}
    assert set(tasks) == {"bus.png", "dogs.png", "wall.png"}
    assert "What color is the bus? " in tasks["bus.png"].data["sources"]
    assert tasks["bus.png"].data["image"].startswith("/data/local-files/?d=")

    one, two = (label_studio.client(email) for email in label_studio.annotators)
    one.annotations.create(id=tasks["bus.png"].id, result=written_pair(
        "color", "What colour is the bus?", ("red", "green"), "A",
        "If the bus were repainted in the colour of grass, what colour would the bus be?", ("red", "green"), "B"))
    two.annotations.create(id=tasks["bus.png"].id, result=written_pair(
        "size", "Which is bigger, the bus or the car?", ("the bus", "the car"), "A",
        "If the bus shrank to the size of a toy, which would be bigger, the bus or the car?",
        ("the bus", "the car"), "B"))
    one.annotations.create(id=tasks["wall.png"].id, result=[choice("type", "none")])
    one.annotations.create(id=tasks["dogs.png"].id, result=written_pair(
        "count", "How many dogs are there?", ("2", "2"), "A", "If one dog left, how many dogs?", ("1", "2"), "A"))

    out = run_cli("annotate", "pull", "--json")
    assert out.exit_code == 0, out.output
    authoring = json.loads(out.output)["authoring"]
    assert (authoring["items_added"], authoring["no_suitable_type"], authoring["submissions"]) == (2, 1, 4)
    assert authoring["refused"] == []
    assert [bad["reason"] for bad in authoring["invalid"]] == ["the two basic options are the same ('2')"]
    # the invalid submission goes back to its author: a new task for the same image, saying why
    assert [r["task"] for r in authoring["returned"][label_studio.annotators[0]]] == [tasks["dogs.png"].id]
    returned = [t for t in admin.tasks.list(project=report["project_id"]) if t.meta.get("returns_annotation")]
    assert len(returned) == 1 and returned[0].meta["returned_to"] == label_studio.annotators[0]
    assert returned[0].meta["image_sha256"] == tasks["dogs.png"].meta["image_sha256"]
    assert "the two basic options are the same ('2')" in returned[0].data["returned"]
    one.annotations.create(id=returned[0].id, result=written_pair(
        "count", "How many dogs are there?", ("2", "3"), "A", "If one dog left, how many dogs would there be?",
        ("1", "2"), "A"))
    with store.session() as session:
        items = {i.group: i for i in session.execute(select(Item).where(Item.kind == "cfmm")).scalars()}
        color = items["color"]
        source = session.get(SourceQuestion, color.source_id)
        image = session.get(Image, source.image_id)
    assert set(items) == {"color", "size"} and {i.status for i in items.values()} == {DRAFT}
    assert (color.question, color.answer, color.origin) == (
        "If the bus were repainted in the colour of grass, what colour would the bus be?", "green", "authored")
    assert color.data["options"] == {"original": ["red", "green"], "counterfactual": ["red", "green"]}
    assert color.data["basic_answer"] == "red" and color.data["author"] == label_studio.annotators[0]
    assert image.path.endswith("bus.png")
    again = json.loads(run_cli("annotate", "pull", "--json").output)["authoring"]
    assert again["items_added"] == 1 and again["already_pulled"] == 2 and again["returned"] == {}  # the rewrite
    with store.session() as session:
        items = {i.group: i for i in session.execute(select(Item).where(Item.kind == "cfmm")).scalars()}

    # the drafts go on like any other item: check, then two annotators; ambiguity is their judgment
    cfmm_checks.set_blind_ranker(lambda question, options: [0.0] * len(options))  # a model with no preference
    try:
        out = run_cli("check", "--no-embeddings", "--json")
    finally:
        cfmm_checks.set_blind_ranker(None)
    assert out.exit_code == 0, out.output
    checked = [json.loads(line) for line in out.output.splitlines() if line.startswith("{")]
    assert {(r["group"], r["status"]) for r in checked} >= {("color", "checked"), ("size", "checked")}, checked
    out = run_cli("annotate", "push", "--kind", "cfmm", "--json")
    assert out.exit_code == 0, out.output
    verify_project = json.loads(out.output)["project_id"]
    vtasks = {t.data["type"]: t for t in admin.tasks.list(project=verify_project)}
    assert vtasks["color"].data["basic_question"] == "What colour is the bus?"
    assert "green  ✓ correct" in vtasks["color"].data["counterfactual_options"]
    assert [c["value"] for c in vtasks["color"].data["cf_choices"]] == ["red", "green", "cannot be determined"]
    one.annotations.create(id=vtasks["color"].id, result=verify("yes", "yes", "green"))
    two.annotations.create(id=vtasks["color"].id, result=verify("yes", "yes", "green"))
    one.annotations.create(id=vtasks["size"].id, result=verify("yes", "yes", "cannot be determined"))
    two.annotations.create(id=vtasks["size"].id, result=verify("yes", "yes", "cannot be determined"))
    assert run_cli("annotate", "pull", "--json").exit_code == 0
    with store.session() as session:
        status = {i.group: i.status for i in session.execute(select(Item).where(Item.kind == "cfmm")).scalars()}
    assert (status["color"], status["size"]) == ("accepted", "rejected")  # size: both said it cannot be determined
