"""`cftools report` benchmark: 100,000 items, the report built and its page opened in Chromium.

    .venv/bin/python bench/bench_report.py [--items 100000] [--images 2000] [--dir /tmp/cftools-bench-report] [--keep]

Writes a synthetic store straight into SQLite (drawn PNGs; items of three kinds and two generators, one of them a
prompt variant; a fifth of them flagged, some waived; two verification tasks with judgments (lead_time) for every
item sent to people, adjudications, rejections, corrections, redone drafts, decision events over ten days), then:

- builds the report (`build_report` + `write_report`, what `cftools report` runs) and prints its wall time (< 30 s
  wanted), its CPU time (what a machine shared with other work does not stretch) and the page's size;
- opens the page from file:// in Chromium (Playwright, /usr/bin/chromium or $CFTOOLS_CHROMIUM) and prints the first
  view (navigation start to the page's load event: the tables, plots and the drill-down's index parsed; < 1 s
  wanted), the JS heap (Chromium's Performance.getMetrics; < 300 MB wanted) and the renderer's resident memory;
- times a drill-down: a funnel cell clicked until its items are listed, and an item opened until its image shows;
- times a text search over all the items: the first (which parses every details chunk and keeps each item's text)
  and a second, and prints the JS heap after them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, select

from cftools.boundary import workspace_boundary
from cftools.funnel.page import write_report
from cftools.funnel.report import build_report, paused_collection
from cftools.models import (AnnotationTask, CheckFlag, Generation, Image, Item, ItemEvent, Judgment, SourceQuestion,
                            utcnow)
from cftools.workspace import find_workspace, init_workspace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_browse import (CHROMIUM, CHROMIUM_ARGS, memory_mb, metrics_session, page_metrics,  # noqa: E402
                          write_images)

KINDS = (("cvqa", ("numerical_direct", "numerical_indirect", "boolean")), ("cfmm", ("color", "count", "shape")),
         ("mucr", ("human", "nature")))
PEOPLE = tuple(f"person{n}@example.com" for n in range(6))
BATCH = 5000


def fate(index: int) -> tuple[str, bool, bool, bool]:
    """(status, pushed, flagged, corrected) of item INDEX: a tenth each way."""
    share = index % 10
    return {0: ("draft", False, True, False), 1: ("draft", False, True, False), 2: ("checked", False, False, False),
            3: ("accepted", True, False, False), 4: ("accepted", True, False, False),
            5: ("accepted", True, False, True), 6: ("accepted", True, True, False),
            7: ("rejected", True, False, False), 8: ("rejected", True, True, False),
            9: ("accepted", True, False, False)}[share]


def insert_rows(session, table, rows: list[dict]) -> None:  # noqa: ANN001
    for start in range(0, len(rows), BATCH):
        session.execute(insert(table), rows[start:start + BATCH])


def build_store(root: Path, n_items: int, n_images: int) -> Path:
    workspace = init_workspace(root / "ws")
    now = utcnow()
    images = write_images(root / "images", n_images, now)
    with workspace.store.write() as session:
        insert_rows(session, Image.__table__, images)
        image_ids = list(session.execute(select(Image.id).order_by(Image.id)).scalars())
        insert_rows(session, SourceQuestion.__table__, [
            {"dataset": "bench", "external_id": str(n), "image_ref": f"img_{n % n_images:06d}.png",
             "image_id": image_ids[n % n_images], "question": f"How many things are in picture {n}?", "answer": "2",
             "answer_type": "number", "created_at": now} for n in range(n_items)])
        source_ids = list(session.execute(select(SourceQuestion.id).order_by(SourceQuestion.id)).scalars())
        insert_rows(session, Generation.__table__, [
            {"source_id": source_ids[n], "generator": "rewrite", "backend": "openai",
             "model": "model-a" if n % 2 else "model-b", "template_name": "rewrite", "template_hash": "ab" * 32,
             "prompt_variant": None if n % 2 else "terse", "prompt_tokens": 900, "completion_tokens": 150,
             "cached": False, "attempt": 1, "created_at": now} for n in range(n_items)])
        generation_ids = list(session.execute(select(Generation.id).order_by(Generation.id)).scalars())
        items = []
        for n in range(n_items):
            kind, groups = KINDS[n % 3]
            status, _, _, corrected = fate(n)
            items.append({"key": f"bench:{n:06d}", "kind": kind, "group": groups[n % len(groups)],
                          "source_id": source_ids[n], "question": f"How many things would there be if {n % 7} more "
                          "were added?", "answer": "4" if corrected else str(n % 5),
                          "proposed_answer": "3" if corrected else None, "status": status, "origin": "generated",
                          "generation_id": generation_ids[n], "dataset": "bench",
                          "data": {"waived_flags": {"leakage": {"by": "lead"}}} if n % 10 == 6 else {},
                          "redo_of": None, "created_at": now, "updated_at": now})
        insert_rows(session, Item.__table__, items)
        item_ids = list(session.execute(select(Item.id).order_by(Item.id)).scalars())
        add_people(session, item_ids, now)
    workspace.close()
    return root / "ws"


def add_people(session, item_ids: list[int], now) -> None:  # noqa: ANN001
    flags, tasks, events = [], [], []
    for n, item_id in enumerate(item_ids):
        status, pushed, flagged, _ = fate(n)
        if flagged:
            flags.append({"item_id": item_id, "code": "leakage" if n % 10 == 6 else "arithmetic",
                          "reason": "the numbers do not add up", "created_at": now})
        if pushed:
            for m in range(2):
                tasks.append({"item_id": item_id, "purpose": "verify", "server": f"http://127.0.0.1:{8000 + m}",
                              "ls_project_id": 1, "ls_task_id": 2 * n + m, "state": "decided", "decision": status,
                              "assignee": PEOPLE[(n + m) % len(PEOPLE)], "pushed_at": now, "updated_at": now})
            events.append({"item_id": item_id, "stage": "annotate pull", "from_status": "in_review",
                           "to_status": status, "detail": {}, "created_at": now - timedelta(days=n % 10)})
    insert_rows(session, CheckFlag.__table__, flags)
    insert_rows(session, ItemEvent.__table__, events)
    insert_rows(session, AnnotationTask.__table__, tasks)
    task_rows = session.execute(select(AnnotationTask.id, AnnotationTask.assignee, AnnotationTask.decision)
                                .order_by(AnnotationTask.id)).all()
    insert_rows(session, Judgment.__table__, [
        {"task_id": task_id, "annotator": person, "related": decision != "rejected", "answer_correct": True,
         "flags": ["ambiguous"] if decision == "rejected" else [],
         "comment": "two readings" if decision == "rejected" else None,
         "raw": {"lead_time": 20.0 + task_id % 30}, "updated_at": now} for task_id, person, decision in task_rows])


def open_report(out: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        session = metrics_session(page)
        started = time.perf_counter()
        page.goto(out.as_uri(), wait_until="load", timeout=120_000)
        figures = {"wall_to_load_ms": (time.perf_counter() - started) * 1000,
                   "first_view_ms": page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")}
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        figures.update(page_metrics(session))
        figures.update(memory_mb())
        started = time.perf_counter()
        page.locator("td.cell[data-by='group'][data-cell='rejected'] button").first.click()
        page.locator("#drill-list button").first.wait_for()
        figures["cell_click_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        page.locator("#drill-list button").last.click()
        page.wait_for_function("() => { const i = document.querySelector('#item img'); return i && i.complete "
                               "&& i.naturalWidth > 0; }")
        figures["item_open_ms"] = (time.perf_counter() - started) * 1000
        figures["js_heap_after_drill_mb"] = page_metrics(session)["js_heap_mb"]
        page.locator("#drill-all").click()
        for name, query in (("first_search_ms", "readings"), ("second_search_ms", "bench:0999")):
            figures[name] = search(page, query)
        figures["search_found"] = page.locator("#drill-filter").inner_text()
        figures["js_heap_after_search_mb"] = page_metrics(session)["js_heap_mb"]
        browser.close()
    return figures


def search(page, query: str) -> float:  # noqa: ANN001
    """Milliseconds from typing QUERY into the search box (one input event) to its items listed."""
    started = time.perf_counter()
    page.locator("#drill-search").fill(query)
    page.wait_for_function("q => document.getElementById('drill').dataset.search === q", arg=query)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/cftools-bench-report"))
    parser.add_argument("--keep", action="store_true", help="reuse the store a previous run left in --dir")
    args = parser.parse_args()
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = args.dir / "ws"
    if not root.is_dir():
        started = time.perf_counter()
        build_store(args.dir, args.items, args.images)
        print(f"store: {args.items:,} items written in {time.perf_counter() - started:.1f} s")
    workspace = find_workspace(root)
    out = args.dir / "report.html"
    started, cpu = time.perf_counter(), time.process_time()
    with paused_collection():  # as `cftools report` builds it
        boundary = workspace_boundary(workspace)
        report = build_report(workspace, boundary)
        built = time.perf_counter() - started
        write_report(report, boundary, out, workspace.root)
    total, cpu = time.perf_counter() - started, time.process_time() - cpu
    workspace.close()
    print(f"report built in {built:.1f} s, page written in {total:.1f} s in all (wanted < 30 s), {cpu:.1f} s of CPU "
          f"(a loaded machine stretches the wall time, not the CPU time; load average {os.getloadavg()[0]:.1f}); "
          f"page {out.stat().st_size / 2**20:.1f} MB")
    figures = open_report(out)
    print(f"first view {figures['first_view_ms']:.0f} ms (navigation start to load event; wanted < 1000 ms), "
          f"wall to load {figures['wall_to_load_ms']:.0f} ms")
    print(f"JS heap {figures['js_heap_mb']:.1f} MB after load, {figures['js_heap_after_drill_mb']:.1f} MB after a "
          f"drill-down (wanted < 300 MB); renderer RSS {figures['renderer_rss']:.0f} MB, "
          f"PSS {figures['renderer_pss']:.0f} MB")
    print(f"a funnel cell listed in {figures['cell_click_ms']:.0f} ms, an item opened with its image in "
          f"{figures['item_open_ms']:.0f} ms")
    print(f"a search over all items: the first (every chunk parsed) {figures['first_search_ms']:.0f} ms, a second "
          f"{figures['second_search_ms']:.0f} ms ({figures['search_found']}); JS heap after them "
          f"{figures['js_heap_after_search_mb']:.1f} MB")


if __name__ == "__main__":
    main()
