"""Checks of what an edit is and where it is. They rank an item's edit candidates for the annotators (best first)
and never reject (a degenerate image is refused earlier, at the backend: `edit_base.degenerate_reason`).

The difference map is, per pixel, the largest absolute difference over the RGB channels between the edited image
and the original (resized to the edit's size); a pixel has changed when it differs by more than `DIFF_LEVEL` grey
levels. The changed region is those pixels, grown by `GROW` pixels (an edit's soft edges belong to it). The block
measures cut the picture into a `GRID` x `GRID` grid: a block has changed when its mean difference is above
`SPREAD_LEVEL`; it stands out as a local edit when its mean difference left after the best global colour transform
(`colour_fitted`) is above `LOCAL_LEVEL`, `LOCAL_TEXTURE` x the original's mean gradient there and `LOCAL_MEDIAN` x
the median block's.

| code                      | flags                                                                                 |
|---------------------------|---------------------------------------------------------------------------------------|
| `edit_identical`          | the edited pixels hash (SHA-256) to the original's: nothing was edited                 |
| `edit_misaligned`         | at least `GLOBAL_SPREAD` of the blocks changed and a shift (phase correlation) and     |
|                           | zoom (1.0 to `MAX_ZOOM`) leave under `ALIGN_GAIN` of the grey difference: the picture  |
|                           | was moved or cropped and resized, not edited                                           |
| `edit_global_change`      | at least `GLOBAL_SPREAD` of the blocks changed, under `MIN_LOCAL_SHARE` of them stand  |
|                           | out and the grey correlation with the original is at least `MIN_STRUCTURE`: a JPEG     |
|                           | re-save, blur, resize, brightness/contrast/gamma/colour or noise change, not an edit   |
| `edit_region_too_small`   | under `MIN_CHANGED_SHARE` of the pixels changed: the edit can hardly show anything     |
| `edit_region_too_large`   | over `MAX_CHANGED_SHARE` of the pixels changed: the picture was replaced               |
| `edit_not_preserved`      | outside the changed region the mean SSIM (scikit-image, 7x7 windows) is under          |
|                           | `MIN_SSIM_OUTSIDE`: the rest of the picture was altered too                            |
| `edit_flat_patch`         | inside the changed region (shrunk by `ERODE` px) the mean grey gradient is under       |
|                           | `FLAT_LEVEL`, under `FLAT_TEXTURE` x the original's there and under `FLAT_TEXTURE` x  |
|                           | the edited image's in a ring of `SURROUND` px around it, that ring textured (at least  |
|                           | `FLAT_AROUND`): a fill in a textured picture, not an object                            |
| `edit_answer_not_flipped` | the original question about the edited image is not answered with the counterfactual  |
|                           | answer, or about the original image not with the original answer (an eval answerer)   |
| `edit_answer_changed`     | an irrelevant edit (one the question does not depend on): the original question about |
|                           | the edited image is not answered with the original answer (an eval answerer)          |

A misaligned or global change is the whole verdict; a region too small or too large is not measured further.
A candidate's ranking score is the mean of its SSIM outside the changed region (1.0 when nothing is outside) and
the texture it kept (`EditReport.texture_kept`), minus `FLAG_PENALTY` per flag, so flagged candidates sort last and
a textured edit ranks above a flat one; ties go to the lower k. The thresholds were chosen on the labelled table of
tests/edit_table.py (bench/edit_table.py prints it and sweeps them; docs/check.md states the precision and recall).
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
EDIT_GLOBAL_CHANGE = "edit_global_change"
EDIT_MISALIGNED = "edit_misaligned"
EDIT_FLAT_PATCH = "edit_flat_patch"
EDIT_CODES = (EDIT_IDENTICAL, EDIT_REGION_TOO_SMALL, EDIT_REGION_TOO_LARGE, EDIT_NOT_PRESERVED,
              EDIT_ANSWER_NOT_FLIPPED, EDIT_ANSWER_CHANGED, EDIT_GLOBAL_CHANGE, EDIT_MISALIGNED, EDIT_FLAT_PATCH)

DIFF_LEVEL = 32  # grey levels (0-255): re-encoding and resampling noise stay under it, a drawn change is above
GROW = 2  # pixels the changed region is grown by before "outside" is measured
MIN_CHANGED_SHARE = 0.002  # of the pixels: a 64x64 image needs about 8 changed pixels
MAX_CHANGED_SHARE = 0.5  # VisMin-style minimal change: an object or attribute, not half the picture
MIN_SSIM_OUTSIDE = 0.9
GRID = 16  # the block measures cut the picture into GRID x GRID blocks
SPREAD_LEVEL = 2.0  # grey levels: a block whose mean difference is above it has changed at all
GLOBAL_SPREAD = 0.2  # of the blocks: a change that reaches more of them is spread over the picture...
LOCAL_LEVEL = 24.0  # ...unless a block stands out: its mean difference (after the best global colour transform)
LOCAL_TEXTURE = 1.5  # is above LOCAL_LEVEL, above LOCAL_TEXTURE x its texture (what blur and re-encoding move) and
LOCAL_MEDIAN = 4.0  # above LOCAL_MEDIAN x the median block difference (what noise moves)
MIN_LOCAL_SHARE = 0.01  # of the blocks (2 of a 16 x 16 grid are under it): none stand out -> a global change
FIT_LEVEL = 8.0  # grey levels: a pixel the colour transform explains to within this is kept for its refit
FIT_PIXELS = 8192
MIN_STRUCTURE = 0.5  # grey correlation with the original: under it the picture was replaced, not changed
ALIGN_GAIN = 0.5  # a shift or zoom that leaves under this share of the difference: the edit is misaligned
MAX_ZOOM = 1.3  # zooms tried, 1.0 to MAX_ZOOM in steps of ZOOM_STEP (a crop of up to about 11 % a side, resized
ZOOM_STEP = 0.02  # back), on the grey picture reduced to ALIGN_SIZE px a side at most
ALIGN_SIZE = 128
ERODE = 3  # pixels the changed region is shrunk by before its texture is measured (its border is an edge)
FLAT_TEXTURE = 0.25  # the edit's texture under this share of the original's there...
FLAT_LEVEL = 0.75  # ...and under this many grey levels of gradient: a flat patch
SURROUND = 8  # pixels of the ring around the changed region whose texture a flat patch is set against
# ...and that ring's texture at least this (grey levels): on the table's photos a grey box's ring has 4.1 or more,
# the example drawings' (flat shapes, examples/edits/hand-made) 2.0 or less
FLAT_AROUND = 3.0
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
    texture_kept: float = 1.0  # the edited region's texture over the original's there (1.0 at most)
    measures: dict = field(default_factory=dict)  # what the checks measured (bench/edit_table.py prints it)

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.flags]

    def as_dict(self) -> dict:
        return {"k": self.k, "score": round(self.score, 4), "changed_share": round(self.changed_share, 4),
                "ssim_outside": None if self.ssim_outside is None else round(self.ssim_outside, 4),
                "flags": [asdict(f) for f in self.flags]}


@dataclass(frozen=True)
class Thresholds:
    """The checks' thresholds (the module's defaults, chosen on tests/edit_table.py with bench/edit_table.py)."""

    min_share: float = MIN_CHANGED_SHARE
    max_share: float = MAX_CHANGED_SHARE
    min_ssim: float = MIN_SSIM_OUTSIDE
    global_spread: float = GLOBAL_SPREAD
    min_local_share: float = MIN_LOCAL_SHARE
    min_structure: float = MIN_STRUCTURE
    align_gain: float = ALIGN_GAIN
    flat_texture: float = FLAT_TEXTURE
    flat_level: float = FLAT_LEVEL
    flat_around: float = FLAT_AROUND


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


def grey(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def block_means(values: np.ndarray, grid: int = GRID) -> np.ndarray:
    """VALUES averaged over a GRID x GRID grid of blocks (fewer on a picture under GRID px a side)."""
    height, width = values.shape
    rows, cols = min(grid, height), min(grid, width)
    bh, bw = height // rows, width // cols
    return values[:bh * rows, :bw * cols].reshape(rows, bh, cols, bw).mean(axis=(1, 3))


def gradient(values: np.ndarray) -> np.ndarray:
    from scipy.ndimage import sobel

    return np.hypot(sobel(values, 0), sobel(values, 1)) / 8.0


def colour_fitted(original: np.ndarray, edited: np.ndarray, rounds: int = 2) -> np.ndarray:
    """The original under the global colour transform (quadratic in R, G, B, least squares) closest to EDITED:
    brightness, contrast, gamma, hue and channel shifts are such transforms, an edited object is not. Each of
    ROUNDS refits on the pixels the last fit explains (so that a large edited object does not bend the fit); the
    fit reads at most FIT_PIXELS pixels, evenly spaced."""
    rgb = original.reshape(-1, 3).astype(np.float64) / 255.0
    features = np.hstack([rgb, rgb ** 2, np.ones((len(rgb), 1))])
    target = edited.reshape(-1, 3).astype(np.float64)
    step = max(1, len(rgb) // FIT_PIXELS)
    sample_x, sample_y = features[::step], target[::step]
    kept = np.ones(len(sample_x), dtype=bool)
    for _ in range(rounds + 1):
        x = sample_x[kept]  # normal equations: 7 unknowns, a tiny ridge against flat pictures
        coefficients = np.linalg.solve(x.T @ x + 1e-6 * np.eye(x.shape[1]), x.T @ sample_y[kept])
        residual = np.abs(sample_x @ coefficients - sample_y).max(axis=1)
        kept = residual <= max(FIT_LEVEL, 3.0 * float(np.median(residual)))
        if kept.sum() < features.shape[1] * 4:
            break
    return (features @ coefficients).reshape(original.shape)


def spread_measures(before: np.ndarray, after: np.ndarray) -> dict:
    """How far the difference is spread over the picture, whether some block stands out as a local edit, and how
    much of the picture's structure is kept."""
    blocks = block_means(difference_map(before, after).astype(np.float64))
    residual = block_means(np.abs(colour_fitted(before, after) - after).max(axis=2))
    texture = block_means(gradient(grey(before)))
    standout = ((residual > LOCAL_LEVEL) & (residual > LOCAL_TEXTURE * texture)
                & (residual > LOCAL_MEDIAN * float(np.median(residual))))
    a, b = grey(before).ravel(), grey(after).ravel()
    structure = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0
    return {"spread": float((blocks > SPREAD_LEVEL).mean()), "local": float(standout.mean()),
            "structure": structure}


