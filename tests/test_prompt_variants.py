"""Prompt variants (`generate ... --prompt-variant NAME`) and their comparison (`compare_variants`).

Drafting runs against the loopback chat stub (a real process on 127.0.0.1): it logs every request, so a test sees
which template each request was rendered from. The comparison runs on a real SQLite store whose drafts are
decided with known acceptance rates per variant (seeded), as people's decisions would leave them."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest
import tomlkit

from test_batch_api import questions, rows
from cftools.ingest.readers import ingest_table
from cftools.models import ACCEPTED, DRAFT, REJECTED, Generation, Item, utcnow

REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--quiet", "--no-rederive")
TERSE_MARK = "Rewrite the question into a counterfactual one"  # a line only the terse variant has
DEFAULT_MARK = "Think step by step"  # a line only the default template has


def configure(workspace, base_url: str, prices: dict | None = None) -> None:
    path = workspace.path("cftools.toml")
    config = tomlkit.parse(path.read_text())
    section = config["llm"]
    section["backend"], section["model"], section["base_url"] = "openai", "stub", base_url
    section["backoff_initial"], section["backoff_max"] = 0.01, 0.05
    if prices:
        table = tomlkit.table(is_super_table=True)
        for model, price in prices.items():
            table[model] = price
        section["prices"] = table
    path.write_text(tomlkit.dumps(config))
    workspace.config = tomlkit.parse(path.read_text()).unwrap()


def prompts_sent(llm_server) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
            for r in llm_server.requests() for m in r["body"]["messages"]]


# ------------------------------------------------------------------ drafting with a variant
def test_two_variants_make_two_drafts_per_source_each_recorded(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 4)
    configure(workspace, llm_server.base_url)

    default = run_cli("-w", workspace.root, *REWRITE, "--json")
    assert default.exit_code == 0, default.output
    terse = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse", "--json")
    assert terse.exit_code == 0, terse.output
    assert json.loads(terse.output)["items_created"] == 4

    sent = prompts_sent(llm_server)
    assert len(sent) == 8, "each variant asks once per source: the cache never answers one variant with the other's"
    assert sum(DEFAULT_MARK in p for p in sent) == 4 and sum(TERSE_MARK in p for p in sent) == 4

    drafts = rows(workspace, "select i.source_id, i.key, g.prompt_variant, g.template_name, g.template_hash, g.prompt "
                             "from items i join generations g on g.id = i.generation_id order by i.source_id, i.key")
    assert len(drafts) == 8 and len({d[0] for d in drafts}) == 4
    for source in {d[0] for d in drafts}:
        mine = [d for d in drafts if d[0] == source]
        assert sorted(d[2] or "" for d in mine) == ["", "terse"], "one draft per variant per source"
    for _, key, variant, name, digest, prompt in drafts:
        if variant == "terse":
            assert key.endswith(":terse") and name == "rewrite/terse/numerical-direct.j2" and TERSE_MARK in prompt
        else:
            assert name == "rewrite/numerical-direct.j2" and DEFAULT_MARK in prompt
    assert len({d[4] for d in drafts}) == 2, "each variant's own template hash"

    again = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["selected"] == 0, "a rerun of the same variant adds nothing"
    assert len(prompts_sent(llm_server)) == 8
    assert rows(workspace, "select count(*) from items") == [(8,)]

    reparsed = run_cli("-w", workspace.root, "generate", "reparse", "--json")
    assert reparsed.exit_code == 0, reparsed.output
    assert json.loads(reparsed.output)["items_created"] == 0, "reparse keeps each variant's drafts apart"
    assert rows(workspace, "select count(*) from items") == [(8,)]


def test_a_variant_run_first_leaves_the_default_its_own_drafts(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 3)
    configure(workspace, llm_server.base_url)
    assert run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse").exit_code == 0
    default = run_cli("-w", workspace.root, *REWRITE, "--json")
    assert default.exit_code == 0, default.output
    assert json.loads(default.output)["items_created"] == 3
    assert rows(workspace, "select count(*), count(g.prompt_variant) from items i "
                           "join generations g on g.id = i.generation_id") == [(6, 3)]


def test_a_redo_of_a_variants_draft_does_not_count_as_the_defaults_draft(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    assert run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse").exit_code == 0
    db = sqlite3.connect(workspace.root / "cftools.db")
    db.execute("insert into check_flags (item_id, code, reason, created_at) select id, 'arithmetic', 'wrong sum', "
               "created_at from items")
    db.commit()
    db.close()
    redone = run_cli("-w", workspace.root, *REWRITE, "--redo", "flagged", "--json")
    assert json.loads(redone.output)["items_created"] == 2, redone.output
    default = run_cli("-w", workspace.root, *REWRITE, "--json")
    # before: the redo of each terse draft (recorded without a variant) counted as the default's draft: none made
    assert json.loads(default.output)["items_created"] == 2, default.output
    assert rows(workspace, "select count(*) from items where redo_of is null") == [(4,)]


def test_a_folder_given_on_the_command_line_is_a_variant_named_by_the_folder(workspace, tmp_path, run_cli,
                                                                               llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    folder = tmp_path / "mine" / "plain-words"
    folder.mkdir(parents=True)
    (folder / "numerical-direct.j2").write_text("Plain words please.\nQuestion: {{ question }}\nAnswer: {{ answer }}\n")

    result = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", str(folder), "--json")
    assert result.exit_code == 0, result.output
    assert all(p.startswith("Plain words please.") for p in prompts_sent(llm_server))
    recorded = rows(workspace, "select distinct g.prompt_variant, g.template_name from items i "
                               "join generations g on g.id = i.generation_id")
    assert recorded == [("plain-words", "rewrite/plain-words/numerical-direct.j2")], "no local path recorded"


def test_an_unknown_variant_is_one_line_naming_those_that_exist(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    result = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "shouty")
    assert result.exit_code != 0
    message = result.output.strip()
    assert "unknown prompt variant 'shouty' for rewrite" in message and "terse" in message
    assert len(message.splitlines()) == 1
    assert llm_server.requests() == [] and rows(workspace, "select count(*) from generations") == [(0,)]


def test_a_template_file_and_a_variant_together_are_refused(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    own = tmp_path / "own.j2"
    own.write_text("Question: {{ question }}\nAnswer: {{ answer }}\n")
    result = run_cli("-w", workspace.root, *REWRITE, "--template", own, "--prompt-variant", "terse")
    assert result.exit_code != 0 and "not both" in result.output
    assert llm_server.requests() == []


def test_captions_with_a_variant_make_a_group_of_their_own_per_seed(workspace, tmp_path):
    from llm_stub import StubServer

    from cftools.generate.llm_task import LLMRun
    from cftools.kinds.mucr.generate import draft_captions
    from cftools.llm import make_backend

    seeds = tmp_path / "seeds.txt"
    seeds.write_text("speeding -> pulled over\nrain -> catch a cold\n")
    reply = json.dumps({"pairs": [
        {"cause": "a man drives fast on a highway", "effect": "a police car stops him", "category": "human"},
        {"cause": "a fox runs into a road", "effect": "the fox hides", "category": "animal"}]})
    server = StubServer(delay=0.0, reply=lambda request, text: reply).start_in_thread()
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url})
    try:
        runs = [draft_captions(workspace.store, backend, seeds, run=LLMRun(quiet=True, prompt_variant=variant),
                               per_group=2) for variant in (None, "terse", "terse")]
        prompts = [r["body"]["messages"][-1]["content"] for r in server.received]
    finally:
        backend.close()
        server.shutdown()
        server.server_close()
    assert [r.items_created for r in runs] == [4, 4, 0], "a rerun of the same variant adds nothing"
    assert len(prompts) == 4 and sum("Vary the subject; each caption" in str(p) for p in prompts) == 2
    groups = rows(workspace, "select i.\"group\", g.prompt_variant, count(*) from items i "
                             "join generations g on g.id = i.generation_id group by 1, 2 order by 1")
    assert groups == [("seed-rain-catch-a-cold", None, 2), ("seed-rain-catch-a-cold-terse", "terse", 2),
                      ("seed-speeding-pulled-over", None, 2), ("seed-speeding-pulled-over-terse", "terse", 2)]


def test_a_generator_without_variants_refuses_the_option(workspace, tmp_path, run_cli, llm_server):
    configure(workspace, llm_server.base_url)
    result = run_cli("-w", workspace.root, "generate", "cues", "--quiet", "--prompt-variant", "terse")
    assert result.exit_code != 0
    assert "does not run prompt variants" in result.output
    assert llm_server.requests() == []


# ------------------------------------------------------------------ comparing variants and models
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}  # a call of 1,000 tokens in and 100 out costs 0.0012
CALL_COST = 0.0012
DESIGN = {"default": 0.8, "terse": 0.4}  # acceptance by design per variant, the same for both models
PER_CELL = 100  # decided drafts per variant and model


def decided_store(workspace, seed: int = 48) -> None:
    """Drafts of `rewrite` (cvqa) for each variant and model, decided by simulated people at the DESIGN rates (an
    exact share, in a seeded order), beside drafts not decided yet, a call whose reply did not parse and a cache
    hit, which cost or count nothing toward acceptance."""
    rng = random.Random(seed)
    now = utcnow()
    with workspace.store.write() as session:
        number = 0
        for variant, rate in DESIGN.items():
            for model in ("model-a", "model-b"):
                statuses = [ACCEPTED] * round(rate * PER_CELL) + [REJECTED] * (PER_CELL - round(rate * PER_CELL))
                rng.shuffle(statuses)
                statuses += [DRAFT, "in_review", "needs_adjudication"]  # undecided: not counted
                for status in statuses:
                    number += 1
                    generation = Generation(generator="rewrite", group="numerical-direct", backend="openai",
                                            model=model, prompt_variant=None if variant == "default" else variant,
                                            prompt_tokens=1000, completion_tokens=100, created_at=now)
                    session.add(generation)
                    session.flush()
                    session.add(Item(key=f"rewrite:{number}:numerical-direct:{variant}", kind="cvqa",
                                     group="numerical-direct", question=f"q{number}", answer="1", status=status,
                                     origin="generated", generation_id=generation.id))
        # an accepted item read back from a release (decided elsewhere: not counted)
        released = Generation(generator="rewrite", backend="openai", model="model-a", params={"from_release": True})
        session.add(released)
        session.flush()
        session.add(Item(key="release:1", kind="cvqa", group="numerical-direct", question="q", status=ACCEPTED,
                         origin="release", generation_id=released.id))
        # a terse call of model-a that did not parse (paid, no item) and a cache hit of model-b (free)
        session.add(Generation(generator="rewrite", backend="openai", model="model-a", prompt_variant="terse",
                               prompt_tokens=1000, completion_tokens=100, parse_error="no JSON"))
        session.add(Generation(generator="rewrite", backend="openai", model="model-b", prompt_variant="terse",
                               prompt_tokens=1000, completion_tokens=100, cached=True))


def arm(result: dict, by: str, name: str) -> dict:
    (found,) = [a for a in result["arms"] if a["by"] == by and a["name"] == name]
    return found


def comparison(result: dict, by: str) -> dict:
    (found,) = [c for c in result["comparisons"] if c["by"] == by]
    return found


def test_the_better_variant_is_named_when_better_by_design_and_equal_models_are_not(workspace):
    from cftools.generate.variants import compare_variants

    decided_store(workspace)
    with workspace.store.session() as session:
        result = compare_variants(session, {"prices": {"model-a": PRICE, "model-b": PRICE}})
    json.dumps(result)  # JSON-able, as the report renders it

    assert {(a["by"], a["name"]) for a in result["arms"]} == {
        ("prompt_variant", "default"), ("prompt_variant", "terse"), ("model", "model-a"), ("model", "model-b")}
    for name, rate in DESIGN.items():
        variant = arm(result, "prompt_variant", name)
        assert (variant["kind"], variant["generator"]) == ("cvqa", "rewrite")
        assert variant["decided"] == 2 * PER_CELL and variant["acceptance"] == pytest.approx(rate)
        low, high = variant["interval"]
        assert low < rate < high
    for model in ("model-a", "model-b"):
        row = arm(result, "model", model)
        assert row["decided"] == 2 * PER_CELL and row["acceptance"] == pytest.approx(0.6)
        assert row["interval"][0] < 0.6 < row["interval"][1]

    variants = comparison(result, "prompt_variant")
    assert (variants["a"], variants["b"], variants["better"]) == ("default", "terse", "default")
    assert variants["difference"] == pytest.approx(0.4) and variants["p_value"] < 0.05
    assert variants["interval"][0] < 0.4 < variants["interval"][1] and variants["interval"][0] > 0
    models = comparison(result, "model")
    assert models["better"] is None and models["p_value"] > 0.05
    assert models["interval"][0] < 0 < models["interval"][1]

    # cost per accepted item: every paid call of the arm (the unparsed one too, not the cache hit) / accepted
    calls = 2 * (PER_CELL + 3)
    assert arm(result, "prompt_variant", "default")["cost_per_accepted"] == pytest.approx(calls * CALL_COST / 160)
    assert arm(result, "prompt_variant", "terse")["cost_per_accepted"] == pytest.approx((calls + 1) * CALL_COST / 80)
    assert arm(result, "model", "model-b")["cost_per_accepted"] == pytest.approx(calls * CALL_COST / 120)


def test_a_close_difference_names_no_better_variant(workspace):
    """People accept 93 of 150 drafts of one variant and 87 of 150 of the other (0.62 and 0.58): a difference
    within chance, so no arm is called better."""
    from cftools.generate.variants import compare_variants

    rng = random.Random(7)
    with workspace.store.write() as session:
        for variant, accepted in (("default", 93), ("short", 87)):
            statuses = [ACCEPTED] * accepted + [REJECTED] * (150 - accepted)
            rng.shuffle(statuses)
            for number, status in enumerate(statuses):
                generation = Generation(generator="context", backend="openai", model="m",
                                        prompt_variant=None if variant == "default" else variant)
                session.add(generation)
                session.flush()
                session.add(Item(key=f"context:{variant}:{number}", kind="mucr", group="g", question="q",
                                 status=status, origin="generated", generation_id=generation.id))
    with workspace.store.session() as session:
        result = compare_variants(session)
    row = comparison(result, "prompt_variant")
    assert (row["kind"], row["generator"], row["better"]) == ("mucr", "context", None)
    assert row["p_value"] >= 0.05 and row["interval"][0] < row["difference"] < row["interval"][1]
    for name, rate in (("default", 0.62), ("short", 0.58)):
        low, high = arm(result, "prompt_variant", name)["interval"]
        assert low < rate < high
    assert arm(result, "prompt_variant", "short")["cost_per_accepted"] is None, "no price: cost unknown, not 0"
    assert result["comparisons"] == [row], "one model: nothing to compare between models"


def test_a_model_without_a_price_leaves_the_arms_it_drafted_for_without_a_cost(workspace):
    from cftools.generate.variants import compare_variants

    decided_store(workspace)
    with workspace.store.session() as session:
        result = compare_variants(session, {"prices": {"model-a": PRICE}})
    assert arm(result, "prompt_variant", "default")["cost_per_accepted"] is None
    assert arm(result, "model", "model-b")["cost_per_accepted"] is None
    assert arm(result, "model", "model-a")["cost_per_accepted"] == pytest.approx((2 * (PER_CELL + 3) + 1) * CALL_COST
                                                                                  / 120)



def test_a_redone_draft_is_in_no_arm_neither_its_decision_nor_its_call(workspace):
    """A draft of `generate rewrite --redo rejected` (its own template, the people's reasons; recorded with no
    variant) is accepted: no arm's acceptance or cost per accepted item changes (tests/test_funnel_loop.py runs the
    whole loop)."""
    from sqlalchemy import select

    from cftools.generate.variants import compare_variants

    decided_store(workspace)
    prices = {"prices": {"model-a": PRICE, "model-b": PRICE}}
    with workspace.store.session() as session:
        before = compare_variants(session, prices)
    with workspace.store.write() as session:
        old = session.execute(select(Item).where(Item.status == REJECTED).order_by(Item.id).limit(1)).scalar_one()
        redo = Generation(generator="rewrite", group="numerical-direct", backend="openai", model="model-a",
                          prompt_tokens=1000, completion_tokens=100, params={"redo": "rejected", "redo_of": old.key})
        session.add(redo)
        session.flush()
        session.add(Item(key=f"{old.key}~redo1", kind="cvqa", group="numerical-direct", question="q again", answer="2",
                         status=ACCEPTED, origin="generated", generation_id=redo.id, redo_of=old.id))
    with workspace.store.session() as session:
        after = compare_variants(session, prices)
    assert after["arms"] == before["arms"] and after["comparisons"] == before["comparisons"]


# ------------------------------------------------------------------ CFMM pairs: the drafts worded by a variant
def test_pairs_with_a_variant_draft_each_slot_again_with_the_same_picked_type(workspace, tmp_path):
    import PIL.Image

    from test_cfmm import FACTS, draft_reply
    from llm_stub import StubServer

    from cftools.generate.llm_task import LLMRun
    from cftools.kinds.cfmm.generate import generate_pairs, parse_quota
    from cftools.llm import make_backend

    folder = tmp_path / "images"
    folder.mkdir()
    table = ["image,question,answer"]
    for n, (name, question, answer) in enumerate(FACTS):
        PIL.Image.new("RGB", (10 + n, 10), (40 * n, 80, 120)).save(folder / name)
        table.append(f"{name},{question},{answer}")
    (tmp_path / "facts.csv").write_text("\n".join(table) + "\n")
    ingest_table(workspace.store, tmp_path / "facts.csv", folder)
    server = StubServer(delay=0.0, reply=draft_reply).start_in_thread()
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url})
    try:
        quota = parse_quota("count,color")
        default = generate_pairs(workspace.store, backend, run=LLMRun(quiet=True), quota=quota)
        terse = generate_pairs(workspace.store, backend, run=LLMRun(quiet=True, prompt_variant="terse"), quota=quota)
        again = generate_pairs(workspace.store, backend, run=LLMRun(quiet=True, prompt_variant="terse"), quota=quota)
        with pytest.raises(Exception, match="unknown prompt variant 'shouty' for cfmm: use one of terse"):
            generate_pairs(workspace.store, backend, run=LLMRun(quiet=True, prompt_variant="shouty"), quota=quota)
    finally:
        backend.close()
        server.shutdown()
        server.server_close()
    assert default.items_created == 2 and terse.items_created == 2 and again.items_created == 0

    drafts = rows(workspace, "select i.key, i.\"group\", g.prompt_variant, g.template_name, g.prompt from items i "
                             "join generations g on g.id = i.generation_id order by i.key")
    assert len(drafts) == 4
    by_variant = {variant: sorted((key.rsplit(":terse", 1)[0], group) for key, group, v, _, _ in drafts if v == variant)
                  for variant in (None, "terse")}
    assert by_variant[None] == by_variant["terse"], "each slot drafted by both variants, with the same type"
    for key, group, variant, name, prompt in drafts:
        assert (variant == "terse") == key.endswith(":terse")
        assert name == (f"cfmm/terse/{group}.j2" if variant else f"cfmm/{group}.j2")
        assert ("Two options each" in prompt) == (variant == "terse")
    picks = rows(workspace, "select count(*), count(prompt_variant) from generations where generator = 'pairs-pick'")
    assert picks[0][1] == 0, "the type is picked with the default pick.j2"


def test_drafts_of_two_variants_compared_once_people_decided(workspace, tmp_path, run_cli, llm_server):
    """The whole path in small: two variants draft through the stub, people's decisions land on the items, and
    compare_variants reads acceptance and cost per accepted item from what was recorded."""
    from cftools.generate.variants import compare_variants

    questions(workspace, tmp_path, 12)
    configure(workspace, llm_server.base_url, prices={"stub": PRICE})
    for variant in ((), ("--prompt-variant", "terse")):
        result = run_cli("-w", workspace.root, *REWRITE, *variant)
        assert result.exit_code == 0, result.output
    db = sqlite3.connect(workspace.root / "cftools.db")
    db.execute("update items set status = 'accepted'")
    db.execute("update items set status = 'rejected' where key like '%:terse' and source_id % 2 = 0")
    db.commit()
    db.close()
    tokens = dict(rows(workspace, "select coalesce(prompt_variant, 'default'), "
                                  "sum(prompt_tokens) * 1.0 + sum(completion_tokens) * 2.0 from generations "
                                  "where cached = 0 group by 1"))
    assert tokens["default"] > tokens["terse"] > 0, "the terse prompt is shorter, and the stub reports usage"

    with workspace.store.session() as session:
        result = compare_variants(session, workspace.section("llm"))
    default, terse = arm(result, "prompt_variant", "default"), arm(result, "prompt_variant", "terse")
    assert (default["decided"], default["accepted"], terse["decided"], terse["accepted"]) == (12, 12, 12, 6)
    assert default["cost_per_accepted"] == pytest.approx(tokens["default"] / 1e6 / 12, rel=1e-4)
    assert terse["cost_per_accepted"] == pytest.approx(tokens["terse"] / 1e6 / 6, rel=1e-4)
    row = comparison(result, "prompt_variant")
    assert (row["a"], row["b"], row["better"]) == ("default", "terse", "default") and row["p_value"] < 0.05
