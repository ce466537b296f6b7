"""Checks calibrated against people (issue 48), against real Label Studio servers (one per person): `annotate push
--flagged-sample N --seed S` sends a seeded sample of flagged drafts to people as measuring tasks, blind to the
flags; `annotate pull` records each judgment as a `measure` outcome and leaves the item (status, flags) as it was;
`check_calibration` gives each check's precision (flagged and people reject) and the checks' misses (items people
rejected in verification that no check flagged), and names a check whose precision is low.

One module-scoped world on the session's `people_servers`: cvqa items whose truth the simulated people know (a bad
item is rejected, a good one accepted), flagged by two checks by design: `arithmetic` on drafts 0-7 (bad: 0-6),
`leakage` on drafts 6-11 (bad: 6 and 8 only). The tests run in order on that world."""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from fixtures_label_studio import PeopleWorld, verify_result
from simulated_people_ls import open_tasks

from cftools.annotate.measure import flagged_sample
from cftools.checks.calibration import check_calibration
from cftools.models import CHECKED, DRAFT, REJECTED, AnnotationTask, CheckFlag, Item, TaskOutcome
from cftools.workspace import init_workspace, load_workspace

N_DRAFTS = 12
FLAGS = {"arithmetic": range(0, 8), "leakage": range(6, 12)}
BAD_DRAFTS = {0, 1, 2, 3, 4, 5, 6, 8}
WAIVED_DRAFT, CLEAN_DRAFT = 12, 13  # a draft whose only flag was waived; a draft no check flagged: never measured
CHECKED_ITEMS = {14: "bad", 15: "bad", 16: "good", 17: "bad, flagged (waived)"}  # verified the ordinary way
SEED = 3
TRUTH = "2"


def question(n: int) -> str:
    return f"How many squares would there be if one more was added (item {n})?"


def number_of(data: dict) -> int:
    return int(str(data["question"]).rsplit("(item ", 1)[1].rstrip(")?"))


class World(PeopleWorld):
    def ids(self) -> dict[int, int]:
        """Item number (in its question) -> item id."""
        return self.read(lambda s: {int(q.rsplit("(item ", 1)[1].rstrip(")?")): i
                                    for i, q in s.execute(select(Item.id, Item.question))})

    def item_state(self) -> tuple:
        """Every item's status and every flag, as they stand."""
        return self.read(lambda s: (sorted(s.execute(select(Item.id, Item.status)).all()),
                                    sorted(s.execute(select(CheckFlag.item_id, CheckFlag.code, CheckFlag.reason)))))

    def measure_tasks(self) -> list[tuple[str, str]]:
        return self.read(lambda s: sorted(s.execute(
            select(Item.key, AnnotationTask.assignee).join(AnnotationTask, AnnotationTask.item_id == Item.id)
            .where(AnnotationTask.purpose == "measure")).all()))

    def answer_open_tasks(self) -> dict[str, int]:
        """Each person judges their open tasks on their own server: a bad item is rejected, a good one accepted;
        returns the check_flags each task showed, counted."""
        shown: dict[str, int] = {}
        for email in self.people_servers.people:
            client = self.people_servers.client(email)
            for task_id, data in open_tasks(client, self.prefix):
                n = number_of(data)
                bad = n in BAD_DRAFTS or CHECKED_ITEMS.get(n, "good").startswith("bad")
                shown[data["check_flags"]] = shown.get(data["check_flags"], 0) + 1
                verdict = verify_result("yes", "no" if bad else "yes")
                client.annotations.create(id=task_id, lead_time=3.0, result=verdict)
        return shown


