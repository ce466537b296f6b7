"""Benchmark: push 10,000 items to a local Label Studio server and pull 20,000 annotations back.

    LS_BIN=/path/to/label-studio .venv/bin/python bench/bench_annotate.py [--items 10000] [--repeat 3]
        [--workers 1,2] [--export-chunk 1000] [--no-push] [--assigned] [--people]

Starts its own server (as the tests do, from LS_BIN or the venv of scripts/install-label-studio.sh) on a
free loopback port, then:
  1. push: N checked items (real PNG images under the document root) -> tasks/s (target >= 500);
  2. pull: N tasks that carry two annotations each by two annotators (imported in bulk with their
     annotations, then linked by `cftools annotate push`'s reconciliation) -> annotations/s (target >= 1,000).
     The linked workspace is set up once; each pull runs on a fresh copy of it, REPEAT times for each
     `pull_workers` value in WORKERS (interleaved, so that the shared host's load falls on all alike), and
     the median is reported. `--workers 1` is the pull as it was before parallel snapshots (one snapshot
     fetched ahead while the previous chunk is stored).
With --assigned the same runs follow, beside the shared-project ones, with cftools' assignment (`[label_studio]
annotators`, three people): each item goes to two people's own projects, so the push imports 2N tasks and the pull
reads 2N tasks of one annotation each; the figures are per task pushed and per annotation pulled, as above.
With --people (implies --assigned) the same push and pull run again through three per-person servers (one
Label Studio per person, each its person's alone, `[label_studio.people."EMAIL"]`), beside the one-server assigned
path in the same run, and each per-person server's resident memory is printed idle and after the push.
Every figure stands beside the wall time, the CPU seconds of cftools (this process, all threads) and of the
server (its process tree): the wall time moves with the host's load, the CPU seconds much less. The pull is
bound by the server (Django, one process, one core at most): each task costs it about 1.6 ms of CPU to
serialize in an export snapshot (2 to 2.5 ms on a busy host), so a pull is as fast as the server is kept busy;
two snapshots built at once cost it more CPU than one after the other (`pull_workers` 2 builds one while
cftools downloads the one before).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import PIL.Image
from sqlalchemy import insert, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fixtures_label_studio as lsfix  # noqa: E402

from cftools.annotate.projects import ImageLinks, project_title  # noqa: E402
from cftools.annotate.pull import pull  # noqa: E402
from cftools.annotate.task_import import PushReport, task_payloads
from cftools.annotate.push import push
from cftools.judgments import VERIFY
from cftools.annotate.rules import preload_agreement_library, render_label_config
from cftools.annotate.label_studio import PULL_WORKERS, LabelStudioServer, server_settings  # noqa: E402
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


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process PID and its descendants, with the children each has reaped."""
    try:
        import psutil
    except ImportError:
        return _proc_tree_cpu_seconds(pid)
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def _proc_tree_cpu_seconds(pid: int) -> float:
    """As tree_cpu_seconds, read from /proc (Linux) where psutil is not installed."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # the command name may hold spaces: the fields start after its closing parenthesis
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
    tree, grew = {pid}, True
    while grew:
        found = {p for p, fields in stats.items() if int(fields[1]) in tree} - tree  # fields[1]: the parent
        tree |= found
        grew = bool(found)
    # fields[11:15]: utime, stime, cutime, cstime in clock ticks
    return sum(sum(int(v) for v in stats[p][11:15]) for p in tree if p in stats) / tick


@dataclass
class Spent:
    wall: float = 0.0
    server_cpu: float = 0.0
    cftools_cpu: float = 0.0

    def text(self) -> str:
        return f"wall {self.wall:.1f} s; CPU s: server {self.server_cpu:.1f}, cftools {self.cftools_cpu:.1f}"


@contextlib.contextmanager
def measured(server_pid: int) -> Iterator[Spent]:
    """Wall time and the CPU seconds the server and this process spend inside the block: the wall-clock
    figures move with the shared host's load, the CPU seconds much less."""
    spent = Spent()
    server_before, me_before, start = tree_cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    yield spent
    spent.wall = time.perf_counter() - start
    spent.cftools_cpu = time.process_time() - me_before
    spent.server_cpu = tree_cpu_seconds(server_pid) - server_before


def set_option(ws_root: Path, name: str, value: object) -> None:
    config = ws_root / "cftools.toml"
    config.write_text(config.read_text().replace("[label_studio]\n", f"[label_studio]\n{name} = {value}\n", 1))


