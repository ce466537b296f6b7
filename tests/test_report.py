"""`cftools report` (issue 48): the funnel counts equal the store's (counted here independently, in SQL on the
store file), cost per accepted item from the recorded tokens and the workspace's prices, people's time from Label
Studio's lead_time, why items die, the redo counts; every JSON key documented; no personal data in the page or
the JSON."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from funnel_stock import COMMENT, GENERATORS, PEOPLE, TOKENS, price_workspace, stock_funnel
from pg_server import fresh_database
from test_postgres import postgres_url  # noqa: F401 (a fixture)

from cftools.boundary import workspace_boundary
from cftools.funnel.facts import STAGES
from cftools.workspace import find_workspace

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "report.md"


@pytest.fixture
def funnel_workspace(workspace, tmp_path):
    """The funnel's store (tests/funnel_stock.py), with prices for its two models; the workspace opened again so
    that it reads them."""
    price_workspace(workspace)
    ids = stock_funnel(workspace, tmp_path / "files")
    workspace.close()
    reopened = find_workspace(workspace.root)
    yield reopened, ids
    reopened.close()


def report_json(run_cli) -> dict:
    result = run_cli("report", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def store_file(workspace) -> Path:
    from cftools.store_health import sqlite_file

    return sqlite_file(workspace.db_url)


def members_in_sql(db: Path, release_keys: set[str]) -> tuple[dict[str, set[str]], dict[str, str]]:
    """Each stage's item keys, found straight from the tables (not through cftools), and each key's kind / group."""
    queries = {
        "ingested": "SELECT id FROM items",
        "drafted": "SELECT id FROM items WHERE origin = 'generated' OR generation_id IS NOT NULL",
        "flagged": "SELECT DISTINCT item_id FROM check_flags",
        "waived": "SELECT id FROM items WHERE json_extract(data, '$.waived_flags') IS NOT NULL "
                  "AND json_extract(data, '$.waived_flags') != '{}'",
        "pushed": "SELECT DISTINCT item_id FROM annotation_tasks WHERE purpose NOT IN ('control', 'audit', 'measure')",
        "accepted": "SELECT id FROM items WHERE status = 'accepted' AND (proposed_answer IS NULL "
                    "OR proposed_answer = answer)",
        "corrected": "SELECT id FROM items WHERE status = 'accepted' AND proposed_answer IS NOT NULL "
                     "AND proposed_answer != answer",
        "rejected": "SELECT id FROM items WHERE status = 'rejected'",
        "adjudicated": "SELECT DISTINCT item_id FROM annotation_tasks WHERE purpose = 'adjudicate' "
                       "AND state = 'decided'",
    }
    with sqlite3.connect(db) as connection:
        # control items only measure people: in no stage
        key_of = {i: key for i, key in connection.execute("SELECT id, key FROM items WHERE status != 'control'")}
        row_of = {key_of[i]: f"{k} / {g}" for i, k, g in connection.execute('SELECT id, kind, "group" FROM items')
                  if i in key_of}
        members = {stage: {key_of[r[0]] for r in connection.execute(sql) if r[0] in key_of}
                   for stage, sql in queries.items()}
        for code, in connection.execute("SELECT DISTINCT code FROM check_flags"):
            members[f"flag:{code}"] = {key_of[r[0]] for r in connection.execute(
                "SELECT item_id FROM check_flags WHERE code = ?", (code,))}
    members["released"] = set(key_of.values()) & release_keys
    return members, row_of


def counted_in_sql(db: Path, release_keys: set[str]) -> dict[str, dict[str, int]]:
    """Each stage's items per kind / group, counted from `members_in_sql`."""
    members, row_of = members_in_sql(db, release_keys)
    counts: dict[str, dict[str, int]] = {}
    for stage in STAGES:
        for key in members[stage]:
            counts.setdefault(row_of[key], {s: 0 for s in STAGES})[stage] += 1
    return counts


def release_keys(tmp_path: Path) -> set[str]:
    records = next((tmp_path / "files" / "releases").glob("*/records.jsonl"))
    return {json.loads(line)["id"] for line in records.read_text(encoding="utf-8").splitlines() if line.strip()}


