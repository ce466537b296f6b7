"""`--ray`: the generate stages' and eval's model calls on a Ray cluster, the store written by the driver alone.

One local cluster on loopback for the module (`ray.cluster_utils.Cluster`: a head and, once the node test has run,
a second node; CPU only, one CPU each, no dashboard, no usage stats). Rewrite (the loopback LLM server), images (the
embedded tiny pipeline) and eval (the tiny random LLaVA) run through it and give what a local run gives; a worker
killed mid-run and a driver killed mid-run lose and duplicate nothing. "Mid-run" is made by the LLM server holding
calls (a scripted `hold`), not by timing: a kill happens while calls are known to be in flight.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

ray = pytest.importorskip("ray")

from cftools.distributed import LOCAL, RayWorkers, WorkerSpec, as_completed  # noqa: E402
from cftools.models import Generation, Item, WorkClaim  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
HOLD = {"hold": 120.0}  # longer than any run here: a held call is in flight until its worker is killed


# ---------------------------------------------------------------- without a cluster

def test_as_completed_runs_every_unit_once_and_one_after_the_other_when_one_at_a_time():
    order: list[int] = []
    assert list(as_completed(range(5), lambda n: order.append(n) or n * n, 1)) == [(n, n * n) for n in range(5)]
    assert order == [0, 1, 2, 3, 4]
    done = dict(as_completed(range(20), lambda n: n + 1, 4))
    assert done == {n: n + 1 for n in range(20)}


def test_as_completed_yields_the_finished_units_then_raises_the_error():
    def work(n: int) -> int:
        if n == 3:
            raise ValueError("unit 3 failed")
        return n

    seen = []
    with pytest.raises(ValueError, match="unit 3 failed"):
        for unit, _ in as_completed(range(4), work, 2):
            seen.append(unit)
    assert 3 not in seen


HIDE_RAY = """
import sys
sys.modules["ray"] = None  # as if Ray were not installed
from click.testing import CliRunner
from cftools.cli import main
for args in (["generate", "rewrite", "--group", "boolean", "--ray"], ["generate", "images", "--ray", "auto"],
             ["eval", "--ray=auto", "release", "--model", "hf:x"], ["generate", "images", "--help"]):
    result = CliRunner().invoke(main, ["-w", sys.argv[1], *args])
    print(result.exit_code, (result.stderr or result.stdout).strip().splitlines()[-1] if args[-1] != "--help"
          else "--ray [ADDRESS]" in result.stdout)