def linked_pull_workspace(server_url: str, media: Path, root: Path, n: int, user_ids: list[int]) -> Path:
    """A workspace whose N items are linked to server tasks that carry two annotations each (none pulled yet)."""
    ws = make_workspace(root, server_url, media, "bench pull")
    add_checked_items(ws, media, n, "pull")
    admin = LabelStudioServer(server_url, lsfix.ADMIN_TOKEN)
    project_id = admin.create_project(project_title(server_settings(ws), "cvqa", VERIFY),
                                      render_label_config("cvqa", VERIFY), 2, "bench")
    tasks = annotated_tasks(ws, user_ids, random.Random(0))
    for start_at in range(0, len(tasks), 1000):
        admin.import_tasks(project_id, tasks[start_at:start_at + 1000])
    admin.close()
    del tasks  # the set-up's task dicts are not the pull's to carry
    linked = push(ws, "cvqa")  # links the tasks already on the server (reconciliation), imports nothing
    assert (linked.reconciled, linked.pushed) == (n, 0), linked
    ws.close()
    return root


def assign_to(ws_root: Path, people: list[str]) -> None:
    set_option(ws_root, "annotators", "[" + ", ".join(f'"{p}"' for p in people) + "]")


def linked_assigned_workspace(server_url: str, media: Path, root: Path, n: int, people: dict[str, int]) -> Path:
    """As `linked_pull_workspace`, with assignment: each item's two tasks sit in two people's own projects, each
    with that person's annotation."""
    from cftools.annotate.projects import ensure_project

    ws = make_workspace(root, server_url, media, "bench assigned")
    assign_to(ws.root, list(people))
    ws.close()
    ws = load_workspace(root)
    add_checked_items(ws, media, n, "pa2")
    admin = LabelStudioServer(server_url, lsfix.ADMIN_TOKEN)
    settings = server_settings(ws)
    emails = list(people)
    per_person: dict[str, list[dict]] = {email: [] for email in emails}
    rng = random.Random(0)
    for i, task in enumerate(annotated_tasks(ws, [0], rng)):
        for person in (emails[i % 3], emails[(i + 1) % 3]):
            copy = {"data": task["data"], "meta": {**task["meta"], "purpose": VERIFY, "assignee": person},
                    "annotations": [{**task["annotations"][0], "completed_by": people[person]}]}
            per_person[person].append(copy)
    for person, tasks in per_person.items():
        project_id = ensure_project(admin, settings, "cvqa", VERIFY, str(root), assignee=person)
        for start_at in range(0, len(tasks), 1000):
            admin.import_tasks(project_id, tasks[start_at:start_at + 1000])
    admin.close()
    del per_person
    linked = push(ws, "cvqa")  # links the tasks already in each person's project, imports nothing
    assert (linked.reconciled, linked.pushed) == (2 * n, 0), linked
    ws.close()
    return root


def rss_mib(pid: int) -> float:
    """Resident memory of process PID and its descendants (MiB)."""
    total = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            with open(f"/proc/{current}/status") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
            with open(f"/proc/{current}/task/{current}/children") as fh:
                pids += [int(c) for c in fh.read().split()]
        except (OSError, StopIteration):
            continue
    return total / 1024


PEOPLE_TOKEN_ENV = "CFTOOLS_BENCH_PERSON_TOKEN_{}"


def start_people_servers(binary: Path, scratch: Path, media: Path) -> dict[str, tuple]:
    """One server per person (the people of the shared server's bench), each its person's alone, started at once
    from a migrated template with no user: email -> (RunningServer, token, user id)."""
    template = lsfix.migrated_template(binary, scratch, empty=True)
    launched = {}
    for n, (email, password) in enumerate((*lsfix.ANNOTATORS, lsfix.ADJUDICATOR)):
        data = scratch / f"person-{n}"
        shutil.copytree(template, data)
        token = f"cftools-bench-person-{n}-token-0123456789"
        launched[email] = (lsfix.launch_server(binary, data, media, scratch / f"person-{n}.log",
                                               (email, password, token)), token)
    found = {}
    for email, (running, token) in launched.items():
        lsfix.wait_until_up(running)
        os.environ[PEOPLE_TOKEN_ENV.format(len(found))] = token
        found[email] = (running, token, LabelStudioServer(running.url, token).check()["id"])
    return found


