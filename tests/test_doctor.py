"""`cftools doctor`: finds what a kill or a hand edit left wrong, and with --repair fixes what is safe."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

from sqlalchemy import insert, select, update

from cftools.models import CHECKED, IN_REVIEW, AnnotationTask, Image, Item, WorkClaim, utcnow
from test_annotate import ls_workspace, make_items, mark_checked, statuses, task_map  # noqa: F401  (fixture)


def doctor(run_cli, *args: str) -> tuple[int, dict]:
    out = run_cli("doctor", "--json", *args)
    return out.exit_code, json.loads(out.output)


def codes(report: dict) -> list[str]:
    return sorted(p["code"] for p in report["problems"])


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_healthy_workspace_is_ok(workspace, run_cli, tmp_path):
    make_items(run_cli, tmp_path / "imgs", 3)
    code, report = doctor(run_cli)
    assert code == 0 and report["ok"] and report["problems"] == [] and report["checked"]["images"] == 3


def test_finds_and_repairs_what_a_kill_leaves(workspace, run_cli, tmp_path):
    make_items(run_cli, tmp_path / "imgs", 4)
    ids = mark_checked(workspace.store)
    assert run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified").exit_code == 0
    release = workspace.path("releases")
    stale = release / ".r-1.pid999999999.abc.tmp"  # a killed export's temporary (no such process)
    stale.mkdir()
    (stale / "records.jsonl").write_text("{}")
    import socket
    with workspace.store.write() as session:
        # an item under review with no task (nothing would ever decide it)
        session.execute(update(Item).where(Item.id == ids[0]).values(status=IN_REVIEW))
        # a claim held by a worker whose process is gone, and one whose lease lapsed long ago
        session.execute(insert(WorkClaim.__table__), [
            {"generator": "g", "key": "a", "state": "leased", "worker": f"{socket.gethostname()}:{dead_pid()}:x",
             "lease_expires": utcnow() + timedelta(hours=1)},
            {"generator": "g", "key": "b", "state": "leased", "worker": "otherhost:1:y",
             "lease_expires": utcnow() - timedelta(hours=1)},
            {"generator": "g", "key": "c", "state": "leased", "worker": "otherhost:2:z",
             "lease_expires": utcnow() + timedelta(hours=1)}])  # alive elsewhere: left alone
    code, found = doctor(run_cli)
    assert code == 1 and not found["ok"] and found["changes"] == []
    assert codes(found) == ["claim_dead", "claim_dead", "item_stuck", "release_temporary"]
    assert statuses(workspace.store)[ids[0]] == IN_REVIEW  # looking changes nothing

    code, repaired = doctor(run_cli, "--repair")
    assert code == 0 and repaired["ok"] and len(repaired["changes"]) == 4
    assert statuses(workspace.store)[ids[0]] == CHECKED and not stale.exists()
    with workspace.store.session() as session:
        states = dict(session.execute(select(WorkClaim.key, WorkClaim.state)).all())
    assert states == {"a": "free", "b": "free", "c": "leased"}
    assert doctor(run_cli)[0] == 0
    human = run_cli("doctor")
    assert human.exit_code == 0 and "no problems found" in human.output


def test_changed_images_and_broken_releases_are_reported_never_repaired(workspace, run_cli, tmp_path):
    make_items(run_cli, tmp_path / "imgs", 3)
    mark_checked(workspace.store)
    assert run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified").exit_code == 0
    with workspace.store.session() as session:
        paths = sorted(session.execute(select(Image.path)).scalars())
    (tmp_path / "imgs" / paths[0].rsplit("/", 1)[1]).unlink()
    with open(paths[1], "ab") as fh:
        fh.write(b"tampered")
    records = next(workspace.path("releases").glob("r-1/**/*.jsonl"))
    records.write_text(records.read_text() + "\n")
    code, report = doctor(run_cli, "--repair")
    assert code == 1 and report["changes"] == []
    assert codes(report) == ["image_changed", "image_missing", "release_invalid"]
    assert all(not p["repaired"] for p in report["problems"])


def test_tasks_the_server_lacks_are_forgotten(label_studio, ls_workspace, run_cli, request):  # noqa: F811
    make_items(run_cli, label_studio.media_root / request.node.name, 3)
    mark_checked(ls_workspace.store)
    assert json.loads(run_cli("annotate", "push", "--json").output)["pushed"] == 3
    tasks = task_map(ls_workspace.store)
    gone_item = sorted(tasks)[1]
    label_studio.client().tasks.delete(id=tasks[gone_item])
    assert doctor(run_cli, "--offline")[0] == 0  # offline: the server is not asked
    code, found = doctor(run_cli)
    assert code == 1 and codes(found) == ["task_missing_on_server"]
    assert found["problems"][0]["task"] == tasks[gone_item]
    code, repaired = doctor(run_cli, "--repair")
    assert code == 0 and len(repaired["changes"]) == 1
    assert statuses(ls_workspace.store)[gone_item] == CHECKED
    assert gone_item not in task_map(ls_workspace.store)
    again = json.loads(run_cli("annotate", "push", "--json").output)
    assert again["pushed"] == 1
    with ls_workspace.store.session() as session:
        assert session.execute(select(AnnotationTask).where(AnnotationTask.state == "deleted")).scalars().all()
