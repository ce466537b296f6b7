"""`generate rewrite` end to end against a real loopback OpenAI-compatible server (llm_stub)."""

from __future__ import annotations

import csv
import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from killed_runs import kill_after_progress, wait_for

from cftools.generate.llm_task import LLMRun
from cftools.kinds.cvqa.generate import COUNT_REWRITE, item_key, load_template, reparse, rewrite, select_sources
from cftools.ingest.readers import ingest_table
from cftools.kinds.cvqa.ingest import ingest_cvqa
from fixtures_llm import ScriptedLLM, stub_backend
from llm_stub import StubServer, start_process, structured_reply, stub_reply
from cftools.kinds.cvqa.model import BOOLEAN, NUMERICAL_DIRECT, NUMERICAL_INDIRECT
from cftools.models import CachedResponse, Generation, Item, ItemEvent, SourceQuestion
NUMBER_QUESTIONS = [("a.jpg", "How many cats are there?", "2"), ("b.jpg", "How many cars are parked?", "5"),
                    ("c.jpg", "How many people are sitting?", "0"), ("d.jpg", "How many kites are flying?", "3")]
YES_NO_QUESTIONS = [("e.jpg", "Is the man wearing a hat?", "yes"), ("f.jpg", "Is it raining?", "no")]


def write_table(path: Path, rows) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "question", "answer"])
        writer.writerows(rows)
    return path


@pytest.fixture
def sources(workspace, tmp_path):
    ingest_table(workspace.store, write_table(tmp_path / "mine.csv", NUMBER_QUESTIONS + YES_NO_QUESTIONS))
    return workspace


def count(store, model, *where) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(model).where(*where)).scalar_one()


def drop_generated_items(store) -> None:
    with store.write() as session:
        ids = select(Item.id).where(Item.origin == "generated")
        session.execute(delete(ItemEvent).where(ItemEvent.item_id.in_(ids)))
        session.execute(delete(Item).where(Item.origin == "generated"))


def test_rewrite_stores_draft_items_linked_to_source_and_generation(sources, stub):
    report = rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(quiet=True))
    assert report.selected == 4 and report.items_created == 4 and stub.requests == 4
    template = load_template(NUMERICAL_DIRECT)
    with sources.store.session() as session:
        items = session.execute(select(Item).where(Item.origin == "generated")).scalars().all()
        assert {i.group for i in items} == {NUMERICAL_DIRECT} and {i.status for i in items} == {"draft"}
        for item in items:
            assert item.key == item_key(item.source_id, NUMERICAL_DIRECT) and item.kind == "cvqa"
            gen = session.get(Generation, item.generation_id)
            assert gen.source_id == item.source_id and gen.backend == "openai" and gen.model == "stub"
            assert gen.template_name == "rewrite/numerical-direct.j2" and gen.template_hash == template.hash
            assert item.data["original_question"] in gen.prompt
            assert json.loads(gen.raw_output)["new_answer"] == int(item.answer)
            schema = COUNT_REWRITE
            assert gen.params["output_schema"] == {"name": schema.name, "hash": schema.hash, "mode": "json_schema",
                                                   "constrained": True}
            assert gen.params["temperature"] == 0.0 and gen.prompt_tokens > 0 and gen.latency_s >= 0
            assert gen.parse_error is None and gen.error is None and gen.attempt == 1
            assert item.answer == str(int(item.data["original_answer"]) + 1)  # what the stub writes
            assert item.question.endswith("if one more were added?")
            events = session.execute(select(ItemEvent).where(ItemEvent.item_id == item.id)).scalars().all()
            assert [(e.stage, e.to_status) for e in events] == [("generate", "draft")]


