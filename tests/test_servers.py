"""One Label Studio server per person (issue 32): each person's tasks live on their own server, where no other
person's token or login reaches them; push routes, pull reads every server; a release says per item how many
people judged it and whether on separate servers, and calls one shared server "shared server: not blind".

Real servers: `people_servers` (three people, each the only user of their own server; an outsider with none) and,
for the shared-server release, the shared `label_studio` fixture."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from fixtures_label_studio import OUTSIDER, free_port, ls_bin, migrated_template, verify_result
from sqlalchemy import select, update

from release_stock import add_cfmm
from test_annotate import TOKEN_ENV, configure, make_items
from test_browser import browser, log_in, save_screenshot  # noqa: F401 (fixture)
from test_mucr_release import selected_pairs

from cftools.annotate.label_studio import server_settings
from cftools.annotate.verification import SEPARATE, SHARED
from cftools.boundary import workspace_boundary
from cftools.errors import CftoolsError
from cftools.models import ACCEPTED, CHECKED, AnnotationTask, Item, Judgment
from cftools.workspace import load_workspace


def people_config(ws_root: Path, people_servers, prefix: str) -> None:
    people_servers.configure(ws_root, prefix)


@pytest.fixture
def people_ws(workspace, people_servers, monkeypatch):
    people_config(workspace.root, people_servers, f"p-{uuid.uuid4().hex[:8]}")
    people_servers.use_in(monkeypatch)
    ws = load_workspace(workspace.root)
    yield ws
    ws.close()


def tasks_by_person(store, purpose: str = "verify") -> dict[str, list[AnnotationTask]]:
    found = defaultdict(list)
    with store.session() as session:
        for task in session.execute(select(AnnotationTask).where(AnnotationTask.purpose == purpose,
                                                                 AnnotationTask.state != "deleted")).scalars():
            session.expunge(task)
            found[task.assignee].append(task)
    return found


def choices(name: str, to: str, value: str) -> dict:
    return {"from_name": name, "to_name": to, "type": "choices", "value": {"choices": [value]}}


ACCEPT = {  # each kind's verification, accepted as its label config asks
    "cvqa": verify_result("yes", "yes"),
    "cfmm": [choices("related", "image", "yes"), choices("basic_correct", "basic_question", "yes"),
             choices("cf_answer", "question", "blue")],
    "mucr": [choices("related", "effect_image", "yes"), choices("answer_correct", "cue", "yes")],
}


def judge_all_on_own_servers(people_servers, store) -> None:
    """Each assignee accepts each of their tasks with their own token on their own server."""
    with store.session() as session:
        kinds = dict(session.execute(select(Item.id, Item.kind)).all())
    for person, tasks in tasks_by_person(store).items():
        client = people_servers.client(person)
        for task in tasks:
            client.annotations.create(id=task.ls_task_id, result=ACCEPT[kinds[task.item_id]])


def push(run_cli, *args) -> dict:
    result = run_cli("annotate", "push", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def pull(run_cli) -> dict:
    result = run_cli("annotate", "pull", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# ---------------------------------------------------------------- config


def test_people_tables_name_the_annotators_and_their_servers(workspace, monkeypatch):
    config = workspace.root / "cftools.toml"
    base = config.read_text()
    config.write_text(base + '\n[label_studio.people."Ann1@example.com"]\nurl = "http://127.0.0.1:18101/"\n'
                      'token_env = "T_ANN1"\n[label_studio.people."ann2@example.com"]\nurl = "http://127.0.0.1:18102"\n'
                      'token_env = "T_ANN2"\n')
    monkeypatch.setenv("T_ANN1", "secret-ann1-token")
    monkeypatch.delenv("T_ANN2", raising=False)
    settings = server_settings(load_workspace(workspace.root))
    assert settings.annotators == ("ann1@example.com", "ann2@example.com")
    assert settings.separate_servers and not settings.configured
    assert settings.person("ann1@example.com").url == "http://127.0.0.1:18101"
    assert "secret-ann1-token" not in repr(settings) and "$T_ANN2" in settings.how_to_configure()
    config.write_text(config.read_text().replace("[label_studio]\n", '[label_studio]\nannotators = '
                                                 '["ann1@example.com", "carol@example.com"]\n', 1))
    with pytest.raises(CftoolsError, match="carol@example.com"):
        server_settings(load_workspace(workspace.root))


# ---------------------------------------------------------------- blind by construction


def test_each_person_works_on_their_own_server_and_no_other_token_reaches_it(people_ws, people_servers, run_cli,
                                                                           request):
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 3)
    with people_ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
    report = push(run_cli)
    assert report["pushed"] == 6 and report["verification"] == SEPARATE
    mine = tasks_by_person(people_ws.store)
    assert sum(len(t) for t in mine.values()) == 6
    for person, tasks in mine.items():  # each task lives on its assignee's own server
        assert {t.server for t in tasks} == {people_servers.people[person].url}
    ann1, ann2 = "ann1@example.com", "ann2@example.com"
    one_task = mine[ann1][0]
    people_servers.client(ann1).annotations.create(id=one_task.ls_task_id, result=verify_result("yes", "no", "7"))
    own = people_servers.people[ann1]
    as_ann2 = {"Authorization": f"Token {people_servers.people[ann2].token}"}
    # ann2's token on ann1's server: no project list, no project, no task, no annotation
    for path in ("/api/projects/", f"/api/projects/{one_task.ls_project_id}/",
                 f"/api/tasks/{one_task.ls_task_id}/", f"/api/tasks/{one_task.ls_task_id}/annotations/"):
        response = httpx.get(own.url + path, headers=as_ann2, timeout=30)
        assert response.status_code == 401, (path, response.status_code)
    # ann2's own server holds only ann2's projects, none of ann1's tasks
    projects = people_servers.client(ann2).projects.list()
    ours = [p for p in projects if p.title.startswith(report_prefix(people_ws))]
    assert ours and not any("@" in p.title or "@" in (p.description or "") for p in ours)  # no email on any page
    on_server = {t.id for p in ours for t in people_servers.client(ann2).tasks.list(project=p.id)}
    assert on_server and on_server <= {t.ls_task_id for t in mine[ann2]}
    # the outsider has no account anywhere and cannot make one without an invitation
    with httpx.Client(base_url=own.url, follow_redirects=False, timeout=30) as s:
        s.get("/user/signup/")
        r = s.post("/user/signup/", data={"email": OUTSIDER[0], "password": OUTSIDER[1],
                                          "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
                   headers={"Referer": own.url + "/user/signup/"})
        assert r.status_code != 302
        assert s.get("/api/projects/").status_code in (401, 403)
    # the Data Manager tab of each project hides the task data (item key, kind, JSON, HTML, image URL columns)
    views = httpx.get(own.url + "/api/dm/views/", params={"project": one_task.ls_project_id},
                      headers={"Authorization": f"Token {own.token}"}, timeout=30).json()
    hidden = [v for v in views if v["data"].get("title") == "Tasks"][0]["data"]["hiddenColumns"]["explore"]
    for key in ("item_key", "kind", "image", "check_flags"):
        assert f"tasks:data.{key}" in hidden
    # the instructions say the server is the annotator's alone
    project = people_servers.client(ann1).projects.get(id=one_task.ls_project_id)
    assert "yours alone" in project.expert_instruction


def report_prefix(ws) -> str:
    return ws.section("label_studio")["project_prefix"]


def test_in_chromium_ann2_sees_only_their_own_projects(people_ws, people_servers, run_cli, browser, request):  # noqa: F811
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    with people_ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
    push(run_cli)
    ann1, ann2 = people_servers.people["ann1@example.com"], people_servers.people["ann2@example.com"]
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        log_in(page, ann1.url, ann2.email, ann2.password)  # ann2's login on ann1's server fails
        assert "/user/login" in page.url
        log_in(page, ann2.url, ann2.email, ann2.password)
        assert "/user/login" not in page.url
        page.goto(ann2.url + "/projects/")
        page.wait_for_selector(f"text={report_prefix(people_ws)}")
        text = page.inner_text("body")
        save_screenshot(page, "one-server-per-person-ann2-projects")
        # ann2's projects are listed, and no title names anyone (on a server of one's own it needs not)
        assert ann1.email not in text and f"for {ann2.email}" not in text
    finally:
        context.close()


# ---------------------------------------------------------------- every kind, and the release


def add_kind_items(ws, run_cli, folder: Path) -> None:
    """Checked items of every kind: C-VQA ingested, CFMM pairs, MuCR selected pairs."""
    make_items(run_cli, folder / "cvqa", 2)
    add_cfmm(ws, folder / "cfmm")
    selected_pairs(ws, folder / "mucr", {"rain": 2}, status=CHECKED)
    with ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))


def release(run_cli, out: Path) -> tuple[str, dict, list[dict]]:
    result = run_cli("export", "servers-test", "--version", "1.0.0", "--licence", "CC-BY-4.0", "--out", out)
    assert result.exit_code == 0, result.output
    [out] = out.iterdir()
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return (out / "README.md").read_text(), json.loads((out / "croissant.json").read_text()), records


def test_every_kind_through_per_person_servers_is_accepted_and_released_as_separate_servers(
        people_ws, people_servers, run_cli, tmp_path, request):
    add_kind_items(people_ws, run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}")
    for kind in ("cvqa", "cfmm", "mucr"):
        assert push(run_cli, "--kind", kind)["pushed"] > 0
    judge_all_on_own_servers(people_servers, people_ws.store)
    report = pull(run_cli)
    assert not report["refused"] and not report["invalid"], report["invalid"][:3]
    with people_ws.store.session() as session:
        items = list(session.execute(select(Item)).scalars())
        assert {i.kind for i in items} == {"cvqa", "cfmm", "mucr"}
        assert all(i.status == ACCEPTED for i in items), {i.key: i.status for i in items}
        for item in items:
            judges = set(session.execute(select(Judgment.annotator).join(
                AnnotationTask, AnnotationTask.id == Judgment.task_id).where(AnnotationTask.item_id == item.id))
                .scalars())
            assert len(judges) == 2
    status = run_cli("annotate", "status", "--json")
    assert json.loads(status.output)["verification"] == {SEPARATE: len(items)}
    card, croissant, records = release(run_cli, tmp_path / "release")
    assert f"Verification on {SEPARATE}" in card and SHARED not in card.split("How the judgments were made")[1][:300]
    assert SEPARATE in croissant["rai:dataAnnotationProtocol"] and SHARED not in croissant["rai:dataAnnotationProtocol"]
    for record in records:
        v = record["verification"]
        assert v["people"] == 2 and v["separate_servers"] and v["how"] == SEPARATE
        assert all("@" not in a for a in v["annotators"]) and len(set(v["annotators"])) == 2
        assert set(v["annotators"]) <= {workspace_boundary(people_ws).pseudonym(e) for e in people_servers.people}


def test_a_release_made_on_one_shared_server_says_shared_server_not_blind(workspace, label_studio, monkeypatch, run_cli,
                                                                          tmp_path, request):
    configure(workspace.root, label_studio.url, label_studio.media_root, f"s-{uuid.uuid4().hex[:8]}",
              extra=f"annotators = {json.dumps(label_studio.annotators)}\n")
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    ws = load_workspace(workspace.root)
    make_items(run_cli, label_studio.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    with ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
    assert push(run_cli)["verification"] == SHARED
    for person, tasks in tasks_by_person(ws.store).items():
        client = label_studio.client(person)
        for task in tasks:
            client.annotations.create(id=task.ls_task_id, result=verify_result("yes", "yes"))
    pull(run_cli)
    card, croissant, records = release(run_cli, tmp_path / "release")
    assert "judged on a shared server: not blind" in card
    assert SHARED in croissant["rai:dataAnnotationProtocol"]
    assert "Verification on separate servers" not in card + croissant["rai:dataAnnotationProtocol"]
    assert all(r["verification"]["how"] == SHARED and not r["verification"]["separate_servers"] for r in records)
    ws.close()


# ---------------------------------------------------------------- annotate serve (slow: one test)


def test_annotate_serve_starts_one_server_per_person_and_stop_stops_it(workspace, run_cli, monkeypatch, tmp_path):
    binary = ls_bin()
    if not binary.exists():
        pytest.skip(f"no Label Studio at {binary}")
    port = free_port()
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text() + f'\n[label_studio.people."serve@example.com"]\n'
                      f'url = "http://127.0.0.1:{port}"\ntoken_env = "CFTOOLS_TEST_SERVE_TOKEN"\n')
    monkeypatch.delenv("CFTOOLS_TEST_SERVE_TOKEN", raising=False)
    # the migrated template a first `serve` would build (30 s of migrations), copied from the tests' cache
    shutil.copytree(migrated_template(binary, tmp_path, empty=True), workspace.root / "label-studio" / "template")
    started = run_cli("annotate", "serve", "--ls-bin", binary)
    try:
        assert started.exit_code == 0, started.output
        assert f"http://127.0.0.1:{port}" in started.output and "password" in started.output
        token = started.output.split("CFTOOLS_TEST_SERVE_TOKEN=")[1].split()[0]
        me = httpx.get(f"http://127.0.0.1:{port}/api/current-user/whoami", headers={"Authorization": f"Token {token}"},
                       timeout=30).json()
        assert me["email"] == "serve@example.com"
        state = (workspace.root / "label-studio" / "servers.json").read_text()
        assert token not in state and "password" not in state
        assert token not in config.read_text()
        rows = json.loads(run_cli("annotate", "servers", "--json").output)
        assert rows[0]["pid"] and rows[0]["answers"] and not rows[0]["token_set"]
        assert rows[0]["alone"] and rows[0]["checked_during"] == "serve"  # proven at serve, by the server itself
    finally:
        stopped = run_cli("annotate", "stop")
    assert "Stopped 1 server" in stopped.output
    assert not json.loads(run_cli("annotate", "servers", "--json").output)[0]["answers"]
    os.environ.pop("CFTOOLS_TEST_SERVE_TOKEN", None)


def test_a_project_titled_with_its_persons_email_is_found_and_renamed_to_name_no_one(people_ws, people_servers,
                                                                                     run_cli, request):
    """A workspace whose push ran before titles stopped naming people: its "... for EMAIL" project on the person's
    own server is the one push uses (no second project), and from then on its title and description name no one."""
    from cftools.annotate.projects import project_title, titled
    from cftools.annotate.purpose import Purpose
    from cftools.annotate.rules import render_label_config

    settings = server_settings(people_ws)
    ann1 = people_servers.people["ann1@example.com"]
    old_title = titled(settings, "cvqa", Purpose("verify"), ann1.email)
    client = people_servers.client(ann1.email)
    old = client.projects.create(title=old_title, description=f"the tasks of {ann1.email} only",
                                 label_config=render_label_config("cvqa", "verify", str(people_ws.root)))
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    with people_ws.store.write() as session:
        session.execute(update(Item).values(status=CHECKED))
    push(run_cli)
    mine = [t for t in tasks_by_person(people_ws.store)["ann1@example.com"]]
    assert mine and {t.ls_project_id for t in mine} == {old.id}
    renamed = client.projects.get(id=old.id)
    assert renamed.title == project_title(settings, "cvqa", Purpose("verify"), ann1.email) and "@" not in renamed.title
    assert "@" not in (renamed.description or "")
    assert [p.id for p in client.projects.list() if p.title in (old_title, renamed.title)] == [old.id]
