"""Every annotate path works with per-person servers (issue 43): `doctor` (and `--repair`), an all-or-nothing
`annotate requeue`, deleted tasks of every purpose sent back (and the task ids Label Studio reuses after a deletion),
edit tasks that never go out without their image, waivable edit flags, and decided items that leave no open task.

Real servers: `people_servers` (ann1, ann2 and adj, each the only user of their own Label Studio) and, where four or
five people are needed, two more started here the same way (dan, eve)."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from fixtures_label_studio import (
    PeopleServers, PersonServer, found_ls_bin, launch_server, migrated_template, verify_result, wait_until_up,
)
from sqlalchemy import select, update

from test_doctor import codes, doctor
from test_annotate import make_items, mark_checked
from test_servers import people_config, people_ws, pull, push, tasks_by_person  # noqa: F401 (fixture)

from cftools.models import AnnotationTask, Item, Judgment
from cftools.workspace import load_workspace

ANN1, ANN2, ADJ = "ann1@example.com", "ann2@example.com", "adj@example.com"


def items_for(people_servers, run_cli, request, n: int) -> None:
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", n)


def store_rows(store) -> dict[str, list]:
    """Every row of the tables a requeue or a pull may change, to compare before and after."""
    with store.session() as session:
        return {"tasks": [tuple(r) for r in session.execute(select(
                    AnnotationTask.id, AnnotationTask.state, AnnotationTask.decision, AnnotationTask.assignee))],
                "items": [tuple(r) for r in session.execute(select(Item.id, Item.status))],
                "judgments": [tuple(r) for r in session.execute(select(Judgment.id, Judgment.task_id))]}


# ---------------------------------------------------------------- doctor


def test_doctor_runs_clean_with_per_person_servers_and_repairs_a_task_deleted_on_one(people_ws, people_servers,
                                                                                    run_cli, request):
    items_for(people_servers, run_cli, request, 2)
    mark_checked(people_ws.store)
    push(run_cli)
    code, found = doctor(run_cli)
    assert code == 0 and found["problems"] == [] and found["checked"]["annotation_tasks"] == 4
    task = tasks_by_person(people_ws.store)[ANN2][0]
    people_servers.client(ANN2).tasks.delete(id=task.ls_task_id)
    code, found = doctor(run_cli)
    assert code == 1 and codes(found) == ["task_missing_on_server"]
    assert found["problems"][0]["task"] == task.ls_task_id
    assert found["problems"][0]["server"] == people_servers.people[ANN2].url
    code, repaired = doctor(run_cli, "--repair")
    assert code == 0 and len(repaired["changes"]) == 1
    code, found = doctor(run_cli)
    assert code == 0 and found["problems"] == []


# ---------------------------------------------------------------- more people


EXTRA = (("dan@example.com", "Annot4-pass-123"), ("eve@example.com", "Annot5-pass-123"))


@pytest.fixture(scope="module")
def five_people(people_servers, tmp_path_factory):
    """The session's three people and two more (dan, eve), each on a server of their own."""
    binary = found_ls_bin()
    scratch = tmp_path_factory.mktemp("more-people")
    template = migrated_template(binary, scratch, empty=True)
    launched = []
    try:
        for email, password in EXTRA:
            name = email.split("@")[0]
            shutil.copytree(template, scratch / name)
            token = f"cftools-test-{name}-token-0123456789"
            running = launch_server(binary, scratch / name, people_servers.media_root, scratch / f"{name}.log",
                                    (email, password, token))
            launched.append((PersonServer(email, password, token, running.url, scratch / name), running))
        for _, running in launched:
            wait_until_up(running)
        yield PeopleServers({**people_servers.people, **{p.email: p for p, _ in launched}},
                            people_servers.media_root)
    finally:
        for _, running in launched:
            running.stop()


def workspace_for(servers, workspace, monkeypatch, people: tuple[str, ...]):
    """WORKSPACE configured for PEOPLE of SERVERS (each on their own server)."""
    chosen = PeopleServers({e: servers.people[e] for e in people}, servers.media_root)
    people_config(workspace.root, chosen, f"p-{uuid.uuid4().hex[:8]}")
    chosen.use_in(monkeypatch)
    return load_workspace(workspace.root)


ADJUDICATE_REJECT = [{"from_name": "decision", "to_name": "question", "type": "choices",
                      "value": {"choices": ["reject"]}}]


