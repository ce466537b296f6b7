"""Structured output (issue 25): every generator's schema through the three paths — `response_format` to the
loopback chat server (which checks it as strict mode does and replies in it), constrained decoding on a real
transformers model built from a config, validation of every reply (a reply outside the schema is a recorded,
retried failure) — and the model that re-derives each answer (check `answer_disputed`)."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from sqlalchemy import select

from cftools.generate.llm_task import LLMRun
from cftools.checks import run_checks
from cftools.generate.rederive import rederive, rederive_enabled, rederive_schema
from cftools.ingest.readers import ingest_table
from cftools.kinds.cfmm.generate import CFMM_REDERIVE, DRAFT_SCHEMA, pick_schema
from cftools.kinds.cvqa.generate import BOOLEAN_REWRITE, COUNT_REWRITE, CVQA_REDERIVE, rewrite
from cftools.kinds.cvqa.model import BOOLEAN, NUMERICAL_DIRECT
from cftools.kinds.mucr.cues import CUES_SCHEMA
from cftools.kinds.mucr.generate import CONTEXT_SCHEMA, captions_schema
from cftools.kinds.mucr.explanations import JUDGE_SCHEMA
from cftools.llm import LLMError, make_backend
from cftools.llm.structured import ReplyError
from cftools.models import CheckFlag, Generation, Item
from fixtures_llm import stub_backend
from llm_stub import response_format_error, structured_reply

SCHEMAS = [COUNT_REWRITE, BOOLEAN_REWRITE, CONTEXT_SCHEMA, captions_schema(2), CUES_SCHEMA,
           pick_schema(["count", "color"]), DRAFT_SCHEMA, JUDGE_SCHEMA, rederive_schema(int),
           rederive_schema(Literal["the dog", "the cat"])]


@pytest.fixture
def sources(workspace, tmp_path):
    table = tmp_path / "few.csv"
    table.write_text("image,question,answer\na.jpg,How many cats are there?,2\nb.jpg,How many cars are there?,5\n"
                     "c.jpg,Is the light on?,yes\n")
    ingest_table(workspace.store, table)
    return workspace


# ---------------------------------------------------------------- 1. response_format to a server


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.name)
def test_every_schema_is_a_strict_response_format_the_server_takes_and_answers_in(schema, stub):
    backend = stub_backend(stub)
    completion = backend.complete([{"role": "user", "content": "Question: How many?\nAnswer: 2"}],
                                  {"max_tokens": 50, "response_format": schema.response_format()})
    sent = stub.received[-1]["body"]["response_format"]
    assert sent == schema.response_format() and response_format_error(sent) is None
    schema.read(completion.text)  # the stub replied in the schema, and it validates


def test_a_server_refuses_a_schema_outside_the_strict_subset(stub):
    backend = stub_backend(stub, request_attempts=1)
    with pytest.raises(LLMError, match="HTTP 400.*maxLength"):
        backend.complete([{"role": "user", "content": "hi"}],
                         {"response_format": COUNT_REWRITE.response_format(full=True)})


def test_rewrite_sends_the_groups_schema_and_records_its_hash(sources, stub):
    report = rewrite(sources.store, stub_backend(stub), BOOLEAN, run=LLMRun(quiet=True))
    assert report.items_created == 1 and report.parse_failures == 0
    body = stub.received[-1]["body"]
    assert body["response_format"]["json_schema"]["name"] == "boolean_rewrite" and "stop" not in body
    # the chain of thought comes first: the flipped answer, the reasoning, then the question and the answer
    assert list(body["response_format"]["json_schema"]["schema"]["properties"]) == [
        "flipped_answer", "reasoning", "new_question", "new_answer"]
    with sources.store.session() as session:
        gen = session.execute(select(Generation)).scalar_one()
        item = session.execute(select(Item).where(Item.origin == "generated")).scalar_one()
    assert gen.params["output_schema"] == {"name": "boolean_rewrite", "hash": BOOLEAN_REWRITE.hash,
                                           "mode": "json_schema", "constrained": True}
    assert "response_format" not in gen.params  # the hash stands for it
    assert item.answer == "no" and item.data["flipped_answer"] == "no"


def test_prompt_mode_puts_the_schema_in_the_prompt_and_validates_the_reply(sources, stub):
    def reply(request, prompt):
        assert "response_format" not in request
        schema = json.loads(prompt.rsplit("It must follow this JSON Schema:\n", 1)[1])
        return "Sure! ```json\n" + structured_reply(schema, prompt) + "\n```"

    stub.reply = reply
    report = rewrite(sources.store, stub_backend(stub, structured_output="prompt"), NUMERICAL_DIRECT,
                     run=LLMRun(quiet=True))
    assert report.items_created == 2 and report.parse_failures == 0
    with sources.store.session() as session:
        gens = session.execute(select(Generation)).scalars().all()
    assert {g.params["output_schema"]["mode"] for g in gens} == {"prompt"}
    assert not any(g.params["output_schema"]["constrained"] for g in gens)


def test_the_wire_schema_drops_bounds_not_fields_that_share_their_names():
    from pydantic import Field

    from cftools.llm.structured import OutputSchema, Reply

    class Named(Reply):
        title: str = Field(max_length=5)
        default: int = Field(ge=0)

    wire = OutputSchema("named", Named).wire_schema
    assert wire["required"] == ["title", "default"] and wire["properties"]["title"] == {"type": "string"}
    assert response_format_error({"type": "json_schema", "json_schema": {"name": "named", "strict": True,
                                                                         "schema": wire}}) is None


def test_an_unknown_structured_output_setting_is_refused():
    with pytest.raises(LLMError, match="structured_output"):
        make_backend({"backend": "openai", "model": "m", "structured_output": "grammar"})


# ---------------------------------------------------------------- 3. validation: a recorded, retried failure


def test_a_reply_outside_the_schema_is_recorded_and_retried(sources, stub):
    stub.reply = lambda request, prompt: (
        '{"reasoning": "more", "new_question": "How many cats if one came?", "new_answer": "three"}'
        if request.get("temperature", 0) == 0 else structured_reply(request["response_format"]["json_schema"]["schema"],
                                                                    prompt))
    report = rewrite(sources.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(quiet=True), limit=1)
    assert report.items_created == 1 and report.parse_failures == 1
    with sources.store.session() as session:
        first, second = session.execute(select(Generation).order_by(Generation.attempt)).scalars().all()
    assert first.parse_error.startswith("not a count_rewrite reply: new_answer: Input should be a valid integer")
    assert first.parsed is None and second.parse_error is None and second.params["seed"] == 2


@pytest.mark.parametrize("text, reason", [("", "empty reply"), ("no JSON here", "Invalid JSON"),
                                          ('{"S1": 3, "S2": 11, "S3": 4}', "S2"),
                                          ('{"S1": 3, "S2": 1, "S3": 4, "S4": 0}', "S4")])
def test_validation_names_what_is_wrong(text, reason):
    with pytest.raises(ReplyError, match=reason):
        JUDGE_SCHEMA.read(text)


# ---------------------------------------------------------------- 2. constrained decoding on a transformers model


@pytest.fixture(scope="module")
def tiny_local(tmp_path_factory):
    """The embedded backend's transformers path with a random tiny Llama (built from a config) and a byte-level
    tokenizer: whatever the weights say, the reply must come out in the schema."""
    pytest.importorskip("llguidance")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from cftools.llm.local import LocalBackend

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    raw = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                                         pad_token_id=0)).eval()
    weights = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    weights.write_bytes(b"")  # the backend wants a file; the model is handed over below
    backend = LocalBackend(model="tiny", model_path=str(weights), loader="transformers")
    backend._loaded = (tokenizer, model)
    return backend


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.name)
def test_constrained_decoding_makes_every_schema_valid_by_construction(schema, tiny_local):
    messages = [{"role": "user", "content": "Reply in JSON."}]
    free = tiny_local.complete(messages, {"temperature": 0.0, "max_tokens": 40})
    with pytest.raises(ReplyError):
        schema.read(free.text)  # unconstrained, the random model writes no JSON of the schema
    reply = tiny_local.complete(messages, {"temperature": 0.0, "max_tokens": 1500,
                                           "response_format": schema.response_format(full=True)})
    schema.read(reply.text)  # constrained: valid, bounds included
    assert json.loads(reply.text) and reply.completion_tokens < 1500


def test_the_embedded_backend_takes_only_a_json_schema_response_format(tiny_local):
    with pytest.raises(LLMError, match="json_schema"):
        tiny_local.complete([{"role": "user", "content": "x"}], {"response_format": {"type": "json_object"}})


# ---------------------------------------------------------------- answer_disputed


def rederive_reply(agree: set[str]):
    """A model that re-derives the draft's answer for the questions in AGREE and another one otherwise."""
    def reply(request, prompt):
        schema = request["response_format"]["json_schema"]
        if schema["name"] != "rederived_answer":
            return structured_reply(schema["schema"], prompt)
        question = prompt.rsplit("Original question:", 1)[1].split("\n")[0].strip()
        answer = int(prompt.rsplit("Original answer:", 1)[1].split("\n")[0])
        derived = answer + 1 if question in agree else answer + 7
        return json.dumps({"reasoning": f"{answer} and the change make {derived}.", "answer": derived})
    return reply


