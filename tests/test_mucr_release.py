"""MuCR items end to end, without Label Studio: cue drafts and their checks, the `--format mucr` release (fields,
composites, seeded choice sets, small groups, card, verify, ingest round trip), Exp scored per part (hand-made judge
replies, the peer MuCR records as references) and the whole eval against a loopback judge server process."""

from __future__ import annotations

import json
import re
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from cftools.generate.llm_task import LLMRun
from cftools.checks import ItemView
from cftools.evaluate.run import EvalOptions, run_eval
from cftools.images import read_image_file, register_image
from cftools.kinds import get_kind
from cftools.kinds.mucr.annotate import select_units
from cftools.kinds.mucr.checks import (check_cue_in_false_cues, check_cue_not_visible, check_explanation_form,
                                       check_false_cue_duplicate)
from cftools.kinds.mucr.cues import CUES_SCHEMA, cues_from_reply, draft_cues
from cftools.llm.structured import ReplyError
from cftools.kinds.mucr.explanations import (aggregate_parts, exp_score, judge_prompts, judge_result, missing_parts,
                                             parse_judge_parts, split_parts)
from cftools.kinds.mucr.images import start_new_round
from cftools.kinds.mucr.release import SCHEMAS
from cftools.llm import make_backend
from cftools.models import ACCEPTED, DRAFT, Item
from cftools.release.layout import load_records
from cftools.release.verify import verify_release
from cftools.workspace import init_workspace
from llm_stub import StubServer
from loopback import running_server

PEER = Path("/work/shared/data/peer/MuCR/figure_transcriptions.jsonl")
HERE = Path(__file__).resolve().parent
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black", "grey", "pink"]


def peer_records() -> list[dict]:
    if not PEER.is_file():
        pytest.skip(f"peer MuCR records not found at {PEER}")
    return [json.loads(line) for line in PEER.read_text(encoding="utf-8").splitlines() if line.strip()]


def view(data: dict) -> ItemView:
    return ItemView(id=1, key="k", kind="mucr", group="g", status="draft", question="q", answer=None, data=data)


# ---------------------------------------------------------------- Exp, as the paper defines it


def test_exp_arithmetic_on_hand_made_judge_replies():
    replies = ["S1: 8\nS2: 6\nS3: 4", "S1: 10, S2: 2, S3: 6/10", "s3 = 5\nS2: 4\nS1: 6"]
    per_reference = [parse_judge_parts(r) for r in replies]
    assert per_reference == [{"S1": 8, "S2": 6, "S3": 4}, {"S1": 10, "S2": 2, "S3": 6}, {"S1": 6, "S2": 4, "S3": 5}]
    best = aggregate_parts(per_reference, "best-match")
    assert best == {"S1": 10, "S2": 6, "S3": 6}
    assert exp_score(best) == pytest.approx(0.25 * 10 + 0.25 * 6 + 0.5 * 6)  # 8.0
    mean = aggregate_parts(per_reference, "mean")
    assert mean == pytest.approx({"S1": 8, "S2": 4, "S3": 5})
    assert exp_score(mean) == pytest.approx(0.25 * 8 + 0.25 * 4 + 0.5 * 5)  # 5.5
    # the weights go to the PARTS: a perfect causal link alone is worth half
    assert exp_score({"S1": 0, "S2": 0, "S3": 10}) == pytest.approx(5.0)
    result = judge_result(replies, "mean")
    assert result["parts"] == pytest.approx({"S1": 8, "S2": 4, "S3": 5}) and result["exp_score"] == pytest.approx(5.5)
    assert result["similarities"] == [[8, 6, 4], [10, 2, 6], [6, 4, 5]]
    assert judge_result(["S1: 8, S2: 6"], "best-match")["similarities"] is None  # a part missing: not judged
    assert parse_judge_parts("S1: 11, S2: 1, S3: 1") is None


