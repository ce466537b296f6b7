"""A write that fails (a read-only target folder) gives a one-line error; the store and any earlier release stay
as they were. The folder is a read-only tmpfs mount when running as root (root ignores permission bits), else a
folder without write permission."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from fault_trials import setup_cli, write_cvqa, write_number_table
from test_mucr import context_stub, drawable_workspace  # noqa: F401  (fixture)


def store_bytes(ws) -> str:
    """The store's content (a dump, so WAL checkpoints do not count as changes). Work claims a failed run
    registered are bookkeeping, not content: they must be free again, and are left out."""
    import sqlite3

    db = sqlite3.connect(ws.root / "cftools.db")
    try:
        assert db.execute("select count(*) from work_claims where state = 'leased'").fetchone()[0] == 0
        dump = [line for line in db.iterdump() if not line.startswith('INSERT INTO "work_claims"')]
        return hashlib.sha256("\n".join(dump).encode()).hexdigest()
    finally:
        db.close()


@pytest.fixture
def read_only(tmp_path):
    """Make a folder read-only for this process; yields a function FOLDER -> FOLDER."""
    mounted: list[Path] = []

    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            folder.chmod(0o555)
            return folder
        copy = list(folder.iterdir())
        assert not copy, "mount over an empty folder only"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a read-only folder as root here: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=False)


def one_line_error(out, *names: str) -> None:
    assert out.exit_code == 1, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in out.output, out.output
    for name in names:
        assert name in lines[0], lines[0]


def test_export_into_a_read_only_folder(workspace, run_cli, tmp_path, read_only):
    setup_cli(workspace.root, "ingest", "cvqa", write_cvqa(tmp_path / "in", 4), "--images", tmp_path / "in")
    assert run_cli("export", "r", "--version", "1", "--licence", "CC0-1.0", "--include-unverified").exit_code == 0
    earlier = workspace.path("releases", "r-1")
    assert run_cli("verify", earlier).exit_code == 0
    before = store_bytes(workspace)
    target = read_only(tmp_path / "ro")
    out = run_cli("export", "r", "--version", "2", "--licence", "CC0-1.0", "--include-unverified", "--out", target)
    one_line_error(out, str(target))
    assert store_bytes(workspace) == before and list(target.iterdir()) == []
    assert run_cli("verify", earlier).exit_code == 0


def test_ingest_report_into_a_read_only_folder(workspace, run_cli, tmp_path, read_only):
    table = write_number_table(tmp_path / "in", 3)
    table.write_text(table.read_text() + "img0.png,,\n")  # a bad record: the report lists it
    before = store_bytes(workspace)
    target = read_only(tmp_path / "ro")
    out = run_cli("ingest", "table", table, "--images", tmp_path / "in", "--skip-bad", "--report", target / "bad.jsonl")
    one_line_error(out, str(target / "bad.jsonl"))
    assert store_bytes(workspace) == before


def test_generate_images_into_a_read_only_folder(workspace, run_cli, context_stub, tmp_path, read_only):  # noqa: F811
    drawable_workspace(workspace, run_cli, context_stub, limit=1)
    before = store_bytes(workspace)
    target = read_only(workspace.path("images", "generated"))
    out = run_cli("generate", "images", "--per-prompt", "1", "--styles", "photograph")
    one_line_error(out, str(target))
    assert store_bytes(workspace) == before
