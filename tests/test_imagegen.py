"""Candidate images: tiny diffusers pipelines built from configs, the Images API on a loopback server, the checks."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import httpx
import numpy as np
import PIL.Image
import os

import pytest

if os.environ.get("CI") != "true":  # in CI a missing images extra is a failure, never a skip
    pytest.importorskip("diffusers")
    pytest.importorskip("imagehash")

from cftools.imagegen import (  # noqa: E402
    BLANK_IMAGE, DUPLICATE_CANDIDATE, PAIR_INCONSISTENT, CandidateFailure, CandidatePair, ClipScorer, ImageGenError,
    check_candidates, load_style, make_image_backend,
)
from cftools.imagegen import tiny  # noqa: E402
from cftools.imagegen.checks import blank_image, duplicate_candidates, pair_inconsistent  # noqa: E402
from cftools.imagegen.base import PairSettings  # noqa: E402
from cftools.imagegen.diffusers_backend import DiffusersBackend, DiffusersSettings  # noqa: E402
from cftools.imagegen.openai_backend import ImagesEndpoint, OpenAIImageBackend  # noqa: E402
from loopback import running_server

CAUSE = "a man in a red coat looks at his phone while driving a grey car on a sunny road"
EFFECT = "the same man in the red coat, worried, stopped by a police officer beside the grey car"
KEY = "sk-test-SECRET-0123456789abcdef"
SERVER = Path(__file__).parent / "images_api_server.py"


def pixels(image: PIL.Image.Image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


# ------------------------------------------------------------------ tiny pipelines built from configs


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """The embedded tiny pipeline, built from configs in code and saved as a pipeline folder."""
    return tiny.embedded_pipeline_folder(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def tiny_backend(tiny_folder) -> DiffusersBackend:
    return DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=tiny.TINY_STEPS,
                                                           default_guidance=tiny.TINY_GUIDANCE))


def test_embedded_pipeline_is_a_saved_folder_reused_on_the_next_call(tiny_folder):
    assert (tiny_folder / "model_index.json").is_file()
    stamp = (tiny_folder / "model_index.json").stat().st_mtime_ns
    assert tiny.embedded_pipeline_folder(tiny_folder.parent) == tiny_folder
    assert (tiny_folder / "model_index.json").stat().st_mtime_ns == stamp  # not rebuilt
    assert not [p for p in tiny_folder.parent.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_text2img_makes_n_pairs_at_64px_with_full_provenance(tiny_backend, tiny_folder):
    results = tiny_backend.generate_pair(CAUSE, EFFECT, style="photograph", generator_key="pair-1",
                                         settings=PairSettings(n=3, seed=7))
    assert [r.k for r in results] == [0, 1, 2] and all(isinstance(r, CandidatePair) for r in results)
    first = results[0]
    assert first.cause.size == (64, 64) and first.cause.mode == "RGB"
    prov = first.effect_provenance.as_dict()
    assert prov["backend"] == "diffusers" and prov["model"] == str(tiny_folder)
    assert prov["revision"] == hashlib.sha256((tiny_folder / "model_index.json").read_bytes()).hexdigest()
    assert prov["prompt"].startswith(EFFECT) and "photograph" in prov["prompt"]
    assert prov["negative_prompt"] == load_style("photograph").negative(EFFECT)
    assert (prov["steps"], prov["guidance"], prov["size"]) == (4, 5.0, "64x64")
    assert (prov["scheduler"], prov["consistency"], prov["device"], prov["dtype"]) == (
        "DDIMScheduler", "seed", "cpu", "float32")
    assert prov["seed"] == first.cause_provenance.seed and prov["seconds"] > 0
    assert (prov["style"], prov["candidate"], prov["side"]) == ("photograph", 0, "effect")
    json.dumps(prov)  # storable as it is


def test_siamese_same_description_gives_identical_cause_and_effect_for_each_k(tiny_backend):
    results = tiny_backend.generate_pair(CAUSE, CAUSE, style="comic", generator_key="pair-2",
                                         settings=PairSettings(n=4))
    for r in results:
        assert np.array_equal(pixels(r.cause), pixels(r.effect)), f"candidate {r.k}"
    # ...while the candidates themselves differ from each other
    assert not np.array_equal(pixels(results[0].cause), pixels(results[1].cause))


def test_cause_k_does_not_depend_on_the_effect_description(tiny_backend):
    same = tiny_backend.generate_pair(CAUSE, CAUSE, generator_key="pair-3", settings=PairSettings(n=2))
    differ = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key="pair-3", settings=PairSettings(n=2))
    for a, b in zip(same, differ):
        assert np.array_equal(pixels(a.cause), pixels(b.cause))
        assert not np.array_equal(pixels(b.cause), pixels(b.effect))  # the effect text does change the effect


def test_seeds_are_reproducible_across_loads_and_change_with_key_seed_and_style(tiny_backend, tiny_folder):
    reloaded = DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=4, default_guidance=5.0))
    a = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key="pair-4", settings=PairSettings(n=2, seed=3))
    b = reloaded.generate_pair(CAUSE, EFFECT, generator_key="pair-4", settings=PairSettings(n=2, seed=3))
    for x, y in zip(a, b):
        assert np.array_equal(pixels(x.cause), pixels(y.cause)) and np.array_equal(pixels(x.effect), pixels(y.effect))
        assert x.cause_provenance.seed == y.cause_provenance.seed
    for changed in ({"seed": 4, "generator_key": "pair-4"}, {"seed": 3, "generator_key": "pair-5"}):
        other = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key=changed["generator_key"],
                                           settings=PairSettings(n=1, seed=changed["seed"]))
        assert not np.array_equal(pixels(other[0].cause), pixels(a[0].cause)), changed
    styled = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key="pair-4", style="comic",
                                        settings=PairSettings(n=1, seed=3))
    assert styled[0].cause_provenance.seed != a[0].cause_provenance.seed


def test_a_resumed_run_redraws_only_the_missing_candidates_identically(tiny_backend):
    full = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key="pair-6", settings=PairSettings(n=4))
    missing = tiny_backend.generate_pair(CAUSE, EFFECT, generator_key="pair-6",
                                         settings=PairSettings(n=4, candidates=(3, 1)))
    assert [r.k for r in missing] == [1, 3]
    for r in missing:
        # batch size and position do not change a candidate beyond float noise (at most one grey level)
        assert np.abs(pixels(r.cause) - pixels(full[r.k].cause)).max() <= 1
        assert r.cause_provenance.seed == full[r.k].cause_provenance.seed


def test_img2img_consistency_makes_effect_k_from_cause_k(tiny_folder):
    backend = DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=4, default_guidance=5.0,
                                                              consistency="img2img", strength=0.5))
    results = backend.generate_pair(CAUSE, EFFECT, generator_key="pair-7", settings=PairSettings(n=2))
    plain = DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=4, default_guidance=5.0)).generate_pair(
        CAUSE, EFFECT, generator_key="pair-7", settings=PairSettings(n=2))
    for r, p in zip(results, plain):
        assert np.array_equal(pixels(r.cause), pixels(p.cause))  # the cause is the same text-to-image draw
        assert r.effect.size == (64, 64) and not np.array_equal(pixels(r.effect), pixels(r.cause))
        assert (r.effect_provenance.consistency, r.effect_provenance.strength) == ("img2img", 0.5)
        assert r.cause_provenance.strength is None
    again = backend.generate_pair(CAUSE, EFFECT, generator_key="pair-7", settings=PairSettings(n=2))
    assert np.array_equal(pixels(again[1].effect), pixels(results[1].effect))
    assert type(tiny.tiny_img2img_pipeline(tiny_folder)).__name__ == "StableDiffusionImg2ImgPipeline"


def test_a_nan_image_is_a_recorded_failure_and_not_an_exception(tiny_folder):
    backend = DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=2, default_guidance=5.0))
    backend._pipe.vae.decoder.conv_out.bias.data.fill_(float("nan"))  # a broken VAE decodes NaN pixels
    results = backend.generate_pair(CAUSE, EFFECT, generator_key="pair-8", settings=PairSettings(n=2))
    assert [type(r) for r in results] == [CandidateFailure, CandidateFailure]
    assert results[0].side == "cause" and "NaN" in results[0].reason and results[0].as_dict()["k"] == 0


def test_a_failed_pipeline_call_fails_the_pair_and_the_run_goes_on(tiny_folder, monkeypatch):
    backend = DiffusersBackend(tiny_folder, DiffusersSettings(default_steps=2, default_guidance=5.0))

    def out_of_memory(*args, **kwargs):  # what a too-small GPU does mid-batch
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(backend.pipeline.unet, "forward", out_of_memory)
    results = backend.generate_pair(CAUSE, EFFECT, generator_key="pair-9", settings=PairSettings(n=2))
    assert [(r.k, r.side, r.ok) for r in results] == [(0, "pair", False), (1, "pair", False)]
    assert results[0].reason == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    monkeypatch.undo()
    assert all(r.ok for r in backend.generate_pair(CAUSE, EFFECT, generator_key="pair-9", settings=PairSettings(n=1)))
    with pytest.raises(ImageGenError, match="60x60 is not a multiple of the pipeline's 8-pixel"):
        backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=1, size="60x60"))


def test_a_folder_that_is_not_a_pipeline_gets_a_one_line_error_naming_it(tmp_path):
    empty = tmp_path / "not-a-pipeline"
    empty.mkdir()
    with pytest.raises(ImageGenError) as err:
        DiffusersBackend(empty)
    assert str(empty) in str(err.value) and "not a diffusers pipeline" in str(err.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline", "unet": ["diffusers", "X"]}')
    with pytest.raises(ImageGenError) as err:
        DiffusersBackend(broken)
    assert str(broken) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ImageGenError, match="downloads are off"):
        make_image_backend({"backend": "diffusers", "model": "someone/some-model"})


def test_unknown_and_user_styles(tmp_path):
    with pytest.raises(ImageGenError, match="unknown style 'oil'"):
        load_style("oil")
    (tmp_path / "oil.j2").write_text("{% macro prompt(d) %}{{ d }}, oil painting{% endmacro %}"
                                     "{% macro negative(d) %}photo{% endmacro %}")
    style = load_style("oil", tmp_path)
    assert (style.prompt("a cat"), style.negative("a cat")) == ("a cat, oil painting", "photo")


def test_make_image_backend_defaults_to_the_embedded_pipeline(tmp_path):
    backend = make_image_backend({"cache_dir": str(tmp_path)})
    assert backend.model == str(tmp_path / tiny.TINY_NAME)
    assert (backend.default_steps, backend.default_size) == (tiny.TINY_STEPS, (64, 64))
    assert backend.tokenizer.model_max_length == 77
    with pytest.raises(ImageGenError, match="api_key is not read"):
        make_image_backend({"api_key": KEY})
    with pytest.raises(ImageGenError, match="needs a model"):
        make_image_backend({"backend": "openai"})
    with pytest.raises(ImageGenError, match="unknown image backend 'dalle'"):
        make_image_backend(backend="dalle")


# ------------------------------------------------------------------ the Images API on a loopback server


@pytest.fixture(scope="module")
def images_api():
    """A real HTTP server process speaking the Images API on a free loopback port; yields its base URL."""
    with running_server(SERVER.name, "--port", "0") as url:
        yield url


def script(base: str, replies: list[str], **options) -> None:
    httpx.post(f"{base}/control/script", json={"replies": replies, **options}).raise_for_status()


def received(base: str) -> list[dict]:
    return httpx.get(f"{base}/control/requests").json()["requests"]


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def api_backend(images_api, monkeypatch, sleeps):
    monkeypatch.setenv("MY_IMAGES_KEY", KEY)
    endpoint = ImagesEndpoint(base_url=f"{images_api}/v1", api_key_env="MY_IMAGES_KEY", timeout=5.0,
                              request_attempts=3, backoff_initial=0.01)
    backend = OpenAIImageBackend(model="image-model-1", endpoint=endpoint, sleep=sleeps.append)
    yield backend
    backend.close()


def test_images_api_returns_n_decoded_pairs_with_provenance(api_backend, images_api):
    script(images_api, [])
    results = api_backend.generate_pair(CAUSE, EFFECT, style="comic", generator_key="p",
                                        settings=PairSettings(n=2, size="96x64"))
    assert all(isinstance(r, CandidatePair) for r in results) and [r.k for r in results] == [0, 1]
    assert results[0].cause.size == (96, 64)
    assert not np.array_equal(pixels(results[0].cause), pixels(results[1].cause))
    bodies = [r["body"] for r in received(images_api)]
    assert [b["n"] for b in bodies] == [2, 2] and {b["size"] for b in bodies} == {"96x64"}
    assert {b["response_format"] for b in bodies} == {"b64_json"} and {b["model"] for b in bodies} == {"image-model-1"}
    assert bodies[0]["prompt"].startswith(CAUSE) and "comic" in bodies[0]["prompt"] and "Avoid: " in bodies[0]["prompt"]
    assert all(r["authorized"] for r in received(images_api))
    prov = results[1].effect_provenance.as_dict()
    assert (prov["backend"], prov["model"], prov["size"], prov["seed"]) == ("openai", "image-model-1", "96x64", None)
    assert prov["prompt"] == bodies[1]["prompt"] and KEY not in json.dumps(prov)


def test_images_api_429_waits_what_retry_after_asks_then_succeeds(api_backend, images_api, sleeps):
    script(images_api, ["429"], retry_after=7)
    results = api_backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=1))
    assert results[0].ok and sleeps == [7.0] and len(received(images_api)) == 3  # cause twice, effect once


def test_images_api_500_and_time_out_are_retried(images_api, monkeypatch, sleeps):
    monkeypatch.setenv("MY_IMAGES_KEY", KEY)
    endpoint = ImagesEndpoint(base_url=f"{images_api}/v1", api_key_env="MY_IMAGES_KEY", timeout=0.5,
                              request_attempts=3, backoff_initial=0.01)
    backend = OpenAIImageBackend(model="m", endpoint=endpoint, sleep=sleeps.append)
    script(images_api, ["500", "slow"], slow_s=1.5)
    results = backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=1))
    assert results[0].ok and len(sleeps) == 2 and len(received(images_api)) == 4
    backend.close()


def test_images_api_persistent_error_records_failures_and_never_the_key(api_backend, images_api):
    script(images_api, ["500"] * 3)
    results = api_backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=2))
    assert [(type(r), r.side) for r in results] == [(CandidateFailure, "cause")] * 2
    assert "500" in results[0].reason and KEY not in results[0].reason
    assert len(received(images_api)) == 3  # the effect call is skipped: the pair cannot be completed
    script(images_api, ["400"])
    failed = api_backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=1))[0]
    assert "400" in failed.reason and KEY not in failed.reason and len(received(images_api)) == 1  # not retried


def test_images_api_invalid_base64_or_a_short_reply_fails_only_that_candidate(api_backend, images_api):
    script(images_api, ["bad_base64", "short"])
    results = api_backend.generate_pair(CAUSE, EFFECT, settings=PairSettings(n=3))
    assert isinstance(results[0], CandidateFailure) and results[0].side == "cause"
    assert "invalid base64" in results[0].reason
    assert results[1].ok
    assert isinstance(results[2], CandidateFailure) and results[2].side == "effect" and "2 images" in results[2].reason


def test_images_api_server_echoes_no_secret(images_api):
    script(images_api, ["400"])
    response = httpx.post(f"{images_api}/v1/images/generations", json={"prompt": "x"},
                          headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 400 and KEY not in response.text
    assert KEY not in json.dumps(received(images_api))


# ------------------------------------------------------------------ checks on crafted images


def textured(seed: int, size: int = 64) -> PIL.Image.Image:
    """Smooth random shapes: a picture a perceptual hash can tell from others."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    return PIL.Image.fromarray(coarse).resize((size, size), PIL.Image.BICUBIC)


