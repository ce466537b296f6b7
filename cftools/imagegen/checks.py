"""Automatic checks on image candidates. They rank candidates for the annotators and never reject on their own.

| code                  | flags                                                                                  |
|-----------------------|----------------------------------------------------------------------------------------|
| `blank_image`         | a near-uniform image (the grey-level standard deviation is under `blank_std`)          |
| `duplicate_candidate` | a candidate whose perceptual hash is within `duplicate_distance` bits of an earlier one |
|                       | of the same prompt (the earlier one stays unflagged)                                    |
| `pair_inconsistent`   | cause k and effect k whose perceptual hashes differ by more than `pair_distance` bits:  |
|                       | the subject or composition changed between the two                                      |

Optional text-image agreement: a `ClipScorer` on a local CLIP folder gives each image its CLIP score against its
description (100 x cosine similarity, floored at 0). A candidate's ranking score is the mean CLIP score of its
two images (0 without a scorer) minus `FLAG_PENALTY` per flag, so flagged candidates sort last.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import PIL.Image

from cftools.imagegen.base import CAUSE, EFFECT, ImageGenError

if TYPE_CHECKING:  # numpy is imported where it is used, not at `cftools --help`
    import imagehash
    import numpy as np

BLANK_IMAGE = "blank_image"
DUPLICATE_CANDIDATE = "duplicate_candidate"
PAIR_INCONSISTENT = "pair_inconsistent"

BLANK_STD = 4.0  # grey levels (0-255): a flat fill with JPEG noise stays under it, a photograph is far above
DUPLICATE_DISTANCE = 5  # bits of a 64-bit pHash: re-encodes and tiny shifts stay under it
PAIR_DISTANCE = 24  # bits: unrelated images sit near 32, a siamese pair well below
FLAG_PENALTY = 100.0


@dataclass(frozen=True)
class CandidateFlag:
    code: str
    reason: str
    side: str  # "cause", "effect" or "pair"
    value: float


@dataclass
class CandidateReport:
    k: int
    flags: list[CandidateFlag] = field(default_factory=list)
    clip_cause: float | None = None
    clip_effect: float | None = None
    score: float = 0.0

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.flags]


def grey_std(image: PIL.Image.Image) -> float:
    import numpy as np

    return float(np.asarray(image.convert("L"), dtype=np.float32).std())


def perceptual_hash(image: PIL.Image.Image) -> imagehash.ImageHash:
    # imported here: `cftools check` lists and runs the edit checks through this package, and a core install
    # (no images extra, no imagehash) must still check its items' text
    import imagehash

    return imagehash.phash(image.convert("RGB"))


def blank_image(image: PIL.Image.Image, side: str = CAUSE, blank_std: float = BLANK_STD) -> CandidateFlag | None:
    std = grey_std(image)
    if std >= blank_std:
        return None
    return CandidateFlag(BLANK_IMAGE, f"the {side} image is near-uniform (grey-level spread {std:.1f} < {blank_std:g})",
                         side, std)


def duplicate_candidates(images: Sequence[PIL.Image.Image], ks: Sequence[int] | None = None, side: str = CAUSE,
                         duplicate_distance: int = DUPLICATE_DISTANCE) -> dict[int, CandidateFlag]:
    """Candidate k -> its flag when its image is (nearly) the same as an earlier candidate's of the same prompt."""
    ks = list(range(len(images))) if ks is None else list(ks)
    hashes = [perceptual_hash(image) for image in images]
    flags: dict[int, CandidateFlag] = {}
    for j in range(len(hashes)):
        for i in range(j):
            distance = hashes[j] - hashes[i]
            if distance < duplicate_distance:
                flags[ks[j]] = CandidateFlag(
                    DUPLICATE_CANDIDATE, f"the {side} image of candidate {ks[j]} duplicates candidate {ks[i]}'s "
                    f"(perceptual-hash distance {distance} < {duplicate_distance})", side, float(distance))
                break
    return flags


