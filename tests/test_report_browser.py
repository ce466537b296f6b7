"""The report page in Chromium (issue 48): every section renders with its plots, filtering by a funnel cell lists
exactly that cell's items (as found in SQL on the store), a text search lists exactly the items whose texts hold its
words (in the cell, or in all), and the drill-down opens an item with its image and its judgments under
pseudonyms."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from funnel_stock import PEOPLE
from test_browser import UI_TIMEOUT_MS, browser  # noqa: F401 (browser: a fixture)
from test_report import funnel_workspace, members_in_sql, release_keys, store_file  # noqa: F401 (a fixture)

from cftools.boundary import workspace_boundary
from cftools.funnel.facts import STAGES

SECTIONS = ("funnel", "plots", "cost", "deaths", "calibration", "variants", "redo", "drill")


@pytest.fixture
def report_page(funnel_workspace, run_cli, tmp_path, browser):  # noqa: F811
    out = tmp_path / "out" / "report.html"
    assert run_cli("report", "--out", out).exit_code == 0
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(out.as_uri())
    page.locator("#funnel td.cell").first.wait_for()
    yield page, errors
    context.close()


def listed(page) -> set[str]:
    return set(page.locator("#drill-list button").all_inner_texts())


def searched(page, query: str) -> set[str]:
    """The items a search for QUERY lists (typed as a person types it: one input event per key)."""
    box = page.locator("#drill-search")
    box.fill("")
    box.press_sequentially(query)
    page.wait_for_function("q => document.getElementById('drill').dataset.search === q", arg=query.strip())
    return listed(page)


def page_texts(out: Path) -> dict[str, str]:
    """Each item's searchable text as the page's own JSON holds it (key, question, answer, drafted answer, source
    question, flags' codes and reasons, judgments' pseudonym, corrected answer, flags and comment), lower case."""
    html = out.read_text(encoding="utf-8")
    scripts = dict(re.findall(r'<script type="application/json" id="([^"]+)">(.*?)</script>', html, re.S))
    drill = json.loads(scripts["drill-index"])
    details = [d for n in range(len(scripts) - 1) for d in json.loads(scripts[f"chunk-{n}"])]
    texts = {}
    for (key, *_), (question, answer, proposed, source, _, _, flags, judgments) in zip(drill["items"], details):
        parts = [key, question, answer, proposed, source, *(t for flag in flags for t in flag[:2])]
        for person, _, _, _, corrected, marks, _, comment, _ in judgments:
            parts += [drill["people"][person], corrected, *marks, comment]
        texts[key] = "\n".join(p for p in parts if p).lower()
    return texts


def holding(texts: dict[str, str], query: str) -> set[str]:
    return {key for key, text in texts.items() if all(word in text for word in query.lower().split())}


def in_sql(db: Path, query: str, *args: str) -> set[str]:
    with sqlite3.connect(db) as connection:
        return {key for key, in connection.execute(query, args)}


def test_every_section_renders_with_its_plots(report_page):
    page, errors = report_page
    for section in SECTIONS:
        assert page.locator(f"section#{section}").is_visible(), section
        assert page.locator(f"section#{section} h2").inner_text()
    page.wait_for_function("() => [...document.querySelectorAll('img.plot')].every(i => i.complete)")
    sizes = page.evaluate("[...document.querySelectorAll('img.plot')].map(i => i.naturalWidth)")
    assert len(sizes) == 3 and all(width > 100 for width in sizes)
    assert page.locator("#calibration .absent").count() == 1  # no calibration in this build or store: said so
    assert page.locator("#redo table tr").count() == 2
    assert errors == []


def test_filtering_by_each_funnel_cell_lists_exactly_its_items(report_page, funnel_workspace, tmp_path):  # noqa: F811
    page, errors = report_page
    workspace, _ = funnel_workspace
    members, row_of = members_in_sql(store_file(workspace), release_keys(tmp_path))
    rows = page.locator("table[data-by='group'] tr").all_inner_texts()[1:]
    names = [text.split("\t")[0].strip() for text in rows]
    checked = 0
    for n, name in enumerate(names):
        for cell in (*STAGES, "flag:arithmetic", "flag:leakage"):
            page.locator(f"td.cell[data-by='group'][data-row='{n}'][data-cell='{cell}'] button").click()
            expected = {key for key in members[cell] if row_of[key] == name}
            assert listed(page) == expected, (name, cell)
            assert page.locator("#drill-filter").inner_text().endswith(f": {len(expected)} items")
            checked += 1
    assert checked == 3 * (len(STAGES) + 2)
    # a generator cell: the prompt variant's rejected drafts
    variant = next(n for n, text in enumerate(page.locator("table[data-by='generator'] tr").all_inner_texts()[1:])
                   if "variant terse" in text)
    page.locator(f"td.cell[data-by='generator'][data-row='{variant}'][data-cell='rejected'] button").click()
    assert listed(page) == {"cvqa:f3"}
    edits = next(n for n, text in enumerate(page.locator("table[data-by='edit_backend'] tr").all_inner_texts()[1:])
                 if "instruct-pix2pix" in text)
    page.locator(f"td.cell[data-by='edit_backend'][data-row='{edits}'][data-cell='ingested'] button").click()
    assert listed(page) == {"cvqa:f4"}
    assert errors == []


def test_the_drill_down_opens_an_item_with_its_image_and_pseudonymous_judgments(report_page, funnel_workspace):  # noqa: F811
    page, errors = report_page
    workspace, _ = funnel_workspace
    boundary = workspace_boundary(workspace)
    page.locator("td.cell[data-by='group'][data-cell='rejected'] button").filter(has_text="1").first.click()
    page.locator("#drill-list button", has_text="cvqa:f3").click()
    item = page.locator("#item")
    item.wait_for()
    assert item.locator("h3").inner_text() == "cvqa:f3"
    page.wait_for_function("() => { const i = document.querySelector('#item img'); return i && i.complete; }")
    assert page.evaluate("document.querySelector('#item img').naturalWidth") == 40
    text = item.inner_text()
    assert "How many cups if 2?" in text and "rejected" in text
    assert boundary.pseudonym(PEOPLE[0]) in text and boundary.pseudonym(PEOPLE[1]) in text
    assert not any(person in text for person in PEOPLE)
    assert "flags ambiguous" in text and "5.0 s" in text
    assert errors == []


def test_a_search_lists_exactly_the_items_whose_text_holds_its_words(report_page, funnel_workspace, tmp_path):  # noqa: F811
    page, errors = report_page
    workspace, _ = funnel_workspace
    boundary = workspace_boundary(workspace)
    texts, db = page_texts(tmp_path / "out" / "report.html"), store_file(workspace)
    # the first view parsed no details chunk and made no search text; the first search made every item's
    assert page.evaluate("searchable === null && chunks.size === 0")
    searched(page, "cups")
    assert page.evaluate("searchable.length") == len(texts)
    # single words, against the store itself: a question (never the control item's), a comment, a flag's reason
    assert searched(page, "cups") == in_sql(db, "SELECT key FROM items WHERE status != 'control' "
                                                "AND question LIKE '%cups%'") == set(texts)
    assert searched(page, "READINGS") == in_sql(db, "SELECT i.key FROM items i JOIN annotation_tasks t ON "
                                                    "t.item_id = i.id JOIN judgments j ON j.task_id = t.id "
                                                    "WHERE j.comment LIKE ?", "%readings%") == {"cvqa:f3"}
    assert searched(page, "failed") == in_sql(db, "SELECT i.key FROM items i JOIN check_flags f ON "
                                                  "f.item_id = i.id WHERE f.reason LIKE '%failed%'") == {"cvqa:f4",
                                                                                                         "cvqa:f5"}
    # several words, each anywhere in the item's texts; a person by pseudonym, never by address
    carol = boundary.pseudonym(PEOPLE[2])
    for query in ("cups 3", "  it is  four ", "ambiguous cvqa:f3", "leakage", carol, "f7 cups (6)", "no such words"):
        expected = holding(texts, query)
        assert searched(page, query) == expected, query
        assert page.locator("#drill-filter").inner_text().endswith(f": {len(expected)} items")
    assert holding(texts, carol) == {"cvqa:f3", "cvqa:f5"}  # her comment's pseudonym and her adjudication
    assert searched(page, "carol") == set() and searched(page, PEOPLE[2]) == set()
    # a listed item opens as a cell's does
    searched(page, "it is four")
    page.locator("#drill-list button", has_text="cvqa:f2").click()
    assert page.locator("#item h3").inner_text() == "cvqa:f2" and "it is four" in page.locator("#item").inner_text()
    # within a funnel cell: only its items; an empty search gives the cell's list back, then no cell: none listed
    row = next(n for n, text in enumerate(page.locator("table[data-by='group'] tr").all_inner_texts()[1:])
               if text.startswith("cvqa / numerical_direct"))
    page.locator(f"td.cell[data-by='group'][data-row='{row}'][data-cell='rejected'] button").click()
    assert searched(page, "it is four") == set()  # cvqa:f2 is not rejected
    assert searched(page, "cups") == {"cvqa:f3"}
    assert page.locator("#drill-filter").inner_text() == "“cups” in cvqa / numerical_direct — rejected: 1 items"
    assert searched(page, "") == {"cvqa:f3"}
    assert page.locator("#drill-filter").inner_text() == "cvqa / numerical_direct — rejected: 1 items"
    page.locator("#drill-all").click()
    assert listed(page) == set() and page.locator("#drill-filter").inner_text().startswith("Click a count")
    assert searched(page, "it is four") == {"cvqa:f2"}
    assert errors == []


HOSTILE = '</script><img src=x onerror="window.pwned=1">&amp; <!-- {"a": 1}'


def test_hostile_text_from_the_store_stays_text(funnel_workspace, run_cli, tmp_path, browser):  # noqa: F811
    from sqlalchemy import update

    from cftools.models import CheckFlag, Item

    workspace, ids = funnel_workspace
    with workspace.store.write() as session:
        session.execute(update(Item).where(Item.id == ids["cvqa:f4"]).values(question=HOSTILE, group=HOSTILE))
        session.execute(update(CheckFlag).where(CheckFlag.item_id == ids["cvqa:f4"]).values(reason=HOSTILE))
    out = tmp_path / "hostile" / "report.html"
    assert run_cli("report", "--out", out).exit_code == 0
    page = browser.new_page()
    page.goto(out.as_uri())
    row = next(n for n, text in enumerate(page.locator("table[data-by='group'] tr").all_inner_texts()[1:])
               if "onerror" in text)
    page.locator(f"td.cell[data-by='group'][data-row='{row}'][data-cell='ingested'] button").click()
    page.locator("#drill-list button", has_text="cvqa:f4").click()
    text = page.locator("#item").inner_text()
    assert text.count(HOSTILE) >= 2  # the question and the flag's reason, as written
    # a search for the markup finds the item and shows the words typed as text
    assert searched(page, HOSTILE) == {"cvqa:f4"}
    assert page.locator("#drill-filter").inner_text() == f"“{HOSTILE}” in cvqa / {HOSTILE} — ingested: 1 items"
    page.locator("#drill-list button", has_text="cvqa:f4").click()
    assert page.locator("#item").inner_text().count(HOSTILE) >= 2
    assert page.evaluate("window.pwned === undefined") and page.locator("img[src='x']").count() == 0
    page.close()
