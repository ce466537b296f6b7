"""Control items and acting on a person's accuracy, against real Label Studio servers (issue 33): controls are served
like any other task, scored at pull and never counted toward their item; a person whose accuracy lies wholly below
the minimum is paused until `annotate resume`; `annotate requeue` sends their items to others, keeping their
judgments on record uncounted; the release carries the figures.

One module-scoped world on the session's `people_servers` (three people, each on their own server), worked through
by simulated people (tests/simulated_annotators.py) over the real API (tests/simulated_people_ls.py): ann1 is
careful, ann2 always agrees with the proposed answer, adj is careful. The tests run in order on that world."""

from __future__ import annotations

import csv
import json
import re
import uuid
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from fixtures_label_studio import PeopleWorld
from simulated_annotators import always_agrees, careful
from simulated_people_ls import work_through
from test_annotate import ingest_cvqa_table
from test_browser import PANEL, browser, log_in, open_task  # noqa: F401 (fixture)

from cftools.annotate.controls import CONTROL, controls_due, load_controls
from cftools.boundary import Boundary
from cftools.cli import main
from cftools.errors import InputError
from cftools.models import (
    ACCEPTED, CHECKED, CONTROL as CONTROL_STATUS, AnnotationTask, ControlItem, Item, ItemEvent, Judgment,
    PersonPause, TaskOutcome,
)
from cftools.workspace import init_workspace

ANN1, ANN2, ADJ = "ann1@example.com", "ann2@example.com", "adj@example.com"
OPTIONS = ("1", "2", "3", "4")
TRUTH = "2"  # the right answer of every item and control here
N_CONTROLS = 8  # 1 whose proposed answer is right, 7 whose is wrong: always agreeing scores at most 1 of 4
N_RIGHT = 1
N_ITEMS = 3  # 2 verification tasks per person; at control_rate 2/3, 4 controls each (min_controls: 4)


class World(PeopleWorld):
    def work(self, people: dict) -> dict[str, int]:
        return work_through(self.people_servers, people, self.prefix, lambda data: TRUTH, OPTIONS)

    def tasks(self, **where) -> list[AnnotationTask]:
        ws = self.ws()
        try:
            with ws.store.session() as session:
                query = select(AnnotationTask)
                for name, value in where.items():
                    query = query.where(getattr(AnnotationTask, name) == value)
                found = list(session.execute(query.order_by(AnnotationTask.id)).scalars())
                session.expunge_all()
            return found
        finally:
            ws.close()

    def add_checked_items(self, n: int, tag: str) -> list[str]:
        before = set(self.item_keys())
        folder = self.people_servers.media_root / f"items-{tag}-{uuid.uuid4().hex[:6]}"
        folder.mkdir()
        rows = []
        for i in range(n):
            PIL.Image.new("RGB", (8 + i, 8), (200, 30 * i % 255, 40)).save(folder / f"img{i}.png")
            rows.append({"img_path": f"images/img{i}.png", "query": f"How many squares are there ({tag} {i})?",
                         "answer": "1", "new query": f"How many squares would there be if one more was added "
                                                     f"({tag} {i})?", "new answer": TRUTH, "type": "direct"})
        table = folder / "items.csv"
        with open(table, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        self.cli("ingest", "cvqa", table, "--images", folder)
        ws = self.ws()
        try:
            with ws.store.write() as session:
                new = [i for i in session.execute(select(Item)).scalars() if i.key not in before]
                for item in new:
                    assert item.answer == TRUTH
                    item.status = CHECKED
                return [i.key for i in new]
        finally:
            ws.close()

    def item_keys(self) -> list[str]:
        ws = self.ws()
        try:
            with ws.store.session() as session:
                return list(session.execute(select(Item.key)).scalars())
        finally:
            ws.close()


def write_controls(folder: Path) -> Path:
    """The lead's controls file: `ingest table` columns, group, and the settled answer."""
    folder.mkdir(parents=True)
    rows = []
    for i in range(N_CONTROLS):
        name = f"pic{i}.png"
        PIL.Image.new("RGB", (9 + i, 9), (20 * i % 255, 90, 160)).save(folder / name)
        right = i < N_RIGHT
        rows.append({"image": name, "question": f"How many circles would there be if two were removed ({i})?",
                     "answer": "2" if right else "4", "group": "numerical-direct", "original_question":
                     f"How many circles are there ({i})?", "original_answer": "4",
                     "answer_correct": "yes" if right else "no", "corrected_answer": "" if right else "2"})
    path = folder / "controls.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def world(people_servers, tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("controls") / "ws"
    init_workspace(root).close()
    prefix = f"q-{uuid.uuid4().hex[:8]}"
    people_servers.configure(root, prefix, annotate="control_rate = 0.6667\nmin_accuracy = 0.8\nmin_controls = 4\n")
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(root))
    people_servers.use_in(monkeypatch)
    w = World(root, people_servers, prefix)
    w.add_checked_items(N_ITEMS, "first")  # controls loaded after the items they hide among take their shapes
    controls = write_controls(people_servers.media_root / f"pics-{uuid.uuid4().hex[:6]}")
    loaded = w.json("annotate", "controls", controls, "--kind", "cvqa", "--images", controls.parent)
    assert loaded["controls_added"] == N_CONTROLS and loaded["like_real_items"]
    assert w.json("annotate", "controls", controls, "--kind", "cvqa", "--images", controls.parent)["controls_added"] == 0
    w.first_push = w.json("annotate", "push", "--kind", "cvqa")
    yield w
    monkeypatch.undo()


