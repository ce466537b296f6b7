import os
import sqlite3

import pytest

from cftools.errors import WorkspaceError
from cftools.workspace import find_workspace, init_workspace, load_workspace


def test_init_creates_config_and_sqlite_store_in_wal_mode(tmp_path, run_cli):
    result = run_cli("init", tmp_path / "ws")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "ws" / "cftools.toml").exists()
    db = tmp_path / "ws" / "cftools.db"
    assert db.exists()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"items", "source_questions", "images", "generations", "check_flags", "judgments",
            "annotation_tasks", "releases", "eval_runs", "predictions", "alembic_version"} <= tables


def test_foreign_keys_are_enforced(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    from sqlalchemy.exc import IntegrityError

    from cftools.models import CheckFlag
    with pytest.raises(IntegrityError):
        with ws.store.write() as session:
            session.add(CheckFlag(item_id=12345, code="arithmetic", reason="no such item"))
    ws.close()


def test_init_with_db_url_uses_that_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'team.db'}"
    ws = init_workspace(tmp_path / "ws", url)
    assert ws.db_url == url
    assert (tmp_path / "elsewhere" / "team.db").exists()
    assert not (tmp_path / "ws" / "cftools.db").exists()
    ws.close()


def test_workspace_found_from_option_then_env_then_cwd(tmp_path, monkeypatch):
    a = init_workspace(tmp_path / "a")
    b = init_workspace(tmp_path / "b")
    monkeypatch.chdir(a.root)
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    assert find_workspace().root == a.root
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(b.root))
    assert find_workspace().root == b.root
    assert find_workspace(a.root).root == a.root


def test_no_workspace_is_a_clear_error(tmp_path, monkeypatch, run_cli):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    with pytest.raises(WorkspaceError):
        find_workspace()
    result = run_cli("status")
    assert result.exit_code != 0
    assert "no cftools workspace" in result.output
    assert "cftools init" in result.output


def test_broken_config_names_the_file(tmp_path):
    (tmp_path / "cftools.toml").write_text("[store\nurl=")
    with pytest.raises(WorkspaceError, match="cftools.toml"):
        load_workspace(tmp_path)


def test_relative_sqlite_url_is_relative_to_the_workspace(tmp_path, monkeypatch):
    ws = init_workspace(tmp_path / "ws")
    monkeypatch.chdir(tmp_path)
    assert ws.db_url == f"sqlite:///{(tmp_path / 'ws' / 'cftools.db').resolve()}"
    assert os.path.exists(ws.db_url.removeprefix("sqlite:///"))
    ws.close()


# ---------------------------------------------------------------- cftools.toml checked against its schema (issue 39)

@pytest.fixture(scope="module")
def checked_ws(tmp_path_factory):
    """One workspace whose cftools.toml each test rewrites (the default file is put back afterwards)."""
    ws = init_workspace(tmp_path_factory.mktemp("config") / "ws")
    ws.close()
    default = ws.config_path.read_text(encoding="utf-8")
    yield ws.root, default


@pytest.fixture
def with_config(checked_ws):
    root, default = checked_ws

    def write(extra: str = "", replace: tuple[str, str] | None = None):
        text = default.replace(*replace) if replace else default
        (root / "cftools.toml").write_text(text + extra, encoding="utf-8")
        return root

    yield write
    (root / "cftools.toml").write_text(default, encoding="utf-8")


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_the_default_config_passes_the_schema_without_a_warning(with_config, run_cli):
    result = run_cli("--workspace", with_config(), "status")
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.stderr


