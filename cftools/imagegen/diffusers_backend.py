"""Local diffusers pipelines: `AutoPipelineForText2Image` from a folder (a hub id only when downloads are allowed).

The pair is siamese: candidate k of the cause and candidate k of the effect start from the same initial latents,
drawn on the CPU from a `torch.Generator` seeded from (pair key, style, k, base seed) and passed to the pipeline as
`latents=`, so subject and composition stay alike and the draw does not depend on the device. The cause and effect
candidates of a pair go through the pipeline in one batch (2n images per call). With `consistency="img2img"` the
effect candidate k is instead made from cause image k by `AutoPipelineForImage2Image` at `strength`.

CUDA runs in fp16 (attention slicing and model CPU offload for small GPUs are options), the CPU in fp32.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import PIL.Image

from cftools.imagegen.base import (
    CAUSE, CONSISTENCY_MODES, EFFECT, CandidateFailure, CandidatePair, CandidateResult, ImageGenError, PairSettings,
    Provenance, candidate_seed, parse_size, size_text,
)
from cftools.imagegen.styles import Style, as_style

DEFAULT_STEPS = 30
DEFAULT_GUIDANCE = 7.5
DEFAULT_STRENGTH = 0.6


def model_revision(folder: Path) -> str | None:
    """The SHA-256 of a pipeline folder's model_index.json: it changes when the pipeline's makeup changes."""
    index = Path(folder) / "model_index.json"
    return hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else None


def quiet_libraries() -> None:
    """The caller shows its own progress; the libraries' bars and torchvision notes would garble it."""
    import diffusers
    import transformers

    diffusers.utils.logging.disable_progress_bar()
    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def pick_device(device: str | None) -> str:
    import torch

    if device and device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str, dtype: str | None):  # noqa: ANN201
    import torch

    if dtype and dtype != "auto":
        chosen = getattr(torch, dtype, None)
        if not isinstance(chosen, torch.dtype):
            raise ImageGenError(f"unknown dtype {dtype!r}; use float16, bfloat16 or float32")
        return chosen
    return torch.float16 if device.startswith("cuda") else torch.float32


def check_model_source(model: str, allow_downloads: bool) -> Path | None:
    """The local folder MODEL names (None for a hub id when downloads are allowed); anything else, one line."""
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").is_file():
            raise ImageGenError(f"{path}: not a diffusers pipeline folder (no model_index.json)")
        return path
    if path.exists():
        raise ImageGenError(f"{path}: not a diffusers pipeline folder (it is a file)")
    if not allow_downloads:
        raise ImageGenError(f"{model}: no such pipeline folder (downloads are off; give a local folder, "
                            f"or allow downloads to fetch a hub id)")
    return None


def initial_latents(seeds: list[int], shape: tuple[int, ...]):  # noqa: ANN201
    """One latent per seed, each drawn on the CPU from its own generator (same seed -> same latent anywhere)."""
    import torch

    return torch.stack([torch.randn(shape, generator=torch.Generator("cpu").manual_seed(s), dtype=torch.float32)
                        for s in seeds])


def cpu_generators(seeds: list[int]) -> list:
    """Per-image generators for the scheduler's own noise (ancestral samplers, img2img), seeded as the latents."""
    import torch

    return [torch.Generator("cpu").manual_seed(s) for s in seeds]


@dataclass(frozen=True)
class DiffusersSettings:
    """How a text-to-image pipeline is loaded and run (the [images] keys), held in one object as a diffusers
    pipeline holds its config; an unknown consistency mode or a strength outside (0, 1] is refused here."""

    allow_downloads: bool = False
    device: str | None = None
    dtype: str | None = None
    consistency: str = "seed"
    strength: float = DEFAULT_STRENGTH
    attention_slicing: bool = False
    cpu_offload: bool = False  # model CPU offload for small GPUs
    default_steps: int = DEFAULT_STEPS
    default_guidance: float = DEFAULT_GUIDANCE
    default_size: str | tuple[int, int] | None = None  # None: the pipeline's native size

    def __post_init__(self) -> None:
        if self.consistency not in CONSISTENCY_MODES:
            raise ImageGenError(f"unknown consistency mode {self.consistency!r}; "
                                f"use one of {', '.join(CONSISTENCY_MODES)}")
        if not 0.0 < self.strength <= 1.0:
            raise ImageGenError(f"img2img strength must be in (0, 1], got {self.strength}")