def test_the_funnel_counts_equal_the_stores(funnel_workspace, run_cli, tmp_path):
    workspace, _ = funnel_workspace
    data = report_json(run_cli)
    expected = counted_in_sql(store_file(workspace), release_keys(tmp_path))
    assert {row["name"]: row["counts"] for row in data["funnel"]["group"]} == expected
    total = data["funnel"]["total"]["counts"]
    assert total == {stage: sum(row[stage] for row in expected.values()) for stage in STAGES}
    # the control task on the flagged draft does not push it; the waived flag's item went on to be adjudicated
    assert total["ingested"] == 7 and total["pushed"] == 6 and total["adjudicated"] == 1 and total["released"] == 4
    assert data["funnel"]["total"]["flagged_by_code"] == {"arithmetic": 1, "leakage": 1}
    assert data["inputs"] == {"source_questions": 7, "source_questions_drafted": 6}
    assert data["funnel"]["total"]["decided"] == 5 and data["funnel"]["total"]["acceptance"] == 0.8


def test_the_funnel_per_generator_names_model_template_variant_and_edit_backend(funnel_workspace, run_cli):
    data = report_json(run_cli)
    rows = {row.get("prompt_variant") or row.get("model") or row["name"]: row for row in data["funnel"]["generator"]}
    terse = rows["terse"]
    assert {k: terse[k] for k in GENERATORS["b"]} == GENERATORS["b"]
    assert terse["counts"]["drafted"] == 4 and terse["counts"]["rejected"] == 1
    assert rows["stub-a"]["counts"]["corrected"] == 1 and rows["stub-a"]["counts"]["accepted"] == 1
    assert rows["(ingested: no generator)"]["counts"]["drafted"] == 0
    edits = {row["name"]: row["counts"] for row in data["funnel"]["edit_backend"]}
    assert edits["diffusers:instruct-pix2pix"]["flagged"] == 1 and edits["(no edited images)"]["ingested"] == 6


def test_cost_per_accepted_item_from_tokens_prices_and_lead_times(funnel_workspace, run_cli):
    data = report_json(run_cli)
    costs = {row["name"]: row for row in data["cost"]["generator"]}
    a = next(row for name, row in costs.items() if "stub-a" in name)
    b = next(row for name, row in costs.items() if "stub-b" in name)
    call_a = (TOKENS[0] * 1.0 + TOKENS[1] * 2.0) / 1e6
    retry_a = TOKENS[0] * 1.0 / 1e6  # the failed call without an item still cost money
    assert a["calls"] == 3 and a["accepted"] == 2
    assert a["money"] == pytest.approx(2 * call_a + retry_a)
    assert a["money_per_accepted"] == pytest.approx((2 * call_a + retry_a) / 2)
    assert a["people_seconds"] == pytest.approx(10 + 20 + 30 + 40)
    assert a["people_seconds_per_accepted"] == pytest.approx(50)
    call_b = (TOKENS[0] * 3.0 + TOKENS[1] * 6.0) / 1e6
    assert b["money"] == pytest.approx(4 * call_b) and b["accepted"] == 2
    # the adjudication's 60 s counts toward the adjudicated item's row
    assert b["people_seconds"] == pytest.approx(5 + 7 + 11 + 13 + 60 + 9 + 8)
    groups = {row["name"]: row for row in data["cost"]["group"]}
    assert groups["cvqa / numerical_direct"]["calls"] == 5  # two of a, two of b, a's failed retry


def test_why_items_die_and_redo(funnel_workspace, run_cli):
    data = report_json(run_cli)
    deaths = data["deaths"]
    codes = {row["code"]: row for row in deaths["check_codes"]}
    assert codes["arithmetic"]["died"] == 1 and codes["leakage"]["died"] == 0
    reasons = {row["reason"]: row for row in deaths["people_reasons"]}
    assert reasons["flag: ambiguous"]["count"] == 2 and reasons["not about the image"]["count"] == 2
    assert [e["item"] for e in reasons["flag: ambiguous"]["examples"]] == ["cvqa:f3", "cvqa:f3"]
    hot = deaths["hot_spots"][0]
    assert (hot["by"], hot["name"], hot["disputed"], hot["share"]) == ("group", "cvqa / numerical_indirect", 1, 1.0)
    assert data["redo"] == [{"kind": "cvqa", "generator": data["redo"][0]["generator"], "redone": 1, "decided": 1,
                             "accepted": 1, "acceptance": 1.0}]
    assert "variant terse" in data["redo"][0]["generator"]
    assert sum(day["decided"] for day in data["acceptance_over_time"]) == 5