@pytest.mark.parametrize("extra, replace, key, expected", [
    # the case: a 43-line AttributeError traceback from the store URL before
    ("", ('url = "sqlite:///cftools.db"', "url = [1,2]"), "[store] url = [1, 2]", "expected a string"),
    ('\n[llm.prices."gpt-4o"]\ninput_per_mtok = -1\noutput_per_mtok = 1\n', None,
     "input_per_mtok = -1", "expected a number >= 0"),
    ("", ('backend = "local"', 'backend = "local"\ntimeout = "5"'), '[llm] timeout = "5"', "expected a number"),
    ("", ('token_env = "LABEL_STUDIO_API_KEY"', 'token_env = "LABEL_STUDIO_API_KEY"\nannotators = "a@b.org"'),
     '[label_studio] annotators = "a@b.org"', "expected a list of strings"),
    ("", ("\n[cfmm]\n", "\n[cfmm]\ntypes = [1]\n"), "[cfmm] types = [1]", "expected a string"),  # a kind's own section
    ('\n[label_studio.people."ann@example.org"]\nurl = 8080\n', None,
     '[label_studio.people."ann@example.org"] url = 8080', "expected a string"),
    ("", ('license = "CC-BY-4.0"', "license = true"), "[release] license = true", "expected a string"),
])
def test_a_value_of_the_wrong_type_is_one_line_naming_key_value_and_type(with_config, run_cli, extra, replace,
                                                                        key, expected):
    line = one_error_line(run_cli("--workspace", with_config(extra, replace), "status"))
    assert "cftools.toml" in line and key in line and expected in line, line


@pytest.mark.parametrize("extra, replace, warning", [
    ("", ('backend = "local"', 'backend = "local"\nmodle = "x"'), "unknown key [llm] modle (did you mean model?)"),
    ("\n[lmm]\nmodel = \"x\"\n", None, "unknown section [lmm] (did you mean [llm]?)"),
    ('\n[label_studio.people."ann@example.org"]\ntoken_envv = "ANN_TOKEN"\n', None,
     'unknown key [label_studio.people."ann@example.org"] token_envv (did you mean token_env?)'),
])
def test_an_unknown_key_is_a_warning_naming_the_closest_known_key(with_config, run_cli, extra, replace, warning):
    result = run_cli("--workspace", with_config(extra, replace), "status")
    assert result.exit_code == 0, result.output
    assert warning in result.stderr and "Warning: " in result.stderr


def test_label_studio_people_tables_are_accepted(with_config, run_cli):
    extra = ('\n[label_studio.people."ann@example.org"]\nurl = "http://127.0.0.1:8081"\ntoken_env = "ANN_TOKEN"\n')
    result = run_cli("--workspace", with_config(extra), "status")
    assert result.exit_code == 0 and "Warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("text, expected", [
    ("[store\nurl=", "not valid TOML"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),  # a RecursionError traceback before
    ("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "nested too deeply"),
])
def test_toml_the_parser_rejects_is_one_line(with_config, run_cli, text, expected):
    root = with_config()
    (root / "cftools.toml").write_text(text, encoding="utf-8")
    line = one_error_line(run_cli("--workspace", root, "status"))
    assert "cftools.toml" in line and expected in line, line


def test_a_byte_order_mark_in_cftools_toml_is_tolerated(with_config, run_cli):
    """Issue 45: a UTF-8 BOM (as some Windows editors save) gave "Invalid statement (at line 1, column 1)"."""
    root = with_config()
    text = (root / "cftools.toml").read_text(encoding="utf-8")
    (root / "cftools.toml").write_bytes("\ufeff".encode("utf-8") + text.encode("utf-8"))
    out = run_cli("--workspace", root, "status")
    assert out.exit_code == 0 and "Error" not in out.output, out.output


def read_only_runner() -> list[str] | None:
    """A prefix that runs a command without write access to files it owns: none needed for a normal user;
    root (whom file modes do not stop) runs it as an unprivileged user in a user namespace; None if neither works."""
    import shutil
    import subprocess

    if os.geteuid() != 0:
        return []
    prefix = ["unshare", "--user", "--map-user=1000"]
    if shutil.which("unshare") and subprocess.run(prefix + ["true"], capture_output=True).returncode == 0:
        return prefix
    return None


@pytest.mark.parametrize("what", ["store", "workspace"])
def test_a_read_only_store_or_workspace_is_named_as_such(tmp_path, what):
    import subprocess
    import sys

    prefix = read_only_runner()
    if prefix is None:
        pytest.skip("running as root without user namespaces: nothing can be made read-only to this process")
    ws = init_workspace(tmp_path / "ws")
    ws.close()
    (tmp_path / "a.csv").write_text("image,question,answer\nx.jpg,How many?,2\n", encoding="utf-8")
    target = ws.root / "cftools.db" if what == "store" else ws.root
    target.chmod(0o555 if what == "workspace" else 0o444)
    try:
        result = subprocess.run(prefix + [sys.executable, "-m", "cftools", "--workspace", str(ws.root), "ingest",
                                          "table", str(tmp_path / "a.csv")], capture_output=True, text=True)
    finally:
        target.chmod(0o755 if what == "workspace" else 0o644)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert "read-only" in lines[0] and "damaged" not in lines[0] and "backup" not in lines[0], lines[0]


