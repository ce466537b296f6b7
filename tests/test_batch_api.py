"""Money and batches of `generate`: cost per run, `--max-cost`, `--estimate`, `--batch-api`, `generate status`,
`status --cost`, against a loopback server process that speaks chat, Files and Batches (tests/batch_stub.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import tomlkit

from batch_stub import __file__ as BATCH_STUB
from loopback import running_server
from killed_runs import kill_after_progress

from cftools.errors import WorkspaceError
from cftools.generate.batch_api import BatchRun, needed_requests
from cftools.generate.llm_task import Attempts, LLMJob, structure_jobs
from cftools.ingest.readers import ingest_table
from cftools.kinds.cvqa.generate import RewriteTask, llm_params, load_template, render_prompt, select_sources
from cftools.llm import make_backend, text_message
from cftools.llm.batch import BatchClient, BatchRequest
from cftools.llm.cost import Price, estimated_tokens, price_for
from cftools.models import LLMBatch
from cftools.workspace import init_workspace

PRICE = {"input_per_mtok": 150.0, "output_per_mtok": 600.0, "batch_discount": 0.5}  # large: visible on a few tokens


class BatchStub:
    def __init__(self, root: str) -> None:
        self.root, self.base_url = root, root + "/v1"

    def set(self, **settings) -> None:
        httpx.post(self.root + "/control/batches", json=settings, timeout=10).raise_for_status()

    def state(self) -> dict:
        return httpx.get(self.root + "/control/batches", timeout=10).json()

    def chat_requests(self) -> int:
        return len(httpx.get(self.root + "/control/requests", timeout=10).json())

    def reset(self) -> None:
        httpx.post(self.root + "/control/reset", json={}, timeout=10).raise_for_status()


@pytest.fixture(scope="module")
def batch_stub_process():
    with running_server(Path(BATCH_STUB).name, "--port", "0") as url:
        yield url.removesuffix("/v1")


@pytest.fixture
def server(batch_stub_process) -> BatchStub:
    stub = BatchStub(batch_stub_process)
    stub.reset()
    return stub


def configure(workspace, base_url: str, price: dict | None = PRICE, **llm) -> None:
    path = workspace.path("cftools.toml")
    config = tomlkit.parse(path.read_text())
    section = config["llm"]
    section["backend"], section["model"], section["base_url"] = "openai", "stub", base_url
    section["batch_poll_s"] = 0.05
    section["backoff_initial"], section["backoff_max"] = 0.01, 0.05
    for name, value in llm.items():
        section[name] = value
    if price is not None:
        prices = tomlkit.table(is_super_table=True)
        prices["stub"] = price
        section["prices"] = prices
    path.write_text(tomlkit.dumps(config))
    workspace.config = tomlkit.parse(path.read_text()).unwrap()


def questions(workspace, tmp_path: Path, n: int) -> None:
    table = tmp_path / f"q{n}.csv"
    table.write_text("image,question,answer\n" + "".join(
        f"img{i}.jpg,How many things of kind {i} are there?,{i % 7}\n" for i in range(n)))
    ingest_table(workspace.store, table)


def rows(workspace, sql: str) -> list[tuple]:
    db = sqlite3.connect(workspace.root / "cftools.db", timeout=60)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def drop_items(workspace) -> None:
    """Forget the items (the request cache stays): the next run selects the same sources again."""
    db = sqlite3.connect(workspace.root / "cftools.db")
    db.execute("delete from item_events")
    db.execute("delete from items")
    db.commit()
    db.close()


def cli(workspace, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cftools.cli", "-w", str(workspace.root), *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--quiet", "--no-rederive")  # rewrites only


def test_a_batch_run_stores_what_the_synchronous_run_stores(workspace, tmp_path, server):
    questions(workspace, tmp_path, 12)
    configure(workspace, server.base_url)
    other = init_workspace(tmp_path / "sync")
    questions(other, tmp_path, 12)
    configure(other, server.base_url)

    batch = cli(workspace, *REWRITE, "--batch-api", "--json")
    assert batch.returncode == 0, batch.stderr
    assert server.chat_requests() == 0, "a batch run made synchronous calls"
    sync = cli(other, *REWRITE, "--json")
    assert sync.returncode == 0, sync.stderr
    assert server.chat_requests() == 12

    items = "select key, question, answer from items order by key"
    assert rows(workspace, items) == rows(other, items) and len(rows(workspace, items)) == 12
    calls = "select cache_key, raw_output, prompt_tokens, completion_tokens, cached, attempt from generations order by 1"
    assert rows(workspace, calls) == rows(other, calls)
    assert rows(workspace, "select key, output from llm_cache order by key") == \
        rows(other, "select key, output from llm_cache order by key")
    batch_ids = {json.loads(p).get("batch_id") for (p,) in rows(workspace, "select params from generations")}
    assert len(batch_ids) == 1 and None not in batch_ids
    assert all("batch_id" not in json.loads(p) for (p,) in rows(other, "select params from generations"))
    assert [b["id"] for b in server.state()["batches"]] == list(batch_ids)

    # the batch file's request bodies are the bodies the synchronous calls sent
    (made,) = server.state()["batches"]
    lines = httpx.get(f"{server.base_url}/files/{made['input_file_id']}/content", timeout=10).text.splitlines()
    sent = sorted(json.dumps(r["body"], sort_keys=True) for r in map(json.loads, lines))
    asked = sorted(json.dumps(r["body"], sort_keys=True) for r in httpx.get(server.root + "/control/requests").json())
    assert sent == asked

    summary, plain = json.loads(batch.stdout), json.loads(sync.stdout)
    usage = summary["usage"]
    assert usage["requests"] == usage["batch_requests"] == 12 and usage["cache_hits"] == 0
    tokens_in, tokens_out = usage["prompt_tokens"], usage["completion_tokens"]
    assert (tokens_in, tokens_out) == (plain["usage"]["prompt_tokens"], plain["usage"]["completion_tokens"]) > (0, 0)
    full = Price("stub", **PRICE).cost(tokens_in, tokens_out)
    assert usage["cost"] == pytest.approx(full / 2) and plain["usage"]["cost"] == pytest.approx(full)

    listed = cli(workspace, "generate", "status", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"batches": []}


def test_cached_requests_are_never_sent(workspace, tmp_path, server):
    questions(workspace, tmp_path, 6)
    configure(workspace, server.base_url)
    assert cli(workspace, *REWRITE, "--limit", "4").returncode == 0  # synchronous: 4 replies cached
    drop_items(workspace)
    again = cli(workspace, *REWRITE, "--batch-api", "--json")
    assert again.returncode == 0, again.stderr
    assert server.state()["lines"] == 2  # only the two never asked
    usage = json.loads(again.stdout)["usage"]
    assert usage["cache_hits"] == 4 and usage["batch_requests"] == 2
    assert usage["saved_by_cache"] > 0
    assert len(rows(workspace, "select key from items")) == 6


def test_failed_lines_and_an_expired_batch_are_sent_again_by_the_rerun_only(workspace, tmp_path, server):
    questions(workspace, tmp_path, 9)
    configure(workspace, server.base_url)
    server.set(fail_every=3)
    first = cli(workspace, *REWRITE, "--batch-api")
    assert first.returncode == 3, first.stderr
    assert "3 of 9 requests failed" in first.stderr
    errors = rows(workspace, "select error from generations where error is not null")
    assert len(errors) == 3 and all("stub batch line error" in e and "batch_" in e for (e,) in errors)
    assert len(rows(workspace, "select key from items")) == 6

    server.set(fail_every=0, expire_after=1)
    second = cli(workspace, *REWRITE, "--batch-api")
    assert second.returncode == 3, second.stderr
    expired = rows(workspace, "select error from generations where error like '%batch_expired%'")
    assert len(expired) == 2
    assert len(rows(workspace, "select key from items")) == 7

    server.set(expire_after=0)
    third = cli(workspace, *REWRITE, "--batch-api")
    assert third.returncode == 0, third.stderr
    assert server.state()["lines"] == 9 + 3 + 2  # each rerun sent only what had failed
    assert len(rows(workspace, "select key from items")) == 9
    assert [s for (s,) in rows(workspace, "select status from llm_batches")] == ["completed", "expired", "completed"]
    assert server.chat_requests() == 0


def test_a_killed_run_collects_its_batch_instead_of_submitting_again(workspace, tmp_path, server):
    questions(workspace, tmp_path, 30)
    configure(workspace, server.base_url)
    server.set(hold=True)
    command = [sys.executable, "-m", "cftools.cli", "-w", str(workspace.root), *REWRITE, "--batch-api"]
    kill_after_progress(command, workspace.root / "cftools.db",
                        "select count(*) from llm_batches where batch_id is not null", at_least=1)
    assert len(server.state()["batches"]) == 1
    listed = json.loads(cli(workspace, "generate", "status", "--json").stdout)["batches"]
    assert len(listed) == 1 and listed[0]["requests"] == 30 and listed[0]["status"] in ("validating", "in_progress")
    shown = cli(workspace, "generate", "status")
    assert listed[0]["batch_id"] in shown.stdout

    server.set(hold=False)
    rerun = cli(workspace, *REWRITE, "--batch-api")
    assert rerun.returncode == 0, rerun.stderr
    state = server.state()
    assert len(state["batches"]) == 1 and state["lines"] == 30, "the rerun submitted the requests again"
    keys = [k for (k,) in rows(workspace, "select key from items")]
    assert len(keys) == len(set(keys)) == 30
    assert rows(workspace, "select count(*) from generations") == [(30,)]
    assert json.loads(cli(workspace, "generate", "status", "--json").stdout) == {"batches": []}


def rewrite_jobs(workspace, backend) -> tuple[RewriteTask, list[LLMJob]]:
    """The numerical-direct rewrite's task and jobs, each with its output schema, as run_llm_task gives them."""
    template = load_template("numerical-direct", None, workspace.root)
    task = RewriteTask("numerical-direct", template)
    jobs = [LLMJob(label=str(s["id"]), messages=[text_message(render_prompt(template, s))], context={"source": s})
            for s in select_sources(workspace.store, "numerical-direct", None, False)]
    structure_jobs(task, jobs, backend)
    return task, jobs


