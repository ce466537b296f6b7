"""`annotate push` and `annotate pull` against the real Label Studio server through the loopback fault proxy
(tests/fault_proxy.py, its own process): 5xx, 429 with Retry-After, resets, stalls past the time-out and truncated
answers at a seeded rate. Each command is rerun until it exits 0; then the store equals a clean run's, and every
task the store records as pushed is on the server, once.

A truncated answer is the case that matters for a task import: the server has created the tasks, the client never
learns their ids. Sending the import again would make every task twice; push must find them by their keys instead.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import httpx

from cftools.annotate.label_studio import in_parallel, is_transient, retry_pause

from fault_trials import (LS_MEDIA_ENV, LS_TOKEN_ENV, LS_URL_ENV, _push_setup, assert_invariants, cli, cli_env,
                          fresh_workspace, run_ok, server_holds_what_the_store_says, store_fingerprint)
from test_fault_proxy import MAX_RUNS, start_proxy
from fixtures_label_studio import verify_result as verdict

TIMEOUT_S, STALL_S = 3, 4  # a stalled request outlasts cftools' time-out: it sees a time-out, not a reset
PARALLEL_PULL = {"export_chunk": 4, "pull_workers": 3}  # four snapshots, three at once: faults hit parallel fetches




PLANS = [  # (first annotator, second annotator), item by item in key order, round and round
    (verdict("yes", "yes"), verdict("yes", "yes")),              # accepted
    (verdict("no", "no"), verdict("no", "no")),                  # rejected: not related
    (verdict("yes", "no", "Three"), verdict("yes", "no", "3.")),  # accepted, corrected
    (verdict("yes", "no"), verdict("yes", "no", "4")),           # needs adjudication
    (verdict("yes", "yes"), None),                               # one judgment: still in review
]


def workspace_behind(url: str, scratch: Path, monkeypatch, **options: object) -> Path:
    """A workspace with 16 checked items (images under the server's media root) that talks to URL, with further
    [label_studio] OPTIONS."""
    monkeypatch.setenv(LS_URL_ENV, url)
    ws = fresh_workspace(scratch)
    _push_setup(ws, scratch)
    config = ws / "cftools.toml"
    lines = "".join(f"{name} = {value}\n" for name, value in options.items())
    config.write_text(config.read_text().replace("[label_studio]\n", f"[label_studio]\n{lines}", 1))
    return ws


def rows(ws: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(ws / "cftools.db", timeout=60)
    try:
        return sorted(tuple(r) for r in db.execute(sql).fetchall())
    finally:
        db.close()


def annotation_state(ws: Path) -> dict[str, list[tuple]]:
    """What a pull decides, by item key (server ids differ between two projects): items, tasks, judgments,
    agreement."""
    return {
        "items": rows(ws, "select key, status, answer, proposed_answer from items"),
        "tasks": rows(ws, "select i.key, t.purpose, t.state, t.decision from annotation_tasks t "
                          "join items i on i.id = t.item_id"),
        "judgments": rows(ws, "select i.key, j.annotator, j.related, j.answer_correct, j.corrected_answer, "
                              "j.flags, j.decision from judgments j join annotation_tasks t on t.id = j.task_id "
                              "join items i on i.id = t.item_id"),
        "agreement": rows(ws, "select project, question, n_pairs, round(percent_agreement, 9), "
                              "round(cohen_kappa, 9) from agreement_stats"),
    }


def annotate_on_the_server(label_studio, ws: Path) -> None:
    """The PLANS' annotations on WS's tasks, made directly on the server by two annotators."""
    first, second = (label_studio.client(email) for email in label_studio.annotators)
    tasks = rows(ws, "select i.key, t.ls_task_id from annotation_tasks t join items i on i.id = t.item_id")
    for index, (_, task_id) in enumerate(tasks):
        one, two = PLANS[index % len(PLANS)]
        first.annotations.create(id=task_id, result=one)
        if two is not None:
            second.annotations.create(id=task_id, result=two)


def reconciled_links(ws: Path) -> int:
    """Items linked to a task found on the server by its key (after an import whose answer was lost)."""
    return rows(ws, "select count(*) from item_events where json_extract(detail, '$.how') = 'reconciled'")[0][0]


def run_until_done(command: list[str], secret: str) -> list[int]:
    """Rerun COMMAND until it exits 0 (each rerun does what is left); a failed run says why in one line, without
    a traceback and without the token."""
    codes = []
    for _ in range(MAX_RUNS):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=cli_env())
        codes.append(done.returncode)
        assert secret not in done.stdout + done.stderr, "the token shows in the output"
        if done.returncode == 0:
            return codes
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    raise AssertionError(f"{command} did not finish in {MAX_RUNS} runs: {codes}")


def injected(proxy_url: str) -> dict[str, int]:
    return httpx.get(proxy_url + "/__faults__", timeout=10).json()


def test_push_and_pull_through_faults_end_as_a_clean_run(label_studio, tmp_path, monkeypatch):
    monkeypatch.setenv(LS_MEDIA_ENV, str(label_studio.media_root))
    monkeypatch.setenv(LS_TOKEN_ENV, label_studio.admin_token)
    proxy, proxy_url = start_proxy(label_studio.url, rate=0.3, seed=11, stall_s=STALL_S)
    try:
        clean = workspace_behind(label_studio.url, tmp_path / "clean", monkeypatch)
        faulty = workspace_behind(proxy_url, tmp_path / "faulty", monkeypatch, timeout=TIMEOUT_S, **PARALLEL_PULL)
        monkeypatch.setenv(LS_URL_ENV, label_studio.url)  # the checks below ask the server itself

        run_ok(cli(clean, "annotate", "push", "--json"))
        run_until_done(cli(faulty, "annotate", "push", "--json"), label_studio.admin_token)
        assert store_fingerprint(faulty) == store_fingerprint(clean)
        server_holds_what_the_store_says(faulty)
        after_push = injected(proxy_url)

        for ws in (clean, faulty):
            annotate_on_the_server(label_studio, ws)
        run_ok(cli(clean, "annotate", "pull", "--json"))
        run_until_done(cli(faulty, "annotate", "pull", "--json"), label_studio.admin_token)

        faults = injected(proxy_url)
        assert sum(after_push.values()) >= 3 and sum(faults.values()) - sum(after_push.values()) >= 3, faults
        assert len(faults) >= 4, faults
        assert_invariants(faulty)
        expected = annotation_state(clean)
        assert {status for _, status, _, _ in expected["items"]} == {"accepted", "rejected", "needs_adjudication",
                                                                   "in_review"}
        assert annotation_state(faulty) == expected
        assert store_fingerprint(faulty) == store_fingerprint(clean)
        server_holds_what_the_store_says(faulty)
        assert label_studio.admin_token.encode() not in (faulty / "cftools.db").read_bytes()
    finally:
        proxy.kill()
        proxy.wait()


def test_an_import_whose_answer_is_lost_is_not_imported_again(label_studio, tmp_path, monkeypatch):
    """Many answers cut off: every import that lost its answer is found on the server by key, none is
    imported twice, and push finishes in the same run."""
    monkeypatch.setenv(LS_MEDIA_ENV, str(label_studio.media_root))
    monkeypatch.setenv(LS_TOKEN_ENV, label_studio.admin_token)
    proxy, proxy_url = start_proxy(label_studio.url, rate=0.4, seed=5, faults=("truncate",))
    try:
        clean = workspace_behind(label_studio.url, tmp_path / "clean", monkeypatch)
        faulty = workspace_behind(proxy_url, tmp_path / "faulty", monkeypatch)
        monkeypatch.setenv(LS_URL_ENV, label_studio.url)

        run_ok(cli(clean, "annotate", "push", "--json"))
        assert run_until_done(cli(faulty, "annotate", "push", "--json"), label_studio.admin_token) == [0]
        assert injected(proxy_url).get("truncate", 0) >= 5
        assert reconciled_links(faulty) > 0, "no import lost its answer: the case was not tried"
        server_holds_what_the_store_says(faulty)
        assert store_fingerprint(faulty) == store_fingerprint(clean)
        assert_invariants(faulty)
    finally:
        proxy.kill()
        proxy.wait()


# ---------------------------------------------------------------- what is retried, and how the fetches overlap


def test_only_failures_that_may_pass_are_retried():
    request = httpx.Request("GET", "http://127.0.0.1:9/api/tasks/")

    def status(code: int, headers: dict | None = None) -> httpx.HTTPStatusError:
        return httpx.HTTPStatusError("x", request=request,
                                     response=httpx.Response(code, headers=headers, request=request))

    assert all(is_transient(e) for e in (status(429), status(500), status(503), httpx.ReadTimeout("x"),
                                         httpx.RemoteProtocolError("cut off"), httpx.ReadError("reset")))
    # a server that is down is said at once; a refused token or a bad request will not pass
    assert not any(is_transient(e) for e in (httpx.ConnectError("refused"), httpx.ConnectTimeout("x"), status(401),
                                             status(400), status(404), ValueError("x")))
    assert retry_pause(status(429, {"Retry-After": "2"}), 0) == 2.0
    assert retry_pause(status(503, {"Retry-After": "soon"}), 1) == retry_pause(status(503), 1) > 0


def test_parallel_fetches_keep_order_and_stop_early():
    started: list[int] = []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            started.append(n)
        time.sleep(0.02 * (n % 3))  # later inputs may finish first
        return n * n

    assert list(in_parallel(work, list(range(10)), 3)) == [n * n for n in range(10)]
    started.clear()
    results = in_parallel(work, list(range(100)), 2)
    assert [next(results), next(results)] == [0, 1]
    results.close()  # the consumer stops: what was not started never is
    assert len(started) <= 4, started
