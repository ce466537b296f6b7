"""What `annotate serve | push | pull | status` show a newcomer (issue 46): progress while servers start (a loopback
stand-in for the label-studio binary: the real one is tests/test_servers.py's), the control rate a push names, whole
tables when piped, a help text that lists what status shows, and pull's summary keys."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cftools.annotate.pull import Chosen, PullReport, apply_own_decisions
from cftools.annotate.purpose import Purpose
from cftools.annotate.task_import import PushReport, StoredTask
from cftools.judgments import Answer
from cftools.models import ACCEPTED, AnnotationTask, Item
from fixtures_label_studio import free_port

# A stand-in for `label-studio start`: answers /health on its --port, says where it listens (as Label Studio's log
# does), and makes the database file a migrated data dir holds. Nothing else: the separation check then finds the
# server not proven anyone's, which `serve` records and reports, as it would for a real one.
FAKE_LABEL_STUDIO = '''#!{python}
import http.server, os, pathlib, sys

port = int(sys.argv[sys.argv.index("--port") + 1])
pathlib.Path(os.environ["LABEL_STUDIO_BASE_DATA_DIR"], "label_studio.sqlite3").touch()


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", port), Health)
print(f"Starting at http://127.0.0.1:{{port}}/", flush=True)
server.serve_forever()
'''


@pytest.fixture
def fake_ls_bin(tmp_path) -> Path:
    binary = tmp_path / "label-studio"
    binary.write_text(FAKE_LABEL_STUDIO.format(python=sys.executable))
    binary.chmod(0o755)
    return binary


@pytest.fixture
def two_people(workspace, monkeypatch):
    """Two people's loopback servers in cftools.toml, their tokens unset (serve makes them)."""
    config = workspace.root / "cftools.toml"
    people = "".join(f'\n[label_studio.people."{name}@example.com"]\nurl = "http://127.0.0.1:{free_port()}"\n'
                     f'token_env = "CFTOOLS_TEST_CLI_{name.upper()}"\n' for name in ("ann1", "ann2"))
    config.write_text(config.read_text() + people)
    for name in ("ann1", "ann2"):
        monkeypatch.delenv(f"CFTOOLS_TEST_CLI_{name.upper()}", raising=False)
    return workspace


def terminal_stderr(monkeypatch) -> io.StringIO:
    """The commands' stderr as a terminal (rich decides that when it starts; CliRunner's stderr is a pipe)."""
    from cftools.commands import annotate

    drawn = io.StringIO()
    monkeypatch.setattr(annotate, "err_console", Console(file=drawn, force_terminal=True, width=160,
                                                         color_system=None))
    return drawn


def test_serve_shows_each_server_starting_and_the_servers_up_with_an_eta_and_nothing_when_quiet(
        two_people, fake_ls_bin, run_cli, monkeypatch):
    drawn = terminal_stderr(monkeypatch)
    try:
        started = run_cli("annotate", "serve", "--ls-bin", fake_ls_bin)
        assert started.exit_code == 0, started.output
        shown = drawn.getvalue()
        assert "migrating Label Studio's database" in shown  # the one-off 30 s step has its own line
        assert "starting ann1@example.com's server" in shown and "starting ann2@example.com's server" in shown
        assert "servers up" in shown and "2/2" in shown and "eta" in shown
        assert "http://127.0.0.1:" in started.stdout  # what serve says stays on stdout
    finally:
        assert "Stopped 2 server(s)" in run_cli("annotate", "stop").output
    drawn.seek(0)
    drawn.truncate()
    quiet = run_cli("annotate", "serve", "--ls-bin", fake_ls_bin, "--quiet")
    try:
        assert quiet.exit_code == 0, quiet.output
        assert drawn.getvalue() == ""
    finally:
        run_cli("annotate", "stop")


