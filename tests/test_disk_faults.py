"""A write that fails (a read-only or full target folder) gives a one-line error naming the file; the store and any
earlier release stay as they were.

A read-only folder is a read-only tmpfs mount when running as root (root ignores permission bits), else a folder
without write permission. A full folder is a small tmpfs mount, filled to leave a set number of bytes free, so the
writer gets a real ENOSPC from the kernel; that needs root (CI runs as root: there a failed mount fails the test
rather than skipping it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from fault_trials import setup_cli, write_cvqa, write_number_table
from test_mucr import context_stub, drawable_workspace  # noqa: F401  (fixture)


def store_bytes(ws, but: tuple[str, ...] = ()) -> str:
    """The store's content (a dump, so WAL checkpoints do not count as changes), the tables BUT left out. Work
    claims a failed run registered are bookkeeping, not content: they must be free again, and are left out."""
    import sqlite3

    db = sqlite3.connect(ws.root / "cftools.db")
    try:
        assert db.execute("select count(*) from work_claims where state = 'leased'").fetchone()[0] == 0
        left_out = tuple(f'INSERT INTO "{table}"' for table in ("work_claims", *but))
        dump = [line for line in db.iterdump() if not line.startswith(left_out)]
        return hashlib.sha256("\n".join(dump).encode()).hexdigest()
    finally:
        db.close()


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def cannot(reason: str) -> None:
    """Skip where this machine cannot make the folder; under CI (which runs as root) fail instead."""
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def tmpfs():
    """Mount a tmpfs over an empty folder: yields a function (FOLDER, OPTIONS) -> FOLDER; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(folder: Path, options: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        assert not list(folder.iterdir()), "mount over an empty folder only"
        if os.geteuid() != 0:
            cannot(f"mounting a tmpfs needs root (euid {os.geteuid()})")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            cannot(f"cannot mount a tmpfs as root here: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in reversed(mounted):
        # a file a failed writer still holds open keeps the mount busy: detach it lazily then, never leave it
        if subprocess.run(["umount", str(folder)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def read_only(tmpfs):
    """Make a folder read-only for this process; yields a function FOLDER -> FOLDER."""

    def make(folder: Path) -> Path:
        if os.geteuid() != 0:
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o555)
            return folder
        return tmpfs(folder, "ro,size=64k")

    return make


def free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


@pytest.fixture
def small_disk(tmpfs):
    """A folder on a 1 MB file system of its own; `fill(FOLDER, LEFT)` then leaves only LEFT bytes free."""
    return lambda folder: tmpfs(folder, "size=1m")


def fill(folder: Path, left: int = 0) -> Path:
    """Fill FOLDER's file system with one file until LEFT bytes are free (the kernel counts whole pages)."""
    filler = folder / "filler.bin"
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free_bytes(folder) - left))
    assert free_bytes(folder) <= left + os.statvfs(folder).f_frsize
    return filler


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


# ---------------------------------------------------------------- a full folder (ENOSPC)

NO_SPACE = "No space left on device"


def export_into(run_cli, version: str, out: Path, *extra: str):  # noqa: ANN201
    return run_cli("export", "r", "--version", version, "--licence", "CC0-1.0", "--include-unverified", "--out", out,
                   *extra)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# The second release's 24 images take 96 KB (a page each): 16 KB free runs out among the images, 112 KB after them.
@pytest.mark.parametrize("left", [16 * 1024, 112 * 1024], ids=["among-the-images", "after-the-images"])
def test_export_into_a_full_folder(workspace, run_cli, tmp_path, small_disk, left):
    """No half release under its name or beside it; the earlier release in the same folder still verifies, also
    when the failed export was to replace it (--force); the store is unchanged."""
    full = small_disk(tmp_path / "full")
    setup_cli(workspace.root, "ingest", "cvqa", write_cvqa(tmp_path / "in1", 4), "--images", tmp_path / "in1")
    assert export_into(run_cli, "1", full).exit_code == 0
    earlier = full / "r-1"
    manifest = sha256_of(earlier / "manifest.json")
    setup_cli(workspace.root, "ingest", "cvqa", write_cvqa(tmp_path / "in2", 24), "--images", tmp_path / "in2")
    fill(full, left)
    before = store_bytes(workspace)
    one_line_error(export_into(run_cli, "2", full), str(full / "r-2"), NO_SPACE)
    one_line_error(export_into(run_cli, "1", full, "--force"), str(earlier), NO_SPACE)
    assert store_bytes(workspace) == before
    assert sorted(p.name for p in full.iterdir()) == ["filler.bin", "r-1"]
    assert run_cli("verify", earlier).exit_code == 0 and sha256_of(earlier / "manifest.json") == manifest


def test_ingest_report_into_a_full_folder(workspace, run_cli, tmp_path, small_disk):
    table = write_number_table(tmp_path / "in", 3)
    table.write_text(table.read_text() + "img0.png,,\n")  # a bad record: the report lists it
    target = small_disk(tmp_path / "full")
    fill(target)
    before = store_bytes(workspace)
    out = run_cli("ingest", "table", table, "--images", tmp_path / "in", "--skip-bad", "--report", target / "bad.jsonl")
    one_line_error(out, str(target / "bad.jsonl"), NO_SPACE)
    assert store_bytes(workspace) == before


def test_a_full_disk_the_writer_did_not_name_is_still_one_line():
    """The CLI's safety net for a writer that does not say which file it was writing."""
    import errno

    import click
    from click.testing import CliRunner

    from cftools.cli import CftoolsGroup

    @click.group(cls=CftoolsGroup)
    def group() -> None:
        pass

    @group.command()
    def write() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    out = CliRunner().invoke(group, ["write"])
    one_line_error(out, NO_SPACE)


def test_generate_images_into_a_full_folder(workspace, run_cli, context_stub, small_disk):  # noqa: F811
    drawable_workspace(workspace, run_cli, context_stub, limit=1)
    target = small_disk(workspace.path("images", "generated"))
    fill(target)
    before = store_bytes(workspace)
    out = run_cli("generate", "images", "--per-prompt", "1", "--styles", "photograph")
    one_line_error(out, str(target), NO_SPACE)
    assert store_bytes(workspace) == before
    assert [p.name for p in target.rglob("*") if p.is_file()] == ["filler.bin"]  # no partial image left


def test_an_eval_run_folder_that_fills_up_mid_run(workspace, run_cli, llm_server, tmp_path, small_disk):
    """The predictions that fit stay, whole (the rerun drops a cut line); the store records no run; once there is
    room the same command finishes the run, each question answered once."""
    from fault_trials import configure_llm

    setup_cli(workspace.root, "ingest", "cvqa", write_cvqa(tmp_path / "in", 30), "--images", tmp_path / "in")
    assert export_into(run_cli, "1", tmp_path / "releases").exit_code == 0
    configure_llm(workspace.root, llm_server.base_url)
    run = small_disk(tmp_path / "run")
    filler = fill(run, 12 * 1024)  # a page for the run's config, one for its lock's owner, one for some predictions
    # the request cache keeps the replies the model gave (the rerun need not ask again); nothing else may change
    before = store_bytes(workspace, but=("llm_cache",))
    command = ("eval", "run", tmp_path / "releases" / "r-1", "--model", "blind:openai:stub", "--out", run, "--quiet")
    one_line_error(run_cli(*command), str(run / "predictions.jsonl"), NO_SPACE)
    assert store_bytes(workspace, but=("llm_cache",)) == before
    assert (run / "predictions.jsonl").stat().st_size > 0, "the run should fill up mid-way, not at its start"
    filler.unlink()
    assert run_cli(*command).exit_code == 0
    lines = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    keys = [(line["id"], line["which"]) for line in lines]
    assert len(keys) == len(set(keys)) == 60


@pytest.mark.parametrize("left", [24 * 1024, 64 * 1024, 160 * 1024])
def test_generate_images_when_the_workspace_disk_fills_mid_run(tmp_path, run_cli, context_stub, tmpfs,  # noqa: F811
                                                              monkeypatch, left):
    """The store and the images share one full disk: one line, no image file without its row (doctor finds none),
    and once there is room the rerun makes the rest."""
    from sqlalchemy import select

    from cftools.models import Image
    from cftools.workspace import init_workspace

    root = tmpfs(tmp_path / "disk", "size=6m")
    workspace = init_workspace(root / "ws")
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(workspace.root))
    drawable_workspace(workspace, run_cli, context_stub, limit=3)
    workspace.close()
    filler = fill(root, left)
    command = ("generate", "images", "--per-prompt", "2", "--styles", "photograph")
    out = run_cli(*command)
    assert out.exit_code == 1, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.output, out.output
    filler.unlink()
    with workspace.store.session() as session:
        recorded = set(session.execute(select(Image.sha256)).scalars())
    files = {p.stem for p in workspace.path("images", "generated").rglob("*.png")}
    assert files <= recorded, "an image file no row points to"
    doctor = json.loads(run_cli("doctor", "--json", "--offline").output)
    assert doctor["ok"] and doctor["problems"] == [], doctor
    assert run_cli(*command).exit_code == 0
    workspace.close()


def test_doctor_on_a_store_on_a_read_only_file_system_says_read_only(tmp_path, tmpfs):
    """Issue 45: SQLite cannot open a WAL store on a read-only file system; doctor said the store was damaged and
    to restore it from a backup (following that throws work away). It says read-only, as every other command."""
    import shutil
    import sys

    from cftools.workspace import init_workspace

    made = init_workspace(tmp_path / "ws")
    made.close()
    mount = tmpfs(tmp_path / "mnt", "size=4m")
    shutil.copytree(made.root, mount / "ws")
    done = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        cannot(f"cannot remount the tmpfs read-only: {done.stderr.strip()}")
    for command in (["doctor"], ["doctor", "--repair"], ["status"]):
        out = subprocess.run([sys.executable, "-m", "cftools", "--workspace", str(mount / "ws"), *command],
                             capture_output=True, text=True)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr + out.stdout
        assert "read-only" in lines[0] and "damaged" not in lines[0] and "backup" not in lines[0], lines[0]
