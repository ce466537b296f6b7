"""Verification in Label Studio against a real server (fixture `label_studio`, tests/fixtures_label_studio.py)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import PIL.Image
import pytest
from fixtures_label_studio import verify_result as result
from sqlalchemy import func, select, update

from killed_runs import held_after, wait_for

from cftools.annotate.projects import ImageLinks
from cftools.annotate.task_import import task_payloads, PushReport
from cftools.judgments import Answer, adjudicated, decide
from cftools.annotate.rules import agreement
from cftools.annotate.label_studio import LabelStudioServer, is_stale_snapshot, snapshot_title
from cftools.models import (
    ACCEPTED, CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, REJECTED, AgreementStat, AnnotationTask, Item, ItemEvent,
    Judgment,
)
from cftools.workspace import load_workspace

TOKEN_ENV = "CFTOOLS_TEST_LS_TOKEN"
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]


# ---------------------------------------------------------------- helpers


def configure(ws_root: Path, url: str, media_root: Path, prefix: str, extra: str = "") -> None:
    config = ws_root / "cftools.toml"
    text = config.read_text().replace('[label_studio]\n', f'[label_studio]\nurl = "{url}"\n'
                                      f'document_root = "{media_root}"\nproject_prefix = "{prefix}"\n{extra}', 1)
    text = text.replace('token_env = "LABEL_STUDIO_API_KEY"', f'token_env = "{TOKEN_ENV}"')
    config.write_text(text)


def make_items(run_cli, folder: Path, n: int, with_images: bool = True) -> Path:
    """N real C-VQA items with real PNG images, ingested through the CLI, then marked checked."""
    folder.mkdir(parents=True)
    rows = []
    for i in range(n):
        name = f"img{i}.png"
        if with_images:
            PIL.Image.new("RGB", (8 + i, 8), COLOURS[i % len(COLOURS)]).save(folder / name)
        rows.append({"img_path": f"images/{name}", "query": f"How many squares are there in picture {i}?",
                     "answer": "1", "new query": f"How many squares would there be if one more was added ({i})?",
                     "new answer": "2", "type": "direct"})
    return ingest_cvqa_table(run_cli, folder, rows)


def ingest_cvqa_table(run_cli, folder: Path, rows: list[dict]) -> Path:
    """ROWS (C-VQA CSV columns) written to FOLDER/items.csv and ingested through the CLI, images from FOLDER."""
    table = folder / "items.csv"
    with open(table, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = run_cli("ingest", "cvqa", table, "--images", folder)
    assert result.exit_code == 0, result.output
    return table


def mark_checked(store) -> list[int]:
    with store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
        return list(session.execute(select(Item.id).order_by(Item.id)).scalars())


@pytest.fixture
def ls_workspace(workspace, label_studio, monkeypatch, run_cli, request):
    """A workspace configured for the test server, with its own project prefix and images folder."""
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    configure(workspace.root, label_studio.url, label_studio.media_root, prefix)
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    ws = load_workspace(workspace.root)
    yield ws
    ws.close()


def pushed(run_cli, ls_workspace, label_studio, n: int, request) -> tuple[list[int], dict[int, int], int]:
    """N checked items pushed; returns item ids, item id -> task id, project id."""
    make_items(run_cli, label_studio.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", n)
    item_ids = mark_checked(ls_workspace.store)
    result = run_cli("annotate", "push", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["pushed"] == n
    tasks = task_map(ls_workspace.store)
    return item_ids, tasks, report["project_id"]


def task_map(store, purpose: str = "verify") -> dict[int, int]:
    with store.session() as session:
        return dict(session.execute(select(AnnotationTask.item_id, AnnotationTask.ls_task_id).where(
            AnnotationTask.purpose == purpose, AnnotationTask.state != "deleted")).all())




def statuses(store) -> dict[int, str]:
    with store.session() as session:
        return dict(session.execute(select(Item.id, Item.status)).all())


def pull_json(run_cli) -> dict:
    out = run_cli("annotate", "pull", "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


# ---------------------------------------------------------------- rules


def test_decision_rules_follow_the_issue():
    yes = Answer(related=True, answer_correct=True)
    assert decide(yes, yes).status == ACCEPTED
    assert decide(Answer(related=False, answer_correct=True), Answer(related=False, answer_correct=False)).status \
        == REJECTED
    wrong = Answer(related=True, answer_correct=False)
    assert decide(wrong, wrong).status == REJECTED
    same = decide(Answer(related=True, answer_correct=False, corrected_answer="Two."),
                  Answer(related=True, answer_correct=False, corrected_answer="2"))
    assert (same.status, same.corrected_answer) == (ACCEPTED, "2")
    assert decide(Answer(related=True, answer_correct=False, corrected_answer="3"),
                  Answer(related=True, answer_correct=False, corrected_answer="4")).status == NEEDS_ADJUDICATION
    assert decide(yes, wrong).status == NEEDS_ADJUDICATION
    assert decide(yes, Answer(related=False, answer_correct=True)).status == NEEDS_ADJUDICATION


def test_typed_corrections_are_normalised_like_model_answers():
    def corrected(text):
        return Answer(related=True, answer_correct=False, corrected_answer=text)

    decision = decide(corrected("Three"), corrected(" 3 \n"))
    assert (decision.status, decision.corrected_answer) == (ACCEPTED, "3")
    assert decide(corrected("The red car."), corrected("red car")).corrected_answer == "red car"
    assert adjudicated(Answer(decision="accept_corrected", corrected_answer=" Four\n")).corrected_answer == "4"


@pytest.mark.parametrize(("first", "second"), [(["ambiguous"], ["ambiguous"]),
                                               (["not_counterfactual"], ["not_counterfactual"]),
                                               (["ambiguous"], ["not_counterfactual", "ungrammatical"])])
def test_both_flagging_ambiguous_or_not_counterfactual_rejects(first, second):
    decision = decide(Answer(related=True, answer_correct=True, flags=first),
                      Answer(related=True, answer_correct=True, flags=second))
    assert decision.status == REJECTED


def test_one_flag_alone_does_not_reject():
    assert decide(Answer(related=True, answer_correct=True, flags=["ambiguous"]),
                  Answer(related=True, answer_correct=True)).status == ACCEPTED


def test_agreement_alpha_over_all_annotators_and_kappa_only_for_one_pair():
    def rated(correct):
        return Answer(related=True, answer_correct=correct == "y")

    two = {1: {"a": rated("y"), "b": rated("y")}, 2: {"a": rated("n"), "b": rated("n")},
           3: {"a": rated("y"), "b": rated("n")}, 4: {"a": rated("n"), "b": rated("n")}}
    stats = agreement(two)["answer_correct"]
    assert stats["n_items"] == 4 and stats["percent_agreement"] == pytest.approx(75.0)
    assert stats["krippendorff_alpha"] == pytest.approx(8 / 15)  # 1 - D_o/D_e = 1 - (2/8)/(30/56)
    assert stats["cohen_kappa"] == pytest.approx(0.5)

    rotating = {1: {"a": rated("y"), "b": rated("y")}, 2: {"b": rated("n"), "c": rated("n")},
                3: {"a": rated("y"), "c": rated("n")}, 4: {"a": rated("n"), "b": rated("n"), "c": rated("n")},
                5: {"c": rated("y")}}  # one rating: not an agreement item
    stats = agreement(rotating)["answer_correct"]
    assert stats["n_items"] == 4 and stats["n_pairs"] == 6
    assert stats["cohen_kappa"] is None  # not the same two people on every item
    assert stats["krippendorff_alpha"] is not None
    assert stats["percent_agreement"] == pytest.approx(100.0 * 5 / 6)


def test_agreement_matches_published_worked_examples():
    """Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", nominal example: 4 coders, 12 units, missing
    values, alpha = 0.743. Cohen's kappa, the 50-item yes/no example (20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no):
    p_o = 0.7, p_e = 0.5, kappa = 0.4."""
    from cftools.annotate.rules import _krippendorff_alpha

    table = {"A": "1 2 3 3 2 1 4 1 2 . . .", "B": "1 2 3 3 2 2 4 1 2 5 . 3",
             "C": ". 3 3 3 2 3 4 2 2 5 1 .", "D": "1 2 3 3 2 4 4 1 2 5 1 ."}
    units = [{coder: row.split()[u] for coder, row in table.items() if row.split()[u] != "."} for u in range(12)]
    assert _krippendorff_alpha([u for u in units if len(u) >= 2], sorted(table)) == pytest.approx(0.743, abs=5e-4)

    def rated(first, second):
        return {"a": Answer(related=True, answer_correct=first), "b": Answer(related=True, answer_correct=second)}

    plan = [(True, True)] * 20 + [(True, False)] * 5 + [(False, True)] * 10 + [(False, False)] * 15
    stats = agreement({n: rated(*pair) for n, pair in enumerate(plan)})["answer_correct"]
    assert stats["percent_agreement"] == pytest.approx(70.0) and stats["cohen_kappa"] == pytest.approx(0.4)


def test_only_old_pull_leftovers_are_stale():
    now = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)
    assert is_stale_snapshot(snapshot_title(now - timedelta(hours=2)), now)
    assert not is_stale_snapshot(snapshot_title(now - timedelta(minutes=5)), now)  # a pull running now
    assert not is_stale_snapshot("my own tab", now) and not is_stale_snapshot(None, now)
    assert not is_stale_snapshot(snapshot_title(now).replace("T", " at "), now)


# ---------------------------------------------------------------- push, pull, decisions, agreement


def test_push_pull_decide_and_agree(label_studio, ls_workspace, run_cli, request):
    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 6, request)
    store = ls_workspace.store
    assert set(statuses(store).values()) == {IN_REVIEW}
    with store.session() as session:
        rows = session.execute(select(AnnotationTask)).scalars().all()
        assert {(t.server, t.ls_project_id) for t in rows} == {(label_studio.url, project_id)}
        assert session.execute(select(func.count()).select_from(ItemEvent).where(
            ItemEvent.to_status == IN_REVIEW)).scalar_one() == 6

    # The task shows the item and its image is served by Label Studio from the document root.
    admin = label_studio.client()
    task = admin.tasks.get(id=tasks[item_ids[0]])
    assert task.meta["item_key"] == task.data["item_key"]
    assert task.data["question"].startswith("How many squares would there be")
    assert task.data["original_question"].startswith("How many squares are there")
    assert task.data["proposed_answer"] == "2"
    assert "details" not in task.data  # cftools' record of the source row is not shown to annotators
    assert task.data["image"].startswith("/data/local-files/?d=")
    image = httpx.get(label_studio.url + task.data["image"],
                      headers={"Authorization": f"Token {label_studio.admin_token}"})
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"

    one, two = (label_studio.client(email) for email in label_studio.annotators)
    plans = [  # (annotator 1, annotator 2)
        (result("yes", "yes"), result("yes", "yes")),                              # accepted
        (result("no", "no"), result("no", "no")),                                  # rejected: not related
        (result("yes", "no", "Three"), result("yes", "no", "3.", ["ambiguous"])),  # accepted, corrected
        (result("yes", "no"), result("yes", "no")),                                # rejected: no correction
        (result("yes", "yes"), result("yes", "no", "5")),                          # needs adjudication
        (result("yes", "yes"), None),                                              # one judgment: in review
    ]
    annotation_ids = {}
    for item_id, (first, second) in zip(item_ids, plans):
        one.annotations.create(id=tasks[item_id], result=first, lead_time=1.5)
        if second is not None:
            annotation_ids[item_id] = two.annotations.create(id=tasks[item_id], result=second).id

    report = pull_json(run_cli)
    assert report["judgments_added"] == 11 and report["invalid"] == [] and report["deleted_tasks"] == []
    got = statuses(store)
    assert [got[i] for i in item_ids] == [ACCEPTED, REJECTED, ACCEPTED, REJECTED, NEEDS_ADJUDICATION, IN_REVIEW]
    with store.session() as session:
        corrected = session.get(Item, item_ids[2])
        assert (corrected.answer, corrected.proposed_answer) == ("3", "2")  # "Three" read as a model answer
        history = session.execute(select(ItemEvent).where(ItemEvent.item_id == item_ids[2])
                                  .order_by(ItemEvent.id)).scalars().all()
        assert history[-1].detail["proposed_answer"] == "2" and history[-1].to_status == ACCEPTED
        judgments = session.execute(select(Judgment).order_by(Judgment.id)).scalars().all()
        assert {j.annotator for j in judgments} == set(label_studio.annotators)
        assert all(j.annotated_at is not None and j.ls_annotation_id for j in judgments)
        assert [j.flags for j in judgments if j.flags] == [["ambiguous"]]

    # Agreement over the five tasks with two judgments (hand-computed), stored for the data card.
    status = json.loads(run_cli("annotate", "status", "--json").output)
    figures = status["agreement"]["cvqa verification"]
    assert figures["related"]["n_pairs"] == 5
    assert figures["related"]["percent_agreement"] == pytest.approx(100.0)
    assert figures["related"]["cohen_kappa"] == pytest.approx(1.0)
    assert figures["answer_correct"]["percent_agreement"] == pytest.approx(80.0)
    assert figures["answer_correct"]["cohen_kappa"] == pytest.approx((0.8 - 0.56) / 0.44)
    assert figures["ambiguous"]["percent_agreement"] == pytest.approx(80.0)
    assert figures["ambiguous"]["cohen_kappa"] == pytest.approx(0.0)
    assert figures["answer_correct"]["krippendorff_alpha"] == pytest.approx(4 / 7)  # hand-computed, nominal
    assert figures["related"]["krippendorff_alpha"] == pytest.approx(1.0)  # full agreement, both labels used
    [project] = status["projects"]
    assert project["annotations"] == {"0": 0, "1": 1, "2+": 5}
    assert project["decisions"] == {ACCEPTED: 2, REJECTED: 2, NEEDS_ADJUDICATION: 1}
    assert status["annotators"]["ann1@example.com"]["judgments"] == 6
    assert status["annotators"]["ann2@example.com"]["judgments"] == 5
    with store.session() as session:
        stored = {s.question: s for s in session.execute(select(AgreementStat)).scalars()}
    assert stored["answer_correct"].percent_agreement == pytest.approx(80.0)
    assert stored["answer_correct"].n_pairs == 5
    human = run_cli("annotate", "status")
    assert human.exit_code == 0 and "Inter-annotator agreement" in human.output and "Annotators" in human.output

    # Re-pull: nothing new, nothing duplicated.
    with store.session() as session:
        events_before = session.execute(select(func.count()).select_from(ItemEvent)).scalar_one()
    again = pull_json(run_cli)
    assert (again["judgments_added"], again["judgments_updated"], again["judgments_unchanged"]) == (0, 0, 11)
    with store.session() as session:
        assert session.execute(select(func.count()).select_from(Judgment)).scalar_one() == 11
        assert session.execute(select(func.count()).select_from(ItemEvent)).scalar_one() == events_before

    # An edited annotation updates its judgment (and the decision); no new judgment.
    two.annotations.update(id=annotation_ids[item_ids[4]], result=result("yes", "yes"))
    edited = pull_json(run_cli)
    assert (edited["judgments_added"], edited["judgments_updated"]) == (0, 1)
    assert statuses(store)[item_ids[4]] == ACCEPTED

    # A third annotation by the same person is ignored and counted.
    one.annotations.create(id=tasks[item_ids[0]], result=result("no", "no"))
    third = pull_json(run_cli)
    assert third["ignored_same_annotator"] == 1 and third["judgments_added"] == 0
    assert statuses(store)[item_ids[0]] == ACCEPTED

    # Results that don't fit the config are rejected and reported, not silently dropped.
    task5 = tasks[item_ids[5]]
    two.annotations.create(id=task5, result=result("yes", "maybe"))
    two.annotations.create(id=task5, result=[{"from_name": "sentiment", "to_name": "image", "type": "choices",
                                              "value": {"choices": ["yes"]}}, *result("yes", "yes")])
    two.annotations.create(id=task5, result=result("yes", "yes")[1:])
    bad = pull_json(run_cli)
    reasons = sorted(b["reason"] for b in bad["invalid"])
    assert len(reasons) == 3
    assert any("'maybe'" in r for r in reasons)
    assert any("unknown from_name 'sentiment'" in r for r in reasons)
    assert any("required choice 'related' is missing" in r for r in reasons)
    assert all(b["task"] == task5 for b in bad["invalid"])
    assert statuses(store)[item_ids[5]] == IN_REVIEW
    human = run_cli("annotate", "pull")
    assert human.exit_code == 0 and "rejected annotation" in human.output
    # The token reached no row of the store.
    for db_file in ls_workspace.root.glob("cftools.db*"):
        assert label_studio.admin_token.encode() not in db_file.read_bytes()


def test_the_examples_items_with_images_pass_the_checks_and_reach_annotators(label_studio, ls_workspace, run_cli,
                                                                          request):
    """What the README's main command pushes when a server is configured: the six drawn-shape items."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    images = label_studio.media_root / request.node.name
    shutil.copytree(examples / "vqav2" / "images", images)
    assert run_cli("ingest", "cvqa", examples / "cvqa" / "drawn-shapes.csv", "--images", images).exit_code == 0
    assert run_cli("check").exit_code == 0
    assert set(statuses(ls_workspace.store).values()) == {CHECKED}
    report = json.loads(run_cli("annotate", "push", "--json").output)
    assert (report["pushed"], report["skipped_no_image"]) == (6, 0)
    headers = {"Authorization": f"Token {label_studio.admin_token}"}
    for task_id in task_map(ls_workspace.store).values():
        image = label_studio.client().tasks.get(id=task_id).data["image"]
        assert httpx.get(label_studio.url + image, headers=headers).status_code == 200