def test_an_item_whose_first_edit_candidate_failed_is_under_its_edit_backend(funnel_workspace, run_cli):
    """`generate edits` stores the candidates that were made, keyed by their number: when candidate 0 failed, the
    item's edited images are still its backend's (the report read candidate 0 only and said it had none)."""
    from cftools.models import Item

    workspace, ids = funnel_workspace
    with workspace.store.write() as session:
        item = session.get(Item, ids["cvqa:f4"])
        data = dict(item.data)
        data["edit_candidates"] = {"1": data["edit_candidates"]["0"], "2": data["edit_candidates"]["0"]}
        data["edit_failures"] = [{"k": 0, "reason": "out of memory"}]
        item.data = data
    edits = {row["name"]: row["counts"] for row in report_json(run_cli)["funnel"]["edit_backend"]}
    assert edits["diffusers:instruct-pix2pix"]["ingested"] == 1 and edits["(no edited images)"]["ingested"] == 6


def test_the_cost_plot_draws_every_generator_apart():
    """Two generators whose names end alike (two models, one long template and variant) are two bars with two
    labels: the plot cut names to their end, and matplotlib drew both under one label, one bar over the other."""
    from matplotlib.figure import Figure

    from cftools.funnel.page import draw_cost

    names = [f"rewrite · openai:{model} · rewrite_numerical_terse@b2b2b2b2b2b2 · variant terse"
             for model in ("stub-a", "stub-b")] + ["rewrite · openai:stub-c · rewrite@a1a1a1a1a1a1"]
    rows = [{"name": name, "accepted": 2, "money": 1.0 + n, "money_per_accepted": 0.5 + n, "tokens_per_accepted": 10}
            for n, name in enumerate(names)]
    axes = Figure().add_subplot()
    draw_cost(axes, {"cost": {"generator": rows}})
    bars = sorted((patch.get_y(), patch.get_width()) for patch in axes.patches)
    assert len({y for y, _ in bars}) == 3 and [w for _, w in bars] == [0.5, 1.5, 2.5]
    labels = [label.get_text() for label in axes.get_yticklabels()]
    assert len(set(labels)) == 3
    assert any("stub-a" in label for label in labels) and any("stub-b" in label for label in labels)


def test_an_edit_checks_flag_kills_no_draft(funnel_workspace, run_cli):
    """An edit check ranks an item's edited images and never holds the item (`cftools.checks.runner.text_codes`): a
    draft flagged only by one is waiting, not dead; with a text check's flag beside it, the text check holds it."""
    from sqlalchemy import update

    from cftools.models import CheckFlag

    workspace, ids = funnel_workspace
    with workspace.store.write() as session:  # cvqa:f4 is a draft; its one flag becomes an edit check's
        session.execute(update(CheckFlag).where(CheckFlag.item_id == ids["cvqa:f4"]).values(code="edit_misaligned"))
    codes = {row["code"]: row for row in report_json(run_cli)["deaths"]["check_codes"]}
    assert (codes["edit_misaligned"]["flagged"], codes["edit_misaligned"]["died"]) == (1, 0)
    with workspace.store.write() as session:
        session.add(CheckFlag(item_id=ids["cvqa:f4"], code="arithmetic", reason="2 + 1 is not 4"))
    codes = {row["code"]: row for row in report_json(run_cli)["deaths"]["check_codes"]}
    # the item died, held by arithmetic (an item's death is counted under each of its codes)
    assert codes["arithmetic"]["died"] == 1 and codes["edit_misaligned"]["died"] == 1


def decisions_in_sql(db: Path) -> dict[str, dict[str, list[int]]]:
    """Per kind, per day of each decided item's last decision: [decided, accepted], straight from the tables."""
    query = ("SELECT kind, status, (SELECT date(created_at) FROM item_events e WHERE e.item_id = items.id "
             "AND e.to_status IN ('accepted', 'rejected') ORDER BY e.id DESC LIMIT 1) FROM items "
             "WHERE status IN ('accepted', 'rejected')")
    found: dict[str, dict[str, list[int]]] = {}
    with sqlite3.connect(db) as connection:
        for kind, status, day in connection.execute(query):
            counts = found.setdefault(kind, {}).setdefault(day, [0, 0])
            counts[0] += 1
            counts[1] += status == "accepted"
    return found