def adjudicated_item(servers, store, run_cli) -> tuple[AnnotationTask, AnnotationTask]:
    """The one item judged apart by its two people, then adjudicated: (first judge's task, adjudication task)."""
    push(run_cli)
    first, second = sorted((t for tasks in tasks_by_person(store).values() for t in tasks), key=lambda t: t.id)
    servers.client(first.assignee).annotations.create(id=first.ls_task_id, result=verify_result("yes", "yes"))
    servers.client(second.assignee).annotations.create(id=second.ls_task_id, result=verify_result("no", "no"))
    assert pull(run_cli)["decisions"] == {"needs_adjudication": 1}
    push(run_cli, "--adjudicate")
    [adjudication] = [t for tasks in tasks_by_person(store, "adjudicate").values() for t in tasks]
    servers.client(adjudication.assignee).annotations.create(id=adjudication.ls_task_id, result=ADJUDICATE_REJECT)
    assert pull(run_cli)["decisions"] == {"adjudicated rejected": 1}
    return first, adjudication


# ---------------------------------------------------------------- requeue


def test_requeue_with_too_few_people_changes_nothing_and_says_add_people(people_ws, people_servers, run_cli,
                                                                          request):
    items_for(people_servers, run_cli, request, 1)
    mark_checked(people_ws.store)
    first, adjudication = adjudicated_item(people_servers, people_ws.store, run_cli)
    before = store_rows(people_ws.store)
    on_servers = {p: people_servers.client(p).tasks.list(project=t.ls_project_id).items
                  for p, t in ((first.assignee, first), (adjudication.assignee, adjudication))}
    result = run_cli("annotate", "requeue", "--by", first.assignee)
    assert result.exit_code != 0
    assert store_rows(people_ws.store) == before  # no task requeued, no item moved, no new task
    message = result.output.strip().splitlines()
    assert len(message) == 1 and "add people" in message[0] and "changed nothing" in message[0]
    for person, task in ((first.assignee, first), (adjudication.assignee, adjudication)):
        assert [t.id for t in people_servers.client(person).tasks.list(project=task.ls_project_id).items] == \
            [t.id for t in on_servers[person]]
    code, found = doctor(run_cli)  # and doctor, after the failed requeue, finds nothing wrong
    assert code == 0 and found["problems"] == []


def test_requeue_sends_the_items_to_people_who_never_had_them_and_closes_the_set_aside_adjudication(
        five_people, workspace, monkeypatch, run_cli, request):
    ws = workspace_for(five_people, workspace, monkeypatch, tuple(five_people.people))
    try:
        items_for(five_people, run_cli, request, 1)
        mark_checked(ws.store)
        first, adjudication = adjudicated_item(five_people, ws.store, run_cli)
        result = run_cli("annotate", "requeue", "--by", first.assignee, "--json")
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["tasks"] == 1 and report["adjudications_closed"] == 1
        [new_judge] = report["assigned"]
        assert new_judge not in {first.assignee, adjudication.assignee}
        client = five_people.client(adjudication.assignee)
        left = client.tasks.list(project=adjudication.ls_project_id).items
        assert adjudication.ls_task_id not in [t.id for t in left]
        with ws.store.session() as session:
            states = dict(session.execute(select(AnnotationTask.id, AnnotationTask.state)).all())
        assert states[first.id] == "requeued" and states[adjudication.id] == "requeued"
        code, found = doctor(run_cli)
        assert code == 0 and found["problems"] == []
    finally:
        ws.close()


# ---------------------------------------------------------------- deleted tasks, reused ids


def edit_items(servers, store, run_cli, request, n: int) -> list[int]:
    """N accepted C-VQA items, each with an edit whose checked candidate people are to verify."""
    from test_edits import add_edit

    folder = servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}"
    make_items(run_cli, folder, n)
    with store.write() as session:
        ids = list(session.execute(select(Item.id).order_by(Item.id)).scalars())
        for item in session.execute(select(Item)).scalars():
            item.status = "accepted"  # the text verified already: the edit is judged apart from it
    for item_id in ids:
        add_edit(store, item_id, folder / "edits" / str(item_id))
    return ids


def live_tasks(store, purpose_prefix: str) -> list[AnnotationTask]:
    with store.session() as session:
        found = [t for t in session.execute(select(AnnotationTask).where(
            AnnotationTask.state.in_(["open", "decided"])).order_by(AnnotationTask.id)).scalars()
            if t.purpose.startswith(purpose_prefix)]
        session.expunge_all()
    return found