def zoomed(values: np.ndarray, zoom: float) -> np.ndarray:
    """VALUES' centre 1/ZOOM cropped and resized back to its size (a crop-and-resize)."""
    height, width = values.shape
    box_w, box_h = width / zoom, height / zoom
    left, top = (width - box_w) / 2, (height - box_h) / 2
    image = PIL.Image.fromarray(values.astype(np.float32), mode="F")
    return np.asarray(image.resize((width, height), PIL.Image.Resampling.BILINEAR,
                                   box=(left, top, left + box_w, top + box_h)), dtype=np.float64)


def reduced(values: np.ndarray, side: int = ALIGN_SIZE) -> np.ndarray:
    height, width = values.shape
    scale = side / max(height, width)
    if scale >= 1:
        return values
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    image = PIL.Image.fromarray(values.astype(np.float32), mode="F")
    return np.asarray(image.resize(size, PIL.Image.Resampling.BOX), dtype=np.float64)


def alignment(before: np.ndarray, after: np.ndarray, enough: float = ALIGN_GAIN) -> dict:
    """The zoom (1.0 to MAX_ZOOM) and shift that bring the original closest to the edited image, and the share of
    the mean grey difference (inside a margin) that is left once they are undone; zooms stop at the first that
    leaves under ENOUGH."""
    from scipy.ndimage import shift as shifted
    from skimage.registration import phase_cross_correlation

    a, b = reduced(grey(before)), reduced(grey(after))
    scale = max(before.shape[:2]) / max(a.shape)
    margin = max(2, min(a.shape) // 16)
    inner = (slice(margin, -margin), slice(margin, -margin))
    best = {"zoom": 1.0, "shift": 0.0, "left": 1.0}
    if min(a.shape) < 4 * margin or a.std() == 0 or b.std() == 0:  # a blank picture has nothing to align
        return best
    raw = float(np.abs(a - b)[inner].mean())
    if raw == 0:
        return best
    for zoom in np.arange(1.0, MAX_ZOOM + 1e-9, ZOOM_STEP):
        source = a if zoom == 1.0 else zoomed(a, zoom)
        offset, _, _ = phase_cross_correlation(b, source, upsample_factor=2, normalization=None)
        moved = shifted(source, offset, order=1, mode="nearest")
        left = float(np.abs(moved - b)[inner].mean()) / raw
        if left < best["left"]:
            best = {"zoom": round(float(zoom), 2), "shift": float(np.hypot(*offset)) * scale, "left": left}
        if best["left"] < enough:
            break
    return best


def texture_measures(before: np.ndarray, after: np.ndarray, region: np.ndarray) -> dict:
    """The mean grey gradient inside the changed region (its border left out) of the edited image and of the
    original there, and of the edited image in a ring of SURROUND pixels around the region (its border left out)."""
    from scipy.ndimage import binary_dilation, binary_erosion

    inside = binary_erosion(region, iterations=ERODE) if region.any() else region
    if not inside.any():
        return {"texture_edited": None, "texture_original": None, "texture_around": None}
    ring = binary_dilation(region, iterations=ERODE + SURROUND) & ~binary_dilation(region, iterations=ERODE)
    edited = gradient(grey(after))
    return {"texture_edited": float(edited[inside].mean()),
            "texture_original": float(gradient(grey(before))[inside].mean()),
            "texture_around": float(edited[ring].mean()) if ring.any() else None}


def check_edit(original: PIL.Image.Image, edited: PIL.Image.Image, k: int = 0, *,
               min_share: float = MIN_CHANGED_SHARE, max_share: float = MAX_CHANGED_SHARE,
               min_ssim: float = MIN_SSIM_OUTSIDE, diff_level: int = DIFF_LEVEL,
               thresholds: Optional[Thresholds] = None) -> EditReport:
    """The image checks of one candidate (the answer check is `answer_flip_flag`, it needs a model). THRESHOLDS,
    when given, replace MIN_SHARE, MAX_SHARE and MIN_SSIM."""
    after = pixels(edited)
    before = pixels(original, (after.shape[1], after.shape[0]))
    limits = thresholds or Thresholds(min_share=min_share, max_share=max_share, min_ssim=min_ssim)
    report = EditReport(k)
    if pixel_hash(before) == pixel_hash(after):
        report.flags.append(EditFlag(EDIT_IDENTICAL, "the edited image is identical to the original (same pixel "
                                     "hash)"))
        return report
    region = changed_region(difference_map(before, after), diff_level)
    report.changed_share = float(region.mean())
    report.ssim_outside = ssim_outside(before, after, region)
    report.measures = {"changed_share": report.changed_share, "ssim_outside": report.ssim_outside,
                       **spread_measures(before, after)}
    if report.measures["spread"] >= limits.global_spread:  # a local edit is not a moved picture: spare the search
        report.measures.update(alignment(before, after, limits.align_gain))
    report.measures.update(texture_measures(before, after, region))
    report.flags = judge(report.measures, limits)
    edited_tex, original_tex = report.measures["texture_edited"], report.measures["texture_original"]
    if edited_tex is not None and original_tex:
        report.texture_kept = min(1.0, edited_tex / original_tex)
    return report


def judge(m: dict, limits: Thresholds) -> list[EditFlag]:
    """The flags that measures M (`check_edit`'s) earn under LIMITS: a misaligned or global change is the whole
    verdict (the region measures mean nothing then)."""
    moved = m.get("zoom", 1.0) > 1.0 or m.get("shift", 0.0) >= 0.5
    if m["spread"] >= limits.global_spread and moved and m.get("left", 1.0) < limits.align_gain:
        return [EditFlag(EDIT_MISALIGNED, f"the picture moved ({m['shift']:.1f} px shift, zoom {m['zoom']:g}); "
                         f"undoing that leaves {m['left']:.0%} of the difference", m["left"])]
    if (m["spread"] >= limits.global_spread and m["local"] < limits.min_local_share
            and m["structure"] >= limits.min_structure):
        return [EditFlag(EDIT_GLOBAL_CHANGE, f"the change is spread over {m['spread']:.0%} of the picture at low "
                         "amplitude and no region stands out (a re-encoding, blur, resize, colour or noise change, "
                         "not an edit)", m["spread"])]
    flags = []
    if m["changed_share"] < limits.min_share:
        flags.append(EditFlag(EDIT_REGION_TOO_SMALL, f"{m['changed_share']:.2%} of the pixels changed "
                              f"(under {limits.min_share:.2%})", m["changed_share"]))
    elif m["changed_share"] > limits.max_share:
        flags.append(EditFlag(EDIT_REGION_TOO_LARGE, f"{m['changed_share']:.0%} of the pixels changed "
                              f"(over {limits.max_share:.0%}): not a minimal edit", m["changed_share"]))
    if flags:  # nothing to measure inside a region this small; "outside" is what little a replacement left
        return flags
    if m["ssim_outside"] is not None and m["ssim_outside"] < limits.min_ssim:
        flags.append(EditFlag(EDIT_NOT_PRESERVED, f"outside the edited region the image changed too (SSIM "
                              f"{m['ssim_outside']:.3f} < {limits.min_ssim:g})", m["ssim_outside"]))
    edited_tex, original_tex = m.get("texture_edited"), m.get("texture_original")
    around = m.get("texture_around")
    # flat against what was there AND against what surrounds it: a grey box on a photograph, not a flat drawing's
    # shape recoloured or its background filled in where a shape was
    if (edited_tex is not None and edited_tex < limits.flat_level
            and edited_tex < limits.flat_texture * original_tex
            and (around is None or (around >= limits.flat_around and edited_tex < limits.flat_texture * around))):
        flags.append(EditFlag(EDIT_FLAT_PATCH, f"the edited region is flat (gradient {edited_tex:.1f} grey levels "
                              f"against {original_tex:.1f} in the original there): a fill, not an object",
                              edited_tex))
    return flags


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
        preserved = 1.0 if report.ssim_outside is None else report.ssim_outside
        report.score = (preserved + report.texture_kept) / 2 - FLAG_PENALTY * len(report.flags)
    return sorted(reports, key=lambda r: (-r.score, r.k))