def test_acceptance_over_time_is_one_series_per_kind(funnel_workspace, run_cli):
    from matplotlib.figure import Figure
    from sqlalchemy import update

    from cftools.funnel.page import draw_over_time
    from cftools.models import Item

    workspace, ids = funnel_workspace
    with workspace.store.write() as session:  # two kinds decided: one accepted and one rejected item become cfmm
        session.execute(update(Item).where(Item.id.in_([ids["cvqa:f2"], ids["cvqa:f3"]])).values(kind="cfmm"))
        session.execute(update(Item).where(Item.id == ids["cvqa:f4"]).values(kind="mucr"))  # a draft: no decision
    data = report_json(run_cli)
    expected = decisions_in_sql(store_file(workspace))
    by_kind = data["acceptance_over_time_by_kind"]
    assert by_kind.pop("mucr") == []
    assert set(by_kind) == {"cvqa", "cfmm"} == set(expected)
    for kind, days in by_kind.items():
        assert {d["day"]: [d["decided"], d["accepted"]] for d in days} == expected[kind], kind
        assert all(d["acceptance"] == round(d["accepted"] / d["decided"], 4) for d in days)
    assert sum(d["decided"] for days in by_kind.values() for d in days) == 5
    every = {d["day"]: d["decided"] for d in data["acceptance_over_time"]}
    assert every == {day: sum(c[0] for k in expected.values() for d, c in k.items() if d == day) for day in every}
    axes = Figure().add_subplot()
    draw_over_time(axes, data)
    lines = {line.get_label(): list(line.get_ydata()) for line in axes.get_lines()}
    assert set(lines) == {"all kinds", "cvqa", "cfmm"}
    for kind, days in by_kind.items():
        assert lines[kind] == [d["acceptance"] for d in days]


def test_no_personal_data_in_the_page_or_the_json(funnel_workspace, run_cli, tmp_path):
    workspace, _ = funnel_workspace
    out = tmp_path / "out" / "report.html"
    result = run_cli("report", "--out", out)
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    text = json.dumps(report_json(run_cli))
    boundary = workspace_boundary(workspace)
    for what in (page, text):
        assert boundary.findings(what) == []
        for person in PEOPLE:
            assert person not in what and person.split("@")[0] not in what
        assert str(workspace.root) not in what and "/home/alice" not in what and str(tmp_path) not in what
        assert boundary.pseudonym(PEOPLE[0]) in what
    assert COMMENT not in page and "two readings: ask " + boundary.pseudonym(PEOPLE[2]) in page


def test_the_page_refers_to_images_relatively_and_holds_every_section(funnel_workspace, run_cli, tmp_path):
    out = tmp_path / "out" / "report.html"
    assert run_cli("report", "--out", out).exit_code == 0
    page = out.read_text(encoding="utf-8")
    for section in ("funnel", "plots", "cost", "deaths", "calibration", "variants", "redo", "drill"):
        assert f'<section id="{section}">' in page
    drill = json.loads(re.search(r'<script type="application/json" id="drill-index">(.*?)</script>', page).group(1))
    images = drill["images"]
    assert len(images) == 7 and all(not name.startswith("/") for name in images)
    assert all((out.parent / name).is_file() for name in images)
    assert page.count('src="data:image/png;base64,') == 3


def test_every_json_key_is_documented(funnel_workspace, run_cli):
    data = report_json(run_cli)
    text = DOCS.read_text(encoding="utf-8")
    keys = set(data) | set(data["funnel"]) | set(data["cost"]) | set(data["deaths"]) | set(STAGES)
    keys |= set(data["cost"]["generator"][0]) | set(data["funnel"]["generator"][-1])
    keys |= set(data["deaths"]["check_codes"][0]) | set(data["deaths"]["people_reasons"][0])
    keys |= set(data["deaths"]["hot_spots"][0]) | set(data["redo"][0]) | set(data["acceptance_over_time"][0])
    keys |= set(data["acceptance_over_time_by_kind"]["cvqa"][0])
    missing = sorted(key for key in keys if f"`{key}`" not in text)
    assert not missing, f"docs/report.md does not document {missing}"


def test_an_empty_store_reports_zeros(workspace, run_cli, tmp_path):
    data = report_json(run_cli)
    assert data["items"] == 0 and data["funnel"]["group"] == [] and data["redo"] == []
    assert not (workspace.root / "report.html").exists()  # --json alone writes no page
    result = run_cli("report")
    assert result.exit_code == 0 and (workspace.root / "report.html").is_file()
    assert "0 items: ingested 0" in result.output


