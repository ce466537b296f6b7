"""`--max-cost` against the loopback stub server: spend never exceeds the budget, at concurrency 8 and 64.

    PYTHONPATH=. python bench/bench_max_cost.py [--items 400] [--max-cost 0.5] [--delay 0.05]

Each concurrency gets a fresh workspace of ITEMS number questions and runs `generate rewrite --max-cost` against
the chat stub (a process of its own, DELAY seconds per answer). Prices are demo prices chosen so that a worst-case
call (its prompt and the whole max_tokens) costs about a cent: the budget covers some tens of calls, far fewer
than the items, so the budget is what stops the run. Reported per concurrency: spent, budget, calls, the worst-case
cost of one call, and how far under (or over) the budget the spending ended. Before reservations (issue 39),
--max-cost 0.5 at concurrency 8 spent $5.27-5.60.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import bench_batch_api  # noqa: E402
from bench_batch_api import cftools, workspace_with_sources  # noqa: E402
from cftools.llm.cost import Price  # noqa: E402

DEMO_PRICE = {"input_per_mtok": 30.0, "output_per_mtok": 30.0, "batch_discount": 0.5}
MAX_TOKENS = 320  # the rewrite's max_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--max-cost", type=float, default=0.5)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per chat answer")
    parser.add_argument("--concurrency", default="8,64")
    args = parser.parse_args()
    bench_batch_api.DEMO_PRICE = DEMO_PRICE  # workspace_with_sources writes this price for the stub model
    from llm_stub import start_process

    results = []
    with tempfile.TemporaryDirectory(prefix="cftools-bench-max-cost-") as tmp:
        tmp_path = Path(tmp)
        table = tmp_path / "sources.csv"
        table.write_text("image,question,answer\n" + "".join(
            f"img{i:05d}.jpg,How many objects of kind {i} are in the picture?,{i % 9}\n" for i in range(args.items)))
        server, base_url = start_process(args.delay)
        try:
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                ws = workspace_with_sources(tmp_path / f"c{concurrency}", table, base_url.removesuffix("/v1"))
                done = cftools(ws, "generate", "rewrite", "--group", "numerical-direct", "--quiet", "--no-rederive",
                               "--concurrency", str(concurrency), "--max-cost", str(args.max_cost), "--json")
                summary = json.loads(done.stdout)
                spent = summary["usage"]["cost"]
                results.append({
                    "concurrency": concurrency, "exit_code": done.returncode, "max_cost": args.max_cost,
                    "spent": round(spent, 6), "within_budget": spent <= args.max_cost,
                    "under_budget_by": round(args.max_cost - spent, 6), "calls": summary["usage"]["requests"],
                    "worst_case_call": round(Price("stub", **DEMO_PRICE).cost(100, MAX_TOKENS), 6),
                    "left_to_do": summary["budget"]["left_to_do"], "failed": summary.get("failed"),
                })
        finally:
            server.terminate()
            server.wait()
    print(json.dumps(results, indent=2))
    if not all(r["within_budget"] for r in results):
        raise SystemExit("spending exceeded the budget")


if __name__ == "__main__":
    main()