class DiffusersBackend:
    """Text-to-image with a diffusers pipeline; see the module docstring."""

    name = "diffusers"

    def __init__(self, model: str | Path, settings: DiffusersSettings = DiffusersSettings()) -> None:
        self.model = str(model)
        self.folder = check_model_source(self.model, settings.allow_downloads)
        self.revision = model_revision(self.folder) if self.folder else None
        self.allow_downloads = settings.allow_downloads
        self.device = pick_device(settings.device)
        self.torch_dtype = pick_dtype(self.device, settings.dtype)
        self.consistency = settings.consistency
        self.strength = settings.strength
        self.default_steps = settings.default_steps
        self.default_guidance = settings.default_guidance
        self._pipe = self._load(settings.attention_slicing, settings.cpu_offload)
        self._img2img = None
        self.default_size = parse_size(settings.default_size, self._native_size())

    def __repr__(self) -> str:
        return f"DiffusersBackend(model={self.model!r}, device={self.device!r}, dtype={self.dtype!r})"

    @property
    def dtype(self) -> str:
        return str(self.torch_dtype).removeprefix("torch.")

    @property
    def scheduler(self) -> str:
        return type(self._pipe.scheduler).__name__

    @property
    def pipeline(self):  # noqa: ANN201
        """The loaded text-to-image pipeline (for benchmarks and tools that need the model itself)."""
        return self._pipe

    @property
    def tokenizer(self):  # noqa: ANN201
        """The pipeline's (first) tokenizer, for counting prompt tokens; None when it has none."""
        return getattr(self._pipe, "tokenizer", None)

    def _load(self, attention_slicing: bool, cpu_offload: bool):  # noqa: ANN202
        quiet_libraries()  # before the pipeline classes load: importing them is what prints the notes
        from diffusers import AutoPipelineForText2Image

        source = str(self.folder) if self.folder else self.model
        try:
            pipe = AutoPipelineForText2Image.from_pretrained(
                source, dtype=self.torch_dtype, local_files_only=not self.allow_downloads)
        except Exception as exc:  # any loader failure is the folder's fault as far as the user can act on it
            first_line = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ImageGenError(f"{source}: cannot be loaded as a text-to-image diffusers pipeline "
                                f"({type(exc).__name__}: {first_line})") from None
        pipe.set_progress_bar_config(disable=True)
        if attention_slicing:
            pipe.enable_attention_slicing()
        if cpu_offload and self.device.startswith("cuda"):
            pipe.enable_model_cpu_offload()  # moves each part to the GPU only while it runs
        else:
            pipe.to(self.device)
        return pipe

    def _native_size(self) -> tuple[int, int]:
        unet = getattr(self._pipe, "unet", None) or getattr(self._pipe, "transformer", None)
        sample = getattr(getattr(unet, "config", None), "sample_size", None)
        factor = getattr(self._pipe, "vae_scale_factor", 8)
        side = int(sample * factor) if isinstance(sample, int) else 512
        return side, side

    def _latent_shape(self, width: int, height: int) -> tuple[int, int, int] | None:
        """The UNet latent of one image; None for pipelines with another latent layout (transformer-based ones
        pack their latents), which then get the per-image CPU generators alone: seeded alike, they draw the same
        initial noise for cause k and effect k too."""
        factor = self._pipe.vae_scale_factor
        if width % factor or height % factor:
            raise ImageGenError(f"size {width}x{height} is not a multiple of the pipeline's {factor}-pixel latent grid")
        unet = getattr(self._pipe, "unet", None)
        if unet is None:
            return None
        return unet.config.in_channels, height // factor, width // factor

    def _latents(self, seeds: list[int], width: int, height: int, copies: int = 1) -> dict[str, Any]:
        """`latents=` for the pipeline call (in the pipeline's dtype; the pipeline moves them to its device,
        which also works under model CPU offload), or nothing where the layout is not a UNet's."""
        shape = self._latent_shape(width, height)
        if shape is None:
            return {}
        return {"latents": initial_latents(seeds, shape).repeat(copies, 1, 1, 1).to(dtype=self.torch_dtype)}

    def _image2image(self):  # noqa: ANN202
        if self._img2img is None:
            from diffusers import AutoPipelineForImage2Image

            self._img2img = AutoPipelineForImage2Image.from_pipe(self._pipe)  # shares the loaded weights
            self._img2img.set_progress_bar_config(disable=True)
        return self._img2img

    def generate_pair(self, cause_prompt: str, effect_prompt: str, *, style: Style | str | None = None,
                      settings: PairSettings = PairSettings(), generator_key: str = "") -> list[CandidateResult]:
        """Candidates k = 0..n-1 (or only settings.candidates, for a resumed run) of one cause/effect pair."""
        chosen = as_style(style)
        ks = settings.ks()
        if not ks:
            return []
        width, height = parse_size(settings.size, self.default_size)
        steps = settings.steps or self.default_steps
        guidance = self.default_guidance if settings.guidance is None else settings.guidance
        seeds = [candidate_seed(generator_key, chosen.name, k, settings.seed) for k in ks]
        prompts = {CAUSE: chosen.prompt(cause_prompt), EFFECT: chosen.prompt(effect_prompt)}
        negatives = {CAUSE: chosen.negative(cause_prompt), EFFECT: chosen.negative(effect_prompt)}
        common = dict(steps=steps, guidance=guidance, width=width, height=height)
        try:
            if self.consistency == "seed":
                images, seconds = self._siamese_batch(prompts, negatives, seeds, **common)
            else:
                images, seconds = self._cause_then_img2img(prompts, negatives, seeds, **common)
        except ImageGenError:
            raise
        except Exception as exc:  # e.g. out of memory: every candidate of this pair failed, the run goes on
            reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
            return [CandidateFailure(k, "pair", reason, self.name, self.model) for k in ks]
        results: list[CandidateResult] = []
        for i, (k, s) in enumerate(zip(ks, seeds)):
            made = {}
            for side in (CAUSE, EFFECT):
                array = images[side][i]
                if not np.isfinite(array).all():
                    results.append(CandidateFailure(k, side, "the pipeline returned NaN/inf pixels (a NaN image; "
                                                    "fp16 overflow in the VAE is the usual cause)", self.name, self.model))
                    break
                made[side] = (_to_pil(array), Provenance(
                    backend=self.name, model=self.model, revision=self.revision, prompt=prompts[side],
                    negative_prompt=negatives[side], seed=s, steps=steps, guidance=guidance,
                    size=size_text(width, height), scheduler=self.scheduler, consistency=self.consistency,
                    device=self.device, dtype=self.dtype, seconds=seconds[side] / len(ks), style=chosen.name,
                    candidate=k, side=side, strength=self.strength if side == EFFECT and self.consistency == "img2img"
                    else None))
            else:
                results.append(CandidatePair(k, made[CAUSE][0], made[EFFECT][0], made[CAUSE][1], made[EFFECT][1]))
        return results

    def _run(self, pipe, prompts: list[str], negatives: list[str | None], seeds: list[int], *, steps: int,  # noqa: ANN001
             guidance: float, **kwargs: Any) -> np.ndarray:
        negative = None if all(n is None for n in negatives) else [n or "" for n in negatives]
        output = pipe(prompt=prompts, negative_prompt=negative, num_inference_steps=steps, guidance_scale=guidance,
                      generator=cpu_generators(seeds), output_type="np", **kwargs)
        return np.asarray(output.images)

    def _siamese_batch(self, prompts, negatives, seeds, *, steps, guidance, width, height):  # noqa: ANN001, ANN202
        """Cause and effect candidates in one call: 2n images, candidate k of both from the same latents."""
        latents = self._latents(seeds, width, height, copies=2)
        n = len(seeds)
        started = time.perf_counter()
        images = self._run(self._pipe, [prompts[CAUSE]] * n + [prompts[EFFECT]] * n,
                           [negatives[CAUSE]] * n + [negatives[EFFECT]] * n, seeds + seeds,
                           steps=steps, guidance=guidance, width=width, height=height, **latents)
        seconds = (time.perf_counter() - started) / 2  # the call made both sides; half each
        return {CAUSE: images[:n], EFFECT: images[n:]}, {CAUSE: seconds, EFFECT: seconds}

    def _cause_then_img2img(self, prompts, negatives, seeds, *, steps, guidance, width, height):  # noqa: ANN001, ANN202
        """Cause candidates by text-to-image, then effect k from cause k by image-to-image at `strength`."""
        n = len(seeds)
        latents = self._latents(seeds, width, height)
        started = time.perf_counter()
        causes = self._run(self._pipe, [prompts[CAUSE]] * n, [negatives[CAUSE]] * n, seeds, steps=steps,
                           guidance=guidance, width=width, height=height, **latents)
        cause_seconds = time.perf_counter() - started
        started = time.perf_counter()
        effects = self._run(self._image2image(), [prompts[EFFECT]] * n, [negatives[EFFECT]] * n, seeds, steps=steps,
                            guidance=guidance, image=[_to_pil(np.nan_to_num(c)) for c in causes],  # a NaN cause fails k anyway
                            strength=self.strength)
        return {CAUSE: causes, EFFECT: effects}, {CAUSE: cause_seconds, EFFECT: time.perf_counter() - started}

    def close(self) -> None:
        self._pipe = None
        self._img2img = None


def _to_pil(array: np.ndarray) -> PIL.Image.Image:
    """A float HxWx3 image in [0, 1] (the pipelines' "np" output) as an 8-bit RGB image."""
    clipped = np.clip(np.asarray(array, dtype=np.float32), 0.0, 1.0)
    return PIL.Image.fromarray(np.round(clipped * 255).astype(np.uint8))