def test_a_push_with_controls_names_the_setting_and_its_value_on_one_line(capsys):
    from cftools.commands.annotate import print_push

    report = PushReport(purpose="verify", kind="cvqa", pushed=12, project_ids={"ann1@example.com": 1},
                        assigned={"ann1@example.com": 12}, project_urls={"ann1@example.com": "http://x/projects/1"},
                        verification="separate servers", controls=3)
    print_push(report, "cvqa", None, False, 0.05)
    assert "3 of them are control items (mixed in at [annotate] control_rate = 0.05).\n" in capsys.readouterr().out


LONG_SERVER = "http://label-studio-of-a-very-long-host-name.annotation.example.org:8080"


def test_status_piped_prints_its_tables_whole(workspace, run_cli):
    with workspace.store.write() as session:
        item = Item(key="cvqa-long", kind="cvqa", group="numerical-direct", question="How many?", answer="2",
                    status="in_review")
        session.add(item)
        session.flush()
        session.add(AnnotationTask(item_id=item.id, purpose="verify", server=LONG_SERVER, ls_project_id=7,
                                   ls_task_id=1, assignee="an-annotator-with-a-long-address@annotation.example.org"))
    piped = run_cli("annotate", "status")
    assert piped.exit_code == 0, piped.output
    assert LONG_SERVER in piped.stdout and "an-annotator-with-a-long-address@annotation.example.org" in piped.stdout
    assert "…" not in piped.stdout


def test_status_help_lists_everything_status_shows():
    from click.testing import CliRunner

    from cftools.cli import main

    shown = " ".join(CliRunner().invoke(main, ["annotate", "status", "--help"]).output.split())
    for what in ("agreement", "Krippendorff's alpha", "Cohen's kappa", "accuracy on control items",
                 "95% confidence interval", "overturned", "lead time", "paused", "submitted", "returned", "skipped",
                 "refused", "no open task", "not blind"):
        assert what in shown, what


def test_pull_counts_no_own_task_still_waiting_for_its_second_judgment(workspace):
    """One judgment of an edit task decides nothing: the summary had counted it under the empty key "edit: "."""
    with workspace.store.write() as session:
        item = Item(key="cvqa-edit", kind="cvqa", group="numerical-direct", question="How many if one more?",
                    answer="2", status=ACCEPTED, data={"original_question": "How many?", "original_answer": "1"})
        session.add(item)
        session.flush()
        task = AnnotationTask(item_id=item.id, purpose="edit:1", server="http://127.0.0.1:1", ls_project_id=1,
                              ls_task_id=1, assignee="ann1@example.com")
        session.add(task)
        session.flush()
        report = PullReport()
        one = Answer(fields={"candidate": "1", "edited_answer": "2", "shows_condition": "yes"})
        apply_own_decisions(session, {task.id: StoredTask.of(task)}, [task.id],
                            {task.id: [Chosen("ann1@example.com", {}, one)]}, report)
    assert json.loads(json.dumps(report.as_dict()))["decisions"] == {}


def test_a_pull_counts_the_projects_read_and_with_a_server_per_person_the_people_done():
    from cftools.annotate.pull import ProjectJob, PullCounts

    jobs = [ProjectJob("http://127.0.0.1:1", 1, "cvqa", Purpose("verify"), (1,)),
            ProjectJob("http://127.0.0.1:2", 1, "cvqa", Purpose("verify"), (1,)),
            ProjectJob("http://127.0.0.1:1", 2, "cvqa", Purpose("adjudicate"), (2,))]
    heard: list[tuple] = []
    counts = PullCounts(jobs, per_person=True, progress=lambda *line: heard.append(line))
    for job in jobs:
        counts.done(job)
    assert [line for line in heard if line[0] == PullCounts.PROJECTS][-1] == (PullCounts.PROJECTS, 3, 3)
    people = [line[1:] for line in heard if line[0] == PullCounts.PEOPLE]
    assert people == [(0, 2), (0, 2), (1, 2), (2, 2)]  # the first server is done only with its second project
