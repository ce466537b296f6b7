"""Fault trials: a stage's real `cftools` process SIGKILLed at a seeded random point, then run again to the end.

Shared by tests/test_faults.py (three trials per stage) and bench/soak_faults.py (many). A trial kills either
after K store commits (the stage's progress query reaches K, polled as tests/killed_runs.py does) or after a
random share of a clean run's wall time (which lands in file writes: images, release folders, reports), then
reruns the same command and checks `assert_invariants` and that the store ends as a clean run's does.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import PIL.Image

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
EXAMPLE_CAPTIONS = ROOT / "examples" / "mucr" / "captions.csv"
COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]


def cli_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    env.pop("CFTOOLS_WORKSPACE", None)
    return env


def cli(ws: Path, *args: Any) -> list[str]:
    return [sys.executable, "-m", "cftools.cli", "-w", str(ws), *[str(a) for a in args]]


def setup_cli(ws: Path, *args: Any) -> str:
    """A setup step, run in this process (a subprocess would pay the start-up time again)."""
    from click.testing import CliRunner

    from cftools.cli import main

    result = CliRunner().invoke(main, ["-w", str(ws), *[str(a) for a in args]], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output[-2000:])
    return result.output


def run_ok(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=cli_env())
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    return done


# ---------------------------------------------------------------- inputs


def write_images(folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        PIL.Image.new("RGB", (8 + i, 8), COLOURS[i % len(COLOURS)]).save(folder / f"img{i}.png")


def write_cvqa(folder: Path, n: int) -> Path:
    write_images(folder, n)
    table = folder / "items.csv"
    with open(table, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["img_path", "query", "answer", "new query", "new answer", "type"])
        for i in range(n):
            writer.writerow([f"images/img{i}.png", f"How many squares are there in picture {i}?", "1",
                             f"How many squares would there be if one more was added ({i})?", "2", "direct"])
    return table


def write_number_table(folder: Path, n: int) -> Path:
    write_images(folder, n)
    table = folder / "mine.csv"
    with open(table, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["image", "question", "answer"])
        for i in range(n):
            writer.writerow([f"img{i}.png", f"How many things of kind {i} are there?", str(i % 7)])
    return table


def write_vqav2_files(folder: Path, n: int) -> tuple[Path, Path]:
    from vqav2_files import write_vqav2

    records = [{"question_id": i + 1, "image_id": 100 + i // 2, "question": f"How many dogs are in scene {i}?",
                "answers": [str(i % 5)] * 10, "answer_type": "number"} for i in range(n)]
    return write_vqav2(folder, records)


def configure_llm(ws: Path, base_url: str) -> None:
    config = ws / "cftools.toml"
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{base_url}"', 1)
    text = text.replace('model = "smollm2-135m-instruct"', 'model = "stub"', 1)
    config.write_text(text.replace("[llm]\n", "[llm]\nbackoff_initial = 0.05\nbackoff_max = 0.2\n", 1))


def start_stub(delay: float = 0.05, context: bool = False, reply: Optional[str] = None) -> tuple[subprocess.Popen, str]:
    """The stub LLM as its own process; REPLY is a reply function (tests/fault_replies.py:NAME)."""
    from llm_stub import start_process

    return start_process(delay, *(["--context"] if context else []), *(["--reply", reply] if reply else []))


# ---------------------------------------------------------------- invariants


def store_path(ws: Path) -> Path:
    return ws / "cftools.db"


# What no kill may leave behind, each as a query listing the offending rows. Natural keys, not row ids: a rerun
# that wrote an item again under a new id is caught here.
BROKEN_STORE_QUERIES = {
    # an item by what it is about; a selected MuCR pair (`PAIR@style`) repeats its pair's question, so the pair
    # and the style belong to its key
    "duplicated items": "select kind, \"group\", source_id, question, json_extract(data, '$.pair_key'), "
                        "json_extract(data, '$.style'), count(*) from items group by 1, 2, 3, 4, 5, 6 "
                        "having count(*) > 1",
    "duplicated source questions": "select dataset, external_id from source_questions "
                                   "group by dataset, external_id having count(*) > 1",
    "items with two live tasks": "select item_id, purpose from annotation_tasks where state != 'deleted' "
                                 "group by item_id, purpose having count(*) > 1",
    "work left claimed or unfinished": "select generator, key, state from work_claims "
                                       "where state in ('free', 'leased')",
    "a question predicted twice": "select run_id, item_key, which from predictions "
                                  "group by run_id, item_key, which having count(*) > 1",
    # `generate pairs` drafts one pair per type and image (a later slot of the image takes another type)
    "an image with two CFMM pairs of one type": "select q.image_id, i.\"group\", count(*) from items i "
                                                "join source_questions q on q.id = i.source_id where i.kind = 'cfmm' "
                                                "group by 1, 2 having count(*) > 1",
    "a cue drafted twice for one pair": "select item_id, count(*) from item_events where stage = 'generate cues' "
                                        "and json_extract(detail, '$.generation_id') is not null "
                                        "group by item_id having count(*) > 1",
    "a cue without its generation record": "select key from items i where json_extract(data, '$.cue') is not null "
                                           "and not exists (select 1 from generations g where g.id = "
                                           "json_extract(i.data, '$.cue_generation.generation_id'))",
    "an annotation stored twice": "select task_id, ls_annotation_id, count(*) from judgments "
                                  "group by task_id, ls_annotation_id having count(*) > 1",
    # push marks an item under review with its task; pull moves it on once the task is decided
    "an item under review without a live task": "select key from items i where status = 'in_review' and not exists "
                                                "(select 1 from annotation_tasks t where t.item_id = i.id "
                                                "and t.state != 'deleted')",
    "a decided task whose item is still under review": "select i.key, t.purpose from annotation_tasks t "
                                                       "join items i on i.id = t.item_id "
                                                       "where t.state = 'decided' and i.status = 'in_review'",
}


def assert_store_not_broken(ws: Path) -> None:
    db = sqlite3.connect(store_path(ws), timeout=60)
    try:
        assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
        for what, query in BROKEN_STORE_QUERIES.items():
            rows = db.execute(query).fetchall()
            assert rows == [], f"{what}: {rows[:5]}"
    finally:
        db.close()


def assert_doctor_finds_nothing(ws: Path) -> None:
    """The doctor's own checks, image files against their SHA-256 among them."""
    from cftools.doctor import diagnose
    from cftools.workspace import load_workspace

    workspace = load_workspace(ws)
    try:
        report = diagnose(workspace, server=False)
    finally:
        workspace.close()
    assert report.findings == [], [f.as_dict() for f in report.findings]


