"""Where the packaged templates live, and a workspace's own copies that win over them.

`prompts/` (Jinja2 prompts), `annotation/` (Label Studio configs) and `db/` (Alembic) sit beside `cftools/`
in a source checkout; the wheel installs them inside the package (`cftools/prompts`, ...). A workspace made with
`cftools init --with-prompts` holds copies of `prompts/` and `annotation/`: a file there wins.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined

PACKAGE = Path(__file__).resolve().parent
OVERRIDABLE = ("prompts", "annotation")


def packaged_dir(name: str) -> Path:
    """The packaged folder NAME (prompts, annotation, db): inside the installed package, else the checkout's."""
    installed = PACKAGE / name
    return installed if installed.is_dir() else PACKAGE.parent / name


def search_dirs(name: str, workspace_root: Optional[Path] = None, kind_root: Optional[Path] = None) -> list[Path]:
    """The folders a template of NAME is looked up in: the workspace's copy, a plugin kind's own, the packaged."""
    dirs = [packaged_dir(name)]
    if kind_root is not None and (Path(kind_root) / name).is_dir():
        dirs.insert(0, Path(kind_root) / name)
    if workspace_root is not None and (Path(workspace_root) / name).is_dir():
        dirs.insert(0, Path(workspace_root) / name)
    return dirs


def template_env(name: str, workspace_root: Optional[Path] = None, kind_root: Optional[Path] = None,
                 **options) -> Environment:  # noqa: ANN003
    options.setdefault("undefined", StrictUndefined)
    dirs = search_dirs(name, workspace_root, kind_root)
    return Environment(loader=FileSystemLoader([str(d) for d in dirs]), **options)


def template_path(name: str, relative: str, workspace_root: Optional[Path] = None) -> Path:
    """The file that a lookup of RELATIVE under NAME finds (the workspace's copy when there is one)."""
    for folder in search_dirs(name, workspace_root):
        if (folder / relative).is_file():
            return folder / relative
    return packaged_dir(name) / relative


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def copy_overridable(workspace_root: Path) -> list[Path]:
    """Copy prompts/ and annotation/ into the workspace (files already there are kept: they are the user's)."""
    copied = []
    for name in OVERRIDABLE:
        source = packaged_dir(name)
        for path in sorted(source.rglob("*")):
            if not path.is_file() or path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            target = Path(workspace_root) / name / path.relative_to(source)
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                copied.append(target)
    return copied
