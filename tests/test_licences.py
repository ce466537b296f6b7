"""Licence per source (issue 15): each ingest records its dataset's licence (flag, config, else unknown); the
release card and manifest list the licences of the sources in the release; export will not stamp the
workspace's licence over sources under other or unknown licences unless --licence is given."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select, text

from cftools.models import DatasetLicence, IngestRun, Item, Release
from cftools.release.layout import load_manifest
from cftools.store import make_engine, upgrade
from cftools.workspace import init_workspace, load_workspace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def table(folder: Path, name: str, rows: int = 2) -> Path:
    path = folder / f"{name}.csv"
    path.write_text("image,question,answer\n" + "".join(f"{name}{i}.jpg,How many {name} cups are there on shelf {i}?,"
                                                        f"{i + 1}\n" for i in range(rows)))
    return path


def licences(workspace) -> dict[str, str]:
    with workspace.store.session() as session:
        return dict(session.execute(select(DatasetLicence.dataset, DatasetLicence.licence)).all())


def set_sources(workspace, settings: str) -> None:
    """SETTINGS under the [sources] table of the workspace's cftools.toml (its template has one, empty)."""
    config = workspace.root / "cftools.toml"
    config.write_text(config.read_text().replace("[sources]\n", "[sources]\n" + settings, 1))


def test_every_ingest_records_its_licence_from_the_flag_the_config_or_unknown(workspace, run_cli, tmp_path):
    out = run_cli("ingest", "table", table(tmp_path, "a"), "--licence", "CC0-1.0", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["licence"] == "CC0-1.0"
    plain = run_cli("ingest", "table", table(tmp_path, "b"))
    assert plain.exit_code == 0 and "licence: unknown" in plain.output
    # a re-ingest that states no licence keeps the one the store has
    assert run_cli("ingest", "table", tmp_path / "a.csv").exit_code == 0
    assert run_cli("ingest", "vqav2", "--questions", EXAMPLES / "vqav2" / "questions.json", "--annotations",
                   EXAMPLES / "vqav2" / "annotations.json", "--licence", "CC0-1.0").exit_code == 0
    assert run_cli("ingest", "cvqa", EXAMPLES / "cvqa" / "drawn-shapes.csv", "--licence", "CC0-1.0").exit_code == 0
    assert run_cli("ingest", "captions", EXAMPLES / "mucr" / "captions.csv", "--licence", "CC0-1.0").exit_code == 0
    # the configuration: a dataset's own entry, else the [sources] default
    set_sources(workspace, 'licence = "CC-BY-4.0"\nlicences = {"table:c" = "MIT"}\n')
    assert run_cli("ingest", "table", table(tmp_path, "c")).exit_code == 0
    assert run_cli("ingest", "table", table(tmp_path, "d")).exit_code == 0
    assert run_cli("ingest", "table", table(tmp_path, "e"), "--licence", "Apache-2.0").exit_code == 0
    assert licences(workspace) == {
        "table:a": "CC0-1.0", "table:b": "unknown", "vqav2:val2014": "CC0-1.0", "cvqa:drawn-shapes": "CC0-1.0",
        "captions:captions": "CC0-1.0", "table:c": "MIT", "table:d": "CC-BY-4.0", "table:e": "Apache-2.0"}
    with workspace.store.session() as session:
        runs = session.execute(select(IngestRun.dataset, IngestRun.licence).order_by(IngestRun.id)).all()
        caption_datasets = set(session.execute(select(Item.dataset).where(Item.kind == "mucr")).scalars())
    assert runs[:3] == [("table:a", "CC0-1.0"), ("table:b", "unknown"), ("table:a", "CC0-1.0")]
    assert caption_datasets == {"captions:captions"}  # caption pairs have no source question: the item says


def test_a_licence_of_two_lines_is_refused_and_the_store_is_unchanged(workspace, run_cli, tmp_path):
    out = run_cli("ingest", "table", table(tmp_path, "a"), "--licence", "CC0-1.0\nplus")
    assert out.exit_code == 1 and "one line" in out.output
    assert licences(workspace) == {}
    with workspace.store.session() as session:
        assert session.execute(select(Item)).first() is None
        assert session.execute(select(IngestRun)).first() is None


def cvqa_and_captions(run_cli, cvqa_licence: str | None = None) -> None:
    flag = ["--licence", cvqa_licence] if cvqa_licence else []
    assert run_cli("ingest", "cvqa", EXAMPLES / "cvqa" / "drawn-shapes.csv", *flag).exit_code == 0
    assert run_cli("ingest", "captions", EXAMPLES / "mucr" / "captions.csv", "--licence", "CC-BY-4.0").exit_code == 0


def test_export_refuses_to_stamp_the_workspace_licence_over_other_or_unknown_sources(workspace, run_cli):
    cvqa_and_captions(run_cli)
    refused = run_cli("export", "ex", "--version", "1", "--include-unverified")
    assert refused.exit_code == 1
    message = " ".join(refused.output.split())
    assert "will not stamp the licence CC-BY-4.0" in message and "cvqa:drawn-shapes (unknown)" in message
    assert "captions:captions" not in message and "--licence" in message
    assert not (workspace.root / "releases" / "ex-1").exists()
    with workspace.store.session() as session:
        assert session.execute(select(Release)).first() is None
    # once every source is under the workspace's licence (case aside), it is stamped without --licence
    cvqa_and_captions(run_cli, "cc-by-4.0")
    out = run_cli("export", "ex", "--version", "1", "--include-unverified")
    assert out.exit_code == 0, out.output
    release = workspace.root / "releases" / "ex-1"
    manifest = load_manifest(release)
    assert manifest["license"] == "CC-BY-4.0"
    assert manifest["source_licences"] == {"captions:captions": "CC-BY-4.0", "cvqa:drawn-shapes": "cc-by-4.0"}
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "from the `[release] license` setting" in card


def test_an_explicit_licence_is_stamped_and_the_card_lists_every_source_licence(workspace, run_cli):
    cvqa_and_captions(run_cli)
    out = run_cli("export", "ex", "--version", "1", "--include-unverified", "--licence", "other")
    assert out.exit_code == 0, out.output
    release = workspace.root / "releases" / "ex-1"
    manifest = load_manifest(release)
    assert manifest["license"] == "other"
    assert manifest["source_licences"] == {"captions:captions": "CC-BY-4.0", "cvqa:drawn-shapes": "unknown"}
    datasets = {p["dataset"] for p in manifest["provenance"].values()}
    assert datasets == {"captions:captions", "cvqa:drawn-shapes"}
    card = (release / "README.md").read_text(encoding="utf-8")
    assert "license: other" in card and "given with `cftools export --licence`" in card
    assert "| `captions:captions` | CC-BY-4.0 | 8 |" in card
    assert "| `cvqa:drawn-shapes` | unknown | 6 |" in card


def test_a_release_read_back_brings_its_sources_licences(workspace, run_cli, tmp_path):
    cvqa_and_captions(run_cli)
    assert run_cli("export", "ex", "--version", "1", "--include-unverified", "--licence", "other").exit_code == 0
    other = init_workspace(tmp_path / "other")
    try:
        out = run_cli("--workspace", other.root, "ingest", "release", workspace.root / "releases" / "ex-1")
        assert out.exit_code == 0, out.output
        assert licences(other) == {"captions:captions": "CC-BY-4.0", "cvqa:drawn-shapes": "unknown"}
        with other.store.session() as session:
            assert set(session.execute(select(Item.dataset).where(Item.kind == "mucr")).scalars()) == {
                "captions:captions"}
        # a re-export lists the same licences, and is refused the same way without --licence
        refused = run_cli("--workspace", other.root, "export", "ex", "--version", "2", "--include-unverified")
        assert refused.exit_code == 1 and "cvqa:drawn-shapes (unknown)" in " ".join(refused.output.split())
        again = run_cli("--workspace", other.root, "export", "ex", "--version", "2", "--include-unverified",
                        "--licence", "other")
        assert again.exit_code == 0, again.output
        assert load_manifest(other.root / "releases" / "ex-2")["source_licences"] == {
            "captions:captions": "CC-BY-4.0", "cvqa:drawn-shapes": "unknown"}
    finally:
        other.close()


def test_a_store_from_before_licences_is_upgraded_and_its_sources_are_unknown(tmp_path, run_cli, monkeypatch):
    ws = init_workspace(tmp_path / "ws")
    url = ws.db_url
    ws.close()
    (tmp_path / "ws" / "cftools.db").unlink()
    engine = make_engine(url)
    upgrade(engine, "0003")
    with engine.begin() as conn:
        conn.execute(text("insert into source_questions (dataset, external_id, image_ref, question, answer,"
                          " created_at) values ('old', '1', 'a.jpg', 'How many cats?', '2', '2025-01-01 00:00:00')"))
        conn.execute(text("insert into items (key, kind, \"group\", source_id, question, answer, status, origin,"
                          " created_at, updated_at) values ('old:1', 'cvqa', 'numerical-direct', 1,"
                          " 'How many cats would there be if one left?', '1', 'draft', 'ingested',"
                          " '2025-01-01 00:00:00', '2025-01-01 00:00:00')"))
    engine.dispose()
    reopened = load_workspace(tmp_path / "ws")
    reopened.close()
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(tmp_path / "ws"))
    refused = run_cli("export", "ex", "--version", "1", "--include-unverified")
    assert refused.exit_code == 1 and "old (unknown)" in refused.output
    assert run_cli("ingest", "table", table(tmp_path, "new"), "--licence", "MIT").exit_code == 0
    out = run_cli("export", "ex", "--version", "1", "--include-unverified", "--licence", "other")
    assert out.exit_code == 0, out.output
    assert load_manifest(tmp_path / "ws" / "releases" / "ex-1")["source_licences"] == {"old": "unknown"}


