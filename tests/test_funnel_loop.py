"""The authoring funnel's whole loop (issue 48, its first "done when"): a store built through the real commands, for
all three kinds, with real Label Studio servers (one per person) and simulated people whose acceptance rates per
prompt variant are known by design; then `cftools report --json` is held against that design and against the
store counted here.

The design (one module-scoped world, the tests run in order on it):
- cvqa: `generate rewrite` drafts every source twice, with the default template and with `--prompt-variant terse`;
  people accept a default draft with p=0.85 and a terse one with p=0.35 (the default is better by design);
- cfmm: `generate pairs` drafts every image twice, default and terse; people accept either with p=0.6 (equal by
  design);
- mucr: published MuCR records ingested as items; people accept them with p=0.7;
- the cvqa drafts people rejected are drafted again (`generate rewrite --redo rejected`), checked, verified; people
  accept a redone draft with p=0.75 (the report counts them apart; they are no variant's first draft);
- checks flag drafts by design (the loopback model words some drafts so): `no_presupposition` on cvqa drafts of
  every fifth source, `no_condition` on cfmm drafts of every eighth image. `annotate push --flagged-sample` sends
  them all to people as measuring tasks; people reject a `no_presupposition` draft with p=0.9, a `no_condition`
  one with p=0.25 (a check of low precision by design).
Each draw is seeded per item key, so the test knows every verdict before anyone gives it; both people of an item
give the same one (no adjudication), and a release is exported from what they accepted."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path

import PIL.Image
import pytest
import tomlkit
from sqlalchemy import select

from fixtures_label_studio import PeopleWorld
from funnel_people import LEAD_TIME, drawn, judge_open_tasks
from llm_stub import StubServer

from cftools.models import ACCEPTED, REJECTED, AnnotationTask, CheckFlag, Generation, Item
from cftools.workspace import init_workspace

SEED = 48
N_SOURCES = 40
N_MUCR = 6
ACCEPTANCE = {("cvqa", "default"): 0.85, ("cvqa", "terse"): 0.35,  # better by design
              ("cfmm", "default"): 0.6, ("cfmm", "terse"): 0.6,  # equal by design
              ("mucr", "default"): 0.7}
REDO_ACCEPTANCE = 0.75  # people accept a redone draft (`generate rewrite --redo rejected`) with this rate
REJECTS_FLAGGED = {"no_presupposition": 0.9, "no_condition": 0.25}  # each check's precision by design
REDO_MARK = "A draft for this question was written before"  # the redo template's line
PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}  # [llm.prices."stub"]: the loopback model's price
TERSE_MARKS = ("Rewrite the question into a counterfactual one", "Write a basic question answerable from the facts")
KINDS = ("cvqa", "cfmm", "mucr")
NO_GENERATOR = "(none)"  # the generator row of items ingested as they are


def cvqa_flagged(n: int) -> bool:
    """Source N's cvqa drafts are worded without an if-clause (`no_presupposition`)."""
    return n % 5 == 4


def cfmm_flagged(n: int) -> bool:
    """Source N's cfmm pairs are worded without an if-condition (`no_condition`)."""
    return n % 8 == 3


# ---------------------------------------------------------------- the loopback model


def source_number(text: str) -> int:
    return int(re.findall(r"things of kind (\d+)", text)[-1])


def rewrite_reply(prompt: str, terse: bool) -> dict:
    n = source_number(prompt)
    answer = n % 7
    if REDO_MARK in prompt:  # worded apart from the rejected draft (one more or two more) and from the other's redo
        more, words = (4, "four") if "two more" in prompt.split(REDO_MARK, 1)[1] else (3, "three")
        return {"reasoning": f"{answer} + {more} = {answer + more}",
                "new_question": f"How many things of kind {n} would there be if {words} more were added?",
                "new_answer": answer + more}
    if cvqa_flagged(n):  # no if-clause: no_presupposition flags it
        question = f"How many things of kind {n} are there now that {'two more came' if terse else 'one more came'}?"
    elif terse:
        question = f"How many things of kind {n} would there be if two more were added?"
    else:
        question = f"How many things of kind {n} would there be if one more were added?"
    step = 2 if terse else 1
    return {"reasoning": f"{answer} + {step} = {answer + step}", "new_question": question, "new_answer": answer + step}


