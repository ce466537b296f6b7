"""A command whose extra is not installed says in one line which extra to install (read from cftools' own package
metadata), and leaves the store as it was; a missing module no extra brings stays a traceback (a bug, not a set-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from cftools.cli import main
from cftools.extras import extras_with, missing_extra_message
from cftools.models import Item

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HAND_MADE = EXAMPLES / "edits" / "hand-made"


@pytest.mark.parametrize("module, extras", [
    ("imagehash", ["images"]), ("skimage.metrics", ["images"]), ("label_studio_sdk", ["annotate"]),
    ("yaml", ["export"]), ("psycopg", ["postgres"]), ("numpy", []), ("no_such_module", []),
])
def test_the_extras_bringing_a_module_are_read_from_the_package_metadata(module, extras):
    assert extras_with(module) == extras


def test_a_module_several_extras_bring_names_the_one_of_the_command():
    line = missing_extra_message("cftools eval", "torch")
    assert "pip install 'cftools[eval]'" in line and "local" in line and "images" in line
    assert "'cftools[local]'" in missing_extra_message("cftools generate rewrite", "torch")


def test_ingest_edits_without_the_images_extra_says_so_in_one_line(workspace):
    """In a fresh interpreter where scikit-image cannot be imported, as where the images extra is missing."""
    ingested = CliRunner().invoke(main, ["ingest", "cvqa", str(EXAMPLES / "cvqa" / "drawn-shapes.csv"), "--images",
                                         str(EXAMPLES / "vqav2" / "images"), "--licence", "CC0-1.0"])
    assert ingested.exit_code == 0, ingested.output
    with workspace.store.session() as session:
        before = session.execute(select(func.count()).select_from(Item)).scalar_one()
    args = ["ingest", "edits", str(HAND_MADE / "edits.csv"), "--images", str(HAND_MADE), "--licence", "CC0-1.0"]
    code = ("import sys; sys.modules['skimage'] = sys.modules['imagehash'] = None; from cftools.cli import run; "
            f"sys.argv = ['cftools', *{args!r}]; run()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: cftools ingest edits needs the images extra (skimage is not installed): pip install 'cftools[images]'")
    with workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(Item)).scalar_one() == before


def test_a_missing_module_no_extra_brings_is_not_hidden(workspace, monkeypatch):
    monkeypatch.setitem(sys.modules, "cftools.overview", None)
    result = CliRunner().invoke(main, ["status"])
    assert isinstance(result.exception, ModuleNotFoundError)
