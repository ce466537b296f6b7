"""Issue 24, generation: an images reply's pixels bounded, error text said once, --size checked before any work,
`image_failures` cleared by a retry that worked, a model reply carrying the key stored without it, and doctor on
generated image files no row points to."""

from __future__ import annotations

import json
import re

import pytest

from sqlalchemy import select

from cftools.imagegen.base import PairSettings
from cftools.imagegen.openai_backend import ImagesEndpoint, OpenAIImageBackend
from cftools.models import CachedResponse, Item
from test_imagegen import CAUSE, EFFECT, KEY, images_api, received, script, sleeps  # noqa: F401  (fixtures)
from test_mucr import context_stub, drawable_workspace  # noqa: F401  (fixture)


def image_backend(images_api, monkeypatch, **options) -> OpenAIImageBackend:  # noqa: ANN001, F811
    monkeypatch.setenv("MY_IMAGES_KEY", KEY)
    endpoint = ImagesEndpoint(base_url=f"{images_api}/v1", api_key_env="MY_IMAGES_KEY", timeout=5.0,
                              request_attempts=1, backoff_initial=0.01, **options)
    return OpenAIImageBackend(model="image-model-1", endpoint=endpoint)


def test_an_image_larger_than_max_pixels_is_a_failed_candidate_naming_its_size(images_api, monkeypatch):  # noqa: F811
    backend = image_backend(images_api, monkeypatch, max_pixels=64 * 64)
    try:
        script(images_api, [])
        results = backend.generate_pair(CAUSE, EFFECT, generator_key="p", settings=PairSettings(n=1, size="96x64"))
        assert not results[0].ok and "96x64 pixels, more than the 4096 allowed ([images] max_pixels)" in \
            results[0].reason
        script(images_api, [])
        assert backend.generate_pair(CAUSE, EFFECT, generator_key="p", settings=PairSettings(n=1, size="64x64"))[0].ok
    finally:
        backend.close()


def test_a_malformed_images_reply_is_said_once(images_api, monkeypatch):  # noqa: F811
    backend = image_backend(images_api, monkeypatch)
    try:
        script(images_api, ["no_data"])
        result = backend.generate_pair(CAUSE, EFFECT, generator_key="p", settings=PairSettings(n=1, size="64x64"))[0]
        assert not result.ok and result.reason.count("malformed images reply") == 1, result.reason
        assert "LLMError" not in result.reason
    finally:
        backend.close()


def configure_images_api(workspace, base: str) -> None:
    config = workspace.path("cftools.toml")
    config.write_text(config.read_text().replace(
        "[images]\n", f'[images]\nbackend = "openai"\nmodel = "image-model-1"\nbase_url = "{base}/v1"\n'
                      'api_key_env = "MY_IMAGES_KEY"\nrequest_attempts = 1\nbackoff_initial = 0.01\n', 1))


def test_bad_sizes_are_bad_usage_before_any_work(workspace, run_cli):
    for size in ("0x0", "abc", "65x65"):
        out = run_cli("generate", "images", "--size", size)
        assert out.exit_code == 2 and "--size" in out.output, (size, out.output)


def test_a_retry_that_works_clears_image_failures(workspace, run_cli, context_stub, images_api,  # noqa: F811
                                                  monkeypatch):
    monkeypatch.setenv("MY_IMAGES_KEY", KEY)
    drawable_workspace(workspace, run_cli, context_stub, limit=1)
    configure_images_api(workspace, images_api)
    args = ("generate", "images", "--per-prompt", "1", "--styles", "photograph", "--size", "64x64", "--json")
    script(images_api, ["500"])
    failed = run_cli(*args)
    assert failed.exit_code == 4, failed.output

    def failures() -> list:
        with workspace.store.session() as session:
            return [i.data.get("image_failures") for i in session.execute(select(Item)).scalars()
                    if i.data.get("context")]

    assert len(failures()[0]) == 1
    script(images_api, [])
    again = run_cli(*args)
    assert again.exit_code == 0, again.output
    assert failures() == [None]


def complete_with_key(monkeypatch, key: str, reply: str):  # noqa: ANN201
    """One completion from the loopback LLM stub answering REPLY, with KEY as the API key."""
    from cftools.llm import make_backend
    from llm_stub import StubServer

    monkeypatch.setenv("STUB_KEY", key)
    server = StubServer(delay=0.0, reply=lambda request, text: reply)
    server.start_in_thread()
    try:
        backend = make_backend({"backend": "openai", "model": "stub", "base_url": server.base_url,
                                "api_key_env": "STUB_KEY"})
        return backend.complete([{"role": "user", "content": "hi"}], {})
    finally:
        server.shutdown()
        server.server_close()


def test_a_reply_carrying_the_api_key_is_stored_without_it(workspace, monkeypatch):
    secret = "sk-stored-SECRET-0123456789"
    completion = complete_with_key(monkeypatch, secret, f"Sure. Your key is {secret}, New answer: 3")
    assert secret not in completion.text and completion.text == "Sure. Your key is ***, New answer: 3"


@pytest.mark.parametrize("folder, suffix", [("generated", ".png"), ("sources", ".jpg")])
def test_doctor_reports_and_removes_image_files_no_row_points_to(workspace, run_cli, folder, suffix):
    """Generated images and a Hugging Face dataset's images (`ingest hf`) alike."""
    folder = workspace.path("images", folder, "ab")
    folder.mkdir(parents=True)
    orphan = folder / ("ab" + "0" * 62 + suffix)
    orphan.write_bytes(b"\x89PNG not recorded")
    out = run_cli("doctor", "--json", "--offline")
    report = json.loads(out.output)
    assert out.exit_code == 1 and [p["code"] for p in report["problems"]] == ["image_orphan"]
    out = run_cli("doctor", "--json", "--offline", "--repair")
    assert out.exit_code == 0 and not orphan.exists()
    with workspace.store.session() as session:
        assert session.execute(select(CachedResponse)).first() is None
    assert re.search("removed", json.loads(out.output)["changes"][0])


def test_an_images_reply_past_max_reply_bytes_is_a_failed_candidate_not_retried(images_api, monkeypatch):  # noqa: F811
    backend = image_backend(images_api, monkeypatch, max_reply_bytes=300)
    backend.request_attempts = 3
    try:
        script(images_api, [])
        before = len(received(images_api))
        result = backend.generate_pair(CAUSE, EFFECT, generator_key="p", settings=PairSettings(n=1, size="96x64"))[0]
        assert not result.ok and "larger than max_reply_bytes = 300" in result.reason, result.reason
        assert len(received(images_api)) - before == 1  # the same request would get the same reply: asked once
    finally:
        backend.close()


def test_a_short_api_key_does_not_blank_letters_out_of_stored_replies(workspace, monkeypatch):
    """A one-character key ("x" for a local server) is no secret to keep: the stored reply keeps its letters
    ("six" stayed "si***"); an error text still scrubs it."""
    from cftools.errors import scrub_secrets

    completion = complete_with_key(monkeypatch, "x", "six boxes")
    assert completion.text == "six boxes"
    assert scrub_secrets("failed: six", ["x"]) == "failed: si***"
