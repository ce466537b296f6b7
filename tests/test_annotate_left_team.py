"""A person taken out of `[label_studio] annotators` mid-way: the tasks they never answered go to someone else, and
`annotate status` counts an item that waits only on them as stuck (against the real Label Studio server)."""

from __future__ import annotations

import json
import uuid

from fixtures_label_studio import PeopleWorld
from fixtures_label_studio import verify_result as result
from sqlalchemy import select, update

from test_annotate import ls_workspace, make_items, pull_json, statuses  # noqa: F401 (fixture)
from test_assignment import annotate_as, assign_to, next_task, people, pushed_assigned, tasks_of

from cftools.annotate.projects import RETURNED
from cftools.cli import main
from cftools.models import ACCEPTED, CHECKED, IN_REVIEW, AnnotationTask, Item
from cftools.workspace import init_workspace


def drop_from_team(workspace, everyone: list[str], gone: str) -> None:
    config = workspace.root / "cftools.toml"
    text = config.read_text().replace("annotators = [" + ", ".join(f'"{p}"' for p in everyone) + "]\n", "", 1)
    config.write_text(text)
    assign_to(workspace, [p for p in everyone if p != gone])


def test_an_open_task_of_a_person_who_left_goes_to_someone_else(run_cli, ls_workspace, label_studio, request):
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    everyone = people(label_studio)
    drop_from_team(ls_workspace, everyone, second.assignee)
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))

    pulled = pull_json(run_cli)
    [left] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    [handed] = pulled["handed_over"]
    assert (handed["task"], handed["from"], handed["sent_to"]) == (second.ls_task_id, second.assignee, left)
    tasks = tasks_of(ls_workspace.store)
    assert [t.state for t in tasks if t.id == second.id] == [RETURNED]
    [new] = [t for t in tasks if t.assignee == left]
    data = label_studio.client().tasks.get(id=new.ls_task_id).data
    assert data["returned"].startswith("Sent to you: the person who had it left the team")
    assert second.assignee not in data["returned"]  # nobody named to the new person
    assert next_task(label_studio, left, new.ls_project_id).json()["id"] == new.ls_task_id
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert status["in_review_without_open_task"] == 0
    assert second.assignee not in status["people"]  # their one task never came back to them
    assert pull_json(run_cli)["handed_over"] == []  # handed over once

    annotate_as(label_studio, left, new.ls_task_id, result("yes", "yes"))
    pull_json(run_cli)
    assert statuses(ls_workspace.store)[first.item_id] == ACCEPTED


def judged_with_no_one_left_to_take_the_second(run_cli, ls_workspace, label_studio, request):
    """One item pushed to two people; the second's assignee and the only other person leave the team, the first
    judges: the second task has no one to go to. Returns the two tasks."""
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    everyone = people(label_studio)
    drop_from_team(ls_workspace, everyone, second.assignee)
    [other] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    drop_from_team(ls_workspace, [p for p in everyone if p != second.assignee], other)
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))
    return first, second


def test_with_no_one_left_to_take_it_the_task_stays_and_the_item_counts_as_stuck(run_cli, ls_workspace,
                                                                                  label_studio, request):
    first, second = judged_with_no_one_left_to_take_the_second(run_cli, ls_workspace, label_studio, request)
    human = run_cli("annotate", "pull").output
    assert f"task {second.ls_task_id} of {second.assignee} (no longer in [label_studio] annotators): not sent" in human
    pulled = pull_json(run_cli)
    [handed] = pulled["handed_over"]
    assert handed["sent_to"] is None and "add people" in handed["unassigned"]
    assert [t.state for t in tasks_of(ls_workspace.store) if t.id == second.id] == ["open"]
    assert statuses(ls_workspace.store)[first.item_id] == IN_REVIEW
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert (status["in_review_without_open_task"], status["waiting_on_people_gone"]) == (1, 1)
    assert "1 of them wait only on people no longer in [label_studio] annotators" in run_cli("annotate", "status").output


