"""Instruction-based image edits: N candidate edits of one original image, from a diffusers edit pipeline or an
OpenAI-compatible `images.edit` endpoint. Store-independent, as the text-to-image backends beside it.

    backend = make_edit_backend(config.get("edits"), backend=None, model=None)   # [edits] + CLI overrides
    results = backend.edit(original, "Turn the television off", n=4, seed=0, steps=None, guidance=None,
                           size=None, candidates=None)                          # or the missing ks on resume
    for r in results:                      # ordered by k
        if r.ok: r.image, r.provenance     # PIL RGB image; backend, model, revision, licence, instruction,
                                           # seed, steps, guidance, image_guidance, size, scheduler, device, ...
        else:    r.as_dict()               # k, reason: record it on the item; the run goes on

Seeds are shared: candidate k of every item is drawn with seed `seed + k` (a `torch.Generator` per image on the
CPU), so a rerun, a resumed run or the same settings in raw diffusers draw the same noise, and two models compare
on equal terms. All N candidates of an item go through the pipeline in one call (a batch of N).

Models and their licences: a pipeline folder's model card (README.md front matter `license:`), else the table of
known edit models below, else `[edits] licence` / `--licence`. A model whose licence is not for commercial use is
loaded only when asked (`allow_non_commercial`), and its licence goes into every candidate's provenance (and from
there into the data card). The embedded tiny pipeline (`cftools.imagegen.tiny_edit`) is the offline default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.errors import Hint
from cftools.imagegen.base import ImageGenError
from cftools.imagegen.edit_base import (DEFAULT_EDIT_MODEL, EDIT_BACKENDS, EMBEDDED, KNOWN_LICENCES, EditCandidate,
                                        EditFailure, EditResult, EditSettings, candidate_seeds, check_licence,
                                        is_non_commercial, model_licence)

__all__ = ["DEFAULT_EDIT_MODEL", "EDIT_BACKENDS", "EMBEDDED", "KNOWN_LICENCES", "EditCandidate", "EditFailure",
           "EditResult", "EditSettings", "candidate_seeds", "is_non_commercial", "make_edit_backend"]

DIFFUSERS_OPTIONS = ("device", "dtype", "image_guidance")
OPENAI_OPTIONS = ("timeout", "request_attempts", "backoff_initial", "backoff_max", "response_format", "max_pixels")


def make_edit_backend(config: Optional[dict[str, Any]] = None, backend: Optional[str] = None,
                      model: Optional[str] = None, **overrides: Any) -> Any:
    """An edit backend from the workspace's [edits] section with the command line's options on top. No model (or
    model = "embedded") with the diffusers backend is the embedded tiny InstructPix2Pix pipeline."""
    config = dict(config or {})
    if config.get("api_key"):
        raise ImageGenError("[edits] api_key is not read: keys never go into the workspace; put the key in an "
                            "environment variable and name it with [edits] api_key_env")
    config.update({k: v for k, v in overrides.items() if v is not None})
    name = backend or config.get("backend") or "diffusers"
    chosen = model or config.get("model")
    licence = config.get("licence")
    if name == "diffusers":
        options = {k: config[k] for k in DIFFUSERS_OPTIONS if k in config}
        steps, guidance = config.get("steps"), config.get("guidance")
        if not chosen or chosen == EMBEDDED:
            from cftools.imagegen import tiny_edit

            chosen = tiny_edit.embedded_edit_pipeline_folder(Path(config["cache_dir"]) if config.get("cache_dir")
                                                             else None)
            licence = licence or tiny_edit.TINY_EDIT_LICENCE
            # guidance 0 is a setting (no text guidance), not an absent one
            steps = steps or tiny_edit.TINY_EDIT_STEPS
            guidance = tiny_edit.TINY_EDIT_GUIDANCE if guidance is None else guidance
            config.setdefault("size", tiny_edit.TINY_EDIT_SIZE)  # its native size: larger is slower, no better
        from cftools.imagegen.diffusers_edit_backend import DiffusersEditBackend, DiffusersEditSettings

        return DiffusersEditBackend(chosen, DiffusersEditSettings(
            licence=licence, allow_non_commercial=bool(config.get("allow_non_commercial", False)),
            allow_downloads=bool(config.get("allow_downloads", False)), default_size=config.get("size"), **options,
            **{k: v for k, v in (("default_steps", steps), ("default_guidance", guidance)) if v is not None}))
    if name == "openai":
        from cftools.imagegen.openai_backend import DEFAULT_KEY_ENV, ImagesEndpoint

        if not chosen:
            raise ImageGenError("the openai edit backend needs a model: [edits] model",
                                hint=Hint("the openai edit backend needs a model: {model} NAME or [edits] model",
                                          model="--model"))
        licence = model_licence(chosen, None, licence)
        check_licence(chosen, licence, bool(config.get("allow_non_commercial", False)))
        options = {k: config[k] for k in OPENAI_OPTIONS if k in config}
        from cftools.imagegen.openai_edit_backend import OpenAIEditBackend

        endpoint = ImagesEndpoint(base_url=config.get("base_url"), setting="[edits] base_url",
                                  api_key_env=config.get("api_key_env") or DEFAULT_KEY_ENV,
                                  default_size=config.get("size"), **options)
        return OpenAIEditBackend(model=chosen, endpoint=endpoint, licence=licence)
    raise ImageGenError(f"unknown edit backend {name!r}; use one of {', '.join(EDIT_BACKENDS)}")
