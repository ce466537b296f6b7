"""`annotate status` counts per project what the server holds (against the real Label Studio server)."""

from __future__ import annotations

import json

from fixtures_label_studio import verify_result as result

from test_annotate import ls_workspace, pull_json, statuses  # noqa: F401 (fixture)
from test_assignment import annotate_as, pushed_assigned, tasks_of

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
