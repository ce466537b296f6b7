"""`eval compare` names a model given as a local folder by its name, as the run reports do."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from cftools.evaluate.report import compare_table


def test_the_compare_table_names_a_local_model_by_its_folder():
    """Before: its title read `A: hf:/home/jdoe/models/qwen2-vl (generate)`."""
    a = SimpleNamespace(config={"model": "hf:/home/jdoe/models/qwen2-vl", "mode": "generate"}, summary={})
    b = SimpleNamespace(config={"model": "openai:gpt-4o", "mode": "generate"}, summary={})
    console = Console(width=200, record=True)
    console.print(compare_table(a, b))
    text = console.export_text()
    assert "/home/" not in text and "A: hf:qwen2-vl (generate)" in text and "B: openai:gpt-4o" in text


def test_the_compare_table_shows_exp_and_its_parts_on_their_0_to_10_scale():
    """Before: Exp's parts S1-S3 (0-10) were multiplied by 100 as if fractions: S1 6 read 600.0."""
    from cftools.kinds import get_kind

    def run(parts: dict[str, float], model: str) -> SimpleNamespace:
        outcome = {"id": "m", "kind": "mucr", "group": "g", "exp": {"parts": parts, "aggregate": "mean"}}
        return SimpleNamespace(config={"model": model, "mode": "generate"},
                               summary={"mucr": get_kind("mucr").hooks.evaluate.summarize([outcome])})

    a, b = run({"S1": 6, "S2": 4, "S3": 2}, "openai:a"), run({"S1": 8, "S2": 4, "S3": 3}, "openai:b")
    console = Console(width=200, record=True)
    console.print(compare_table(a, b))
    rows = {line.split("│")[3].strip(): [cell.strip() for cell in line.split("│")[4:7]]
            for line in console.export_text().splitlines() if line.count("│") >= 7}
    assert rows["exp_s1"] == ["6.0", "8.0", "+2.0"] and rows["exp_s3"] == ["2.0", "3.0", "+1.0"]
    assert rows["exp"] == ["3.5", "4.5", "+1.0"]  # 0.25·6 + 0.25·4 + 0.5·2 against 0.25·8 + 0.25·4 + 0.5·3
