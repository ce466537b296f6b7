"""A workspace: a folder with `cftools.toml` and (by default) the SQLite store beside it."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cftools.errors import Hint, WorkspaceError

# The store (SQLAlchemy), the config schema (pydantic) and tomlkit are imported where they are used: every command
# imports this module, `cftools --help` included, and needs none of them (bench/bench_startup.py).
if TYPE_CHECKING:
    from cftools.store import Store

CONFIG_NAME = "cftools.toml"
CONFIG_TEMPLATE = "cftools.toml.j2"  # plain TOML since values are set with tomlkit (the name is kept)
ENV_WORKSPACE = "CFTOOLS_WORKSPACE"
DEFAULT_DB_NAME = "cftools.db"
# The store's password lives in the environment, never in cftools.toml: PGPASSWORD unless [store] password_env
# names another variable.
DEFAULT_PASSWORD_ENV = "PGPASSWORD"


def with_password(url: str, password_env: str) -> str:
    """URL with the password from $PASSWORD_ENV added, when it has none and the variable is set."""
    from cftools.store_health import parse_db_url, query_password

    password = os.environ.get(password_env)
    parsed = parse_db_url(url)
    if not password or parsed.password is not None or parsed.get_backend_name() == "sqlite" \
            or query_password(parsed):
        return url
    return parsed.set(password=password).render_as_string(hide_password=False)


def without_password(url: str) -> tuple[str, str | None]:
    """(URL without its password, the password) — the password must not reach cftools.toml, whether it is in the
    user part or in the query string (`?password=`)."""
    from cftools.store_health import parse_db_url, query_password, without_query_password

    parsed = parse_db_url(url)
    password = parsed.password if parsed.password is not None else query_password(parsed)
    if password is None:
        return url, None
    # URL.set(password=None) keeps the password (None there means "unchanged").
    stripped = without_query_password(parsed._replace(password=None))
    return stripped.render_as_string(hide_password=False), str(password)


@dataclass
class Workspace:
    root: Path
    config: dict[str, Any] = field(default_factory=dict)
    _store: Store | None = field(default=None, repr=False)
    # What the config check found that is not an error: unknown keys, each with the closest known one.
    config_warnings: list[str] = field(default_factory=list, repr=False)
    # Only `init` may create the store: an existing workspace whose SQLite file is gone or empty is an error.
    create_store: bool = field(default=False, repr=False)

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def db_url(self) -> str:
        store = self.config.get("store", {})
        url = store.get("url") or f"sqlite:///{DEFAULT_DB_NAME}"
        # A relative SQLite path is relative to the workspace, not to the current folder.
        prefix = "sqlite:///"
        if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
            url = prefix + str((self.root / url[len(prefix):]).resolve())
        return with_password(url, self.password_env)

    @property
    def password_env(self) -> str:
        """The variable later runs read the store's password from."""
        return self.config.get("store", {}).get("password_env") or DEFAULT_PASSWORD_ENV

    @property
    def store(self) -> Store:
        if self._store is None:
            from cftools.store import Store
            from cftools.store_health import check_store_exists

            if not self.create_store:
                check_store_exists(self.db_url)
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


def render_config(db_url: str | None, password_env: str | None = None) -> str:
    """The commented default cftools.toml with the store URL (its password left out) and the password variable
    set. tomlkit writes the values (quoting and escaping them) and keeps the template's comments; a URL pasted into
    the text could break the file."""
    import tomlkit

    template = resources.files("cftools").joinpath("templates", CONFIG_TEMPLATE).read_text(encoding="utf-8")
    config = tomlkit.parse(template)
    if db_url:
        config["store"]["url"] = db_url
    if password_env:
        config["store"]["password_env"] = password_env
    return tomlkit.dumps(config)