def test_push_again_pushes_only_new_items(label_studio, ls_workspace, run_cli, request):
    make_items(run_cli, label_studio.media_root / f"{request.node.name}", 5)
    mark_checked(ls_workspace.store)
    first = json.loads(run_cli("annotate", "push", "--limit", "2", "--json").output)
    assert first["pushed"] == 2
    second = run_cli("annotate", "push")
    assert second.exit_code == 0 and "Pushed 3" in second.output and "/projects/" in second.output
    assert "shared server: not blind" in second.output  # one shared server: never called blind
    third = json.loads(run_cli("annotate", "push", "--json").output)
    assert third["pushed"] == 0 and third["project_id"] == first["project_id"]
    admin = label_studio.client()
    assert admin.projects.get(id=first["project_id"]).task_number == 5
    assert len(set(task_map(ls_workspace.store).values())) == 5


def test_items_without_image_are_skipped_and_counted(label_studio, ls_workspace, run_cli, tmp_path):
    make_items(run_cli, tmp_path / "noimg", 2, with_images=False)
    mark_checked(ls_workspace.store)
    report = json.loads(run_cli("annotate", "push", "--json").output)
    assert (report["pushed"], report["skipped_no_image"]) == (0, 2)
    assert set(statuses(ls_workspace.store).values()) == {CHECKED}
    forced = json.loads(run_cli("annotate", "push", "--allow-missing-images", "--json").output)
    assert forced["pushed"] == 2