def test_a_batch_whose_create_call_was_cut_off_is_found_by_its_file(workspace, tmp_path, server):
    """A kill after the API made the batch but before its id was stored: the rerun finds it, makes no other."""
    questions(workspace, tmp_path, 5)
    configure(workspace, server.base_url)
    backend = make_backend(workspace.section("llm"))
    task, jobs = rewrite_jobs(workspace, backend)
    attempts = Attempts(workspace.store, backend, task, {"temperature": 0.0, "max_tokens": 320}, 3, False)
    run = BatchRun(workspace.store, backend, task.generator, poll_s=0.05, quiet=True)
    requests = [r for r, _ in needed_requests(workspace.store, jobs, attempts, run.results, False).values()]
    assert len(requests) == 5
    file_id = run.client.upload(requests)
    with workspace.store.write() as session:
        session.add(LLMBatch(generator=task.generator, backend=backend.cache_id, model=backend.model,
                             input_file_id=file_id, requests=5))
    run.client.create(file_id)  # the API made it; the run died before storing the id

    again = BatchRun(workspace.store, backend, task.generator, poll_s=0.05, quiet=True)
    assert again.prepare(jobs, attempts, refresh=False) == jobs
    assert len(again.results.completions) == 5 and not again.results.errors
    assert len(server.state()["batches"]) == 1
    backend.close()


