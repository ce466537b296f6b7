"""Candidate images for cause/effect pairs (MuCR-style items): local diffusers pipelines or an Images API.

Store-independent: this package makes images and says how; the caller stores them (by SHA-256, with provenance).

Typical use (what `cftools generate images` does for each pair and style)::

    from cftools.imagegen import make_image_backend, load_style, check_candidates, CandidatePair, PairSettings

    backend = make_image_backend(config.get("images"), backend=None, model=None)   # [images] + CLI overrides
    style = load_style("photograph")                  # or parse_styles("photograph,comic")
    settings = PairSettings(n=4, seed=0, steps=None, guidance=None, size=None,  # None: the backend's defaults
                            candidates=None)                                    # or the missing ks on resume
    results = backend.generate_pair(cause_description, effect_description, style=style, settings=settings,
                                    generator_key=f"{item_key}")                 # stable per pair (e.g. item id)
    for r in results:                                 # ordered by k
        if isinstance(r, CandidatePair):              # r.ok is True
            r.cause, r.effect                         # PIL RGB images
            r.cause_provenance.as_dict()              # backend, model, revision, prompt, negative_prompt, seed,
                                                      # steps, guidance, size, scheduler, consistency, device,
                                                      # dtype, seconds, style, candidate, side, strength, extra
        else:                                         # CandidateFailure (r.ok is False): k, side, reason
            ...                                       # record r.as_dict() on the item; the run goes on
    reports = check_candidates([p.cause for p in pairs], [p.effect for p in pairs], ks=[p.k for p in pairs],
                               cause_text=..., effect_text=..., scorer=ClipScorer(folder) or None)
    # -> CandidateReport(k, flags=[CandidateFlag(code, reason, side, value)], clip_cause, clip_effect, score),
    #    best first; codes: blank_image, duplicate_candidate, pair_inconsistent

Errors: `ImageGenError` (a `CftoolsError`, one line, no secret) when a backend cannot run at all (a folder that is not
a diffusers pipeline, a hub id while downloads are off, an unknown style); the openai backend raises `LLMError` for a
missing key. A failed call or image never raises: it comes back as a `CandidateFailure`.

- `diffusers` (`cftools.imagegen.diffusers_backend`): siamese pairs (candidate k of cause and effect share initial
  latents seeded from (generator_key, style, k, seed)), or `consistency="img2img"`; CUDA fp16 batches, CPU fp32.
- `openai` (`cftools.imagegen.openai_backend`): `images.generate` with b64_json replies on any compatible base_url.
- The embedded default (`cftools.imagegen.tiny`): a tiny random-weight SD pipeline built from configs and cached
  as a pipeline folder; its 64x64 images are noise.
- `backend.tokenizer` (diffusers only) is the pipeline's CLIP tokenizer, for the `prompt_truncated` check.
- `image_request_key(...)` gives a request-cache key for an image request (for the openai backend's cache).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cftools.errors import Hint
from cftools.imagegen.base import (
    CAUSE, CONSISTENCY_MODES, EFFECT, CandidateFailure, CandidatePair, CandidateResult, ImageBackend, ImageGenError,
    PairSettings, Provenance, candidate_seed, image_request_key, parse_size,
)
from cftools.imagegen.checks import (
    BLANK_IMAGE, DUPLICATE_CANDIDATE, PAIR_INCONSISTENT, CandidateFlag, CandidateReport, ClipScorer, check_candidates,
)
from cftools.imagegen.styles import DEFAULT_STYLES, Style, load_style, parse_styles

IMAGE_BACKENDS = ("diffusers", "openai")
EMBEDDED = "embedded"

__all__ = [
    "BLANK_IMAGE", "CAUSE", "CONSISTENCY_MODES", "DEFAULT_STYLES", "DUPLICATE_CANDIDATE", "EFFECT", "EMBEDDED",
    "IMAGE_BACKENDS", "PAIR_INCONSISTENT", "CandidateFailure", "CandidateFlag", "CandidatePair", "CandidateReport",
    "CandidateResult", "ClipScorer", "ImageBackend", "ImageGenError", "PairSettings", "Provenance", "Style",
    "candidate_seed",
    "check_candidates", "image_request_key", "load_style", "make_image_backend", "parse_size", "parse_styles",
]

DIFFUSERS_OPTIONS = ("device", "dtype", "consistency", "strength", "attention_slicing", "cpu_offload")
OPENAI_OPTIONS = ("timeout", "request_attempts", "backoff_initial", "backoff_max", "response_format", "quality",
                  "max_pixels", "max_reply_bytes")


def make_image_backend(config: dict[str, Any] | None = None, backend: str | None = None, model: str | None = None,
                       **overrides: Any) -> ImageBackend:
    """A backend from the workspace's [images] section with the command line's options on top.

    No model (or model = "embedded") with the diffusers backend is the embedded tiny pipeline, built on first use
    under `cache_dir` (default ~/.cache/cftools) with its own defaults: 4 steps, guidance 5, 64x64.
    """
    config = dict(config or {})
    if config.get("api_key"):
        raise ImageGenError("[images] api_key is not read: keys never go into the workspace; put the key in an "
                            "environment variable and name it with [images] api_key_env")
    config.update({k: v for k, v in overrides.items() if v is not None})
    name = backend or config.get("backend") or "diffusers"
    chosen = model or config.get("model")
    if name == "diffusers":
        from cftools.imagegen.diffusers_backend import DiffusersBackend, DiffusersSettings

        options = {k: config[k] for k in DIFFUSERS_OPTIONS if k in config}
        defaults = {"default_steps": config.get("steps"), "default_guidance": config.get("guidance"),
                    "default_size": config.get("size")}
        if not chosen or chosen == EMBEDDED:
            from cftools.imagegen import tiny

            chosen = tiny.embedded_pipeline_folder(Path(config["cache_dir"]) if config.get("cache_dir") else None)
            defaults = {"default_steps": defaults["default_steps"] or tiny.TINY_STEPS,
                        # guidance 0 is a setting (no classifier-free guidance), not an absent one
                        "default_guidance": tiny.TINY_GUIDANCE if defaults["default_guidance"] is None
                        else defaults["default_guidance"],
                        "default_size": defaults["default_size"]}
        return DiffusersBackend(chosen, DiffusersSettings(
            allow_downloads=bool(config.get("allow_downloads", False)), **options,
            **{k: v for k, v in defaults.items() if v is not None}))
    if name == "openai":
        from cftools.imagegen.openai_backend import DEFAULT_KEY_ENV, ImagesEndpoint, OpenAIImageBackend

        if not chosen:
            raise ImageGenError("the openai image backend needs a model: [images] model",
                                hint=Hint("the openai image backend needs a model: {model} NAME or [images] model",
                                          model="--model"))
        options = {k: config[k] for k in OPENAI_OPTIONS if k in config}
        return OpenAIImageBackend(chosen, ImagesEndpoint(base_url=config.get("base_url"),
                                                         api_key_env=config.get("api_key_env") or DEFAULT_KEY_ENV,
                                                         default_size=config.get("size"), **options))
    raise ImageGenError(f"unknown image backend {name!r}; use one of {', '.join(IMAGE_BACKENDS)}")
