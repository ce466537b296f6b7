"""Every annotate path works with per-person servers (issue 43): `doctor` (and `--repair`), an all-or-nothing
`annotate requeue`, deleted tasks of every purpose sent back (and the task ids Label Studio reuses after a deletion),
edit tasks that never go out without their image, waivable edit flags, and decided items that leave no open task.

Real servers: `people_servers` (ann1, ann2 and adj, each the only user of their own Label Studio)."""

from __future__ import annotations

import json
import uuid
from collections import Counter

from fixtures_label_studio import verify_result
from sqlalchemy import select

from test_doctor import codes, doctor
from test_annotate import make_items, mark_checked
from test_servers import people_ws, pull, push, tasks_by_person  # noqa: F401 (fixture)

from cftools.models import AnnotationTask, Item, Judgment

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