def test_controls_are_served_like_any_other_task(world):
    controls = world.tasks(purpose=CONTROL)
    verify = world.tasks(purpose="verify")
    assert world.first_push["controls"] == len(controls) == 3 * 4
    for person in (ANN1, ANN2, ADJ):
        mine = [t for t in controls if t.assignee == person]
        assert len(mine) == 4 and len({t.item_id for t in mine}) == 4  # never the same control twice
        own = {t.ls_project_id for t in verify if t.assignee == person}
        assert {t.ls_project_id for t in mine} == own  # in their verification project, on their server
    client = world.people_servers.client(ANN1)
    control = client.tasks.get(id=next(t.ls_task_id for t in controls if t.assignee == ANN1))
    ordinary = client.tasks.get(id=next(t.ls_task_id for t in verify if t.assignee == ANN1))

    def shape(value):
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        return type(value).__name__

    assert shape(control.data) == shape(ordinary.data)
    assert shape(control.meta) == shape(ordinary.meta) and control.meta["purpose"] == "verify"
    assert re.fullmatch(r"[\w-]+:[\w-]+:[0-9a-f]{16}", control.data["item_key"])
    assert re.fullmatch(r"[\w-]+:[\w-]+:[0-9a-f]{16}", ordinary.data["item_key"])
    # same key prefix, same image folder: neither the key nor the image path tells a control apart
    assert control.data["item_key"].rsplit(":", 1)[0] == ordinary.data["item_key"].rsplit(":", 1)[0]
    assert control.data["image"].rsplit("/", 1)[0] == ordinary.data["image"].rsplit("/", 1)[0]
    shown = json.dumps({"data": control.data, "meta": control.meta}).lower()
    assert "control" not in shown and "settled" not in shown and "item_id" not in shown
    # Task ids say nothing: controls and ordinary tasks are interleaved in each person's project.
    order = [t.purpose for t in sorted(controls + verify, key=lambda t: t.ls_task_id) if t.assignee == ANN1]
    assert order != sorted(order) and order != sorted(order, reverse=True)