"""


def test_ray_option_without_ray_installed_is_one_line_naming_the_extra(tmp_path):
    from fault_trials import cli_env, fresh_workspace

    ws = fresh_workspace(tmp_path)
    (tmp_path / "release").mkdir()
    done = subprocess.run([sys.executable, "-c", HIDE_RAY, str(ws)], capture_output=True, text=True, env=cli_env(),
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    error = "1 Error: --ray needs Ray, which is not installed: pip install 'cftools[ray]'"
    assert done.stdout.splitlines() == [error, error, error, "0 True"], done.stdout


# ---------------------------------------------------------------- the cluster

@pytest.fixture(scope="module")
def cluster():
    """A head node (1 CPU); `test_a_node_that_joins_gets_a_worker` adds the second. The test process is a driver."""
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "PYTHONPATH", "OPENAI_API_KEY")}
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS)])  # the nodes' workers import this cftools
    os.environ["OPENAI_API_KEY"] = "sk-test-ray"  # the key the workers get through runtime_env
    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    ray.init(address=made.address, logging_level="ERROR", log_to_driver=False)
    try:
        yield made
    finally:
        ray.shutdown()
        made.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def two_nodes(cluster):
    if len([n for n in ray.nodes() if n["Alive"]]) < 2:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    return cluster


def test_a_node_that_joins_gets_a_worker(cluster):
    workers = RayWorkers(WorkerSpec(build=dict, kwargs={"a": 1}, device=True))
    try:
        assert workers.size == 1 and workers.call("get", "a") == 1
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        assert workers.grow() == 2
        assert len(set(workers.pids())) == 2
    finally:
        workers.close()


def test_a_node_that_joins_gets_an_api_worker_of_its_own_and_the_in_flight_limit_grows(two_nodes):
    """API workers ask for no CPU: each is placed on its node by id, not wherever SPREAD puts it (issue 45: the
    joining node's worker sat on the head)."""
    workers, joined = RayWorkers(WorkerSpec(build=dict, kwargs={"a": 1}, concurrency=3)), None
    try:
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert workers.size == len(alive) and set(workers.nodes()) == alive
        assert workers.in_flight == 3 * len(alive)
        joined = two_nodes.add_node(num_cpus=1)
        two_nodes.wait_for_nodes()
        assert workers.grow() == len(alive) + 1
        assert joined.node_id in workers.nodes()  # the new node's worker runs there
        assert workers.in_flight == 3 * (len(alive) + 1)
        assert [workers.call("get", "a") for _ in range(4)] == [1] * 4
    finally:
        workers.close()
        if joined is not None:
            two_nodes.remove_node(joined)


def test_a_worker_that_cannot_build_its_model_says_why_on_one_line(two_nodes, tmp_path):
    from cftools.imagegen import make_image_backend
    from cftools.imagegen.base import ImageGenError
    from cftools.imagegen.remote import remote_images

    with pytest.raises(ImageGenError, match="not-a-pipeline"):
        remote_images(make_image_backend, ({}, "diffusers", str(tmp_path / "not-a-pipeline")), {}, LOCAL)


@pytest.fixture(scope="module")
def stub():
    """The loopback LLM server of this module (a held call never blocks another module's)."""
    from fixtures_llm import ScriptedLLM
    from llm_stub import start_process

    proc, url = start_process(0.0, "--context")
    try:
        yield ScriptedLLM(url.removesuffix("/v1"))
    finally:
        proc.kill()
        proc.wait()


def rewrite_workspace(scratch: Path, stub, n: int = 6) -> Path:
    from fault_trials import configure_llm, fresh_workspace, setup_cli, write_number_table

    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", n), "--images", scratch / "in")
    configure_llm(ws, stub.base_url)
    return ws


REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--no-rederive", "--concurrency", "1", "--quiet")


def drafts(ws: Path) -> list[tuple]:
    from cftools.workspace import load_workspace

    workspace = load_workspace(ws)
    try:
        with workspace.store.session() as session:
            items = session.execute(select(Item.key, Item.group, Item.question, Item.answer, Item.data)
                                    .where(Item.origin == "generated").order_by(Item.key)).all()
            calls = session.execute(select(func.count()).select_from(Generation)
                                    .where(Generation.generator == "rewrite")).scalar_one()
            open_claims = session.execute(select(func.count()).select_from(WorkClaim)
                                          .where(WorkClaim.state != "done")).scalar_one()
    finally:
        workspace.close()
    return [tuple(row) for row in items], calls, open_claims


def wait_until(condition, what: str, proc: subprocess.Popen | None = None, alive=None,  # noqa: ANN001
               limit: float = 300.0) -> None:
    """Poll CONDITION (a state of the store or of the server, never a duration) until it holds."""
    deadline = time.monotonic() + limit
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.stderr.read()[-2000:]}")
        if alive is not None and not alive():
            raise AssertionError(f"the run ended before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {what}")
        time.sleep(0.1)


def calls_stored(ws: Path) -> int:
    import sqlite3

    db = sqlite3.connect(ws / "cftools.db")
    try:
        return db.execute("select count(*) from generations where generator = 'rewrite'").fetchone()[0]
    finally:
        db.close()


