"""What every release carries beside its records (croissant.json, browse.html) and the harness formats
(--format lmms-eval, --format vlmevalkit), on a store with items of every kind.

- croissant.json is read with mlcroissant: every record set is iterated, its distribution's SHA-256s are the
  manifest's, the RAI fields carry the store's figures and [release]'s texts; `cftools verify` catches a change.
- The lmms-eval task runs in lmms-eval itself: the test makes a venv that sees this environment's packages
  (lmms-eval's own requirements would replace torch with a CUDA build), installs lmms-eval and the few pure-Python
  packages it imports into it without their dependencies, and runs the exported task against the tiny LLaVA built
  from configs; its replies and scores are compared with `cftools eval` on the same release and model.
- browse.html is opened in Chromium (Playwright), filtered, and screenshotted into test-artifacts/browser/ (as
  test_browser.py does).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from release_stock import add_published_mucr, stock_every_kind
from test_browser import UI_TIMEOUT_MS, browser, save_screenshot  # noqa: F401 (browser: a fixture)

from cftools.evaluate.run import EvalOptions, load_run, run_eval
from cftools.release.export import ExportOptions, export_release
from cftools.release.layout import load_manifest, load_records
from cftools.release.verify import verify_release

NAME, VERSION = "bench", "1.0"
RELEASE_SETTINGS = """
creators = ["Ada Example"]
data_use_cases = "Evaluating counterfactual reasoning of vision-language models; not for training."
data_biases = "Images come from COCO-like photographs of everyday scenes."
personal_sensitive_information = "Faces may appear in the photographs."
"""
# lmms-eval's imports beyond what cftools' environment has (its declared requirements pull torch 2.14 with CUDA).
# lmms-eval 0.7.3 imports filelock's private filelock._api, which filelock 4.3 removed: the side venv keeps an
# older filelock of its own (ahead of this environment's on its path).
LMMS_EVAL_PACKAGES = ["lmms-eval", "filelock<4.3", "loguru", "evaluate", "sacrebleu", "pytablewriter", "DataProperty",
                      "mbstrdecoder", "tabledata", "tcolorpy", "typepy", "pathvalidate", "jsonlines", "zss",
                      "portalocker", "colorama", "tabulate", "python-dotenv", "pytz", "aiohttp", "multidict", "yarl",
                      "propcache", "aiohappyeyeballs", "aiosignal", "frozenlist", "decord", "chardet"]


@pytest.fixture
def stocked(workspace, peer_cvqa_real, tmp_path):
    import tomllib

    workspace.config["release"].update(tomllib.loads(RELEASE_SETTINGS))  # as [release] in cftools.toml gives them
    keys = stock_every_kind(workspace, peer_cvqa_real, tmp_path / "in")
    return workspace, keys


def export(workspace, tmp_path, fmt="native", **options):
    return export_release(workspace, NAME, VERSION, tmp_path / "out",
                          options=ExportOptions(fmt=fmt, licence="CC-BY-4.0",
                                                kind_options={"allow_small_groups": True, **options}))


def croissant_records(path: Path) -> dict[str, list[dict]]:
    import mlcroissant as mlc

    dataset = mlc.Dataset(jsonld=str(path / "croissant.json"))
    return {rs.uuid: list(dataset.records(rs.uuid)) for rs in dataset.metadata.record_sets}


# ---------------------------------------------------------------- croissant


def test_native_croissant_loads_in_mlcroissant_with_rai_fields_from_the_store(stocked, tmp_path):
    workspace, keys = stocked
    result = export(workspace, tmp_path)
    doc = json.loads((result.path / "croissant.json").read_text(encoding="utf-8"))
    manifest = load_manifest(result.path)
    hashes = {f["path"]: f["sha256"] for f in manifest["files"]}
    listed = {d["contentUrl"]: d["sha256"] for d in doc["distribution"] if d["@type"] == "cr:FileObject"}
    assert "records.jsonl" in listed and "browse.html" in listed and "README.md" in listed
    assert all(hashes[path] == sha for path, sha in listed.items())
    assert "croissant.json" in hashes  # the manifest lists the Croissant file in turn

    sets = croissant_records(result.path)
    records = load_records(result.path)
    assert len(sets["records"]) == len(records) == sum(len(v) for v in keys.values())
    ids = {r["records/id"].decode() for r in sets["records"]}
    assert ids == {r["id"] for r in records}
    assert {"cvqa_data", "cfmm_data", "mucr_data"} <= set(sets)
    cues = {r["mucr_data/cue"] for r in sets["mucr_data"] if r["mucr_data/cue"]}
    assert cues == {b"catch cold"}
    images = [r for name, rows in sets.items() if name.startswith("images-") for r in rows]
    assert len(images) == manifest["counts"]["images"]
    for row in images:
        path = next(v for k, v in row.items() if k.endswith("/path")).decode()
        assert (result.path / path).is_file() and path.split("/")[1].split(".")[0] == hashlib.sha256(
            (result.path / path).read_bytes()).hexdigest()

    assert doc["conformsTo"][0] == "http://mlcommons.org/croissant/1.1"
    assert "cfmm_pair" in doc["rai:dataCollection"] and "cvqa:C-VQA-Real_questions" in doc["rai:dataCollection"]
    assert "two annotators" in doc["rai:dataAnnotationProtocol"]
    assert f"8 of {len(records)} items went through annotation" in doc["rai:dataAnnotationProtocol"]
    assert "7 agreed" in doc["rai:dataAnnotationProtocol"]
    assert doc["rai:dataAnnotationPlatform"].startswith("Label Studio")
    analysis = " ".join(doc["rai:dataAnnotationAnalysis"])
    assert "cfmm verification, answer_correct: 4 items, 75.0% agreement" in analysis
    assert any("stub-model" in a["prov:wasAssociatedWith"]["prov:label"] for a in doc["prov:wasGeneratedBy"])
    assert doc["rai:dataUseCases"].startswith("Evaluating counterfactual")
    assert doc["rai:personalSensitiveInformation"] == "Faces may appear in the photographs."
    assert doc["creator"] == [{"@type": "sc:Person", "name": "Ada Example"}]
    assert doc["license"] == "https://spdx.org/licenses/CC-BY-4.0.html"
    card = (result.path / "README.md").read_text(encoding="utf-8")
    assert "(croissant.json)" in card and "(browse.html)" in card
    assert verify_release(result.path).ok


def test_verify_names_a_croissant_file_that_no_longer_matches(stocked, tmp_path, run_cli):
    workspace, _ = stocked
    result = export(workspace, tmp_path)
    path = result.path / "croissant.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["distribution"][0]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc), encoding="utf-8")
    report = verify_release(result.path)
    problems = " ".join(report.problems())
    assert "changed: croissant.json: size" in problems  # the manifest's own check
    assert f"croissant.json: the SHA-256 it lists for {doc['distribution'][0]['contentUrl']} differs" in problems
    assert run_cli("verify", str(result.path)).exit_code == 1


@pytest.mark.parametrize("fmt", ["cvqa", "cfmm", "mucr", "vlmevalkit", "lmms-eval"])
def test_every_format_carries_a_croissant_file_mlcroissant_reads(stocked, tmp_path, fmt):
    workspace, keys = stocked
    result = export(workspace, tmp_path, fmt)
    sets = croissant_records(result.path)
    tables = [p for p in result.path.iterdir() if p.suffix in (".csv", ".tsv", ".jsonl")]
    assert tables
    csv.field_size_limit(sys.maxsize)
    for table in tables:
        with open(table, encoding="utf-8", newline="") as fh:
            if table.suffix == ".jsonl":
                rows = sum(1 for line in fh if line.strip())
            else:
                rows = len(list(csv.DictReader(fh, delimiter="\t" if table.suffix == ".tsv" else ",")))
        assert len(sets[table.stem]) == rows, table.name
    for kind, kind_keys in keys.items():  # a per-kind record set (where records.jsonl holds several kinds)
        if f"{kind}_data" in sets:
            assert sorted(r[f"{kind}_data/id"].decode() for r in sets[f"{kind}_data"]) == sorted(kind_keys)
    assert verify_release(result.path).ok


def test_croissant_fields_a_reviewer_can_trust(stocked, tmp_path, run_cli):
    """Issue 38's croissant rows: the MuCR source and its MIT licence, a licence URL or none, images in data counted,
    annotationsPerItem from the judgments, per-kind record sets of their kind only, a warning naming the empty
    people-only texts, and the fields the store knows filled."""
    workspace, keys = stocked
    keys["mucr"] += add_published_mucr(workspace, tmp_path / "published")
    toml = workspace.root / "cftools.toml"  # the CLI reads [release] from the file
    toml.write_text(toml.read_text(encoding="utf-8").replace("[release]\n", "[release]" + RELEASE_SETTINGS, 1),
                    encoding="utf-8")
    out = run_cli("export", NAME, "--version", VERSION, "--out", str(tmp_path / "out"), "--licence", "CC-BY-4.0")
    assert out.exit_code == 0, out.output
    warning = " ".join(out.stderr.split())  # the console wraps long lines
    assert warning.startswith("warning: croissant.json: the Responsible-AI texts only people can write are empty: "
                              "data_social_impact (rai:dataSocialImpact);"), warning
    assert "data_biases" not in warning  # [release] gives it
    path = tmp_path / "out" / f"{NAME}-{VERSION}"
    again = run_cli("export", NAME, "--version", VERSION, "--out", str(tmp_path / "out"), "--licence", "CC-BY-4.0",
                    "--force", "--json")
    assert [w.split(";")[0] for w in json.loads(again.output)["warnings"]] == [warning.split(";")[0].removeprefix(
        "warning: ")]  # --json lists them in its document (stdout stays one JSON document)
    doc = json.loads((path / "croissant.json").read_text(encoding="utf-8"))

    assert "mucr:human (3 items, licence MIT)" in doc["rai:dataCollection"]
    assert doc["license"] == "https://spdx.org/licenses/CC-BY-4.0.html"
    assert "no image" not in doc["rai:dataLimitations"]  # a MuCR pair's images are in its data
    assert doc["rai:annotationsPerItem"].startswith(f"8 of {len(load_records(path))} items annotated")
    assert "2 (8 items)" in doc["rai:annotationsPerItem"]
    assert doc["rai:hasSyntheticData"] is True  # the CFMM pairs were drafted by a model
    assert any(t.startswith("openai:stub-model") for t in doc["rai:machineAnnotationTools"])
    start, end = doc["rai:dataCollectionTimeframe"]
    assert len(start) == len(end) == 10 and start <= end
    protocol = doc["rai:dataPreprocessingProtocol"]
    assert "cftools ingest cvqa read C-VQA-Real_questions.csv" in protocol and "cftools ingest mucr read human.jsonl" \
        in protocol
    derived = {e["prov:label"].split(" ")[0]: e for e in doc["prov:wasDerivedFrom"]}
    assert derived["mucr:human"]["license"] == "MIT" and derived["cvqa:C-VQA-Real_questions"]["license"] == "CC-BY-4.0"
    assert any(f.startswith("human.jsonl (SHA-256 ") for f in derived["mucr:human"]["prov:value"])

    sets = croissant_records(path)  # mlcroissant validates the document and reads every record set
    for kind, kind_keys in keys.items():
        rows = sets[f"{kind}_data"]
        assert sorted(r[f"{kind}_data/id"].decode() for r in rows) == sorted(kind_keys), kind
    assert {r["mucr_data/cue"] for r in sets["mucr_data"]} == {b"catch cold"}


@pytest.mark.parametrize(("licence", "url"), [
    ("cc-by-4.0", "https://spdx.org/licenses/CC-BY-4.0.html"), ("MIT", "https://spdx.org/licenses/MIT.html"),
    ("https://example.org/terms", "https://example.org/terms"), ("unknown", None), ("our own terms", None),
    ("MIT OR Apache-2.0", None), ("LicenseRef-mine", None), (None, None)])
def test_croissant_licence_is_an_spdx_url_a_given_url_or_absent(licence, url):
    from cftools.release.croissant import licence_url

    assert licence_url(licence) == url


def test_croissant_of_an_unannotated_release_with_an_unknown_licence(stocked, tmp_path):
    workspace, keys = stocked
    result = export_release(workspace, NAME, VERSION, tmp_path / "out",
                            options=ExportOptions(fmt="mucr", licence="unknown",
                                                  kind_options={"allow_small_groups": True}))
    doc = json.loads((result.path / "croissant.json").read_text(encoding="utf-8"))
    assert "license" not in doc  # never https://spdx.org/licenses/unknown.html
    assert any("'unknown' is neither an SPDX id nor a URL" in w for w in result.warnings)
    assert "rai:annotationsPerItem" not in doc  # no MuCR item was annotated
    assert doc["rai:dataAnnotationPlatform"].startswith("none")
    assert doc["rai:dataAnnotationProtocol"].startswith("No item of this release went through annotation")
    assert "no image" not in doc["rai:dataLimitations"]
    assert doc["rai:hasSyntheticData"] is True  # the pairs' images came from an image model
    assert "Images generated with: diffusers:tiny" in doc["rai:dataCollection"]


# ---------------------------------------------------------------- vlmevalkit


VLMEVALKIT_FILES = ["CF_bench_cfmm_MCQ.tsv", "CF_bench_cvqa_OpenEnded.tsv", "CF_bench_cvqa_YN.tsv",
                    "CF_bench_mucr_MCQ.tsv", "CF_bench_mucr_OpenEnded.tsv"]


def tsv_rows(path: Path) -> list[dict]:
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.fixture
def stocked_booleans(stocked, peer_cvqa_real, tmp_path):
    """The stock plus three C-VQA boolean items with images (the stock's C-VQA rows are all counts)."""
    from sqlalchemy import select

    from test_export import peer_rows, set_status, write_images

    from cftools.kinds.cvqa.ingest import ingest_cvqa
    from cftools.models import Item, SourceQuestion

    workspace, keys = stocked
    names = [row["img_path"] for row in peer_rows(peer_cvqa_real) if row["type"] == "boolean"][:3]
    write_images(tmp_path / "in" / "cvqa", names)
    ingest_cvqa(workspace.store, peer_cvqa_real, tmp_path / "in" / "cvqa", licence="CC-BY-4.0")
    with workspace.store.session() as session:
        booleans = [i.key for i, s in session.execute(select(Item, SourceQuestion).join(
            SourceQuestion, SourceQuestion.id == Item.source_id)).all()
            if s.image_id is not None and i.group == "boolean"]
    assert booleans
    set_status(workspace, "accepted", booleans)
    return workspace, {**keys, "cvqa": keys["cvqa"] + booleans}


def test_vlmevalkit_files_in_the_types_vlmevalkit_scores(stocked_booleans, tmp_path):
    workspace, keys = stocked_booleans
    result = export(workspace, tmp_path, "vlmevalkit")
    names = sorted(p.name for p in result.path.glob("*.tsv"))
    assert names == VLMEVALKIT_FILES
    assert all(not n.upper().startswith("CVQA") for n in names)  # VLMEvalKit's own CVQA is another benchmark
    # "openended" in the name: VLMEvalKit's DATASET_TYPE prompts them as open questions, not multiple choice
    assert all("openended" in n.lower() for n in names if not n.endswith(("_MCQ.tsv", "_YN.tsv")))
    config = json.loads((result.path / "vlmevalkit_config.json").read_text())["data"]
    assert {d: c["class"] for d, c in config.items()} == {
        "CF_bench_cfmm_MCQ": "CustomMCQDataset", "CF_bench_cvqa_OpenEnded": "CustomVQADataset",
        "CF_bench_cvqa_YN": "ImageYORNDataset", "CF_bench_mucr_MCQ": "CustomMCQDataset",
        "CF_bench_mucr_OpenEnded": "CustomVQADataset"}
    rows = tsv_rows(result.path / "CF_bench_cfmm_MCQ.tsv")
    assert len(rows) == 2 * len(keys["cfmm"]) and [r["index"] for r in rows] == [str(n) for n in range(len(rows))]
    for row in rows:
        picture = base64.b64decode(row["image"])
        assert (result.path / "images" / f"{hashlib.sha256(picture).hexdigest()}.png").is_file()
        options = [row[letter] for letter in "ABCD" if row[letter]]
        gold = "blue" if row["l2-category"] == "counterfactual" else "red"
        assert options[ord(row["answer"]) - ord("A")] == gold and "Options" not in row["question"]
    cue = tsv_rows(result.path / "CF_bench_mucr_MCQ.tsv")
    assert {r["l2-category"] for r in cue} == {"cue"}
    for row in cue:  # the options once, as VLMEvalKit lists them: not in the question text too
        assert not any(row[letter] in row["question"] for letter in "ABCD" if row[letter]), row["question"]
        assert "cue" in row["question"] and row[row["answer"]] == "catch cold"
    assert {r["answer"] for r in tsv_rows(result.path / "CF_bench_cvqa_YN.tsv")} <= {"Yes", "No"}
    choice_rows = tsv_rows(result.path / "CF_bench_mucr_OpenEnded.tsv")
    assert {r["l2-category"] for r in choice_rows} == {"c2e", "e2c"}
    assert all(len(json.loads(r["image"])) == 5 and r["answer"] in "ABCD" for r in choice_rows)
    card = (result.path / "README.md").read_text(encoding="utf-8")
    assert "cftools eval import" in card and "acc+" in card and "--config vlmevalkit_config.json" in card
    assert load_records(result.path)  # the release's records, which eval import reads


class ReplayModel:
    """Answers each question with the reply chosen for it (by its prompt text and images), as a model that can
    see the images would be asked; records what it was asked."""

    needs_image = True

    def __init__(self, replies: dict):
        self.replies = replies

    def generate(self, prompts):
        # a judged explanation (MuCR Exp) is in no harness file: any text
        return [self.replies.get((p.text, tuple(str(i) for i in p.images)), "An explanation.") for p in prompts]

    def score_options(self, prompts):
        raise AssertionError("generate mode only")

    def close(self):
        pass


def scripted_reply(question, n: int) -> str:
    """Right, wrong or unreadable in turn: the gold option or answer, another one, or a hedge."""
    if n % 3 == 2:
        return "Maybe."
    if question.options:
        right = question.gold_option or question.gold
        return right if n % 3 == 0 else next(o for o in question.options if o != right)
    if question.answer_type == "yes/no":
        return question.gold if n % 3 == 0 else ("no" if question.gold == "yes" else "yes")
    if question.answer_type == "number":
        return question.gold if n % 3 == 0 else str(int(question.gold) + 1)
    return question.gold if n % 3 == 0 else "something else"


def test_eval_import_scores_vlmevalkit_prediction_files_as_cftools_eval(stocked_booleans, tmp_path, run_cli):
    """VLMEvalKit's prediction files (its dataset rows with a `prediction` column, in xlsx and tsv as it writes
    them) read back by `cftools eval import` give the scores `cftools eval` gives the same replies."""
    import pandas as pd

    from cftools.evaluate.harness_import import release_questions
    from cftools.evaluate.questions import PromptTemplates, build_questions

    workspace, keys = stocked_booleans
    release = export(workspace, tmp_path, "vlmevalkit").path
    asked, _ = build_questions(release, load_records(release), PromptTemplates(), "generate", True)
    asked = [q for q in asked if not q.judged]
    reply_of = {q.key: scripted_reply(q, n) for n, q in enumerate(sorted(asked, key=lambda q: q.key))}
    replies = {(q.prompt.text, tuple(str(i) for i in q.prompt.images)): reply_of[q.key] for q in asked}
    assert len(replies) == len(asked)  # every question has its own prompt
    direct = run_eval(release, "hf:replayed",
                      options=EvalOptions(mode="generate", out_dir=tmp_path / "direct",
                                          device="cpu"), answerer=ReplayModel(
        replies))

    files = []
    for n, name in enumerate(VLMEVALKIT_FILES):
        frame = pd.DataFrame(tsv_rows(release / name)).drop(columns=["image"])  # as VLMEvalKit's inference drops it
        frame["prediction"] = [reply_of[(r["item_id"], r["l2-category"])] for r in frame.to_dict("records")]
        path = tmp_path / "vlmevalkit-out" / f"tiny_{name[:-4]}{'.xlsx' if n % 2 == 0 else '.tsv'}"
        path.parent.mkdir(exist_ok=True)
        frame.to_excel(path, index=False) if path.suffix == ".xlsx" else frame.to_csv(path, sep="\t", index=False)
        assert path.is_file()
        files.append(path)
    out = run_cli("eval", "import", str(release), *map(str, files), "--out", str(tmp_path / "imported"),
                  "--model", "tiny")
    assert out.exit_code == 0, out.output
    imported = load_run(tmp_path / "imported")
    assert len(imported.predictions) == len(asked) == len(release_questions(release))
    for kind in ("cvqa", "cfmm", "mucr"):  # every score but MuCR's judged explanations (in no harness file)
        mine = {k: v for k, v in imported.summary[kind].items() if not k.startswith("exp")}
        theirs = {k: v for k, v in direct.summary[kind].items() if not k.startswith("exp")}
        assert mine == theirs, (kind, [k for k in theirs if mine.get(k) != theirs[k]])
    cfmm = {r["type"]: r for r in imported.summary["cfmm"]["rows"]}
    assert cfmm["total"]["acc_plus"]["value"] is not None  # the both-right score, which VLMEvalKit does not give
    report = (tmp_path / "imported" / "report.md").read_text(encoding="utf-8")
    assert "imported from 5 vlmevalkit files" in report

    bad = tmp_path / "vlmevalkit-out" / "bad.tsv"
    pd.DataFrame([{"item_id": "nope", "l2-category": "original", "prediction": "3"}]).to_csv(bad, sep="\t",
                                                                                            index=False)
    out = run_cli("eval", "import", str(release), str(bad), "--out", str(tmp_path / "bad-run"))
    assert out.exit_code == 1 and "bad.tsv, row 2: item nope question original is not a question" in " ".join(
        out.output.split())


# ---------------------------------------------------------------- lmms-eval


def task_yaml(path: Path) -> dict:
    """An lmms-eval task YAML read as lmms-eval reads it (`!function NAME` -> ("function", NAME))."""
    import yaml

    class TaskLoader(yaml.SafeLoader):
        pass

    TaskLoader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))
    return yaml.load(path.read_text(encoding="utf-8"), Loader=TaskLoader)


