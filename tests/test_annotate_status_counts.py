"""`annotate status` counts per project what the server holds (against the real Label Studio server)."""

from __future__ import annotations

import json

from fixtures_label_studio import verify_result as result

from test_annotate import ls_workspace, pull_json, statuses  # noqa: F401 (fixture)
from test_assignment import annotate_as, pushed_assigned, tasks_of
from test_browser import team_workspace  # noqa: F401 (fixture: tasks go to the three people of the server)

from cftools.models import ACCEPTED, IN_REVIEW, NEEDS_ADJUDICATION


def test_a_task_deleted_on_the_server_and_sent_again_counts_as_deleted_in_its_project(
        run_cli, ls_workspace, label_studio, request):
    # With assignment a deleted task comes back to its person as a new one; the project then showed two tasks and
    # none deleted, though the server holds one.
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, _ = tasks_of(ls_workspace.store)
    label_studio.client().tasks.delete(id=first.ls_task_id)
    [deleted] = pull_json(run_cli)["deleted_tasks"]
    assert deleted["sent_back_to"] == first.assignee
    status = json.loads(run_cli("annotate", "status", "--json").output)
    [project] = [p for p in status["projects"] if p["project_id"] == first.ls_project_id]
    held = len(label_studio.client().tasks.list(project=first.ls_project_id).items)
    assert (project["tasks"], project["deleted"]) == (held, 1) == (1, 1)


def test_a_withdrawn_judgment_takes_the_decision_off_every_task_of_the_item(run_cli, ls_workspace, label_studio,
                                                                            request):
    # A person deleted their annotation of an accepted item: the item went back to review, but the other person's
    # task kept "accepted", so their project still counted a decision the item no longer had.
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    withdrawn = annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "yes"))
    assert pull_json(run_cli)["decisions"] == {ACCEPTED: 1}
    label_studio.client(first.assignee).annotations.delete(id=withdrawn)
    withdrawn_pull = pull_json(run_cli)
    assert withdrawn_pull["judgments_removed"] == 1
    assert withdrawn_pull["decisions"] == {"back in review (a judgment was withdrawn)": 1}
    assert statuses(ls_workspace.store)[first.item_id] == IN_REVIEW
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert [p["decisions"] for p in status["projects"]] == [{}, {}]
    assert status["people"][first.assignee]["open"] == 1 and status["people"][second.assignee]["submitted"] == 1
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "no", "7"))
    assert pull_json(run_cli)["decisions"] == {NEEDS_ADJUDICATION: 1}
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert [p["decisions"] for p in status["projects"]] == [{NEEDS_ADJUDICATION: 1}, {NEEDS_ADJUDICATION: 1}]


def test_a_tiebreak_closed_without_its_persons_judgment_is_not_counted_as_submitted(label_studio, team_workspace,
                                                                                   run_cli):
    # Two people split on an edit, a third was asked; the first then changed their answer to the second's, which
    # decided the item and closed the third's task unanswered: status counted it as "submitted" by the third.
    import uuid

    from test_browser import assigned, push_json
    from test_edits import add_edit, edit_result
    from test_annotate import make_items
    from sqlalchemy import select

    from cftools.models import Item

    store = team_workspace.store
    folder = label_studio.media_root / f"tiebreak-{uuid.uuid4().hex[:6]}"
    make_items(run_cli, folder, 1)
    with store.write() as session:
        item = session.execute(select(Item)).scalar_one()
        item.status, item_id = ACCEPTED, item.id
    add_edit(store, item_id, folder / str(item_id))
    push_json(run_cli, "--kind", "cvqa", "--task", "edit")
    first, second = assigned(store, "edit")
    changed = label_studio.client(first.assignee).annotations.create(id=first.ls_task_id, result=edit_result(answer="2"))
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=edit_result(answer="3"))
    [third] = pull_json(run_cli)["tiebreaks"][0]["sent_to"]
    label_studio.client(first.assignee).annotations.update(id=changed.id, result=edit_result(answer="3"))
    pull_json(run_cli)
    with store.session() as session:
        assert session.get(Item, item_id).data["edit_answer"] == "3"  # decided by the first two
    assert assigned(store, "edit") == []  # the third's task is closed too
    people = json.loads(run_cli("annotate", "status", "--json").output)["people"]
    assert third not in people  # nothing submitted, nothing open: no task of theirs counts
    assert people[first.assignee]["submitted"] == people[second.assignee]["submitted"] == 1
