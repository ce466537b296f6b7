"""`generate captions --from SEEDS`: a seeds file whose lines would silently lose a seed is refused before any call,
naming the file and the line (a group is named by its seed's first 60 letters and digits, and drafted once)."""

from __future__ import annotations

from sqlalchemy import func, select

from test_prompt_variants import configure

from cftools.models import Item

LONG = "a man is caught speeding on a long desert highway at noon in summer heat"


def test_two_seeds_that_make_one_group_are_refused_before_any_call(workspace, tmp_path, run_cli, stub):
    configure(workspace, stub.base_url)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(f"rain -> wet street\n{LONG} -> he is pulled over\n{LONG} -> he gets a fine\n")
    result = run_cli("generate", "captions", "--from", seeds, "--per-group", "1", "--quiet")
    # before: 3 selected, 2 written, 0 failed, exit 0: the third line's pairs were never drafted
    assert result.exit_code != 0
    assert f"{seeds}, line 3" in result.output and "as line 2" in result.output
    assert not stub.received
    with workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(Item)).scalar_one() == 0


def test_a_repeated_seed_line_is_refused_too(workspace, tmp_path, run_cli, stub):
    configure(workspace, stub.base_url)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("rain -> wet street\n\nRain -> wet street.\n")
    result = run_cli("generate", "captions", "--from", seeds, "--per-group", "1", "--quiet")
    assert result.exit_code != 0 and f"{seeds}, line 3" in result.output and "as line 1" in result.output
    assert not stub.received


def test_a_seed_drafted_from_one_file_is_not_drafted_again_from_another(workspace, tmp_path, run_cli, stub):
    configure(workspace, stub.base_url)
    first, second = tmp_path / "seeds.txt", tmp_path / "more-seeds.txt"
    first.write_text("rain -> wet street\n")
    second.write_text("rain -> wet street\nwind -> fallen leaves\n")
    assert run_cli("generate", "captions", "--from", first, "--per-group", "1", "--quiet").exit_code == 0
    result = run_cli("generate", "captions", "--from", second, "--per-group", "1", "--quiet", "--json")
    assert result.exit_code == 0, result.output
    # before: the rain seed was drafted again under the second file, its pairs joining the first file's group
    assert '"selected": 1' in result.output
    with workspace.store.session() as session:
        groups = session.execute(select(Item.group, func.count()).group_by(Item.group)).all()
    assert sorted(groups) == [("seed-rain-wet-street", 1), ("seed-wind-fallen-leaves", 1)]
