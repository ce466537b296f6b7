"""Shared fixtures: real SQLite workspaces in temp folders, the peer data, a CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cftools.cli import main
from cftools.workspace import init_workspace

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CFTOOLS_SHARED", ROOT.parent / "shared"))
PEER = SHARED / "data" / "peer"
CVQA_REAL = PEER / "C-VQA" / "C-VQA-Real" / "C-VQA-Real_questions.csv"
CVQA_SYNTHETIC = PEER / "C-VQA" / "C-VQA-Synthetic" / "C-VQA-Synthetic_questions.csv"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# Area fixture modules (tests/fixtures_<area>.py) are registered here.
pytest_plugins: list[str] = ["fixtures_label_studio", "fixtures_eval", "fixtures_llm"]


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """A fresh workspace with a SQLite store; CFTOOLS_WORKSPACE points at it."""
    ws = init_workspace(tmp_path / "ws")
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(ws.root))
    yield ws
    ws.close()


@pytest.fixture
def run_cli():
    """Invoke the CLI in-process; returns the click Result (asserts nothing by itself)."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        return runner.invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)

    return run


@pytest.fixture
def peer_cvqa_real() -> Path:
    if not CVQA_REAL.exists():
        pytest.fail(f"peer data not found at {CVQA_REAL} (set CFTOOLS_SHARED)")
    return CVQA_REAL
