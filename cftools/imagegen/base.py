"""What every image backend shares: the result of one candidate, its provenance, and its failure."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, Union

import PIL.Image

from cftools.errors import CftoolsError

CAUSE = "cause"
EFFECT = "effect"
CONSISTENCY_MODES = ("seed", "img2img")
SIZE_PATTERN = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


class ImageGenError(CftoolsError):
    """A backend that cannot run at all (bad model folder, missing key); one line, never a secret."""


@dataclass
class Provenance:
    """How one image was made; `as_dict()` is what goes into the store beside the image's SHA-256."""

    backend: str
    model: str
    revision: str | None
    prompt: str
    negative_prompt: str | None
    seed: int | None
    steps: int | None
    guidance: float | None
    size: str
    scheduler: str | None
    consistency: str | None
    device: str | None
    dtype: str | None
    seconds: float
    style: str | None = None
    candidate: int = 0
    side: str = CAUSE
    strength: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CandidatePair:
    """Candidate k of a pair: the cause image, the effect image and how each was made."""

    k: int
    cause: PIL.Image.Image
    effect: PIL.Image.Image
    cause_provenance: Provenance
    effect_provenance: Provenance

    @property
    def ok(self) -> bool:
        return True


@dataclass
class CandidateFailure:
    """Candidate k could not be made (API error, invalid base64, NaN image); the run goes on."""

    k: int
    side: str  # "cause", "effect" or "pair" (the call for both failed)
    reason: str
    backend: str
    model: str

    @property
    def ok(self) -> bool:
        return False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


CandidateResult = Union[CandidatePair, CandidateFailure]


@dataclass(frozen=True)
class PairSettings:
    """How the candidates of a pair are drawn; None takes the backend's default (as `EditSettings` for edits)."""

    n: int = 4
    seed: int = 0
    steps: int | None = None
    guidance: float | None = None
    size: str | tuple[int, int] | None = None
    candidates: tuple[int, ...] | None = None  # only these ks (a resumed run's missing ones)

    def ks(self) -> list[int]:
        return list(range(self.n)) if self.candidates is None else sorted(set(self.candidates))


class ImageBackend(Protocol):
    """A text-to-image model behind one interface (see the package docstring for the call)."""

    name: str
    model: str

    def generate_pair(self, cause_prompt: str, effect_prompt: str, *, style: Any = None,
                      settings: PairSettings = PairSettings(), generator_key: str = "") -> list[CandidateResult]: ...

    def close(self) -> None: ...


def parse_size(size: str | tuple[int, int] | None, default: tuple[int, int]) -> tuple[int, int]:
    """'512x768' or (512, 768) -> (width, height); None -> DEFAULT."""
    if size is None:
        return default
    if isinstance(size, tuple):
        return int(size[0]), int(size[1])
    match = SIZE_PATTERN.match(str(size))
    if not match:
        raise ImageGenError(f"size {size!r} is not WIDTHxHEIGHT (e.g. 512x512)")
    return int(match.group(1)), int(match.group(2))


SIZE_GRID = 8  # Stable Diffusion pipelines' latent grid (VAE scale factor 8); the Images APIs' sizes are on it too


def check_size(size: str) -> str:
    """SIZE if it is WIDTHxHEIGHT, both positive multiples of SIZE_GRID; else why not (a command checks it before any
    work, as bad usage)."""
    width, height = parse_size(size, (0, 0))
    if width <= 0 or height <= 0 or width % SIZE_GRID or height % SIZE_GRID:
        raise ImageGenError(f"size {size!r}: width and height must be positive multiples of {SIZE_GRID} "
                            "(e.g. 512x512)")
    return size


def size_text(width: int, height: int) -> str:
    return f"{width}x{height}"


def candidate_seed(generator_key: str, style: str | None, k: int, seed: int = 0) -> int:
    """The seed of candidate k: the same for the cause and the effect of a pair (the siamese property).

    Derived from the pair's key, the style, k and the run's base seed, so a rerun or a resumed run draws the
    same candidate again, and two styles of one pair do not share noise.
    """
    blob = json.dumps([generator_key, style or "", int(k), int(seed)], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:8], "big") >> 1  # fits int64


def image_request_key(backend_id: str, model: str, revision: str | None, prompt: str,
                      negative_prompt: str | None, params: dict[str, Any]) -> str:
    """A cache key for one image request (an identical request may return the stored image, no call)."""
    blob = json.dumps({"backend": backend_id, "model": model, "revision": revision, "prompt": prompt,
                       "negative_prompt": negative_prompt, "params": params},
                      sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
