"""Issue 45, every error one line naming the cause: harness files that are not what they claim (a workbook of
random bytes or none, a VLMEvalKit `index` that is no row index, an lmms-eval sample that logged no reply)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from test_annotate import make_items, mark_checked

from cftools.evaluate.run import load_run


@pytest.fixture
def releases(workspace, run_cli, tmp_path) -> dict[str, Path]:
    make_items(run_cli, tmp_path / "imgs", 3)
    mark_checked(workspace.store)
    return {fmt: workspace.root / "releases" / f"r-1-{fmt}" for fmt in ("vlmevalkit", "lmms-eval")
            if run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified",
                       "--format", fmt).exit_code == 0}


def one_line_error(out, *names: str) -> str:
    text = out.output.strip()
    assert out.exit_code == 1 and "Traceback" not in text, text
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), text
    for name in names:
        assert name in " ".join(lines[0].split()), lines[0]
    return lines[0]


def vlmevalkit_rows(release: Path) -> list[dict]:
    csv.field_size_limit(sys.maxsize)
    rows = []
    for table in sorted(release.glob("*.tsv")):
        with open(table, encoding="utf-8", newline="") as fh:
            rows += [{k: v for k, v in row.items() if k != "image"} for row in csv.DictReader(fh, delimiter="\t")]
    return rows


def write_tsv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("content", [b"", b"\x8f\x01PK\x03garbage" * 50], ids=["empty", "random-bytes"])
def test_a_workbook_that_is_not_one_is_one_line(releases, run_cli, tmp_path, content):
    book = tmp_path / "model_CF_r_cvqa_OpenEnded.xlsx"
    book.write_bytes(content)
    one_line_error(run_cli("eval", "import", releases["vlmevalkit"], book, "--out", tmp_path / "run"),
                   book.name, "cannot read the prediction file", "not an xlsx workbook")


@pytest.mark.parametrize("index", ["-1", "abc", "1.5"])
def test_a_vlmevalkit_index_that_is_no_row_index_is_refused(releases, run_cli, tmp_path, index):
    rows = [{**row, "prediction": "2"} for row in vlmevalkit_rows(releases["vlmevalkit"])]
    assert rows and all(row["index"].isdigit() for row in rows)
    good = write_tsv(tmp_path / "good.tsv", rows)
    assert run_cli("eval", "import", releases["vlmevalkit"], good, "--out", tmp_path / "good-run").exit_code == 0
    rows[1]["index"] = index
    bad = write_tsv(tmp_path / "bad.tsv", rows)
    one_line_error(run_cli("eval", "import", releases["vlmevalkit"], bad, "--out", tmp_path / "run"),
                   "bad.tsv, row 3", f"index {index!r} is not a whole number")


def test_an_lmms_eval_sample_with_no_reply_is_unanswered_not_the_text_brackets(releases, run_cli, tmp_path):
    release = releases["lmms-eval"]
    docs = [json.loads(line) for task in sorted(release.glob("*/*.jsonl"))
            for line in task.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(docs) >= 2 and all("item_id" in d and "which" in d for d in docs)
    samples = tmp_path / "model_samples_cf.jsonl"
    samples.write_text("".join(json.dumps({"doc_id": n, "doc": doc, "filtered_resps": [] if n == 0 else ["2"]}) + "\n"
                               for n, doc in enumerate(docs)), encoding="utf-8")
    out = run_cli("eval", "import", release, samples, "--out", tmp_path / "run")
    assert out.exit_code == 0, out.output
    run = load_run(tmp_path / "run")
    assert len(run.predictions) == len(docs) - 1
    assert all(p.get("raw") != "[]" and p.get("output") != "[]" for p in run.predictions)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["skipped"]["not_answered"] >= 1
