"""How long cftools takes to start: `cftools --help` (issue 39: under 1 s), and the time from process start to the
first request a loopback OpenAI-compatible server receives (issue 46: under 1 s) for `generate rewrite` and
`eval --model openai:…`, beside a bare `openai` client sending one request.

Each figure is the median of RUNS fresh subprocesses (after one warm-up run that fills the OS file cache and the
bytecode cache); the spread is printed beside it. The API commands run on a fresh copy of a workspace of QUESTIONS
source questions (and a release of as many items) each time, nothing cached, against tests/llm_stub.py's server
in this process, which notes the moment the first chat request arrives; the process is stopped then. Last, the
heavy modules each command imported before its first request (one run under `python -X importtime`), largest
first. On a shared machine compare medians taken in the same run: the load of other processes adds to every
figure.

    .venv/bin/python bench/bench_startup.py [--runs 11] [--questions 2000]
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from llm_stub import StubServer, structured_reply, stub_reply  # noqa: E402

# What the start of a command should not pay for: the store's engine and migrations, array and model libraries,
# HTTP clients and the SDKs; each belongs to the command that uses it.
HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "numpy", "torch", "transformers", "diffusers", "label_studio_sdk",
         "pandas", "pyarrow", "datasets", "openai", "httpx", "PIL", "sklearn", "nltk", "matplotlib",
         "sentence_transformers", "llama_cpp")
QUESTIONS = 2000  # as in the measurement: what a command prepares before its first request counts
BARE_CLIENT = ("import openai, sys\n"
               "client = openai.OpenAI(base_url=sys.argv[1], api_key='none', max_retries=0)\n"
               "client.chat.completions.create(model=sys.argv[2], messages=[{'role': 'user', 'content': 'hi'}])\n")


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("CFTOOLS_WORKSPACE", None)
    return env


class FirstRequest:
    """The stub's reply function: notes when the first chat request of a run arrives, then answers as usual."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.arrived = threading.Event()
        self.model = ""

    def expect(self, model: str) -> None:
        """Wait for a request for MODEL (a name per run: a killed run's last requests may still come in)."""
        self.at, self.model = None, model
        self.arrived.clear()

    def __call__(self, request: dict, text: str):  # noqa: ANN204
        if self.at is None and request.get("model") == self.model:
            self.at = time.perf_counter()
            self.arrived.set()
        schema = (request.get("response_format") or {}).get("json_schema", {}).get("schema")
        return structured_reply(schema, text) if schema else stub_reply(text)


def cftools(*args: str) -> list[str]:
    return [sys.executable, "-m", "cftools", *args]


def make_workspace(folder: Path, base_url: str, questions: int) -> Path:
    """A workspace with QUESTIONS counting questions and [llm] on the stub; returns it."""
    subprocess.run(cftools("init", str(folder)), check=True, stdout=subprocess.DEVNULL, env=environment())
    table = folder.parent / "questions.csv"
    with open(table, "w", newline="") as fh:
        csv.writer(fh).writerows([("image", "question", "answer"),
                                  *((f"{i}.jpg", f"How many cats are there in room {i}?", str(i % 7))
                                    for i in range(questions))])
    subprocess.run(cftools("-w", str(folder), "ingest", "table", str(table), "--licence", "cc-by-4.0"),
                   check=True, stdout=subprocess.DEVNULL, env=environment())
    config = folder / "cftools.toml"
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{base_url}"', 1)
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"', 1))
    return folder


def make_release(folder: Path, questions: int) -> Path:
    """A C-VQA release of QUESTIONS items, each with an image of its own."""
    from fixtures_eval import cvqa_record, png_bytes, write_release

    records = [cvqa_record(i, "numerical-direct", str(i % 7), str(i % 7 + 1), "number") for i in range(questions)]
    return write_release(folder, records, {r["id"]: png_bytes(n, size=16) for n, r in enumerate(records)})


def time_to_exit(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=environment(), cwd=ROOT)
    return time.perf_counter() - start


def time_to_first_request(command: list[str], first: FirstRequest, model: str, cwd: Path) -> float:
    """Seconds from starting COMMAND to the stub's first request for MODEL; the process is stopped then (the rest
    of its run is not measured, and each run has a fresh copy of the workspace)."""
    return first_request(command, first, model, cwd)[0]


