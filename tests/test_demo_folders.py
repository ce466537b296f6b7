"""`make demo` writes its workspaces where git ignores them (issue 46): every folder the example scripts default
to, and each `${ws}-NAME` sibling they make, is in .gitignore, so the checkout's `git status` stays clean."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = re.compile(r"\$PWD/([\w.-]+)")  # ws="${WORKSPACE:-$PWD/demo-workspace}"
SIBLING = re.compile(r"\$\{ws\}(-[\w.-]+)")  # WORKSPACE="${ws}-edits"


def demo_folders() -> set[str]:
    """The folders the example scripts write into the current folder by default (what `make demo` leaves)."""
    scripts = sorted((ROOT / "examples").rglob("*.sh"))
    defaults = {m for s in scripts for m in DEFAULT.findall(s.read_text())}
    siblings = {m for s in scripts for m in SIBLING.findall(s.read_text())}
    return defaults | {d + s for d in defaults for s in siblings}


def test_the_demo_scripts_name_their_folders():
    assert {"demo-workspace", "demo-workspace-cfmm", "demo-workspace-edits"} <= demo_folders()


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_every_folder_the_demo_writes_is_ignored_by_git():
    names = sorted(demo_folders())
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *[f"{n}/" for n in names]], cwd=ROOT,
                             capture_output=True, text=True).stdout.split()
    assert sorted(n.rstrip("/") for n in ignored) == names
