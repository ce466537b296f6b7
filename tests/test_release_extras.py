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

from release_stock import stock_every_kind
from test_browser import UI_TIMEOUT_MS, browser, save_screenshot  # noqa: F401 (browser: a fixture)

from cftools.release.export import export_release
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
    return export_release(workspace, NAME, VERSION, tmp_path / "out", fmt=fmt, licence="CC-BY-4.0",
                          options={"allow_small_groups": True, **options})


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
    workspace, _ = stocked
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
    assert verify_release(result.path).ok


# ---------------------------------------------------------------- vlmevalkit


def test_vlmevalkit_tsvs_hold_base64_images_and_letters(stocked, tmp_path):
    workspace, keys = stocked
    result = export(workspace, tmp_path, "vlmevalkit")
    names = sorted(p.name for p in result.path.glob("*.tsv"))
    assert names == ["CF_bench_cfmm_MCQ.tsv", "CF_bench_cvqa_VQA.tsv", "CF_bench_mucr_MCQ.tsv",
                     "CF_bench_mucr_VQA.tsv"]
    assert all(not n.upper().startswith("CVQA") for n in names)  # VLMEvalKit's own CVQA is another benchmark
    csv.field_size_limit(sys.maxsize)
    with open(result.path / "CF_bench_cfmm_MCQ.tsv", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert len(rows) == 2 * len(keys["cfmm"]) and [r["index"] for r in rows] == [str(n) for n in range(len(rows))]
    for row in rows:
        picture = base64.b64decode(row["image"])
        assert (result.path / "images" / f"{hashlib.sha256(picture).hexdigest()}.png").is_file()
        options = [row[letter] for letter in "ABCD" if row[letter]]
        gold = "blue" if row["l2-category"] == "counterfactual" else "red"
        assert options[ord(row["answer"]) - ord("A")] == gold
    with open(result.path / "CF_bench_mucr_VQA.tsv", encoding="utf-8", newline="") as fh:
        choice_rows = list(csv.DictReader(fh, delimiter="\t"))
    assert {r["l2-category"] for r in choice_rows} == {"c2e", "e2c"}
    assert all(len(json.loads(r["image"])) == 5 and r["answer"] in "ABCD" for r in choice_rows)


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
    for kind, names in tasks.items():
        for name in names:
            task = task_yaml(result.path / name / f"{name}.yaml")
            assert task["task"] == name and task["tag"] == "bench"
            assert task["process_results"] == ("function", "utils.process_results")
            docs = [json.loads(line) for line in (result.path / name / "test.jsonl").read_text().splitlines()]
            assert {d["item_id"] for d in docs} == set(keys[kind])
            assert all((result.path / image).is_file() for d in docs for image in d["images"])
    mucr = task_yaml(result.path / "bench_mucr_c2e_e2c" / "bench_mucr_c2e_e2c.yaml")
    assert mucr["generation_kwargs"]["max_new_tokens"] == 4

    def metric_names(name: str) -> set[str]:
        return {m["metric"] for m in task_yaml(result.path / name / f"{name}.yaml")["metric_list"]}

    assert {"color_acc_plus", "sum_of_types_acc_plus", "color_acc_b", "color_acc_c"} <= metric_names("bench_cfmm")
    assert {"total_c2e", "total_e2c"} <= metric_names("bench_mucr_c2e_e2c")
    assert "total_cue" not in metric_names("bench_mucr_c2e_e2c") and "total_cue" in metric_names("bench_mucr_cue")
    assert {"numerical_direct_counterfactual", "total_drop"} <= metric_names("bench_cvqa")


def lmms_eval_python(root: Path) -> Path:
    """A venv that sees this environment's packages, with lmms-eval and its pure-Python imports installed into it
    from the package index (no dependencies: lmms-eval's own would replace torch)."""
    import site

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


COMPARED = {  # task -> the scores compared with cftools' own (group, metric)
    "bench_cvqa": [("total", "original"), ("total", "counterfactual"), ("total", "unknown_original")],
    "bench_cfmm": [("color", "acc_b"), ("color", "acc_c"), ("color", "acc_plus"), ("sum of types", "acc_plus")],
    "bench_mucr_c2e_e2c": [("total", "c2e"), ("total", "e2c")],
    "bench_mucr_cue": [("total", "cue")],
}


def test_lmms_eval_runs_the_exported_task_and_agrees_with_cftools_eval(stocked, tmp_path, tiny_llava_dir,
                                                                        run_cli):
    from cftools.release.lmms_eval import kind_score, metric_name

    workspace, keys = stocked
    release = export(workspace, tmp_path, "lmms-eval").path
    python = lmms_eval_python(tmp_path / "lmms-venv")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    limit = 8  # per task: C-VQA and CFMM the first 4 items (original and counterfactual), MuCR a part
    done = subprocess.run([str(python), "-m", "lmms_eval", "eval", "--model", "llava_hf", "--model_args",
                           f"pretrained={tiny_llava_dir},device=cpu,device_map=cpu", "--include_path", str(release),
                           "--tasks", ",".join(COMPARED), "--limit", str(limit), "--batch_size", "1",
                           "--output_path", str(tmp_path / "lmms-out"), "--log_samples"],
                          capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(next((tmp_path / "lmms-out").rglob("*_results.json")).read_text())["results"]

    out = tmp_path / "cftools-eval"
    assert run_cli("eval", str(release), "--model", f"hf:{tiny_llava_dir}", "--batch-size", "1", "--device", "cpu",
                   "--out", str(out), "--quiet").exit_code == 0
    predictions = {(p["id"], p["which"]): p for p in map(json.loads, (out / "predictions.jsonl").read_text(
        encoding="utf-8").splitlines())}
    for task, scores in COMPARED.items():
        samples = [json.loads(line) for line in next((tmp_path / "lmms-out").rglob(f"*_samples_{task}.jsonl"))
                   .read_text(encoding="utf-8").splitlines()]
        docs = [json.loads(line) for line in (release / task / "test.jsonl").read_text().splitlines()]
        assert len(samples) == min(limit, len(docs))
        asked = []
        for sample in samples:
            doc = docs[sample["doc_id"]]
            mine = predictions[(doc["item_id"], doc["which"])]
            reply = sample["filtered_resps"]
            reply = reply[0] if isinstance(reply, list) else reply
            assert reply.strip() == mine["raw"], doc  # the same prompt, images and greedy decoding: the same reply
            asked.append(mine)
        kind = task.split("_")[1]
        for group, metric in scores:
            expected = kind_score(kind, asked, group, metric)  # cftools' own score of the same questions' predictions
            got = results[task][f"{metric_name(group, metric)},none"]
            assert got == pytest.approx(expected, nan_ok=True), (task, group, metric)


# ---------------------------------------------------------------- browse


def test_browse_page_shows_items_and_filters_in_chromium(stocked, tmp_path, browser):
    workspace, keys = stocked
    result = export(workspace, tmp_path)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    page.goto((result.path / "browse.html").as_uri())
    total = sum(len(v) for v in keys.values())
    assert page.locator("article").count() == total
    assert page.locator("#shown").inner_text() == f"{total} shown"
    broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length")
    assert broken == 0 and page.evaluate("document.images.length") >= total
    page.select_option("select[data-facet=kind]", "mucr")
    assert page.locator("article:visible").count() == len(keys["mucr"])
    first = page.locator("article:visible").first
    assert "catch cold" in first.inner_text() and "false cues" in first.inner_text()
    assert first.locator("img").count() == 2  # the cause and the effect image
    page.select_option("select[data-facet=kind]", "cfmm")
    assert page.locator("article:visible").count() == len(keys["cfmm"])
    assert "yellow | blue | red | black" in page.locator("article:visible").first.inner_text()
    page.select_option("select[data-facet=kind]", "")
    page.select_option("select[data-facet=group]", "color")
    assert page.locator("#shown").inner_text() == f"{len(keys['cfmm'])} shown"
    page.select_option("select[data-facet=group]", "")
    save_screenshot(page, "browse-release")
    context.close()