def config_md_sections() -> list[list[str]]:
    """The sections docs/config.md documents, as key paths (`## [llm.prices."MODEL"]` -> ["llm", "prices", "MODEL"])."""
    import re
    import tomllib
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "config.md").read_text()
    return [list(tomllib.loads(f"[{h}]\n").keys()) + _inner(tomllib.loads(f"[{h}]\n"))
            for h in re.findall(r"^## \[(.+)\]$", text, re.M)]


def _inner(table: dict) -> list[str]:
    first = next(iter(table.values()))
    return [next(iter(first))] + _inner(first) if first else []


def test_init_writes_every_section_config_md_documents(tmp_path):
    """Every section is in the cftools.toml that init writes (issue 46: it had no [edits], though the docs configure
    the editor there): a table of its own, or, where its name is the person's own (a model, an email), a commented
    example of it."""
    import tomllib

    init_workspace(tmp_path / "ws").close()
    text = (tmp_path / "ws" / "cftools.toml").read_text()
    parsed = tomllib.loads(text)
    for path in config_md_sections():
        if any(part.isupper() for part in path):  # ["llm", "prices", "MODEL"]: named by the person
            assert f"# [{'.'.join(path[:-1])}." in text, path
        else:
            table = parsed
            for part in path:
                assert isinstance(table.get(part), dict), f"no [{'.'.join(path)}] in the cftools.toml init writes"
                table = table[part]


def test_init_shows_every_setting_and_sets_only_the_ones_it_always_did(tmp_path):
    """Each key of the schema is in the file, commented out where it was absent before (behaviour unchanged)."""
    import re
    import tomllib

    from cftools.config import ALIASES, known_sections

    init_workspace(tmp_path / "ws").close()
    text = (tmp_path / "ws" / "cftools.toml").read_text()
    other_spellings = {(name, other) for name, pairs in ALIASES.items() for _, other in pairs}
    # each key in its own section ([images] size was only under [edits], and a file-wide search took that for it)
    parts = re.split(r"^\[([a-z_]+)\]\s*$", text, flags=re.M)
    bodies = {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}
    missing = [f"[{name}] {key}" for name, model in known_sections().items() for key in model.model_fields
               if (name, key) not in other_spellings
               and not re.search(rf"^#?\s*(\[{name}\.\S*\s*)?{key}\b", bodies.get(name, ""), re.M)]
    assert not missing, f"not in the cftools.toml init writes: {missing}"
    set_keys = {(name, key) for name, table in tomllib.loads(text).items() for key in table}
    assert set_keys == {("store", "url"), ("llm", "backend"), ("llm", "model"), ("label_studio", "token_env"),
                        ("release", "license")}


@pytest.mark.parametrize("section, key, other", [("sources", "licence", "license"), ("edits", "licence", "license"),
                                                 ("release", "license", "licence")])
def test_licence_and_license_are_one_setting(tmp_path, section, key, other):
    """Either spelling is read (issue 46: the config key was `license`, the option `--licence`); both, differing, is
    one line naming both."""
    root = tmp_path / "ws"
    init_workspace(root).close()
    config = root / "cftools.toml"
    default = config.read_text().replace('license = "CC-BY-4.0"', "")
    config.write_text(default.replace(f"\n[{section}]\n", f'\n[{section}]\n{other} = "MIT"\n', 1))
    assert load_workspace(root).section(section)[key] == "MIT"
    config.write_text(default.replace(f"\n[{section}]\n", f'\n[{section}]\n{other} = "MIT"\n{key} = "0BSD"\n', 1))
    with pytest.raises(WorkspaceError, match=rf"\[{section}\] {key} and {other} are one setting.*differ"):
        load_workspace(root)
