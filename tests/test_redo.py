"""`generate rewrite --redo rejected|flagged` end to end against the loopback OpenAI-compatible stub (llm_stub): the
rejected draft and the people's reasons reach the model, never a person's address; the redone drafts are new items
linked to the old ones and counted; a rerun redoes nothing twice."""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from fixtures_label_studio import verify_result
from test_annotate import make_items, mark_checked
from test_cfmm import images_and_facts  # noqa: F401  (a fixture: images with answered source questions)
from test_servers import people_ws, pull, push, tasks_by_person  # noqa: F401  (people_ws: a fixture)

from cftools.flags import waive
from cftools.generate.redo import redo_key
from cftools.ingest.readers import ingest_table
from cftools.models import (ACCEPTED, REJECTED, AnnotationTask, CheckFlag, Generation, Item, ItemEvent, Judgment,
                            utcnow)

QUESTIONS = [("a.jpg", "How many cats are there?", "2"), ("b.jpg", "How many cars are parked?", "5"),
             ("c.jpg", "How many people are sitting?", "0"), ("d.jpg", "How many kites are flying?", "3")]
PERSON, OTHER = "ann@example.org", "bob@example.com"
COMMENT = f"The if-clause gives the count away; ask {OTHER} if unsure"
CONTROL_COMMENT = "ONLY-IN-A-CONTROL-TASK"


def configure_stub(workspace, base_url: str) -> None:
    config = workspace.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"'))


@pytest.fixture
def drafted(workspace, tmp_path, stub, run_cli):
    """A workspace on the stub with four numerical-direct drafts written by `generate rewrite`."""
    table = tmp_path / "mine.csv"
    with open(table, "w", newline="") as fh:
        csv.writer(fh).writerows([("image", "question", "answer"), *QUESTIONS])
    ingest_table(workspace.store, table)
    configure_stub(workspace, stub.base_url)
    result = rewrite(run_cli)
    assert result.exit_code == 0, result.output
    stub.received.clear()
    return workspace


def rewrite(run_cli, *extra: str):
    return run_cli("generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--quiet", "--json", *extra)