def assert_releases_verify(ws: Path) -> None:
    from cftools.release.verify import verify_release

    releases = ws / "releases"
    if releases.exists():
        for folder in releases.iterdir():
            assert not folder.name.startswith("."), f"a half-written release was left: {folder}"
            assert verify_release(folder).ok, f"{folder} does not verify"


def assert_runs_answer_once(runs: tuple[Path, ...]) -> None:
    for run in runs:
        lines = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines() if line.strip()]
        keys = [(line["id"], line["which"]) for line in lines]
        assert len(keys) == len(set(keys)), f"{run}: a question answered twice"


def assert_invariants(ws: Path, runs: tuple[Path, ...] = ()) -> None:
    """What must hold after any kill and rerun: the store is intact, nothing is duplicated or stuck, image files
    match the store, every release folder verifies (and no half release sits under a final name), eval
    predictions are unique per question (store and run folder)."""
    assert_store_not_broken(ws)
    assert_doctor_finds_nothing(ws)
    assert_releases_verify(ws)
    assert_runs_answer_once(runs)


def store_fingerprint(ws: Path) -> dict[str, Any]:
    """What a clean run and a killed-and-rerun one must agree on: items by natural key and status, source
    questions, how many images, tasks and judgments, MuCR cues and selections, CFMM pairs, releases and
    predictions."""
    db = sqlite3.connect(store_path(ws), timeout=60)
    try:
        def rows(sql: str) -> list:
            return sorted(tuple(r) for r in db.execute(sql).fetchall())

        return {
            "items": rows("select kind, \"group\", question, answer, status, origin from items"),
            "sources": rows("select dataset, external_id, image_ref, image_id is not null from source_questions"),
            "images": db.execute("select count(*) from images").fetchone()[0],
            "candidates": rows("select key, json_extract(data, '$.candidates') is not null from items"),
            "tasks": rows("select i.key, t.purpose, t.state, t.decision from annotation_tasks t "
                          "join items i on i.id = t.item_id where t.state != 'deleted'"),
            # by what the annotator said (annotation ids differ from server project to project)
            "judgments": rows("select i.key, j.annotator, j.related, j.answer_correct, j.corrected_answer, "
                              "j.decision from judgments j join annotation_tasks t on t.id = j.task_id "
                              "join items i on i.id = t.item_id"),
            "answers": rows("select key, answer, proposed_answer from items"),
            "mucr": rows("select key, json_extract(data, '$.cue'), json_extract(data, '$.false_cues'), "
                         "json_extract(data, '$.cause_image'), json_extract(data, '$.effect_image') "
                         "from items where kind = 'mucr'"),
            "cfmm": rows("select key, json_extract(data, '$.basic_question'), json_extract(data, '$.options') "
                         "from items where kind = 'cfmm'"),
            "releases": rows("select name, version, format, n_items from releases"),
            "predictions": rows("select item_key, which from predictions"),
        }
    finally:
        db.close()


# ---------------------------------------------------------------- stages


@dataclass
class Stage:
    """One writing stage: SETUP(ws, scratch) prepares the workspace (and may start helpers, returned to stop),
    COMMAND(ws, scratch) is the command to kill and rerun; PROGRESS (SQL count) counts its commits."""

    name: str
    setup: Callable[[Path, Path], list]
    command: Callable[[Path, Path], list[str]]
    progress: Optional[str] = None
    max_k: int = 1
    runs: Callable[[Path, Path], tuple[Path, ...]] = lambda ws, scratch: ()
    needs_label_studio: bool = False
    after: Callable[[Path], None] = lambda ws: None  # stage-specific checks at the end of a trial
    # a rerun's refusal that means the killed run had already finished (export will not replace a release
    # without --force); the invariants and the final store are checked all the same
    finished_already: Optional[str] = None


def _no_setup(ws: Path, scratch: Path) -> list:
    return []


def _rewrite_setup(ws: Path, scratch: Path) -> list:
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 16), "--images", scratch / "in")
    stub, url = start_stub(delay=0.1)
    configure_llm(ws, url)
    return [stub]


def _context_setup(ws: Path, scratch: Path) -> list:
    setup_cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)
    stub, url = start_stub(delay=0.1, context=True)
    configure_llm(ws, url)
    return [stub]


def _images_setup(ws: Path, scratch: Path) -> list:
    helpers = _context_setup(ws, scratch)
    setup_cli(ws, "generate", "context", "--limit", "2", "--quiet")
    return helpers


def _drafts_setup(ws: Path, scratch: Path) -> list:
    setup_cli(ws, "ingest", "cvqa", write_cvqa(scratch / "in", 20), "--images", scratch / "in")
    return []


def _eval_setup(ws: Path, scratch: Path) -> list:
    helpers = _rewrite_setup(ws, scratch)
    setup_cli(ws, "ingest", "cvqa", write_cvqa(scratch / "cv", 12), "--images", scratch / "cv")
    setup_cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    return helpers


def _pairs_setup(ws: Path, scratch: Path) -> list:
    """Images with answered source questions, and the stub LLM scripted to pick and draft CFMM pairs."""
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 12), "--images", scratch / "in")
    stub, url = start_stub(delay=0.05, reply="fault_replies:cfmm_pairs")
    configure_llm(ws, url)
    return [stub]


