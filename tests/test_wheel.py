"""The wheel carries prompts/, annotation/ and db/: built from a copy of the checkout, installed (not editable)
into a fresh venv, it lists the kinds, renders a prompt and a label config, and migrates a new store."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tracked_copy(target: Path) -> Path:
    """The checkout's tracked and untracked-not-ignored files (no build residue in the repository)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; its dependencies come from the test venv's site-packages, added as
    a plain path (no .pth of the test venv runs, so the editable checkout stays out)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to build the wheel from")
    scratch = tmp_path_factory.mktemp("wheel")
    source = tracked_copy(scratch / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(scratch / "dist"), str(source)], check=True, cwd=scratch)
    wheel = next((scratch / "dist").glob("cftools-*.whl"))
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True)
    return venv


def run_in(venv: Path, *args: str, cwd: Path) -> str:
    out = subprocess.run([str(venv / "bin" / "python"), *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_installed_wheel_lists_kinds_and_renders_from_its_own_copy(installed, tmp_path):
    kinds = json.loads(run_in(installed, "-m", "cftools.cli", "kinds", "--json", cwd=tmp_path))
    assert {"cvqa", "cfmm", "mucr"} <= {k["name"] for k in kinds}
    script = (
        "import cftools, json\n"
        "from cftools.llm.prompts import load_prompt\n"
        "from cftools.annotate.rules import render_label_config\n"
        "from cftools.resources import packaged_dir\n"
        "t = load_prompt('rewrite/boolean.j2')\n"
        "print(json.dumps({'package': cftools.__file__, 'prompts': str(packaged_dir('prompts')),\n"
        "  'rendered': t.render(question='Is the cat asleep?', answer='yes', source={}),\n"
        "  'config': render_label_config('cvqa', 'verify'), 'db': str(packaged_dir('db'))}))\n")
    got = json.loads(run_in(installed, "-c", script, cwd=tmp_path))
    site = str(next(installed.glob("lib/python*/site-packages")))
    assert got["package"].startswith(site) and got["prompts"].startswith(site) and got["db"].startswith(site)
    assert "Is the cat asleep?" in got["rendered"]
    assert "<View>" in got["config"] and 'name="related"' in got["config"]
    run_in(installed, "-m", "cftools.cli", "init", str(tmp_path / "ws"), cwd=tmp_path)
    assert (tmp_path / "ws" / "cftools.db").is_file()