def test_a_damaged_release_records_file_is_one_line_naming_it(funnel_workspace, tmp_path):
    from click.testing import CliRunner

    from cftools.cli import main

    records = next((tmp_path / "files" / "releases").glob("*/records.jsonl"))
    with open(records, "a", encoding="utf-8") as fh:
        fh.write("{not json\n")
    result = CliRunner().invoke(main, ["report", "--json"])
    assert result.exit_code == 1
    assert "records.jsonl" in result.output and "line" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


CALIBRATION = {"definition": "precision: of the flagged drafts people measured, the share they rejected",
               "checks": [{"code": "arithmetic", "measured": 20, "people_rejected": 4, "precision": 0.2,
                           "interval": [0.08, 0.42], "low": True},
                          {"code": "leakage", "measured": 10, "people_rejected": 9, "precision": 0.9,
                           "interval": [0.6, 0.98], "low": False}],
               "misses": {"people_rejected": 12, "unflagged": 3, "miss_rate": 0.25, "interval": [0.09, 0.53],
                          "per_check": []},
               "low_precision_below": 0.5}
VARIANTS = {"definition": "acceptance = accepted / decided",
            "arms": [{"by": "prompt_variant", "kind": "cvqa", "generator": "rewrite", "name": "terse", "decided": 50,
                      "accepted": 40, "acceptance": 0.8, "interval": [0.67, 0.89], "cost_per_accepted": 0.01},
                     {"by": "prompt_variant", "kind": "cvqa", "generator": "rewrite", "name": "(default)",
                      "decided": 50, "accepted": 20, "acceptance": 0.4, "interval": [0.28, 0.54],
                      "cost_per_accepted": 0.02}],
            "comparisons": [{"by": "prompt_variant", "kind": "cvqa", "generator": "rewrite", "a": "terse",
                             "b": "(default)", "difference": 0.4, "interval": [0.22, 0.58], "p_value": 0.0001,
                             "better": "terse"}]}


def test_the_calibration_and_variants_sections_are_rendered(funnel_workspace, run_cli, tmp_path, monkeypatch):
    """calibration (`check_calibration`) and variants (`compare_variants`), as shapes48.md gives them."""
    import cftools.funnel.report as report

    for function, value in (("check_calibration", CALIBRATION), ("compare_variants", VARIANTS)):
        monkeypatch.setattr(report, function, lambda session, value=value, **settings: value)
    data = report_json(run_cli)
    assert data["calibration"] == CALIBRATION and data["variants"] == VARIANTS
    out = tmp_path / "with-sections.html"
    assert run_cli("report", "--out", out).exit_code == 0
    page = out.read_text(encoding="utf-8")
    calibration = page[page.index('<section id="calibration">'):page.index('<section id="variants">')]
    assert "arithmetic (low precision)" in calibration and "leakage (low precision)" not in calibration
    assert "[0.080, 0.420]" in calibration and "3 of 12 items people rejected had no flag" in calibration
    variants = page[page.index('<section id="variants">'):page.index('<section id="redo">')]
    assert "absent" not in variants and "terse" in variants and "0.0001" in variants


def test_the_report_on_postgresql_equals_the_one_on_sqlite(funnel_workspace, postgres_url, tmp_path):
    """The same funnel written into a store on PostgreSQL: the JSON paths the report reads (waivers, edit
    provenance, lead times, worst-case costs) give the same report."""
    from funnel_stock import stock_funnel as stock

    from cftools.funnel.report import build_report
    from cftools.workspace import init_workspace

    workspace, _ = funnel_workspace
    on_sqlite = build_report(workspace, workspace_boundary(workspace)).data
    pg = init_workspace(tmp_path / "pg", fresh_database(postgres_url, "report_funnel"))
    try:
        assert pg.store.engine.dialect.name == "postgresql"
        price_workspace(pg)
        stock(pg, tmp_path / "pg-files")
    finally:
        pg.close()
    pg = find_workspace(tmp_path / "pg")
    try:
        on_postgres = build_report(pg, workspace_boundary(pg)).data
    finally:
        pg.close()
    for section in ("items", "inputs", "funnel", "cost", "redo", "acceptance_over_time", "acceptance_over_time_by_kind"):
        assert on_postgres[section] == on_sqlite[section], section
    assert on_postgres["deaths"]["check_codes"] == on_sqlite["deaths"]["check_codes"]
