"""`cftools ingest edits` (issue 44): edited images made anywhere come in as edit candidates of their items, checked
and ranked like generated ones, verified by people in Label Studio and released with their provenance; bad input
stops the import naming the file and row with the store unchanged; a rerun adds nothing."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import PIL.Image
import PIL.ImageDraw
import pytest
from sqlalchemy import func, select

from test_annotate import ls_workspace  # noqa: F401 (fixture of team_workspace)
from test_browser import team_workspace  # noqa: F401 (fixture: a workspace whose tasks go to three people)
from cftools.evaluate.run import load_run
from cftools.models import Image, IngestRun, Item, SourceQuestion

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
HAND_MADE = EXAMPLES / "edits" / "hand-made"
DRAWN_SHAPES = EXAMPLES / "cvqa" / "drawn-shapes.csv"
EXAMPLE_IMAGES = EXAMPLES / "vqav2" / "images"
TOOL = "Pillow (by hand)"


def ingest_example_items(run_cli) -> None:
    result = run_cli("ingest", "cvqa", DRAWN_SHAPES, "--images", EXAMPLE_IMAGES, "--licence", "CC0-1.0")
    assert result.exit_code == 0, result.output


def import_edits(run_cli, table: Path, images: Path, *args: str) -> dict:
    result = run_cli("ingest", "edits", table, "--images", images, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def items_by_key(store) -> dict[str, Item]:
    with store.session() as session:
        items = list(session.execute(select(Item).order_by(Item.id)).scalars())
        for item in items:
            session.expunge(item)
    return {item.key: item for item in items}


def example_rows() -> list[dict]:
    with open(HAND_MADE / "edits.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def store_state(workspace) -> tuple:
    """Everything an import could change: the items' data, the images, the ingest runs and the generated files."""
    with workspace.store.session() as session:
        data = session.execute(select(Item.id, Item.data).order_by(Item.id)).all()
        images = session.execute(select(func.count()).select_from(Image)).scalar_one()
        runs = session.execute(select(func.count()).select_from(IngestRun)).scalar_one()
    files = sorted(p.name for p in (workspace.root / "images" / "generated").rglob("*") if p.is_file())
    return [(i, json.dumps(d, sort_keys=True)) for i, d in data], images, runs, files


# ---------------------------------------------------------------- the example: import, checks, rerun


def test_hand_made_edits_of_the_example_items_come_in_as_checked_candidates_with_provenance(workspace, run_cli):
    ingest_example_items(run_cli)
    report = import_edits(run_cli, HAND_MADE / "edits.csv", HAND_MADE, "--licence", "CC0-1.0")
    assert report["n_records"] == 7 and report["candidates_added"] == 7 and report["items"] == 6
    assert report["already_there"] == 0 and report["flagged"] == 0  # plausible local edits pass the checks
    items = items_by_key(workspace.store)
    for row in example_rows():
        data = items[row["item"]].data
        prefix = "edit" if row["edit"] == "relevant" else "irrelevant_edit"
        [candidate] = data[f"{prefix}_candidates"].values()
        assert candidate["provenance"] == {"source": "imported", "tool": TOOL, "file": "edits.csv", "model": TOOL,
                                           "licence": "CC0-1.0", "condition": row["condition"],
                                           "instruction": row["instruction"]}
        sha = candidate["image"].removeprefix("sha256:")
        stored = workspace.root / "images" / "generated" / sha[:2] / f"{sha}.png"
        assert stored.is_file()  # stored among the generated images, under its SHA-256
        [check] = data[f"{prefix}_checks"]
        assert check["k"] == 0 and check["flags"] == [] and check["changed_share"] > 0
        text = ("condition", "instruction") if row["edit"] == "relevant" else ("irrelevant_condition",
                                                                                "irrelevant_instruction")
        assert (data["edit"][text[0]], data["edit"][text[1]]) == (row["condition"], row["instruction"])
    with workspace.store.session() as session:
        rendered = json.dumps([d for (d,) in session.execute(select(Item.data))])
    assert str(HAND_MADE) not in rendered and str(ROOT) not in rendered  # no local path in the items' data

    again = import_edits(run_cli, HAND_MADE / "edits.csv", HAND_MADE, "--licence", "CC0-1.0")
    assert again["candidates_added"] == 0 and again["already_there"] == 7 and again["images_added"] == 0
    assert {k: i.data for k, i in items_by_key(workspace.store).items()} == {k: i.data for k, i in items.items()}