def test_data_uri_images_when_asked(label_studio, ls_workspace, run_cli, tmp_path):
    make_items(run_cli, tmp_path / "elsewhere", 1)  # outside the document root
    mark_checked(ls_workspace.store)
    outside = json.loads(run_cli("annotate", "push", "--json").output)
    assert (outside["pushed"], outside["skipped_outside_root"]) == (0, 1)
    report = json.loads(run_cli("annotate", "push", "--data-uri", "--json").output)
    assert report["pushed"] == 1
    [task_id] = task_map(ls_workspace.store).values()
    assert label_studio.client().tasks.get(id=task_id).data["image"].startswith("data:image/png;base64,")


# ---------------------------------------------------------------- adjudication


def test_adjudication_round_trip(label_studio, ls_workspace, run_cli, request):
    item_ids, tasks, _ = pushed(run_cli, ls_workspace, label_studio, 2, request)
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    for item_id in item_ids:
        one.annotations.create(id=tasks[item_id], result=result("yes", "yes"))
        two.annotations.create(id=tasks[item_id], result=result("yes", "no", "4", ["ungrammatical"]))
    pull_json(run_cli)
    assert set(statuses(ls_workspace.store).values()) == {NEEDS_ADJUDICATION}

    report = json.loads(run_cli("annotate", "push", "--adjudicate", "--json").output)
    assert report["pushed"] == 2 and report["purpose"] == "adjudicate"
    adjudication = task_map(ls_workspace.store, "adjudicate")
    task = label_studio.client().tasks.get(id=adjudication[item_ids[0]])
    # the judges by their place in this task only: no email on the adjudicator's screen (issue 43)
    assert task.data["judgment_1"].startswith("Person 1: related=yes, answer correct=yes")
    assert task.data["judgment_2"].startswith("Person 2: ") and "@" not in task.data["judgment_2"]
    assert "corrected answer='4'" in task.data["judgment_2"] and "ungrammatical" in task.data["judgment_2"]
    again = json.loads(run_cli("annotate", "push", "--adjudicate", "--json").output)
    assert again["pushed"] == 0

    judge = label_studio.client(label_studio.adjudicator)
    decision = lambda value, text=None: [  # noqa: E731
        {"from_name": "decision", "to_name": "question", "type": "choices", "value": {"choices": [value]}},
        *([{"from_name": "corrected_answer", "to_name": "proposed_answer", "type": "textarea",
            "value": {"text": [text]}}] if text else [])]
    judge.annotations.create(id=adjudication[item_ids[0]], result=decision("accept_corrected", "4"))
    judge.annotations.create(id=adjudication[item_ids[1]], result=decision("reject"))
    pulled = pull_json(run_cli)
    assert pulled["decisions"] == {"adjudicated accepted": 1, "adjudicated rejected": 1}
    got = statuses(ls_workspace.store)
    assert [got[i] for i in item_ids] == [ACCEPTED, REJECTED]
    with ls_workspace.store.session() as session:
        item = session.get(Item, item_ids[0])
        assert (item.answer, item.proposed_answer) == ("4", "2")
        judgment = session.execute(select(Judgment).join(AnnotationTask).where(
            AnnotationTask.purpose == "adjudicate", AnnotationTask.item_id == item_ids[0])).scalar_one()
        assert (judgment.annotator, judgment.decision) == (label_studio.adjudicator, "accept_corrected")
    # A re-pull keeps the adjudicated outcome.
    pull_json(run_cli)
    assert [statuses(ls_workspace.store)[i] for i in item_ids] == [ACCEPTED, REJECTED]


