"""Benchmark: a 2,000-item rewrite through `--batch-api` against the loopback Files + Batches server, beside the
synchronous path, a SIGKILL between submit and collect, and a budget.

    .venv/bin/python bench/bench_batch_api.py [--items 2000] [--concurrency 32] [--delay 0.05] [--budget-calls 200]

1. batch: `cftools generate rewrite --batch-api` as a process, SIGKILLed once its batch is submitted (the server
   holds the batch), then run again: the rerun must collect that batch (batches created = 1, lines sent = N).
2. sync: the same rewrite in a second workspace, synchronously (chat calls after DELAY seconds each).
3. same items: both stores hold the same items (key, question, answer) and the same cache keys, no duplicates.
4. budget: a third workspace with `--max-cost` set to the cost of BUDGET_CALLS calls: how far past the limit the
   run went, in calls, against the in-flight window (2 x concurrency).
Prices are demo prices for the stub model (0.15 / 0.60 per million tokens, batch discount 0.5), not a provider's.
The stub counts a token per word. Times are wall-clock of the whole command.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import tomlkit

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from cftools.ingest.readers import ingest_table  # noqa: E402
from cftools.workspace import init_workspace  # noqa: E402

DEMO_PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.60, "batch_discount": 0.5}
REWRITE = ["generate", "rewrite", "--group", "numerical-direct", "--quiet", "--no-rederive"]


def start_server(delay: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(TESTS / "batch_stub.py"), "--port", "0", "--delay", str(delay)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"the batch stub did not start: {line!r}")
    return proc, line.split()[-1].removesuffix("/v1")


def workspace_with_sources(root: Path, table: Path, base_url: str, **llm) -> Path:
    workspace = init_workspace(root)
    ingest_table(workspace.store, table)
    workspace.close()
    config = tomlkit.parse((root / "cftools.toml").read_text())
    config["llm"].update({"backend": "openai", "model": "stub", "base_url": base_url + "/v1", "batch_poll_s": 0.2,
                          **llm})
    prices = tomlkit.table(is_super_table=True)
    prices["stub"] = DEMO_PRICE
    config["llm"]["prices"] = prices
    (root / "cftools.toml").write_text(tomlkit.dumps(config))
    return root


def cftools(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cftools.cli", "-w", str(root), *args], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"})


def query(root: Path, sql: str) -> list[tuple]:
    db = sqlite3.connect(root / "cftools.db", timeout=60)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def control(base: str, **settings) -> dict:
    if settings:
        httpx.post(base + "/control/batches", json=settings, timeout=10).raise_for_status()
    return httpx.get(base + "/control/batches", timeout=30).json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per synchronous chat answer")
    parser.add_argument("--budget-calls", type=int, default=200)
    args = parser.parse_args()
    results: dict = {"items": args.items}
    with tempfile.TemporaryDirectory(prefix="cftools-bench-batch-") as tmp:
        tmp_path = Path(tmp)
        table = tmp_path / "sources.csv"
        table.write_text("image,question,answer\n" + "".join(
            f"img{i:05d}.jpg,How many objects of kind {i} are in the picture?,{i % 9}\n" for i in range(args.items)))
        server, base = start_server(args.delay)
        try:
            # 1. batch, killed between submit and collect, then collected by the rerun
            batch_ws = workspace_with_sources(tmp_path / "batch", table, base)
            control(base, hold=True)
            run = subprocess.Popen([sys.executable, "-m", "cftools.cli", "-w", str(batch_ws), *REWRITE, "--batch-api"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.time() + 120
            while time.time() < deadline and run.poll() is None and not query(
                    batch_ws, "select 1 from llm_batches where batch_id is not null"):
                time.sleep(0.05)
            os.kill(run.pid, signal.SIGKILL)
            run.wait()
            in_flight = json.loads(cftools(batch_ws, "generate", "status", "--json").stdout)["batches"]
            control(base, hold=False)
            started = time.perf_counter()
            rerun = cftools(batch_ws, *REWRITE, "--batch-api", "--json")
            results["batch_rerun_s"] = round(time.perf_counter() - started, 2)
            assert rerun.returncode == 0, rerun.stderr
            state = control(base)
            results["batch"] = {"in_flight_after_kill": len(in_flight), "batches_created": len(state["batches"]),
                                "lines_sent": state["lines"], "usage": json.loads(rerun.stdout)["usage"]}

            # 2. the synchronous path
            sync_ws = workspace_with_sources(tmp_path / "sync", table, base)
            started = time.perf_counter()
            sync = cftools(sync_ws, *REWRITE, "--concurrency", str(args.concurrency), "--json")
            results["sync_s"] = round(time.perf_counter() - started, 2)
            assert sync.returncode == 0, sync.stderr
            results["sync"] = {"usage": json.loads(sync.stdout)["usage"]}

            # 3. the same items and cache keys, no duplicates
            items = "select key, question, answer from items order by key"
            keys = "select cache_key from generations order by cache_key"
            batch_items, sync_items = query(batch_ws, items), query(sync_ws, items)
            results["same_items"] = batch_items == sync_items and len(batch_items) == args.items
            results["same_cache_keys"] = query(batch_ws, keys) == query(sync_ws, keys)
            results["duplicate_item_keys"] = len(batch_items) - len({k for k, *_ in batch_items})
            results["duplicate_generations"] = query(
                batch_ws, "select count(*) - count(distinct cache_key) from generations")[0][0]

            # 4. a budget of BUDGET_CALLS calls' worth
            usage = results["sync"]["usage"]
            per_call = usage["cost"] / usage["requests"]
            limit = per_call * args.budget_calls
            budget_ws = workspace_with_sources(tmp_path / "budget", table, base)
            budget = cftools(budget_ws, *REWRITE, "--concurrency", str(args.concurrency), "--max-cost", f"{limit:.9f}",
                             "--json")
            summary = json.loads(budget.stdout)
            spent = summary["usage"]["cost"]
            results["budget"] = {"exit_code": budget.returncode, "max_cost": round(limit, 9), "spent": spent,
                                 "calls": summary["usage"]["requests"],
                                 "calls_past_the_limit": round((spent - limit) / per_call, 1),
                                 "in_flight_window": 2 * args.concurrency, "left_to_do": summary["budget"]["left_to_do"],
                                 "message": budget.stderr.strip().splitlines()[-1]}
            results["cost_summary_batch_demo"] = cftools(batch_ws, "status", "--cost").stdout
        finally:
            server.terminate()
            server.wait()
    summary_text = results.pop("cost_summary_batch_demo")
    print(json.dumps(results, indent=2))
    print(summary_text)


if __name__ == "__main__":
    main()