def test_lmms_eval_task_folders(stocked, tmp_path):
    workspace, keys = stocked
    result = export(workspace, tmp_path, "lmms-eval")
    tasks = {"cvqa": ["bench_cvqa"], "cfmm": ["bench_cfmm"], "mucr": ["bench_mucr_c2e_e2c", "bench_mucr_cue"]}
    assert sorted(p.name for p in result.path.iterdir() if p.is_dir() and p.name.startswith("bench")) == sorted(
        t for names in tasks.values() for t in names)
    group = task_yaml(result.path / "bench.yaml")  # a group with an overall score, not a tag
    assert group["group"] == "bench" and sorted(group["task"]) == sorted(t for n in tasks.values() for t in n)
    assert group["aggregate_metric_list"] == [{"metric": "accuracy", "aggregation": "mean", "weight_by_size": True}]
    for kind, names in tasks.items():
        for name in names:
            task = task_yaml(result.path / name / f"{name}.yaml")
            assert task["task"] == name and "tag" not in task
            assert task["process_results"] == ("function", "utils.process_results")
            assert task["lmms_eval_specific_kwargs"]["default"] == {"pre_prompt": "", "post_prompt": ""}
            text = (result.path / name / f"{name}.yaml").read_text(encoding="utf-8")
            assert "random" not in text and "unknown" not in text  # only the kind's scores
            docs = [json.loads(line) for line in (result.path / name / "test.jsonl").read_text().splitlines()]
            assert {d["item_id"] for d in docs} == set(keys[kind])
            assert all((result.path / image).is_file() for d in docs for image in d["images"])
    mucr = task_yaml(result.path / "bench_mucr_c2e_e2c" / "bench_mucr_c2e_e2c.yaml")
    assert mucr["generation_kwargs"]["max_new_tokens"] == 4 and mucr["output_type"] == "generate_until"
    cfmm = task_yaml(result.path / "bench_cfmm" / "bench_cfmm.yaml")
    assert cfmm["output_type"] == "multiple_choice" and cfmm["doc_to_choice"] == ("function", "utils.doc_to_choice")

    def metric_names(name: str) -> set[str]:
        return {m["metric"] for m in task_yaml(result.path / name / f"{name}.yaml")["metric_list"]}

    assert {"color_acc_plus", "sum_of_types_acc_plus", "color_acc_b", "color_acc_c"} <= metric_names("bench_cfmm")
    assert {"total_c2e", "total_e2c"} <= metric_names("bench_mucr_c2e_e2c")
    assert "total_cue" not in metric_names("bench_mucr_c2e_e2c") and "total_cue" in metric_names("bench_mucr_cue")
    assert {"numerical_direct_counterfactual", "total_drop"} <= metric_names("bench_cvqa")

    from cftools.release.lmms_eval import TaskFunctions

    doc = json.loads((result.path / "bench_cvqa" / "test.jsonl").read_text().splitlines()[0])
    functions = TaskFunctions(result.path, "cvqa", [])
    assert functions.doc_to_text(doc, {"pre_prompt": "", "post_prompt": ""}) == doc["prompt"]
    assert functions.doc_to_text(doc, {"pre_prompt": "<q> ", "post_prompt": " Think."}) == f"<q> {doc['prompt']} Think."