def form_of(page, images: int) -> tuple:
    """What a person can answer on a task's page (the choices offered, the text fields, the images' widths), read
    in ONE look once IMAGES images have loaded: the app redraws the panel while it starts, so counts read on later
    calls could belong to a discarded node."""
    form = page.wait_for_function(
        """([selector, expected]) => {
            const panel = document.querySelector(selector);
            if (!panel) return false;
            const images = [...panel.querySelectorAll("img")];
            const choices = [...panel.querySelectorAll(".lsf-choices")].map(e => e.innerText);
            if (images.length < expected || !images.every(img => img.complete && img.naturalWidth > 0)
                || !choices.length) return false;
            return [choices, panel.querySelectorAll("textarea").length, images.map(img => img.naturalWidth)];
        }""", arg=[PANEL, images])
    choices, textareas, widths = form.json_value()
    return tuple(choices), textareas, widths


def test_a_control_has_the_same_page_as_an_ordinary_task(world, browser):  # noqa: F811
    ann1 = world.people_servers.people[ANN1]
    control = next(t for t in world.tasks(purpose=CONTROL, assignee=ANN1))
    ordinary = next(t for t in world.tasks(purpose="verify", assignee=ANN1))
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        log_in(page, ann1.url, ann1.email, ann1.password)
        forms = []
        for task in (control, ordinary):
            open_task(page, ann1.url, task.ls_project_id, task.ls_task_id)
            forms.append(form_of(page, 1))  # each image served (the control's beside the items')
    finally:
        context.close()
    (choices, textareas, widths), ordinary_form = forms
    assert choices and (choices, textareas, len(widths)) == (ordinary_form[0], ordinary_form[1], len(ordinary_form[2]))
    assert all(w > 0 for form in forms for w in form[2]), forms


def test_controls_are_scored_and_never_count_toward_their_item(world):
    done = world.work({ANN1: careful(accuracy=1.0, seed=1), ANN2: always_agrees(), ADJ: careful(accuracy=1.0, seed=2)})
    assert done == {ANN1: 6, ANN2: 6, ADJ: 6}
    pulled = world.json("annotate", "pull")
    assert pulled["decisions"]["control scored"] == 12
    ws = world.ws()
    try:
        with ws.store.session() as session:
            outcomes = list(session.execute(select(TaskOutcome)).scalars())
            right = {p: sum(o.correct for o in outcomes if o.person == p) for p in (ANN1, ANN2, ADJ)}
            assert right[ANN1] == right[ADJ] == 4 and right[ANN2] <= N_RIGHT
            control_ids = set(session.execute(select(ControlItem.item_id)).scalars())
            statuses = set(session.execute(select(Item.status).where(Item.id.in_(control_ids))).scalars())
            assert statuses == {CONTROL_STATUS}  # no decision, no status change
            events = session.execute(select(ItemEvent).where(ItemEvent.item_id.in_(control_ids),
                                                             ItemEvent.stage == "annotate")).scalars().all()
            assert not [e for e in events if (e.detail or {}).get("decision")]
            judged = session.execute(select(Judgment.id).join(AnnotationTask, AnnotationTask.id == Judgment.task_id)
                                     .where(AnnotationTask.purpose == CONTROL)).all()
            assert len(judged) == 12  # their judgments are on record
            real = session.execute(select(Item.status).where(Item.id.not_in(control_ids))).scalars().all()
            assert set(real) == {ACCEPTED}  # decided by the two verification judgments alone
    finally:
        ws.close()
    status = world.json("annotate", "status")
    figures = status["quality"]["people"]
    assert figures[ANN1]["controls"] == 4 and figures[ANN1]["accuracy"]["estimate"] == 1.0
    assert figures[ANN2]["accuracy"]["high"] < 0.8 and figures[ANN2]["named"]


