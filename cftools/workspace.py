"""A workspace: a folder with `cftools.toml` and (by default) the SQLite store beside it."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import tomlkit

from cftools.errors import WorkspaceError
from cftools.store import Store

CONFIG_NAME = "cftools.toml"
CONFIG_TEMPLATE = "cftools.toml.j2"  # plain TOML since values are set with tomlkit (the name is kept)
ENV_WORKSPACE = "CFTOOLS_WORKSPACE"
DEFAULT_DB_NAME = "cftools.db"


@dataclass
class Workspace:
    root: Path
    config: dict[str, Any] = field(default_factory=dict)
    _store: Store | None = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def db_url(self) -> str:
        url = self.config.get("store", {}).get("url") or f"sqlite:///{DEFAULT_DB_NAME}"
        # A relative SQLite path is relative to the workspace, not to the current folder.
        prefix = "sqlite:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
            url = prefix + str((self.root / url[len(prefix):]).resolve())
        return url

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.db_url)
        return self._store

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.config.get(name, {}))

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def close(self) -> None:
        if self._store is not None:
            self._store.dispose()
            self._store = None


def render_config(db_url: str | None) -> str:
    """The commented default cftools.toml with the store URL set. tomlkit writes the value (quoting and
    escaping it) and keeps the template's comments; a URL pasted into the text could break the file."""
    template = resources.files("cftools").joinpath("templates", CONFIG_TEMPLATE).read_text(encoding="utf-8")
    config = tomlkit.parse(template)
    if db_url:
        config["store"]["url"] = db_url
    return tomlkit.dumps(config)


def init_workspace(root: Path, db_url: str | None = None) -> Workspace:
    """Create (or reopen) a workspace at ROOT; the store is created and migrated."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / CONFIG_NAME
    if config_path.exists():
        workspace = load_workspace(root)
        if db_url and workspace.config.get("store", {}).get("url") not in (None, db_url):
            raise WorkspaceError(f"{config_path} already uses another store; edit [store] url to change it")
    else:
        config_path.write_text(render_config(db_url), encoding="utf-8")
        workspace = load_workspace(root)
    workspace.store  # noqa: B018  (creates and migrates the database)
    return workspace


def load_workspace(root: Path) -> Workspace:
    config_path = Path(root) / CONFIG_NAME
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkspaceError(f"no cftools workspace at {root} (no {CONFIG_NAME}); run 'cftools init DIR'") from None
    except tomllib.TOMLDecodeError as exc:
        raise WorkspaceError(f"{config_path}: not valid TOML: {exc}") from None
    return Workspace(root=Path(root).resolve(), config=config)


def find_workspace(explicit: str | os.PathLike | None = None) -> Workspace:
    """--workspace, then $CFTOOLS_WORKSPACE, then the current folder."""
    if explicit:
        return load_workspace(Path(explicit))
    if os.environ.get(ENV_WORKSPACE):
        return load_workspace(Path(os.environ[ENV_WORKSPACE]))
    cwd = Path.cwd()
    if (cwd / CONFIG_NAME).exists():
        return load_workspace(cwd)
    raise WorkspaceError(
        f"no cftools workspace here ({cwd}): pass --workspace DIR, set {ENV_WORKSPACE}, "
        "or create one with 'cftools init DIR'"
    )