# ---------------------------------------------------------------- faults


def test_server_down_is_one_line_and_nothing_is_pushed(label_studio, ls_workspace, run_cli, request):
    from fixtures_label_studio import free_port

    make_items(run_cli, label_studio.media_root / request.node.name, 2)
    mark_checked(ls_workspace.store)
    config = ls_workspace.root / "cftools.toml"
    down = f"http://127.0.0.1:{free_port()}"
    config.write_text(config.read_text().replace(label_studio.url, down))
    for command in (("annotate", "push"), ("annotate", "pull")):
        out = run_cli(*command)
        assert out.exit_code == 1
        assert f"cannot reach Label Studio at {down}" in out.output
        assert len(out.output.strip().splitlines()) == 1
    assert set(statuses(ls_workspace.store).values()) == {CHECKED}
    with ls_workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(AnnotationTask)).scalar_one() == 0


def test_no_server_configured(workspace, run_cli, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    quiet = run_cli("annotate", "push", "--if-configured")
    assert quiet.exit_code == 0 and "not configured" in quiet.output and "label-studio start" in quiet.output
    assert "set [label_studio] url in" in " ".join(quiet.output.split())  # the section name is not eaten as markup
    loud = run_cli("annotate", "push")
    assert loud.exit_code == 1 and "no Label Studio server configured" in loud.output


def test_wrong_token_never_shows_the_token(label_studio, ls_workspace, run_cli, monkeypatch, request):
    make_items(run_cli, label_studio.media_root / request.node.name, 2)
    mark_checked(ls_workspace.store)
    secret = "wrong-secret-token-" + uuid.uuid4().hex
    monkeypatch.setenv(TOKEN_ENV, secret)
    for command in (("annotate", "push"), ("annotate", "pull")):
        out = run_cli(*command)
        assert out.exit_code == 1
        assert secret not in out.output and secret[-12:] not in out.output
        assert "refused the token" in out.output and TOKEN_ENV in out.output
        assert len(out.output.strip().splitlines()) == 1
    assert set(statuses(ls_workspace.store).values()) == {CHECKED}
    with ls_workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(AnnotationTask)).scalar_one() == 0
    assert secret.encode() not in (ls_workspace.root / "cftools.db").read_bytes()