def test_a_run_killed_after_its_batch_finished_stores_the_results_without_sending_again(workspace, tmp_path,
                                                                                       server):
    """Killed after collecting a finished batch but before storing every result: the rerun reads it again."""
    questions(workspace, tmp_path, 6)
    configure(workspace, server.base_url)
    backend = make_backend(workspace.section("llm"))
    task, jobs = rewrite_jobs(workspace, backend)
    attempts = Attempts(workspace.store, backend, task, {**llm_params({}, "openai")}, 3, False)
    BatchRun(workspace.store, backend, task.generator, poll_s=0.05, quiet=True).prepare(jobs, attempts, False)
    backend.close()
    assert rows(workspace, "select state, status from llm_batches") == [("finished", "completed")]
    assert rows(workspace, "select count(*) from generations") == [(0,)]

    rerun = cli(workspace, *REWRITE, "--batch-api")
    assert rerun.returncode == 0, rerun.stderr
    assert len(server.state()["batches"]) == 1 and server.state()["lines"] == 6
    assert len(rows(workspace, "select key from items")) == 6
    assert rows(workspace, "select state from llm_batches") == [("collected",)]


def test_the_client_cancels_a_batch(workspace, server):
    configure(workspace, server.base_url)
    backend = make_backend(workspace.section("llm"))
    client = BatchClient(backend)
    server.set(hold=True)
    state = client.create(client.upload([BatchRequest("k1", [{"role": "user", "content": "Question: How many?\n"
                                                                                         "Answer: 2"}], {})]))
    assert client.cancel(state.batch_id).status == "cancelling"
    server.set(hold=False)
    deadline = time.time() + 10
    while client.retrieve(state.batch_id).status != "cancelled" and time.time() < deadline:
        time.sleep(0.05)
    final = client.retrieve(state.batch_id)
    assert final.status == "cancelled"
    assert client.results(final).completions == {}
    backend.close()