def init_workspace(root: Path, db_url: str | None = None, password_env: str | None = None) -> Workspace:
    """Create (or reopen) a workspace at ROOT; the store is created and migrated.

    A password in DB_URL is used for this once and never written: cftools.toml gets the URL without it, and
    later runs read it from $PGPASSWORD or the variable PASSWORD_ENV names."""
    root = Path(root).resolve()
    config_path = root / CONFIG_NAME
    stored_url, password = without_password(db_url) if db_url else (None, None)
    if config_path.exists():
        workspace = load_workspace(root)
        workspace.create_store = True
        if stored_url and workspace.config.get("store", {}).get("url") not in (None, stored_url):
            raise WorkspaceError(f"{config_path} already uses another store; edit [store] url to change it")
        if password_env and password_env != workspace.password_env:
            # not written over an existing file: later runs would read another variable than the one asked for
            raise WorkspaceError(f"{config_path} already reads the store's password from ${workspace.password_env}; "
                                 "edit [store] password_env to change it")
        open_store(workspace, db_url if password is not None else None)
        return workspace
    made = _missing_parents(root)
    root.mkdir(parents=True, exist_ok=True)
    before = set(root.iterdir())
    try:
        config_path.write_text(render_config(stored_url, password_env), encoding="utf-8")
        workspace = load_workspace(root)
        workspace.create_store = True
        open_store(workspace, db_url if password is not None else None)
    except BaseException:
        # A store that cannot be reached leaves no half-made workspace: what this call made goes again.
        _remove_made(root, before, made)
        raise
    return workspace


def open_store(workspace: Workspace, url_with_password: str | None) -> None:
    """Create and migrate the store (with the password given on the command line, this once, when there is one)."""
    if url_with_password:
        from cftools.store import Store

        workspace._store = Store(url_with_password)
    try:
        workspace.store  # noqa: B018  (creates and migrates the database)
    except BaseException:
        workspace.close()
        raise


def _missing_parents(root: Path) -> list[Path]:
    """ROOT and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (root, *root.parents):
        if folder.exists():
            break
        missing.append(folder)
    return missing


def _remove_made(root: Path, before: set[Path], made: list[Path]) -> None:
    import shutil

    for path in set(root.iterdir()) - before:
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            break


def load_workspace(root: Path) -> Workspace:
    """The workspace at ROOT, its cftools.toml read and checked against the schema (cftools.config): a file that
    is not TOML or a value of the wrong type is one error line; unknown keys are `config_warnings`."""
    from cftools.config import check_config, with_aliases

    config_path = Path(root) / CONFIG_NAME
    config = read_config(config_path, root)
    warnings = check_config(config, str(config_path))
    config = with_aliases(config, str(config_path))
    workspace = Workspace(root=Path(root).resolve(), config=config, config_warnings=warnings)
    from cftools.distributed import keep_on_driver

    keep_on_driver(workspace.password_env)  # never inherited by a Ray cluster that --ray starts (docs/ray.md)
    return workspace


def read_config(config_path: Path, root: Path) -> dict[str, Any]:
    try:
        # utf-8-sig: a byte order mark some Windows editors put first is read past (TOML itself forbids it)
        return tomllib.loads(config_path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise WorkspaceError(f"no cftools workspace at {root} (no {CONFIG_NAME}); run 'cftools init DIR'") from None
    except tomllib.TOMLDecodeError as exc:
        raise WorkspaceError(f"{config_path}: not valid TOML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise WorkspaceError(f"{config_path}: not valid TOML: arrays or tables nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{config_path}: not valid TOML: not UTF-8 text (byte {exc.start})") from None
    except IsADirectoryError:
        raise WorkspaceError(f"{config_path} is a folder, not a file") from None
    except PermissionError:
        raise WorkspaceError(f"{config_path} cannot be read (permission denied)") from None


def named_workspace_root(explicit: str | os.PathLike | None = None) -> Path | None:
    """The folder a workspace is asked for in: --workspace, then $CFTOOLS_WORKSPACE, then the current folder when it
    holds a cftools.toml; None when none is."""
    if explicit:
        return Path(explicit)
    if os.environ.get(ENV_WORKSPACE):
        return Path(os.environ[ENV_WORKSPACE])
    cwd = Path.cwd()
    return cwd if (cwd / CONFIG_NAME).exists() else None


def find_workspace(explicit: str | os.PathLike | None = None) -> Workspace:
    """--workspace, then $CFTOOLS_WORKSPACE, then the current folder."""
    root = named_workspace_root(explicit)
    if root is not None:
        return load_workspace(root)
    cwd = Path.cwd()
    raise WorkspaceError(
        f"no cftools workspace here ({cwd})",
        hint=Hint(f"{{message}}: pass {{workspace}} DIR, set {ENV_WORKSPACE}, or create one with 'cftools init DIR'",
                  workspace="--workspace"),
    )
