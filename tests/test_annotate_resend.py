"""A return or a hand-over survives a killed pull: the mark keeps the new task's person and note, so the next pull
or `doctor --repair` sends it, once, to that person with that note (against the real Label Studio server).

The pull is held for good at its first task import, after the mark is written (`killed_runs.held_after`), and
killed there: a known point, not a raced one."""

from __future__ import annotations

import json
import subprocess

import pytest

from fixtures_label_studio import verify_result as result
from killed_runs import held_after, wait_for

from test_annotate import ls_workspace, pull_json, statuses  # noqa: F401 (fixture)
from test_annotate_left_team import drop_from_team
from test_assignment import annotate_as, people, pushed_assigned, tasks_of

from cftools.annotate.projects import RETURNED
from cftools.models import IN_REVIEW


def pull_killed_before_its_send(workspace, returned_task_id: int) -> None:
    """A real `annotate pull` SIGKILLed as it starts its first task import: after it marked RETURNED_TASK_ID."""
    held = subprocess.Popen(held_after("cftools.annotate.assign:import_for", 0, "-w", workspace.root,
                                       "annotate", "pull", "--json"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: held.poll() is not None or [t.state for t in tasks_of(workspace.store)
                                                     if t.id == returned_task_id] == [RETURNED], "the mark")
        assert held.poll() is None, held.stderr.read().decode()[-2000:]
    finally:
        held.kill()
        held.wait()
        held.stderr.close()


def doctor_json(run_cli, *args: str) -> tuple[int, dict]:
    out = run_cli("doctor", "--json", *args)
    return out.exit_code, json.loads(out.output)


def test_a_return_marked_by_a_killed_pull_is_sent_by_doctor_repair_with_its_note_once(
        run_cli, ls_workspace, label_studio, request):
    # doctor --repair called the item stuck and put it back to `checked`: the next push sent it to two new people,
    # and the person whose submission came back never learnt why
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "no")[:1])  # a required answer missing
    pull_killed_before_its_send(ls_workspace, second.id)
    assert [t.assignee for t in tasks_of(ls_workspace.store)] == [first.assignee, second.assignee]  # nothing sent

    code, found = doctor_json(run_cli)
    assert code == 1 and [p["code"] for p in found["problems"]] == ["task_not_sent"]
    [problem] = found["problems"]
    assert (problem["item"], problem["person"], problem["purpose"]) == (second.item_id, second.assignee, "verify")
    code, repaired = doctor_json(run_cli, "--repair")
    assert code == 0 and repaired["changes"] == [f"item {problem['key']}: its verify task sent to {second.assignee}"]
    assert statuses(ls_workspace.store)[second.item_id] == IN_REVIEW  # never requeued
    [new] = [t for t in tasks_of(ls_workspace.store) if t.state == "open" and t.assignee == second.assignee]
    note = label_studio.client().tasks.get(id=new.ls_task_id).data["returned"]
    assert note.startswith(f"Returned to you: your last submission (task {second.ls_task_id}) could not be used")

    assert pull_json(run_cli)["resent"] == []  # sent once
    assert doctor_json(run_cli)[1]["problems"] == []
    assert len([t for t in tasks_of(ls_workspace.store) if t.assignee == second.assignee]) == 2  # old and new


@pytest.mark.parametrize("as_json", [True, False])
def test_a_hand_over_marked_by_a_killed_pull_goes_to_the_same_person_at_the_next_pull(
        run_cli, ls_workspace, label_studio, request, as_json):
    # the handed-over task was marked and never sent: no one would ever answer it, and doctor did not see it
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    everyone = people(label_studio)
    drop_from_team(ls_workspace, everyone, second.assignee)
    [left] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    annotate_as(label_studio, first.assignee, first.ls_task_id, result("yes", "yes"))
    pull_killed_before_its_send(ls_workspace, second.id)
    assert [t.assignee for t in tasks_of(ls_workspace.store)] == [first.assignee, second.assignee]

    if as_json:
        pulled = pull_json(run_cli)
        assert [(r["purpose"], r["sent_to"]) for r in pulled["resent"]] == [("verify", left)]
        assert pulled["handed_over"] == []  # theirs was marked: not handed over a second time
    else:
        human = run_cli("annotate", "pull").output
        assert f"task, returned or handed over by a pull that stopped before sending it, sent to {left}" in human
    [new] = [t for t in tasks_of(ls_workspace.store) if t.assignee == left]
    data = label_studio.client().tasks.get(id=new.ls_task_id).data
    assert data["returned"].startswith("Sent to you: the person who had it left the team")
    again = pull_json(run_cli)
    assert again["resent"] == [] and again["handed_over"] == []
    assert len([t for t in tasks_of(ls_workspace.store) if t.assignee == left]) == 1


def test_a_return_whose_person_left_before_it_was_sent_goes_to_someone_else(run_cli, ls_workspace, label_studio,
                                                                            request):
    # the plan named someone no longer on the team: the task went to them (with a server per person, every pull
    # failed on it)
    pushed_assigned(run_cli, ls_workspace, label_studio, 1, request)
    first, second = tasks_of(ls_workspace.store)
    annotate_as(label_studio, second.assignee, second.ls_task_id, result("yes", "no")[:1])
    pull_killed_before_its_send(ls_workspace, second.id)
    everyone = people(label_studio)
    drop_from_team(ls_workspace, everyone, second.assignee)
    [left] = [p for p in everyone if p not in (first.assignee, second.assignee)]
    pulled = pull_json(run_cli)
    assert [(r["purpose"], r["sent_to"]) for r in pulled["resent"]] == [("verify", left)]
    [new] = [t for t in tasks_of(ls_workspace.store) if t.assignee == left]
    note = label_studio.client().tasks.get(id=new.ls_task_id).data["returned"]
    assert note == "Sent to you: the person who had it left the team."  # not the leaver's reason
    again = pull_json(run_cli)
    assert again["resent"] == [] and again["handed_over"] == []
    assert len([t for t in tasks_of(ls_workspace.store) if t.assignee == left]) == 1