def worker_processes(kind: str = "CftoolsApiWorker") -> list:
    """The workers of KIND (the API workers, or `CftoolsWorker`: the pipeline and model workers) of this module's
    cluster: processes under this test process, titled by Ray."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if p.is_running() and (p.cmdline() or [""])[0].startswith(f"ray::{kind}")]


def test_rewrite_on_ray_with_a_worker_killed_mid_run_makes_the_items_of_a_local_run(two_nodes, stub, tmp_path):
    from fault_trials import setup_cli

    stub.reset()
    local = rewrite_workspace(tmp_path / "local", stub)
    setup_cli(local, *REWRITE)
    ws = rewrite_workspace(tmp_path / "ray", stub)
    stub.reset()
    stub.script({"hold": 0}, HOLD, HOLD)  # the first call answers at once, the next two are held
    # the driver is this process (connected already), its run on a thread: the main thread kills the workers
    outcome: list = []
    driver = threading.Thread(target=lambda: outcome.append(run_catching(setup_cli, ws, *REWRITE, "--ray",
                                                                         two_nodes.address)))
    driver.start()
    try:
        # one result written, and both workers holding a call: kill every API worker process
        wait_until(lambda: calls_stored(ws) >= 1 and len(stub.requests()) >= 3, "a result and two held calls",
                   alive=driver.is_alive)
        victims = worker_processes()
        assert victims
        for victim in victims:
            victim.send_signal(signal.SIGKILL)
    finally:
        driver.join(timeout=300)
    assert outcome == [None], outcome
    items, calls, open_claims = drafts(ws)
    assert items == drafts(local)[0] and len(items) == 6
    assert calls == 6 and open_claims == 0  # the held calls were sent again, and written once
    sent = len(stub.requests())
    assert sent >= 8
    setup_cli(ws, *REWRITE, "--ray", two_nodes.address)  # a rerun finds everything written: nothing is sent
    assert drafts(ws) == (items, 6, 0) and len(stub.requests()) == sent


def llm_stage_workspace(scratch: Path, stub, stage: str) -> Path:
    """A workspace ready for STAGE's command, talking to the module's stub with the reply STAGE needs."""
    from fault_trials import (EXAMPLE_CAPTIONS, add_ranked_candidates, configure_llm, fresh_workspace, setup_cli,
                              write_number_table)

    ws = fresh_workspace(scratch)
    configure_llm(ws, stub.base_url)
    if stage == "captions":  # seed causalities only: the generic reply in the captions schema
        return ws
    if stage == "pairs":
        stub.use_reply("fault_replies:cfmm_pairs")
        setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 6), "--images", scratch / "in")
    else:
        stub.use_reply("fault_replies:mucr_cues")  # contexts too
        setup_cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)
        if stage == "cues":
            setup_cli(ws, "generate", "context", "--limit", "4", "--quiet")
            add_ranked_candidates(ws, scratch / "drawn")
    return ws


LLM_STAGES = {  # stage -> its command (one call in flight per worker: the kill finds both workers holding one)
    "captions": ("generate", "captions", "--from", ROOT / "examples" / "mucr" / "seeds.txt", "--per-group", "2",
                 "--concurrency", "1", "--quiet"),
    "context": ("generate", "context", "--limit", "4", "--concurrency", "1", "--quiet"),
    "cues": ("generate", "cues", "--from-ranking", "--concurrency", "1", "--quiet"),
    "pairs": ("generate", "pairs", "--types", "count,color", "--concurrency", "1", "--quiet"),
}


def what_was_made(ws: Path) -> tuple[list, dict]:
    """Every item (key, question, answer, data without generation ids and times) and the calls stored per
    generator: what a run made, comparable between two workspaces."""
    from cftools.workspace import load_workspace

    def plain(value):  # noqa: ANN001, ANN202
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if "generation" not in k and not k.endswith("_at")}
        return [plain(v) for v in value] if isinstance(value, list) else value

    workspace = load_workspace(ws)
    try:
        with workspace.store.session() as session:
            items = [(key, question, answer, plain(data or {})) for key, question, answer, data in session.execute(
                select(Item.key, Item.question, Item.answer, Item.data).order_by(Item.key))]
            calls = dict(session.execute(select(Generation.generator, func.count()).group_by(Generation.generator)
                                         ).all())
            open_claims = session.execute(select(func.count()).select_from(WorkClaim)
                                          .where(WorkClaim.state != "done")).scalar_one()
    finally:
        workspace.close()
    assert open_claims == 0
    return items, calls


@pytest.mark.parametrize("stage", sorted(LLM_STAGES))
def test_an_llm_stage_on_ray_with_its_workers_killed_mid_run_makes_what_a_local_run_makes(two_nodes, stub, tmp_path,
                                                                                       stage):
    """Issue 45: every `--ray` stage once with its workers killed while each holds a call (rewrite, images and
    eval have tests of their own)."""
    from fault_trials import setup_cli

    stub.reset()
    local = llm_stage_workspace(tmp_path / "local", stub, stage)
    setup_cli(local, *LLM_STAGES[stage])
    expected = what_was_made(local)
    stub.reset()
    ws = llm_stage_workspace(tmp_path / "ray", stub, stage)
    stub.hold(after=1)  # the first call is answered, every later one held until the workers are killed
    outcome: list = []
    driver = threading.Thread(target=lambda: outcome.append(run_catching(setup_cli, ws, *LLM_STAGES[stage], "--ray",
                                                                         two_nodes.address)))
    driver.start()
    try:
        wait_until(lambda: stub.held() >= 2, "both workers holding a call", alive=driver.is_alive)
        victims = worker_processes()
        assert victims
        for victim in victims:
            victim.send_signal(signal.SIGKILL)
    finally:
        stub.release()  # the calls sent again by the restarted workers are answered
        driver.join(timeout=300)
    assert outcome == [None], outcome
    assert what_was_made(ws) == expected


def run_catching(function, *args) -> BaseException | None:  # noqa: ANN001
    try:
        function(*args)
    except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
        return exc
    return None


def test_a_driver_killed_mid_run_is_finished_by_the_rerun_without_duplicates(two_nodes, stub, tmp_path):
    from fault_trials import cli, cli_env, setup_cli


    stub.reset()
    ws = rewrite_workspace(tmp_path, stub)
    stub.script({"hold": 0}, HOLD, HOLD)
    driver = subprocess.Popen(cli(ws, *REWRITE, "--ray", two_nodes.address), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        wait_until(lambda: calls_stored(ws) >= 1 and len(stub.requests()) >= 3, "a result and two held calls",
                   driver)
    finally:
        driver.kill()
        driver.wait()
    assert calls_stored(ws) == 1
    stub.reset()
    setup_cli(ws, *REWRITE, "--ray", two_nodes.address)
    items, calls, open_claims = drafts(ws)
    assert len(items) == 6 and calls == 6 and open_claims == 0


# ---------------------------------------------------------------- images and eval

def candidate_images(ws: Path) -> dict:
    from cftools.workspace import load_workspace

    workspace = load_workspace(ws)
    try:
        with workspace.store.session() as session:
            rows = session.execute(select(Item.key, Item.data).where(Item.kind == "mucr")).all()
    finally:
        workspace.close()
    return {key: {style: {k: (c["cause"], c["effect"]) for k, c in made.items()}
                  for style, made in ((data or {}).get("candidates") or {}).items()}
            for key, data in rows if (data or {}).get("candidates")}


def test_images_on_ray_are_the_images_of_a_local_run(two_nodes, stub, tmp_path):
    from fault_trials import EXAMPLE_CAPTIONS, configure_llm, fresh_workspace, setup_cli

    import torch

    stub.reset()
    made = {}
    ws = fresh_workspace(tmp_path / "local")
    setup_cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)
    configure_llm(ws, stub.base_url)
    setup_cli(ws, "generate", "context", "--limit", "2", "--quiet")
    shutil.copytree(ws, tmp_path / "ray" / "ws")  # two pairs with their descriptions, twice
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers compute (Ray gives each one CPU's thread): the same floats, bytes
    try:
        for where, extra in (("local", ()), ("ray", ("--ray", two_nodes.address))):
            setup_cli(tmp_path / where / "ws", "generate", "images", "--per-prompt", "2", "--styles", "photograph",
                      *extra)
            made[where] = candidate_images(tmp_path / where / "ws")
    finally:
        torch.set_num_threads(before)
    assert made["ray"] == made["local"]
    assert len(made["ray"]) == 2 and all(len(styles["photograph"]) == 2 for styles in made["ray"].values())


def edit_candidate_images(ws: Path) -> dict:
    """Item key -> each edit's candidates (k -> image) of a workspace."""
    from cftools.workspace import load_workspace

    workspace = load_workspace(ws)
    try:
        with workspace.store.session() as session:
            rows = session.execute(select(Item.key, Item.data).where(Item.kind == "cvqa")).all()
    finally:
        workspace.close()
    return {key: {prefix: {k: c["image"] for k, c in ((data or {}).get(f"{prefix}_candidates") or {}).items()}
                  for prefix in ("edit", "irrelevant_edit")} for key, data in rows}