def lmms_eval_python(root: Path) -> Path:
    """A venv that sees this environment's packages, with lmms-eval and its pure-Python imports installed into it
    from the package index (no dependencies: lmms-eval's own would replace torch). CFTOOLS_LMMS_EVAL_VENV names
    one to keep between runs."""
    import site

    root = Path(os.environ.get("CFTOOLS_LMMS_EVAL_VENV") or root)
    python = root / "bin" / "python"
    if python.exists():
        return python
    venv.EnvBuilder(with_pip=True).create(root)
    own = Path(subprocess.check_output([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                       text=True).strip())
    (own / "cftools_env.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *LMMS_EVAL_PACKAGES],
                          capture_output=True, text=True)
    if done.returncode != 0:
        message = f"lmms-eval could not be installed: {done.stderr.strip().splitlines()[-1:]}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return python


COMPARED = {  # generated tasks -> the scores compared with cftools' own (group, metric)
    "bench_cvqa": [("total", "original"), ("total", "counterfactual"), ("total", "drop")],
    "bench_mucr_c2e_e2c": [("total", "c2e"), ("total", "e2c")],
    "bench_mucr_cue": [("total", "cue")],
}
RANKED = {"bench_cfmm": [("color", "acc_b"), ("color", "acc_c"), ("color", "acc_plus"), ("sum of types", "acc_plus")]}


def run_lmms_eval(python: Path, release: Path, model_dir: Path, tasks: str, out: Path, limit: int,
                  *extra: str) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(python), "-m", "lmms_eval", "eval", "--model", "llava_hf", "--model_args",
                           f"pretrained={model_dir},device=cpu,device_map=cpu", "--include_path", str(release),
                           "--tasks", tasks, "--limit", str(limit), "--batch_size", "1", "--output_path", str(out),
                           "--log_samples", *extra], capture_output=True, text=True, env=env, timeout=900,
                          cwd=out.parent)
    written = list(out.rglob("*_results.json"))
    assert done.returncode == 0 and written, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(written[0].read_text())


