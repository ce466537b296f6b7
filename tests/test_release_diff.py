"""`cftools release diff A B` and `cftools export --previous A` (issue 35): the items added, removed, relabelled and
with new images between two releases of one store, every stored run of A rescored on B from its predictions (the
parts of each score change add up to the change; the rescored answers are those a real run on B gives), and the
changelog in B's card and croissant.json, which still verifies.

One module-scoped store with items of every kind (tests/release_stock.py) is exported as bench 1, edited, and
exported as bench 2 with --previous; two scripted runs (one generating, one ranking) are stored for each release.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from conftest import CVQA_REAL
from release_stock import stock_every_kind

from cftools.cli import main
from cftools.errors import CftoolsError, InputError
from cftools.evaluate.rescore import score_changes
from cftools.evaluate.run import EvalOptions, run_eval
from cftools.release.diff import diff_releases, read_release, release_folder
from cftools.release.export import ExportOptions, export_release
from cftools.release.layout import MANIFEST_NAME, RECORDS_NAME
from cftools.release.verify import verify_release
from cftools.workspace import init_workspace

LICENCE = "CC-BY-4.0"


class Scripted:
    """Generates 'blue' for a question with options, else '2'; ranks the first option best."""

    def generate(self, prompts):
        return ["blue" if p.options else "2" for p in prompts]

    def score_options(self, prompts):
        return [[{"sum_logprob": -1.0 if n == 0 else -3.0, "mean_loss": 1.0 if n == 0 else 3.0, "n_tokens": 1}
                 for n, _ in enumerate(p.options)] for p in prompts]

    def close(self):
        pass


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def edit_store(workspace, keys, folder: Path) -> dict[str, str]:
    """Between the two releases: a C-VQA item rejected, a C-VQA answer and a CFMM answer changed, a CFMM item's
    image replaced, a CFMM item added. Returns which item got which edit."""
    from cftools.models import Item, SourceQuestion

    cvqa, cfmm = keys["cvqa"], keys["cfmm"]
    edits = {"removed": cvqa[0], "relabelled_cvqa": cvqa[1], "relabelled_cfmm": cfmm[1], "new_image": cfmm[2]}
    with workspace.store.write() as session:
        def item(key):
            return session.execute(select(Item).where(Item.key == key)).scalar_one()

        item(edits["removed"]).status = "rejected"
        row = item(edits["relabelled_cvqa"])
        row.answer = "2" if row.answer != "2" else "3"
        row = item(edits["relabelled_cfmm"])
        row.answer = "yellow"  # one of its options: the ranking model's first choice
        other = session.get(SourceQuestion, item(cfmm[0]).source_id).image_id
        session.get(SourceQuestion, item(edits["new_image"]).source_id).image_id = other
    edits["added"] = add_cfmm_item(workspace, folder, len(cfmm))  # one more CFMM item, like the stock's
    return edits


def add_cfmm_item(workspace, folder: Path, n: int) -> str:
    import PIL.Image

    from cftools.images import read_image_file, register_image
    from cftools.models import ACCEPTED, Image, Item, SourceQuestion

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "added.png"
    PIL.Image.new("RGB", (41, 23), (9, 200, 9)).save(path)
    with workspace.store.write() as session:
        image = read_image_file(path)
        register_image(workspace.store, session, image)
        image_id = session.execute(select(Image.id).where(Image.sha256 == image.sha256)).scalar_one()
        source = SourceQuestion(dataset="table:cars", external_id=f"added{n}", image_ref=path.name, image_id=image_id,
                                question="What color is the car?", answer="green", answer_type="other")
        session.add(source)
        session.flush()
        key = f"cfmm:{n}"
        session.add(Item(key=key, kind="cfmm", group="color", question="What color would the car be if painted "
                         "blue?", answer="blue", status=ACCEPTED, origin="generated", source_id=source.id,
                         dataset="table:cars", data={"type": "color", "options": {
                             "original": ["green", "red"], "counterfactual": ["blue", "red", "white", "black"]}}))
    return key


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    workspace = init_workspace(root / "ws")
    keys = stock_every_kind(workspace, CVQA_REAL, root / "in")
    a = export_release(workspace, "bench", "1", root / "out", options=ExportOptions(licence=LICENCE)).path
    runs = {mode: run_eval(a, "blind", options=EvalOptions(mode=mode, out_dir=root / "runs" / f"a-{mode}"),
                           answerer=Scripted(), workspace=workspace) for mode in ("generate", "rank")}
    edits = edit_store(workspace, keys, root / "in" / "more")
    done = cli("--workspace", workspace.root, "export", "bench", "--version", "2", "--out", root / "out",
               "--licence", LICENCE, "--previous", "bench@1")
    assert done.exit_code == 0, done.output
    b = root / "out" / "bench-2"
    on_b = {mode: run_eval(b, "blind", options=EvalOptions(mode=mode, out_dir=root / "runs" / f"b-{mode}"),
                           answerer=Scripted())
            for mode in ("generate", "rank")}  # not in the store: only A's runs are traced
    yield {"workspace": workspace, "a": a, "b": b, "edits": edits, "runs": runs, "on_b": on_b, "root": root}
    workspace.close()


def test_each_edit_lands_in_its_category(releases):
    diff = diff_releases(releases["a"], releases["b"])
    edits = releases["edits"]
    found = {c.id: c for c in diff.items}
    assert found[edits["removed"]].category == "removed"
    assert found[edits["added"]].category == "added"
    assert found[edits["relabelled_cvqa"]].category == "relabelled"
    assert found[edits["relabelled_cfmm"]].changed == ["answer"]
    assert found[edits["relabelled_cfmm"]].after == {"answer": [found[edits["relabelled_cfmm"]].before["answer"][0],
                                                                "yellow"]}
    assert found[edits["new_image"]].category == "new_images" and found[edits["new_image"]].changed[0] == "image"
    counts = diff.counts()
    assert counts == {"added": 1, "removed": 1, "relabelled": 2, "new_images": 1, "reworded": 0,
                      "unchanged": len(diff.a.records) - 4}
    by_type = {(r["kind"], r["type"]): r for r in diff.by_kind_type()}
    assert by_type[("cfmm", "color")]["added"] == 1 and by_type[("cfmm", "color")]["new_images"] == 1


def test_a_kind_says_what_its_answer_and_options_are():
    from cftools.kinds import get_kind
    from cftools.release.diff import compare_records

    base = {"id": "m", "kind": "mucr", "group": "rain", "image": None,
            "data": {"cause_image": "images/" + "a" * 64 + ".png", "effect_image": "images/" + "b" * 64 + ".png",
                     "cue": "wet road", "false_cues": ["dry", "sun", "snow"], "c2e_answer": 0}}
    cue = json.loads(json.dumps(base))
    cue["data"]["cue"] = "puddles"
    assert compare_records(base, cue).category == "relabelled"
    options = json.loads(json.dumps(base))
    options["data"]["false_cues"][0] = "fog"
    assert compare_records(base, options).changed == ["options"]
    pair = json.loads(json.dumps(base))
    pair["data"]["effect_image"] = "images/" + "c" * 64 + ".png"  # another pair shows the model other images
    assert compare_records(base, pair).category == "new_images"
    assert get_kind("mucr").hooks.release.diff_fields(base)["question"] is None
    cvqa = {"id": "c", "kind": "cvqa", "group": "g", "image": None, "data": {}, "original_question": "How many?",
            "original_answer": "2", "question": "How many if one left?", "answer": "1"}
    reworded = dict(cvqa, question="How many if two left?")
    assert compare_records(cvqa, reworded).category == "reworded"
    assert compare_records(cvqa, dict(cvqa, split="dev")).changed == ["split"]
    assert compare_records(cvqa, dict(cvqa, split="dev")).category == "unchanged"


def rescored(releases):
    workspace = releases["workspace"]
    diff = diff_releases(releases["a"], releases["b"])
    return diff, {Path(run.run).name: run for run in score_changes(diff, workspace.store, (), workspace.root)}


def b_result(lines, ids):
    """(correct, n) per (kind, which) over the prediction lines of items IDS."""
    out = {}
    for line in lines:
        if line["id"] in ids and "similarities" not in line:
            c, n = out.get((line["kind"], line["which"]), (0, 0))
            out[(line["kind"], line["which"])] = (c + bool(line["correct"]), n + 1)
    return out


def test_stored_runs_are_rescored_on_b_and_the_parts_add_up(releases):
    diff, traced = rescored(releases)
    assert set(traced) == {"a-generate", "a-rank"}  # the runs on B are not runs of A
    comparable = {c.id for c in diff.items if c.category in ("unchanged", "relabelled")}
    added = {c.id for c in diff.items if c.category == "added"}
    for mode in ("generate", "rank"):
        run = traced[f"a-{mode}"]
        on_b = releases["on_b"][mode].predictions
        truth, unscored = b_result(on_b, comparable), b_result(on_b, added)
        for question in run.questions:
            d = question.as_dict()
            parts = [Fraction(d["parts_exact"][p]) for p in ("removed", "stale", "relabelled")]
            assert sum(parts) == Fraction(d["change_exact"])
            # rescoring the stored answers gives what the model, asked on B, answered
            assert (d["b"]["correct"], d["b"]["n"]) == truth[(question.kind, question.which)]
            assert question.unscored == unscored.get((question.kind, question.which), (0, 0))[1]
        a_summary = releases["runs"][mode].summary["cfmm"]["rows"][-1]  # the total row: the run's own scores
        cf = next(q for q in run.questions if (q.kind, q.which) == ("cfmm", "counterfactual"))
        assert cf.as_dict()["a"]["value"] == pytest.approx(a_summary["acc_c"]["value"])
    rank = next(q for q in traced["a-rank"].questions if (q.kind, q.which) == ("cfmm", "counterfactual"))
    assert rank.parts()["relabelled"] > 0  # the first option, wrong before, is B's answer
    generate = next(q for q in traced["a-generate"].questions if (q.kind, q.which) == ("cfmm", "counterfactual"))
    assert generate.parts()["relabelled"] < 0 and generate.parts()["stale"] is not None
    assert any("new images" in note for note in traced["a-generate"].notes)
    # the same runs read from their folders (predictions.jsonl) instead of the store trace the same
    folders = score_changes(diff, None, [releases["runs"][m].out_dir for m in ("generate", "rank")])
    assert [q.as_dict() for run in folders for q in run.questions] == \
        [q.as_dict() for name in ("a-generate", "a-rank") for q in traced[name].questions]


def test_changelog_is_in_the_card_and_croissant_and_b_still_verifies(releases):
    b, edits = releases["b"], releases["edits"]
    card = (b / "README.md").read_text(encoding="utf-8")
    assert "## Changes since bench 1" in card and f"`{edits['added']}`" in card
    assert "1 added, 1 removed, 2 relabelled, 1 new images" in card
    croissant = json.loads((b / "croissant.json").read_text(encoding="utf-8"))
    assert croissant["prov:wasRevisionOf"]["prov:label"] == "bench 1"
    assert any("1 added, 1 removed" in a.get("prov:label", "") for a in croissant["prov:wasGeneratedBy"])
    assert verify_release(b).ok
    done = cli("verify", b)
    assert done.exit_code == 0, done.output


def test_the_command_writes_markdown_and_json(releases):
    ws, a, b, root = releases["workspace"].root, releases["a"], releases["b"], releases["root"]
    done = cli("--workspace", ws, "release", "diff", "bench@1", b)
    assert done.exit_code == 0, done.output
    assert "# bench 1 → bench 2" in done.output and "## Score changes of the stored runs of bench 1" in done.output
    assert "| cfmm | counterfactual |" in done.output
    done = cli("--workspace", ws, "release", "diff", a, "bench@2", "--json", "--out", root / "diff.json")
    assert done.exit_code == 0, done.output
    report = json.loads((root / "diff.json").read_text(encoding="utf-8"))
    assert report["counts"]["added"] == 1 and len(report["items"]["unchanged"]) == report["counts"]["unchanged"]
    assert len(report["runs"]) == 2
    # a run folder named by hand must be a run of A
    other = releases["on_b"]["generate"].out_dir
    done = CliRunner().invoke(main, ["--workspace", str(ws), "release", "diff", str(a), str(b), "--run", str(other)])
    assert done.exit_code == 1 and "config.json: the run is of another release" in done.output


def test_a_broken_release_is_refused_naming_the_file(releases, tmp_path):
    import shutil

    copy = tmp_path / "bench-1"
    shutil.copytree(releases["a"], copy)
    with open(copy / RECORDS_NAME, "a", encoding="utf-8") as fh:
        fh.write('{"id": "x", "kind": "cvqa"}\n')
    with pytest.raises(InputError, match=rf"{RECORDS_NAME}: its SHA-256 differs from the one {MANIFEST_NAME} lists"):
        read_release(copy)
    done = CliRunner().invoke(main, ["release", "diff", str(copy), str(releases["b"])])
    assert done.exit_code == 1 and len(done.output.strip().splitlines()) == 1 and RECORDS_NAME in done.output
    (copy / MANIFEST_NAME).unlink()
    with pytest.raises(CftoolsError, match="no manifest.json"):
        read_release(copy)
    with pytest.raises(CftoolsError, match="no such release folder"):
        release_folder(str(tmp_path / "nothing"))
