"""Benchmark: `--ray` with 1 and 2 workers against the local run, on one machine, and Ray's start-up cost.

    .venv/bin/python bench/bench_ray.py [--items 240] [--delay 0.2] [--concurrency 4] [--pairs 6] [--join-calls 60]
        [--stages rewrite,images,join]

A local Ray cluster on loopback (`ray.cluster_utils.Cluster`: a head and a second node, one CPU each, no dashboard,
no usage stats); this process is the driver and runs the commands in-process, as `cftools … --ray ADDRESS` would.
"Workers" is `[ray] actors`: how many Ray actors answer.

- rewrite, latency-bound: the loopback LLM stub answers every request after DELAY seconds; each worker (an async
  actor) keeps CONCURRENCY calls in flight, and so does the local run (--concurrency). Throughput is the work phase,
  (items - 1) / (first -> last generation commit), as the store records it, and end to end (the command's wall time,
  worker start-up included).
- images, CPU-bound: the embedded tiny diffusers pipeline (64x64, 4 steps), PAIRS pairs x 2 candidates; each worker
  loads the pipeline once. On a 2-core machine two workers share the two cores with the driver: whatever speed-up
  there is comes from the cores, not from Ray, and a bigger pipeline on one GPU per worker is what Ray is for.
- join, latency-bound: JOIN_CALLS calls of DELAY seconds through one API worker per node (one call in flight each),
  the cluster's third node joining after a quarter of them; the calls each node's worker was handed, and the wall
  time, beside the same run with the in-flight limit read once at the start (as before issue 45: the joining node's
  worker shared the calls but no more of them were in flight).
- start-up: starting the head node, connecting a driver, and the first call answered by a new API worker (the
  actor's process start and imports).
Each run starts from a fresh workspace; the script checks every item was made exactly once.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
os.environ.setdefault("OPENAI_API_KEY", "sk-bench-ray")

from sqlalchemy import func, select  # noqa: E402

from cftools.models import Generation, Item, ItemEvent  # noqa: E402
from cftools.workspace import load_workspace  # noqa: E402
from fault_trials import (EXAMPLE_CAPTIONS, configure_llm, fresh_workspace, setup_cli,  # noqa: E402
                          write_number_table)
from llm_stub import start_process  # noqa: E402


def set_actors(ws: Path, actors: int | None) -> None:
    config = ws / "cftools.toml"
    text = config.read_text()
    text = re.sub(r"(?m)^actors = .*\n", "", text)  # the template has [ray], its keys commented
    if actors:
        text = text.replace("\n[ray]\n", f"\n[ray]\nactors = {actors}\n", 1)
    config.write_text(text)


def commit_span(ws: Path, rows) -> tuple[int, float]:  # noqa: ANN001
    workspace = load_workspace(ws)
    try:
        with workspace.store.session() as session:
            times = sorted(session.execute(rows).scalars())
    finally:
        workspace.close()
    return len(times), (times[-1] - times[0]).total_seconds() if len(times) > 1 else 0.0


def rewrite_run(scratch: Path, stub_url: str, items: int, concurrency: int, address: str | None,
                actors: int | None) -> dict:
    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", items), "--images", scratch / "in")
    configure_llm(ws, stub_url)
    set_actors(ws, actors)
    args = ["generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--concurrency", str(concurrency),
            "--quiet"] + (["--ray", address] if address else [])
    started = time.perf_counter()
    setup_cli(ws, *args)
    wall = time.perf_counter() - started
    made, span = commit_span(ws, select(Generation.created_at).where(Generation.generator == "rewrite"))
    workspace = load_workspace(ws)
    with workspace.store.session() as session:
        drafted = session.execute(select(func.count(func.distinct(Item.key))).where(Item.origin == "generated")
                                  ).scalar_one()
    workspace.close()
    assert made == drafted == items, (made, drafted, items)  # every item once, one call each
    return {"work": (made - 1) / span if span else float("nan"), "end_to_end": items / wall, "wall": wall}


def images_run(base: Path, scratch: Path, pairs: int, address: str | None, actors: int | None) -> dict:
    shutil.copytree(base, scratch)  # the same pairs and descriptions for every run
    set_actors(scratch, actors)
    args = ["generate", "images", "--per-prompt", "2", "--styles", "photograph"] + (["--ray", address] if address
                                                                                      else [])
    started = time.perf_counter()
    setup_cli(scratch, *args)
    wall = time.perf_counter() - started
    jobs, span = commit_span(scratch, select(ItemEvent.created_at).where(ItemEvent.stage == "generate images"))
    assert jobs == pairs, (jobs, pairs)
    images = 4 * jobs  # 2 candidates x (cause, effect)
    return {"work": 4 * (jobs - 1) / span if span else float("nan"), "end_to_end": images / wall, "wall": wall}


def join_run(cluster, url: str, calls: int, growing: bool) -> dict:  # noqa: ANN001
    """CALLS stub calls through per-node API workers (one in flight each); a node joins after a quarter of them.
    GROWING: the in-flight limit follows the pool (`in_flight_of`), else it is the pool's at the start."""
    from cftools.distributed import RayWorkers, WorkerSpec, in_flight_of
    from cftools.llm.runner import JobResult, Shown, run_jobs
    from cftools.llm import make_backend

    class OnRay:
        def __init__(self, workers: RayWorkers) -> None:
            self.workers = workers

        @property
        def in_flight(self) -> int:
            return self.workers.in_flight

    workers = RayWorkers(WorkerSpec(build=make_backend, args=({"backend": "openai", "base_url": url,
                                                                "model": "stub"},), concurrency=1))
    nodes_before = set(workers.nodes())
    limit = in_flight_of(OnRay(workers)) if growing else workers.in_flight
    message = [{"role": "user", "content": "Question: How many?\nAnswer: 2"}]
    done, joined = [0], []

    def work(n: int) -> JobResult:
        workers.call("complete", message, {"max_tokens": 8})
        return JobResult(job=n, ok=True)

    def written(batch: list) -> None:
        done[0] += len(batch)
        if not joined and done[0] >= calls // 4:  # in the driver's main thread: Ray starts a node's processes there
            joined.append(cluster.add_node(num_cpus=1))
            cluster.wait_for_nodes()
            workers.grow()

    started = time.perf_counter()
    try:
        stats = run_jobs(range(calls), work, written, concurrency=limit, shown=Shown(quiet=True))
        wall = time.perf_counter() - started
        by_node = workers.calls_by_node()
    finally:
        workers.close()
        for node in joined:
            cluster.remove_node(node)
    assert stats.done == calls, stats
    new = sum(n for node, n in by_node.items() if node not in nodes_before)
    return {"wall": wall, "new_calls": new, "share": new / calls, "nodes": len(by_node)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=240)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=6, help="At most 8 (examples/mucr/captions.csv).")
    parser.add_argument("--join-calls", type=int, default=60, help="Calls of the join stage.")
    parser.add_argument("--stages", default="rewrite,images,join", help="Which stages to measure (comma-separated).")
    args = parser.parse_args()
    stages = args.stages.split(",")
    import ray
    from ray.cluster_utils import Cluster

    from cftools.distributed import RayWorkers, WorkerSpec
    from cftools.llm import make_backend

    scratch = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    stub, url = start_process(args.delay, "--context")
    figures: dict[str, float] = {}
    cluster = None
    try:
        t = time.perf_counter()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        figures["head node started"] = time.perf_counter() - t
        t = time.perf_counter()
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        figures["second node joined"] = time.perf_counter() - t
        t = time.perf_counter()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        figures["driver connected"] = time.perf_counter() - t
        t = time.perf_counter()
        workers = RayWorkers(WorkerSpec(build=make_backend, args=({"backend": "openai", "base_url": url,
                                                                    "model": "stub"},), actors=1))
        workers.call("complete", [{"role": "user", "content": "Question: How many?\nAnswer: 2"}], {"max_tokens": 8})
        figures["first call on a new API worker"] = time.perf_counter() - t
        workers.close()

        rows = []
        for name, address, actors in (("local", None, None), ("ray, 1 worker", cluster.address, 1),
                                      ("ray, 2 workers", cluster.address, 2)):
            if "rewrite" not in stages:
                break
            rows.append(("rewrite", name, rewrite_run(scratch / f"rw-{actors}", url, args.items, args.concurrency,
                                                     address, actors)))
        joins = [(name, join_run(cluster, url, args.join_calls, growing)) for name, growing in
                 (("limit read at start", False), ("limit follows pool", True)) if "join" in stages]
        # the local run computes on one thread, as each Ray worker does (Ray gives it its one CPU's thread): on two
        # shared cores more threads in the driver only fight the other processes for them
        import torch

        torch.set_num_threads(1)
        base = fresh_workspace(scratch / "img-base")
        setup_cli(base, "ingest", "captions", EXAMPLE_CAPTIONS)
        configure_llm(base, url)
        setup_cli(base, "generate", "context", "--limit", str(args.pairs), "--quiet")
        for name, address, actors in (("local", None, None), ("ray, 1 worker", cluster.address, 1),
                                      ("ray, 2 workers", cluster.address, 2)):
            if "images" not in stages:
                break
            rows.append(("images", name, images_run(base, scratch / f"img-{actors}", args.pairs, address, actors)))
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        stub.kill()
        stub.wait()
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"command: {' '.join([sys.executable, *sys.argv])}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"rewrite: {args.items} items, stub delay {args.delay}s, {args.concurrency} calls in flight per worker "
          f"(local: --concurrency {args.concurrency}); images: {args.pairs} pairs x 2 candidates, tiny pipeline")
    if rows:
        print(f"{'stage':8} {'run':16} {'work phase':>14} {'vs local':>9} {'vs 1 worker':>12} {'end to end':>14} "
              f"{'wall s':>7}")
    unit = {"rewrite": "items/s", "images": "images/s"}
    for stage in [s for s in stages if s != "join"]:
        chosen = {name: run for s, name, run in rows if s == stage}
        for name, run in chosen.items():
            print(f"{stage:8} {name:16} {run['work']:8.1f} {unit[stage]:<5} "
                  f"{run['work'] / chosen['local']['work']:8.2f}x "
                  f"{run['work'] / chosen['ray, 1 worker']['work']:11.2f}x "
                  f"{run['end_to_end']:8.1f} {unit[stage]:<5} {run['wall']:7.1f}")
    if joins:
        print(f"join: {args.join_calls} calls of {args.delay}s, one API worker per node (1 call in flight each), the "
              f"third node joining after {args.join_calls // 4}")
        for name, run in joins:
            print(f"  {name:22} wall {run['wall']:6.1f} s   joining node's calls {run['new_calls']:3d} "
                  f"({run['share']:.0%})   nodes with calls {run['nodes']}")
    print("start-up:")
    for what, seconds in figures.items():
        print(f"  {what:34} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