def test_push_killed_after_import_resumes_without_duplicates(label_studio, ls_workspace, run_cli, request):
    """The state a kill between an import and its store write leaves: tasks on the server, none in the store."""
    make_items(run_cli, label_studio.media_root / request.node.name, 5)
    mark_checked(ls_workspace.store)
    # A first, complete push of two items, so the project exists and has recorded tasks.
    assert json.loads(run_cli("annotate", "push", "--limit", "2", "--json").output)["pushed"] == 2
    project_id = json.loads(run_cli("annotate", "push", "--limit", "1", "--json").output)["project_id"]
    # Import the next two items' tasks exactly as push does, and stop before recording them.
    server = LabelStudioServer(label_studio.url, label_studio.admin_token)
    with ls_workspace.store.session() as session:
        items = session.execute(select(Item).where(Item.status == CHECKED).order_by(Item.id).limit(2)).scalars().all()
        payloads = task_payloads(session, items, "verify", ImageLinks.from_config(ls_workspace), False,
                                 PushReport("verify", "cvqa"))
    server.import_tasks(project_id, [task for _, task in payloads])
    server.close()
    assert set(statuses(ls_workspace.store).values()) == {IN_REVIEW, CHECKED}

    resumed = json.loads(run_cli("annotate", "push", "--json").output)
    assert (resumed["reconciled"], resumed["pushed"]) == (2, 0)
    assert set(statuses(ls_workspace.store).values()) == {IN_REVIEW}
    assert label_studio.client().projects.get(id=project_id).task_number == 5
    links = task_map(ls_workspace.store)
    assert len(links) == 5 and len(set(links.values())) == 5
    with ls_workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(ItemEvent).where(
            ItemEvent.detail["how"].as_string() == "reconciled")).scalar_one() == 2
    # Pulling sees every task once and finds each carries its own item.
    assert pull_json(run_cli)["mismatched"] == []