def first_request(command: list[str], first: FirstRequest, model: str, cwd: Path) -> tuple[float, str]:
    """(seconds to the first request, what COMMAND wrote on stderr until then)."""
    first.expect(model)
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: `-X importtime` would fill a pipe and stall
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, text=True, env=environment(),
                                cwd=cwd)
        while not first.arrived.wait(0.05) and proc.poll() is None:
            pass
        proc.kill()
        proc.wait()
        errors.seek(0)
        stderr = errors.read()
    if first.at is None:
        raise SystemExit(f"{' '.join(command[2:])} sent no request (exit {proc.returncode}): {stderr.strip()[-500:]}")
    return first.at - start, stderr


def median_of(runs: int, measure: Callable[[int], float]) -> list[float]:
    measure(-1)  # warm-up: bytecode and file caches
    return [measure(i) for i in range(runs)]


def heavy_imports(importtime: str) -> list[tuple[str, float]]:
    """(top-level heavy package, cumulative import seconds) from the output of `python -X importtime`."""
    found: dict[str, float] = {}
    for line in importtime.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        top = name.strip().split(".")[0]
        if top in HEAVY and name.strip() == top:
            found[top] = int(cumulative) / 1e6
    return sorted(found.items(), key=lambda item: -item[1])


def row(name: str, times: list[float]) -> str:
    return f"{name:<34} {statistics.median(times):>8.3f} {min(times):>8.3f} {max(times):>8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--questions", type=int, default=QUESTIONS, help="source questions in the workspace")
    args = parser.parse_args()
    first = FirstRequest()
    server = StubServer(delay=0.0, reply=first).start_in_thread()
    scratch = Path(tempfile.mkdtemp(prefix="cftools-bench-startup-"))
    try:
        template = make_workspace(scratch / "template", server.base_url, args.questions)
        release = make_release(scratch / "release", args.questions)

        def fresh(i: int) -> Path:  # a copy per run: nothing cached, nothing claimed; its own model name
            copy = Path(shutil.copytree(template, scratch / f"run-{i + 1}"))
            config = copy / "cftools.toml"
            config.write_text(config.read_text().replace('model = "stub"', f'model = "stub-{i + 1}"', 1))
            return copy

        generate = ["generate", "rewrite", "--group", "numerical-direct", "--quiet"]
        def evaluate(i: int) -> list[str]:
            return ["eval", str(release), "--model", f"openai:stub-e{i + 1}", "--quiet", "--out",
                    str(scratch / f"eval-{i + 1}")]

        measures = {
            "cftools --help (to exit)": lambda i: time_to_exit(cftools("--help")),
            "bare openai client": lambda i: time_to_first_request(
                [sys.executable, "-c", BARE_CLIENT, server.base_url, f"stub-b{i + 1}"], first, f"stub-b{i + 1}", ROOT),
            "generate rewrite": lambda i: time_to_first_request(cftools(*generate), first, f"stub-{i + 1}",
                                                                fresh(i)),
            "eval --model openai:stub": lambda i: time_to_first_request(
                cftools(*evaluate(100 + i)), first, f"stub-e{101 + i}", fresh(100 + i)),
        }
        print(f"seconds from process start to the first request received ({args.runs} runs each; "
              f"{args.questions} source questions)")
        print(f"{'':<34} {'median':>8} {'min':>8} {'max':>8}")
        for name, measure in measures.items():
            print(row(name, median_of(args.runs, measure)), flush=True)
        try:
            print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        except OSError:
            pass
        help_run = subprocess.run([sys.executable, "-X", "importtime", "-m", "cftools", "--help"], text=True,
                                  capture_output=True, env=environment(), cwd=ROOT)
        imported = {"cftools --help (whole run)": help_run.stderr,
                    "generate rewrite": first_request([sys.executable, "-X", "importtime", *cftools(*generate)[1:]],
                                                      first, "stub-1001", fresh(1000))[1],
                    "eval --model openai:stub": first_request(
                        [sys.executable, "-X", "importtime", *cftools(*evaluate(1001))[1:]], first, "stub-e1002",
                        fresh(1001))[1]}
        for name, importtime in imported.items():
            heavy = heavy_imports(importtime)
            print(f"heavy modules imported before the first request, {name}: "
                  + (", ".join(f"{module} {s:.2f} s" for module, s in heavy) or "none"))
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
