"""Remote faults through a loopback fault proxy (tests/fault_proxy.py, its own process): 5xx, 429 with
Retry-After, resets, stalls past the time-out and truncated bodies at a seeded rate. Generate and eval end with
the same store as a clean run; push and pull too, and nothing is marked pushed that the server does not hold."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from fault_trials import (assert_invariants, cli, cli_env, configure_llm, fresh_workspace, setup_cli, start_stub,
                          store_fingerprint, write_cvqa, write_number_table)
from loopback import start_server

TESTS = Path(__file__).resolve().parent
MAX_RUNS = 5  # a script reruns a command that exits non-zero; each rerun does only what is left


def start_proxy(upstream: str, rate: float, seed: int, stall_s: float = 3.0,
                faults: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """The proxy as its own process; FAULTS picks the kinds it injects (all by default)."""
    return start_server("fault_proxy.py", "--upstream", upstream, "--rate", str(rate), "--seed", str(seed),
                        "--stall", str(stall_s), *(["--faults", ",".join(faults)] if faults else []))


def run_until_done(command: list[str]) -> list[int]:
    codes = []
    for _ in range(MAX_RUNS):
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=cli_env())
        codes.append(done.returncode)
        if done.returncode == 0:
            return codes
        assert done.returncode in (1, 3, 4), done.stderr[-2000:]
        assert "Traceback" not in done.stderr, done.stderr[-3000:]
    raise AssertionError(f"{command} did not finish in {MAX_RUNS} runs: {codes}")


def short_timeouts(ws: Path) -> None:
    config = ws / "cftools.toml"
    config.write_text(config.read_text().replace("[llm]\n", "[llm]\ntimeout = 1.5\n", 1))


def llm_workspace(scratch: Path, base_url: str) -> Path:
    ws = fresh_workspace(scratch)
    setup_cli(ws, "ingest", "table", write_number_table(scratch / "in", 12), "--images", scratch / "in")
    setup_cli(ws, "ingest", "cvqa", write_cvqa(scratch / "cv", 6), "--images", scratch / "cv")
    configure_llm(ws, base_url)
    short_timeouts(ws)
    return ws


def generate_and_eval(ws: Path) -> list[list[int]]:
    codes = [run_until_done(cli(ws, "generate", "rewrite", "--group", "numerical-direct", "--concurrency", "2",
                                "--quiet"))]
    codes.append(run_until_done(cli(ws, "export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")))
    codes.append(run_until_done(cli(ws, "eval", "run", ws / "releases" / "r-1", "--model", "blind:openai:stub",
                                    "--concurrency", "2", "--out", ws / "runs" / "blind", "--quiet")))
    return codes


def predictions(ws: Path) -> list[tuple]:
    db = sqlite3.connect(ws / "cftools.db")
    try:
        return sorted(db.execute("select item_key, which, parsed, correct from predictions").fetchall())
    finally:
        db.close()


def test_generate_and_eval_through_faults_end_as_a_clean_run(tmp_path):
    stub, stub_url = start_stub(delay=0.0)
    proxy, proxy_url = start_proxy(stub_url.removesuffix("/v1"), rate=0.3, seed=7)
    try:
        clean = llm_workspace(tmp_path / "clean", stub_url)
        assert generate_and_eval(clean) == [[0], [0], [0]]
        faulty = llm_workspace(tmp_path / "faulty", proxy_url + "/v1")
        generate_and_eval(faulty)
        injected = httpx.get(proxy_url + "/__faults__").json()
        assert sum(injected.values()) >= 5 and len(injected) >= 4, injected
        assert_invariants(faulty, (faulty / "runs" / "blind",))
        assert store_fingerprint(faulty) == store_fingerprint(clean)
        assert predictions(faulty) == predictions(clean) and len(predictions(clean)) > 0
    finally:
        for proc in (proxy, stub):
            proc.kill()
            proc.wait()