def reencoded(image: PIL.Image.Image) -> PIL.Image.Image:
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=80)
    return PIL.Image.open(io.BytesIO(out.getvalue())).convert("RGB")


def test_blank_image_flags_a_near_uniform_image_only():
    rng = np.random.default_rng(0)
    flat = np.clip(128 + rng.normal(0, 1.0, (64, 64, 3)), 0, 255).astype(np.uint8)
    flag = blank_image(PIL.Image.fromarray(flat), "effect")
    assert flag.code == BLANK_IMAGE and "effect image is near-uniform" in flag.reason
    assert blank_image(textured(1)) is None


def test_duplicate_candidate_flags_the_later_of_two_near_identical_images():
    images = [textured(1), textured(2), reencoded(textured(1)), textured(3)]
    flags = duplicate_candidates(images, ks=[0, 1, 2, 3])
    assert list(flags) == [2] and flags[2].code == DUPLICATE_CANDIDATE
    assert "candidate 2 duplicates candidate 0" in flags[2].reason


def test_pair_inconsistent_flags_an_unrelated_effect_but_not_a_small_change():
    cause = textured(5)
    changed = np.asarray(cause).copy()
    changed[40:52, 40:52] = (250, 250, 250)  # a small object appears: the subject is the same
    assert pair_inconsistent(cause, PIL.Image.fromarray(changed)) is None
    flag = pair_inconsistent(cause, textured(6))
    assert flag.code == PAIR_INCONSISTENT and "differ" in flag.reason and flag.value > 24


