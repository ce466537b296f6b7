"""Separation proven, then stated (issue 43): whether each person's server is theirs alone is asked of the servers
(their users, which tokens they refuse, their document root), recorded with each judgment, and every report (push,
`annotate status`, `annotate servers`, the release's records, card and croissant.json, the people's instructions)
says "blind" / "yours alone" only where the checks proved it.

Real servers: `people_servers` for the normal case (three people, each the only user of their own server) and, for
the cases that spoil a server (a second user on it), two fresh servers of this module's own."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
from fixtures_label_studio import found_ls_bin, launch_server, migrated_template, signup, verify_result, wait_until_up
from sqlalchemy import select

from test_annotate import make_items, mark_checked
from test_servers import people_config, people_ws, pull, push, release, tasks_by_person  # noqa: F401 (fixture)

from cftools.annotate.separation import EXTRA_USER, TOKEN_ACCEPTED, exposed
from cftools.annotate.verification import NOT_PROVEN, SEPARATE, SHARED
from cftools.models import AnnotationTask, Judgment, SeparationCheck
from cftools.workspace import load_workspace

NO_ONE_COULD_SEE = "no one could see another person's work"
ANN1, ANN2 = ("ann1@example.com", "Annot1-pass-123"), ("ann2@example.com", "Annot2-pass-123")


class OwnServer:
    def __init__(self, email: str, password: str, token: str, url: str) -> None:
        self.email, self.password, self.token, self.url = email, password, token, url

    @property
    def token_env(self) -> str:
        return "CFTOOLS_TEST_SEP_TOKEN_" + self.email.split("@")[0].upper()


@pytest.fixture(scope="module")
def spoilable(tmp_path_factory):
    """Two fresh servers, ann1's and ann2's (each its person's only user to begin with): the tests here add users
    to them, so they are no one else's."""
    binary = found_ls_bin()
    scratch = tmp_path_factory.mktemp("spoilable")
    template = migrated_template(binary, scratch, empty=True)
    media = scratch / "media"
    media.mkdir()
    started = []
    try:
        for email, password in (ANN1, ANN2):
            name = email.split("@")[0]
            shutil.copytree(template, scratch / name)
            token = f"cftools-sep-{name}-token-0123456789"
            running = launch_server(binary, scratch / name, media, scratch / f"{name}.log", (email, password, token))
            started.append((OwnServer(email, password, token, running.url), running))
        for _, running in started:
            wait_until_up(running)
        yield {s.email: s for s, _ in started}, media
    finally:
        for _, running in started:
            running.stop()


def configure_people(ws_root: Path, media: Path, people: dict[str, tuple[str, str]], monkeypatch) -> None:
    """PEOPLE: email -> (url, token) in cftools.toml and the environment."""
    config = ws_root / "cftools.toml"
    text = config.read_text().replace("[label_studio]\n", f'[label_studio]\ndocument_root = "{media}"\n'
                                      f'project_prefix = "sep-{uuid.uuid4().hex[:8]}"\n', 1)
    for email, (url, token) in people.items():
        env = "CFTOOLS_TEST_SEP_" + email.split("@")[0].upper()
        text += f'\n[label_studio.people."{email}"]\nurl = "{url}"\ntoken_env = "{env}"\n'
        monkeypatch.setenv(env, token)
    config.write_text(text)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)


def judge_all(store, tokens: dict[str, tuple[str, str]]) -> None:
    """Each assignee accepts each of their tasks with their token on the server the task lives on."""
    from label_studio_sdk import LabelStudio

    for person, tasks in tasks_by_person(store).items():
        for task in tasks:
            LabelStudio(base_url=task.server, api_key=tokens[person][1], max_retries=0).annotations.create(
                id=task.ls_task_id, result=verify_result("yes", "yes"))


def cli_json(run_cli, *args) -> dict | list:
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def judgment_checks(store) -> list[tuple[str, bool | None]]:
    with store.session() as session:
        return list(session.execute(select(Judgment.annotator, SeparationCheck.ok).outerjoin(
            SeparationCheck, SeparationCheck.id == Judgment.separation_check_id)).all())


