"""`cftools generate ...`: the group; each kind adds its generators' commands (`Kind.commands`)."""

from __future__ import annotations

import click


@click.group()
def generate() -> None:
    """Generate counterfactual items with an LLM (the embedded offline model by default) or an image model."""