def test_push_killed_by_sigkill_resumes_without_duplicates(label_studio, ls_workspace, run_cli, request):
    """A real `cftools annotate push` process killed mid-way; the rerun finishes with one task per item."""
    n = 150
    make_items(run_cli, label_studio.media_root / request.node.name, n)
    mark_checked(ls_workspace.store)
    config = ls_workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace("[label_studio]\n", "[label_studio]\nbatch_size = 2\n", 1))
    command = [sys.executable, "-m", "cftools.cli", "-w", str(ls_workspace.root), "annotate", "push", "--json"]
    # held for good as it starts its fourth batch (three imported and linked): killed there, not at a polled moment
    held = subprocess.Popen(held_after("cftools.annotate.assign:import_for", 3, "-w", ls_workspace.root,
                                       "annotate", "push", "--json"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: held.poll() is not None or linked_tasks(ls_workspace.store) == 6, "three batches linked")
        assert held.poll() is None, held.stderr.read().decode()[-2000:]
    finally:
        held.kill()
        held.wait()
        held.stderr.close()
    killed_at = linked_tasks(ls_workspace.store)
    assert killed_at == 6
    # Every linked item moved to in_review in the same transaction as its link.
    assert list(statuses(ls_workspace.store).values()).count(IN_REVIEW) == killed_at

    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    links = task_map(ls_workspace.store)
    assert len(links) == n and len(set(links.values())) == n
    assert set(statuses(ls_workspace.store).values()) == {IN_REVIEW}
    project_id = json.loads(run_cli("annotate", "push", "--json").output)["project_id"]
    assert label_studio.client().projects.get(id=project_id).task_number == n  # no task imported twice


def linked_tasks(store) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(AnnotationTask)).scalar_one()


def test_pull_cleans_up_its_export_views_and_snapshots(label_studio, ls_workspace, run_cli, request):
    """Pull exports through temporary views and snapshots: none stay, and those a killed pull left are removed."""
    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 2, request)
    http = httpx.Client(base_url=label_studio.url, headers={"Authorization": f"Token {label_studio.admin_token}"})
    old, running = snapshot_title(datetime.now(timezone.utc) - timedelta(hours=2)), snapshot_title()
    created = [  # left by a killed pull two hours ago; of someone else's pull running now; a person's own tab
        http.post("/api/dm/views/", json={"project": project_id, "data": {"title": old},
                                          "selected_items": {"all": False, "included": list(tasks.values())}}),
        http.post(f"/api/projects/{project_id}/exports/", json={"title": old}),
        http.post("/api/dm/views/", json={"project": project_id, "data": {"title": running}}),
        http.post(f"/api/projects/{project_id}/exports/", json={"title": running}),
        http.post("/api/dm/views/", json={"project": project_id, "data": {"title": "my own tab"}})]
    assert [r.status_code for r in created] == [201] * 5
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    for item_id in item_ids:
        one.annotations.create(id=tasks[item_id], result=result("yes", "yes"))
        two.annotations.create(id=tasks[item_id], result=result("yes", "yes"))

    assert pull_json(run_cli)["judgments_added"] == 4
    assert set(statuses(ls_workspace.store).values()) == {ACCEPTED}
    views = http.get("/api/dm/views/", params={"project": project_id}).json()
    assert sorted(v["data"]["title"] for v in views) == sorted([running, "my own tab", "Tasks"])  # "Tasks": the tab cftools sets up
    assert [e["title"] for e in http.get(f"/api/projects/{project_id}/exports/").json()] == [running]
    http.close()