def assert_not_blind_release(run_cli, out: Path, how: str, why: str) -> None:
    card, croissant, records = release(run_cli, out)
    protocol = croissant["rai:dataAnnotationProtocol"]
    assert NO_ONE_COULD_SEE not in card and NO_ONE_COULD_SEE not in protocol
    assert "were not blind" in card and "were not blind" in protocol and why in card
    assert records and all(r["verification"]["how"] == how and r["verification"]["blind"] is False
                           and why in r["verification"]["why_not_blind"] for r in records)
    assert not any("@" in r["verification"]["why_not_blind"] for r in records)  # the release names no one


# ---------------------------------------------------------------- the normal case


def test_three_people_on_their_own_servers_are_proven_blind_and_the_claim_stays(people_ws, people_servers, run_cli,
                                                                               tmp_path, request):
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 3)
    mark_checked(people_ws.store)
    report = push(run_cli)
    assert report["verification"] == SEPARATE and report["separation"] == []
    tokens = {p.email: (p.url, p.token) for p in people_servers.people.values()}
    judge_all(people_ws.store, tokens)
    assert pull(run_cli)["separation"] == []
    checks = judgment_checks(people_ws.store)
    assert checks and all(ok is True for _, ok in checks)  # each judgment carries the check that covers it
    with people_ws.store.session() as session:
        methods = [c.method for c in session.execute(select(SeparationCheck)).scalars()]
    assert any("localfiles/validate" in m for m in methods), methods  # the document root, as the server says
    status = cli_json(run_cli, "annotate", "status")
    assert status["verification"] == {SEPARATE: 3} and status["not_blind_because"] == {}
    rows = cli_json(run_cli, "annotate", "servers")
    assert all(r["alone"] for r in rows)
    card, croissant, records = release(run_cli, tmp_path / "release")
    assert NO_ONE_COULD_SEE in card and NO_ONE_COULD_SEE in croissant["rai:dataAnnotationProtocol"]
    assert all(r["verification"]["blind"] and r["verification"]["how"] == SEPARATE
               and r["verification"]["why_not_blind"] == "" for r in records)
    project = people_servers.client(ANN1[0]).projects.get(
        id=tasks_by_person(people_ws.store)[ANN1[0]][0].ls_project_id)
    assert "yours alone" in project.expert_instruction


# ---------------------------------------------------------------- an invited user, then two URLs to one server