def pair_reply(prompt: str, terse: bool) -> dict:
    n = source_number(prompt.rsplit("Facts:", 1)[1])
    answer = n % 7
    basic = f"How many things of kind {n} are there?"
    more = 2 if terse else 1
    added = "two more" if terse else "one more"
    if cfmm_flagged(n):  # no if-condition: no_condition flags it
        cf = f"How many things of kind {n} are there with {added} of them?"
    else:
        cf = f"If {added} things of kind {n} were put in, how many things of kind {n} would there be?"
    return {"basic_question": basic, "basic_options": [str(answer), str(answer + 5)], "basic_correct": 1,
            "cf_question": cf, "cf_options": [str(answer), str(answer + more)], "cf_correct": 2}


def model_reply(request: dict, prompt: str) -> str:
    """The loopback model: a count rewrite, a CFMM type pick (always count) or a CFMM pair, worded by the variant
    whose template asked (so the two variants' drafts of a source differ, as real ones would)."""
    schema = (request.get("response_format") or {}).get("json_schema") or {}
    terse = any(mark in prompt for mark in TERSE_MARKS)
    if schema.get("name") == "cfmm_type_pick":
        return json.dumps({"type": "count"})
    if schema.get("name") == "cfmm_pair":
        return json.dumps(pair_reply(prompt, terse))
    reply = rewrite_reply(prompt, terse)
    if schema:
        return json.dumps(reply)
    return (f"Step 1. {reply['reasoning']}\nNew question: {reply['new_question']}\n"
            f"New answer: {reply['new_answer']}")


# ---------------------------------------------------------------- the inputs


def write_sources(folder: Path) -> Path:
    """N_SOURCES images, each with one count question (the cvqa rewrites' and the cfmm pairs' source)."""
    folder.mkdir(parents=True)
    rows = ["image,question,answer"]
    for n in range(N_SOURCES):
        PIL.Image.new("RGB", (16 + n, 16), (6 * n % 255, 90, 160)).save(folder / f"src{n}.png")
        rows.append(f"src{n}.png,How many things of kind {n} are there?,{n % 7}")
    table = folder / "sources.csv"
    table.write_text("\n".join(rows) + "\n")
    return table


def write_mucr(folder: Path) -> Path:
    """N_MUCR published MuCR records (two images each, three explanations in the three-part form)."""
    folder.mkdir(parents=True)
    lines = []
    for n in range(N_MUCR):
        for side in (0, 1):
            PIL.Image.new("RGB", (20 + n, 12 + side), (30 * n, 40 * side, 90)).save(folder / f"m{n}_{side}.png")
        lines.append(json.dumps({
            "id": f"loop-{n}", "image_0": f"m{n}_0.png", "image_1": f"m{n}_1.png",
            "caption_0": f"A boy number {n} runs through the rain", "caption_1": f"boy number {n} sneezes in bed",
            "cue": "rain", "false_cue": ["sun", "bed", "shoes"], "style": "photograph", "label": "human",
            "causal_reason": [
                f"In the first image, boy {n} runs through heavy rain without a coat. In the second image, he lies "
                f"in bed sneezing. The causal link is that the cold rain made him ill.",
                f"In the first image, a soaked child number {n} hurries home through a storm. In the second image, the "
                "kid is sick under a blanket. The causal link is being wet and chilled for hours.",
                "In the first image, water pours down on a running youngster. In the second image, that youngster has "
                "a fever in bed. The causal link is that getting drenched brought on the illness."]}))
    source = folder / "mucr.jsonl"
    source.write_text("\n".join(lines) + "\n")
    return source


# ---------------------------------------------------------------- the world