def image_stage_workspace(scratch: Path, stub, stage: str) -> Path:  # noqa: ANN001
    from fault_trials import EXAMPLE_CAPTIONS, configure_llm, fresh_workspace, setup_cli

    ws = fresh_workspace(scratch)
    configure_llm(ws, stub.base_url)
    if stage == "images":
        setup_cli(ws, "ingest", "captions", EXAMPLE_CAPTIONS)
        setup_cli(ws, "generate", "context", "--limit", "2", "--quiet")
    else:  # three drawn-shape items with images; their edit instructions from the stub, in the run itself
        setup_cli(ws, "ingest", "cvqa", ROOT / "examples" / "cvqa" / "drawn-shapes.csv", "--images",
                  ROOT / "examples" / "vqav2" / "images", "--licence", "CC0-1.0")
    return ws


IMAGE_STAGES = {  # stage -> (its command, the backend factory its command calls, what it made)
    "images": (("generate", "images", "--per-prompt", "2", "--styles", "photograph"),
               ("cftools.imagegen.make_image_backend", "held_image_backend"), candidate_images),
    "edits": (("generate", "edits", "--kind", "cvqa", "--limit", "3", "--per-item", "1", "--quiet"),
              ("cftools.imagegen.edits.make_edit_backend", "held_edit_backend"), edit_candidate_images),
}