def test_an_invited_user_on_a_persons_server_is_named_and_their_judgments_are_not_blind(
        workspace, spoilable, run_cli, monkeypatch, tmp_path, request):
    servers, media = spoilable
    ann1, ann2 = servers[ANN1[0]], servers[ANN2[0]]
    tokens = {ann1.email: (ann1.url, ann1.token), ann2.email: (ann2.url, ann2.token)}
    configure_people(workspace.root, media, tokens, monkeypatch)
    ws = load_workspace(workspace.root)
    make_items(run_cli, media / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    mark_checked(ws.store)
    assert push(run_cli)["verification"] == SEPARATE
    judge_all(ws.store, tokens)
    pull(run_cli)
    assert all(ok is True for _, ok in judgment_checks(ws.store))

    signup(ann1.url, ann1.token, "outsider@example.com", "Outsider-pass-123")  # ann1 invites someone in
    report = pull(run_cli)
    assert any("ann1's server has another user: outsider@example.com" in r for r in report["separation"])
    # ann1's judgments, made before the invite, were open to the invitee since: not blind; ann2's stay proven
    assert {(who, ok) for who, ok in judgment_checks(ws.store)} == {(ann1.email, False), (ann2.email, True)}
    status = cli_json(run_cli, "annotate", "status")
    assert status["verification"] == {NOT_PROVEN: 2}
    assert "ann1's server has another user: outsider@example.com" in status["not_blind_because"][ann1.email]
    plain = run_cli("annotate", "status")
    assert "another user: outsider@example.com" in " ".join(plain.output.split())
    rows = {r["person"]: r for r in cli_json(run_cli, "annotate", "servers")}
    assert not rows[ann1.email]["alone"] and "outsider@example.com" in rows[ann1.email]["not_alone_because"]
    assert rows[ann2.email]["alone"]
    with ws.store.session() as session:
        project_id = session.execute(select(AnnotationTask.ls_project_id).where(
            AnnotationTask.assignee == ann1.email)).scalars().first()
    from label_studio_sdk import LabelStudio

    words = LabelStudio(base_url=ann1.url, api_key=ann1.token).projects.get(id=project_id).expert_instruction
    assert "yours alone" not in words  # ann1's instructions no longer say so
    assert_not_blind_release(run_cli, tmp_path / "release", NOT_PROVEN, "had another user")
    with ws.store.session() as session:
        reasons = [c.problems for c in session.execute(select(SeparationCheck).where(
            SeparationCheck.person == ann1.email, SeparationCheck.ok.is_(False))).scalars()]
    assert reasons and all(EXTRA_USER in p for p in reasons)
    ws.close()


def test_two_urls_to_one_server_are_not_blind_everywhere(workspace, spoilable, run_cli, monkeypatch, tmp_path,
                                                         request):
    servers, media = spoilable
    ann1 = servers[ANN1[0]]
    try:  # ann2 gets an account on ann1's server: then "their own" server is ann1's, under another name
        _, token2 = signup(ann1.url, ann1.token, ANN2[0], ANN2[1])
    except RuntimeError:  # made already by an earlier run of this test in the session
        pytest.skip("ann2 already has an account on ann1's server")
    port = ann1.url.rsplit(":", 1)[1]
    tokens = {ANN1[0]: (ann1.url, ann1.token), ANN2[0]: (f"http://localhost:{port}", token2)}
    configure_people(workspace.root, media, tokens, monkeypatch)
    ws = load_workspace(workspace.root)
    make_items(run_cli, media / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    mark_checked(ws.store)
    report = push(run_cli)
    assert report["verification"] == SHARED
    assert any("ann1's server accepts ann2's token" in r for r in report["separation"])
    assert any("ann2's server accepts ann1's token" in r for r in report["separation"])
    judge_all(ws.store, tokens)
    pull(run_cli)
    assert all(ok is False for _, ok in judgment_checks(ws.store))
    with ws.store.session() as session:
        assert all(TOKEN_ACCEPTED in c.problems for c in session.execute(select(SeparationCheck).where(
            SeparationCheck.during == "pull")).scalars())
    status = cli_json(run_cli, "annotate", "status")
    assert status["verification"] == {SHARED: 2} and set(status["not_blind_because"]) == {ANN1[0], ANN2[0]}
    rows = cli_json(run_cli, "annotate", "servers")
    assert not any(r["alone"] for r in rows) and all("token" in r["not_alone_because"] for r in rows)
    assert_not_blind_release(run_cli, tmp_path / "release", SHARED, "accepted another person's token")
    ws.close()


def test_the_push_summary_names_why_it_is_not_blind(workspace, spoilable, run_cli, monkeypatch, request):
    servers, media = spoilable
    ann1, ann2 = servers[ANN1[0]], servers[ANN2[0]]
    signup(ann2.url, ann2.token, f"guest-{uuid.uuid4().hex[:6]}@example.com", "Guest-pass-123")
    configure_people(workspace.root, media, {ann1.email: (ann1.url, ann1.token), ann2.email: (ann2.url, ann2.token)},
                     monkeypatch)
    make_items(run_cli, media / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 2)
    mark_checked(load_workspace(workspace.root).store)
    result = run_cli("annotate", "push")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"(verification: {NOT_PROVEN})" in text and "ann2's server has another user: guest-" in text


# ---------------------------------------------------------------- the document root


def test_a_document_root_above_the_workspace_is_refused_before_anything_is_created(workspace, people_servers,
                                                                                  run_cli, monkeypatch, request):
    people_config(workspace.root, people_servers, f"p-{uuid.uuid4().hex[:8]}")
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace(f'document_root = "{people_servers.media_root}"',
                                                 f'document_root = "{workspace.root.parent}"', 1))
    for person in people_servers.people.values():
        monkeypatch.setenv(person.token_env, person.token)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    make_items(run_cli, workspace.root.parent / f"imgs-{uuid.uuid4().hex[:6]}", 2)
    ws = load_workspace(workspace.root)
    mark_checked(ws.store)
    result = run_cli("annotate", "push")
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "document_root" in lines[0] and "contains the workspace" in lines[0], result.output
    with ws.store.session() as session:
        assert session.execute(select(AnnotationTask)).first() is None  # nothing was created
    served = run_cli("annotate", "serve", "--ls-bin", str(found_ls_bin()))
    assert served.exit_code != 0 and "contains the workspace" in served.output
    assert not (workspace.root / "label-studio" / "servers.json").exists()  # no server was started
    ws.close()


def test_what_a_document_root_exposes(workspace):
    root = Path(workspace.root).resolve()
    assert exposed(root.parent, workspace) == ["the workspace", "the Label Studio data dirs", "the store"]
    assert exposed(root / "label-studio", workspace) == ["the Label Studio data dirs"]
    assert exposed(root / "images", workspace) == []
    assert exposed(root.parent / "elsewhere", workspace) == []


def test_a_server_whose_own_document_root_holds_the_workspace_is_found_by_asking_it(workspace, monkeypatch, tmp_path):
    """The config says images only, but the server was started with a root above the workspace: its local-files
    validation (asked, nothing created) gives it away."""
    from label_studio_sdk import LabelStudio

    from cftools.annotate.label_studio import server_settings
    from cftools.annotate.separation import DOCUMENT_ROOT, verify_separation
    from cftools.annotate.servers import Servers

    binary = found_ls_bin()
    data = tmp_path / "ann1-data"
    shutil.copytree(migrated_template(binary, tmp_path, empty=True), data)
    token = "cftools-sep-root-token-0123456789"
    running = wait_until_up(launch_server(binary, data, tmp_path, tmp_path / "ann1.log", (ANN1[0], ANN1[1], token)))
    try:
        images = tmp_path / "images"
        images.mkdir()
        configure_people(workspace.root, images, {ANN1[0]: (running.url, token)}, monkeypatch)
        LabelStudio(base_url=running.url, api_key=token).projects.create(title="someone's project")
        ws = load_workspace(workspace.root)
        settings = server_settings(ws)
        servers = Servers(settings)
        try:
            [finding] = verify_separation(ws, settings, servers, "push")
        finally:
            servers.close()
        assert finding.problems == [DOCUMENT_ROOT] and "would serve files from the workspace" in finding.reasons[0]
        assert "localfiles/validate" in finding.method
        ws.close()
    finally:
        running.stop()


def test_an_item_is_blind_only_when_every_judgment_carries_a_passed_check():
    from cftools.annotate.verification import item_verification, release_words

    def verified(judged):  # an email stands for itself here: only blindness is read
        return item_verification(judged, pseudonym=str)

    ok, extra = (True, []), (False, [EXTRA_USER])
    blind = verified([("http://a:1", "x@e.org", "x@e.org", ok), ("http://b:2", "y@e.org", "y@e.org", ok)])
    spoilt = verified([("http://a:1", "x@e.org", "x@e.org", ok), ("http://b:2", "y@e.org", "y@e.org", extra)])
    never = verified([("http://a:1", "x@e.org", "x@e.org", None), ("http://b:2", "y@e.org", "y@e.org", ok)])
    shared = verified([("http://a:1", "x@e.org", "x@e.org", None), ("http://a:1", "y@e.org", "y@e.org", None)])
    assert blind["blind"] and blind["how"] == SEPARATE and blind["why_not_blind"] == ""
    assert not spoilt["blind"] and spoilt["how"] == NOT_PROVEN and "another user" in spoilt["why_not_blind"]
    assert not never["blind"] and not never["separate_servers"] and "no separation check" in never["why_not_blind"]
    assert not shared["blind"] and shared["how"] == SHARED
    assert NO_ONE_COULD_SEE in release_words([blind, blind])
    words = release_words([blind, spoilt, shared])
    assert NO_ONE_COULD_SEE not in words and words.startswith("2 of the 3 annotated items were not blind")
    assert "@" not in words