def samples_of(out: Path, task: str) -> list[dict]:
    return [json.loads(line) for line in next(out.rglob(f"*_samples_{task}.jsonl")).read_text(
        encoding="utf-8").splitlines()]


def test_lmms_eval_runs_the_exported_group_and_eval_import_agrees(stocked, tmp_path, tiny_llava_dir, run_cli):
    """lmms-eval runs the exported generated tasks with its llava_hf, whose replies are cftools eval's at batch
    size 8, and `cftools eval import` of its samples reads and scores them as cftools eval does; lmms-eval's task
    loader reads the group (an overall score) and the CFMM task as multiple_choice (one request per option), and
    ranked samples import as lmms-eval scores them."""
    from cftools.release.lmms_eval import kind_score, metric_name

    workspace, keys = stocked
    release = export(workspace, tmp_path, "lmms-eval").path
    python = lmms_eval_python(tmp_path / "lmms-venv")
    chat_out, group_out = tmp_path / "lmms-chat", tmp_path / "lmms-ranked"
    results = run_lmms_eval(python, release, tiny_llava_dir, ",".join(COMPARED), chat_out, 8)["results"]
    assert all(not isinstance(v, float) or v == v for task in results.values() for v in task.values())  # no NaN
    assert all("accuracy,none" in results[task] for task in COMPARED)  # what the group averages

    out = tmp_path / "cftools-eval"
    assert run_cli("eval", str(release), "--model", f"hf:{tiny_llava_dir}", "--batch-size", "8", "--device", "cpu",
                   "--out", str(out), "--quiet").exit_code == 0
    mine = {(p["id"], p["which"]): p for p in load_run(out).predictions}
    for task, scores in COMPARED.items():
        asked = []
        docs = [json.loads(line) for line in (release / task / "test.jsonl").read_text().splitlines()]
        for sample in samples_of(chat_out, task):
            doc = docs[sample["doc_id"]]
            reply = sample["filtered_resps"]
            reply = reply[0] if isinstance(reply, list) else reply
            assert reply.strip() == mine[(doc["item_id"], doc["which"])]["raw"], doc  # same prompt, same reply
            asked.append(mine[(doc["item_id"], doc["which"])])
        for group_name, metric in scores:
            expected = kind_score(task.split("_")[1], asked, group_name, metric)
            got = results[task][f"{metric_name(group_name, metric)},none"]
            assert got == pytest.approx(expected, nan_ok=True), (task, group_name, metric)
    imported = import_samples(run_cli, release, chat_out, COMPARED, tmp_path / "imported-chat")
    for key, line in imported.items():  # the same replies, read and scored the same
        assert (line["raw"], line["parsed"], line["correct"]) == (mine[key]["raw"], mine[key]["parsed"],
                                                                  mine[key]["correct"])

    # The group and the ranked CFMM task, as lmms-eval's own task loader reads them. (lmms-eval 0.7.3 cannot rank
    # with llava_hf here: its chat tasks refuse multiple_choice, and its simple llava_hf's loglikelihood passes
    # the processor an <image> token without the image, which transformers 5 refuses.)
    probe = subprocess.run([str(python), "-c", LMMS_EVAL_PROBE, str(release)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    loaded = json.loads(probe.stdout.strip().splitlines()[-1])
    assert loaded["group"] == {"tasks": sorted([*COMPARED, *RANKED]), "metric": "accuracy", "weight_by_size": True}
    assert loaded["bench_cfmm"]["output_type"] == "multiple_choice"
    assert loaded["bench_cfmm"]["requests"] == [len(json.loads(d["options"])) for d in cfmm_docs(release)]
    assert loaded["bench_cvqa"]["output_type"] == "generate_until"

    # Ranked samples as lmms-eval logs them (per option: loss, is_greedy): the import takes the lowest loss and
    # scores as the task's own process_results and aggregations (what lmms-eval reports) do.
    from cftools.release.lmms_eval import TaskFunctions

    functions = TaskFunctions(release, "cfmm", RANKED["bench_cfmm"], ranked=True)
    group_out.mkdir()
    processed = []
    with open(group_out / "20260101_samples_bench_cfmm.jsonl", "w", encoding="utf-8") as fh:
        for n, doc in enumerate(cfmm_docs(release)):
            losses = [[1.0 + ((n + k) * 7 % 5) / 10, False] for k in range(len(json.loads(doc["options"])))]
            result = functions.process_results(doc, [tuple(loss) for loss in losses])
            processed.append(result)
            fh.write(json.dumps({"doc_id": n, "target": doc["gold_option"], "filtered_resps": losses,
                                 **result}) + "\n")
    lines = import_samples(run_cli, release, group_out, RANKED, tmp_path / "imported-ranked")
    for group_name, metric in RANKED["bench_cfmm"]:
        name = metric_name(group_name, metric)
        reported = functions.aggregation(group_name, metric)([p[name] for p in processed])
        assert kind_score("cfmm", list(lines.values()), group_name, metric) == pytest.approx(reported)
    assert all(line["parsed"] == min(line["scores"], key=lambda s: s["mean_loss"])["option"]
               for line in lines.values())  # the option of lowest loss
    assert load_run(tmp_path / "imported-ranked").summary["cfmm"]["rows"][-1]["acc_plus"]["value"] is not None


def cfmm_docs(release: Path) -> list[dict]:
    return [json.loads(line) for line in (release / "bench_cfmm" / "test.jsonl").read_text().splitlines()]


LMMS_EVAL_PROBE = """
import json, sys
from lmms_eval.tasks import TaskManager, get_task_dict
manager = TaskManager(include_path=sys.argv[1])
out = {}
tasks = get_task_dict(["bench"], manager, "simple")
for key, value in tasks.items():
    config = dict(getattr(key, "config", None) or {})
    if config.get("group") == "bench":
        agg = dict(config["aggregate_metric_list"][0])
        out["group"] = {"tasks": sorted(value), "metric": agg["metric"], "weight_by_size": bool(agg["weight_by_size"])}
        for name, task in value.items():
            entry = {"output_type": task.OUTPUT_TYPE}
            if task.OUTPUT_TYPE == "multiple_choice":
                split = task.config.test_split
                meta = {"split": split, "task": name, "repeats": 1}
                entry["requests"] = [len(task.construct_requests(doc_id=i, ctx="q", metadata={**meta, "doc_id": i}))
                                     for i in range(len(task.dataset[split]))]
            out[name] = entry
print(json.dumps(out))
"""


def import_samples(run_cli, release: Path, out: Path, tasks: dict, run_dir: Path) -> dict:
    files = [str(next(out.rglob(f"*_samples_{task}.jsonl"))) for task in tasks]
    outcome = run_cli("eval", "import", str(release), *files, "--out", str(run_dir), "--model", "tiny")
    assert outcome.exit_code == 0, outcome.output
    imported = load_run(run_dir)
    assert len(imported.predictions) == sum(len(samples_of(out, task)) for task in tasks)
    return {(p["id"], p["which"]): p for p in imported.predictions}


# ---------------------------------------------------------------- browse


HOSTILE = '</script><img src=x onerror="window.pwned=1">&amp; <!-- {"a": 1}'


def open_browse(browser, release: Path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto((release / "browse.html").as_uri())
    page.locator("article").first.wait_for()
    return page, dialogs


def loaded_images(page) -> list[dict]:
    """Every image of the page once loaded (each scrolled to: they load lazily): natural and rendered size, place."""
    for image in page.locator("article img").all():
        image.scroll_into_view_if_needed()
    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_function("() => [...document.querySelectorAll('article img')].every(i => i.complete)")
    return page.evaluate("""[...document.querySelectorAll('article img')].map(i => {
        const box = i.getBoundingClientRect();
        return {natural: i.naturalWidth, width: box.width, height: box.height, x: box.x, y: box.y,
                caption: i.parentElement.querySelector('figcaption').textContent, src: i.getAttribute('src')};
    })""")


def test_browse_page_lets_a_person_judge_items_in_chromium(stocked, tmp_path, browser):
    from cftools.models import Item

    workspace, keys = stocked
    with workspace.store.write() as session:  # hostile text in a question and a group name stays text
        from sqlalchemy import select

        item = session.execute(select(Item).where(Item.key == keys["cfmm"][1])).scalar_one()
        item.question, item.group = HOSTILE, "color"
        session.add(item)
    result = export(workspace, tmp_path)
    records = {r["id"]: r for r in load_records(result.path)}
    total = len(records)
    page, dialogs = open_browse(browser, result.path)
    assert page.locator("#shown").inner_text() == f"{total} of {total} shown"
    assert page.locator("article").count() == min(24, total)  # a page of cards, not every item at once

    # the release's order: the C-VQA rows as the peer CSV lists them (their ids are hashes), then the rest by id
    page.select_option("#per-page", "96")
    order = page.eval_on_selector_all("article", "cards => cards.map(c => c.dataset.id)")
    assert sorted(order) == sorted(records)
    cvqa = [i for i in order if records[i]["kind"] == "cvqa"]
    lines = [int(records[i]["data"]["line"].split()[-1]) for i in cvqa]
    assert lines == sorted(lines) and cvqa != sorted(cvqa)
    assert order[:len(cvqa)] == cvqa

    # images large enough to judge by, each loaded; a MuCR pair's cause beside its effect
    images = loaded_images(page)
    assert len(images) == total + len(keys["mucr"])  # one each, two for a MuCR pair
    assert all(i["natural"] > 0 and i["width"] >= 256 and i["height"] >= 256 for i in images)
    mucr = page.locator("article", has=page.locator("h2", has_text=keys["mucr"][0]))
    pair = [i for i in images if i["src"] in mucr.locator("img").evaluate_all("l => l.map(i => i.getAttribute('src'))")]
    assert [i["caption"] for i in pair] == ["cause", "effect"]
    assert pair[0]["y"] == pair[1]["y"] and pair[0]["x"] + pair[0]["width"] <= pair[1]["x"]

    # fields as labelled text, each explanation a paragraph of its own, no JSON anywhere
    labels = mucr.locator("dt").all_inner_texts()
    assert {"question", "cue", "false cues", "explanations", "cause caption", "effect caption"} <= set(labels)
    explanations = mucr.locator("dt:text-is('explanations') + dd p")
    assert explanations.count() == 3 and explanations.first.inner_text().startswith("In the first image")
    assert "selection · cause provenance · model" in labels
    assert not [t for t in page.locator("dd").all_inner_texts() if t.lstrip().startswith(("{", "["))]

    # hostile text shown as it is, nothing run, no image made of it
    hostile = page.locator("article", has=page.locator("h2", has_text=keys["cfmm"][1]))
    assert hostile.locator("dt:text-is('question') + dd").inner_text() == HOSTILE
    assert hostile.locator("img").count() == 1 and not page.evaluate("window.pwned") and not dialogs

    # click to enlarge; Escape closes
    first = page.locator("article img").first
    first.click()
    big = page.locator("#lightbox img")
    assert page.locator("#lightbox").is_visible() and big.evaluate("i => i.src") == first.evaluate("i => i.src")
    assert big.evaluate("i => i.getBoundingClientRect().width") > first.evaluate("i => i.getBoundingClientRect().width")
    save_screenshot(page, "browse-lightbox")
    page.keyboard.press("Escape")
    assert page.locator("#lightbox").is_hidden()

    # search by id and by text; facets; pages
    page.fill("#search", keys["cfmm"][2])
    page.wait_for_function("() => document.querySelectorAll('article').length === 1")
    assert page.locator("#shown").inner_text() == f"1 of {total} shown"
    page.fill("#search", "CATCH COLD")
    page.wait_for_function(f"() => document.getElementById('shown').textContent.startsWith('{len(keys['mucr'])} of ')")
    page.fill("#search", "")
    page.wait_for_function(f"() => document.getElementById('shown').textContent === '{total} of {total} shown'")
    page.select_option("select[data-facet=kind]", "cfmm")
    assert page.locator("article").count() == len(keys["cfmm"])
    assert "yellow" in page.locator("article").first.locator("dt:text-is('options') + dd").inner_text()
    page.select_option("select[data-facet=kind]", "")
    page.select_option("#per-page", "12")
    first_page = page.eval_on_selector_all("article", "cards => cards.map(c => c.dataset.id)")
    page.click("#next")
    assert page.locator("#page").inner_text() == f"page 2 of {-(-total // 12)}"
    second_page = page.eval_on_selector_all("article", "cards => cards.map(c => c.dataset.id)")
    assert first_page + second_page == order[:len(first_page) + len(second_page)]
    page.click("#prev")
    save_screenshot(page, "browse-release")
    page.context.close()


@pytest.mark.parametrize("fmt", ["cvqa", "cfmm", "mucr", "vlmevalkit", "lmms-eval"])
def test_browse_page_shows_the_images_of_every_format(stocked, tmp_path, browser, fmt):
    workspace, keys = stocked
    result = export(workspace, tmp_path, fmt)
    page, _ = open_browse(browser, result.path)
    page.select_option("#per-page", "96")
    images = loaded_images(page)
    shown = int(page.locator("#shown").inner_text().split()[0])
    assert images and len(images) >= shown
    assert all(i["natural"] > 0 and i["width"] >= 256 for i in images), [i["src"] for i in images if not i["natural"]]
    save_screenshot(page, f"browse-{fmt}")
    page.context.close()