def test_groups_select_their_answer_type_and_skip_done_sources(sources, stub):
    assert len(select_sources(sources.store, NUMERICAL_INDIRECT)) == 4
    assert {s["answer"] for s in select_sources(sources.store, BOOLEAN)} == {"yes", "no"}
    rewrite(sources.store, stub_backend(stub), BOOLEAN, run=LLMRun(quiet=True), limit=1)
    assert len(select_sources(sources.store, BOOLEAN)) == 1
    report = rewrite(sources.store, stub_backend(stub), BOOLEAN, run=LLMRun(quiet=True))
    assert report.selected == 1 and stub.requests == 2
    with sources.store.session() as session:
        answers = session.execute(select(Item.data, Item.answer).where(Item.group == BOOLEAN)).all()
    assert all(answer != data["original_answer"] for data, answer in answers)  # the stub flips
    assert rewrite(sources.store, stub_backend(stub), BOOLEAN, run=LLMRun(quiet=True)).selected == 0


def test_ingested_counterfactuals_count_as_done_unless_asked(workspace, stub, peer_cvqa_real):
    ingest_cvqa(workspace.store, peer_cvqa_real)
    assert select_sources(workspace.store, BOOLEAN) == []  # every yes/no source has its C-VQA boolean item
    assert len(select_sources(workspace.store, BOOLEAN, include_ingested=True)) == 100
    assert len(select_sources(workspace.store, NUMERICAL_INDIRECT)) > 0


def test_rerun_hits_the_cache_and_refresh_calls_again(sources, stub):
    backend = stub_backend(stub)
    rewrite(sources.store, backend, NUMERICAL_DIRECT, run=LLMRun(quiet=True))
    assert stub.requests == 4 and count(sources.store, CachedResponse) == 4
    drop_generated_items(sources.store)
    again = rewrite(sources.store, backend, NUMERICAL_DIRECT, run=LLMRun(quiet=True))
    assert stub.requests == 4  # no model call
    assert again.items_created == 4 and again.stats.cached == 4
    assert count(sources.store, Generation, Generation.cached.is_(True)) == 4
    drop_generated_items(sources.store)
    refreshed = rewrite(sources.store, backend, NUMERICAL_DIRECT, run=LLMRun(refresh=True, quiet=True))
    assert stub.requests == 8 and refreshed.stats.cached == 0 and refreshed.items_created == 4
    assert count(sources.store, CachedResponse) == 4  # replaced, not duplicated


def test_the_cache_key_changes_with_model_template_and_params(sources, stub, tmp_path):
    rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(quiet=True), limit=1)
    drop_generated_items(sources.store)
    rewrite(sources.store, stub_backend(stub, model="other"), NUMERICAL_DIRECT, run=LLMRun(quiet=True), limit=1)
    drop_generated_items(sources.store)
    mine = tmp_path / "mine.j2"
    mine.write_text("Rewrite this.\nQuestion: {{ question }}\nAnswer: {{ answer }}\n")
    report = rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(template_path=mine, quiet=True),
                     limit=1)
    drop_generated_items(sources.store)
    rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT,
            run=LLMRun(quiet=True, params={"temperature": 0.0, "max_tokens": 99}), limit=1)
    assert stub.requests == 4 and count(sources.store, CachedResponse) == 4
    assert report.template == str(mine)
    with sources.store.session() as session:
        gen = session.execute(select(Generation).where(Generation.template_name == str(mine))).scalar_one()
    assert gen.template_hash == hashlib.sha256(mine.read_bytes()).hexdigest()


def test_unparseable_output_is_kept_retried_with_new_params_and_never_stops_the_batch(sources):
    def reply(request, prompt):
        if "How many cats" in prompt:
            return "I am not sure what you mean."
        if "How many cars" in prompt and request.get("temperature", 0) == 0:
            return '{"reasoning": "add one", "new_question": "How many cars?"}'  # no answer on the greedy attempt
        return structured_reply(request["response_format"]["json_schema"]["schema"], prompt)

    server = StubServer(delay=0.0, reply=reply).start_in_thread()
    try:
        report = rewrite(sources.store, stub_backend(server), NUMERICAL_DIRECT, run=LLMRun(max_attempts=3, quiet=True))
    finally:
        server.shutdown()
        server.server_close()
    assert report.items_created == 3 and report.stats.failed == 1 and report.parse_failures == 4
    assert server.requests == 3 + 2 + 1 + 1  # cats: 3 attempts, cars: 2, the other two: 1 each
    with sources.store.session() as session:
        cats = session.execute(select(Generation).where(Generation.prompt.contains("How many cats"))
                               .order_by(Generation.attempt)).scalars().all()
        assert [g.attempt for g in cats] == [1, 2, 3]
        assert all(g.raw_output == "I am not sure what you mean." and g.parse_error.startswith("not a count_rewrite")
                   for g in cats)
        first_cars = session.execute(select(Generation).where(Generation.prompt.contains("How many cars"),
                                                              Generation.attempt == 1)).scalar_one()
        assert first_cars.parse_error == "not a count_rewrite reply: new_answer: Field required"
        assert len({g.cache_key for g in cats}) == 3 and cats[1].params["seed"] == 2
        assert not session.execute(select(Item).where(Item.source_id == cats[0].source_id)).first()
        cars = session.execute(select(Item).where(Item.question.contains("cars"))).scalar_one()
        assert cars.data["attempt"] == 2