def write_items(folder: Path, numbers: range) -> Path:
    folder.mkdir()
    rows = []
    for n in numbers:
        PIL.Image.new("RGB", (8 + n, 8), (200, 20 * n % 255, 40)).save(folder / f"img{n}.png")
        rows.append({"img_path": f"images/img{n}.png", "query": f"How many squares are there (item {n})?",
                     "answer": "1", "new query": question(n), "new answer": TRUTH, "type": "direct"})
    table = folder / "items.csv"
    with open(table, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return table


def set_the_scene(root: Path) -> None:
    """Drafts flagged by design (one flag waived), one clean draft, and checked items for ordinary verification."""
    ws = load_workspace(root)
    try:
        with ws.store.write() as session:
            items = {int(i.question.rsplit("(item ", 1)[1].rstrip(")?")): i
                     for i in session.execute(select(Item)).scalars()}
            for n, item in items.items():
                item.status = CHECKED if n in CHECKED_ITEMS else DRAFT
            for code, numbers in FLAGS.items():
                for n in numbers:
                    session.add(CheckFlag(item_id=items[n].id, code=code, reason=f"{code} (by design)"))
            for n in (WAIVED_DRAFT, 17):
                session.add(CheckFlag(item_id=items[n].id, code="arithmetic", reason="arithmetic (waived)"))
                items[n].data = {**(items[n].data or {}), "waived_flags": {"arithmetic": {
                    "by": "lead", "at": "2026-11-27T09:00:00", "reason": "checked by hand"}}}
    finally:
        ws.close()


@pytest.fixture(scope="module")
def world(people_servers, tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("calibration") / "ws"
    init_workspace(root).close()
    prefix = f"c-{uuid.uuid4().hex[:8]}"
    people_servers.configure(root, prefix, annotate="control_rate = 0\n")
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(root))
    people_servers.use_in(monkeypatch)
    w = World(root, people_servers, prefix)
    folder = people_servers.media_root / f"calib-{uuid.uuid4().hex[:6]}"
    w.cli("ingest", "cvqa", write_items(folder, range(N_DRAFTS + 2 + len(CHECKED_ITEMS))), "--images", folder)
    set_the_scene(root)
    yield w
    monkeypatch.undo()


def test_a_seeded_sample_of_flagged_drafts_goes_to_people_and_a_rerun_adds_nothing(world):
    ids = world.ids()
    before = world.item_state()
    ws = load_workspace(world.root)
    try:
        expected = sorted(item.key for item in flagged_sample(ws.store, 5, SEED)[0])
        other_seed = sorted(item.key for item in flagged_sample(ws.store, 5, SEED + 1)[0])
        assert expected == sorted(item.key for item in flagged_sample(ws.store, 5, SEED)[0])  # reproducible
    finally:
        ws.close()
    assert expected != other_seed
    first = world.json("annotate", "push", "--flagged-sample", 5, "--seed", SEED)
    assert first["pushed"] == 5 and first["flagged"] == N_DRAFTS and first["items"] == expected
    again = world.json("annotate", "push", "--flagged-sample", 5, "--seed", SEED)
    assert again["pushed"] == 0 and again["measured_before"] == 5
    said = world.cli("annotate", "push", "--flagged-sample", 5, "--seed", SEED).output
    said = " ".join(said.split())
    assert f"Sample of 5 flagged drafts (seed {SEED}) among {N_DRAFTS}: 5 measured before, 0 measuring" in said
    more = world.json("annotate", "push", "--flagged-sample", N_DRAFTS, "--seed", SEED)
    assert more["pushed"] == N_DRAFTS - 5 and not set(more["items"]) & set(expected)
    tasks = world.measure_tasks()
    keys = world.read(lambda s: dict(s.execute(select(Item.id, Item.key)).all()))
    assert sorted(key for key, _ in tasks) == sorted(keys[ids[n]] for n in range(N_DRAFTS))  # never the waived one
    assert len({person for _, person in tasks}) == 3  # spread over the people
    assert world.item_state() == before  # the drafts stay drafts, their flags as they were


def test_a_killed_push_is_resumed_without_a_second_task(world):
    """Two measuring tasks imported by a push killed before it recorded them are linked as measuring tasks (not
    audits) by the next push, and nothing is imported twice."""
    before = world.read(lambda s: sorted(s.execute(select(AnnotationTask.item_id, AnnotationTask.purpose,
                                                          AnnotationTask.ls_task_id, AnnotationTask.assignee)
                                                   .where(AnnotationTask.purpose == "measure")).all()))
    ws = load_workspace(world.root)
    try:
        with ws.store.write() as session:
            forgotten = [t for t in session.execute(select(AnnotationTask).where(AnnotationTask.purpose == "measure")
                                                    .order_by(AnnotationTask.id)).scalars()][:2]
            for task in forgotten:
                session.delete(task)
    finally:
        ws.close()
    resumed = world.json("annotate", "push", "--flagged-sample", N_DRAFTS, "--seed", SEED)
    assert (resumed["reconciled"], resumed["pushed"], resumed["measured_before"]) == (2, 0, N_DRAFTS)
    after = world.read(lambda s: sorted(s.execute(select(AnnotationTask.item_id, AnnotationTask.purpose,
                                                         AnnotationTask.ls_task_id, AnnotationTask.assignee)
                                                  .where(AnnotationTask.purpose.in_(["measure", "audit"]))).all()))
    assert after == before


def test_a_flagged_sample_needs_named_people(workspace, run_cli, monkeypatch):
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace("[label_studio]\n", '[label_studio]\nurl = "http://127.0.0.1:9"\n',
                                                 1))
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "not-a-real-token")
    result = run_cli("annotate", "push", "--flagged-sample", "3")
    assert result.exit_code != 0
    assert "--flagged-sample needs [label_studio] annotators" in result.output
    assert "not-a-real-token" not in result.output