def pair_inconsistent(cause: PIL.Image.Image, effect: PIL.Image.Image,
                      pair_distance: int = PAIR_DISTANCE) -> CandidateFlag | None:
    distance = perceptual_hash(cause) - perceptual_hash(effect)
    if distance <= pair_distance:
        return None
    return CandidateFlag(PAIR_INCONSISTENT, f"the cause and effect images differ too much for one subject "
                         f"(perceptual-hash distance {distance} > {pair_distance})", "pair", float(distance))


class ClipScorer:
    """CLIP scores from a local CLIP folder (a CLIPModel with its processor): 100 x cosine, floored at 0."""

    def __init__(self, folder: str | Path, device: str = "cpu") -> None:
        from transformers import AutoProcessor, CLIPModel

        self.folder = Path(folder)
        if not (self.folder / "config.json").is_file():
            raise ImageGenError(f"{self.folder}: not a CLIP model folder (no config.json)")
        try:
            self.model = CLIPModel.from_pretrained(str(self.folder), local_files_only=True).to(device).eval()
            self.processor = AutoProcessor.from_pretrained(str(self.folder), local_files_only=True)
        except Exception as exc:  # a folder of another model, missing weights or processor files
            first_line = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ImageGenError(f"{self.folder}: cannot be loaded as a CLIP model ({type(exc).__name__}: "
                                f"{first_line})") from None
        self.device = device

    def score(self, images: Sequence[PIL.Image.Image], texts: Sequence[str]) -> list[float]:
        """The CLIP score of image i against text i."""
        import torch

        if not images:
            return []
        inputs = self.processor(text=list(texts), images=[im.convert("RGB") for im in images], return_tensors="pt",
                                padding=True, truncation=True)
        with torch.inference_mode():
            out = self.model(**{k: v.to(self.device) for k, v in inputs.items()})
        image_embeds = torch.nn.functional.normalize(out.image_embeds.float(), dim=-1)
        text_embeds = torch.nn.functional.normalize(out.text_embeds.float(), dim=-1)
        cosine = (image_embeds * text_embeds).sum(-1)
        return [max(0.0, 100.0 * float(c)) for c in cosine]


@dataclass(frozen=True)
class CandidateThresholds:
    """Where the candidate flags start (see the constants above)."""

    blank_std: float = BLANK_STD
    duplicate_distance: int = DUPLICATE_DISTANCE
    pair_distance: int = PAIR_DISTANCE


def check_candidates(causes: Sequence[PIL.Image.Image], effects: Sequence[PIL.Image.Image], *,
                     ks: Sequence[int] | None = None, cause_text: str | None = None, effect_text: str | None = None,
                     scorer: ClipScorer | None = None,
                     thresholds: CandidateThresholds = CandidateThresholds()) -> list[CandidateReport]:
    """Flags and a ranking score for the candidates of one pair (cause i and effect i are candidate ks[i]).

    Returns the reports best first. CLIP scores need a scorer and both descriptions.
    """
    if len(causes) != len(effects):
        raise ValueError(f"{len(causes)} cause images but {len(effects)} effect images")
    ks = list(range(len(causes))) if ks is None else list(ks)
    reports = {k: CandidateReport(k) for k in ks}
    for side, images in ((CAUSE, causes), (EFFECT, effects)):
        for k, image in zip(ks, images):
            flag = blank_image(image, side, thresholds.blank_std)
            if flag:
                reports[k].flags.append(flag)
        for k, flag in duplicate_candidates(images, ks, side, thresholds.duplicate_distance).items():
            reports[k].flags.append(flag)
    for k, cause, effect in zip(ks, causes, effects):
        flag = pair_inconsistent(cause, effect, thresholds.pair_distance)
        if flag:
            reports[k].flags.append(flag)
    if scorer is not None and cause_text is not None and effect_text is not None:
        cause_scores = scorer.score(causes, [cause_text] * len(causes))
        effect_scores = scorer.score(effects, [effect_text] * len(effects))
        for k, c, e in zip(ks, cause_scores, effect_scores):
            reports[k].clip_cause, reports[k].clip_effect = c, e
    for report in reports.values():
        agreement = [s for s in (report.clip_cause, report.clip_effect) if s is not None]
        report.score = (sum(agreement) / len(agreement) if agreement else 0.0) - FLAG_PENALTY * len(report.flags)
    return sorted(reports.values(), key=lambda r: (-r.score, r.k))
