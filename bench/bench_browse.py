"""browse.html benchmark: a 10,000-item release opened in Chromium.

    .venv/bin/python bench/bench_browse.py [--items 10000] [--images 2000] [--dir /tmp/cftools-bench-browse]

Builds a synthetic store (small drawn PNGs; 70% C-VQA items with one image, 20% CFMM items with options, 10% MuCR
pairs with a cause and an effect image and three explanations), exports it natively, then opens the release's
browse.html from file:// in Chromium (Playwright, /usr/bin/chromium or $CFTOOLS_CHROMIUM) and prints:

- the page's size;
- time to first rendered card: from the start of navigation to the first frame painted after the first card is
  in the page (a MutationObserver and requestAnimationFrame, injected before the page's own script runs), and the
  wall time from `goto` to that;
- memory once the first page is drawn: the JS heap (Chromium's Performance.getMetrics) and the resident and
  proportional set size (PSS: shared pages counted once) of the tab's renderer and of all Chromium processes,
  beside the same for about:blank;
- a search over every item (type a word, wait for the count) and a page turn.

Each of --repeat fresh browser contexts is reported, then the median and the best (the first run of a cold
machine also reads the files from disk; a busy machine stretches wall times: the load average is printed).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import sys
import time
from pathlib import Path

import PIL.Image
import PIL.ImageDraw

from cftools.models import ACCEPTED, Image, Item, SourceQuestion, utcnow
from cftools.workspace import init_workspace

CHROMIUM = Path(os.environ.get("CFTOOLS_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
FIRST_CARD_PROBE = """
window.__firstCard = null;
new MutationObserver((changes, observer) => {
  if (document.querySelector("article")) {
    observer.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => { window.__firstCard = performance.now(); }));
  }
}).observe(document, {childList: true, subtree: true});
"""
WORDS = ("red", "dog", "cup", "tree", "car", "ball", "chair", "kite", "boat", "lamp")


def draw_image(index: int) -> bytes:
    image = PIL.Image.new("RGB", (64, 48), (index % 251, (index * 7) % 253, (index * 13) % 241))
    PIL.ImageDraw.Draw(image).ellipse((index % 40, index % 20, index % 40 + 20, index % 20 + 20), fill=(250, 250, 250))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


# Three explanations of one item worded apart: export refuses an item whose explanations are near copies of each
# other (cftools.kinds.mucr.annotate.NEAR_COPY), as the first wording (one sentence, n changed) was.
EXPLANATIONS = (
    "In the first image, person {index} carries a {word} into the rain. In the second image, it is soaked.",
    "Rain falls on whatever is outside, so the {word} that person {index} took out has become wet through.",
    "Storm water soaks anything left uncovered; person {index} held the {word} without any cover at all.",
)


def explanation(index: int, n: int) -> str:
    return EXPLANATIONS[n].format(index=index, word=WORDS[(index + n) % len(WORDS)])


def item_row(index: int, shas: list[str], source_ids: dict[str, int]) -> dict:
    word = WORDS[index % len(WORDS)]
    share = index % 10
    if share < 7:
        return {"key": f"bench:cvqa:{index:06d}", "kind": "cvqa", "group": "numerical-direct",
                "source_id": source_ids[str(index % len(shas))], "origin": "generated",
                "question": f"How many {word}s would there be if {index % 4} more {word}s were added?",
                "answer": str(index % 9), "data": {"cvqa_type": "direct"}}
    if share < 9:
        return {"key": f"bench:cfmm:{index:06d}", "kind": "cfmm", "group": "color",
                "source_id": source_ids[f"c{index % len(shas)}"], "origin": "generated",
                "question": f"What color would the {word} be if it were painted blue?", "answer": "blue",
                "data": {"type": "color", "options": {"original": ["red", "green"],
                                                      "counterfactual": ["yellow", "blue", "red", "black"]}}}
    cause, effect = shas[index % len(shas)], shas[(index + 1) % len(shas)]
    return {"key": f"bench:mucr:{index:06d}", "kind": "mucr", "group": f"link{index % 50}", "source_id": None,
            "origin": "selected", "question": f"{word} in the rain -> a soaked {word}", "answer": None,
            "data": {"cause_image": f"sha256:{cause}", "effect_image": f"sha256:{effect}",
                     "cause_caption": f"a person carries a {word} in the rain",
                     "effect_caption": f"the {word} is soaked", "category": "human", "style": "photograph",
                     "cue": "soaked", "false_cues": ["rain", word, "person"],
                     "explanations": [explanation(index, n) for n in range(3)]}}


def write_images(image_dir: Path, n_images: int, now) -> list[dict]:  # noqa: ANN001
    """N_IMAGES distinct small PNGs written to IMAGE_DIR (made here), as rows of the images table."""
    image_dir.mkdir()
    images = []
    for index in range(n_images):
        data = draw_image(index)
        path = image_dir / f"img_{index:06d}.png"
        path.write_bytes(data)
        images.append({"sha256": hashlib.sha256(data).hexdigest(), "width": 64, "height": 48, "format": "png",
                       "size_bytes": len(data), "path": str(path), "created_at": now})
    return images


def build_store(root: Path, n_items: int, n_images: int) -> Path:
    workspace = init_workspace(root / "ws")
    store = workspace.store
    now = utcnow()
    images = write_images(root / "images", n_images, now)
    shas = [image["sha256"] for image in images]
    with store.write() as session:
        store.insert_ignore(session, Image.__table__, images)
        ids = dict(session.execute(Image.__table__.select().with_only_columns(
            Image.__table__.c.sha256, Image.__table__.c.id)).all())
        sources = [{"dataset": "bench", "external_id": str(index), "image_ref": f"img_{index:06d}.png",
                    "image_id": ids[sha], "question": f"How many {WORDS[index % len(WORDS)]}s are there?",
                    "answer": str(index % 5), "answer_type": "number", "created_at": now}
                   for index, sha in enumerate(shas)]
        sources += [{"dataset": "bench", "external_id": f"c{index}", "image_ref": f"img_{index:06d}.png",
                     "image_id": ids[sha], "question": f"What color is the {WORDS[index % len(WORDS)]}?",
                     "answer": "red", "answer_type": "other", "created_at": now} for index, sha in enumerate(shas)]
        store.insert_ignore(session, SourceQuestion.__table__, sources)
        source_ids = dict(session.execute(SourceQuestion.__table__.select().with_only_columns(
            SourceQuestion.__table__.c.external_id, SourceQuestion.__table__.c.id)).all())
        items = [{**item_row(index, shas, source_ids), "status": ACCEPTED, "created_at": now,
                  "updated_at": now} for index in range(n_items)]
        for start in range(0, len(items), 5000):
            store.insert_ignore(session, Item.__table__, items[start:start + 5000])
    workspace.close()
    return root / "ws"


def chromium_processes():  # noqa: ANN201
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


def memory_mb() -> dict[str, float]:
    """RSS and PSS of the renderers and of all Chromium processes (MB)."""
    import psutil

    out = {"renderer_rss": 0.0, "renderer_pss": 0.0, "all_rss": 0.0, "all_pss": 0.0}
    for process in chromium_processes():
        try:
            info = process.memory_full_info()
            renderer = "--type=renderer" in " ".join(process.cmdline())
        except psutil.Error:
            continue
        out["all_rss"] += info.rss / 2**20
        out["all_pss"] += info.pss / 2**20
        if renderer:
            out["renderer_rss"] = max(out["renderer_rss"], info.rss / 2**20)
            out["renderer_pss"] = max(out["renderer_pss"], info.pss / 2**20)
    return out


def metrics_session(page):  # noqa: ANN001, ANN201
    """A DevTools session counting the tab's figures from now on (open it before the page loads)."""
    session = page.context.new_cdp_session(page)
    session.send("Performance.enable")
    return session