def test_a_deleted_edit_task_comes_back_to_its_person_and_its_reused_id_does_not_crash_the_next_push(
        people_ws, people_servers, run_cli, request):
    edit_items(people_servers, people_ws.store, run_cli, request, 1)
    assert push(run_cli, "--kind", "cvqa", "--task", "edit")["pushed"] == 2
    deleted = live_tasks(people_ws.store, "edit")[-1]
    client = people_servers.client(deleted.assignee)
    client.tasks.delete(id=deleted.ls_task_id)
    report = pull(run_cli)
    assert [(d["task"], d.get("sent_back_to")) for d in report["deleted_tasks"]] == \
        [(deleted.ls_task_id, deleted.assignee)]
    again = [t for t in live_tasks(people_ws.store, "edit") if t.assignee == deleted.assignee]
    assert len(again) == 1 and again[0].id != deleted.id and again[0].purpose == deleted.purpose
    assert again[0].ls_task_id == deleted.ls_task_id  # Label Studio gave the deleted task's id to the new one
    assert push(run_cli, "--kind", "cvqa", "--task", "edit")["pushed"] == 0  # nothing missing, no crash
    code, found = doctor(run_cli)
    assert code == 0 and found["problems"] == []


def test_a_deleted_adjudication_task_comes_back_to_its_adjudicator(people_ws, people_servers, run_cli, request):
    items_for(people_servers, run_cli, request, 1)
    mark_checked(people_ws.store)
    push(run_cli)
    first, second = sorted((t for ts in tasks_by_person(people_ws.store).values() for t in ts), key=lambda t: t.id)
    people_servers.client(first.assignee).annotations.create(id=first.ls_task_id, result=verify_result("yes", "yes"))
    people_servers.client(second.assignee).annotations.create(id=second.ls_task_id, result=verify_result("no", "no"))
    pull(run_cli)
    push(run_cli, "--adjudicate")
    [deleted] = live_tasks(people_ws.store, "adjudicate")
    people_servers.client(deleted.assignee).tasks.delete(id=deleted.ls_task_id)
    report = pull(run_cli)
    assert [d.get("sent_back_to") for d in report["deleted_tasks"]] == [deleted.assignee]
    [again] = live_tasks(people_ws.store, "adjudicate")
    assert again.id != deleted.id and again.assignee == deleted.assignee
    people_servers.client(again.assignee).annotations.create(id=again.ls_task_id, result=ADJUDICATE_REJECT)
    assert pull(run_cli)["decisions"] == {"adjudicated rejected": 1}


def test_a_task_deleted_on_a_server_before_any_pull_gives_way_to_the_new_task_that_reuses_its_id(
        people_ws, people_servers, run_cli, request):
    items_for(people_servers, run_cli, request, 2)
    with people_ws.store.write() as session:
        first, second = session.execute(select(Item).order_by(Item.id)).scalars().all()
        first.status = "checked"
        first_id, second_id = first.id, second.id
    push(run_cli)
    deleted = tasks_by_person(people_ws.store)[ANN1][0]
    people_servers.client(ANN1).tasks.delete(id=deleted.ls_task_id)
    mark_checked_new(people_ws.store)
    assert push(run_cli)["pushed"] == 2  # ann1 gets the second item, in a task with the deleted one's id
    [new] = [t for t in tasks_by_person(people_ws.store)[ANN1] if t.state == "open"]
    assert new.item_id == second_id and new.ls_task_id == deleted.ls_task_id
    with people_ws.store.session() as session:
        old = session.get(AnnotationTask, deleted.id)
        assert old.state == "deleted" and old.ls_task_id is None
        assert session.get(Item, first_id).status == "checked"  # its task is gone: pushed again next time
    assert push(run_cli)["pushed"] == 1
    code, found = doctor(run_cli)
    assert code == 0 and found["problems"] == []


def mark_checked_new(store) -> None:
    """Items just ingested (drafts) become checked."""
    with store.write() as session:
        for item in session.execute(select(Item).where(Item.status == "draft")).scalars():
            item.status = "checked"


# ---------------------------------------------------------------- edit tasks