def people_workspace(root: Path, media: Path, servers: dict[str, tuple], prefix: str):  # noqa: ANN201
    ws = init_workspace(root)
    config = ws.root / "cftools.toml"
    config.write_text(config.read_text().replace("[label_studio]\n", f'[label_studio]\ndocument_root = "{media}"\n'
                                                 f'project_prefix = "{prefix}"\n', 1) + "".join(
        f'\n[label_studio.people."{email}"]\nurl = "{running.url}"\ntoken_env = "{PEOPLE_TOKEN_ENV.format(n)}"\n'
        for n, (email, (running, _, _)) in enumerate(servers.items())))
    ws.close()
    return load_workspace(root)


def linked_people_workspace(media: Path, root: Path, n: int, servers: dict[str, tuple]) -> Path:
    """As `linked_assigned_workspace`, each person's project on their own server."""
    from cftools.annotate.projects import ensure_project

    ws = people_workspace(root, media, servers, "bench people pull")
    add_checked_items(ws, media, n, "pp")
    settings = server_settings(ws)
    emails = list(servers)
    per_person: dict[str, list[dict]] = {email: [] for email in emails}
    for i, task in enumerate(annotated_tasks(ws, [0], random.Random(0))):
        for person in (emails[i % 3], emails[(i + 1) % 3]):
            per_person[person].append({"data": task["data"], "meta": {**task["meta"], "purpose": VERIFY,
                                                                      "assignee": person},
                                       "annotations": [{**task["annotations"][0], "completed_by": servers[person][2]}]})
    for person, tasks in per_person.items():
        own = LabelStudioServer(servers[person][0].url, servers[person][1])
        project_id = ensure_project(own, settings, "cvqa", VERIFY, str(root), assignee=person)
        for start_at in range(0, len(tasks), 1000):
            own.import_tasks(project_id, tasks[start_at:start_at + 1000])
        own.close()
    linked = push(ws, "cvqa")
    assert (linked.reconciled, linked.pushed) == (2 * n, 0), linked
    ws.close()
    return root


def people_mode(binary: Path, scratch: Path, media: Path, items: int, shared_pid: int, shared_assigned: Path) -> None:
    """Push and pull through three per-person servers beside the one-server (assigned) path, and each person's
    server's resident memory (idle, then holding its share of 2 x ITEMS tasks)."""
    servers = start_people_servers(binary, scratch, media)
    try:
        pids = [running.proc.pid for running, _, _ in servers.values()]
        time.sleep(2)
        idle = [rss_mib(pid) for pid in pids]
        print(f"per-person servers: resident memory idle {', '.join(f'{m:.0f}' for m in idle)} MiB", flush=True)
        ws = people_workspace(scratch / "people-push-ws", media, servers, "bench people push")
        add_checked_items(ws, media, items, "pu")  # tags of <= 4 characters: the fake hashes stay distinct
        start = time.perf_counter()
        report = push(ws, "cvqa")
        wall = time.perf_counter() - start
        ws.close()
        assert report.pushed == 2 * items, report
        print(f"push (3 per-person servers, 2 per item): {report.pushed} tasks = {report.pushed / wall:.0f} tasks/s, "
              f"{items / wall:.0f} items/s; {wall:.1f} s", flush=True)
        after = [rss_mib(pid) for pid in pids]
        print(f"per-person servers after the push ({2 * items // 3} tasks each): resident memory "
              f"{', '.join(f'{m:.0f}' for m in after)} MiB", flush=True)
        template = linked_people_workspace(media, scratch / "people-pull-ws", items, servers)
        preload_agreement_library()
        n = 2 * items
        for repeat in range(2):
            for label, source in (("one server, assigned", shared_assigned), ("3 per-person servers", template)):
                spent = pull_once(source, scratch / f"people-pull-{repeat}-{label[:3]}", PULL_WORKERS, shared_pid,
                                  items, None)
                print(f"pull ({label}) run {repeat + 1}: {n} annotations = {rate(n, spent):.0f} annotations/s; "
                      f"{spent.wall:.1f} s", flush=True)
        print(f"per-person servers at the end: resident memory "
              f"{', '.join(f'{rss_mib(pid):.0f}' for pid in pids)} MiB", flush=True)
    finally:
        for running, _, _ in servers.values():
            running.stop()


def pull_once(template: Path, root: Path, workers: int, server_pid: int, n: int, chunk: int | None) -> Spent:
    """One pull of the annotations of TEMPLATE's tasks, on a fresh copy of it, with WORKERS snapshots at once
    (of CHUNK tasks each, when given)."""
    shutil.copytree(template, root)
    set_option(root, "pull_workers", workers)
    if chunk:
        set_option(root, "export_chunk", chunk)
    ws = load_workspace(root)
    gc.collect()
    try:
        with measured(server_pid) as spent:
            pulled = pull(ws)
    finally:
        ws.close()
    assert pulled.judgments_added == 2 * n, pulled.as_dict()
    return spent