def page_metrics(session) -> dict[str, float]:  # noqa: ANN001
    """Chromium's own figures for the tab: JS heap in use (MB) and the main thread's busy time since the session
    began (ms: tasks, of which script and layout), which a loaded machine stretches less than wall time."""
    metrics = {m["name"]: m["value"] for m in session.send("Performance.getMetrics")["metrics"]}
    return {"js_heap_mb": metrics["JSHeapUsedSize"] / 2**20, "task_ms": metrics["TaskDuration"] * 1000,
            "script_ms": metrics["ScriptDuration"] * 1000, "layout_ms": metrics["LayoutDuration"] * 1000}


def open_once(browser, url: str) -> dict[str, float]:  # noqa: ANN001
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.add_init_script(FIRST_CARD_PROBE)
    session = metrics_session(page)
    started = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_function("() => window.__firstCard !== null", timeout=120_000)
    wall = time.perf_counter() - started
    figures = {"first_card_ms": page.evaluate("window.__firstCard"), "wall_ms": wall * 1000}
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    figures["cards"] = page.locator("article").count()
    figures.update(page_metrics(session))
    figures.update(memory_mb())
    word = "kite"
    started = time.perf_counter()
    page.fill("#search", word)
    page.wait_for_function("() => { const t = document.getElementById('shown').textContent.split(' ');"
                           " return t[0] !== t[2]; }")  # "N of M shown": N drops below M
    figures["search_ms"] = (time.perf_counter() - started) * 1000  # includes the page's 150 ms typing pause
    figures["search_hits"] = int(page.locator("#shown").inner_text().split()[0])
    page.fill("#search", "")
    page.wait_for_function("() => { const t = document.getElementById('shown').textContent.split(' ');"
                           " return t[0] === t[2]; }")
    started = time.perf_counter()
    page.click("#next")
    page.wait_for_function("() => document.getElementById('page').textContent.startsWith('page 2 ')")
    figures["page_turn_ms"] = (time.perf_counter() - started) * 1000
    context.close()
    return figures