def test_the_peer_mucr_records_load_as_exp_references():
    from cftools.evaluate.questions import PromptTemplates

    records = peer_records()
    assert len(records) == 4
    template = PromptTemplates().named("mucr_judge")
    for record in records:
        for reference in record["causal_reason"]:
            parts = split_parts(reference)
            assert all(parts.values()) and missing_parts(reference) == []
            assert parts["S1"].startswith("In the first image") and parts["S2"].startswith("In the second image")
        candidate = record["causal_reason"][0]
        prompts = judge_prompts(template, candidate, record["causal_reason"])
        assert len(prompts) == 3
        # the judge sees each part of the reference beside the same part of the candidate
        assert f"S3 (causal link): {split_parts(record['causal_reason'][1])['S3']}" in prompts[1]
        assert f"S1 (cause image): {split_parts(candidate)['S1']}" in prompts[2]
    # the stray leading apostrophe of panel 2, A2 does not hide its first part
    assert split_parts(records[1]["causal_reason"][1])["S1"].startswith("In the first image, a man in a gray hoodie")


def test_mucr_summary_reports_parts_and_breakdowns():
    kind = get_kind("mucr").hooks.evaluate
    q = lambda ok: {"correct": ok, "unknown": False}  # noqa: E731
    outcomes = [
        {"id": "a", "kind": "mucr", "facets": {"category": "human", "style": "photograph", "input": "split"},
         "c2e": q(True), "e2c": q(True), "cue": q(True),
         "exp": {"parts": {"S1": 8, "S2": 6, "S3": 4}, "aggregate": "best-match"}},
        {"id": "b", "kind": "mucr", "facets": {"category": "animal", "style": "comic", "input": "split"},
         "c2e": q(False), "e2c": q(True), "cue": q(False),
         "exp": {"parts": {"S1": 2, "S2": 4, "S3": 10}, "aggregate": "best-match"}},
    ]
    s = kind.summarize(outcomes)
    assert s["exp_parts"]["S1"]["value"] == pytest.approx(5.0) and s["exp_parts"]["S3"]["value"] == pytest.approx(7.0)
    assert s["exp"]["value"] == pytest.approx(((2 + 1.5 + 2) + (0.5 + 1 + 5)) / 2)
    assert s["by"]["category"]["human"]["c2e"]["value"] == 1.0 and s["by"]["style"]["comic"]["c2e"]["value"] == 0.0
    assert s["by"]["style"]["comic"]["c2e"]["low"] is not None  # every score has its interval
    from cftools.evaluate.report import ScoreFormat, points, pct, rate

    table = kind.report_table(s, ScoreFormat(pct=pct, rate=rate, points=points))
    labels = [row[0] for row in table.rows]
    assert "C2E · category human" in labels and "Cue · style comic" in labels
    assert any(label.startswith("Exp S2 (effect image") for label in labels)
    assert "best-matching reference" in table.title and "split input" in table.title


# ---------------------------------------------------------------- cues


def test_cue_drafts_are_read_from_their_schema():
    reply = CUES_SCHEMA.read('{"cue": " catch cold.", "false_cues": ["wet", "rain", "run"], "explanation": "In the first '
                             'image, a man runs. In the second image, he is ill. The causal link is the rain."}')
    parsed = cues_from_reply(reply)
    assert parsed["cue"] == "catch cold" and parsed["false_cues"] == ["wet", "rain", "run"]
    assert parsed["explanation_draft"].startswith("In the first image")
    with pytest.raises(ReplyError, match="false_cues: List should have at least 3 items"):
        CUES_SCHEMA.read('{"cue": "x", "false_cues": ["wet"], "explanation": "y"}')


@pytest.mark.parametrize("data, check, reason", [
    ({"cue": "Rain", "false_cues": ["wet", "rain ", "run"]}, check_cue_in_false_cues, "also a false cue"),
    ({"cue": "cold", "false_cues": ["wet", "Wet", "run"]}, check_false_cue_duplicate, "are the same"),
    ({"cue": "cold", "false_cues": ["wet", "run"]}, check_false_cue_duplicate, "2 false cues"),
    ({"cue": "lightning", "context": {"cause_description": "a man runs in the rain",
                                      "effect_description": "the man sneezes"}}, check_cue_not_visible,
     "names nothing"),
    ({"explanation_draft": "In the first image, a man runs. In the second image, he sneezes."},
     check_explanation_form, "lacks the causal link part"),
])
def test_cue_checks_flag_with_reasons(data, check, reason):
    flag = check(view(data))
    assert flag is not None and reason in flag.reason