def test_max_cost_stops_dispatching_stores_what_finished_and_exits_3(workspace, tmp_path, server):
    questions(workspace, tmp_path, 40)
    configure(workspace, server.base_url)
    worst_call = Price("stub", **PRICE).cost(100, 320)  # at most what one rewrite may cost here (max_tokens 320)
    limit = 3.5 * worst_call
    run = cli(workspace, *REWRITE, "--concurrency", "2", "--max-cost", f"{limit:.6f}", "--json")
    assert run.returncode == 3, run.stderr
    summary = json.loads(run.stdout)
    spent, budget = summary["usage"]["cost"], summary["budget"]
    # every call reserved its worst case before it was sent: the budget holds, and nothing failed for it
    assert budget["stopped"] and 0 < spent <= limit
    stored = len(rows(workspace, "select key from items"))
    assert 3 <= stored == summary["usage"]["requests"] < 40 and summary["failed"] == 0
    assert not rows(workspace, "select error from generations where error is not null")
    assert budget["left_to_do"] == 40 - stored
    assert f"{40 - stored} of 40 requests left to do" in run.stderr and "spent of" in run.stderr

    configure(workspace, server.base_url, max_cost=1_000_000.0)  # [llm] max_cost: the rerun finishes the rest
    rest = cli(workspace, *REWRITE, "--json")
    assert rest.returncode == 0, rest.stderr
    assert json.loads(rest.stdout)["usage"]["requests"] == 40 - stored
    assert len(rows(workspace, "select key from items")) == 40


def test_a_budget_sends_only_the_batch_it_can_pay_for(workspace, tmp_path, server):
    questions(workspace, tmp_path, 10)
    configure(workspace, server.base_url)
    template = load_template("numerical-direct", None, workspace.root)
    prompts = [estimated_tokens([{"role": "user", "content": render_prompt(template, s)}])
               for s in select_sources(workspace.store, "numerical-direct", None, False)]
    most_per_request = Price("stub", **PRICE).cost(max(prompts), 320, batch=True)  # the most a request may cost
    run = cli(workspace, *REWRITE, "--batch-api", "--max-cost", f"{3.5 * most_per_request:.6f}", "--json")
    assert run.returncode == 3, run.stderr
    summary = json.loads(run.stdout)
    sent = server.state()["lines"]
    assert 3 <= sent < 10 and summary["usage"]["batch_requests"] == sent
    assert summary["usage"]["cost"] <= 3.5 * most_per_request and summary["budget"]["left_to_do"] == 10 - sent
    assert len(rows(workspace, "select key from items")) == sent
    rest = cli(workspace, *REWRITE, "--batch-api", "--max-cost", "1000")
    assert rest.returncode == 0, rest.stderr
    assert server.state()["lines"] == 10 and len(rows(workspace, "select key from items")) == 10