def test_pull_in_several_snapshots_sees_each_task_once(label_studio, ls_workspace, run_cli, request, monkeypatch):
    monkeypatch.setattr("cftools.annotate.label_studio.EXPORT_CHUNK", 2)
    item_ids, tasks, _ = pushed(run_cli, ls_workspace, label_studio, 5, request)
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    for item_id in item_ids:
        one.annotations.create(id=tasks[item_id], result=result("yes", "yes"))
        two.annotations.create(id=tasks[item_id], result=result("no", "no"))
    report = pull_json(run_cli)
    assert (report["tasks"], report["annotations"], report["judgments_added"]) == (5, 10, 10)
    assert report["deleted_tasks"] == [] and report["mismatched"] == []
    assert set(statuses(ls_workspace.store).values()) == {NEEDS_ADJUDICATION}


def test_a_snapshot_still_being_built_is_polled(label_studio, ls_workspace, run_cli, request):
    """With a job queue the server answers before the snapshot is built: pull polls its status."""
    _, _, project_id = pushed(run_cli, ls_workspace, label_studio, 1, request)
    server = LabelStudioServer(label_studio.url, label_studio.admin_token)
    try:
        export = server._http_client().post(f"/api/projects/{project_id}/exports/", json={
            "title": snapshot_title(datetime.now(timezone.utc) - timedelta(hours=2))})
        # As a queued job would be reported: the status is read back from the server until it is complete.
        server._wait_for_snapshot(project_id, export.json()["id"], "queued")
        assert server.remove_stale_snapshots(project_id) == 1
    finally:
        server.close()


def test_a_task_missing_from_a_snapshot_is_not_deleted(label_studio, ls_workspace, run_cli, request, monkeypatch):
    """A failed page or time-out drops a task from the export: the server still has it, so nothing is deleted."""
    from cftools.annotate.label_studio import LabelStudioServer

    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 3, request)
    lost = tasks[item_ids[1]]
    snapshot = LabelStudioServer._snapshot
    monkeypatch.setattr(LabelStudioServer, "_snapshot", lambda self, project, ids: [
        t for t in snapshot(self, project, ids) if t["id"] != lost])
    report = pull_json(run_cli)
    assert report["deleted_tasks"] == []
    assert report["missing_from_export"] == [{"project": project_id, "task": lost}]
    assert set(statuses(ls_workspace.store).values()) == {IN_REVIEW}
    assert lost in task_map(ls_workspace.store).values()


def test_deleted_tasks_are_reported_and_items_go_back(label_studio, ls_workspace, run_cli, request):
    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 3, request)
    label_studio.client().tasks.delete(id=tasks[item_ids[1]])
    report = pull_json(run_cli)
    assert [(d["task"], d["item_status"]) for d in report["deleted_tasks"]] == [(tasks[item_ids[1]], CHECKED)]
    got = statuses(ls_workspace.store)
    assert [got[i] for i in item_ids] == [IN_REVIEW, CHECKED, IN_REVIEW]
    human = run_cli("annotate", "pull")
    assert human.exit_code == 0  # already marked: not reported twice
    again = json.loads(run_cli("annotate", "push", "--json").output)
    assert again["pushed"] == 1 and again["project_id"] == project_id
    assert statuses(ls_workspace.store)[item_ids[1]] == IN_REVIEW


def test_push_and_pull_show_their_counts_with_an_eta_on_a_terminal_and_nothing_quiet_or_json(
        label_studio, ls_workspace, run_cli, request, monkeypatch):
    from test_annotate_cli import terminal_stderr

    drawn = terminal_stderr(monkeypatch)
    make_items(run_cli, label_studio.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 3)
    mark_checked(ls_workspace.store)
    quiet = run_cli("annotate", "push", "--limit", "1", "--quiet")
    assert quiet.exit_code == 0 and "Pushed 1" in quiet.output, quiet.output
    assert "pushing tasks" not in drawn.getvalue() and "eta" not in drawn.getvalue()
    assert run_cli("annotate", "push").exit_code == 0
    assert "pushing tasks" in drawn.getvalue() and "2/2" in drawn.getvalue() and "eta" in drawn.getvalue()
    for args in (("--quiet",), ("--json",)):
        drawn.seek(0)
        drawn.truncate()
        assert run_cli("annotate", "pull", *args).exit_code == 0
        assert "projects pulled" not in drawn.getvalue() and "eta" not in drawn.getvalue(), args
    assert run_cli("annotate", "pull").exit_code == 0
    shown = drawn.getvalue()
    assert "projects pulled" in shown and "1/1" in shown and "tasks of project" in shown and "3/3" in shown
    assert "eta" in shown