def test_cue_checks_leave_a_good_draft_alone():
    data = {"cue": "catch cold", "false_cues": ["wet", "bench", "hoodie"],
            "context": {"cause_description": "a man in a hoodie runs in the rain",
                        "effect_description": "the man has caught a cold on a bench"},
            "explanation_draft": "In the first image, a man runs in the rain. In the second image, he is ill. "
                                 "The causal link is that he caught a cold."}
    for check in (check_cue_in_false_cues, check_false_cue_duplicate, check_cue_not_visible, check_explanation_form):
        assert check(view(data)) is None


def test_none_usable_feeds_a_new_round_and_a_new_select_task():
    data = {"candidates": {"photograph": {"0": {}}, "comic": {"0": {}}},
            "selection": {"photograph": {"none_usable": True}, "comic": {"cause": 0, "effect": 0}}}
    assert select_units(data) == []  # both styles decided
    again = start_new_round(data, "photograph")
    again["candidates"]["photograph"] = {"0": {}}  # generate images --regenerate-rejected made new ones
    assert select_units(again) == ["photograph@1"]


# ---------------------------------------------------------------- a store of selected pairs


def cue_reply(request: dict, text: str) -> str:
    assert request["response_format"]["json_schema"]["name"] == "mucr_cues"
    return json.dumps({"cue": "rain", "false_cues": ["bench", "hoodie", "park"],
                       "explanation": "In the first image, a person runs in the rain. In the second image, the person "
                                      "is ill. The causal link is that the rain caused a cold."})


@pytest.fixture
def cue_stub():
    server = StubServer(delay=0.0, reply=cue_reply).start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def image_ref(store, folder: Path, name: str, colour: str, size: int) -> str:
    path = folder / name
    PIL.Image.new("RGB", (size, size), colour).save(path)
    image = read_image_file(path)
    with store.write() as session:
        register_image(store, session, image)
    return f"sha256:{image.sha256}"