def test_call_errors_are_recorded_and_a_later_run_finishes_the_work(sources):
    down = StubServer(delay=0.0, reply=lambda request, prompt: 503).start_in_thread()
    try:
        report = rewrite(sources.store, stub_backend(down, request_attempts=2), NUMERICAL_DIRECT,
                         run=LLMRun(quiet=True))
    finally:
        down.shutdown()
        down.server_close()
    assert report.items_created == 0 and report.stats.failed == 4 and report.call_errors == 4
    assert down.requests == 8  # two tries each
    with sources.store.session() as session:
        errors = session.execute(select(Generation.error)).scalars().all()
    assert len(errors) == 4 and all("HTTP 503" in e for e in errors)
    up = StubServer(delay=0.0).start_in_thread()
    try:
        assert rewrite(sources.store, stub_backend(up), NUMERICAL_DIRECT, run=LLMRun(quiet=True)).items_created == 4
    finally:
        up.shutdown()
        up.server_close()


def test_reparse_rebuilds_items_from_stored_outputs_without_model_calls(sources, stub):
    rewrite(sources.store, stub_backend(stub), NUMERICAL_INDIRECT, run=LLMRun(quiet=True))
    # As if an older parser had failed on every output: no parse, no items.
    drop_generated_items(sources.store)
    with sources.store.write() as session:
        for gen in session.execute(select(Generation)).scalars():
            gen.parsed, gen.parse_error = None, "old parser failed"
            session.add(gen)
    report = reparse(sources.store)
    assert report.generations == 4 and report.changed == 4 and report.items_created == 4
    assert stub.requests == 4
    assert count(sources.store, Generation, Generation.parse_error.is_not(None)) == 0
    assert reparse(sources.store).as_dict() == {"generations": 4, "changed": 0, "items_created": 0,
                                                "items_updated": 0}


def test_reparse_reads_old_free_text_generations_beside_structured_ones(sources, stub):
    rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(quiet=True))  # structured replies
    with sources.store.write() as session:
        source = session.execute(select(SourceQuestion).where(SourceQuestion.question == "Is it raining?")).scalar_one()
        # a generation from before structured output: free text, no output_schema in its params
        session.add(Generation(source_id=source.id, generator="rewrite", group=BOOLEAN, backend="openai",
                               model="stub", params={"temperature": 0.0}, raw_output=stub_reply(
                                   "Question: Is it raining?\nAnswer: no"), parse_error="old parser failed"))
    report = reparse(sources.store)
    assert report.generations == 5 and report.changed == 1 and report.items_created == 1
    with sources.store.session() as session:
        item = session.execute(select(Item).where(Item.key == item_key(source.id, BOOLEAN))).scalar_one()
        structured = session.execute(select(Item).where(Item.group == NUMERICAL_DIRECT)).scalars().all()
    assert item.answer == "yes" and item.question.startswith("Would it still hold that")
    assert len(structured) == 4 and all(i.answer.isdigit() for i in structured)


def configure_stub(workspace, base_url: str) -> None:
    config = workspace.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"'))


