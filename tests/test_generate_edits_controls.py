"""`generate edits` says what its LLM step did as every generate command does: its tokens and cost (text and
`--json`), a budget that stopped it (a warning and exit 3), its failed instructions in the exit code; and the options
only a diffusers edit pipeline takes are refused with an images API, not dropped."""

from __future__ import annotations

import json

import pytest

from test_edit_checks_registry import items_ws  # noqa: F401  (a fixture: three C-VQA items with images)
from test_prompt_variants import configure

EDITS = ("generate", "edits", "--kind", "cvqa", "--edit-backend", "openai", "--edit-model", "edit-model-1",
         "--quiet")
PRICES = {"stub": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}


@pytest.fixture
def on_stub(items_ws, stub, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")  # the images API's: never called here
    configure(items_ws, stub.base_url, prices=PRICES)
    return items_ws


def chat_calls(stub) -> int:
    return sum(1 for r in stub.received if r["path"].endswith("/chat/completions"))


def test_a_budget_that_stops_the_instructions_is_said_and_exits_3(on_stub, run_cli, stub):
    result = run_cli(*EDITS, "--max-cost", "0.000001", "--json")
    # before: exit 0 and not a word: the budget refused every instruction and the run looked done
    assert result.exit_code == 3, result.output
    assert "the budget stopped the run" in result.output
    shown = json.loads(result.stdout)
    assert shown["instructions"]["budget"]["stopped"] and shown["instructions"]["usage"]["requests"] == 0
    assert chat_calls(stub) == 0


def test_the_instructions_tokens_and_cost_are_shown(on_stub, run_cli, stub):
    stub.reply = lambda request, prompt: "not a reply"  # no instruction: the image step has nothing to do
    result = run_cli(*EDITS, "--max-attempts", "1")
    assert "tokens in" in result.output and "over 3 calls" in result.output  # before: no tokens, no cost
    # before: exit 0, though every instruction failed and nothing was made
    assert result.exit_code == 4, result.output


@pytest.mark.parametrize("option", [("--steps", "20"), ("--guidance", "7.5")])
def test_an_images_api_refuses_what_only_a_pipeline_takes(on_stub, run_cli, stub, option):
    result = run_cli(*EDITS, *option)
    assert result.exit_code == 2, result.output  # before: accepted and dropped
    assert option[0] in result.output and chat_calls(stub) == 0
