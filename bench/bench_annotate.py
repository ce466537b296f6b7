"""Benchmark: push 10,000 items to a local Label Studio server and pull 20,000 annotations back.

    LS_BIN=/path/to/label-studio .venv/bin/python bench/bench_annotate.py [--items 10000]

Starts its own server (as the tests do, from LS_BIN or the venv of scripts/install-label-studio.sh) on a
free loopback port, then:
  1. push: N checked items (real PNG images under the document root) -> tasks/s (target >= 500);
  2. pull: N tasks that carry two annotations each by two annotators (imported in bulk with their
     annotations, then linked by `cftools annotate push`'s reconciliation) -> annotations/s (target >= 1,000).
The pull figure is bound by the server (Django, one process): each task costs it about 1.5 ms to
serialize in an export snapshot, which cftools overlaps with storing the previous chunk.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import PIL.Image
import psutil
from sqlalchemy import insert, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fixtures_label_studio as lsfix  # noqa: E402

from cftools.annotate.projects import ImageLinks, project_title  # noqa: E402
from cftools.annotate.pull import pull  # noqa: E402
from cftools.annotate.push import PushReport, push, task_payloads  # noqa: E402
from cftools.annotate.rules import VERIFY, render_label_config  # noqa: E402
from cftools.annotate.label_studio import LabelStudioServer, server_settings  # noqa: E402
from cftools.models import CHECKED, Image, Item, SourceQuestion, utcnow  # noqa: E402
from cftools.workspace import init_workspace, load_workspace  # noqa: E402

TOKEN_ENV = "CFTOOLS_BENCH_LS_TOKEN"
N_IMAGES = 50


def make_workspace(root: Path, url: str, media: Path, prefix: str):  # noqa: ANN201
    ws = init_workspace(root)
    config = ws.root / "cftools.toml"
    config.write_text(config.read_text().replace(
        "[label_studio]\n", f'[label_studio]\nurl = "{url}"\ndocument_root = "{media}"\nproject_prefix = "{prefix}"\n')
        .replace('token_env = "LABEL_STUDIO_API_KEY"', f'token_env = "{TOKEN_ENV}"'))
    ws.close()
    return load_workspace(ws.root)


def add_checked_items(ws, media: Path, n: int, tag: str) -> None:  # noqa: ANN001
    folder = media / tag
    folder.mkdir(parents=True)
    now = utcnow()
    with ws.store.write() as session:
        image_ids = []
        for i in range(N_IMAGES):
            path = folder / f"img{i}.png"
            PIL.Image.new("RGB", (16, 16), (i * 5 % 256, 80, 160)).save(path)
            session.execute(insert(Image.__table__), [{
                "sha256": f"{tag}{i:060d}"[:64], "width": 16, "height": 16, "format": "png",
                "size_bytes": path.stat().st_size, "path": str(path), "created_at": now}])
        image_ids = list(session.execute(select(Image.id).order_by(Image.id)).scalars())
        session.execute(insert(SourceQuestion.__table__), [{
            "dataset": f"bench:{tag}", "external_id": str(i), "image_ref": f"img{i % N_IMAGES}.png",
            "image_id": image_ids[i % N_IMAGES], "question": f"How many dogs are in picture {i}?", "answer": "2",
            "answer_type": "number", "created_at": now} for i in range(n)])
        source_ids = list(session.execute(select(SourceQuestion.id).order_by(SourceQuestion.id)).scalars())
        session.execute(insert(Item.__table__), [{
            "key": f"bench:{tag}:{i}", "kind": "cvqa", "group": "numerical-direct", "source_id": source_ids[i],
            "question": f"How many dogs would there be if one more came in ({i})?", "answer": "3",
            "status": CHECKED, "origin": "ingested", "created_at": now, "updated_at": now} for i in range(n)])


def choice(name: str, to: str, value: str) -> dict:
    return {"from_name": name, "to_name": to, "type": "choices", "value": {"choices": [value]}}


def annotated_tasks(ws, user_ids: list[int], rng: random.Random) -> list[dict]:  # noqa: ANN001
    """The tasks push would create, each with two annotations by two different people."""
    with ws.store.session() as session:
        items = list(session.execute(select(Item).order_by(Item.id)).scalars())
        payloads = task_payloads(session, items, VERIFY, ImageLinks.from_config(ws), False, PushReport(VERIFY, "cvqa"))
    tasks = []
    for _, task in payloads:
        task["annotations"] = [
            {"completed_by": uid, "result": [choice("related", "image", "yes" if rng.random() < 0.9 else "no"),
                                             choice("answer_correct", "proposed_answer",
                                                    "yes" if rng.random() < 0.8 else "no")]}
            for uid in user_ids]
        tasks.append(task)
    return tasks


@contextlib.contextmanager
def cpu_seconds(server_pid: int) -> Iterator[dict[str, float]]:
    """CPU seconds the server and this process spend inside the block: the wall-clock figures move with
    the shared host's load, these much less."""
    server, me = psutil.Process(server_pid), psutil.Process()
    server_before, me_before = sum(server.cpu_times()[:2]), sum(me.cpu_times()[:2])
    spent: dict[str, float] = {}
    yield spent
    spent["server"] = round(sum(server.cpu_times()[:2]) - server_before, 1)
    spent["cftools"] = round(sum(me.cpu_times()[:2]) - me_before, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    args = parser.parse_args()
    binary = lsfix.ls_bin()
    if not binary.exists():
        sys.exit(f"Label Studio not found at {binary}: run scripts/install-label-studio.sh and set LS_BIN")
    scratch = Path(tempfile.mkdtemp(prefix="cftools-bench-ls-"))
    try:
        template = lsfix.migrated_template(binary, scratch)
        data, media = scratch / "data", scratch / "media"
        shutil.copytree(template, data)
        media.mkdir()
        server = lsfix.start_server(binary, data, media, scratch / "server.log")
        try:
            os.environ[TOKEN_ENV] = lsfix.ADMIN_TOKEN
            user_ids = [lsfix.signup(server.url, lsfix.ADMIN_TOKEN, email, pw)[0] for email, pw in lsfix.ANNOTATORS]
            print(f"Label Studio {lsfix.ls_version(binary)} at {server.url}; {args.items} items")

            ws = make_workspace(scratch / "push-ws", server.url, media, "bench push")
            add_checked_items(ws, media, args.items, "push")
            with cpu_seconds(server.proc.pid) as cpu:
                start = time.perf_counter()
                report = push(ws)
                elapsed = time.perf_counter() - start
            assert report.pushed == args.items, report
            print(f"push: {report.pushed} tasks in {elapsed:.1f} s = {report.pushed / elapsed:.0f} tasks/s "
                  f"(target >= 500); CPU s: {cpu}")

            ws2 = make_workspace(scratch / "pull-ws", server.url, media, "bench pull")
            add_checked_items(ws2, media, args.items, "pull")
            admin = LabelStudioServer(server.url, lsfix.ADMIN_TOKEN)
            settings = server_settings(ws2)
            project_id = admin.create_project(project_title(settings, "cvqa", VERIFY),
                                              render_label_config(VERIFY), 2, "bench")
            tasks = annotated_tasks(ws2, user_ids, random.Random(0))
            for start_at in range(0, len(tasks), 1000):
                admin.import_tasks(project_id, tasks[start_at:start_at + 1000])
            admin.close()
            del tasks  # the set-up's 10,000 task dicts are not the pull's to carry
            gc.collect()
            linked = push(ws2)  # links the tasks already on the server (reconciliation), imports nothing
            assert (linked.reconciled, linked.pushed) == (args.items, 0), linked
            with cpu_seconds(server.proc.pid) as cpu:
                start = time.perf_counter()
                pulled = pull(ws2)
                elapsed = time.perf_counter() - start
            n = pulled.judgments_added
            assert n == 2 * args.items, pulled.as_dict()
            print(f"pull: {n} annotations of {pulled.tasks} tasks in {elapsed:.1f} s = {n / elapsed:.0f} "
                  f"annotations/s (target >= 1,000); CPU s: {cpu}; decisions {dict(pulled.decisions)}")
            ws.close()
            ws2.close()
        finally:
            server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