def _cues_setup(ws: Path, scratch: Path) -> list:
    """MuCR caption pairs with contextual descriptions (`generate context` against the stub) and two candidate
    images each, ranked: what `generate cues --from-ranking` selects from. The candidates are written into the
    store as `generate images` writes them; its embedded pipeline takes seconds a pair, too slow to repeat for
    every trial."""
    setup_cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)
    stub, url = start_stub(delay=0.05, reply="fault_replies:mucr_cues")
    configure_llm(ws, url)
    setup_cli(ws, "generate", "context", "--quiet")
    add_ranked_candidates(ws, scratch / "drawn")
    return [stub]


def add_ranked_candidates(ws: Path, folder: Path, style: str = "photograph", per_pair: int = 2) -> None:
    from sqlalchemy import select

    from cftools.images import read_image_file, register_image
    from cftools.models import Item
    from cftools.workspace import load_workspace

    folder.mkdir(parents=True, exist_ok=True)
    workspace = load_workspace(ws)
    try:
        with workspace.store.write() as session:
            pairs = session.execute(select(Item).where(Item.kind == "mucr").order_by(Item.id)).scalars().all()
            for n, item in enumerate(pairs):
                candidates = {}
                for k in range(per_pair):
                    refs = {}
                    for side, size in (("cause", 10), ("effect", 30)):
                        path = folder / f"{n}-{k}-{side}.png"
                        PIL.Image.new("RGB", (size + n, 10 + k), COLOURS[(n + k) % len(COLOURS)]).save(path)
                        image = read_image_file(path)
                        register_image(workspace.store, session, image)
                        refs[side] = f"sha256:{image.sha256}"
                    provenance = {"backend": "diffusers", "model": "tiny", "seed": 100 * n + k, "style": style,
                                  "candidate": k}
                    candidates[str(k)] = {**refs, "cause_provenance": provenance, "effect_provenance": provenance}
                # the last candidate ranks first, so a selection by ranking is not simply candidate 0
                ranking = [{"k": k, "score": (k + 1) / per_pair, "flags": []} for k in reversed(range(per_pair))]
                item.data = {**item.data, "candidates": {style: candidates}, "candidate_checks": {style: ranking}}
                session.add(item)
    finally:
        workspace.close()


LS_URL_ENV, LS_MEDIA_ENV, LS_TOKEN_ENV = "CFTOOLS_FAULTS_LS_URL", "CFTOOLS_FAULTS_LS_MEDIA", "CFTOOLS_FAULTS_LS_TOKEN"
LS_ANNOTATORS_ENV = "CFTOOLS_FAULTS_LS_ANNOTATOR_TOKENS"  # the two annotators' tokens, comma-separated


def _push_setup(ws: Path, scratch: Path) -> list:
    """Checked items whose images lie under the Label Studio server's media root, and the server configured
    (its URL, media root and token from the environment the test sets) with a project of the workspace's own."""
    import uuid

    media = Path(os.environ[LS_MEDIA_ENV]) / f"faults-{uuid.uuid4().hex[:10]}"
    setup_cli(ws, "ingest", "cvqa", write_cvqa(media, 16), "--images", media)
    db = sqlite3.connect(store_path(ws))
    with db:
        db.execute("update items set status = 'checked'")
    db.close()
    config = ws / "cftools.toml"
    text = config.read_text().replace("[label_studio]\n", f'[label_studio]\nurl = "{os.environ[LS_URL_ENV]}"\n'
                                      f'document_root = "{os.environ[LS_MEDIA_ENV]}"\n'
                                      f'project_prefix = "f-{uuid.uuid4().hex[:10]}"\nbatch_size = 2\n', 1)
    config.write_text(text.replace('token_env = "LABEL_STUDIO_API_KEY"', f'token_env = "{LS_TOKEN_ENV}"'))
    return []


def server_holds_what_the_store_says(ws: Path) -> None:
    """Every task the store records as pushed is on the server, and the server holds no task twice."""
    from cftools.annotate.label_studio import LabelStudioServer

    db = sqlite3.connect(store_path(ws))
    try:
        recorded = db.execute("select t.ls_project_id, t.ls_task_id, i.key from annotation_tasks t "
                              "join items i on i.id = t.item_id where t.state != 'deleted'").fetchall()
    finally:
        db.close()
    server = LabelStudioServer(os.environ[LS_URL_ENV], os.environ[LS_TOKEN_ENV])
    try:
        for project in {p for p, _, _ in recorded}:
            on_server = server.task_keys(project)
            mine = {task: key for p, task, key in recorded if p == project}
            assert all(on_server.get(task) == key for task, key in mine.items()), "marked pushed, not on the server"
            keys = list(on_server.values())
            assert len(keys) == len(set(keys)) == len(mine), "a task imported twice"
    finally:
        server.close()


@contextmanager
def label_studio_for_trials(scratch: Path) -> Iterator[None]:
    """Outside pytest (bench/soak_faults.py): a Label Studio server of its own, with two annotators, whose URL,
    media root and tokens the Label Studio stages read from the environment (as the test's fixture sets them)."""
    from fixtures_label_studio import ADMIN_TOKEN, ANNOTATORS, ls_bin, migrated_template, signup, start_server

    binary = ls_bin()
    if not binary.exists():
        raise SystemExit(f"Label Studio server not found at {binary}: set LS_BIN")
    shutil.copytree(migrated_template(binary, scratch), scratch / "ls-data")
    (scratch / "ls-media").mkdir()
    server = start_server(binary, scratch / "ls-data", scratch / "ls-media", scratch / "ls.log")
    saved = {name: os.environ.get(name) for name in (LS_URL_ENV, LS_MEDIA_ENV, LS_TOKEN_ENV, LS_ANNOTATORS_ENV)}
    try:
        tokens = [signup(server.url, ADMIN_TOKEN, email, password)[1] for email, password in ANNOTATORS]
        os.environ.update({LS_URL_ENV: server.url, LS_MEDIA_ENV: str(scratch / "ls-media"),
                           LS_TOKEN_ENV: ADMIN_TOKEN, LS_ANNOTATORS_ENV: ",".join(tokens)})
        yield
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value




