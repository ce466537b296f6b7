"""Benchmark: 1, 2 and 4 `cftools generate rewrite` workers on one PostgreSQL store, 8 requests in flight each,
against a loopback OpenAI-compatible stub that answers after 200 ms -> items/s and the speed-up over one worker.

    .venv/bin/python bench/bench_workers.py [--items 1600] [--delay 0.2] [--concurrency 8]

Two rates per run:
- work phase: (items - 1) / (last - first generation commit), as the store records them: what the workers do
  together once they run. The work is latency-bound at that concurrency, so the claim protocol
  (cftools.generate.claims), not the two cores, decides this ratio.
- end to end: items / (first process started -> last process ended), which adds each process's start-up
  (imports, opening the store, choosing its jobs; about 2.5 s of CPU each) and exit, paid once per worker.
Every run starts on a fresh database; the script checks that each item was made exactly once, and prints the
workers' CPU seconds (the machine is small: the CPU they need is part of the result).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from sqlalchemy import func, select  # noqa: E402

from cftools.ingest.readers import ingest_table  # noqa: E402
from cftools.models import Generation, Item  # noqa: E402
from cftools.workspace import init_workspace  # noqa: E402
from llm_stub import start_process as start_stub  # noqa: E402
from pg_server import find_pg_bin, fresh_database, running_postgres  # noqa: E402


@dataclass
class RunFigures:
    workers: int
    end_to_end: float  # items/s, first process started -> last ended
    work_phase: float  # items/s, first -> last generation commit
    cpu_s: float  # the workers' CPU seconds (user + system)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(postgres_url: str, workers: int, items: int, stub_url: str, concurrency: int,
            scratch: Path) -> RunFigures:
    name = f"bench_workers_{workers}"
    ws = init_workspace(scratch / name, fresh_database(postgres_url, name))
    table = scratch / f"{name}.csv"
    table.write_text("image,question,answer\n" + "".join(f"im{i}.png,How many cups are on table {i}?,{i % 9}\n"
                                                          for i in range(items)))
    ingest_table(ws.store, table)
    config = ws.root / "cftools.toml"
    config.write_text(config.read_text().replace("[llm]\n", f'[llm]\nbase_url = "{stub_url}"\n', 1))
    command = [sys.executable, "-m", "cftools.cli", "--workspace", str(ws.root), "generate", "rewrite", "--group",
               "numerical-direct", "--backend", "openai", "--model", "stub", "--concurrency", str(concurrency),
               "--quiet"]
    cpu_before = children_cpu_s()
    started = time.perf_counter()
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    codes = [p.wait() for p in procs]
    seconds = time.perf_counter() - started
    with ws.store.session() as session:
        made = session.execute(select(func.count()).select_from(Item).where(Item.origin == "generated")).scalar_one()
        calls = session.execute(select(func.count()).select_from(Generation)).scalar_one()
        first, last = session.execute(select(func.min(Generation.created_at),
                                             func.max(Generation.created_at))).one()
    ws.close()
    assert codes == [0] * workers and made == items and calls == items, (codes, made, calls)
    return RunFigures(workers, items / seconds, (items - 1) / max((last - first).total_seconds(), 1e-9),
                      children_cpu_s() - cpu_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1600)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    pg_bin = find_pg_bin()
    if pg_bin is None:
        sys.exit("needs PostgreSQL server binaries (initdb, pg_ctl)")
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench-workers")
    stub, stub_url = start_stub(args.delay)
    try:
        with running_postgres(pg_bin) as url, tempfile.TemporaryDirectory() as scratch:
            rates = {n: one_run(url, n, args.items, stub_url, args.concurrency, Path(scratch)) for n in (1, 2, 4)}
    finally:
        stub.kill()
    limit = args.concurrency / args.delay
    print(f"{args.items} items, {args.concurrency} requests in flight per worker, stub delay {args.delay}s; "
          f"load average at the end {os.getloadavg()[0]:.2f}")
    one = rates[1]
    for n, run in rates.items():
        print(f"{n} worker(s): work phase {run.work_phase:6.1f} items/s ({run.work_phase / one.work_phase:.2f}x; "
              f"latency limit {n * limit:.0f}/s)  end to end {run.end_to_end:6.1f} items/s "
              f"({run.end_to_end / one.end_to_end:.2f}x)  workers' CPU {run.cpu_s:.1f}s")


if __name__ == "__main__":
    main()