def next_task_for(label_studio, email: str, project_id: int) -> int | None:
    """The task Label Studio's "Label All Tasks" hands EMAIL next in the project (None: nothing left for them)."""
    reply = httpx.get(f"{label_studio.url}/api/projects/{project_id}/next",
                      headers={"Authorization": f"Token {label_studio.token(email)}"})
    return reply.json()["id"] if reply.status_code == 200 else None


def test_an_unusable_submission_in_the_shared_project_leaves_its_task_open_to_one_more_person(
        label_studio, ls_workspace, run_cli, request):
    # Label Studio counts every submission toward the task's overlap, usable or not: a task with one usable
    # judgment and one that is not (or two by the same person) was never handed out again, and its item stayed
    # in review forever while `annotate status` reported no item without an open task.
    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 2, request)
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    one.annotations.create(id=tasks[item_ids[0]], result=result("yes", "yes"))
    two.annotations.create(id=tasks[item_ids[0]], result=result("yes", "maybe"))  # not a choice of the config
    one.annotations.create(id=tasks[item_ids[1]], result=result("yes", "yes"))
    one.annotations.create(id=tasks[item_ids[1]], result=result("yes", "yes"))  # the same person twice
    report = pull_json(run_cli)
    assert len(report["invalid"]) == 1 and report["ignored_same_annotator"] == 1
    assert statuses(ls_workspace.store)[item_ids[0]] == IN_REVIEW
    assert sorted((r["task"], r["annotators"]) for r in report["reopened"]) == [
        (tasks[item_ids[0]], 3), (tasks[item_ids[1]], 3)]
    assert "offered to one more person" in run_cli("annotate", "pull").output
    judge = label_studio.adjudicator
    first = next_task_for(label_studio, judge, project_id)
    assert first in (tasks[item_ids[0]], tasks[item_ids[1]])
    label_studio.client(judge).annotations.create(id=first, result=result("yes", "yes"))
    second = next_task_for(label_studio, judge, project_id)
    assert {first, second} == {tasks[item_ids[0]], tasks[item_ids[1]]}
    label_studio.client(judge).annotations.create(id=second, result=result("yes", "yes"))
    pull_json(run_cli)
    assert [statuses(ls_workspace.store)[i] for i in item_ids] == [ACCEPTED, ACCEPTED]
    # The shared project's instructions promise no return to the submitter (no one is assigned there).
    instructions = label_studio.client().projects.get(id=project_id).expert_instruction
    assert "comes back to you" not in instructions and "one more person" in instructions


def test_in_the_shared_project_a_judge_of_the_item_cannot_settle_its_disagreement(
        label_studio, ls_workspace, run_cli, request):
    # The adjudication project is open to everyone on a shared server: one of the two people who disagreed could
    # adjudicate their own disagreement, and it decided the item.
    item_ids, tasks, _ = pushed(run_cli, ls_workspace, label_studio, 1, request)
    first, second = label_studio.annotators
    label_studio.client(first).annotations.create(id=tasks[item_ids[0]], result=result("yes", "yes"))
    label_studio.client(second).annotations.create(id=tasks[item_ids[0]], result=result("yes", "no", "5"))
    pull_json(run_cli)
    pushed_adjudication = json.loads(run_cli("annotate", "push", "--adjudicate", "--json").output)
    adjudication = task_map(ls_workspace.store, "adjudicate")[item_ids[0]]
    accept = [{"from_name": "decision", "to_name": "question", "type": "choices", "value": {"choices": ["accept"]}}]
    label_studio.client(first).annotations.create(id=adjudication, result=accept)
    report = pull_json(run_cli)
    assert statuses(ls_workspace.store)[item_ids[0]] == NEEDS_ADJUDICATION
    [refused] = report["refused"]
    assert refused["task"] == adjudication and first in refused["reason"] and "judged" in refused["reason"]
    assert next_task_for(label_studio, label_studio.adjudicator, pushed_adjudication["project_id"]) == adjudication
    label_studio.client(label_studio.adjudicator).annotations.create(id=adjudication, result=accept)
    assert pull_json(run_cli)["decisions"] == {"adjudicated accepted": 1}
    assert statuses(ls_workspace.store)[item_ids[0]] == ACCEPTED
    instructions = label_studio.client().projects.get(id=pushed_adjudication["project_id"]).expert_instruction
    assert "If you judged this item yourself" in instructions


def test_a_shared_project_made_with_the_old_promise_is_rewritten_at_the_next_pull(
        label_studio, ls_workspace, run_cli, request):
    # Projects made before the shared project's instructions told the truth kept promising a return.
    item_ids, tasks, project_id = pushed(run_cli, ls_workspace, label_studio, 1, request)
    admin = label_studio.client()
    old = admin.projects.get(id=project_id).expert_instruction.replace(
        "is not counted, and the task is offered to one more person", "comes back to you with the reason")
    admin.projects.update(id=project_id, expert_instruction=old)
    pull_json(run_cli)
    shown = admin.projects.get(id=project_id).expert_instruction
    assert "comes back to you" not in shown and "offered to one more person" in shown