from fixtures_label_studio import verify_result  # noqa: E402

# (annotator 1, annotator 2) per task in turn: every way pull decides an item, and one left under review
ANNOTATION_PLANS = [
    (verify_result("yes", "yes"), verify_result("yes", "yes")),              # accepted
    (verify_result("no", "no"), verify_result("no", "no")),                  # rejected
    (verify_result("yes", "no", "3"), verify_result("yes", "no", "3")),      # accepted with a corrected answer
    (verify_result("yes", "yes"), verify_result("yes", "no", "5")),          # needs adjudication
    (verify_result("yes", "yes"), None),                                     # one judgment: still under review
]
PULL_EXPORT_CHUNK = 2  # tasks per export snapshot in the killed pull, so that it commits once per two tasks


def _pull_setup(ws: Path, scratch: Path) -> list:
    """The push stage's items pushed, and the two annotators' annotations made on the server."""
    _push_setup(ws, scratch)
    setup_cli(ws, "annotate", "push", "--json")
    annotate_on_server(ws)
    return []


def annotate_on_server(ws: Path) -> None:
    """Each pushed task annotated as ANNOTATION_PLANS says, by the annotators themselves (with their tokens)."""
    import httpx

    db = sqlite3.connect(store_path(ws))
    try:
        tasks = [row[0] for row in db.execute("select ls_task_id from annotation_tasks order by item_id")]
    finally:
        db.close()
    tokens = os.environ[LS_ANNOTATORS_ENV].split(",")
    with httpx.Client(base_url=os.environ[LS_URL_ENV], timeout=60) as http:
        for n, task in enumerate(tasks):
            for token, result in zip(tokens, ANNOTATION_PLANS[n % len(ANNOTATION_PLANS)], strict=True):
                if result is not None:
                    http.post(f"/api/tasks/{task}/annotations/", json={"result": result},
                              headers={"Authorization": f"Token {token}"}).raise_for_status()


def pull_command(ws: Path, scratch: Path) -> list[str]:
    """`cftools annotate pull` with export snapshots of PULL_EXPORT_CHUNK tasks (the default, 1000, would make a
    pull of a few tasks one commit, leaving a kill nothing to land between)."""
    config = ws / "cftools.toml"
    text = config.read_text()
    if not re.search(r"(?m)^export_chunk", text):  # once: the clean run and each trial build the command
        config.write_text(text.replace("[label_studio]\n", f"[label_studio]\nexport_chunk = {PULL_EXPORT_CHUNK}\n", 1))
    return cli(ws, "annotate", "pull", "--json")


def judgments_match_the_server(ws: Path) -> None:
    """Every judgment in the store is an annotation the server holds for that task."""
    import httpx

    db = sqlite3.connect(store_path(ws))
    try:
        stored = db.execute("select t.ls_task_id, j.ls_annotation_id from judgments j "
                            "join annotation_tasks t on t.id = j.task_id").fetchall()
    finally:
        db.close()
    headers = {"Authorization": f"Token {os.environ[LS_TOKEN_ENV]}"}
    with httpx.Client(base_url=os.environ[LS_URL_ENV], timeout=60, headers=headers) as http:
        for task in {task for task, _ in stored}:
            on_server = {a["id"] for a in http.get(f"/api/tasks/{task}/annotations/").raise_for_status().json()}
            mine = {annotation for t, annotation in stored if t == task}
            assert mine <= on_server, f"task {task}: judgments of annotations {mine - on_server} not on the server"


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("ingest-table", _no_setup,
          lambda ws, s: cli(ws, "ingest", "table", write_number_table(s / "in", 24), "--images", s / "in")),
    Stage("ingest-cvqa", _no_setup,
          lambda ws, s: cli(ws, "ingest", "cvqa", write_cvqa(s / "in", 24), "--images", s / "in")),
    Stage("ingest-vqav2", _no_setup, lambda ws, s: cli(ws, "ingest", "vqav2", *(
        lambda q, a: ("--questions", q, "--annotations", a))(*write_vqav2_files(s / "vqa", 30)))),
    Stage("ingest-captions", _no_setup, lambda ws, s: cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)),
    Stage("generate-rewrite", _rewrite_setup,
          lambda ws, s: cli(ws, "generate", "rewrite", "--group", "numerical-direct", "--concurrency", "2",
                            "--quiet"),
          progress="select count(*) from items where origin = 'generated'", max_k=10),
    Stage("generate-context", _context_setup,
          lambda ws, s: cli(ws, "generate", "context", "--concurrency", "1", "--quiet"),
          progress="select count(*) from generations where generator like '%context%'", max_k=6),
    Stage("generate-images", _images_setup,
          lambda ws, s: cli(ws, "generate", "images", "--per-prompt", "1", "--styles", "photograph"),
          progress="select count(*) from images", max_k=3),
    Stage("check", _drafts_setup, lambda ws, s: cli(ws, "check")),
    Stage("export", _drafts_setup,
          lambda ws, s: cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified"),
          finished_already=r"r-1 already exists; pass --force"),
    Stage("eval", _eval_setup,
          lambda ws, s: cli(ws, "eval", "run", ws / "releases" / "r-1", "--model", "blind:openai:stub",
                            "--concurrency", "2", "--out", ws / "runs" / "blind", "--quiet"),
          runs=lambda ws, s: (ws / "runs" / "blind",)),
    Stage("generate-cues", _cues_setup,
          lambda ws, s: cli(ws, "generate", "cues", "--from-ranking", "--concurrency", "1", "--quiet"),
          progress="select count(*) from items where json_extract(data, '$.cue') is not null", max_k=6),
    Stage("generate-pairs", _pairs_setup,
          lambda ws, s: cli(ws, "generate", "pairs", "--types", "count,color", "--concurrency", "2", "--quiet"),
          # the picks (one generation each) and then the drafts (one item each): 24 commits in all
          progress="select count(*) from generations where generator in ('pairs', 'pairs-pick')", max_k=20),
    Stage("annotate-push", _push_setup, lambda ws, s: cli(ws, "annotate", "push", "--json"),
          progress="select count(*) from annotation_tasks", max_k=12, needs_label_studio=True,
          after=server_holds_what_the_store_says),
    Stage("annotate-pull", _pull_setup, pull_command,
          # 16 tasks, 29 judgments (one task in five has one), stored two tasks to a commit
          progress="select count(*) from judgments", max_k=24, needs_label_studio=True,
          after=judgments_match_the_server),
)}