def reported_redos(run_cli) -> list[dict]:
    """The redo counts as `cftools report --json` gives them (their one definition), each generator's label checked
    to be the redo template's and then left out."""
    result = run_cli("report", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["redo"]
    for row in rows:
        assert row["generator"].startswith("rewrite · ") and "rewrite/redo.j2@" in row["generator"], row
    return [{k: v for k, v in row.items() if k != "generator"} for row in rows]


def items(store) -> dict[str, Item]:
    with store.session() as session:
        return {i.key: i for i in session.execute(select(Item)).scalars()}


def reject_as_pull_does(store, key: str, task_number: int, *, comment: str = COMMENT) -> None:
    """The rows `annotate pull` leaves for an item one person rejected: a decided verify task, the person's judgment
    (answer wrong, a correction, a flag, a comment), the item rejected with its history event; and a control task
    on the same item, whose judgment measures the person and is no reason."""
    now = utcnow()
    with store.write() as session:
        item = session.execute(select(Item).where(Item.key == key)).scalar_one()
        for purpose, state, text in (("verify", "decided", comment), ("control", "decided", CONTROL_COMMENT)):
            task = AnnotationTask(item_id=item.id, purpose=purpose, server="http://127.0.0.1:1", ls_project_id=1,
                                  ls_task_id=task_number * 10 + len(purpose), state=state, assignee=PERSON,
                                  decision=REJECTED if purpose == "verify" else None)
            session.add(task)
            session.flush()
            session.add(Judgment(task_id=task.id, annotator=PERSON, ls_annotation_id=task.ls_task_id, related=True,
                                 answer_correct=False, corrected_answer="7", flags=["ambiguous"], comment=text,
                                 annotated_at=now))
        session.add(ItemEvent(item_id=item.id, stage="annotate pull", from_status=item.status, to_status=REJECTED,
                              detail={"decision": REJECTED, "rule": "one person: the answer is wrong",
                                      "annotators": [PERSON]}))
        item.status = REJECTED
        session.add(item)


def set_status(store, key: str, status: str) -> None:
    with store.write() as session:
        item = session.execute(select(Item).where(Item.key == key)).scalar_one()
        item.status = status
        session.add(item)


def prompts(stub) -> list[str]:
    return [r["body"]["messages"][-1]["content"] for r in stub.received if r["path"].endswith("/chat/completions")]


def test_redo_rejected_gives_the_model_the_draft_and_the_reasons_and_links_new_items(drafted, stub, run_cli):
    before = items(drafted.store)
    rejected = sorted(before)[:2]
    for n, key in enumerate(rejected, start=1):
        reject_as_pull_does(drafted.store, key, n)

    estimate = rewrite(run_cli, "--redo", "rejected", "--estimate")
    assert estimate.exit_code == 0, estimate.output
    assert json.loads(estimate.output)["estimate"][0]["requests"] == 2 and prompts(stub) == []  # nothing called

    result = rewrite(run_cli, "--redo", "rejected")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["selected"] == 2 and summary["items_created"] == 2

    sent = prompts(stub)
    assert len(sent) == 2
    for key in rejected:
        prompt = next(p for p in sent if before[key].question in p)
        assert f"Question: {before[key].data['original_question']}" in prompt  # the group's own prompt
        assert json.dumps(before[key].answer) in prompt or before[key].answer in prompt  # the rejected draft
        assert "a person found the answer wrong" in prompt
        assert "a person corrected the answer to: 7" in prompt
        assert "Ambiguous: two readings or answers are possible" in prompt
        assert "The if-clause gives the count away" in prompt
        assert "rejected because: one person: the answer is wrong" in prompt
        assert "@" not in prompt and PERSON not in prompt and OTHER not in prompt  # nobody's address
        assert CONTROL_COMMENT not in prompt  # a control measures the person; it is no reason

    after = items(drafted.store)
    with drafted.store.session() as session:
        for key in rejected:
            old, new = after[key], after[redo_key(key)]
            assert redo_key(key) == f"{key}~redo1"
            assert old.status == REJECTED  # the old item keeps its status
            assert new.redo_of == old.id and new.status == "draft" and new.origin == "generated"
            assert (new.kind, new.group, new.source_id) == (old.kind, old.group, old.source_id)
            assert new.data["original_question"] == old.data["original_question"]
            generation = session.get(Generation, new.generation_id)
            assert generation.generator == "rewrite" and generation.template_name == "rewrite/redo.j2"
            assert generation.params["redo"] == "rejected" and generation.params["redo_of"] == key
            assert "a person corrected the answer to: 7" in generation.prompt
            new_events = session.execute(select(ItemEvent.stage, ItemEvent.to_status, ItemEvent.detail)
                                         .where(ItemEvent.item_id == new.id)).all()
            assert [tuple(e) for e in new_events] == [("redo", "draft", {"redo_of": key, "redo": "rejected"})]
            old_event = session.execute(select(ItemEvent).where(ItemEvent.item_id == old.id,
                                                                ItemEvent.stage == "redo")).scalar_one()
            assert old_event.to_status == REJECTED and old_event.detail["redone_as"] == new.key
    assert reported_redos(run_cli) == [{"kind": "cvqa", "redone": 2, "decided": 0, "accepted": 0, "acceptance": None}]

    # a rerun redoes nothing: every rejected item has its redo
    stub.received.clear()
    again = rewrite(run_cli, "--redo", "rejected")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["selected"] == 0 and prompts(stub) == [] and len(items(drafted.store)) == 6

    # people accept one redo and reject the other: only that one is redone again, linked to the redo
    set_status(drafted.store, redo_key(rejected[0]), ACCEPTED)
    reject_as_pull_does(drafted.store, redo_key(rejected[1]), 9, comment="still gives the count away")
    assert reported_redos(run_cli) == [{"kind": "cvqa", "redone": 2, "decided": 2, "accepted": 1, "acceptance": 0.5}]
    third = rewrite(run_cli, "--redo", "rejected")
    assert json.loads(third.output)["items_created"] == 1
    (prompt,) = prompts(stub)
    assert "still gives the count away" in prompt
    after = items(drafted.store)
    second = after[f"{rejected[1]}~redo2"]
    assert second.redo_of == after[redo_key(rejected[1])].id
    assert set(after) == set(before) | {redo_key(k) for k in rejected} | {second.key}


def test_redo_flagged_passes_the_flag_reasons_and_leaves_waived_flags(drafted, stub, run_cli):
    keys = sorted(items(drafted.store))
    with drafted.store.write() as session:
        found = {i.key: i for i in session.execute(select(Item)).scalars()}
        session.add(CheckFlag(item_id=found[keys[0]].id, code="leakage",
                              reason="the if-clause states the new answer (3)"))
        session.add(CheckFlag(item_id=found[keys[1]].id, code="arithmetic", reason="2 + 1 is not 4"))
    waive(drafted.store, keys[1], "arithmetic", "the count is right after all", "lead")

    result = rewrite(run_cli, "--redo", "flagged")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items_created"] == 1
    (prompt,) = prompts(stub)
    assert "check leakage: the if-clause states the new answer (3)" in prompt
    assert "held back by automatic checks" in prompt and "2 + 1 is not 4" not in prompt
    after = items(drafted.store)
    assert after[redo_key(keys[0])].redo_of == after[keys[0]].id and redo_key(keys[1]) not in after
    assert after[keys[0]].status == "draft"  # the flagged draft stays as it was

    stub.received.clear()
    assert json.loads(rewrite(run_cli, "--redo", "flagged").output)["selected"] == 0 and prompts(stub) == []


def test_reparse_updates_a_redo_whose_reply_now_reads_differently(drafted, stub, run_cli):
    keys = sorted(items(drafted.store))
    with drafted.store.write() as session:
        found = {i.key: i for i in session.execute(select(Item)).scalars()}
        session.add(CheckFlag(item_id=found[keys[0]].id, code="arithmetic", reason="2 + 1 is not 4"))
    assert json.loads(rewrite(run_cli, "--redo", "flagged").output)["items_created"] == 1
    with drafted.store.write() as session:  # as if the reply had been read wrong when it came back
        redo = session.execute(select(Item).where(Item.key == redo_key(keys[0]))).scalar_one()
        gen = session.get(Generation, redo.generation_id)
        reply = json.loads(gen.raw_output)
        gen.raw_output = json.dumps({**reply, "new_answer": reply["new_answer"] + 40})
        session.add(gen)
    result = run_cli("generate", "reparse", "--json")
    # before: the redo's generation record was parsed again, its draft kept the old answer (0 updated)
    assert json.loads(result.output)["items_updated"] == 1, result.output
    assert items(drafted.store)[redo_key(keys[0])].answer == str(reply["new_answer"] + 40)
    assert json.loads(run_cli("generate", "reparse", "--json").output)["items_updated"] == 0


def test_redo_keys_count_up():
    assert redo_key("rewrite:3:boolean") == "rewrite:3:boolean~redo1"
    assert redo_key("rewrite:3:boolean~redo1") == "rewrite:3:boolean~redo2"
    assert redo_key("pairs:4:1~redo9") == "pairs:4:1~redo10"


def test_every_redo_template_is_packaged():
    from cftools.kinds.cfmm.generate import CFMM_REDO
    from cftools.kinds.cvqa.generate import CVQA_REDO
    from cftools.kinds.mucr.cues import MUCR_CUES_REDO
    from cftools.llm.prompts import load_prompt

    for spec in (CVQA_REDO, CFMM_REDO, MUCR_CUES_REDO):
        text = load_prompt(spec.template).render(prompt="PROMPT", draft={"x": 1}, reasons=["r1"], redo="rejected")
        assert text.startswith("PROMPT") and "- r1" in text and '{"x": 1}' in text
    assert Path(load_prompt(CVQA_REDO.template).name) == Path("rewrite/redo.j2")


# ---------------------------------------------------------------- the other generators: pairs (CFMM) and cues (MuCR)
@pytest.fixture
def pairs_llm():
    """The scripted CFMM drafter of tests/test_cfmm.py, on a stub in this process (its requests readable)."""
    from test_cfmm import draft_reply

    from cftools.llm import make_backend
    from llm_stub import StubServer

    server = StubServer(delay=0.0, reply=draft_reply).start_in_thread()
    backend = make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url,
                            "backoff_initial": 0.01, "backoff_max": 0.05})
    yield server, backend
    backend.close()
    server.shutdown()
    server.server_close()