def run_held_and_killed(run) -> tuple:  # noqa: ANN001
    """RUN() on a driver thread with the pipeline and model workers held (tests/held_images.py): once a worker
    holds a call, every such worker process is killed, then the hold released (the calls the restarted workers
    send again go through). Returns what RUN returned and its error (None when it finished)."""
    import held_images

    folder = held_images.this_cluster_hold()
    held_images.arm(folder)
    result: list = []
    error: list = []
    driver = threading.Thread(target=lambda: error.append(run_catching(lambda: result.append(run()))))
    driver.start()
    try:
        # the first call answered, the next one held (a run claims as many jobs as calls in flight and waits for
        # the batch: the held call is the batch's last)
        wait_until(lambda: held_images.held(folder) >= 1, "a worker holding a call", alive=driver.is_alive)
        victims = worker_processes("CftoolsWorker")
        assert victims
        for victim in victims:
            victim.send_signal(signal.SIGKILL)
    finally:
        held_images.release(folder)
        driver.join(timeout=600)
        shutil.rmtree(folder, ignore_errors=True)
    return (result[0] if result else None), (error[0] if error else AssertionError("the run did not finish"))


@pytest.mark.parametrize("stage", sorted(IMAGE_STAGES))
def test_an_image_stage_on_ray_with_its_workers_killed_mid_run_makes_what_a_local_run_makes(two_nodes, stub, tmp_path,
                                                                                         monkeypatch, stage):
    """Issue 45: `generate images` and `generate edits` on Ray, their pipeline workers killed while one holds a
    call (tests/held_images.py), make the images a local run makes, each once."""
    import importlib

    import torch

    import held_images
    from fault_trials import setup_cli

    command, (target, held), made = IMAGE_STAGES[stage]
    stub.reset()
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers compute (Ray gives each one CPU's thread): the same floats, bytes
    try:
        local = image_stage_workspace(tmp_path / "local", stub, stage)
        setup_cli(local, *command)
        expected = made(local)
        ws = image_stage_workspace(tmp_path / "ray", stub, stage)
        module, _, name = target.rpartition(".")
        monkeypatch.setattr(importlib.import_module(module), name, getattr(held_images, held))
        _, error = run_held_and_killed(lambda: setup_cli(ws, *command, "--ray", two_nodes.address))
    finally:
        torch.set_num_threads(before)
    assert error is None, error
    assert made(ws) == expected and expected


def test_eval_on_ray_with_its_workers_killed_mid_run_gives_the_predictions_of_a_local_run(two_nodes, tiny_llava_dir,
                                                                                         tmp_path, monkeypatch):
    import torch

    import held_images
    from cftools.evaluate.run import EvalOptions, run_eval
    from test_eval_shard import small_release

    release = small_release(tmp_path / "release-1.0")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the workers compute (Ray gives each one CPU's thread): the same floats
    try:
        local = run_eval(release, f"hf:{tiny_llava_dir}",
                         options=EvalOptions(mode="rank", batch_size=1, device="cpu", out_dir=tmp_path / "local"))
    finally:
        torch.set_num_threads(before)
    monkeypatch.setattr("cftools.evaluate.remote.LandedAnswerer", held_images.HeldAnswerer)
    on_ray, error = run_held_and_killed(lambda: run_eval(release, f"hf:{tiny_llava_dir}",
                                                         options=EvalOptions(mode="rank", batch_size=1, device="cpu",
                                                                             out_dir=tmp_path / "ray",
                                                                             ray=two_nodes.address)))
    assert error is None, error
    assert on_ray.asked == local.asked > 0
    assert on_ray.predictions == local.predictions


def test_as_completed_hands_out_more_units_as_a_growing_limit_rises():
    """A limit given as a function is asked again before each hand-out (a Ray pool that a node joins): after it
    rises to 3, three units are in flight at once (the barrier passes only then; with the limit read once it would
    time out)."""
    limit, lock, running, seen = [1], threading.Lock(), [0], []
    together = threading.Barrier(3, timeout=60)

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            seen.append((running[0], limit[0]))
        if n == 2:
            limit[0] = 3
        if n >= 3:
            together.wait()
        with lock:
            running[0] -= 1
        return n

    assert sorted(u for u, _ in as_completed(range(6), work, lambda: limit[0])) == list(range(6))
    assert all(now <= allowed for now, allowed in seen), seen
    assert max(now for now, _ in seen) == 3


def test_run_jobs_keeps_as_many_calls_in_flight_as_a_growing_limit_allows():
    from cftools.llm.runner import JobResult, Shown, run_jobs

    limit, lock, running, peak = [1], threading.Lock(), [0], [0]
    together = threading.Barrier(4, timeout=60)

    def work(n: int) -> JobResult:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            assert running[0] <= limit[0]
        if n == 1:
            limit[0] = 4
        if n >= 2:
            together.wait()
        with lock:
            running[0] -= 1
        return JobResult(job=n, ok=True)

    written: list[int] = []
    stats = run_jobs(range(6), work, lambda batch: written.extend(r.job for r in batch), concurrency=lambda: limit[0],
                     shown=Shown(quiet=True))
    assert sorted(written) == list(range(6)) and stats.done == 6 and stats.failed == 0
    assert peak[0] == 4


def test_calls_in_flight_grow_when_a_node_joins_mid_run(two_nodes):
    """`in_flight_of` a backend on a Ray pool follows the pool: once a node joins (and the pool grows onto it), a
    run that started with one call per node hands out one more at once (the barrier passes only then)."""
    from cftools.distributed import in_flight_of

    class OnRay:  # what the remote backends expose: their pool and its calls in flight
        def __init__(self, workers: RayWorkers) -> None:
            self.workers = workers

        @property
        def in_flight(self) -> int:
            return self.workers.in_flight

    workers, joined = RayWorkers(WorkerSpec(build=dict, kwargs={"a": 1}, concurrency=1)), None
    try:
        before = workers.size
        together = threading.Barrier(before + 1, timeout=120)

        def work(n: int) -> int:
            if n:  # unit 0 comes back at once; the others wait until before + 1 of them are in flight
                together.wait()
            return workers.call("get", "a")

        units, replies = range(before + 2), []
        for unit, reply in as_completed(units, work, in_flight_of(OnRay(workers))):
            replies.append(reply)
            if unit == 0:  # mid-run (in the driver's main thread: Ray starts a node's processes there)
                joined = two_nodes.add_node(num_cpus=1)
                two_nodes.wait_for_nodes()
                workers.grow()
        assert replies == [1] * len(units)
        assert workers.size == before + 1 and joined.node_id in workers.nodes()
    finally:
        workers.close()
        if joined is not None:
            two_nodes.remove_node(joined)
