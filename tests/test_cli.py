import click
from sqlalchemy import insert

from cftools.cli import main
from cftools.models import Item, utcnow


def all_commands(group: click.Group, prefix=()):
    """Every command below GROUP, the lazily imported ones included (list_commands/get_command, not .commands)."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield prefix + (name,), command
        if isinstance(command, click.Group):
            yield from all_commands(command, prefix + (name,))


def test_every_command_has_help_text(run_cli):
    commands = list(all_commands(main))
    assert len(commands) >= 6
    for path, command in commands:
        assert (command.help or "").strip(), f"cftools {' '.join(path)} has no help text"
        result = run_cli(*path, "--help")
        assert result.exit_code == 0, path
        assert "Usage:" in result.output
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"cftools {' '.join(path)} {param.opts[0]} has no help"


def test_top_level_help_lists_the_flow(run_cli):
    result = run_cli("--help")
    assert result.exit_code == 0
    for name in ("init", "ingest", "status", "show"):
        assert name in result.output


def test_status_json_has_the_documented_fields(workspace, peer_cvqa_real, run_cli):
    import json

    run_cli("ingest", "cvqa", peer_cvqa_real)
    out = json.loads(run_cli("status", "--json").output)
    assert out["items"] == 300 and out["sources"] == 300 and out["images"] == 0
    assert out["by_status"] == {"draft": 300}
    assert sum(out["by_group"].values()) == 300
    assert out["by_source"] == {"cvqa:C-VQA-Real_questions": 300}


def test_show_prints_item_source_and_history(workspace, peer_cvqa_real, run_cli):
    run_cli("ingest", "cvqa", peer_cvqa_real)
    result = run_cli("show", "1")
    assert result.exit_code == 0
    assert "How many hydrants would there be if 2 more hydrants were added?" in result.output
    assert "COCO_val2014_000000405675.jpg" in result.output and "ingest" in result.output
    assert run_cli("show", "99999").exit_code != 0


def test_show_prints_text_with_brackets_literally(workspace, run_cli, tmp_path):
    table = tmp_path / "bracket.jsonl"
    table.write_text('{"image": "[a].jpg", "question": "What does the sign [left] say?", "answer": "[stop]"}\n')
    assert run_cli("ingest", "table", table).exit_code == 0
    with workspace.store.write() as session:
        session.execute(insert(Item.__table__), [{
            "key": "t:1", "kind": "cvqa", "group": "boolean", "source_id": 1, "question": "Would [bold]it[/] say go?",
            "answer": "[yes]", "status": "draft", "origin": "ingested", "created_at": utcnow(), "updated_at": utcnow()}])
    result = run_cli("show", "1")
    assert result.exit_code == 0
    output = " ".join(result.output.split())  # unwrapped
    assert "Would [bold]it[/] say go?" in output and "answer: [yes]" in output
    assert "What does the sign [left] say? -> [stop]" in output and "[a].jpg" in output


def test_every_command_help_lists_its_options(run_cli):
    """Walk the whole CLI: each command's --help names every one of its options (and `eval`, whose default
    subcommand is `run`, names run's options too)."""
    checked = 0
    for path, command in [((), main), *all_commands(main)]:
        output = run_cli(*path, "--help").output
        params = list(command.params)
        if isinstance(command, click.Group) and getattr(command, "default_command", None):
            params += command.commands[command.default_command].params
        for param in params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[0] in output, f"cftools {' '.join(path)} --help does not list {param.opts[0]}"
                checked += 1
    assert checked > 40


def test_eval_help_shows_the_run_options(run_cli):
    output = run_cli("eval", "--help").output
    for option in ("--model", "--mode", "--score", "--batch-size", "--out", "--template", "--judge"):
        assert option in output
    assert "compare" in output


def test_cftools_help_lists_each_lazy_command_with_its_own_help_line():
    """`cftools --help` shows the stages' commands without importing them (cftools.cli.LAZY_COMMANDS): each line
    must be the command's own."""
    from cftools.cli import LAZY_COMMANDS, lazy_command

    for name, (_, short_help) in LAZY_COMMANDS.items():
        assert lazy_command(name).get_short_help_str(10**6) == short_help, name


def test_cftools_help_imports_no_stage_library():
    """Issue 39: `cftools --help` starts fast because it loads neither the store's libraries nor numpy, the HTTP
    clients, the model libraries or the kinds (bench/bench_startup.py measures the time)."""
    import subprocess
    import sys

    probe = ("import sys; from cftools.cli import main\n"
             "try:\n    main(['--help'], prog_name='cftools')\nexcept SystemExit:\n    pass\n"
             "heavy = ('sqlalchemy', 'sqlmodel', 'alembic', 'numpy', 'torch', 'transformers', 'httpx', 'openai', "
             "'PIL', 'pandas', 'label_studio_sdk', 'pydantic', 'cftools.kinds')\n"
             "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stderr.strip().splitlines()[-1] == "[]", result.stderr