def test_redo_rejected_pairs_drafts_the_type_again_from_the_image_facts(images_and_facts, pairs_llm):
    from cftools.generate.llm_task import LLMRun
    from cftools.generate.redo import redo_drafts
    from cftools.kinds.cfmm.generate import generate_pairs, parse_quota
    from cftools.kinds.cfmm.generate import CFMM_REDO

    server, backend = pairs_llm
    store = images_and_facts.store
    assert generate_pairs(store, backend, run=LLMRun(quiet=True), quota=parse_quota("count,color")).items_created == 2
    count = next(i for i in items(store).values() if i.group == "count")
    reject_as_pull_does(store, count.key, 1, comment="both options are counts of dogs; ask ann@example.org")
    server.received.clear()

    report = redo_drafts(store, backend, CFMM_REDO, "rejected", run=LLMRun(quiet=True))
    assert report.selected == 1 and report.items_created == 1
    (prompt,) = prompts(server)
    assert "How many dogs are on the grass? Answer: 2" in prompt  # the count type's own prompt with the image's facts
    assert count.question in prompt and "both options are counts of dogs" in prompt and "@" not in prompt
    new = items(store)[redo_key(count.key)]
    assert (new.redo_of, new.kind, new.group, new.status) == (count.id, "cfmm", "count", "draft")
    assert new.data["options"] == {"original": ["2", "3"], "counterfactual": ["2", "3"]} and new.answer == "3"
    assert redo_drafts(store, backend, CFMM_REDO, "rejected", run=LLMRun(quiet=True)).selected == 0