class World(PeopleWorld):
    """The workspace built through the loop, and what each step answered."""

    def __init__(self, root: Path, people_servers, prefix: str) -> None:
        super().__init__(root, people_servers, prefix)
        self.checked: dict[str, dict] = {}  # every item as the checks left it, before people saw anything
        self.answers: dict[str, dict] = {}  # each step's JSON answer, by step

    def items(self) -> dict[str, dict]:
        """Every item by key: its kind, arm (kind, prompt variant), source number, generator, status and flags."""
        return self.read(items_in)

    def task_items(self) -> dict[tuple[str, int], tuple[str, str]]:
        """(person, Label Studio task id) -> (item key, kind), from the store."""
        return self.read(lambda s: {(person, task): (key, kind) for person, task, key, kind in s.execute(
            select(AnnotationTask.assignee, AnnotationTask.ls_task_id, Item.key, Item.kind)
            .join(Item, Item.id == AnnotationTask.item_id))})

    def truth(self, key: str) -> bool:
        """Whether people find item KEY good: for a draft flagged by design, its check's truth; for a redone draft,
        the redo's rate; else its arm's."""
        code = flagged_by_design(self.checked).get(key)
        if code is not None:
            return not drawn(SEED, key, REJECTS_FLAGGED[code])
        return drawn(SEED, key, REDO_ACCEPTANCE if self.checked[key]["redo"] else ACCEPTANCE[self.checked[key]["arm"]])

    def people_judge(self) -> int:
        tasks = self.task_items()
        return judge_open_tasks(self.people_servers, self.prefix, lambda person, task: tasks[(person, task)],
                                self.truth)

    def released_keys(self) -> set[str]:
        records = Path(self.answers["export"]["path"]) / "records.jsonl"
        return {json.loads(line)["id"] for line in records.read_text().splitlines()}  # a record's id: its item key


def items_in(session) -> dict[str, dict]:
    flags: dict[int, set[str]] = {}
    for item_id, code in session.execute(select(CheckFlag.item_id, CheckFlag.code)):
        flags.setdefault(item_id, set()).add(code)
    rows = session.execute(select(Item.id, Item.key, Item.kind, Item.status, Item.question, Item.generation_id,
                                  Item.redo_of, Generation.generator, Generation.prompt_variant)
                           .outerjoin(Generation, Generation.id == Item.generation_id)).all()
    return {key: {"kind": kind, "arm": (kind, variant or "default"), "status": status,
                  "source": source_number(question) if generation_id else None, "drafted": generation_id is not None,
                  "redo": redo_of is not None, "generator_row": (generator or NO_GENERATOR, variant or ""),
                  "flags": flags.get(item_id, set())}
            for item_id, key, kind, status, question, generation_id, redo_of, generator, variant in rows}


def configure(root: Path, people_servers, prefix: str, llm_url: str) -> None:
    """Each person's own server, no control items, and the loopback model with its price."""
    people_servers.configure(root, prefix, annotate="control_rate = 0\n")
    path = root / "cftools.toml"
    config = tomlkit.parse(path.read_text())
    llm = config["llm"]
    llm["backend"], llm["model"], llm["base_url"] = "openai", "stub", llm_url
    llm["backoff_initial"], llm["backoff_max"] = 0.01, 0.05
    prices = tomlkit.table(is_super_table=True)
    prices["stub"] = PRICE
    llm["prices"] = prices
    path.write_text(tomlkit.dumps(config))


def build_through_the_loop(world: World, inputs: Path) -> None:
    """ingest -> generate (two variants) -> check -> push (measuring and verifying) -> people -> pull -> redo what
    people rejected -> check -> push -> people -> pull -> export -> report, each through its command."""
    world.cli("ingest", "table", write_sources(inputs / "sources"), "--images", inputs / "sources", "--quiet")
    world.cli("ingest", "mucr", write_mucr(inputs / "mucr"), "--images", inputs / "mucr")
    for variant in ((), ("--prompt-variant", "terse")):
        world.cli("generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--quiet", *variant)
        world.cli("generate", "pairs", "--types", "count", "--no-rederive", "--quiet", *variant)
    world.cli("check", "--no-embeddings", "--quiet")
    world.checked = world.items()
    sample = len(flagged_by_design(world.checked))  # every flagged draft is measured
    world.answers["measure"] = world.json("annotate", "push", "--flagged-sample", sample, "--seed", SEED)
    world.answers["verify"] = {kind: world.json("annotate", "push", "--kind", kind) for kind in KINDS}
    world.answers["judged"] = world.people_judge()
    world.cli("annotate", "pull")
    world.answers["redo"] = world.json("generate", "rewrite", "--group", "numerical-direct", "--redo", "rejected",
                                       "--no-rederive", "--quiet")
    world.cli("check", "--no-embeddings", "--quiet")
    world.checked.update({key: item for key, item in world.items().items() if item["redo"]})
    world.answers["verify redone"] = world.json("annotate", "push", "--kind", "cvqa")
    world.answers["judged"] += world.people_judge()
    world.cli("annotate", "pull")
    world.answers["export"] = world.json("export", "loop", "--version", "1", "--licence", "CC0-1.0", "--quiet")
    world.answers["report"] = world.json("report")


