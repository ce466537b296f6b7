"""Issue 46: every long step of a command shows a line on a terminal's stderr naming the step, its count (n/N) and
an ETA; --quiet and --json show none of it. Stderr is made a terminal by giving the command a forced-terminal
console (click's CliRunner hands it a pipe)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from sqlalchemy import select

from cftools.models import Item
from test_checks import add_item
from test_edits import cache_dir, items_ws  # noqa: F401 (fixtures: the edit model's cache, two C-VQA items)


@pytest.fixture
def terminal_stderr(monkeypatch):
    """What the commands draw on stderr, as a terminal would receive it."""
    buffer = io.StringIO()
    shown = Console(file=buffer, force_terminal=True, width=160, color_system=None, highlight=False)

    def install(*modules: str) -> io.StringIO:
        for module in modules:
            monkeypatch.setattr(f"{module}.err_console", shown)
        return buffer

    return install


def keys_of(store) -> list[str]:  # noqa: ANN001
    with store.session() as session:
        return list(session.execute(select(Item.key).order_by(Item.id)).scalars())


def two_drafts(store) -> None:  # noqa: ANN001
    add_item(store, "How many dogs would there be if 2 more dogs came?", "4")
    add_item(store, "How many dogs would there be if 2 more dogs came?", "5", image="b.jpg")


def test_check_shows_each_stage_with_its_count_and_eta_on_a_terminal(workspace, run_cli, terminal_stderr):
    two_drafts(workspace.store)
    drawn = terminal_stderr("cftools.commands.check")
    out = run_cli("check", "--no-embeddings")
    assert out.exit_code == 0, out.output
    assert "checking" in drawn.getvalue() and "2/2" in drawn.getvalue() and "eta" in drawn.getvalue()


@pytest.mark.parametrize("option", ["--quiet", "--json"])
def test_check_draws_no_progress_with_quiet_or_json(workspace, run_cli, terminal_stderr, option):
    two_drafts(workspace.store)
    drawn = terminal_stderr("cftools.commands.check")
    assert run_cli("check", "--no-embeddings", option).exit_code == 0
    assert "eta" not in drawn.getvalue() and "2/2" not in drawn.getvalue()


def test_after_waiving_every_flag_the_summary_counts_the_items_once(workspace, run_cli):
    store = workspace.store
    for n in range(3):
        add_item(store, f"How many dogs would there be if {n + 1} more dogs came?", "9", image=f"{n}.jpg")
    first = run_cli("check", "--no-embeddings")
    assert "0 moved to checked, 3 flagged (they stay draft)" in " ".join(first.output.split()), first.output
    for key in keys_of(store):
        waived = run_cli("flags", "waive", key, "arithmetic", "--reason", "counted again by hand")
        assert waived.exit_code == 0, waived.output
    again = run_cli("check", "--no-embeddings", "--recheck")
    assert again.exit_code == 0, again.output
    assert ("3 moved to checked (3 of them with every flag waived), 0 flagged (they stay draft)"
            in " ".join(again.output.split())), again.output


def test_export_shows_its_stages_with_counts_and_eta_on_a_terminal(workspace, run_cli, terminal_stderr):
    two_drafts(workspace.store)
    drawn = terminal_stderr("cftools.commands.export")
    out = run_cli("export", "shown", "--version", "1", "--licence", "CC0-1.0", "--include-unverified")
    assert out.exit_code == 0, out.output
    for stage in ("Writing records, Parquet and card", "Hashing files into the manifest",
                  "Writing browse.html and croissant.json"):
        assert stage in drawn.getvalue(), drawn.getvalue()
    assert "3/3" in drawn.getvalue() and "eta" in drawn.getvalue()


@pytest.mark.parametrize("option", ["--quiet", "--json"])
def test_export_draws_no_progress_with_quiet_or_json(workspace, run_cli, terminal_stderr, option):
    two_drafts(workspace.store)
    drawn = terminal_stderr("cftools.commands.export")
    out = run_cli("export", "quiet", "--version", "1", "--licence", "CC0-1.0", "--include-unverified", option)
    assert out.exit_code == 0, out.output
    assert "eta" not in drawn.getvalue() and "Hashing" not in drawn.getvalue()


def test_eval_shows_the_questions_with_count_and_eta_and_nothing_with_quiet(tiny_llava_dir, mixed_release, tmp_path,
                                                                            monkeypatch, run_cli, terminal_stderr):
    monkeypatch.delenv("CFTOOLS_WORKSPACE", raising=False)
    monkeypatch.chdir(tmp_path)
    drawn = terminal_stderr("cftools.commands.evaluate")
    args = ("eval", mixed_release, "--model", f"hf:{tiny_llava_dir}", "--device", "cpu", "--limit", "3")
    quiet = run_cli(*args, "--quiet")
    assert quiet.exit_code == 0, quiet.output
    assert "eta" not in drawn.getvalue() and "questions" not in drawn.getvalue()
    shown = run_cli(*args, "--out", tmp_path / "second")
    assert shown.exit_code == 0, shown.output
    assert "questions" in drawn.getvalue() and "eta" in drawn.getvalue(), drawn.getvalue()
    assert "6/6" in drawn.getvalue()  # 3 items, two questions each


def stubbed_edits_config(workspace, stub, cache_dir) -> None:  # noqa: ANN001
    config = workspace.path("cftools.toml")
    text = config.read_text().replace('backend = "local"', f'backend = "openai"\nbase_url = "{stub.base_url}"')
    config.write_text(text.replace('model = "smollm2-135m-instruct"', 'model = "stub"')
                      .replace("\n[edits]\n", f'\n[edits]\ncache_dir = "{cache_dir}"\n', 1))


def test_the_image_step_of_generate_edits_counts_candidate_images_with_eta(items_ws, stub, run_cli, cache_dir,
                                                                          terminal_stderr):
    stubbed_edits_config(items_ws, stub, cache_dir)
    drawn = terminal_stderr("cftools.commands.edits")
    quiet = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1", "--quiet", "--limit", "1")
    assert quiet.exit_code == 0, quiet.output
    assert drawn.getvalue() == ""
    shown = run_cli("generate", "edits", "--kind", "cvqa", "--per-item", "1")
    assert shown.exit_code == 0, shown.output
    lines = [line for line in drawn.getvalue().splitlines() if "edited images (candidates)" in line]
    assert lines and "2/2" in lines[-1] and "eta" in lines[-1], drawn.getvalue()  # the second item's two edits


def test_preflight_shows_its_stages_and_nothing_with_json(workspace, run_cli, terminal_stderr):
    two_drafts(workspace.store)
    out = run_cli("export", "pre", "--version", "1", "--licence", "CC0-1.0", "--include-unverified", "--json")
    assert out.exit_code == 0, out.output
    release = workspace.path("releases") / "pre-1"
    drawn = terminal_stderr("cftools.commands.preflight")
    as_json = run_cli("preflight", release, "--json")
    assert "eta" not in drawn.getvalue(), drawn.getvalue()
    run_cli("preflight", release)  # its exit code is the reviewer's checks' (a bare test release fails some)
    assert "Hashing and scanning every file" in drawn.getvalue() and "1/1" in drawn.getvalue()
    assert "eta" in drawn.getvalue() and as_json.output.startswith("{")


def cvqa_files(tmp_path):  # noqa: ANN001, ANN201
    from test_edits import ROWS, scene

    images = tmp_path / "images"
    images.mkdir()
    scene(3).save(images / "a.png")
    scene(1).save(images / "b.png")
    csv = tmp_path / "cvqa.csv"
    csv.write_text("img_path,query,answer,new query,new answer,type\n"
                   + "".join(",".join(row) + "\n" for row in ROWS), encoding="utf-8")
    return csv, images


@pytest.mark.parametrize("option", [None, "--quiet", "--json"])
def test_ingest_shows_the_images_read_with_count_and_eta_unless_quiet_or_json(workspace, run_cli, terminal_stderr,
                                                                              tmp_path, option):
    csv, images = cvqa_files(tmp_path)
    drawn = terminal_stderr("cftools.commands.ingest")
    out = run_cli("ingest", "cvqa", csv, "--images", images, "--licence", "CC0-1.0", *([option] if option else []))
    assert out.exit_code == 0, out.output
    if option is None:
        assert "reading images" in drawn.getvalue() and "2/2" in drawn.getvalue() and "eta" in drawn.getvalue()
    else:
        assert drawn.getvalue() == ""


def test_the_llm_requests_bar_shows_an_eta_beside_its_fields():
    from cftools.llm.runner import progress_bar

    buffer = io.StringIO()
    with progress_bar(Console(file=buffer, force_terminal=True, width=200, color_system=None)) as bar:
        task = bar.add_task("requests", total=10, done=0, failed=0, cached=0, rate=0.0)
        bar.update(task, advance=4, done=4)
        bar.refresh()
    assert "4/10" in buffer.getvalue() and "eta" in buffer.getvalue() and "cached 0" in buffer.getvalue()