def test_a_paused_person_gets_no_new_tasks_until_resume(world):
    world.add_checked_items(2, "second")  # ann1 and adj alone: ann2 audits them later
    pushed = world.json("annotate", "push", "--kind", "cvqa")
    assert [p["person"] for p in pushed["paused"]] == [ANN2]
    assert ANN2 not in pushed["assigned"] and pushed["assigned"]
    ws = world.ws()
    try:
        with ws.store.session() as session:
            pause = session.execute(select(PersonPause)).scalar_one()
            assert pause.person == ANN2 and "below [annotate] min_accuracy" in pause.reason and pause.resumed_at is None
    finally:
        ws.close()
    assert "Paused" in world.cli("annotate", "status").output
    world.work({ANN1: careful(accuracy=1.0, seed=3), ADJ: careful(accuracy=1.0, seed=4)})
    world.json("annotate", "pull")
    world.cli("annotate", "resume", ANN2)
    world.add_checked_items(1, "third")
    again = world.json("annotate", "push", "--kind", "cvqa")
    assert not again["paused"] and again["assigned"].get(ANN2)  # the old evidence was weighed: not paused again


def test_requeued_items_reach_other_people_and_old_judgments_stay_uncounted(world):
    ws = world.ws()
    try:
        with ws.store.session() as session:
            before = set(session.execute(select(AnnotationTask.item_id).join(
                Judgment, Judgment.task_id == AnnotationTask.id).where(
                AnnotationTask.purpose == "verify", Judgment.annotator == ANN2)).scalars())
    finally:
        ws.close()
    assert len(before) == 2
    report = world.json("annotate", "requeue", "--by", ANN2)
    assert report["tasks"] == len(before) and ANN2 not in report["assigned"]
    requeued = world.tasks(purpose="verify", assignee=ANN2, state="requeued")
    assert {t.item_id for t in requeued} == before
    new = [t for t in world.tasks(purpose="verify", state="open") if t.item_id in before]
    assert {t.item_id for t in new} == before and ANN2 not in {t.assignee for t in new}
    world.work({ANN1: careful(accuracy=1.0, seed=5), ADJ: careful(accuracy=1.0, seed=6)})
    world.json("annotate", "pull")
    ws = world.ws()
    try:
        with ws.store.session() as session:
            kept = session.execute(select(Judgment.id).where(Judgment.task_id.in_([t.id for t in requeued]))).all()
            assert len(kept) == len(requeued)  # on record
            for item_id in before:
                events = session.execute(select(ItemEvent.detail).where(ItemEvent.item_id == item_id)
                                         .order_by(ItemEvent.id)).scalars().all()
                assert any(d and d.get("requeued") == ANN2 and d.get("counted") is False for d in events)
                last = [d for d in events if d and d.get("decision")][-1]
                assert last["decision"] == ACCEPTED and ANN2 not in last["annotators"]
    finally:
        ws.close()


def test_the_release_carries_the_figures(world, tmp_path):
    audit = world.json("annotate", "audit", "--sample", "2", "--seed", "7", "--person", ANN2)
    assert audit["pushed"] == 2 and audit["eligible"] == 3  # the accepted items ann2 had no task of
    assert {t.purpose for t in world.tasks(assignee=ANN2, state="open")} >= {"audit"}
    world.work({ANN2: careful(accuracy=1.0, seed=8)})
    world.json("annotate", "pull")
    out = tmp_path / "releases"
    world.cli("export", "ctl", "--version", "1.0", "--out", out, "--licence", "CC-BY-4.0")
    release = next(out.iterdir())
    pseudonym = Boundary(root=world.root).pseudonym  # the workspace's keyed ids
    card = (release / "README.md").read_text()
    assert "## Annotator quality" in card and pseudonym(ANN1) in card and ANN1 not in card
    assert "Release error rate" in card and "prediction-powered inference" in card
    assert "items drawn among the 3 of" in card and "its auditor had no other task of" in card  # as drawn
    croissant = json.loads((release / "croissant.json").read_text())
    analysis = " ".join(croissant["rai:dataAnnotationAnalysis"])
    assert ANN2 not in analysis and "@" not in analysis, analysis
    assert all(f"{pseudonym(p)}: accuracy on" in analysis for p in (ANN1, ANN2, ADJ)), analysis
    verified = json.loads(world.cli("verify", release, "--json").output)
    assert verified["ok"] and verified["annotation"]["error_rate"]["audited"] == 2
    # preflight's human ceiling: the control record, per kind, beside the first-round judgments
    shown = world.runner.invoke(main, ["preflight", str(release), "--json"], catch_exceptions=False)
    whole = next(s for s in json.loads(shown.output)["scopes"] if s["group"] == "(all)")
    assert whole["controls"]["total"] >= 1 and 0 <= whole["controls"]["value"] <= 1