def test_an_item_by_its_id_gets_the_next_candidate_and_all_its_candidates_are_ranked_again(workspace, run_cli,
                                                                                          tmp_path):
    ingest_example_items(run_cli)
    import_edits(run_cli, HAND_MADE / "edits.csv", HAND_MADE)
    items = items_by_key(workspace.store)
    first = items["cvqa:drawn-shapes:f73c6b3047c93467"]  # "How many circles are there?" over three red circles
    folder = tmp_path / "more"
    folder.mkdir()
    noise = PIL.Image.effect_noise((160, 120), 80).convert("RGB")  # every pixel changed: not an edit
    noise.save(folder / "noise.png")
    (folder / "edits.jsonl").write_text(json.dumps({"item": first.id, "image": "noise.png", "tool": "/opt/gpu-box/models/kontext",
                                                    "condition": "A television is off."}) + "\n")
    report = import_edits(run_cli, folder / "edits.jsonl", folder)
    assert report["added"] == [{"item_id": first.id, "edit": "relevant", "k": 1, "line": "line 1"}]
    data = items_by_key(workspace.store)[first.key].data
    assert set(data["edit_candidates"]) == {"0", "1"}
    assert data["edit_candidates"]["1"]["provenance"]["tool"] == "kontext"  # a local folder by its name only
    assert data["edit_candidates"]["1"]["provenance"]["licence"] is None
    assert [c["k"] for c in data["edit_checks"]] == [0, 1]  # the hand-made edit ranks above the noise
    assert data["edit_checks"][1]["flags"]
    assert data["edit"]["condition"] == "There are five red circles."  # the first one stays: never overwritten


def test_an_llm_condition_is_kept_and_the_imported_one_stays_with_its_candidate(workspace, run_cli):
    ingest_example_items(run_cli)
    key = "cvqa:drawn-shapes:27ecff93df688223"
    llm_edit = {"condition": "Three squares remain.", "instruction": "Erase one square.", "generation_id": 1,
                "template": "edits/instruction.j2"}
    with workspace.store.write() as session:
        item = session.execute(select(Item).where(Item.key == key)).scalar_one()
        item.data = {**item.data, "edit": llm_edit}
    import_edits(run_cli, HAND_MADE / "edits.csv", HAND_MADE)
    data = items_by_key(workspace.store)[key].data
    assert data["edit"] == llm_edit
    assert data["edit_candidates"]["0"]["provenance"]["condition"] == "There are three squares."


# ---------------------------------------------------------------- bad input


def bad_table(tmp_path: Path, rows: list[dict], name: str = "bad.csv") -> tuple[Path, Path]:
    """ROWS as a CSV (or JSONL by NAME) beside a copy of the hand-made images; returns (table, images folder)."""
    images = tmp_path / "edited"
    if not images.exists():
        shutil.copytree(HAND_MADE, images, ignore=shutil.ignore_patterns("*.csv", "*.py"))
    table = tmp_path / name
    if name.endswith(".jsonl"):
        table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return table, images
    columns = list(dict.fromkeys(c for r in rows for c in r))
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return table, images


GOOD = {"item": "cvqa:drawn-shapes:f73c6b3047c93467", "image": "two-more-circles.png"}