def selected_pairs(workspace, folder: Path, groups: dict[str, int], status: str = ACCEPTED,
                   style: str = "photograph") -> list[str]:
    """Selected pairs (items PAIR@style with both images, cues, three explanations) in GROUP -> count."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = []
    n = 0
    for group, count in groups.items():
        for k in range(count):
            n += 1
            cause = image_ref(workspace.store, folder, f"c{n}.png", COLOURS[n % 10], 16 + n)
            effect = image_ref(workspace.store, folder, f"e{n}.png", COLOURS[(n + 3) % 10], 40 + n)
            key = f"captions:x:{group}-{k}@{style}"
            data = {"cause_image": cause, "effect_image": effect, "cause_caption": f"person {n} runs in the rain",
                    "effect_caption": f"person {n} has a cold", "category": "human" if k % 2 else "animal",
                    "link_id": group, "style": style, "cue": "catch cold", "false_cues": ["wet", "rain", "run"],
                    # three people's own words (near copies of each other would not count: issue 32)
                    "explanations": [f"In the first image, person {n} runs. In the second image, person {n} is "
                                     f"ill. The causal link is the rain ({a})." for a in (
                                         "being soaked gave them a chill", "cold water on the skin for an hour",
                                         "no umbrella, no coat, wet clothes all the way home")],
                    "selection": {"cause": 1, "effect": 2, "candidates": 4, "rounds": 1,
                                  "cause_provenance": {"backend": "diffusers", "model": "tiny", "seed": 11 + n},
                                  "effect_provenance": {"backend": "diffusers", "model": "tiny", "seed": 11 + n}}}
            with workspace.store.write() as session:
                session.add(Item(key=key, kind="mucr", group=group, question="runs in the rain -> a cold",
                                 status=status, data=data))
            keys.append(key)
    return keys


def export_mucr(run_cli, *args):  # noqa: ANN001, ANN201
    return run_cli("export", "mc", "--version", "1", "--licence", "CC0-1.0", "--format", "mucr", "--json", *args)


def test_generate_cues_drafts_each_selected_pair_once(workspace, run_cli, cue_stub, tmp_path):
    selected_pairs(workspace, tmp_path / "img", {"g": 2}, status=DRAFT)
    with workspace.store.write() as session:  # pairs straight from the select task: no cue yet
        for item in session.execute(select(Item)).scalars():
            item.data = {k: v for k, v in item.data.items() if k not in ("cue", "false_cues", "explanations")}
            item.data["context"] = {"cause_description": "a person in a hoodie runs in the rain in a park",
                                    "effect_description": "the person sits on a bench with a cold"}
            session.add(item)
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": cue_stub.base_url})
    report = draft_cues(workspace.store, backend, run=LLMRun(quiet=True))
    assert report.items_created == 2
    assert draft_cues(workspace.store, backend, run=LLMRun(quiet=True)).selected == 0  # a rerun has nothing to do
    with workspace.store.session() as session:
        items = session.execute(select(Item)).scalars().all()
    assert {i.data["cue"] for i in items} == {"rain"} and items[0].data["false_cues"] == ["bench", "hoodie", "park"]
    assert items[0].data["cue_generation"]["generation_id"]
    assert run_cli("check", "--no-embeddings", "--only", "cue_not_visible", "--only", "explanation_form",
                   "--only", "false_cue_duplicate", "--only", "cue_in_false_cues").exit_code == 0


# ---------------------------------------------------------------- the release


def test_mucr_release_fields_composites_choices_card_verify_and_round_trip(workspace, run_cli, tmp_path):
    selected_pairs(workspace, tmp_path / "img", {"rain": 4, "sun": 4})
    out = export_mucr(run_cli)
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    rows = [json.loads(line) for line in (release / "mc.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(list(r) == list(SCHEMAS["readme-2024-08-31"]) for r in rows)
    first = rows[0]
    assert len(first["false_cue"]) == 3 and len(first["causal_reason"]) == 3 and first["label"] in ("human", "animal")
    # link_id as MuCR's README writes it: one string "[a,b,c]" naming the group's other pairs
    linked = first["link_id"][1:-1].split(",")
    assert first["link_id"] == "[" + ",".join(linked) + "]" and len(linked) == 3 and first["id"] not in linked
    assert (release / first["image_0"]).is_file() and (release / first["image_1"]).is_file()
    # composites (form 1) beside the split images (form 3); the choice sets name the group's other pairs
    choices = {c["id"]: c for c in map(json.loads, (release / "choices.jsonl").read_text().splitlines())}
    one = choices[first["id"]]
    assert one["seed"] == 0 and len(one["c2e"]["choices"]) == 4
    assert one["c2e"]["choices"][one["c2e"]["answer"]] == first["image_1"]
    group_effects = {r["image_1"] for r in rows if r["id"] in linked} | {first["image_1"]}
    assert set(one["c2e"]["choices"]) == group_effects
    assert sorted(one["cue"]["choices"]) == sorted(["catch cold", "wet", "rain", "run"])
    with PIL.Image.open(release / one["composites"]["c2e"]) as sheet:
        assert sheet.size == (5 * 256, 256 + 24)
    card = (release / "README.md").read_text()
    assert "## MuCR" in card and "| human | photograph | 4 |" in card and "seed 0" in card
    assert "| diffusers | tiny |" in card and "the pair's category (the README does not define label)" in card
    assert "`readme-2024-08-31` schema" in card and '| `link_id` | the ids of the other pairs' in card
    assert verify_release(release).ok
    # the same seed gives the same bytes; v2 has its own fields
    again = export_mucr(run_cli, "--out", tmp_path / "again")
    assert (Path(json.loads(again.output)["path"]) / "choices.jsonl").read_bytes() == \
        (release / "choices.jsonl").read_bytes()
    variant = export_mucr(run_cli, "--mucr-schema", "cause-effect", "--out", tmp_path / "v2")
    row = json.loads((Path(json.loads(variant.output)["path"]) / "mc.jsonl").read_text().splitlines()[0])
    assert list(row) == list(SCHEMAS["cause-effect"]) and row["cause"].startswith("person")
    earlier = export_mucr(run_cli, "--mucr-schema", "readme-2024-08-14", "--out", tmp_path / "early")
    row = json.loads((Path(json.loads(earlier.output)["path"]) / "mc.jsonl").read_text().splitlines()[0])
    assert list(row) == list(SCHEMAS["readme-2024-08-14"]) and "image_0" not in row
    old_name = export_mucr(run_cli, "--mucr-schema", "v1", "--out", tmp_path / "v1")  # the old name still works
    assert (Path(json.loads(old_name.output)["path"]) / "mc.jsonl").read_bytes() == (release / "mc.jsonl").read_bytes()
    other_seed = export_mucr(run_cli, "--mucr-seed", "7", "--out", tmp_path / "s7")
    assert (Path(json.loads(other_seed.output)["path"]) / "choices.jsonl").read_bytes() != \
        (release / "choices.jsonl").read_bytes()
    # `ingest release` reads it back; a re-export of the copy names the same images
    other = init_workspace(tmp_path / "other")
    try:
        assert run_cli("--workspace", other.root, "ingest", "release", release).exit_code == 0
        with other.store.session() as session:
            back = {i.key: i for i in session.execute(select(Item)).scalars()}
        assert len(back) == 8 and all(i.status == ACCEPTED for i in back.values())
        item = back[first["id"]]
        assert item.data["cause_image"] == "sha256:" + Path(first["image_0"]).stem
        assert item.data["explanations"] == first["causal_reason"]
    finally:
        other.close()


def test_small_groups_are_refused_by_name_unless_allowed(workspace, run_cli, tmp_path):
    selected_pairs(workspace, tmp_path / "img", {"rain": 4, "tiny": 2})
    before = sorted(p.name for p in (workspace.root / "releases").glob("*")) if (workspace.root / "releases").exists() \
        else []
    refused = export_mucr(run_cli)
    assert refused.exit_code != 0 and "too small: tiny (photograph): 2 pairs" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    after = sorted(p.name for p in (workspace.root / "releases").glob("*")) if (workspace.root / "releases").exists() \
        else []
    assert after == before  # nothing half-written
    out = export_mucr(run_cli, "--allow-small-groups")
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    choices = [json.loads(line) for line in (release / "choices.jsonl").read_text().splitlines()]
    assert sorted(len(c["c2e"]["choices"]) for c in choices) == [2, 2, 4, 4, 4, 4]
    assert "fewer than 4 choices" in (release / "README.md").read_text()


# ---------------------------------------------------------------- eval with a judge server process


@pytest.fixture
def judge_server():
    with running_server("judge_server.py", "--scores", "8,6,4") as url:
        yield url


def test_eval_scores_c2e_e2c_cue_and_exp_against_a_judge_process(workspace, run_cli, tmp_path, judge_server,
                                                                 monkeypatch):
    selected_pairs(workspace, tmp_path / "img", {"rain": 4})
    release = Path(json.loads(export_mucr(run_cli).output)["path"])
    monkeypatch.setenv("JUDGE_KEY", "sk-loopback")
    workspace.config["llm"] = {"base_url": judge_server, "api_key_env": "JUDGE_KEY"}
    result = run_eval(release, "blind:openai:stub",
                      options=EvalOptions(judge="openai:judge", out_dir=tmp_path / "split",
                                          kind_options={"mucr_input": "split"}, max_new_tokens=32), workspace=workspace)
    section = result.summary["mucr"]
    assert section["c2e"]["n"] == 4 and section["cue"]["n"] == 4
    first_cue = {r["id"]: r for r in load_records(release)}
    expected_cue = sum(r["data"]["cue_choices"][0] == "catch cold" for r in first_cue.values()) / 4
    assert section["cue"]["value"] == pytest.approx(expected_cue)
    assert section["exp_parts"]["S1"]["value"] == pytest.approx(8.0)
    assert section["exp_parts"]["S2"]["value"] == pytest.approx(6.0)
    assert section["exp_parts"]["S3"]["value"] == pytest.approx(4.0)
    assert section["exp"]["value"] == pytest.approx(0.25 * 8 + 0.25 * 6 + 0.5 * 4)
    exp_line = next(p for p in result.predictions if p["which"] == "exp")
    assert exp_line["similarities"] == [[8.0, 6.0, 4.0]] * 3 and exp_line["aggregate"] == "best-match"
    assert json.loads(exp_line["judge_replies"][0]) == {"S1": 8, "S2": 6, "S3": 4}  # the judge replied in its schema
    report = (tmp_path / "split" / "report.md").read_text()
    assert "split input" in report and "best-matching reference" in report and "Exp S3 (causal link" in report
    # form 1 through the command line: the report says which
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace('[llm]\n', f'[llm]\nbase_url = "{judge_server}"\n'
                                                            'api_key_env = "JUDGE_KEY"\n', 1))
    out = run_cli("eval", release, "--model", "blind:openai:stub", "--judge", "openai:judge", "--mucr-input",
                  "composite", "--judge-aggregate", "mean", "--out", tmp_path / "composite", "--quiet")
    assert out.exit_code == 0, out.output
    composite = json.loads((tmp_path / "composite" / "config.json").read_text())
    assert composite["kind_options"] == {"mucr_input": "composite"} and composite["judge_aggregate"] == "mean"
    assert "composite input" in (tmp_path / "composite" / "report.md").read_text()
    # the report says whether the run used the paper's setting; left to its default, a run uses it
    assert ("mucr settings: mucr_input composite in the paper, split in this run (not the paper's)"
            in report)
    out = run_cli("eval", release, "--model", "blind:openai:stub", "--judge", "openai:judge", "--out",
                  tmp_path / "default", "--quiet")
    assert out.exit_code == 0, out.output
    default = (tmp_path / "default" / "report.md").read_text()
    assert "composite input" in default
    assert "mucr settings: mucr_input composite in the paper, composite in this run (as in the paper)" in default


def test_from_ranking_selects_the_best_ranked_candidates_for_a_demo(workspace, cue_stub, tmp_path):
    from cftools.kinds.mucr.cues import select_from_ranking

    refs = [image_ref(workspace.store, tmp_path, f"i{n}.png", COLOURS[n], 10 + n) for n in range(4)]
    candidates = {"0": {"cause": refs[0], "effect": refs[1]}, "1": {"cause": refs[2], "effect": refs[3]}}
    with workspace.store.write() as session:
        session.add(Item(key="captions:x:p", kind="mucr", group="g", question="q", status=DRAFT,
                         data={"cause_caption": "rain", "effect_caption": "cold", "candidates": {"comic": candidates},
                               "candidate_checks": {"comic": [{"k": 1, "score": 0.9, "flags": []},
                                                              {"k": 0, "score": 0.1, "flags": []}]}}))
    assert select_from_ranking(workspace.store) == 1
    assert select_from_ranking(workspace.store) == 0  # the style is chosen now
    with workspace.store.session() as session:
        made = session.execute(select(Item).where(Item.key == "captions:x:p@comic")).scalar_one()
    assert (made.data["cause_image"], made.data["effect_image"]) == (refs[2], refs[3])
    assert made.data["selection"]["by"] == "ranking" and made.status == DRAFT


def test_from_ranking_with_a_prompt_variant_is_refused_before_anything_is_selected(workspace, run_cli, tmp_path):
    """Before: the ranking's selections were written, then the prompt variant was refused."""
    refs = [image_ref(workspace.store, tmp_path, f"i{n}.png", COLOURS[n], 10 + n) for n in range(2)]
    with workspace.store.write() as session:
        session.add(Item(key="captions:x:p", kind="mucr", group="g", question="q", status=DRAFT,
                         data={"cause_caption": "rain", "effect_caption": "cold",
                               "candidates": {"comic": {"0": {"cause": refs[0], "effect": refs[1]}}},
                               "candidate_checks": {"comic": [{"k": 0, "score": 0.9, "flags": []}]}}))
    result = run_cli("-w", workspace.root, "generate", "cues", "--from-ranking", "--prompt-variant", "terse",
                     "--quiet")
    assert result.exit_code != 0 and "does not run prompt variants" in result.output
    with workspace.store.session() as session:
        keys = session.execute(select(Item.key)).scalars().all()
        pair = session.execute(select(Item).where(Item.key == "captions:x:p")).scalar_one()
    assert keys == ["captions:x:p"] and "selection" not in pair.data