# ---------------------------------------------------------------- without a server


def test_controls_due_keeps_the_rate_over_pushes():
    assert controls_due(0, 9, 0.1) == 1 and controls_due(1, 9, 0.1) == 0 and controls_due(1, 18, 0.1) == 1
    assert controls_due(0, 100, 0.0) == 0
    assert sum(controls_due(given, real, 0.1) for given, real in ((0, 5), (1, 10), (1, 15), (2, 20))) <= 3


def test_a_bad_controls_file_names_its_file_and_line(workspace, tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("image,question,answer,group,answer_correct\na.png,How many?,2,numerical-direct,perhaps\n")
    with pytest.raises(InputError, match=r"c\.csv, line 2: 'answer_correct' is 'perhaps': write yes or no"):
        load_controls(workspace.store, path, "cvqa")
    with workspace.store.session() as session:
        assert not session.execute(select(Item)).first()


def test_a_controls_source_question_is_never_rewritten_into_an_item(workspace, tmp_path):
    from cftools.kinds.cvqa.generate import select_sources

    path = tmp_path / "c.jsonl"
    PIL.Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    path.write_text(json.dumps({"image": "a.png", "question": "How many cats would there be if one left?",
                                "answer": "1", "group": "numerical-direct", "original_question": "How many cats are there?",
                                "original_answer": "2", "answer_correct": "yes"}) + "\n")
    assert load_controls(workspace.store, path, "cvqa").controls_added == 1
    with workspace.store.session() as session:
        assert session.execute(select(Item.status)).scalar_one() == CONTROL_STATUS
    assert select_sources(workspace.store, "numerical-indirect") == []


def test_adjudicated_items_become_controls_that_show_the_answer_that_was_settled(workspace):
    from cftools.annotate.controls import control_items, settle_adjudicated
    from cftools.models import REJECTED

    cases = {"kept": (ACCEPTED, "accept", "3", None), "fixed": (ACCEPTED, "accept_corrected", "3", "5"),
             "gone": (REJECTED, "reject", "7", None), "open": ("needs_adjudication", None, "1", None)}
    with workspace.store.write() as session:
        for key, (status, decision, answer, proposed) in cases.items():
            item = Item(key=f"t:{key}", kind="cvqa", group="numerical-direct", question="How many?", answer=answer,
                        proposed_answer=proposed, status=status)
            session.add(item)
            session.flush()
            if decision:
                task = AnnotationTask(item_id=item.id, purpose="adjudicate", ls_project_id=1, ls_task_id=item.id,
                                      state="decided", decision=status, assignee=ADJ)
                session.add(task)
                session.flush()
                session.add(Judgment(task_id=task.id, annotator=ADJ, decision=decision,
                                     corrected_answer=answer if decision == "accept_corrected" else None))
    assert settle_adjudicated(workspace.store, "cvqa") == 3
    assert settle_adjudicated(workspace.store, "cvqa") == 0  # once
    with workspace.store.session() as session:
        rows = {key: (ok, item_id) for key, ok, item_id in session.execute(
            select(Item.key, ControlItem.expected_ok, ControlItem.item_id).join(ControlItem,
                                                                               ControlItem.item_id == Item.id))}
    assert {k: ok for k, (ok, _) in rows.items()} == {"t:kept": True, "t:fixed": False, "t:gone": False}
    shown = control_items(workspace.store, [item_id for _, item_id in rows.values()])
    assert sorted(i.answer for i in shown.values()) == ["3", "5", "7"]  # the corrected item shows its old answer


# ---------------------------------------------------------------- the controls file, checked as ingest checks


def real_cvqa_items(run_cli, folder: Path) -> Path:
    """Two ingested C-VQA items with their images in FOLDER (the real items controls hide among)."""
    folder.mkdir(parents=True)
    rows = []
    for i in range(2):
        PIL.Image.new("RGB", (10 + i, 10), (10, 200, 30 * i)).save(folder / f"real{i}.png")
        rows.append({"img_path": f"real{i}.png", "query": f"How many dogs are there ({i})?", "answer": "1",
                     "new query": f"How many dogs would there be if one more came ({i})?", "new answer": "2",
                     "type": "direct"})
    ingest_cvqa_table(run_cli, folder, rows)
    return folder


def controls_file(folder: Path, rows: list[dict], name: str = "controls.csv") -> Path:
    """A controls CSV in FOLDER; each row's image is made there unless its name starts with 'missing'."""
    folder.mkdir(parents=True, exist_ok=True)
    full = []
    for n, row in enumerate(rows):
        row = {"id": f"c{n}", "image": f"ctl{n}.png", "question": f"How many cats would there be if one left ({n})?",
               "answer": "1", "group": "numerical-direct", "answer_correct": "yes", "corrected_answer": "", **row}
        if not row["image"].startswith("missing") and not (folder / row["image"]).exists():
            (folder / row["image"]).parent.mkdir(parents=True, exist_ok=True)
            PIL.Image.new("RGB", (12 + n, 12), (200, 40 * n % 255, 90)).save(folder / row["image"])
        full.append(row)
    path = folder / name
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(full[0]))
        writer.writeheader()
        writer.writerows(full)
    return path