def bad_rows(case: str, mucr_id: int) -> list[dict]:
    """A good first row, then the bad one (line 3 of the CSV): the error must name that row (the header, line 1,
    for a column)."""
    bad = {
        "unknown item": {"item": "999", "image": "a-green-circle.png"},
        "missing image": {"item": "2", "image": "nowhere.png"},
        "unreadable image": {"item": "2", "image": "broken.png"},
        "image outside the folder": {"item": "2", "image": "../bad.csv"},
        "a link out of the folder": {"item": "2", "image": "link.png"},
        "a kind without edits": {"item": str(mucr_id), "image": "a-green-circle.png"},
        "bad edit value": {"item": "2", "image": "a-green-circle.png", "edit": "sideways"},
        "unknown column": {"item": "2", "image": "a-green-circle.png", "instrucion": "typo"},
    }[case]
    return [GOOD, bad]


EXPECTED = {
    "unknown item": "no item '999'",
    "missing image": "image 'nowhere.png' is not in the --images folder",
    "unreadable image": "image 'broken.png': not a readable image",
    "image outside the folder": "image path '../bad.csv' leaves the --images folder",
    "a link out of the folder": "image path 'link.png' is a link to",
    "a kind without edits": "takes no edits",
    "bad edit value": "edit is 'sideways'",
    "unknown column": "unknown column(s) 'instrucion'",
}


@pytest.fixture
def mucr_item(workspace) -> int:
    """An item of a kind without edited images (MuCR), written straight into the store."""
    with workspace.store.write() as session:
        item = Item(key="mucr:x:1", kind="mucr", group="g", question="Which caused which?", answer="A",
                    status="draft", data={})
        session.add(item)
        session.flush()
        return item.id


@pytest.mark.parametrize("case", list(EXPECTED))
def test_a_bad_row_stops_the_import_naming_the_file_and_row_with_the_store_unchanged(case, workspace, run_cli,
                                                                                    tmp_path, mucr_item):
    ingest_example_items(run_cli)
    table, images = bad_table(tmp_path, bad_rows(case, mucr_item))
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")  # cut short: not an image
    PIL.Image.new("RGB", (160, 120)).save(tmp_path / "elsewhere.png")
    (images / "link.png").symlink_to(tmp_path / "elsewhere.png")  # an image, but from outside the folder
    before = store_state(workspace)
    result = run_cli("ingest", "edits", table, "--images", images)
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    line = 1 if case == "unknown column" else 3  # a CSV's columns are its header's
    assert f"{table}, line {line}: " in message and EXPECTED[case] in message, message
    assert len(result.output.strip().splitlines()) <= 2  # one line (wrapped at most once by the terminal)
    assert store_state(workspace) == before  # nothing of the good first row either


def test_a_jsonl_row_without_its_image_names_the_line(workspace, run_cli, tmp_path):
    ingest_example_items(run_cli)
    table, images = bad_table(tmp_path, [GOOD, {"item": "2"}], "bad.jsonl")
    before = store_state(workspace)
    result = run_cli("ingest", "edits", table, "--images", images)
    assert result.exit_code != 0
    assert f"{table}, line 2: empty or missing field(s) image" in " ".join(result.output.split())
    assert store_state(workspace) == before


def test_a_csv_without_the_image_column_names_its_header(workspace, run_cli, tmp_path):
    ingest_example_items(run_cli)
    table, images = bad_table(tmp_path, [{"item": "2", "picture": "a-green-circle.png"}])
    before = store_state(workspace)
    result = run_cli("ingest", "edits", table, "--images", images)
    assert result.exit_code != 0
    assert f"{table}, line 1: missing column(s) 'image'" in " ".join(result.output.split())
    assert store_state(workspace) == before


def test_an_ambiguous_item_is_refused(workspace, run_cli, tmp_path):
    ingest_example_items(run_cli)
    with workspace.store.write() as session:  # an item whose key is another item's id
        session.add(Item(key="3", kind="mucr", group="g", question="q", answer="A", status="draft", data={}))
    table, images = bad_table(tmp_path, [{"item": "3", "image": "a-green-circle.png"}])
    result = run_cli("ingest", "edits", table, "--images", images)
    assert result.exit_code != 0 and "item '3' is ambiguous" in " ".join(result.output.split())


