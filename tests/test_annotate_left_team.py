"""A person taken out of `[label_studio] annotators` mid-way: the tasks they never answered go to someone else, and
`annotate status` counts an item that waits only on them as stuck (against the real Label Studio server)."""

from __future__ import annotations

import json

from fixtures_label_studio import verify_result as result

from test_annotate import ls_workspace, pull_json, statuses  # noqa: F401 (fixture)
from test_assignment import annotate_as, assign_to, next_task, people, pushed_assigned, tasks_of

from cftools.annotate.projects import RETURNED
from cftools.models import ACCEPTED, IN_REVIEW


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


def test_with_no_one_left_to_take_it_the_task_stays_and_the_item_counts_as_stuck(run_cli, ls_workspace,
                                                                                  label_studio, request):
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    everyone = people(label_studio)
    drop_from_team(ls_workspace, everyone, second.assignee)
    [other] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    drop_from_team(ls_workspace, [p for p in everyone if p != second.assignee], other)
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))
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