# ---------------------------------------------------------------- trials


@dataclass
class TrialResult:
    stage: str
    seed: int
    how: str
    killed: bool
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    progress_at_kill: Optional[int] = None  # the stage's progress count right after the kill
    progress_at_end: Optional[int] = None  # ... and after the rerun

    @property
    def mid_run(self) -> bool:
        """Killed with part of its commits made (for a stage without a progress count: killed at all)."""
        if not self.killed or self.progress_at_kill is None:
            return self.killed
        return 0 < self.progress_at_kill < (self.progress_at_end or 0)

    def describe(self) -> str:
        if not self.killed:
            return "(finished first)"
        counts = "" if self.progress_at_kill is None else f" ({self.progress_at_kill}/{self.progress_at_end} commits)"
        return f"killed {self.how}{counts}"


def stop_helpers(helpers: list) -> None:
    for proc in helpers:
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            proc.kill()
            proc.wait()


def fresh_workspace(scratch: Path) -> Path:
    from cftools.workspace import init_workspace

    init_workspace(scratch / "ws").close()
    return scratch / "ws"


def clean_run(stage: Stage, scratch: Path) -> tuple[dict[str, Any], float]:
    """The stage run once without a fault: the store it ends with and how long the command took."""
    ws = fresh_workspace(scratch)
    helpers = stage.setup(ws, scratch)
    try:
        command = stage.command(ws, scratch)
        start = time.monotonic()
        run_ok(command)
        seconds = time.monotonic() - start
        assert_invariants(ws, stage.runs(ws, scratch))
        return store_fingerprint(ws), seconds
    finally:
        stop_helpers(helpers)


def kill_at(run: subprocess.Popen, db: Path, progress: Optional[str], k: int, delay: float,
            timeout_s: float = 120) -> bool:
    """SIGKILL RUN once PROGRESS reaches K (when given) or after DELAY seconds; False if it ended first."""
    deadline = time.monotonic() + (timeout_s if progress else delay)
    con = sqlite3.connect(db, timeout=60) if progress else None
    try:
        while run.poll() is None and time.monotonic() < deadline:
            if con is not None and con.execute(progress).fetchone()[0] >= k:
                break
            time.sleep(0.01)
        if run.poll() is not None:
            return False
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        return True
    finally:
        if con is not None:
            con.close()


def run_trial(stage: Stage, seed: int, scratch: Path, expected: dict[str, Any], clean_seconds: float) -> TrialResult:
    """Kill the stage at a point SEED chooses, rerun it to the end, check the invariants and the final store."""
    rng = random.Random(f"{stage.name}:{seed}")
    ws = fresh_workspace(scratch)
    helpers = stage.setup(ws, scratch)
    try:
        command = stage.command(ws, scratch)
        if stage.progress and rng.random() < 0.7:
            k, delay, how = rng.randint(1, stage.max_k), 0.0, ""
            how = f"after {k} commits"
        else:
            # a random point of a clean run's time: start-up, reading, writing files, the final commit
            k, delay = 0, rng.uniform(0.1, 0.8) * clean_seconds
            how = f"after {delay:.2f}s"
        start = time.monotonic()
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env())
        killed = kill_at(run, store_path(ws), stage.progress if k else None, k, delay)
        if not killed:
            assert run.returncode == 0, (command, run.stderr.read()[-2000:] if run.stderr else "")
        if run.stderr:
            run.stderr.close()
        assert_invariants_after_kill(ws)
        at_kill = progress_count(ws, stage.progress)
        rerun_to_the_end(command, stage.finished_already)
        assert_invariants(ws, stage.runs(ws, scratch))
        got = store_fingerprint(ws)
        differ = [key for key in expected if got[key] != expected[key]]
        assert not differ, {key: (expected[key], got[key]) for key in differ}
        stage.after(ws)
        return TrialResult(stage.name, seed, how, killed, time.monotonic() - start, progress_at_kill=at_kill,
                           progress_at_end=progress_count(ws, stage.progress))
    finally:
        stop_helpers(helpers)


def progress_count(ws: Path, progress: Optional[str]) -> Optional[int]:
    if progress is None:
        return None
    db = sqlite3.connect(store_path(ws), timeout=60)
    try:
        return db.execute(progress).fetchone()[0]
    finally:
        db.close()


def rerun_to_the_end(command: list[str], finished_already: Optional[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=cli_env())
    if done.returncode != 0 and finished_already and re.search(finished_already, done.stderr):
        return
    assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])