# ---------------------------------------------------------------- people verify, the release carries it


def test_imported_edits_are_checked_verified_in_label_studio_and_released_with_their_provenance(
        label_studio, team_workspace, run_cli):
    from test_browser import assigned, pull_json, push_json
    from test_edits import edit_result

    store = team_workspace.store
    ingest_example_items(run_cli)
    import_edits(run_cli, HAND_MADE / "edits.csv", HAND_MADE, "--licence", "CC0-1.0")
    assert run_cli("check").exit_code in (0, 1)  # the text checks; flags on the text do not matter here
    with store.write() as session:
        for item in session.execute(select(Item)).scalars():
            item.status = "accepted"  # the text verified already: the edit is judged apart from it
    items = items_by_key(store)
    # the item's images live in the workspace, outside Label Studio's document root: embed them
    pushed = push_json(run_cli, "--kind", "cvqa", "--task", "edit", "--data-uri")
    # two people for each of six relevant edits and for the one irrelevant edit
    assert pushed["pushed"] == 14 and sum(pushed["assigned"].values()) == 14
    tasks = assigned(store, "edit")
    assert {t.purpose for t in tasks} == {"edit:0", "edit:irrelevant:0"}  # the imported candidates, the only ones
    with store.session() as session:  # what each edit shows: the counterfactual answer, or the original one kept
        answers = {item.id: (item.answer, source) for item, source in session.execute(
            select(Item, SourceQuestion.answer).join(SourceQuestion, SourceQuestion.id == Item.source_id))}
    for task in tasks:
        counterfactual, original = answers[task.item_id]
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=edit_result(
            answer=original if "irrelevant" in task.purpose else counterfactual))
    report = pull_json(run_cli)
    assert report["invalid"] == [] and report["refused"] == []
    for item in items_by_key(store).values():
        assert item.data["edit_selected"] == 0 and item.data["edit_verification"]["0"]["decision"] == "accepted"
    circles = items_by_key(store)["cvqa:drawn-shapes:f73c6b3047c93467"].data
    assert circles["irrelevant_edit_selected"] == 0

    result = run_cli("export", "edits", "--version", "1.0", "--licence", "CC0-1.0", "--json")
    assert result.exit_code == 0, result.output
    release = Path(json.loads(result.output)["path"])
    records = [json.loads(line) for line in (release / "records.jsonl").read_text().splitlines()]
    assert len(records) == 6
    for record in records:
        data = record["data"]
        assert data["edited_image_verified"] is True and (release / data["edited_image"]).is_file()
        assert data["edited_image_model"] == TOOL and data["edited_image_licence"] == "CC0-1.0"
        assert data["edited_image_source"] == "imported"
        assert data["edited_answer"] == str(record["answer"])
        assert "edit_candidates" not in data  # only the released edit travels
    irrelevant = [r["data"] for r in records if r["data"].get("irrelevant_edited_image")]
    assert len(irrelevant) == 1 and irrelevant[0]["irrelevant_edited_image_verified"] is True
    assert irrelevant[0]["irrelevant_edited_image_source"] == "imported"
    assert irrelevant[0]["irrelevant_change"] == "There is a green square too."

    # the consistency score over the release's one item with both edits (the blind baseline: no image)
    run_dir = team_workspace.root / "runs" / "blind-consistency"
    run = run_cli("eval", str(release), "--model", "blind", "--out", str(run_dir), "--quiet")
    assert run.exit_code == 0, run.output
    total = load_run(run_dir).summary["cvqa"]["consistency"][-1]
    assert total["n"] == 1 and set(total) >= {"consistency", "change_iff_relevant"}
    for path in release.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".md", ".html", ".csv", ".txt"):
            text = path.read_text(encoding="utf-8", errors="replace")
            for local in (str(HAND_MADE), str(ROOT), str(team_workspace.root)):
                assert local not in text, f"{path.name} names {local}"
    assert run_cli("verify", str(release)).exit_code == 0