def test_redo_rejected_cues_keeps_the_pair_and_drafts_new_cues(workspace, stub):
    from cftools.generate.llm_task import LLMRun
    from cftools.generate.redo import redo_drafts
    from fixtures_llm import stub_backend
    from cftools.kinds.mucr.cues import MUCR_CUES_REDO

    data = {"cause_caption": "a man runs in the rain", "effect_caption": "the man sneezes",
            "cause_image": "images/c.png", "effect_image": "images/e.png", "style": "photograph",
            "context": {"cause_description": "A man in a grey coat runs through heavy rain.",
                        "effect_description": "The same man sneezes in bed."},
            "cue": "coat", "false_cues": ["rain", "bed", "tissue"],
            "explanation_draft": "In the first image, a man runs. In the second image, he sneezes. The causal link "
                                 "is that he ran."}
    with workspace.store.write() as session:
        session.add(Item(key="mucr:1@photograph", kind="mucr", group="health", question="a man runs in the rain",
                         status="in_review", origin="generated", data=data))
    reject_as_pull_does(workspace.store, "mucr:1@photograph", 1, comment="the cue is not the cause")
    stub.script.append(json.dumps({"cue": "catch cold", "false_cues": ["coat", "bed", "tissue"],
                                   "explanation": "In the first image, a man runs in the rain. In the second image, "
                                                  "he sneezes. The causal link is that he caught a cold."}))
    backend = stub_backend(stub)
    report = redo_drafts(workspace.store, backend, MUCR_CUES_REDO, "rejected", run=LLMRun(quiet=True))
    assert report.items_created == 1
    (prompt,) = prompts(stub)
    assert "Cause image: A man in a grey coat runs through heavy rain." in prompt  # the cues prompt
    assert '"cue": "coat"' in prompt and "the cue is not the cause" in prompt and "@" not in prompt
    new = items(workspace.store)["mucr:1@photograph~redo1"]
    assert new.redo_of is not None and new.status == "draft"
    assert (new.data["cue"], new.data["cause_image"], new.data["false_cues"]) == (
        "catch cold", "images/c.png", ["coat", "bed", "tissue"])


