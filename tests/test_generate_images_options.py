"""`generate images` with an images API (backend openai): the options only a diffusers pipeline takes (--steps,
--guidance, --consistency) are refused as bad usage before any work, not accepted and ignored."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("option", [("--steps", "20"), ("--guidance", "7.5"), ("--consistency", "img2img")])
def test_an_images_api_refuses_what_only_a_pipeline_takes(workspace, run_cli, option, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    result = run_cli("generate", "images", "--backend", "openai", "--model", "gpt-image-1", *option)
    assert result.exit_code == 2, result.output  # before: 0, the option dropped without a word
    assert option[0] in result.output and "images API" in result.output


def test_the_configured_backend_counts_and_the_api_runs_without_them(workspace, run_cli, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    config = workspace.path("cftools.toml")
    config.write_text(config.read_text().replace("[images]\n", '[images]\nbackend = "openai"\nmodel = "m"\n', 1))
    assert run_cli("generate", "images", "--steps", "20").exit_code == 2  # the configured backend counts too
    result = run_cli("generate", "images", "--quiet")
    assert result.exit_code == 0, result.output  # nothing to make: no pairs with descriptions