def test_cli_rewrite_and_reparse(sources, stub, run_cli):
    configure_stub(sources, stub.base_url)
    result = run_cli("generate", "rewrite", "--group", "numerical-direct", "--limit", "2", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["items_created"] == 2 and summary["backend"] == "openai" and summary["model"] == "stub"
    result = run_cli("generate", "rewrite", "--group", "boolean", "--concurrency", "2", "--quiet")
    assert result.exit_code == 0 and "2 written" in result.output
    result = run_cli("generate", "reparse")
    assert result.exit_code == 0 and "4 stored outputs parsed again" in result.output
    bad = run_cli("generate", "rewrite", "--group", "boolean", "--template", "/nonexistent/x.j2")
    assert bad.exit_code == 1 and "/nonexistent/x.j2: no such template file" in bad.output


def stub_requests(base_url: str) -> int:
    import httpx

    return httpx.get(base_url + "/stats").json()["requests"]


def test_a_killed_run_resumes_without_duplicates(workspace, tmp_path):
    rows = [(f"img{i}.jpg", f"How many things of kind {i} are there?", str(i % 7)) for i in range(40)]
    ingest_table(workspace.store, write_table(tmp_path / "many.csv", rows))
    server, base_url = start_process(0.0)
    try:
        configure_stub(workspace, base_url)
        command = [sys.executable, "-m", "cftools.cli", "-w", str(workspace.root), "generate", "rewrite",
                   "--group", "numerical-direct", "--concurrency", "2", "--no-rederive", "--quiet"]
        stub = ScriptedLLM(base_url.removesuffix("/v1"))
        stub.hold(after=6)  # the run cannot get past 6 items: it is killed there, with 2 calls in flight
        killed_at = kill_after_progress(command, workspace.root / "cftools.db",
                                        "select count(*) from items where origin = 'generated'", at_least=6)
        assert killed_at == 6
        asked_before = stub_requests(base_url)
        stub.release()

        finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, finished.stderr
        db = sqlite3.connect(workspace.root / "cftools.db", timeout=60)
        keys = [k for (k,) in db.execute("select key from items where origin = 'generated'")]
        assert len(keys) == len(set(keys)) == 40
        per_source = db.execute("select count(*) from items where origin = 'generated' "
                                "group by source_id having count(*) > 1").fetchall()
        assert per_source == []
        # the second run asked only for what the first had not stored (plus nothing else)
        assert stub_requests(base_url) - asked_before == 40 - killed_at
        db.close()
    finally:
        server.kill()
        server.wait()


def test_ctrl_c_stops_cleanly_and_the_rerun_continues(workspace, tmp_path):
    rows = [(f"img{i}.jpg", f"How many items of sort {i} are there?", str(i % 5)) for i in range(20)]
    ingest_table(workspace.store, write_table(tmp_path / "some.csv", rows))
    server, base_url = start_process(0.0)
    try:
        configure_stub(workspace, base_url)
        stub = ScriptedLLM(base_url.removesuffix("/v1"))
        stub.hold(after=3)  # the run is held at a known point: 3 calls answered, the next 2 in flight
        command = [sys.executable, "-m", "cftools.cli", "-w", str(workspace.root), "generate", "rewrite",
                   "--group", "numerical-indirect", "--concurrency", "2", "--quiet"]
        # SIGINT as a terminal gives it: a test run started in the background (no job control) ignores SIGINT, which
        # its children inherit, and Python then installs no KeyboardInterrupt handler
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        db = sqlite3.connect(workspace.root / "cftools.db", timeout=60)
        made = "select count(*) from items where origin = 'generated'"
        wait_for(lambda: run.poll() is not None or (stub.held() == 2 and db.execute(made).fetchone()[0] == 3),
                 "the run held after 3 calls")
        assert run.poll() is None, run.communicate()
        run.send_signal(signal.SIGINT)
        stub.release()  # the calls in flight end; the run stops on the signal, not for lack of work
        out, err = run.communicate(timeout=60)
        assert run.returncode == 1 and "interrupted" in err, (out, err)
        stopped_at = db.execute(made).fetchone()[0]
        assert 3 <= stopped_at < 20
        assert subprocess.run(command, capture_output=True, timeout=300).returncode == 0
        assert db.execute("select count(distinct key), count(*) from items where origin = 'generated'"
                          ).fetchone() == (20, 20)
        db.close()
    finally:
        server.kill()
        server.wait()
