"""`annotate status` counts per project what the server holds (against the real Label Studio server)."""

from __future__ import annotations

import json

from test_annotate import ls_workspace, pull_json  # noqa: F401 (fixture)
from test_assignment import pushed_assigned, tasks_of


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