def test_check_candidates_ranks_flagged_candidates_last():
    blank = PIL.Image.new("RGB", (64, 64), (90, 90, 90))
    causes = [blank, textured(10), textured(11)]
    effects = [blank, textured(12), reencoded(textured(11))]
    reports = check_candidates(causes, effects)
    assert reports[0].k == 2 and reports[0].flags == []
    by_k = {r.k: r for r in reports}
    assert set(by_k[1].codes) == {PAIR_INCONSISTENT}
    assert BLANK_IMAGE in by_k[0].codes and DUPLICATE_CANDIDATE not in by_k[0].codes
    assert [r.k for r in reports][-1] == 0  # two blank flags rank it last


# ------------------------------------------------------------------ CLIP score with a tiny CLIP from configs


@pytest.fixture(scope="module")
def tiny_clip_folder(tmp_path_factory) -> Path:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    folder = tmp_path_factory.mktemp("clip")
    tokenizer = tiny.byte_level_clip_tokenizer(folder)
    config = CLIPConfig(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 32, "intermediate_size": 37,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 77,
                     "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                     "pad_token_id": tokenizer.pad_token_id},
        vision_config={"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "image_size": 32, "patch_size": 8},
        projection_dim=16)
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(folder)
    processor = CLIPProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                                 crop_size={"height": 32, "width": 32}),
                              tokenizer=tokenizer)
    processor.save_pretrained(folder)
    return folder


def test_clip_score_from_a_tiny_clip_folder_ranks_candidates(tiny_clip_folder, tmp_path):
    scorer = ClipScorer(tiny_clip_folder)
    images = [textured(20), textured(21)]
    scores = scorer.score(images, ["a red bird", "a blue car"])
    assert len(scores) == 2 and all(0.0 <= s <= 100.0 for s in scores)
    assert scores == ClipScorer(tiny_clip_folder).score(images, ["a red bird", "a blue car"])  # deterministic
    reports = check_candidates(images, images, cause_text="a red bird", effect_text="a red bird", scorer=scorer)
    assert all(r.clip_cause is not None and r.clip_effect is not None for r in reports)
    assert reports[0].score >= reports[1].score
    assert {r.k: r.clip_cause for r in reports} == pytest.approx({0: scores[0], 1: scorer.score([images[1]],
                                                                                              ["a red bird"])[0]})
    with pytest.raises(ImageGenError, match="not a CLIP model folder"):
        ClipScorer(tmp_path)
