"""MuCR's own tasks on a real Label Studio server (fixture `label_studio`): two annotators (and a third on
disagreement) pick the best candidate pair, three different people explain each selected pair, and the accepted
items make a MuCR release with exactly the v1 fields."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import PIL.Image
import pytest
from sqlalchemy import select

from cftools.generate.llm_task import LLMRun
from cftools.images import read_image_file, register_image
from cftools.kinds.mucr.cues import draft_cues
from cftools.kinds.mucr.release import SCHEMAS
from cftools.llm import make_backend
from cftools.models import ACCEPTED, AnnotationTask, IN_REVIEW, Item, Judgment
from cftools.workspace import load_workspace
from llm_stub import StubServer
from test_annotate import TOKEN_ENV, configure, pull_json

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black", "grey", "pink", "brown", "navy"]
# Each person's own words: near copies of each other or of the model's draft would not count (issue 32).
EXPLANATIONS = {
    "the man": "In the first image, the man runs through the rain. In the second image, he sits on a bench with a "
               "cold. The causal link is that the rain made him catch a cold.",
    "the woman": "In the first image, a woman is soaked by a downpour without an umbrella. In the second image, she "
                 "is wrapped in a blanket and sneezing. The causal link is being chilled and wet.",
    "the child": "In the first image, a child splashes home in a storm. In the second image, the kid lies ill on a "
                 "park bench. The causal link is that wet clothes all day gave the child a cold."}


@pytest.fixture
def mucr_ws(workspace, label_studio, monkeypatch):
    configure(workspace.root, label_studio.url, label_studio.media_root, f"m-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    monkeypatch.delenv("LABEL_STUDIO_URL", raising=False)
    ws = load_workspace(workspace.root)
    yield ws
    ws.close()


@pytest.fixture
def cue_stub():
    reply = json.dumps({"cue": "rain", "false_cues": ["bench", "blanket", "park"],
                        "explanation": "In the first image, a person runs through the rain. In the second image, the "
                                       "person sits on a bench with a cold. The causal link is the rain."})
    server = StubServer(delay=0.0, reply=lambda request, text: reply).start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


def caption_pairs(ws, folder: Path, n: int, per_style: int = 2) -> list[int]:
    """N caption pairs of one group with PER_STYLE photograph candidates each (real PNGs under the served root)."""
    folder.mkdir(parents=True)
    ids = []
    colour = 0
    for p in range(n):
        candidates, checks = {}, []
        for k in range(per_style):
            refs = {}
            for side in ("cause", "effect"):
                colour += 1
                path = folder / f"p{p}-{side}{k}.png"
                PIL.Image.new("RGB", (12 + colour, 12), COLOURS[colour % len(COLOURS)]).save(path)
                image = read_image_file(path)
                with ws.store.write() as session:
                    register_image(ws.store, session, image)
                refs[side] = f"sha256:{image.sha256}"
            candidates[str(k)] = {**refs, "cause_provenance": {"backend": "diffusers", "model": "tiny", "seed": k},
                                  "effect_provenance": {"backend": "diffusers", "model": "tiny", "seed": k}}
            checks.append({"k": k, "score": 0.9 - 0.1 * k, "flags": []})
        data = {"cause_caption": f"person {p} runs in the rain", "effect_caption": f"person {p} has a cold",
                "category": "human", "link_id": "rain",
                "context": {"cause_description": f"person {p} in a park runs through the rain",
                            "effect_description": f"person {p} sits on a park bench in a blanket with a cold"},
                "candidates": {"photograph": candidates}, "candidate_checks": {"photograph": checks}}
        with ws.store.write() as session:
            item = Item(key=f"captions:t:rain-{p}", kind="mucr", group="rain", question="rain -> cold",
                        status="checked", data=data)
            session.add(item)
            session.flush()
            ids.append(item.id)
    return ids


def tasks_of(store, task: str) -> dict[int, int]:
    with store.session() as session:
        rows = session.execute(select(AnnotationTask.item_id, AnnotationTask.ls_task_id, AnnotationTask.purpose)
                               .where(AnnotationTask.state != "deleted")).all()
    return {item_id: ls_id for item_id, ls_id, purpose in rows if purpose.split(":")[0] == task}


def pick(cause: int | None, effect: int | None = None) -> list[dict]:
    """A selection of candidates CAUSE and EFFECT: by the numbers the task shows them under (1 = the best ranked;
    here candidate k is ranked (k+1)-th)."""
    if cause is None:
        return [{"from_name": "none_usable", "to_name": "pairs", "type": "choices",
                 "value": {"choices": ["none usable"]}}]
    return [{"from_name": "best_cause", "to_name": "pairs", "type": "choices", "value": {"choices": [str(cause + 1)]}},
            {"from_name": "best_effect", "to_name": "pairs", "type": "choices", "value": {"choices": [str(effect + 1)]}}]


def explain(who: str, cue: str = "rain", false_cues: str = "umbrella\npuddle\ncloud") -> list[dict]:
    """One person's explanation and cue set: the false cues their own (the model's set retyped goes back, issue 43)."""
    text = lambda name, value: {"from_name": name, "to_name": "cause_image", "type": "textarea",  # noqa: E731
                                "value": {"text": [value]}}
    return [text("explanation", EXPLANATIONS[who]), text("cue", cue), text("false_cues", false_cues)]


def test_select_and_explain_end_in_a_mucr_release(label_studio, mucr_ws, run_cli, cue_stub, tmp_path, request):
    store = mucr_ws.store
    pair_ids = caption_pairs(mucr_ws, label_studio.media_root / request.node.name, 5)
    admin = label_studio.client()
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    third = label_studio.client(label_studio.adjudicator)

    # -- select: one task per pair and style, candidates ranked, two annotators
    pushed = json.loads(run_cli("annotate", "push", "--kind", "mucr", "--task", "select", "--json").output)
    assert pushed["pushed"] == 5 and pushed["purpose"] == "select"
    select_tasks = tasks_of(store, "select")
    shown = admin.tasks.get(id=select_tasks[pair_ids[0]]).data
    assert shown["style"] == "photograph" and len(shown["cause_candidates"]) == 2
    assert all(link.startswith("/data/local-files/?d=") for link in shown["cause_candidates"] + shown["effect_candidates"])
    assert shown["ranking"].splitlines()[0] == "candidate 1: score 0.900, no flags"  # numbered as shown
    assert json.loads(run_cli("annotate", "push", "--kind", "mucr", "--task", "select", "--json").output)[
        "pushed"] == 0
    plans = [(pick(1, 1), pick(1, 1)), (pick(0, 1), pick(0, 1)), (pick(1, 0), pick(1, 0)),
             (pick(0, 0), pick(1, 1)),  # disagree: a third person is asked
             (pick(None), pick(None))]  # none usable: regenerated later
    for pair_id, (a, b) in zip(pair_ids, plans):
        one.annotations.create(id=select_tasks[pair_id], result=a)
        two.annotations.create(id=select_tasks[pair_id], result=b)
    report = pull_json(run_cli)
    assert report["invalid"] == [] and report["items_made"] == 3
    assert report["tiebreaks"] == [{"item": "captions:t:rain-3", "task": select_tasks[pair_ids[3]], "annotators": 3}]
    tied = admin.tasks.get(id=select_tasks[pair_ids[3]])
    assert tied.overlap == 3
    # the server hands it to one more person: "Label All Tasks" gives it to them (a task still marked labeled
    # with its overlap raised was never handed out)
    assert httpx.get(f"{label_studio.url}/api/projects/{tied.project}/next", headers={
        "Authorization": f"Token {label_studio.token(label_studio.adjudicator)}"}).json()["id"] == tied.id
    third.annotations.create(id=select_tasks[pair_ids[3]], result=pick(1, 1))
    assert pull_json(run_cli)["items_made"] == 1
    with store.session() as session:
        pairs = {i.id: i for i in session.execute(select(Item).where(Item.id.in_(pair_ids))).scalars()}
        chosen = {i.key: i for i in session.execute(select(Item).where(Item.key.like("%@photograph"))).scalars()}
    assert pairs[pair_ids[4]].data["selection"]["photograph"]["none_usable"] is True  # what --regenerate-rejected reads
    assert pairs[pair_ids[3]].data["selection"]["photograph"]["annotators"] == [
        label_studio.annotators[1], label_studio.adjudicator]
    assert len(chosen) == 4
    settled = chosen["captions:t:rain-3@photograph"].data
    assert settled["cause_image"] == pairs[pair_ids[3]].data["candidates"]["photograph"]["1"]["cause"]
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert status["agreement"]["mucr select"]["best_cause"]["n_pairs"] == 5
    assert status["agreement"]["mucr select"]["best_cause"]["percent_agreement"] == pytest.approx(80.0)

    # -- cues, checks, then three different people explain each selected pair
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": cue_stub.base_url})
    assert draft_cues(store, backend, run=LLMRun(quiet=True)).items_created == 4
    assert run_cli("check", "--no-embeddings").exit_code == 0
    with store.session() as session:
        assert {i.status for i in session.execute(select(Item).where(Item.key.like("%@photograph"))).scalars()} \
            == {"checked"}
    pushed = json.loads(run_cli("annotate", "push", "--kind", "mucr", "--task", "explain", "--json").output)
    assert pushed["pushed"] == 4
    explain_tasks = tasks_of(store, "explain")
    shown = admin.tasks.get(id=next(iter(explain_tasks.values()))).data
    assert shown["explanation_draft"].startswith("In the first image") and "cue" not in shown  # nothing pre-filled
    assert (shown["model_cue"], shown["model_false_cues"]) == ("cue: rain", "false cues: bench; blanket; park")
    people = [(one, "the man"), (two, "the woman"), (third, "the child")]
    for n, (item_id, task_id) in enumerate(sorted(explain_tasks.items())):
        for m, (client, who) in enumerate(people):
            cue = "catch cold" if (n == 0 and m == 1) else "rain"  # the second person edits the cue: the third settles
            client.annotations.create(id=task_id, result=explain(who, cue=cue))
            if n == 1 and m == 1:  # two explanations only so far: still in review
                pull_json(run_cli)
                with store.session() as session:
                    assert session.get(Item, item_id).status == IN_REVIEW
    report = pull_json(run_cli)
    assert report["invalid"] == []
    with store.session() as session:
        accepted = session.execute(select(Item).where(Item.status == ACCEPTED)).scalars().all()
        judgments = session.execute(select(Judgment).join(AnnotationTask).where(
            AnnotationTask.purpose == "explain")).scalars().all()
    assert len(accepted) == 4 and len(judgments) == 12
    first = next(i for i in accepted if i.id == min(explain_tasks))
    assert first.data["cue_agreement"]["rule"].endswith("a third person settled the cue set")
    assert sorted(first.data["explanations_by_annotator"]) == sorted([*label_studio.annotators,
                                                                     label_studio.adjudicator])
    assert first.data["explanations"][1] == EXPLANATIONS["the woman"]
    assert judgments[0].raw["fields"]["explanation"].startswith("In the first image")

    # -- the release: exactly the v1 fields, all three explanations
    out = run_cli("export", "rain", "--version", "1", "--licence", "CC0-1.0", "--format", "mucr", "--json")
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    rows = [json.loads(line) for line in (release / "rain.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(list(r) == list(SCHEMAS["readme-2024-08-31"]) for r in rows)
    assert all(len(r["causal_reason"]) == 3 and r["cue"] == "rain" for r in rows)
    assert "| mucr select | best_cause |" in (release / "README.md").read_text()
    assert run_cli("verify", release).exit_code == 0