def test_every_ingest_command_takes_a_licence():
    """The kinds' own ingests (cvqa, captions, cfmm, ...) record a licence like the shared ones."""
    from cftools.cli import lazy_command

    ingest = lazy_command("ingest")
    missing = [name for name, command in ingest.commands.items()
               if "--licence" not in {opt for param in command.params for opt in getattr(param, "opts", [])}]
    assert missing == []


def test_license_is_licence_spelled_the_other_way_on_every_command_and_in_the_config(workspace, run_cli, tmp_path):
    """Issue 46: the option was `--licence`, the config key `license`; each is accepted in both spellings."""
    from test_docs import COMMANDS, long_options  # every command of the CLI, with its long options

    with_licence = [" ".join(path) for path, command in COMMANDS if "--licence" in long_options(command)]
    assert {"cftools ingest vqav2", "cftools export", "cftools generate edits", "cftools ingest edits"} <= set(
        with_licence)
    assert all("--license" in long_options(command) for path, command in COMMANDS if "--licence" in long_options(command))
    out = run_cli("ingest", "table", table(tmp_path, "a"), "--license", "CC0-1.0", "--json")
    assert out.exit_code == 0, out.output
    set_sources(workspace, 'license = "MIT"\nlicenses = {"table:c" = "Apache-2.0"}\n')
    assert run_cli("ingest", "table", table(tmp_path, "b")).exit_code == 0
    assert run_cli("ingest", "table", table(tmp_path, "c")).exit_code == 0
    assert licences(workspace) == {"table:a": "CC0-1.0", "table:b": "MIT", "table:c": "Apache-2.0"}