def test_a_budget_needs_a_price_and_bad_prices_are_named(workspace, server):
    configure(workspace, server.base_url, price=None)
    run = cli(workspace, *REWRITE, "--max-cost", "1")
    assert run.returncode == 1 and '[llm.prices."stub"]' in run.stderr
    assert server.chat_requests() == 0
    with pytest.raises(WorkspaceError, match=r'cftools.toml: \[llm.prices."m"\]: output_per_mtok must be a number'):
        price_for({"prices": {"m": {"input_per_mtok": 1, "output_per_mtok": "cheap"}}}, "m")
    with pytest.raises(WorkspaceError, match="unknown field 'per_token'"):
        price_for({"prices": {"m": {"input_per_mtok": 1, "output_per_mtok": 1, "per_token": 1}}}, "m")
    assert price_for({}, "m") is None


def test_estimate_calls_nothing_and_says_how_tokens_were_counted(workspace, tmp_path, server):
    questions(workspace, tmp_path, 8)
    configure(workspace, server.base_url)
    assert cli(workspace, *REWRITE, "--limit", "3").returncode == 0
    drop_items(workspace)
    asked = server.chat_requests()
    estimate = cli(workspace, *REWRITE, "--estimate", "--json")
    assert estimate.returncode == 0, estimate.stderr
    assert server.chat_requests() == asked and rows(workspace, "select count(*) from items") == [(0,)]
    (first,) = json.loads(estimate.stdout)["estimate"]
    assert first["requests"] == 5 and first["cached"] == 3
    assert first["prompt_tokens"] > 0 and first["prompt_tokens_exact"] is False
    assert "estimated at 4 characters a token" in first["tokens_counted_by"]
    assert first["completion_tokens_max"] == 5 * 320
    assert first["cost_max"] == pytest.approx(Price("stub", **PRICE).cost(first["prompt_tokens"], 5 * 320), rel=1e-4)
    assert first["completion_tokens_typical"] is not None and first["cost_typical"] < first["cost_max"]
    plain = cli(workspace, *REWRITE, "--estimate", "--batch-api")
    assert "5 requests to send, 3 from the cache" in plain.stdout and "estimate only" in plain.stdout
    assert server.state()["batches"] == []


def test_status_cost_sums_per_generator_and_model(workspace, tmp_path, server):
    questions(workspace, tmp_path, 6)
    configure(workspace, server.base_url)
    assert cli(workspace, *REWRITE, "--limit", "2").returncode == 0
    assert cli(workspace, *REWRITE, "--batch-api").returncode == 0
    report = cli(workspace, "status", "--cost", "--json")
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["cost"]
    assert row["generator"] == "rewrite" and row["model"] == "stub"
    assert row["requests"] == 6 and row["batch_requests"] == 4
    tokens = rows(workspace, "select prompt_tokens, completion_tokens, params from generations")
    price = Price("stub", **PRICE)
    expected = sum(price.cost(p, c, "batch_id" in json.loads(params)) for p, c, params in tokens)
    assert row["cost"] == pytest.approx(expected, rel=1e-6)
    table = cli(workspace, "status", "--cost")
    assert "rewrite" in table.stdout and "total $" in table.stdout


def test_a_model_without_a_price_is_said_so_in_words(workspace, tmp_path, server):
    """The config section's name in brackets survives the terminal's markup, in the estimate and in the table."""
    questions(workspace, tmp_path, 2)
    configure(workspace, server.base_url, price=None)
    estimate = cli(workspace, *REWRITE, "--estimate")
    assert "cost unknown (no [llm.prices] entry for the model)" in estimate.stdout
    assert cli(workspace, *REWRITE).returncode == 0
    (row,) = json.loads(cli(workspace, "status", "--cost", "--json").stdout)["cost"]
    assert row["priced"] is False and row["requests"] == 2
    table = cli(workspace, "status", "--cost")
    assert "(models without a [llm.prices] entry not counted)" in " ".join(table.stdout.split())


def test_local_model_estimate_counts_with_its_tokenizer(workspace, tmp_path):
    """The embedded model's own tokenizer counts the prompt tokens (exact, not an estimate)."""
    questions(workspace, tmp_path, 2)
    estimate = cli(workspace, *REWRITE, "--estimate", "--json")
    assert estimate.returncode == 0, estimate.stderr
    (first,) = json.loads(estimate.stdout)["estimate"]
    assert first["prompt_tokens_exact"] is True and first["requests"] == 2 and first["prompt_tokens"] > 20
    assert first["tokens_counted_by"] == "counted with the tokenizer of smollm2-135m-instruct"
    assert first["cost_max"] is None


