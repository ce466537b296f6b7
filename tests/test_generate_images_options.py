"""`generate images` with an images API (backend openai): the options only a diffusers pipeline takes (--steps,
--guidance, --consistency) are refused as bad usage before any work, not accepted and ignored."""

from __future__ import annotations

import pytest

from test_hardening_images import configure_images_api
from test_imagegen import KEY, images_api, script  # noqa: F401  (images_api: a fixture)
from test_mucr import context_stub, drawable_workspace  # noqa: F401  (context_stub: a fixture)


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


def test_a_partial_failure_is_counted_in_candidates(workspace, run_cli, context_stub, images_api,  # noqa: F811
                                                    monkeypatch):
    monkeypatch.setenv("MY_IMAGES_KEY", KEY)
    drawable_workspace(workspace, run_cli, context_stub, limit=1)
    configure_images_api(workspace, images_api)
    script(images_api, ["bad_base64"])  # the cause of candidate 0 is unreadable: that candidate fails
    result = run_cli("generate", "images", "--per-prompt", "2", "--styles", "photograph", "--size", "64x64")
    assert result.exit_code == 3, result.output
    # before: "1 of 3 image calls failed" (two images of the candidate made, plus the failed candidate)
    assert "1 of 2 candidates failed" in " ".join(result.output.split())
