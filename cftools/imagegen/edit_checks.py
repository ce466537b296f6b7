"""Checks where the edit is. They rank an item's edit candidates for the annotators (best first) and never reject.

The difference map is, per pixel, the largest absolute difference over the RGB channels between the edited image
and the original (resized to the edit's size); a pixel has changed when it differs by more than `DIFF_LEVEL` grey
levels. The changed region is those pixels, grown by `GROW` pixels (an edit's soft edges belong to it).

| code                      | flags                                                                                 |
|---------------------------|---------------------------------------------------------------------------------------|
| `edit_identical`          | the edited pixels hash (SHA-256) to the original's: nothing was edited                 |
| `edit_region_too_small`   | under `MIN_CHANGED_SHARE` of the pixels changed: the edit can hardly show anything     |
| `edit_region_too_large`   | over `MAX_CHANGED_SHARE` of the pixels changed: a global change, not a minimal edit    |
| `edit_not_preserved`      | outside the changed region the mean SSIM (scikit-image, 7x7 windows) is under          |
|                           | `MIN_SSIM_OUTSIDE`: the rest of the picture was altered too                            |
| `edit_answer_not_flipped` | the original question about the edited image is not answered with the counterfactual  |
|                           | answer, or about the original image not with the original answer (an eval answerer)   |
| `edit_answer_changed`     | an irrelevant edit (one the question does not depend on): the original question about |
|                           | the edited image is not answered with the original answer (an eval answerer)          |

A candidate's ranking score is its SSIM outside the changed region (1.0 when nothing is outside) minus
`FLAG_PENALTY` per flag, so flagged candidates sort last; ties go to the lower k.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np
import PIL.Image

EDIT_IDENTICAL = "edit_identical"
EDIT_REGION_TOO_SMALL = "edit_region_too_small"
EDIT_REGION_TOO_LARGE = "edit_region_too_large"
EDIT_NOT_PRESERVED = "edit_not_preserved"
EDIT_ANSWER_NOT_FLIPPED = "edit_answer_not_flipped"
EDIT_ANSWER_CHANGED = "edit_answer_changed"
EDIT_CODES = (EDIT_IDENTICAL, EDIT_REGION_TOO_SMALL, EDIT_REGION_TOO_LARGE, EDIT_NOT_PRESERVED,
              EDIT_ANSWER_NOT_FLIPPED, EDIT_ANSWER_CHANGED)

DIFF_LEVEL = 32  # grey levels (0-255): re-encoding and resampling noise stay under it, a drawn change is above
GROW = 2  # pixels the changed region is grown by before "outside" is measured
MIN_CHANGED_SHARE = 0.002  # of the pixels: a 64x64 image needs about 8 changed pixels
MAX_CHANGED_SHARE = 0.5  # VisMin-style minimal change: an object or attribute, not half the picture
MIN_SSIM_OUTSIDE = 0.9
FLAG_PENALTY = 100.0


@dataclass(frozen=True)
class EditFlag:
    code: str
    reason: str
    value: Optional[float] = None


@dataclass
class EditReport:
    k: int
    changed_share: float = 0.0
    ssim_outside: Optional[float] = None
    flags: list[EditFlag] = field(default_factory=list)
    score: float = 0.0

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.flags]

    def as_dict(self) -> dict:
        return {"k": self.k, "score": round(self.score, 4), "changed_share": round(self.changed_share, 4),
                "ssim_outside": None if self.ssim_outside is None else round(self.ssim_outside, 4),
                "flags": [asdict(f) for f in self.flags]}


def pixels(image: PIL.Image.Image, size: Optional[tuple[int, int]] = None) -> np.ndarray:
    rgb = image.convert("RGB")
    if size is not None and rgb.size != size:
        rgb = rgb.resize(size, PIL.Image.Resampling.LANCZOS)
    return np.asarray(rgb, dtype=np.uint8)


def pixel_hash(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes() + str(array.shape).encode()).hexdigest()


def difference_map(original: np.ndarray, edited: np.ndarray) -> np.ndarray:
    """Per pixel, the largest absolute channel difference (0-255)."""
    return np.abs(original.astype(np.int16) - edited.astype(np.int16)).max(axis=2)


def changed_region(diff: np.ndarray, level: int = DIFF_LEVEL, grow: int = GROW) -> np.ndarray:
    from scipy.ndimage import binary_dilation

    changed = diff > level
    return binary_dilation(changed, iterations=grow) if grow and changed.any() else changed


def ssim_outside(original: np.ndarray, edited: np.ndarray, region: np.ndarray) -> Optional[float]:
    """The mean SSIM (scikit-image's map, 7x7 windows, all three channels) over the pixels outside REGION; None
    when nothing is outside or the image is smaller than a window."""
    from skimage.metrics import structural_similarity

    outside = ~region
    if not outside.any() or min(original.shape[:2]) < 7:
        return None
    _, full = structural_similarity(original, edited, channel_axis=2, data_range=255, full=True)
    return float(full.mean(axis=2)[outside].mean())


def check_edit(original: PIL.Image.Image, edited: PIL.Image.Image, k: int = 0, *,
               min_share: float = MIN_CHANGED_SHARE, max_share: float = MAX_CHANGED_SHARE,
               min_ssim: float = MIN_SSIM_OUTSIDE, diff_level: int = DIFF_LEVEL) -> EditReport:
    """The image checks of one candidate (the answer check is `answer_flip_flag`, it needs a model)."""
    after = pixels(edited)
    before = pixels(original, (after.shape[1], after.shape[0]))
    report = EditReport(k)
    if pixel_hash(before) == pixel_hash(after):
        report.flags.append(EditFlag(EDIT_IDENTICAL, "the edited image is identical to the original (same pixel "
                                     "hash)"))
        return report
    region = changed_region(difference_map(before, after), diff_level)
    report.changed_share = float(region.mean())
    if report.changed_share < min_share:
        report.flags.append(EditFlag(EDIT_REGION_TOO_SMALL, f"{report.changed_share:.2%} of the pixels changed "
                                     f"(under {min_share:.2%})", report.changed_share))
    elif report.changed_share > max_share:
        report.flags.append(EditFlag(EDIT_REGION_TOO_LARGE, f"{report.changed_share:.0%} of the pixels changed "
                                     f"(over {max_share:.0%}): not a minimal edit", report.changed_share))
    report.ssim_outside = ssim_outside(before, after, region)
    if report.ssim_outside is not None and report.ssim_outside < min_ssim:
        report.flags.append(EditFlag(EDIT_NOT_PRESERVED, f"outside the edited region the image changed too (SSIM "
                                     f"{report.ssim_outside:.3f} < {min_ssim:g})", report.ssim_outside))
    return report


def answer_flip_flag(on_edited: Optional[str], on_original: Optional[str], counterfactual_answer: str,
                     original_answer: str, answer_type: Optional[str] = None) -> Optional[EditFlag]:
    """The flag when the original question's answers do not flip: ON_EDITED (the reply about the edited image)
    must read as the counterfactual answer, ON_ORIGINAL as the original one. A reply that cannot be read counts as
    not flipped (the reader returns unknown, never a guess)."""
    from cftools.answers import answers_match

    edited_ok = answers_match(on_edited, counterfactual_answer, answer_type)
    original_ok = on_original is None or answers_match(on_original, original_answer, answer_type)
    if edited_ok and original_ok:
        return None
    wrong = []
    if not edited_ok:
        wrong.append(f"about the edited image the answer is {on_edited!r}, not the counterfactual "
                     f"{counterfactual_answer!r}")
    if not original_ok:
        wrong.append(f"about the original image the answer is {on_original!r}, not {original_answer!r}")
    return EditFlag(EDIT_ANSWER_NOT_FLIPPED, "; ".join(wrong))


def answer_kept_flag(on_edited: Optional[str], on_original: Optional[str], original_answer: str,
                     answer_type: Optional[str] = None) -> Optional[EditFlag]:
    """The flag when an irrelevant edit changes the answer: ON_EDITED and ON_ORIGINAL must both read as the
    original answer (a reply that cannot be read counts as changed)."""
    from cftools.answers import answers_match

    wrong = [f"about the {which} image the answer is {reply!r}, not the original {original_answer!r}"
             for which, reply in (("edited", on_edited), ("original", on_original))
             if not (reply is None and which == "original") and not answers_match(reply, original_answer, answer_type)]
    return EditFlag(EDIT_ANSWER_CHANGED, "; ".join(wrong)) if wrong else None


def rank_edits(reports: Sequence[EditReport]) -> list[EditReport]:
    """REPORTS scored and sorted best first (see the module docstring)."""
    for report in reports:
        base = 1.0 if report.ssim_outside is None else report.ssim_outside
        report.score = base - FLAG_PENALTY * len(report.flags)
    return sorted(reports, key=lambda r: (-r.score, r.k))