def test_repeated_unknown_and_unreadable_result_lines_are_reported_and_the_first_answer_kept(workspace, tmp_path,
                                                                                              server):
    questions(workspace, tmp_path, 6)
    configure(workspace, server.base_url)
    server.set(repeat_every=2, unknown_ids=2, garbage_lines=1)
    run = cli(workspace, *REWRITE, "--batch-api")
    assert run.returncode == 0, run.stderr
    said = " ".join(run.stderr.split())
    assert "3 repeated custom_ids, 2 unknown custom_ids, 1 unreadable lines" in said, run.stderr
    assert "line 3: custom_id" in said and "repeated (first on output file" in said
    assert "kept after the first valid answer (the first usable one is served)" in said
    assert "was not sent in this batch" in said and "unreadable" in said
    outputs = [o for (o,) in rows(workspace, "select raw_output from generations")]
    assert len(outputs) == 6 and not any("a later, different answer" in o for o in outputs)
    assert len(rows(workspace, "select key from items")) == 6


def test_the_first_usable_answer_of_a_repeated_custom_id_is_kept_not_the_first(workspace, tmp_path, server):
    """Issue 45: an unparseable first answer and a parseable repeat of the same custom_id: the paid, parseable
    repeat is served and stored; nothing is sent again."""
    questions(workspace, tmp_path, 6)
    configure(workspace, server.base_url)
    server.set(unusable_first_every=2)
    run = cli(workspace, *REWRITE, "--batch-api", "--json")
    assert run.returncode == 0, run.stderr
    state = server.state()
    assert len(state["batches"]) == 1 and state["lines"] == 6, "a request with a usable answer was sent again"
    assert server.chat_requests() == 0
    outputs = [o for (o,) in rows(workspace, "select raw_output from generations")]
    assert len(outputs) == 6 and "no answer here" not in outputs
    assert not rows(workspace, "select parse_error from generations where parse_error is not null")
    assert len(rows(workspace, "select key from items")) == 6


def test_replies_without_usage_are_charged_at_their_worst_case_never_zero(workspace, tmp_path, server):
    """Issue 45: a reply without `usage` is recorded and printed at the worst case it was charged, and says so,
    for a plain run, a --max-cost run and a batch run; `status --cost` adds up the same."""
    questions(workspace, tmp_path, 12)
    configure(workspace, server.base_url)
    server.set(no_usage=True)
    worst_call = Price("stub", **PRICE).cost(100, 320)  # more than one rewrite may cost at worst here

    budget = cli(workspace, *REWRITE, "--limit", "8", "--max-cost", f"{2.5 * worst_call:.6f}", "--json")
    assert budget.returncode == 3, budget.stderr
    summary = json.loads(budget.stdout)
    usage = summary["usage"]
    assert 1 <= usage["requests"] == usage["replies_without_usage"] < 8
    assert usage["cost"] == pytest.approx(usage["cost_at_worst_case"]) and usage["cost"] > 0
    assert summary["budget"]["spent"] == pytest.approx(usage["cost"])
    said = " ".join(budget.stderr.split())
    assert "$0.0000 spent" not in said and "carried no token counts (no usage), counted at their worst case" in said

    plain = cli(workspace, *REWRITE, "--limit", "2")
    assert plain.returncode == 0, plain.stderr
    said = " ".join(plain.stdout.split())
    assert "2 replies carried no token counts (no usage), counted at their worst case" in said, said
    assert "$0.0000" not in said

    batch = cli(workspace, *REWRITE, "--batch-api", "--json")
    assert batch.returncode == 0, batch.stderr
    usage = json.loads(batch.stdout)["usage"]
    assert usage["batch_requests"] == usage["replies_without_usage"] > 0 and usage["cost"] > 0

    recorded = [json.loads(p).get("worst_case_cost") for (p,) in rows(workspace, "select params from generations")]
    assert len(recorded) == 12 and all(cost is not None and cost > 0 for cost in recorded)
    (row,) = json.loads(cli(workspace, "status", "--cost", "--json").stdout)["cost"]
    assert row["requests"] == row["replies_without_usage"] == 12
    assert row["cost"] == pytest.approx(sum(recorded), rel=1e-6)
