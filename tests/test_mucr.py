"""MuCR generation: caption pairs, contextual descriptions (against a loopback LLM server), their checks, and
candidate images from the embedded tiny pipeline, resumed after a real SIGKILL."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cftools.generate.llm_task import LLMRun
from cftools.kinds.mucr.model import CATEGORIES
from cftools.checks import ItemView
from cftools.errors import InputError
from cftools.images import sha256_file
from cftools.kinds import get_kind
from cftools.kinds.mucr.checks import (PromptLength, check_context_inconsistent, check_context_missing_change,
                                       estimated_clip_tokens)
from cftools.kinds.mucr.generate import (CONTEXT_SCHEMA, captions_schema, context_from_reply, draft_captions,
                                         write_context)
from cftools.llm.structured import ReplyError
from cftools.kinds.mucr.ingest import ingest_captions
from cftools.llm import make_backend
from cftools.models import Generation, Image, Item
from killed_runs import held_after, kill_after_progress
from llm_stub import StubServer
from test_imagegen import images_api  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "mucr" / "captions.csv"


def view(data: dict) -> ItemView:
    return ItemView(id=1, key="k", kind="mucr", group="g", status="draft", question="q", answer=None, data=data)


def with_context(cause: str, effect: str, effect_caption: str = "") -> ItemView:
    return view({"effect_caption": effect_caption, "context": {"cause_description": cause,
                                                               "effect_description": effect}})


def context_reply(request: dict, text: str) -> str:
    assert request["response_format"]["json_schema"]["name"] == "mucr_context"  # a 500 if it did not arrive
    cause = text.split("Cause caption:")[-1].split("\n")[0].strip()
    effect = text.split("Effect caption:")[-1].split("\n")[0].strip()
    return json.dumps({"shared": "A tall woman in a red raincoat and black boots, in a city park, grey light.",
                       "cause": f"{cause}.", "effect": f"{effect}, tired eyes."})


@pytest.fixture
def context_stub():
    server = StubServer(delay=0.0, reply=context_reply).start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def stub_llm(server):
    return make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url,
                         "backoff_initial": 0.01, "backoff_max": 0.05})


# ---------------------------------------------------------------- caption pairs


def test_the_example_caption_pairs_ingest_once(workspace, run_cli):
    out = run_cli("ingest", "captions", EXAMPLE, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["items_added"] == 8
    again = run_cli("ingest", "captions", EXAMPLE, "--json")
    assert json.loads(again.output)["items_added"] == 0
    with workspace.store.session() as session:
        items = session.execute(select(Item).where(Item.kind == "mucr")).scalars().all()
    assert sorted({i.group for i in items}) == ["rain-cold", "sun-bloom"]
    first = next(i for i in items if i.key.endswith(":rain-man"))
    assert first.data["cause_caption"].startswith("a man runs") and first.data["category"] == "human"
    get_kind("mucr").hooks.ingest.validate(first.data, first.key)  # the stored data fits the kind's model


@pytest.mark.parametrize("row, reason", [
    ({"category": "robot"}, "category 'robot' is not one of"),
    ({"style": "oil painting"}, "style 'oil painting' is not one of"),
    ({"effect": "a man runs"}, "the same"),
    ({"group": ""}, "empty or missing field(s) group"),
])
def test_a_bad_caption_record_names_file_and_line_and_changes_nothing(workspace, tmp_path, row, reason):
    path = tmp_path / "pairs.csv"
    good = {"id": "a", "group": "g", "category": "human", "style": "", "cause": "a man runs",
            "effect": "the man rests"}
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(good))
        writer.writeheader()
        writer.writerow(good)
        writer.writerow({**good, "id": "b", **row})
    with pytest.raises(InputError) as err:
        ingest_captions(workspace.store, path)
    assert str(path) in str(err.value) and "line 3" in str(err.value) and reason in str(err.value)
    with workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(Item)).scalar_one() == 0
    report = ingest_captions(workspace.store, path, skip_bad=True)
    assert report.items_added == 1 and len(report.bad) == 1


def test_caption_pairs_drafted_from_seeds_form_groups(workspace, tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("speeding -> pulled over\n\nrain -> catch a cold\n")
    replies = json.dumps({"pairs": [
        {"cause": "a man drives fast on a highway", "effect": "a police car stops him", "category": "human"},
        {"cause": "a fox runs into a road", "effect": "the fox hides", "category": "animal"}]})
    server = StubServer(delay=0.0, reply=lambda request, text: replies).start_in_thread()
    try:
        report = draft_captions(workspace.store, stub_llm(server), seeds, run=LLMRun(quiet=True), per_group=2)
        assert report.selected == 2 and report.items_created == 4 and server.requests == 2
        again = draft_captions(workspace.store, stub_llm(server), seeds, run=LLMRun(quiet=True), per_group=2)
        assert again.selected == 0 and server.requests == 2  # both groups are there
        schema = server.received[0]["body"]["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["pairs"]["items"]["properties"]["category"]["enum"] == list(CATEGORIES)
    finally:
        server.shutdown()
        server.server_close()
    with workspace.store.session() as session:
        items = session.execute(select(Item).where(Item.kind == "mucr")).scalars().all()
    assert len({i.group for i in items}) == 2 and all(i.origin == "generated" and i.generation_id for i in items)


def test_a_seed_without_an_arrow_names_its_line(workspace, tmp_path, context_stub):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("speeding -> pulled over\nthe weather\n")
    with pytest.raises(InputError, match="line 2"):
        draft_captions(workspace.store, stub_llm(context_stub), seeds, run=LLMRun(quiet=True))


@pytest.mark.parametrize("reply, reason", [
    ('{"pairs": []}', "pairs: List should have at least 1 item"),
    ('{"pairs": [{"cause": "a", "effect": "b", "category": "robot"}]}', "pairs.0.category"),
    ('I would rather not.', "not a mucr_caption_pairs reply"),
])
def test_a_caption_reply_outside_its_schema_is_refused_with_the_reason(reply, reason):
    with pytest.raises(ReplyError, match=re.escape(reason)):
        captions_schema(2).read(reply)


def test_a_context_reply_is_read_from_its_schema():
    reply = CONTEXT_SCHEMA.read('```json\n{"shared": "A man in a grey hoodie in a park.", "cause": "He runs in the '
                                'rain.", "effect": "He sits with a cold."}\n```')
    parsed = context_from_reply(reply)
    assert parsed["cause_description"] == "A man in a grey hoodie in a park. He runs in the rain."
    assert parsed["effect_description"] == "A man in a grey hoodie in a park. He sits with a cold."
    with pytest.raises(ReplyError, match="effect: Field required"):
        CONTEXT_SCHEMA.read('{"shared": "x", "cause": "he runs"}')


def test_context_for_every_pair_once_with_provenance(workspace, run_cli, context_stub):
    run_cli("ingest", "captions", EXAMPLE)
    report = write_context(workspace.store, stub_llm(context_stub), run=LLMRun(quiet=True), limit=3)
    assert report.items_created == 3 and context_stub.requests == 3
    rest = write_context(workspace.store, stub_llm(context_stub), run=LLMRun(quiet=True))
    assert rest.selected == 5 and context_stub.requests == 8
    assert write_context(workspace.store, stub_llm(context_stub), run=LLMRun(quiet=True)).selected == 0
    with workspace.store.session() as session:
        items = session.execute(select(Item).where(Item.kind == "mucr")).scalars().all()
        gens = session.execute(select(Generation).where(Generation.generator == "context")).scalars().all()
    assert len(gens) == 8 and {g.template_name for g in gens} == {"mucr/context.j2"}
    for item in items:
        context = item.data["context"]
        assert context["cause_description"].startswith("A tall woman in a red raincoat")
        assert context["generation_id"] in {g.id for g in gens}


# ---------------------------------------------------------------- checks


@pytest.mark.parametrize("cause, effect", [
    ("A man in a red jacket in a park.", "A man in a blue jacket in a park."),  # colour changed
    ("A woman in a yellow hat in a kitchen.", "A woman in a kitchen."),  # garment and colour gone
    ("An old man walks his dog on a beach.", "An old man sits on a beach."),  # the dog is gone
    ("A girl in a garden.", "A girl in a classroom."),  # the place changed
    ("A boy in green boots on a street.", "A girl in green boots on a street."),  # the person changed
])
def test_context_inconsistent_flags_drift(cause, effect):
    flag = check_context_inconsistent(with_context(cause, effect))
    assert flag is not None and flag.code == "context_inconsistent" and flag.reason


@pytest.mark.parametrize("cause, effect, caption", [
    ("A man in a red jacket in a park, running.", "A man in a red jacket in a park, sitting, tired.", ""),
    ("A woman in a yellow hat in a kitchen.", "The woman in the yellow hat in the kitchen smiles.", ""),
    ("A dog in a garden.", "The dog sleeps in the garden.", ""),
    ("Green tomatoes on a vine.", "Red tomatoes on a vine.", "the tomatoes are red and ripe"),  # the change itself
    ("A cat on a sofa.", "The same cat on the sofa, its fur wet.", ""),
])
def test_context_inconsistent_leaves_consistent_pairs(cause, effect, caption):
    assert check_context_inconsistent(with_context(cause, effect, caption)) is None


def test_context_missing_change():
    flagged = with_context("A man runs in the rain.", "A man stands in a park.", "the man sits with a cold")
    assert check_context_missing_change(flagged).code == "context_missing_change"
    fine = with_context("A man runs in the rain.", "The man sits on a bench with a cold.", "the man sits with a cold")
    assert check_context_missing_change(fine) is None


def test_prompt_truncated_estimates_or_counts_with_the_pipelines_tokenizer(tmp_path):
    long = "a very long description " * 30
    item = with_context(long, "short")
    estimate = PromptLength()
    flag = estimate(item)
    assert flag.code == "prompt_truncated" and "estimated" in flag.reason
    assert estimate(with_context("short", "short")) is None
    assert estimated_clip_tokens("a red hat.") == 6

    from cftools.imagegen.tiny import embedded_pipeline_folder

    folder = embedded_pipeline_folder(tmp_path / "cache")
    counted = PromptLength()
    counted.configure({"images": {"model": str(folder)}})
    flag = counted(with_context("a red hat " * 20, "ok"))
    assert flag is not None and str(folder) in flag.reason and f"takes {counted.limit}" in flag.reason


# ---------------------------------------------------------------- candidate images


def drawable_workspace(workspace, run_cli, context_stub, limit=None):
    run_cli("ingest", "captions", EXAMPLE)
    write_context(workspace.store, stub_llm(context_stub), run=LLMRun(quiet=True), limit=limit)


def test_candidates_for_each_style_stored_by_sha256_and_checked(workspace, run_cli, context_stub, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("CFTOOLS_CACHE", str(tmp_path / "cache"))
    drawable_workspace(workspace, run_cli, context_stub, limit=2)
    out = run_cli("generate", "images", "--per-prompt", "2", "--styles", "photograph,comic", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["pairs"] == 2 and report["images_made"] == 16 and report["failures"] == []
    with workspace.store.session() as session:
        items = [i for i in session.execute(select(Item).where(Item.kind == "mucr")).scalars() if i.data.get("candidates")]
        images = {img.sha256: img for img in session.execute(select(Image)).scalars()}
    assert len(items) == 2
    for item in items:
        assert set(item.data["candidates"]) == {"photograph", "comic"}
        for style, candidates in item.data["candidates"].items():
            assert set(candidates) == {"0", "1"}
            for k, c in candidates.items():
                for side in ("cause", "effect"):
                    sha = c[side].removeprefix("sha256:")
                    assert sha256_file(Path(images[sha].path)) == sha
                    prov = c[f"{side}_provenance"]
                    assert prov["style"] == style and prov["candidate"] == int(k) and prov["seed"] is not None
                assert c["cause_provenance"]["seed"] == c["effect_provenance"]["seed"]  # the pair shares its seed
            ranked = item.data["candidate_checks"][style]
            assert sorted(r["k"] for r in ranked) == [0, 1]
    again = json.loads(run_cli("generate", "images", "--per-prompt", "2", "--styles", "photograph,comic",
                               "--json").output)
    assert again["images_made"] == 0 and again["candidates_kept"] == 8


def test_images_resume_after_sigkill_without_duplicates(workspace, run_cli, context_stub, tmp_path):
    drawable_workspace(workspace, run_cli, context_stub)
    db = workspace.root / "cftools.db"
    # held for good when it would store its second pair (tests/killed_runs.py): killed there, not raced
    command = held_after("cftools.kinds.mucr.images:record_style", 1, "--workspace", workspace.root, "generate",
                         "images", "--per-prompt", "3", "--styles", "photograph")
    left = kill_after_progress(command, db, "select count(*) from images", at_least=4)
    assert 4 <= left < 8 * 3 * 2
    out = run_cli("generate", "images", "--per-prompt", "3", "--styles", "photograph", "--json")
    assert out.exit_code == 0, out.output
    with workspace.store.session() as session:
        items = session.execute(select(Item).where(Item.kind == "mucr")).scalars().all()
        n_images = session.execute(select(func.count()).select_from(Image)).scalar_one()
    refs = [c[side] for i in items for c in i.data["candidates"]["photograph"].values() for side in ("cause", "effect")]
    assert all(set(i.data["candidates"]["photograph"]) == {"0", "1", "2"} for i in items)
    assert len(refs) == 48 and n_images == len(set(refs))
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchone()[0] == "ok"


def test_a_folder_that_is_not_a_pipeline_is_one_line(workspace, run_cli, context_stub, tmp_path):
    drawable_workspace(workspace, run_cli, context_stub, limit=1)
    (tmp_path / "notapipe").mkdir()
    out = run_cli("generate", "images", "--model", tmp_path / "notapipe")
    assert out.exit_code != 0 and "notapipe" in out.output and "Traceback" not in out.output


def test_an_identical_images_api_request_is_served_from_the_store(workspace, run_cli, monkeypatch, images_api):
    """Two pairs with the same descriptions: the second pair's requests are identical, so no call is made."""
    from test_imagegen import received, script

    run_cli("ingest", "captions", EXAMPLE)
    with workspace.store.write() as session:
        items = session.execute(select(Item).where(Item.kind == "mucr").order_by(Item.id).limit(2)).scalars().all()
        for item in items:
            item.data = {**item.data, "context": {"shared": "", "cause": "a red ball", "effect": "a flat ball",
                                                  "cause_description": "a red ball on grass",
                                                  "effect_description": "a flat red ball on grass"}}
            session.add(item)
    import tomlkit

    config = workspace.root / "cftools.toml"
    doc = tomlkit.parse(config.read_text())
    doc["images"].update({"backend": "openai", "model": "image-model-1", "base_url": f"{images_api}/v1",
                          "api_key_env": "MY_IMAGES_KEY"})
    config.write_text(tomlkit.dumps(doc))
    monkeypatch.setenv("MY_IMAGES_KEY", "sk-images-cache-test")
    script(images_api, [])
    out = run_cli("generate", "images", "--per-prompt", "2", "--styles", "photograph", "--size", "64x64", "--json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["pairs"] == 2 and report["images_made"] == 8 and report["failures"] == []
    assert len(received(images_api)) == 2  # cause and effect of the first pair; the second pair came from the cache
    with workspace.store.session() as session:
        first, second = [i.data["candidates"]["photograph"] for i in session.execute(
            select(Item).where(Item.id.in_([i.id for i in items])).order_by(Item.id)).scalars()]
    assert [(c["cause"], c["effect"]) for c in first.values()] == [(c["cause"], c["effect"]) for c in second.values()]