# ---------------------------------------------------------------- Exp parts as the published explanations write them

MODEL_SHAPED = [  # (explanation, its S1, S2, S3 openings)
    ("The first image shows a man running in the rain. The second image depicts the same man sick on a bench. "
     "The causal link is that the rain made him ill.", "The first image shows", "The second image depicts",
     "The causal link is"),
    ("The first image depicts a woman in a green raincoat running in the rain. In the second image, she lies on a "
     "couch. Therefore, getting wet caused her cold.", "The first image depicts", "In the second image",
     "Therefore"),
    ("Image 1 shows a man running in heavy rain. Image 2 shows him sneezing. This suggests the rain caused a cold.",
     "Image 1 shows", "Image 2 shows", "This suggests"),
    ("In the left image a man runs in the rain; in the right image he is ill. The connection is the rain.",
     "In the left image", "in the right image", "The connection is"),
    ("In the first image, a man is running. In the second image, the man from the first image is ill. The causal "
     "reasoning is the rain.", "In the first image", "In the second image, the man from the first image",
     "The causal reasoning"),
]


@pytest.mark.parametrize("text, s1, s2, s3", MODEL_SHAPED, ids=range(len(MODEL_SHAPED)))
def test_model_shaped_explanations_keep_all_three_parts(text, s1, s2, s3):
    parts = split_parts(text)
    assert parts["S1"].startswith(s1) and parts["S2"].startswith(s2) and parts["S3"].startswith(s3)
    assert missing_parts(text) == []
    assert check_explanation_form(view({"explanation_draft": text})) is None