@pytest.fixture(scope="module")
def model():
    server = StubServer(delay=0.0, reply=model_reply).start_in_thread()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def world(people_servers, model, tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("funnel-loop") / "ws"
    init_workspace(root).close()
    prefix = f"f-{uuid.uuid4().hex[:8]}"
    configure(root, people_servers, prefix, model.base_url)
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(root))
    people_servers.use_in(monkeypatch)
    w = World(root, people_servers, prefix)
    try:
        build_through_the_loop(w, people_servers.media_root / f"loop-{uuid.uuid4().hex[:6]}")
        yield w
    finally:
        monkeypatch.undo()


# ---------------------------------------------------------------- what the design says


def flagged_by_design(items: dict[str, dict]) -> dict[str, str]:
    """Drafts the loopback model worded to be flagged, and by which check."""
    flagged = {}
    for key, item in items.items():
        if item["kind"] == "cvqa" and cvqa_flagged(item["source"]):
            flagged[key] = "no_presupposition"
        elif item["kind"] == "cfmm" and cfmm_flagged(item["source"]):
            flagged[key] = "no_condition"
    return flagged


def decided_by_design(world: World) -> dict[str, bool]:
    """Every item the checks passed (people verified each) and whether people accepted it."""
    flagged = flagged_by_design(world.checked)
    return {key: world.truth(key) for key in world.checked if key not in flagged}


def arms_by_design(world: World) -> dict[tuple[str, str], tuple[int, int]]:
    """(decided, accepted) per (kind, prompt variant) arm of the first drafts."""
    arms: dict[tuple[str, str], list[int]] = {}
    for key, good in decided_by_design(world).items():
        if world.checked[key]["drafted"] and not world.checked[key]["redo"]:
            arm = arms.setdefault(world.checked[key]["arm"], [0, 0])
            arm[0] += 1
            arm[1] += good
    return {arm: (n, k) for arm, (n, k) in arms.items()}


# ---------------------------------------------------------------- the store counted here


def counted_in_store(world: World) -> dict[str, dict]:
    """The funnel's stages counted from the store (and the release's records) here: "total", per "generator"
    (generator, prompt variant) and per "kind"; zero counts left out."""
    def query(session):
        flagged = set(session.execute(select(CheckFlag.item_id)).scalars())
        pushed = set(session.execute(select(AnnotationTask.item_id)  # never a measuring, control or audit task
                                     .where(AnnotationTask.purpose.not_in(["measure", "control", "audit"]))).scalars())
        return {key: (item_id in flagged, item_id in pushed) for item_id, key in session.execute(
            select(Item.id, Item.key))}
    flags_and_pushes, released = world.read(query), world.released_keys()
    counts: dict[str, dict] = {"total": {}, "generator": {}, "kind": {}}
    for key, item in world.items().items():
        was_flagged, was_pushed = flags_and_pushes[key]
        stages = Counter(ingested=1, drafted=item["drafted"], flagged=was_flagged, pushed=was_pushed,
                         accepted=item["status"] == ACCEPTED, rejected=item["status"] == REJECTED,
                         released=key in released)
        for by, row in (("total", ""), ("generator", item["generator_row"]), ("kind", item["kind"])):
            counts[by][row] = counts[by].get(row, Counter()) + stages
    return counts


def folded(rows: list[dict], row_of) -> dict:
    """The report's funnel ROWS summed per ROW_OF(row); zero counts left out."""
    sums: dict = {}
    for row in rows:
        sums[row_of(row)] = sums.get(row_of(row), Counter()) + Counter(row["counts"])
    return sums


# ---------------------------------------------------------------- the claims