def assert_invariants_after_kill(ws: Path) -> None:
    """Right after the kill, before any rerun: the store file is intact and nothing half-written sits under a
    release's final name (a release either verifies or is absent)."""
    from cftools.release.verify import verify_release

    db = sqlite3.connect(store_path(ws), timeout=60)
    try:
        assert db.execute("pragma integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()
    releases = ws / "releases"
    if releases.exists():
        for folder in releases.iterdir():
            if not folder.name.startswith("."):
                assert verify_release(folder).ok, f"{folder}: half a release under its final name"


def count_kinds(results: list[TrialResult]) -> Counter:
    return Counter(r.stage for r in results)


def parse_stage_names(text: str, extra: dict | None = None) -> list[str]:
    """Stage names from TEXT (commas or spaces); EXTRA: other names it may hold (the injected faults)."""
    names = [n for n in re.split(r"[,\s]+", text) if n]
    known = [*STAGES, *(extra or {})]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown stages: {', '.join(unknown)}; known: {', '.join(known)}")
    return names


# ---------------------------------------------------------------- injected faults (issue 24)
#
# Not kills: damage a careless or unlucky user does to a workspace between commands. Each case makes a workspace,
# injects its fault at a point SEED chooses, and checks that every command answers in one line, that nothing is
# silently recreated, replaced or asked twice, and (where it applies) that doctor names the fault.


def run_cli_process(ws: Path, *args: Any, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli(ws, *args), capture_output=True, text=True, timeout=timeout, env=cli_env())


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, (done.stdout, done.stderr)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def doctor_codes(ws: Path) -> list[str]:
    done = run_cli_process(ws, "doctor", "--json", "--offline")
    return sorted(p["code"] for p in json.loads(done.stdout)["problems"])


def _damaged_pages(seed: int, scratch: Path) -> str:
    ws = fresh_workspace(scratch)
    _drafts_setup(ws, scratch)
    db = store_path(ws)
    con = sqlite3.connect(db)
    try:
        page_size, pages = (con.execute(f"pragma {p}").fetchone()[0] for p in ("page_size", "page_count"))
    finally:
        con.close()
    rng = random.Random(f"damaged-pages:{seed}")
    first = rng.randint(2, pages - 3)  # two neighbouring pages in the middle of the file, never the header
    with open(db, "r+b") as fh:
        for page in (first, first + 1):
            fh.seek((page - 1) * page_size)
            fh.write(bytes(rng.randrange(256) for _ in range(page_size)))
    for args in (("status",), ("check", "--no-embeddings"), ("export", "r", "--version", "1", "--licence", "CC0-1.0",
                                                             "--include-unverified")):
        assert_one_line_error(run_cli_process(ws, *args), "is damaged", str(db))
    assert doctor_codes(ws) == ["store_integrity"]
    return f"pages {first}-{first + 1} of {pages}"


def _deleted_store(seed: int, scratch: Path) -> str:
    ws = fresh_workspace(scratch)
    _drafts_setup(ws, scratch)
    how = random.Random(f"deleted-store:{seed}").choice(["deleted", "emptied"])
    if how == "deleted":
        store_path(ws).unlink()
    else:
        store_path(ws).write_bytes(b"")
    for args in (("status",), ("doctor", "--offline"), ("check", "--no-embeddings")):
        assert_one_line_error(run_cli_process(ws, *args), str(store_path(ws)))
    assert not store_path(ws).exists() or store_path(ws).stat().st_size == 0, "the store was recreated"
    return how

def restamp(release: Path, changed: list[str]) -> None:
    """What a careful tamperer does after editing CHANGED files of RELEASE: croissant.json and manifest.json are
    rewritten to match, so the release is self-consistent and `cftools verify` cannot tell."""
    from cftools.release.layout import MANIFEST_NAME, hash_file

    croissant = release / "croissant.json"
    if croissant.is_file():
        metadata = json.loads(croissant.read_text())
        for entry in metadata.get("distribution", []):
            if entry.get("contentUrl") in changed:
                entry["sha256"] = hash_file(release / entry["contentUrl"])
        croissant.write_text(json.dumps(metadata, indent=2))
        changed = [*changed, croissant.name]
    manifest = json.loads((release / MANIFEST_NAME).read_text())
    for entry in manifest["files"]:
        if entry["path"] in changed:
            entry.update(sha256=hash_file(release / entry["path"]), size=(release / entry["path"]).stat().st_size)
    (release / MANIFEST_NAME).write_text(json.dumps(manifest))


def _rewritten_manifest(seed: int, scratch: Path) -> str:
    from cftools.release.layout import RECORDS_NAME

    ws = fresh_workspace(scratch)
    _drafts_setup(ws, scratch)
    setup_cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    release = ws / "releases" / "r-1"
    lines = (release / RECORDS_NAME).read_text().splitlines()
    index = random.Random(f"rewritten-manifest:{seed}").randrange(len(lines))
    record = json.loads(lines[index])
    record["answer"] = f"{record['answer']}0"
    lines[index] = json.dumps(record, sort_keys=True)
    (release / RECORDS_NAME).write_text("\n".join(lines) + "\n")
    restamp(release, [RECORDS_NAME])
    assert run_cli_process(ws, "verify", release).returncode == 0  # self-consistent, so verify cannot tell
    assert doctor_codes(ws) == ["release_manifest_changed"]
    return f"record {index} rewritten with the manifest"


def _foreign_force_target(seed: int, scratch: Path) -> str:
    ws = fresh_workspace(scratch)
    _drafts_setup(ws, scratch)
    rng = random.Random(f"foreign-force-target:{seed}")
    target = ws / "releases" / "r-1"
    own = rng.random() < 0.5  # a folder that looks like a release (a manifest) but this workspace did not write
    target.mkdir(parents=True)
    (target / ("manifest.json" if own else "thesis.tex")).write_text("{}" if own else "\\chapter{Results}")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    assert_one_line_error(run_cli_process(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0",
                                          "--include-unverified", "--force"), "not a release this workspace wrote")
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    return "a foreign manifest" if own else "a user's file"


def _two_evals(seed: int, scratch: Path) -> str:
    ws = fresh_workspace(scratch)
    helpers = _eval_setup(ws, scratch)
    try:
        run = ws / "runs" / "blind"
        command = cli(ws, "eval", "run", ws / "releases" / "r-1", "--model", "blind:openai:stub", "--concurrency",
                      "2", "--out", run, "--quiet")
        gap = random.Random(f"two-evals:{seed}").uniform(0.0, 1.5)
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
        time.sleep(gap)
        second = subprocess.run(command, capture_output=True, text=True, timeout=300, env=cli_env())
        out, err = first.communicate(timeout=300)
        codes = sorted([first.returncode, second.returncode])
        if codes == [0, 1]:  # they met: the one refused names the other
            refused = second if second.returncode == 1 else subprocess.CompletedProcess([], 1, out, err)
            assert_one_line_error(refused, "is in use by process")
        else:
            assert codes == [0, 0], (out, err, second.stdout, second.stderr)  # the first had finished already
        assert_runs_answer_once((run,))
        again = run_cli_process(ws, "eval", "run", ws / "releases" / "r-1", "--model", "blind:openai:stub", "--out",
                                run, "--quiet")
        assert again.returncode == 0 and "0 questions asked now" in " ".join(again.stdout.split()), again.stdout
        assert_invariants(ws, (run,))
        return "met (one refused)" if codes == [0, 1] else "one after the other"
    finally:
        stop_helpers(helpers)


INJECTED_FAULTS: dict[str, Callable[[int, Path], str]] = {
    "damaged-pages": _damaged_pages,
    "deleted-store": _deleted_store,
    "rewritten-manifest": _rewritten_manifest,
    "foreign-force-target": _foreign_force_target,
    "two-evals-at-once": _two_evals,
}


# ---------------------------------------------------------------- injected faults (issue 39)


def mucr_records(n: int, images: bool = True) -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "caption_0": f"a boy runs in the rain {i}", "caption_1": f"he catches a cold {i}",
             "cue": "rain", "false_cue": ["sun"], "style": "photograph", "label": "human",
             "causal_reason": ["rain makes one cold"],
             **({"image_0": f"img{i}.png", "image_1": f"img{(i + 1) % n}.png"} if images else {})}
            for i in range(n)]


