"""Edits with a diffusers edit pipeline, loaded by the pipeline class its model_index.json names (see
`cftools.imagegen.edits`)."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import PIL.Image

from cftools.imagegen.base import ImageGenError, parse_size, size_text
from cftools.imagegen.edit_base import (DEFAULT_GUIDANCE, DEFAULT_STEPS, EditCandidate, EditFailure, EditResult,
                                        EditSettings, candidate_seeds, check_licence, checked_candidate,
                                        model_licence)


def _to_pil(array: np.ndarray) -> PIL.Image.Image:
    clipped = np.clip(np.asarray(array, dtype=np.float32), 0.0, 1.0)
    return PIL.Image.fromarray(np.round(clipped * 255).astype(np.uint8))


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


@dataclass(frozen=True)
class DiffusersEditSettings:
    """How an edit pipeline is loaded and run (the [edits] keys), held in one object as a pipeline's config."""

    licence: Optional[str] = None  # None: read from the model card
    allow_non_commercial: bool = False
    allow_downloads: bool = False
    device: Optional[str] = None
    dtype: Optional[str] = None
    default_steps: int = DEFAULT_STEPS
    default_guidance: float = DEFAULT_GUIDANCE
    image_guidance: Optional[float] = None
    default_size: Optional[str] = None


class DiffusersEditBackend:
    """Edits with a diffusers edit pipeline (InstructPix2Pix, FLUX.2 klein, FluxKontext, QwenImageEdit, LongCat
    ImageEdit, ...), loaded from a folder or hub id by the pipeline class its model_index.json names."""

    name = "diffusers"

    def __init__(self, model: str | Path, settings: DiffusersEditSettings = DiffusersEditSettings()) -> None:
        from cftools.imagegen.diffusers_backend import check_model_source, model_revision, pick_device, pick_dtype

        self.model = str(model)
        self.folder = check_model_source(self.model, settings.allow_downloads)
        self.licence = model_licence(self.model, self.folder, settings.licence)
        check_licence(self.model, self.licence, settings.allow_non_commercial)
        self.revision = model_revision(self.folder) if self.folder else None
        self.allow_downloads = settings.allow_downloads
        self.device = pick_device(settings.device)
        self.torch_dtype = pick_dtype(self.device, settings.dtype)
        self.default_steps, self.default_guidance = settings.default_steps, settings.default_guidance
        self.image_guidance = settings.image_guidance
        self.default_size = settings.default_size
        self._pipe = self._load()

    @property
    def dtype(self) -> str:
        return str(self.torch_dtype).removeprefix("torch.")

    @property
    def pipeline(self):  # noqa: ANN201
        """The loaded pipeline (for benchmarks that call it raw at the same settings)."""
        return self._pipe

    def _load(self):  # noqa: ANN202
        from cftools.imagegen.diffusers_backend import quiet_libraries

        quiet_libraries()
        from diffusers import DiffusionPipeline

        source = str(self.folder) if self.folder else self.model
        try:  # the class model_index.json names: every edit pipeline, whether AutoPipeline maps it or not
            pipe = DiffusionPipeline.from_pretrained(source, dtype=self.torch_dtype,
                                                     local_files_only=not self.allow_downloads)
        except Exception as exc:  # any loader failure is the folder's fault as far as the user can act on it
            raise ImageGenError(f"{source}: cannot be loaded as a diffusers pipeline ({_first_line(exc)})") from None
        if "image" not in inspect.signature(pipe.__call__).parameters:
            raise ImageGenError(f"{source}: {type(pipe).__name__} takes no image: not an edit pipeline")
        pipe.set_progress_bar_config(disable=True)
        pipe.to(self.device)
        return pipe

    def _size(self, original: PIL.Image.Image, size: Optional[str]) -> tuple[int, int]:
        """The edit's size: the one asked for, else the pipeline's native size for the tiny pipeline (its UNet's
        sample size), else the original's rounded down to the latent grid."""
        grid = int(getattr(self._pipe, "vae_scale_factor", 8)) * 2
        chosen = size or self.default_size
        if chosen:
            return parse_size(chosen, original.size)
        width, height = original.size
        return max(grid, width // grid * grid), max(grid, height // grid * grid)

    def call_kwargs(self, steps: int, guidance: float) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"num_inference_steps": steps, "guidance_scale": guidance}
        if self.image_guidance is not None:
            kwargs["image_guidance_scale"] = self.image_guidance
        return kwargs

    def edit(self, original: PIL.Image.Image, instruction: str, settings: EditSettings) -> list[EditResult]:
        """Candidates k = 0..n-1 (or SETTINGS.candidates) of one item's edit, in one pipeline call."""
        import torch

        ks = settings.ks()
        if not ks:
            return []
        steps = settings.steps or self.default_steps
        guidance = self.default_guidance if settings.guidance is None else settings.guidance
        width, height = self._size(original, settings.size)
        source = original.convert("RGB").resize((width, height), PIL.Image.Resampling.LANCZOS)
        seeds = candidate_seeds(ks, settings.seed)
        started = time.perf_counter()
        try:
            output = self._pipe(prompt=[instruction] * len(ks), image=[source] * len(ks),
                                generator=[torch.Generator("cpu").manual_seed(s) for s in seeds], output_type="np",
                                **self.call_kwargs(steps, guidance))
            images = np.asarray(output.images)
        except Exception as exc:  # e.g. out of memory: every candidate of this item failed, the run goes on
            return [EditFailure(k, _first_line(exc), self.name, self.model) for k in ks]
        seconds = (time.perf_counter() - started) / len(ks)
        results: list[EditResult] = []
        for k, s, array in zip(ks, seeds, images):
            if not np.isfinite(array).all():
                results.append(EditFailure(k, "the pipeline returned NaN/inf pixels (a NaN image)", self.name,
                                           self.model))
                continue
            results.append(checked_candidate(EditCandidate(k, _to_pil(array), {
                "backend": self.name, "model": self.model, "revision": self.revision, "licence": self.licence,
                "pipeline": type(self._pipe).__name__, "instruction": instruction, "seed": s, "steps": steps,
                "guidance": guidance, "image_guidance": self.image_guidance, "size": size_text(width, height),
                "scheduler": type(self._pipe.scheduler).__name__, "device": self.device, "dtype": self.dtype,
                "seconds": seconds, "candidate": k}), (width, height)))
        return results

    def close(self) -> None:
        self._pipe = None
