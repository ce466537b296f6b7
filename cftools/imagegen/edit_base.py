"""What every edit backend shares: a candidate, a failure, the settings of one call, the seeds, model licences
(see `cftools.imagegen.edits`)."""

from __future__ import annotations

import io
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import PIL.Image

from cftools.errors import Hint
from cftools.imagegen.base import ImageGenError
from cftools.ingest.licences import is_non_commercial

EDIT_BACKENDS = ("diffusers", "openai")
EMBEDDED = "embedded"
# Apache-2.0 instruction-based edit models diffusers loads (FLUX.2 [klein] 4B since 0.36, LongCat-Image-Edit and
# Qwen-Image-Edit-2509 since 0.37 / 0.35); the recommended real default is the first.
DEFAULT_EDIT_MODEL = "black-forest-labs/FLUX.2-klein-4B"
# The licences their model cards state (checked against the cards and the publishers' pages; the model card of a
# local folder, when it has one, wins): FLUX.2 [klein] 4B apache-2.0 and 9B the FLUX Non-Commercial License (the
# black-forest-labs/flux2 README's model table); LongCat-Image-Edit apache-2.0 (its model card); Qwen-Image-Edit-2509
# apache-2.0; timbrooks/instruct-pix2pix mit (its model card); FLUX.1 Kontext [dev] the FLUX.1 [dev] Non-Commercial
# License (its model card).
KNOWN_LICENCES = {
    "black-forest-labs/FLUX.2-klein-4B": "Apache-2.0",
    "meituan-longcat/LongCat-Image-Edit": "Apache-2.0",
    "Qwen/Qwen-Image-Edit-2509": "Apache-2.0",
    "timbrooks/instruct-pix2pix": "MIT",
    "black-forest-labs/FLUX.1-Kontext-dev": "FLUX.1 [dev] Non-Commercial License",
    "black-forest-labs/FLUX.2-klein-9B": "FLUX Non-Commercial License",
}
DEFAULT_STEPS = 28
DEFAULT_GUIDANCE = 4.0
FRONT_MATTER_LICENCE = re.compile(r"^license:\s*['\"]?([^'\"\n]+)", re.MULTILINE)
# A card whose licence is not an SPDX one says `license: other` and names it in `license_name:` (the FLUX.1 [dev]
# models: flux-1-dev-non-commercial-license).
FRONT_MATTER_LICENCE_NAME = re.compile(r"^license_name:\s*['\"]?([^'\"\n]+)", re.MULTILINE)
MIN_EDIT_SIDE = 32  # px: under it an edit shows nothing (an API's 1x1 reply, a broken decoder)
ASPECT_TOLERANCE = 0.02  # an edit's width/height may differ this much (relative) from the request's: rounding


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
    """Candidate k could not be made (API error, invalid base64, NaN image, a degenerate or wrong-size image);
    the run goes on."""

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


def degenerate_reason(image: PIL.Image.Image, wanted: Optional[tuple[int, int]]) -> Optional[str]:
    """Why IMAGE cannot be an edit candidate (under MIN_EDIT_SIDE px a side, one colour, or of another aspect than
    WANTED, the size asked for or else the original's), or None when it can be one. A backend's reply of another
    size but the same aspect is kept: the checks compare it with the original resized."""
    width, height = image.size
    if min(width, height) < MIN_EDIT_SIDE:
        return f"the backend returned a {width}x{height} px image (under {MIN_EDIT_SIDE} px a side): not an edit"
    if all(low == high for low, high in image.convert("RGB").getextrema()):
        return f"the backend returned a blank {width}x{height} px image (one colour): not an edit"
    if wanted is not None:
        aspect, wanted_aspect = width / height, wanted[0] / wanted[1]
        if abs(aspect / wanted_aspect - 1) > ASPECT_TOLERANCE:
            return (f"the backend returned a {width}x{height} px image for {wanted[0]}x{wanted[1]} px (another "
                    "aspect): not an edit of the original")
    return None


def checked_candidate(candidate: EditCandidate, wanted: Optional[tuple[int, int]]) -> EditResult:
    """CANDIDATE, or the failure that refuses it when its image is degenerate (see `degenerate_reason`)."""
    reason = degenerate_reason(candidate.image, wanted)
    if reason is None:
        return candidate
    return EditFailure(candidate.k, reason, str(candidate.provenance.get("backend")),
                       str(candidate.provenance.get("model")))


def candidate_seeds(ks: list[int], seed: int = 0) -> list[int]:
    """The seed of candidate k: `seed + k`, the same for every item (see the module docstring)."""
    return [int(seed) + int(k) for k in ks]


def folder_licence(folder: Optional[Path]) -> Optional[str]:
    """The `license:` of a pipeline folder's model card (the Hugging Face README front matter), if any."""
    card = Path(folder) / "README.md" if folder else None
    if card is None or not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    front = text.split("---", 2)[1] if text.count("---") >= 2 else ""
    match, named = FRONT_MATTER_LICENCE.search(front), FRONT_MATTER_LICENCE_NAME.search(front)
    licence = match.group(1).strip() if match else None
    if named and (licence is None or licence.lower() == "other"):
        return named.group(1).strip()
    return licence


def model_licence(model: str, folder: Optional[Path], given: Optional[str]) -> Optional[str]:
    """What the model's licence is: its model card's, else the known table's, else the user's word (GIVEN: `[edits]
    licence` / `--licence`). What the model says of itself wins: a licence typed in cftools.toml must not turn a
    non-commercial model into one that is loaded, and released, as another licence's."""
    return folder_licence(folder) or known_licence(model) or given


def known_licence(model: str) -> Optional[str]:
    """The table's licence of a hub id, or of a local folder named as a known model (…/FLUX.1-Kontext-dev)."""
    model = model.rstrip("/")
    if model in KNOWN_LICENCES:
        return KNOWN_LICENCES[model]
    by_name = {known.rsplit("/", 1)[-1].lower(): licence for known, licence in KNOWN_LICENCES.items()}
    return by_name.get(model.replace("\\", "/").rsplit("/", 1)[-1].lower())


def check_licence(model: str, licence: Optional[str], allow_non_commercial: bool) -> None:
    if is_non_commercial(licence) and not allow_non_commercial:
        raise ImageGenError(f"{model}: its licence ({licence}) is not for commercial use", hint=Hint(
            "{message}; pass {allow} (or [edits] allow_non_commercial = true) to use it anyway, and the licence is "
            "recorded with every edit and shown in the data card", allow="--allow-non-commercial"))


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


def png_bytes(image: PIL.Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