def test_answer_disputed_flags_a_draft_the_model_derives_differently(sources, stub):
    stub.reply = rederive_reply(agree={"How many cats are there?"})
    backend = stub_backend(stub)
    rewrite(sources.store, backend, NUMERICAL_DIRECT, run=LLMRun(quiet=True))  # the stub's drafts: count + 1
    report = rederive(sources.store, backend, CVQA_REDERIVE, run=LLMRun(quiet=True))
    assert report.selected == 2 and report.items_created == 2
    schema = stub.received[-1]["body"]["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["reasoning", "answer"] and schema["properties"]["answer"]["type"] == "integer"
    assert "If" not in stub.received[-1]["body"]["messages"][-1]["content"].rsplit("Counterfactual question:")[0][-60:]
    run_checks(sources.store, ["answer_disputed"])
    with sources.store.session() as session:
        flags = session.execute(select(CheckFlag.reason, Item.question).join(Item, Item.id == CheckFlag.item_id)
                                .where(CheckFlag.code == "answer_disputed")).all()
    assert len(flags) == 1  # the cats' draft agrees; the cars' does not
    reason, question = flags[0]
    assert "cars" in question and "re-derived '12' where the draft says '6'" in reason and "5 and the change" in reason
    again = rederive(sources.store, backend, CVQA_REDERIVE, run=LLMRun(quiet=True))
    assert again.selected == 0  # each answer is re-derived once


def test_answer_disputed_on_cfmm_picks_among_the_options(workspace, stub):
    with workspace.store.write() as session:
        session.add(Item(key="pairs:1:1", kind="cfmm", group="size", status="draft", origin="generated",
                         question="If the dog shrank to the size of a mouse, which would be bigger?", answer="the dog",
                         data={"type": "size", "basic_question": "Which is bigger, the dog or the cat?",
                               "basic_answer": "the dog",
                               "options": {"original": ["the dog", "the cat"],
                                           "counterfactual": ["the dog", "the cat"]}}))
    stub.reply = lambda request, prompt: json.dumps({"reasoning": "A mouse-sized dog is smaller than a cat.",
                                                     "answer": "the cat"})
    report = rederive(workspace.store, stub_backend(stub), CFMM_REDERIVE, run=LLMRun(quiet=True))
    assert report.items_created == 1
    schema = stub.received[-1]["body"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["answer"]["enum"] == ["the dog", "the cat"]
    run_checks(workspace.store, ["answer_disputed"])
    with workspace.store.session() as session:
        reason = session.execute(select(CheckFlag.reason).where(CheckFlag.code == "answer_disputed")).scalar_one()
    assert "re-derived 'the cat' where the draft says 'the dog'" in reason


def test_rederive_is_on_for_a_real_model_and_off_for_the_embedded_one():
    assert rederive_enabled({}, "openai") and not rederive_enabled({}, "local")
    assert rederive_enabled({"rederive": True}, "local") and not rederive_enabled({"rederive": False}, "openai")


def test_cli_rewrite_re_derives_with_a_real_model_and_check_flags(sources, stub, run_cli):
    stub.reply = rederive_reply(agree=set())
    config = sources.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{stub.base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"'))
    out = run_cli("generate", "rewrite", "--group", "numerical-direct", "--quiet")
    assert out.exit_code == 0, out.output
    assert "2 written" in out.output and "answers re-derived by openai:stub: 2 of 2 drafts" in out.output
    assert run_cli("generate", "rewrite", "--group", "boolean", "--no-rederive", "--quiet").exit_code == 0
    assert sum("rederived_answer" == r["body"]["response_format"]["json_schema"]["name"]
               for r in stub.received) == 2  # --no-rederive asked nothing more
    out = run_cli("check", "--only", "answer_disputed")
    assert "answer_disputed" in out.output