def test_the_store_is_built_through_the_whole_loop_as_designed(world):
    items = world.items()
    assert Counter(item["arm"] for item in items.values() if item["drafted"] and not item["redo"]) == {
        ("cvqa", "default"): N_SOURCES, ("cvqa", "terse"): N_SOURCES,
        ("cfmm", "default"): N_SOURCES, ("cfmm", "terse"): N_SOURCES}
    redone = {key for key, item in items.items() if item["redo"]}
    assert Counter(item["kind"] for item in items.values()) == {"cvqa": 2 * N_SOURCES + len(redone),
                                                                "cfmm": 2 * N_SOURCES, "mucr": N_MUCR}
    flagged = flagged_by_design(world.checked)
    assert {key: item["flags"] for key, item in world.checked.items() if item["flags"]} == {
        key: {code} for key, code in flagged.items()}
    measure = world.answers["measure"]
    assert measure["pushed"] == len(flagged) and sorted(measure["items"]) == sorted(flagged)
    decided = decided_by_design(world)
    rejected_rewrites = {key for key, good in decided.items() if not good and items[key]["kind"] == "cvqa"
                         and not items[key]["redo"]}
    assert len(redone) == world.answers["redo"]["items_created"] == len(rejected_rewrites) > 0
    pushed = sum(push["pushed"] for push in world.answers["verify"].values()) + world.answers["verify redone"]["pushed"]
    assert pushed == 2 * len(decided)  # two people each
    assert world.answers["judged"] == 2 * len(decided) + len(flagged)
    assert {key: items[key]["status"] for key in decided} == {
        key: ACCEPTED if good else REJECTED for key, good in decided.items()}
    assert all(items[key]["status"] == "draft" for key in flagged)  # measured, never decided
    assert world.released_keys() == {key for key, good in decided.items() if good}


def test_the_reports_funnel_counts_equal_the_stores(world):
    report, counted = world.answers["report"], counted_in_store(world)
    redone = sum(item["redo"] for item in world.checked.values())
    assert report["items"] == counted["total"][""]["ingested"] == 4 * N_SOURCES + N_MUCR + redone
    funnel = report["funnel"]
    assert Counter(funnel["total"]["counts"]) == counted["total"][""]
    assert set(funnel["total"]["counts"]) == set(report["stages"])
    assert folded(funnel["generator"], lambda row: (row.get("generator") or NO_GENERATOR,
                                                    row.get("prompt_variant") or "")) == counted["generator"]
    assert folded(funnel["group"], lambda row: row["kind"]) == counted["kind"]
    assert funnel["total"]["flagged_by_code"] == dict(Counter(flagged_by_design(world.checked).values()))


def test_acceptance_per_variant_equals_the_simulated_rates_within_their_intervals(world):
    variants = world.answers["report"]["variants"]
    assert variants is not None, "the report has no prompt variants section (compare_variants)"
    arms = {(arm["kind"], arm["name"]): arm for arm in variants["arms"] if arm["by"] == "prompt_variant"}
    designed = arms_by_design(world)
    assert set(arms) == set(designed)
    for name, (decided, accepted) in designed.items():
        arm = arms[name]
        assert decided >= 30, "enough decided drafts per arm for the intervals to separate 0.85 from 0.35"
        assert (arm["decided"], arm["accepted"]) == (decided, accepted), name
        assert arm["acceptance"] == pytest.approx(accepted / decided)
        low, high = arm["interval"]
        assert low <= ACCEPTANCE[name] <= high, (name, arm)


def drafting_costs(session, redos: bool = False) -> dict[tuple[str, str], float]:
    """What each (generator, prompt variant)'s paid calls cost at PRICE, redos left out (no arm drafted them) unless
    REDOS."""
    costs: dict[tuple[str, str], float] = {}
    for generator, variant, cached, prompt, completion, params in session.execute(select(
            Generation.generator, Generation.prompt_variant, Generation.cached, Generation.prompt_tokens,
            Generation.completion_tokens, Generation.params)):
        if cached or ((params or {}).get("redo") and not redos):
            continue
        paid = (prompt * PRICE["input_per_mtok"] + completion * PRICE["output_per_mtok"]) / 1_000_000
        costs[(generator, variant or "default")] = costs.get((generator, variant or "default"), 0.0) + paid
    return costs


