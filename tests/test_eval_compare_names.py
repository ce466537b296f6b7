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