def blank_memory(browser) -> dict[str, float]:  # noqa: ANN001
    context = browser.new_context()
    page = context.new_page()
    session = metrics_session(page)
    page.goto("about:blank")
    figures = {**page_metrics(session), **memory_mb()}
    context.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/cftools-bench-browse"))
    args = parser.parse_args()
    if args.dir.exists():
        shutil.rmtree(args.dir)
    args.dir.mkdir(parents=True)
    from playwright.sync_api import sync_playwright

    from cftools.release.export import ExportOptions, export_release
    from cftools.workspace import load_workspace

    print(f"building a store of {args.items} items over {args.images} images in {args.dir} ...", flush=True)
    workspace = load_workspace(build_store(args.dir, args.items, args.images))
    started = time.perf_counter()
    result = export_release(workspace, "bench", "1", args.dir / "out", options=ExportOptions(licence="CC-BY-4.0"))
    workspace.close()
    page = result.path / "browse.html"
    print(f"export: {result.n_items} items, {result.n_images} images in {time.perf_counter() - started:.1f} s; "
          f"browse.html {page.stat().st_size / 2**20:.2f} MB")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        blank = blank_memory(browser)
        runs = [open_once(browser, page.as_uri()) for _ in range(args.repeat)]
        browser.close()
    best = min(runs, key=lambda r: r["first_card_ms"])
    print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"about:blank: JS heap {blank['js_heap_mb']:.1f} MB; renderer RSS {blank['renderer_rss']:.0f} MB, "
          f"PSS {blank['renderer_pss']:.0f} MB; all Chromium processes RSS {blank['all_rss']:.0f} MB, "
          f"PSS {blank['all_pss']:.0f} MB")
    for n, run in enumerate(runs, start=1):
        print(f"run {n}: first card {run['first_card_ms']:.0f} ms after navigation start (goto to painted "
              f"{run['wall_ms']:.0f} ms; main thread busy {run['task_ms']:.0f} ms, script {run['script_ms']:.0f} ms, "
              f"layout {run['layout_ms']:.0f} ms), {run['cards']:.0f} cards drawn; JS heap {run['js_heap_mb']:.1f} MB; "
              f"renderer RSS {run['renderer_rss']:.0f} MB, PSS {run['renderer_pss']:.0f} MB; all Chromium "
              f"processes RSS {run['all_rss']:.0f} MB, PSS {run['all_pss']:.0f} MB; search over "
              f"{result.n_items} items {run['search_ms']:.0f} ms ({run['search_hits']:.0f} hits); page turn "
              f"{run['page_turn_ms']:.0f} ms")
    middle = sorted(runs, key=lambda r: r["first_card_ms"])[len(runs) // 2]
    print(f"median: first card {middle['first_card_ms']:.0f} ms; renderer PSS {middle['renderer_pss']:.0f} MB")
    print(f"best: first card {best['first_card_ms']:.0f} ms; JS heap {best['js_heap_mb']:.1f} MB; renderer PSS "
          f"{best['renderer_pss']:.0f} MB; all Chromium PSS {best['all_pss']:.0f} MB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
