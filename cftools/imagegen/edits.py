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

import inspect
import io
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import PIL.Image

from cftools.imagegen.base import ImageGenError, image_request_key, parse_size, size_text

EDIT_BACKENDS = ("diffusers", "openai")
EMBEDDED = "embedded"
# Apache-2.0 instruction-based edit models diffusers loads (FLUX.2 [klein] 4B since 0.36, LongCat-Image-Edit and
# Qwen-Image-Edit-2509 since 0.37 / 0.35); the recommended real default is the first.
DEFAULT_EDIT_MODEL = "black-forest-labs/FLUX.2-klein-4B"
KNOWN_LICENCES = {
    "black-forest-labs/FLUX.2-klein-4B": "Apache-2.0",
    "meituan-longcat/LongCat-Image-Edit": "Apache-2.0",
    "Qwen/Qwen-Image-Edit-2509": "Apache-2.0",
    "timbrooks/instruct-pix2pix": "MIT",
    "black-forest-labs/FLUX.1-Kontext-dev": "FLUX.1-dev-non-commercial",
    "black-forest-labs/FLUX.2-klein-9B": "FLUX-non-commercial",
}
NON_COMMERCIAL = re.compile(r"non[-_ ]?commercial|\bnc\b|-nc-|cc-by-nc", re.IGNORECASE)
DEFAULT_STEPS = 28
DEFAULT_GUIDANCE = 4.0
FRONT_MATTER_LICENCE = re.compile(r"^license:\s*['\"]?([^'\"\n]+)", re.MULTILINE)


@dataclass
class EditCandidate:
    """Candidate k of one item's edit and how it was made (`provenance` is what the store keeps)."""

    k: int
    image: PIL.Image.Image
    provenance: dict[str, Any]

    @property
    def ok(self) -> bool:
        return True


@dataclass
class EditFailure:
    """Candidate k could not be made (API error, invalid base64, NaN image); the run goes on."""

    k: int
    reason: str
    backend: str
    model: str

    @property
    def ok(self) -> bool:
        return False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


EditResult = Union[EditCandidate, EditFailure]


def candidate_seeds(ks: list[int], seed: int = 0) -> list[int]:
    """The seed of candidate k: `seed + k`, the same for every item (see the module docstring)."""
    return [int(seed) + int(k) for k in ks]


def is_non_commercial(licence: Optional[str]) -> bool:
    return bool(licence) and bool(NON_COMMERCIAL.search(str(licence)))


def folder_licence(folder: Optional[Path]) -> Optional[str]:
    """The `license:` of a pipeline folder's model card (the Hugging Face README front matter), if any."""
    card = Path(folder) / "README.md" if folder else None
    if card is None or not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    match = FRONT_MATTER_LICENCE.search(text.split("---", 2)[1] if text.count("---") >= 2 else "")
    return match.group(1).strip() if match else None


def model_licence(model: str, folder: Optional[Path], given: Optional[str]) -> Optional[str]:
    """What the model's licence is: the user's word first, then the model card, then the known table."""
    return given or folder_licence(folder) or KNOWN_LICENCES.get(model.rstrip("/"))


def check_licence(model: str, licence: Optional[str], allow_non_commercial: bool) -> None:
    if is_non_commercial(licence) and not allow_non_commercial:
        raise ImageGenError(f"{model}: its licence ({licence}) is not for commercial use; pass "
                            "--allow-non-commercial (or [edits] allow_non_commercial = true) to use it anyway, and "
                            "the licence is recorded with every edit and shown in the data card")


@dataclass
class EditSettings:
    """What one item's edit call takes besides the image and the instruction."""

    n: int = 4
    seed: int = 0
    steps: Optional[int] = None
    guidance: Optional[float] = None
    size: Optional[str] = None
    candidates: Optional[list[int]] = None
    extra: dict[str, Any] = field(default_factory=dict)

    def ks(self) -> list[int]:
        return list(range(self.n)) if self.candidates is None else sorted(set(self.candidates))


def _to_pil(array: np.ndarray) -> PIL.Image.Image:
    clipped = np.clip(np.asarray(array, dtype=np.float32), 0.0, 1.0)
    return PIL.Image.fromarray(np.round(clipped * 255).astype(np.uint8))


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


class DiffusersEditBackend:
    """Edits with a diffusers edit pipeline (InstructPix2Pix, FLUX.2 klein, FluxKontext, QwenImageEdit, LongCat
    ImageEdit, ...), loaded from a folder or hub id by the pipeline class its model_index.json names."""

    name = "diffusers"

    def __init__(self, model: str | Path, *, licence: Optional[str] = None, allow_non_commercial: bool = False,
                 allow_downloads: bool = False, device: Optional[str] = None, dtype: Optional[str] = None,
                 default_steps: int = DEFAULT_STEPS, default_guidance: float = DEFAULT_GUIDANCE,
                 image_guidance: Optional[float] = None, default_size: Optional[str] = None) -> None:
        from cftools.imagegen.diffusers_backend import check_model_source, model_revision, pick_device, pick_dtype

        self.model = str(model)
        self.folder = check_model_source(self.model, allow_downloads)
        self.licence = model_licence(self.model, self.folder, licence)
        check_licence(self.model, self.licence, allow_non_commercial)
        self.revision = model_revision(self.folder) if self.folder else None
        self.allow_downloads = allow_downloads
        self.device = pick_device(device)
        self.torch_dtype = pick_dtype(self.device, dtype)
        self.default_steps, self.default_guidance = default_steps, default_guidance
        self.image_guidance = image_guidance
        self.default_size = default_size
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
            results.append(EditCandidate(k, _to_pil(array), {
                "backend": self.name, "model": self.model, "revision": self.revision, "licence": self.licence,
                "pipeline": type(self._pipe).__name__, "instruction": instruction, "seed": s, "steps": steps,
                "guidance": guidance, "image_guidance": self.image_guidance, "size": size_text(width, height),
                "scheduler": type(self._pipe.scheduler).__name__, "device": self.device, "dtype": self.dtype,
                "seconds": seconds, "candidate": k}))
        return results

    def close(self) -> None:
        self._pipe = None


def png_bytes(image: PIL.Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


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
            steps, guidance = steps or tiny_edit.TINY_EDIT_STEPS, guidance or tiny_edit.TINY_EDIT_GUIDANCE
            config.setdefault("size", tiny_edit.TINY_EDIT_SIZE)  # its native size: larger is slower, no better
        return DiffusersEditBackend(chosen, licence=licence,
                                    allow_non_commercial=bool(config.get("allow_non_commercial", False)),
                                    allow_downloads=bool(config.get("allow_downloads", False)),
                                    default_size=config.get("size"), **options,
                                    **{k: v for k, v in (("default_steps", steps), ("default_guidance", guidance))
                                       if v is not None})
    if name == "openai":
        from cftools.imagegen.openai_backend import DEFAULT_KEY_ENV

        if not chosen:
            raise ImageGenError("the openai edit backend needs a model: --model NAME or [edits] model")
        licence = model_licence(chosen, None, licence)
        check_licence(chosen, licence, bool(config.get("allow_non_commercial", False)))
        options = {k: config[k] for k in OPENAI_OPTIONS if k in config}
        from cftools.imagegen.openai_edit_backend import OpenAIEditBackend

        return OpenAIEditBackend(model=chosen, base_url=config.get("base_url"),
                                 api_key_env=config.get("api_key_env") or DEFAULT_KEY_ENV,
                                 default_size=config.get("size"), licence=licence, **options)
    raise ImageGenError(f"unknown edit backend {name!r}; use one of {', '.join(EDIT_BACKENDS)}")
