"""Results that cannot go stale: a run's identity, the Prediction table, eval's help, the report at 80 columns."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from sqlalchemy import select

from cftools.errors import CftoolsError
from cftools.evaluate.report import rich_tables
from cftools.evaluate.run import EvalOptions, PREDICTIONS_NAME, run_eval
from cftools.evaluate.metrics import summarize
from cftools.models import EvalRun, Prediction
from fixtures_eval import cvqa_record, png_bytes, write_release


def count_release(folder, counterfactual_answer: str):
    records = [cvqa_record(i, "numerical-direct", "2", counterfactual_answer, "number") for i in range(2)]
    return write_release(folder, records, {r["id"]: png_bytes(n) for n, r in enumerate(records)})


def test_a_changed_release_starts_a_new_run_and_says_why(tiny_llava_dir, tmp_path, workspace):
    release = count_release(tmp_path / "release-1.0", "3")
    model = f"hf:{tiny_llava_dir}"
    first = run_eval(release, model, options=EvalOptions(device="cpu", max_new_tokens=4), workspace=workspace)
    assert first.asked == 4 and first.notes == []
    assert first.config["release_manifest_sha256"]

    same = run_eval(release, model, options=EvalOptions(device="cpu", max_new_tokens=4), workspace=workspace)
    assert same.out_dir == first.out_dir and same.asked == 0

    # `export --force` of a changed release at the same path: new gold, so new run, and eval says why.
    count_release(release, "5")
    heard: list[str] = []
    second = run_eval(release, model, options=EvalOptions(device="cpu", max_new_tokens=4), workspace=workspace,
                      notify=heard.append)
    assert second.out_dir != first.out_dir
    assert second.asked == 4
    assert {p["gold"] for p in second.predictions if p["which"] == "counterfactual"} == {"5"}
    assert len(second.notes) == 1 and heard == second.notes
    assert "the release changed (manifest SHA-256)" in second.notes[0]
    assert first.out_dir.name in second.notes[0]


def test_an_explicit_out_folder_refuses_a_changed_release(tiny_llava_dir, tmp_path):
    release = count_release(tmp_path / "release-1.0", "3")
    out = tmp_path / "run"
    run_eval(release, f"hf:{tiny_llava_dir}", options=EvalOptions(device="cpu", out_dir=out, max_new_tokens=2, limit=1))
    count_release(release, "5")
    with pytest.raises(CftoolsError, match=r"the release changed \(manifest SHA-256\)"):
        run_eval(release, f"hf:{tiny_llava_dir}",
                 options=EvalOptions(device="cpu", out_dir=out, max_new_tokens=2, limit=1))


def test_predictions_are_written_to_the_store(tiny_llava_dir, tmp_path, workspace):
    release = count_release(tmp_path / "release-1.0", "3")
    result = run_eval(release, f"hf:{tiny_llava_dir}", options=EvalOptions(device="cpu", max_new_tokens=4),
                      workspace=workspace)
    run_eval(release, f"hf:{tiny_llava_dir}", options=EvalOptions(device="cpu", max_new_tokens=4),
             workspace=workspace)  # no duplicates
    lines = [json.loads(line) for line in (result.out_dir / PREDICTIONS_NAME).read_text().splitlines()]
    with workspace.store.session() as session:
        run = session.execute(select(EvalRun)).scalar_one()
        rows = session.execute(select(Prediction).where(Prediction.run_id == run.id)).scalars().all()
        got = {(r.item_key, r.which): (r.raw, r.parsed, r.correct) for r in rows}
    assert got == {(line["id"], line["which"]): (line["raw"], line["parsed"], line["correct"]) for line in lines}


def cvqa_summary() -> dict:
    """A C-VQA summary with long group names, three-digit n and intervals (what cut numbers before)."""
    outcomes = []
    for g, group in enumerate(("numerical-direct", "numerical-indirect", "boolean")):
        for i in range(140):
            outcomes.append({"id": f"{g}-{i}", "kind": "cvqa", "group": group,
                             "original": {"correct": i % 3 != 0, "unknown": i % 7 == 0},
                             "counterfactual": {"correct": i % 4 == 0, "unknown": i % 5 == 0}})
    return summarize(outcomes)


@pytest.mark.parametrize("width", [80, 60])
def test_terminal_report_keeps_every_number_at_80_columns(width):
    summary = cvqa_summary()
    config = {"model": "hf:some/model", "mode": "generate", "score": None, "release_name": "r", "items": 420,
              "questions": 840, "template": "short_answer"}
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    for part in rich_tables(config, summary, width=width):
        console.print(part)
    text = buffer.getvalue()
    assert "…" not in text
    for row in summary["cvqa"]["rows"]:
        assert str(row["n"]) in text
        for metric in ("original", "counterfactual"):
            assert f"{100 * row[metric]['value']:.1f}" in text
    table_lines = [line for line in text.splitlines() if "│" in line or "┃" in line]
    assert table_lines and all(len(line) <= width for line in table_lines)