def write_jsonl_records(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def count_rows(ws: Path, table: str) -> int:
    con = sqlite3.connect(store_path(ws))
    try:
        return con.execute(f"select count(*) from {table}").fetchone()[0]
    finally:
        con.close()


def _symlinked_mucr_images(seed: int, scratch: Path) -> str:
    """A link inside --images (to a file, or a folder on the way) that leaves it: refused, nothing stored."""
    ws = fresh_workspace(scratch)
    images, outside = scratch / "images", scratch / "private"
    write_images(images, 6)
    write_images(outside, 1)
    rng = random.Random(f"symlinked-mucr-images:{seed}")
    rows = mucr_records(6)
    index = rng.randrange(len(rows))
    if rng.random() < 0.5:
        (images / "link.png").symlink_to(outside / "img0.png")
        rows[index]["image_0"], how = "link.png", "a file link"
    else:
        (images / "elsewhere").symlink_to(outside)
        rows[index]["image_1"], how = "elsewhere/img0.png", "a folder link"
    source = write_jsonl_records(scratch / "m.jsonl", rows)
    assert_one_line_error(run_cli_process(ws, "ingest", "mucr", source, "--images", images),
                          f"line {index + 1}", "outside the --images folder")
    assert count_rows(ws, "items") == 0 and count_rows(ws, "images") == 0
    return f"{how} on line {index + 1}"


def _repeated_mucr_ids(seed: int, scratch: Path) -> str:
    ws = fresh_workspace(scratch)
    rows = mucr_records(6, images=False)
    rng = random.Random(f"repeated-mucr-ids:{seed}")
    first, again = sorted(rng.sample(range(len(rows)), 2))
    rows[again]["id"] = rows[first]["id"]
    source = write_jsonl_records(scratch / "m.jsonl", rows)
    assert_one_line_error(run_cli_process(ws, "ingest", "mucr", source), f"line {again + 1}",
                          f"given twice in this file (first on line {first + 1})")
    assert count_rows(ws, "items") == 0
    return f"line {again + 1} repeats line {first + 1}"


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _two_old_copies(seed: int, scratch: Path) -> str:
    """A replacing export killed twice left two .old copies, one tampered, and no release: doctor --repair
    restores the intact one whichever is newer, and deletes neither."""
    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "cvqa", write_cvqa(scratch / "in", 4), "--images", scratch / "in")
    setup_cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    release = ws / "releases" / "r-1"
    rng = random.Random(f"two-old-copies:{seed}")
    pid = dead_pid()
    copies = []
    for tag in ("a1", "b2"):
        old = release.parent / f".{release.name}.pid{pid}.{tag}.old"
        old.mkdir()
        shutil.copytree(release, old / "release")
        copies.append(old)
    tampered_newer = rng.random() < 0.5
    intact, tampered = (copies[0], copies[1]) if tampered_newer else (copies[1], copies[0])
    with open(tampered / "release" / "records.jsonl", "a") as fh:
        fh.write("\n")
    for old, when in ((intact, 1_000_000), (tampered, 2_000_000 if tampered_newer else 500_000)):
        os.utime(old / "release", (when, when))
    shutil.rmtree(release)
    done = run_cli_process(ws, "doctor", "--repair", "--json", "--offline")
    changes = json.loads(done.stdout)["changes"]
    assert f"{intact}: restored as {release} (its manifest is the one the store recorded)" in changes, changes
    assert run_cli_process(ws, "verify", release).returncode == 0
    aside = release.parent / f"{release.name}.broken-pid{pid}"
    assert aside.is_dir() and not intact.exists() and not tampered.exists()
    return "the tampered copy newer" if tampered_newer else "the tampered copy older"


def _rewritten_release_under_eval(seed: int, scratch: Path) -> str:
    """Records and manifest rewritten together: eval refuses it in one line and leaves no run folder."""
    what = _rewritten_manifest(seed, scratch)
    ws = scratch / "ws"
    assert_one_line_error(run_cli_process(ws, "eval", ws / "releases" / "r-1", "--model", "openai:stub", "--quiet"),
                          "release_manifest_changed", "--no-verify")
    assert not (ws / "runs").exists() or not any((ws / "runs").iterdir())
    return what