@pytest.mark.parametrize("args, says", [
    (("--seed", "3"), "--seed is the seed of --flagged-sample's sample"),
    (("--flagged-sample", "3", "--adjudicate"), "--flagged-sample pushes measuring tasks of flagged drafts alone"),
    (("--flagged-sample", "3", "--limit", "2"), "--flagged-sample pushes measuring tasks of flagged drafts alone"),
])
def test_options_that_do_not_go_with_a_flagged_sample_are_refused(workspace, run_cli, args, says):
    result = run_cli("annotate", "push", *args)
    assert result.exit_code == 2 and says in " ".join(result.output.split())


def test_people_judge_measuring_tasks_blind_to_the_flags_and_their_judgment_never_decides(world):
    ordinary = world.json("annotate", "push", "--kind", "cvqa")
    assert ordinary["pushed"] == 2 * len(CHECKED_ITEMS)
    before = world.item_state()
    shown = world.answer_open_tasks()
    assert shown == {"none": N_DRAFTS + 2 * len(CHECKED_ITEMS) - 2, "arithmetic: arithmetic (waived)": 2}
    world.cli("annotate", "pull")
    ids = world.ids()
    outcomes = world.read(lambda s: {item_id: given for item_id, given in s.execute(
        select(TaskOutcome.item_id, TaskOutcome.given_ok).where(TaskOutcome.role == "measure"))})
    assert outcomes == {ids[n]: n not in BAD_DRAFTS for n in range(N_DRAFTS)}
    statuses, flags = world.item_state()
    drafts = {ids[n] for n in range(N_DRAFTS + 2)}
    assert [row for row in statuses if row[0] in drafts] == [row for row in before[0] if row[0] in drafts]
    assert all(status == DRAFT for item_id, status in statuses if item_id in drafts)
    assert flags == before[1]
    rejected = {ids[n] for n, truth in CHECKED_ITEMS.items() if truth.startswith("bad")}
    assert {item_id for item_id, status in statuses if status == REJECTED} == rejected


def test_each_checks_precision_equals_the_simulated_truth_and_a_low_one_is_named(world):
    found = world.read(check_calibration)
    rows = {row["code"]: row for row in found["checks"]}
    for code, numbers in FLAGS.items():
        bad = len(BAD_DRAFTS & set(numbers))
        assert (rows[code]["measured"], rows[code]["people_rejected"]) == (len(numbers), bad)
        assert rows[code]["precision"] == pytest.approx(bad / len(numbers))
        low, high = rows[code]["interval"]
        assert low < rows[code]["precision"] < high
    assert rows["arithmetic"]["precision"] == 0.875 and not rows["arithmetic"]["low"]
    assert rows["leakage"]["precision"] == pytest.approx(1 / 3) and rows["leakage"]["low"]
    misses = found["misses"]
    assert (misses["people_rejected"], misses["unflagged"]) == (3, 2)  # item 17 was flagged (then waived)
    assert misses["miss_rate"] == pytest.approx(2 / 3)
    per_check = {row["code"]: row for row in misses["per_check"]}
    assert per_check["arithmetic"]["missed"] == 2 and per_check["leakage"]["missed"] == 3
    assert found["low_precision_below"] == 0.5
    assert world.json("check", "--calibration") == json.loads(json.dumps(found))
    shown = world.cli("check", "--calibration").output
    assert "Low precision" in shown and "leakage" in shown.rsplit("Low precision", 1)[1]


def test_the_low_precision_threshold_is_the_workspaces(world):
    config = world.root / "cftools.toml"
    text = config.read_text()
    config.write_text(text.replace("\n[checks]\n", "\n[checks]\nlow_precision = 0.9\n", 1))
    try:
        found = world.json("check", "--calibration")
    finally:
        config.write_text(text)
    assert found["low_precision_below"] == 0.9
    assert [row["code"] for row in found["checks"] if row["low"]] == ["arithmetic", "leakage"]