def test_an_edited_image_that_cannot_be_served_is_refused_in_one_line_before_anything_is_pushed_or_embedded(
        people_ws, people_servers, run_cli, request, tmp_path):
    from test_edits import add_edit

    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 1)
    with people_ws.store.write() as session:
        item = session.execute(select(Item)).scalar_one()
        item.status, item_id, key = "accepted", item.id, item.key
    add_edit(people_ws.store, item_id, tmp_path / "outside-the-document-root")
    before = store_rows(people_ws.store)
    refused = run_cli("annotate", "push", "--kind", "cvqa", "--task", "edit", "--json")
    assert refused.exit_code != 0 and store_rows(people_ws.store) == before
    [line] = refused.output.strip().splitlines()
    assert key in line and "edited image of candidate 1" in line and "document_root" in line
    for person in people_servers.people:  # no task went to anyone
        client = people_servers.client(person)
        assert not [t for p in client.projects.list() if people_ws.section("label_studio")["project_prefix"] in p.title
                    for t in client.tasks.list(project=p.id).items]
    pushed = push(run_cli, "--kind", "cvqa", "--task", "edit", "--data-uri")
    assert pushed["pushed"] == 2 and pushed["skipped_outside_root"] == 0
    for task in live_tasks(people_ws.store, "edit"):
        shown = people_servers.client(task.assignee).tasks.get(id=task.ls_task_id).data
        assert shown["edited_image"].startswith("data:image/png;base64,")


def test_an_edit_flag_is_waivable_like_any_other_and_then_its_candidate_goes_to_people(
        people_ws, people_servers, run_cli, request, monkeypatch):
    from cftools.imagegen.edit_checks import EDIT_IDENTICAL

    [item_id] = edit_items(people_servers, people_ws.store, run_cli, request, 1)
    with people_ws.store.write() as session:  # the embedded editor's candidates: every one flagged
        item = session.get(Item, item_id)
        data = dict(item.data)
        data["edit_checks"] = [{"k": 1, "flags": [{"code": EDIT_IDENTICAL, "reason": "same bytes"}], "score": 0.9},
                               {"k": 0, "flags": [{"code": EDIT_IDENTICAL, "reason": "same bytes"}], "score": 0.1}]
        item.data, key = data, item.key
    assert push(run_cli, "--kind", "cvqa", "--task", "edit")["pushed"] == 0
    listed = json.loads(run_cli("flags", "list", key, "--json").output)
    assert [(r["code"], r["waived"]) for r in listed] == [(EDIT_IDENTICAL, None)]
    monkeypatch.setenv("CFTOOLS_USER", "reviewer")
    waived = run_cli("flags", "waive", key, EDIT_IDENTICAL, "--reason", "the change is small but real", "--json")
    assert waived.exit_code == 0, waived.output
    assert json.loads(run_cli("flags", "list", key, "--json").output)[0]["waived"]["by"] == "reviewer"
    assert push(run_cli, "--kind", "cvqa", "--task", "edit")["pushed"] == 2
    assert {t.purpose for t in live_tasks(people_ws.store, "edit")} == {"edit:1"}  # the best-ranked candidate


# ---------------------------------------------------------------- decided items, balanced loads


def test_decided_items_leave_no_open_task_and_four_people_get_balanced_loads(five_people, workspace, monkeypatch,
                                                                            run_cli, request):
    dan = EXTRA[0][0]
    ws = workspace_for(five_people, workspace, monkeypatch, (ANN1, ANN2, ADJ, dan))
    try:
        items_for(five_people, run_cli, request, 4)
        with ws.store.write() as session:
            first_two = session.execute(select(Item).order_by(Item.id).limit(2)).scalars().all()
            for item in first_two:
                item.status = "checked"
        assert push(run_cli)["assigned"] == {ANN1: 1, ANN2: 1, ADJ: 1, dan: 1}
        tasks = {t.assignee: t for ts in tasks_by_person(ws.store).values() for t in ts}
        for people in ((ANN1, ADJ), (ANN2, dan)):  # one judge of each item, then the other, each time a pull
            for person in people:
                five_people.client(person).annotations.create(id=tasks[person].ls_task_id,
                                                             result=verify_result("yes", "yes"))
            pull(run_cli)
        with ws.store.session() as session:
            assert [i.status for i in session.execute(select(Item).order_by(Item.id).limit(2)).scalars()] == \
                ["accepted", "accepted"]
            still_open = session.execute(select(AnnotationTask.id).where(AnnotationTask.state == "open")).all()
        assert still_open == []  # the judges whose judgment came first have no open task of a decided item
        with ws.store.write() as session:  # as an earlier cftools left them: open tasks of decided items
            session.execute(update(AnnotationTask).where(AnnotationTask.id.in_([tasks[ANN1].id, tasks[ADJ].id]))
                            .values(state="open"))
        mark_checked_new(ws.store)
        assert push(run_cli)["assigned"] == {ANN1: 1, ANN2: 1, ADJ: 1, dan: 1}  # balanced: nobody's load is stale
    finally:
        ws.close()