def drafting_costs_with_redos(session) -> dict[tuple[str, str], float]:
    return drafting_costs(session, redos=True)


def test_cost_per_accepted_item_per_variant_is_what_its_drafting_calls_cost(world):
    arms = {(arm["kind"], arm["name"]): arm for arm in world.answers["report"]["variants"]["arms"]
            if arm["by"] == "prompt_variant"}
    costs = world.read(drafting_costs)
    for (kind, name), (_, accepted) in arms_by_design(world).items():
        generator = arms[(kind, name)]["generator"]
        expected = costs[(generator, name)] / accepted
        assert arms[(kind, name)]["cost_per_accepted"] == pytest.approx(expected, abs=5e-7), (kind, name)  # 6 places


def test_what_each_accepted_item_cost_adds_up_to_every_paid_call_and_every_judgment_that_counts(world):
    cost = world.answers["report"]["cost"]
    paid = sum(world.read(drafting_costs_with_redos).values())
    decided = decided_by_design(world)
    for by in ("group", "generator"):
        rows = cost[by]
        assert sum(row["money"] or 0 for row in rows) == pytest.approx(paid, abs=1e-5), by
        assert sum(row["accepted"] for row in rows) == sum(decided.values()), by
        assert sum(row["people_seconds"] for row in rows) == pytest.approx(LEAD_TIME * 2 * len(decided)), by


def test_the_better_variant_is_named_when_better_by_design_and_not_when_not(world):
    comparisons = {(row["kind"], row["generator"]): row for row in world.answers["report"]["variants"]["comparisons"]
                   if row["by"] == "prompt_variant"}
    assert set(comparisons) == {("cvqa", "rewrite"), ("cfmm", "pairs")}
    better = comparisons[("cvqa", "rewrite")]
    assert better["better"] == "default" and better["p_value"] < 0.05
    low, high = better["interval"] if better["a"] == "default" else (-better["interval"][1], -better["interval"][0])
    assert 0 < low < high
    equal = comparisons[("cfmm", "pairs")]
    assert equal["better"] is None and equal["p_value"] >= 0.05
    low, high = equal["interval"]
    assert low < 0 < high


def test_each_checks_precision_matches_the_simulated_truth(world):
    calibration = world.answers["report"]["calibration"]
    assert calibration is not None, "the report has no check calibration section (check_calibration)"
    rows = {row["code"]: row for row in calibration["checks"]}
    assert set(rows) == set(REJECTS_FLAGGED)
    flagged = flagged_by_design(world.checked)
    for code, truth in REJECTS_FLAGGED.items():
        measured = [key for key, flagged_by in flagged.items() if flagged_by == code]
        rejected = sum(not world.truth(key) for key in measured)
        row = rows[code]
        assert (row["measured"], row["people_rejected"]) == (len(measured), rejected), code
        assert row["precision"] == pytest.approx(rejected / len(measured))
        low, high = row["interval"]
        assert low <= truth <= high, (code, row)
        assert row["low"] == (truth < calibration["low_precision_below"]), code  # no_condition is named, by design
    rejected_in_verification = sum(not good for good in decided_by_design(world).values())
    misses = calibration["misses"]  # every item people verified was one no check flagged
    assert (misses["people_rejected"], misses["unflagged"]) == (rejected_in_verification, rejected_in_verification)


def test_the_redone_drafts_are_counted_as_people_judged_them(world):
    redone = {key: good for key, good in decided_by_design(world).items() if world.checked[key]["redo"]}
    rows = world.answers["report"]["redo"]  # one row per generator row (its model and redo template)
    assert {row["generator"].split(" ")[0] for row in rows} == {"rewrite"}
    expected = Counter(redone=len(redone), decided=len(redone), accepted=sum(redone.values()))
    assert folded_redo(rows) == {"cvqa": expected}


def folded_redo(rows: list[dict]) -> dict[str, Counter]:
    sums: dict[str, Counter] = {}
    for row in rows:
        sums[row["kind"]] = sums.get(row["kind"], Counter()) + Counter(
            {k: row[k] for k in ("redone", "decided", "accepted")})
    return sums
