"""What a generate command says about its run is what happened, the answer re-derivation that follows `rewrite` and
`pairs` included: its result in `--json`, its failures in the exit code, the command's options reaching it, no claim
of it under `--estimate`; and `generate pairs` takes the money options every generate command has (the doc's
tokens, cost, budget and estimate), against the loopback stub (tests/llm_stub.py)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from loopback import running_server
from test_batch_api import BATCH_STUB, cli
from test_batch_api import configure as configure_batches
from test_cfmm import draft_reply, images_and_facts  # noqa: F401  (images_and_facts: a fixture)
from test_prompt_variants import configure
from test_redo import QUESTIONS

from cftools.ingest.readers import ingest_table
from cftools.models import Item

REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--quiet")
PRICES = {"stub": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}


def schema_name(request: dict) -> str | None:
    return ((request.get("body") or {}).get("response_format") or {}).get("json_schema", {}).get("name")


def sent(stub, name: str) -> int:
    """How many chat requests of the output schema NAME the stub received."""
    return sum(1 for r in stub.received if r["path"].endswith("/chat/completions") and schema_name(r) == name)


@pytest.fixture
def questions_on_stub(workspace, tmp_path, stub):
    """A workspace on the in-thread stub with four numerical source questions and no drafts."""
    table = tmp_path / "mine.csv"
    table.write_text("image,question,answer\n" + "".join(f"{i},{q},{a}\n" for i, q, a in QUESTIONS))
    ingest_table(workspace.store, table)
    configure(workspace, stub.base_url)
    return workspace


def unreadable_rederivation(request, prompt):  # noqa: ANN001, ANN201
    """Rewrites as the stub writes them; every re-derivation a reply outside its schema."""
    from llm_stub import structured_reply

    schema = request["response_format"]["json_schema"]
    return "{}" if schema["name"] == "rederived_answer" else structured_reply(schema["schema"], prompt)


def test_rewrite_json_carries_the_rederivation(questions_on_stub, run_cli, stub):
    result = run_cli(*REWRITE, "--rederive", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["items_created"] == len(QUESTIONS)
    # before: the re-derivation's result was printed as a line without --json and left out of the JSON
    assert shown["rederive"]["generator"] == "rederive"
    assert shown["rederive"]["items_created"] == len(QUESTIONS) == sent(stub, "rederived_answer")
    assert shown["usage"]["requests"] == 2 * len(QUESTIONS)  # the rewrites' and the re-derivations' calls


def test_rederivation_takes_the_commands_max_attempts_and_its_failures_set_the_exit_code(questions_on_stub, run_cli,
                                                                                         stub):
    stub.reply = unreadable_rederivation
    result = run_cli(*REWRITE, "--rederive", "--json", "--max-attempts", "1")
    shown = json.loads(result.stdout)
    assert shown["items_created"] == len(QUESTIONS)
    # before: the re-derivation ran its own 3 attempts whatever --max-attempts said ...
    assert sent(stub, "rederived_answer") == len(QUESTIONS)
    assert shown["rederive"]["failed"] == len(QUESTIONS) and shown["rederive"]["items_created"] == 0
    # ... and its failures left the exit code 0
    assert result.exit_code == 3


def test_an_estimate_claims_no_rederivation(questions_on_stub, run_cli, stub):
    result = run_cli(*REWRITE, "--rederive", "--estimate")
    assert result.exit_code == 0, result.output
    assert not stub.received
    assert "estimate only, nothing called" in result.output
    assert "re-derived" not in result.output  # before: "answers re-derived by openai:stub: 0 of 0 drafts"


# ------------------------------------------------------------------ generate pairs: tokens, cost, budget, estimate


@pytest.fixture
def pairs_on_stub(images_and_facts, stub):  # noqa: F811
    stub.reply = draft_reply
    configure(images_and_facts, stub.base_url, prices=PRICES)
    return images_and_facts


def drafts(store) -> int:
    with store.session() as session:
        return session.execute(select(func.count()).select_from(Item).where(Item.kind == "cfmm")).scalar_one()


def test_pairs_reports_its_tokens_and_cost(pairs_on_stub, run_cli, stub):
    result = run_cli("generate", "pairs", "--types", "count,color", "--no-rederive", "--quiet", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["items_created"] == 2
    calls = [r for r in stub.received if r["path"].endswith("/chat/completions")]
    # before: no usage at all, though the doc says every generate command reports it
    assert shown["usage"]["requests"] == len(calls) == 5  # three picks, two drafts
    assert shown["usage"]["priced"] and shown["usage"]["cost"] > 0
    text = run_cli("generate", "pairs", "--types", "count,color", "--no-rederive", "--quiet", "--refresh")
    assert "tokens in" in text.output


def test_pairs_estimate_calls_nothing(pairs_on_stub, run_cli, stub):
    result = run_cli("generate", "pairs", "--types", "count,color", "--no-rederive", "--estimate", "--json")
    assert result.exit_code == 0, result.output
    assert not stub.received and drafts(pairs_on_stub.store) == 0
    (pick,) = json.loads(result.stdout)["estimate"]  # the first stage only: the drafts depend on its replies
    assert pick["generator"] == "pairs-pick" and pick["requests"] == 3


def test_pairs_keeps_the_configured_budget(pairs_on_stub, run_cli, stub):
    config = pairs_on_stub.path("cftools.toml")
    config.write_text(config.read_text().replace("[llm]\n", "[llm]\nmax_cost = 0.000001\n", 1))
    result = run_cli("generate", "pairs", "--types", "count,color", "--no-rederive", "--quiet")
    # before: [llm] max_cost was ignored by pairs and every call was made
    assert result.exit_code == 3, result.output
    assert "the budget stopped the run" in result.output
    assert not stub.received and drafts(pairs_on_stub.store) == 0


def test_pairs_whose_every_request_fails_exits_with_the_failure(pairs_on_stub, run_cli, stub):
    stub.reply = lambda request, prompt: "not a reply"
    result = run_cli("generate", "pairs", "--types", "count,color", "--no-rederive", "--quiet", "--json",
                     "--max-attempts", "1")
    shown = json.loads(result.stdout)
    assert shown["failed"] == 3 and shown["items_created"] == 0
    assert result.exit_code == 4  # before: 0, as if all went well


def test_the_local_backend_refuses_a_model_it_would_not_run(workspace, run_cli):
    result = run_cli("generate", "rewrite", "--group", "boolean", "--model", "qwen2.5-7b-instruct", "--quiet")
    # before: exit 0, "with local:qwen2.5-7b-instruct", while the bundled SmolLM2 would have answered every call
    assert result.exit_code != 0
    assert "no model 'qwen2.5-7b-instruct'" in result.output and "model_path" in result.output
    config = workspace.path("cftools.toml")
    config.write_text(config.read_text().replace('model = "smollm2-135m-instruct"', 'model = "my-smollm2"'))
    assert "no model 'my-smollm2'" in run_cli("generate", "rewrite", "--group", "boolean", "--quiet").output


@pytest.mark.parametrize("types, says", [("count=nan", "share of count is nan"), ("count=inf,color=1", "share of count"),
                                         ("dogs", "unknown type 'dogs'")])
def test_bad_types_on_the_command_line_are_bad_usage(pairs_on_stub, run_cli, stub, types, says):
    result = run_cli("generate", "pairs", "--types", types, "--no-rederive", "--quiet")
    # before: exit 1 for an unknown type, and a nan or inf share taken until it crashed the quota (a traceback)
    assert result.exit_code == 2, result.output
    assert "--types" in result.output and says in result.output and not stub.received


def test_pairs_through_the_batch_api_makes_no_synchronous_call(images_and_facts):  # noqa: F811
    with running_server(Path(BATCH_STUB).name, "--port", "0") as url:
        configure_batches(images_and_facts, url)
        out = cli(images_and_facts, "generate", "pairs", "--types", "count,color", "--no-rederive", "--quiet",
                  "--batch-api", "--json")
        assert out.returncode == 0, out.stderr  # before: no such option
        usage = json.loads(out.stdout)["usage"]
        assert usage["requests"] == usage["batch_requests"] == 6  # three picks, then the drafts, in batches
        assert httpx.get(url.removesuffix("/v1") + "/control/requests", timeout=10).json() == []