def test_on_servers_of_their_own_the_tasks_of_a_person_whose_table_is_removed_go_to_someone_else(
        people_servers, tmp_path, monkeypatch):
    root = tmp_path / "ws"
    init_workspace(root).close()
    prefix = f"l-{uuid.uuid4().hex[:8]}"
    people_servers.configure(root, prefix)
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(root))
    people_servers.use_in(monkeypatch)
    world = PeopleWorld(root, people_servers, prefix)
    make_items(lambda *args: world.runner.invoke(main, [str(a) for a in args]),
               people_servers.media_root / f"left-{uuid.uuid4().hex[:6]}", 1)
    ws = world.ws()
    with ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
    ws.close()
    world.json("annotate", "push")
    first, second = world.read(lambda s: list(s.execute(select(AnnotationTask.assignee, AnnotationTask.ls_task_id)
                                                          .order_by(AnnotationTask.id))))
    gone = people_servers.people[second.assignee]
    config = root / "cftools.toml"
    table = f'[label_studio.people."{gone.email}"]\nurl = "{gone.url}"\ntoken_env = "{gone.token_env}"\n'
    assert table in config.read_text()
    config.write_text(config.read_text().replace(table, ""))
    people_servers.client(first.assignee).annotations.create(id=first.ls_task_id, result=result("yes", "yes"))
    pulled = world.json("annotate", "pull")
    assert pulled["servers_not_configured"] == [gone.url]
    [handed] = pulled["handed_over"]
    [other] = [p for p in people_servers.people if p not in (first.assignee, second.assignee)]
    assert (handed["from"], handed["sent_to"]) == (gone.email, other)
    [(new_task,)] = world.read(lambda s: list(s.execute(select(AnnotationTask.ls_task_id).where(
        AnnotationTask.assignee == other))))
    people_servers.client(other).annotations.create(id=new_task, result=result("yes", "yes"))
    world.json("annotate", "pull")
    assert world.read(lambda s: s.execute(select(Item.status)).scalar_one()) == ACCEPTED


def test_an_unusable_submission_of_a_person_who_left_goes_to_someone_else_and_pull_says_so(
        run_cli, ls_workspace, label_studio, request):
    # The pull said "returned to <the person who left>", and the new person's task read "... left the team (your
    # last submission (task N) could not be used: ...)": a submission that was never theirs.
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "no")[:1])  # a required answer missing
    drop_from_team(ls_workspace, people(label_studio), second.assignee)
    human = run_cli("annotate", "pull").output
    [left] = [p for p in people(label_studio) if p not in (first.assignee, second.assignee)]
    assert f"returned to {second.assignee}" not in human
    assert f"{second.assignee} is no longer in [label_studio] annotators: 1 tasks sent to others" in human
    assert f"task {second.ls_task_id}: sent to {left}" in human
    [new] = [t for t in tasks_of(ls_workspace.store) if t.assignee == left]
    note = label_studio.client().tasks.get(id=new.ls_task_id).data["returned"]
    assert note == "Sent to you: the person who had it left the team."


def test_doctor_reports_an_item_waiting_only_on_people_gone_apart_and_never_requeues_it(run_cli, ls_workspace,
                                                                                     label_studio, request):
    # doctor found nothing: its item_stuck check counted the task of the person who left as one waiting on them
    first, second = judged_with_no_one_left_to_take_the_second(run_cli, ls_workspace, label_studio, request)
    pull_json(run_cli)
    out = run_cli("doctor", "--json", "--repair")
    found = json.loads(out.output)
    assert out.exit_code == 1 and [p["code"] for p in found["problems"]] == ["waiting_on_people_gone"]
    [problem] = found["problems"]
    assert problem["item"] == first.item_id and not problem["repaired"] and found["changes"] == []
    assert "cftools annotate pull" in problem["message"] and "add a person" in problem["message"]
    assert statuses(ls_workspace.store)[first.item_id] == IN_REVIEW  # not requeued: a pull hands the task over
    assert [t.state for t in tasks_of(ls_workspace.store) if t.id == second.id] == ["open"]


def test_an_unusable_submission_of_a_person_who_left_with_no_one_to_take_it_stays_and_the_pull_goes_on(
        run_cli, ls_workspace, label_studio, request):
    # the pull failed on it ("item N needs 1 annotator(s) besides ...") after marking it: every other project's
    # judgments were left unread, and the task, marked returned, waited on no one
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "no")[:1])  # a required answer missing
    everyone = people(label_studio)
    [other] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    drop_from_team(ls_workspace, everyone, second.assignee)
    drop_from_team(ls_workspace, [p for p in everyone if p != second.assignee], other)
    human = run_cli("annotate", "pull")
    assert human.exit_code == 0, human.output
    assert f"task {second.ls_task_id} of {second.assignee} (no longer in [label_studio] annotators): not sent" \
        in human.output
    [entry] = pull_json(run_cli)["returned"][second.assignee]
    assert "add people" in entry["unassigned"] and not entry.get("sent_to")
    assert [t.state for t in tasks_of(ls_workspace.store)] == ["open", "open"]  # as it was: nothing promised