def test_published_explanations_rewritten_the_way_models_open_them_keep_their_cause_part():
    """Each published reference with its opening as a model writes it ("The first image shows ..."): the cause part
    is the published one's, the judge prompt shows it, and explanation_form flags none of the published records."""
    from cftools.evaluate.questions import PromptTemplates

    template = PromptTemplates().named("mucr_judge")
    for record in peer_records():
        assert check_explanation_form(view({"explanations": record["causal_reason"]})) is None
        for reference in record["causal_reason"]:
            published = split_parts(reference)
            for opening in ("The first image shows", "The first image depicts"):
                variant = re.sub(r"^'?In the first image, ", opening + " ", reference)
                assert variant.startswith(opening), variant
                parts = split_parts(variant)
                assert parts["S1"].startswith(opening) and parts["S2"] == published["S2"]
                assert parts["S3"] == published["S3"] and missing_parts(variant) == []
                prompt = judge_prompts(template, variant, [reference])[0]
                assert "(missing)" not in prompt and f"S1 (cause image): {parts['S1']}" in prompt


@pytest.mark.parametrize("form", ["split", "composite"])
def test_choice_prompts_use_the_right_article(form):
    from cftools.evaluate.questions import PromptTemplates

    template = PromptTemplates().named("mucr_choice")
    c2e = template.render(task="c2e", letters=["A", "B"], form=form)
    e2c = template.render(task="e2c", letters=["A", "B"], form=form)
    assert "shows a cause." in c2e and "shows an effect." in e2c and " a effect" not in e2c
