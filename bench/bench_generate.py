"""Benchmark: 2,000 rewrites against a loopback OpenAI-compatible stub that answers after a fixed 200 ms.

    .venv/bin/python bench/bench_generate.py [--items 2000] [--concurrency 32] [--delay 0.2]

1. generate: N rewrites with K requests in flight -> items/s. The ideal is K / delay (32 / 0.2 s = 160 items/s);
   the target is at least 80% of it (128 items/s).
2. rerun: the generated items are dropped (the request cache is kept) and the same N rewrites run again: every
   response comes from the cache, no model call; target: all N in under 5 s.
The stub runs as its own process (`python tests/llm_stub.py`, 127.0.0.1 only), so it does not share the
client's interpreter. Times are wall-clock of the library call `cftools.generate.rewrite` (selection, prompt
rendering, calls, parsing and the store writes included).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import delete, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cftools.generate.llm_task import LLMRun
from cftools.kinds.cvqa.generate import llm_params, rewrite
from cftools.ingest.readers import ingest_table
from cftools.llm import make_backend
from cftools.kinds.cvqa.model import NUMERICAL_DIRECT
from cftools.models import Item, ItemEvent
from cftools.workspace import init_workspace
from llm_stub import start_process as start_stub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cftools-bench-generate-") as tmp:
        workspace = init_workspace(Path(tmp) / "ws")
        table = Path(tmp) / "sources.csv"
        with open(table, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["image", "question", "answer"])
            writer.writerows((f"img{i:05d}.jpg", f"How many objects of kind {i} are in the picture?", str(i % 9))
                             for i in range(args.items))
        ingest_table(workspace.store, table)
        stub, base_url = start_stub(args.delay)
        backend = make_backend({"backend": "openai", "model": "stub", "base_url": base_url})
        try:
            started, cpu = time.perf_counter(), time.process_time()
            first = rewrite(workspace.store, backend, NUMERICAL_DIRECT,
                            run=LLMRun(concurrency=args.concurrency, params=llm_params({}, "openai")))
            first_s, first_cpu = time.perf_counter() - started, time.process_time() - cpu
            with workspace.store.write() as session:
                session.execute(delete(ItemEvent))
                session.execute(delete(Item))
            started = time.perf_counter()
            again = rewrite(workspace.store, backend, NUMERICAL_DIRECT,
                            run=LLMRun(concurrency=args.concurrency, params=llm_params({}, "openai")))
            again_s = time.perf_counter() - started
            with workspace.store.session() as session:
                n_items = len(session.execute(select(Item.id)).all())
        finally:
            backend.close()
            stub.kill()
            stub.wait()
            workspace.close()

    ideal = args.concurrency / args.delay
    rate = first.items_created / first_s
    result = {
        "items": args.items, "concurrency": args.concurrency, "delay_s": args.delay,
        "generate_s": round(first_s, 2), "items_per_s": round(rate, 1), "ideal_items_per_s": round(ideal, 1),
        "fraction_of_ideal": round(rate / ideal, 3), "generate_target_met": rate >= 0.8 * ideal,
        "failed": first.stats.failed, "client_cpu_s": round(first_cpu, 2), "rerun_s": round(again_s, 2), "rerun_cached": again.stats.cached,
        "rerun_items": n_items, "rerun_target_met": again_s < 5 and again.stats.cached == args.items,
    }
    print(f"generate: {first.items_created} items in {first_s:.2f} s = {rate:.1f} items/s "
          f"({100 * rate / ideal:.0f}% of the ideal {ideal:.0f}/s; target >= 80%)")
    print(f"rerun from the cache: {again.stats.cached}/{args.items} cached in {again_s:.2f} s (target < 5 s)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
