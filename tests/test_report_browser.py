"""The report page in Chromium (issue 48): every section renders with its plots, filtering by a funnel cell lists
exactly that cell's items (as found in SQL on the store), and the drill-down opens an item with its image and its
judgments under pseudonyms."""

from __future__ import annotations

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
    assert page.evaluate("window.pwned === undefined") and page.locator("img[src='x']").count() == 0
    page.close()