def stored_items(store) -> list[Item]:
    with store.session() as session:
        found = list(session.execute(select(Item).order_by(Item.id)).scalars())
        session.expunge_all()
    return found


@pytest.mark.parametrize("row, reason", [
    ({"answer": "banana"}, r"line 3: answer: the answer 'banana' is not a count written in digits"),
    ({"answer": "-2"}, r"line 3: answer: the answer '-2' is a negative count"),
    ({"group": "boolean", "question": "Would there be a cat if one left?", "answer": "7"},
     r"line 3: answer: the answer '7' is not yes or no"),
    ({"answer_correct": "no", "corrected_answer": "lots"},
     r"line 3: corrected_answer: the answer 'lots' is not a count"),
    ({"image": "missing.png"}, r"line 3: image 'missing.png' is not a file in "),
    ({"id": "c0"}, r"line 3: id 'c0' is given twice in this file \(first on line 2\)"),
])
def test_a_bad_control_is_refused_in_one_line_and_nothing_is_loaded(workspace, tmp_path, row, reason):
    path = controls_file(tmp_path / "ctl", [{}, row])
    with pytest.raises(InputError, match=r"controls\.csv, " + reason):
        load_controls(workspace.store, path, "cvqa")
    assert not stored_items(workspace.store)  # the good first record is not loaded either
    with workspace.store.session() as session:
        assert not session.execute(select(ControlItem)).first()


def test_a_control_whose_id_is_a_real_source_id_is_refused(workspace, run_cli, tmp_path):
    table = tmp_path / "real" / "sources.csv"
    table.parent.mkdir()
    PIL.Image.new("RGB", (8, 8)).save(table.parent / "r.png")
    table.write_text("id,image,question,answer\nq-17,r.png,How many cats are there?,2\n")
    assert run_cli("ingest", "table", table, "--images", table.parent).exit_code == 0
    path = controls_file(tmp_path / "ctl", [{"id": "q-17"}])
    with pytest.raises(InputError, match=r"line 2: id 'q-17' is the id of a real source question \(dataset "
                                         r"table:sources\)"):
        load_controls(workspace.store, path, "cvqa")
    assert not [i for i in stored_items(workspace.store) if i.status == CONTROL_STATUS]