def rate(n: int, spent: Spent) -> float:
    return n / spent.wall


def median_of(runs: list[Spent]) -> Spent:
    return Spent(*(statistics.median(getattr(r, f) for r in runs) for f in ("wall", "server_cpu", "cftools_cpu")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="pulls per worker count (the median is reported)")
    parser.add_argument("--workers", default=f"1,{PULL_WORKERS}",
                        help="comma-separated pull_workers values to compare (1: the pull before parallel snapshots)")
    parser.add_argument("--export-chunk", type=int, default=None, help="tasks per export snapshot (default 1000)")
    parser.add_argument("--no-push", action="store_true", help="measure the pull only")
    parser.add_argument("--assigned", action="store_true",
                        help="also measure push and pull with per-person projects ([label_studio] annotators)")
    parser.add_argument("--people", action="store_true",
                        help="also push and pull through three per-person servers (one server per person) beside "
                             "the one-server assigned path, and measure a per-person server's resident memory")
    args = parser.parse_args()
    args.assigned = args.assigned or args.people
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
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
            people = {email: lsfix.signup(server.url, lsfix.ADMIN_TOKEN, email, pw)[0]
                      for email, pw in (*lsfix.ANNOTATORS, lsfix.ADJUDICATOR)}
            user_ids = [people[email] for email, _ in lsfix.ANNOTATORS]
            print(f"Label Studio {lsfix.ls_version(binary)} at {server.url}; {args.items} items; "
                  f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)

            if not args.no_push:
                ws = make_workspace(scratch / "push-ws", server.url, media, "bench push")
                add_checked_items(ws, media, args.items, "push")
                with measured(server.proc.pid) as spent:
                    report = push(ws, "cvqa")
                ws.close()
                assert report.pushed == args.items, report
                print(f"push: {report.pushed} tasks = {report.pushed / spent.wall:.0f} tasks/s (target >= 500); "
                      f"{spent.text()}", flush=True)
                if args.assigned:
                    ws = make_workspace(scratch / "push-assigned-ws", server.url, media, "bench push assigned")
                    assign_to(ws.root, list(people))
                    ws.close()
                    ws = load_workspace(scratch / "push-assigned-ws")
                    add_checked_items(ws, media, args.items, "pa")
                    with measured(server.proc.pid) as spent:
                        report = push(ws, "cvqa")
                    ws.close()
                    assert report.pushed == 2 * args.items, report
                    print(f"push (assigned, 3 people, 2 per item): {report.pushed} tasks = "
                          f"{report.pushed / spent.wall:.0f} tasks/s, {args.items / spent.wall:.0f} items/s; "
                          f"{spent.text()}", flush=True)

            template = linked_pull_workspace(server.url, media, scratch / "pull-ws", args.items, user_ids)
            # (label, template, pull_workers) of each pull measured
            setups = [(f"pull_workers={w}", template, w) for w in workers]
            if args.assigned:
                assigned_template = linked_assigned_workspace(server.url, media, scratch / "pull-assigned-ws",
                                                              args.items, people)
                setups.append((f"assigned, pull_workers={workers[-1]}", assigned_template, workers[-1]))
            preload_agreement_library()  # imported once here, as it is once per `cftools annotate pull`
            n = 2 * args.items
            runs: dict[str, list[Spent]] = {label: [] for label, _, _ in setups}
            for repeat in range(args.repeat):
                # interleaved, and in turn forwards and backwards, so that a drift of the host's load (or of the
                # server) falls on all set-ups alike
                for number, (label, source, w) in enumerate(setups if repeat % 2 == 0 else setups[::-1]):
                    spent = pull_once(source, scratch / f"pull-{repeat}-{number}", w, server.proc.pid, args.items,
                                      args.export_chunk)
                    runs[label].append(spent)
                    print(f"pull ({label}) run {repeat + 1}: {n} annotations = {rate(n, spent):.0f} "
                          f"annotations/s; {spent.text()}", flush=True)
            for label, spent_runs in runs.items():
                middle = median_of(spent_runs)
                print(f"pull ({label}), median of {len(spent_runs)}: "
                      f"{statistics.median(rate(n, s) for s in spent_runs):.0f} annotations/s (target >= 1,000); "
                      f"{middle.text()}")
            if args.people:
                people_mode(binary, scratch, media, args.items, server.proc.pid, assigned_template)
            print(f"load average at the end {os.getloadavg()[0]:.2f}")
        finally:
            server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