def _repeated_batch_ids(seed: int, scratch: Path) -> str:
    """A batch results file repeating custom_ids (plus lines for ids never sent, and garbage): the first answer is
    kept, every odd line is reported by line, nothing is lost."""
    from loopback import start_server

    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 8), "--images", scratch / "in")
    proc, url = start_server("batch_stub.py", "--port", "0")
    try:
        configure_llm(ws, url)
        config = ws / "cftools.toml"
        config.write_text(config.read_text().replace("[llm]\n", "[llm]\nbatch_poll_s = 0.05\n", 1))
        every = random.Random(f"repeated-batch-ids:{seed}").randint(1, 4)
        import httpx

        httpx.post(url.removesuffix("/v1") + "/control/batches",
                   json={"repeat_every": every, "unknown_ids": 1, "garbage_lines": 1}, timeout=10).raise_for_status()
        done = run_ok(cli(ws, "generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--quiet",
                          "--batch-api"))
        said = " ".join(done.stderr.split())
        assert f"{8 // every} repeated custom_ids, 1 unknown custom_ids, 1 unreadable lines" in said, said
        con = sqlite3.connect(store_path(ws))
        try:
            outputs = [o for (o,) in con.execute("select raw_output from generations")]
        finally:
            con.close()
        assert len(outputs) == 8 and not any("a later, different answer" in o for o in outputs)
        assert count_rows(ws, "items") == 8
        return f"every {every} repeated"
    finally:
        stop_helpers([proc])


def _ten_megabyte_reply(seed: int, scratch: Path) -> str:
    """A 10 MB reply: a failed call, recorded, stored nowhere (not in the generation row, not in the cache)."""
    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 2), "--images", scratch / "in")
    stub, url = start_stub(delay=0.0, reply="fault_replies:ten_megabytes")
    try:
        configure_llm(ws, url)
        done = run_cli_process(ws, "generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--quiet")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        con = sqlite3.connect(store_path(ws))
        try:
            rows = con.execute("select error, length(raw_output) from generations").fetchall()
        finally:
            con.close()
        assert len(rows) == 2 and all("max_reply_bytes" in e and n is None for e, n in rows), rows
        assert count_rows(ws, "llm_cache") == 0 and count_rows(ws, "items") == 0
        return "refused, recorded, not stored"
    finally:
        stop_helpers([stub])


HOSTILE_CONFIGS = ("[store]\nurl = [1, 2]\n", "[llm]\nmax_cost = \"a lot\"\n", "[llm]\nmax_tokens = {a = 1}\n")


def _hostile_config(seed: int, scratch: Path) -> str:
    """cftools.toml with a value of the wrong type: one line naming it, no traceback (the config schema, issue 39)."""
    ws = fresh_workspace(scratch)
    text = HOSTILE_CONFIGS[random.Random(f"hostile-config:{seed}").randrange(len(HOSTILE_CONFIGS))]
    (ws / "cftools.toml").write_text(text)
    assert_one_line_error(run_cli_process(ws, "status"), "cftools.toml")
    return text.strip().replace("\n", " ")


ISSUE_39_FAULTS: dict[str, Callable[[int, Path], str]] = {
    "symlinked-mucr-images": _symlinked_mucr_images,
    "repeated-mucr-ids": _repeated_mucr_ids,
    "two-old-copies": _two_old_copies,
    "rewritten-release-under-eval": _rewritten_release_under_eval,
    "repeated-batch-ids": _repeated_batch_ids,
    "ten-megabyte-reply": _ten_megabyte_reply,
    "hostile-config": _hostile_config,
}
INJECTED_FAULTS.update(ISSUE_39_FAULTS)


def _three_old_copies(seed: int, scratch: Path) -> str:
    """Issue 45: a missing release and three `.old` copies (genuine; records, croissant and manifest rewritten
    together; broken) in a random order of age: doctor --repair restores the genuine one only, and keeps each other
    aside under a name that says what it is."""
    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "cvqa", write_cvqa(scratch / "in", 4), "--images", scratch / "in")
    setup_cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    release = ws / "releases" / "r-1"
    rng = random.Random(f"three-old-copies:{seed}")
    pid = dead_pid()
    copies = {}
    for tag in ("genuine", "unrecorded", "broken"):
        old = release.parent / f".{release.name}.pid{pid}.{tag}.old"
        old.mkdir()
        shutil.copytree(release, old / "release")
        copies[tag] = old
    records = copies["unrecorded"] / "release" / "records.jsonl"
    records.write_text(records.read_text().replace('"answer": "', '"answer": "9', 1))
    restamp(copies["unrecorded"] / "release", ["records.jsonl"])
    with open(copies["broken"] / "release" / "records.jsonl", "a") as fh:
        fh.write("\n")
    ages = rng.sample([1_000_000, 2_000_000, 3_000_000], 3)
    for (tag, old), when in zip(copies.items(), ages):
        os.utime(old / "release", (when, when))
    shutil.rmtree(release)
    done = run_cli_process(ws, "doctor", "--repair", "--json", "--offline")
    changes = json.loads(done.stdout)["changes"]
    assert f"{copies['genuine']}: restored as {release} (its manifest is the one the store recorded)" in changes
    assert run_cli_process(ws, "verify", release).returncode == 0
    assert '"answer": "9' not in (release / "records.jsonl").read_text()
    for tag in ("unrecorded", "broken"):
        assert (release.parent / f"{release.name}.{tag}-pid{pid}").is_dir() and not copies[tag].exists()
    order = sorted(copies, key=lambda tag: ages[list(copies).index(tag)], reverse=True)
    return f"newest first: {', '.join(order)}"


def _rewritten_release_under_diff(seed: int, scratch: Path) -> str:
    """Issue 45: release diff, preflight and eval import refuse a release rewritten consistently, as eval does."""
    what = _rewritten_manifest(seed, scratch)
    ws = scratch / "ws"
    release = ws / "releases" / "r-1"
    assert_one_line_error(run_cli_process(ws, "release", "diff", release, release), "release_manifest_changed")
    assert_one_line_error(run_cli_process(ws, "preflight", release), "release_manifest_changed")
    return what


ISSUE_45_FAULTS: dict[str, Callable[[int, Path], str]] = {
    "three-old-copies": _three_old_copies,
    "rewritten-release-under-diff": _rewritten_release_under_diff,
}
INJECTED_FAULTS.update(ISSUE_45_FAULTS)