def test_a_reload_that_changes_a_control_is_refused_and_an_unchanged_one_adds_nothing(workspace, tmp_path):
    path = controls_file(tmp_path / "ctl", [{}, {}])
    assert load_controls(workspace.store, path, "cvqa").controls_added == 2
    again = load_controls(workspace.store, path, "cvqa")
    assert again.controls_added == 0 and again.already_known == 2
    for change in ({"answer": "3"}, {"answer_correct": "no", "corrected_answer": "0"}, {"question": "Other?"}):
        changed = controls_file(tmp_path / "ctl", [{}, change], name="changed.csv")
        with pytest.raises(InputError, match=r"changed\.csv, line 3: control 'c1' was loaded before with another "
                                             r"image, question, answer or settled answer"):
            load_controls(workspace.store, changed, "cvqa")
    assert len(stored_items(workspace.store)) == 2  # no second control
    grown = controls_file(tmp_path / "ctl", [{}, {}, {}], name="grown.csv")
    assert load_controls(workspace.store, grown, "cvqa").controls_added == 1  # a new id is a new control


def test_controls_carry_the_key_and_image_path_shapes_of_real_items(workspace, run_cli, tmp_path):
    real = real_cvqa_items(run_cli, tmp_path / "media" / "benchmark")
    path = controls_file(tmp_path / "lead" / "controls", [{}, {"image": "sub/ctl1.png"}])
    report = load_controls(workspace.store, path, "cvqa")
    assert report.controls_added == 2 and report.like_real_items
    from cftools.models import Image, SourceQuestion

    with workspace.store.session() as session:
        rows = session.execute(select(Item.key, Item.status, Image.path)
                               .join(SourceQuestion, SourceQuestion.id == Item.source_id)
                               .join(Image, Image.id == SourceQuestion.image_id)).all()
    real_keys = [k for k, status, _ in rows if status != CONTROL_STATUS]
    control = [(k, p) for k, status, p in rows if status == CONTROL_STATUS]
    prefix = real_keys[0].rsplit(":", 1)[0]
    assert prefix == "cvqa:items" and len(control) == 2
    for key, image in control:
        assert re.fullmatch(re.escape(prefix) + r":[0-9a-f]{16}", key), key  # no "table:", nothing of its own
        assert Path(image).is_relative_to(real) and Path(image).is_file()  # beside the real items' images
    assert {Path(p).relative_to(real).as_posix() for _, p in control} == {"ctl0.png", "sub/ctl1.png"}


def test_a_control_image_never_replaces_a_real_file(workspace, run_cli, tmp_path):
    real = real_cvqa_items(run_cli, tmp_path / "media" / "benchmark")
    path = controls_file(tmp_path / "lead", [{"image": "real0.png"}])  # another picture under a real image's name
    with pytest.raises(InputError, match=r"line 2: image 'real0.png' would replace another file in .*: rename it"):
        load_controls(workspace.store, path, "cvqa")
    assert PIL.Image.open(real / "real0.png").size == (10, 10)
    assert not [i for i in stored_items(workspace.store) if i.status == CONTROL_STATUS]


def test_a_control_without_an_id_is_known_by_its_content(workspace, tmp_path):
    path = controls_file(tmp_path / "ctl", [{"id": ""}])
    assert load_controls(workspace.store, path, "cvqa").controls_added == 1
    assert load_controls(workspace.store, path, "cvqa").already_known == 1
    settled_otherwise = controls_file(tmp_path / "ctl", [{"id": "", "answer_correct": "no"}], name="other.csv")
    with pytest.raises(InputError, match=r"other\.csv, line 2: control of image 'ctl0.png' was loaded before"):
        load_controls(workspace.store, settled_otherwise, "cvqa")
    another = controls_file(tmp_path / "ctl", [{"id": "", "answer": "5", "answer_correct": "no"}], name="new.csv")
    assert load_controls(workspace.store, another, "cvqa").controls_added == 1  # another answer: another control
