"""Release diff benchmark: `cftools release diff A B` on two 10,000-item releases with 20 stored runs of A.

    .venv/bin/python bench/bench_diff.py [--items 10000] [--runs 20] [--dir /tmp/cftools-bench-diff]

Builds the synthetic store of bench_export.py (one image and source question per item), exports it as A through
`export_release`, and stores 20 runs of A: one real `run_eval` with a scripted model, then 19 whose prediction lines
are made by the run's own code (`generated_line` for seeded replies, `rank_line` for seeded option scores; half
generate, half rank) and kept as a run is (config.json, predictions.jsonl, the store's EvalRun and Prediction rows).
Then edits the store (3% of the items rejected, 5% relabelled, 3% given another image, 5% more items added) and
exports B with `--previous A`. Timed, in a fresh process: `cftools release diff A B --json --out FILE` and the
Markdown report, end to end (reading both releases, the join, rescoring the 20 runs). Target: under 60 s.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_export import build_store, timed_child  # noqa: E402

from sqlalchemy import select, update  # noqa: E402

from cftools.models import ACCEPTED, Item, SourceQuestion, utcnow  # noqa: E402
from cftools.workspace import Workspace  # noqa: E402

REPLIES = ("yes", "no", "0", "1", "2", "3", "4", "5", "6", "7", "8")


class Scripted:
    """Replies and option scores drawn from a seeded generator (the one real run)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def generate(self, prompts):  # noqa: ANN001, ANN201
        return [self.rng.choice(REPLIES) for _ in prompts]

    def score_options(self, prompts):  # noqa: ANN001, ANN201
        return [[{"mean_loss": self.rng.random(), "sum_logprob": -self.rng.random(), "n_tokens": 1}
                 for _ in p.options] for p in prompts]

    def close(self) -> None:
        pass


def store_runs(workspace: Workspace, release: Path, n_runs: int) -> None:
    """One real run of RELEASE, then N_RUNS - 1 more made with the run's own line writers."""
    from cftools.evaluate.predictions import EvalResult, append_predictions, record_eval_run
    from cftools.evaluate.questions import PromptTemplates, build_questions
    from cftools.evaluate.run import EvalOptions, generated_line, rank_line, run_eval, write_config
    from cftools.release.layout import load_records

    first = run_eval(release, "blind", options=EvalOptions(mode="generate", out_dir=workspace.path("runs", "run-00")),
                     answerer=Scripted(0), workspace=workspace)
    records = load_records(release)
    asked = {mode: build_questions(release, records, PromptTemplates(), mode, False)[0] for mode in ("generate", "rank")}
    for n in range(1, n_runs):
        mode = "rank" if n % 2 else "generate"
        rng = random.Random(n)
        if mode == "rank":
            lines = [rank_line(q, [{"mean_loss": rng.random(), "sum_logprob": -rng.random(), "n_tokens": 1}
                                   for _ in q.options], "mean-loss") for q in asked["rank"]]
        else:
            lines = [generated_line(q, rng.choice(REPLIES)) for q in asked["generate"]]
        out = workspace.path("runs", f"run-{n:02d}")
        out.mkdir(parents=True)
        config = {**first.config, "model": f"blind:bench:model-{n}", "mode": mode,
                  "score": "mean-loss" if mode == "rank" else None, "questions": len(lines)}
        write_config(out, config)
        append_predictions(out / "predictions.jsonl", lines)
        record_eval_run(workspace.store, EvalResult(out_dir=out, config=config, summary={}, predictions=lines,
                                                    asked=len(lines)))


def edit_store(workspace: Workspace, n_items: int, seed: int = 7) -> dict[str, int]:
    """Reject 3%, relabel 5%, give 3% another image, add 5% more items."""
    rng = random.Random(seed)
    keys = [f"bench:{i:06d}" for i in range(n_items)]
    picked = rng.sample(keys, k=int(0.11 * n_items))
    removed, relabelled, reimaged = (picked[:int(0.03 * n_items)], picked[int(0.03 * n_items):int(0.08 * n_items)],
                                     picked[int(0.08 * n_items):])
    now = utcnow()
    with workspace.store.write() as session:
        session.execute(update(Item).where(Item.key.in_(removed)).values(status="rejected", updated_at=now))
        for key in relabelled:
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            flipped = {"yes": "no", "no": "yes"}
            item.answer = flipped[item.answer] if item.answer in flipped else str((int(item.answer) + 1) % 9)
            item.updated_at = now
        image_ids = list(session.execute(select(SourceQuestion.image_id)).scalars())
        for key in reimaged:
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            source = session.get(SourceQuestion, item.source_id)
            source.image_id = rng.choice([i for i in image_ids[:50] if i != source.image_id])
        template = session.execute(select(Item).where(Item.key == keys[0])).scalar_one()
        for n in range(int(0.05 * n_items)):
            session.add(Item(key=f"bench:new{n:06d}", kind="cvqa", group=template.group, source_id=template.source_id,
                             question=f"How many circles would there be if {n % 4} more were drawn?",
                             answer=str(n % 9), status=ACCEPTED, origin="generated", data={"n": n},
                             created_at=now, updated_at=now))
    return {"removed": len(removed), "relabelled": len(relabelled), "new images": len(reimaged),
            "added": int(0.05 * n_items)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/cftools-bench-diff"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    from cftools.release.export import ExportOptions, export_release
    from cftools.workspace import find_workspace

    start = time.perf_counter()
    ws_root = build_store(args.dir, args.items, args.items)
    workspace = find_workspace(ws_root)
    a = export_release(workspace, "bench", "1",
                       options=ExportOptions(include_unverified=True, licence="CC-BY-4.0")).path
    print(f"A: {args.items} items exported in {time.perf_counter() - start:.1f} s", flush=True)
    start = time.perf_counter()
    store_runs(workspace, a, args.runs)
    print(f"{args.runs} stored runs of A in {time.perf_counter() - start:.1f} s", flush=True)
    start = time.perf_counter()
    edits = edit_store(workspace, args.items)
    b = export_release(workspace, "bench", "2",
                       options=ExportOptions(include_unverified=True, licence="CC-BY-4.0", previous=a)).path
    print(f"B: edits {edits}, exported with --previous in {time.perf_counter() - start:.1f} s", flush=True)
    workspace.close()

    print(f"load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work on the machine stretches "
          "the wall-clock figure; the CPU figure is this command's own)")
    for label, extra in (("JSON", ["--json", "--out", str(args.dir / "diff.json")]),
                         ("Markdown", ["--out", str(args.dir / "diff.md")])):
        command = ["--workspace", str(ws_root), "release", "diff", str(a), str(b), *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds, peak = timed_child(command)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        print(f"cftools {' '.join(command)}")
        print(f"release diff ({label}): {seconds:.1f} s wall, {cpu:.1f} s CPU, peak memory {peak:.0f} MiB "
              "(target: under 60 s)", flush=True)


if __name__ == "__main__":
    main()