# ---------------------------------------------------------------- through real Label Studio servers
def comment(text: str) -> dict:
    return {"from_name": "comment", "to_name": "question", "type": "textarea", "value": {"text": [text]}}


def test_redo_after_a_real_pull_gives_the_model_what_the_two_people_said(people_ws, people_servers, run_cli, request,
                                                                         stub):
    """Two people, each on their own Label Studio, reject an ingested C-VQA item with flags, a correction and a
    comment; `annotate pull` decides it rejected; the redo's prompt carries what they said and names neither."""
    make_items(run_cli, people_servers.media_root / f"{request.node.name}-{uuid.uuid4().hex[:6]}", 1)
    mark_checked(people_ws.store)
    push(run_cli)
    said = {"not_counterfactual": "The if-clause changes nothing in the picture; ask ann2@example.com",
            "ambiguous": "Which squares count is unclear"}
    people = sorted((person, task) for person, tasks in tasks_by_person(people_ws.store).items() for task in tasks)
    assert len(people) == 2
    for (person, task), (flag, text) in zip(people, said.items()):
        people_servers.client(person).annotations.create(id=task.ls_task_id, result=[
            *verify_result("yes", "no", "3" if flag == "ambiguous" else None, flags=[flag]), comment(text)])
    assert pull(run_cli)["decisions"] == {"rejected": 1}

    configure_stub(people_ws, stub.base_url)
    result = rewrite(run_cli, "--redo", "rejected")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items_created"] == 1
    (prompt,) = prompts(stub)
    assert "Question: How many squares are there in picture 0?" in prompt  # the ingested item's source question
    assert "How many squares would there be if one more was added (0)?" in prompt  # the rejected draft
    assert "rejected because: both flagged ambiguous or not counterfactual" in prompt
    assert "The if-clause changes nothing in the picture" in prompt and "Which squares count is unclear" in prompt
    assert "a person corrected the answer to: 3" in prompt
    assert "Not counterfactual: it supposes nothing contrary to the image" in prompt
    assert "@" not in prompt and all(person not in prompt for person, _ in people)
    (old,) = [i for i in items(people_ws.store).values() if i.redo_of is None]
    new = items(people_ws.store)[redo_key(old.key)]
    assert old.status == REJECTED and new.redo_of == old.id and new.status == "draft"
    assert reported_redos(run_cli) == [{"kind": "cvqa", "redone": 1, "decided": 0, "accepted": 0, "acceptance": None}]
    # parsing the stored replies again makes no first draft of the redo's reply (the ingested item is not `rewrite:…`)
    reparsed = run_cli("generate", "reparse", "--json")
    assert json.loads(reparsed.output)["items_created"] == 0 and len(items(people_ws.store)) == 2


def test_a_redo_takes_no_prompt_variant(tmp_path):
    """A redo is drafted from the redo template; a variant given with it is refused before any call."""
    from cftools.errors import CftoolsError
    from cftools.generate.llm_task import LLMRun
    from cftools.generate.redo import redo_drafts
    from cftools.kinds.cvqa.generate import CVQA_REDO

    with pytest.raises(CftoolsError, match="prompt variant"):
        redo_drafts(None, None, CVQA_REDO, "rejected", run=LLMRun(prompt_variant="terse"))
