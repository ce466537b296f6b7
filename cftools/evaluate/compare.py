"""`cftools eval compare RUN_A RUN_B`'s paired test: the questions both runs answered, overall and per kind, tested
with `cftools.evaluate.paired` (McNemar, the clustered McNemar, the image-clustered bootstrap) and set against the
smallest difference the release can detect at the pair's own discordance and intra-image correlation.

A question is one (item, question) pair with a correctness in both runs (judged questions, MuCR Exp, have none
and are left out). The image a question is about comes from the release's records (the run's config names the
release folder); when that folder is gone every item counts as its own image, and the result says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from cftools.evaluate.paired import ALPHA, POWER, Paired, paired_test

OVERALL = "overall"


def image_of(record: dict[str, Any]) -> str:
    """The image a record's questions are about: its SHA-256 (MuCR: the cause image), else the item itself."""
    data = record.get("data") if isinstance(record.get("data"), dict) else {}
    return str(record.get("image_sha256") or record.get("image") or data.get("cause_image") or f"item:{record['id']}")


def release_images(release: Optional[str]) -> Optional[dict[str, str]]:
    """Item id -> image key from the release folder's records; None when the folder cannot be read."""
    from cftools.release.layout import RECORDS_NAME, load_records

    if not release or not (Path(release) / RECORDS_NAME).is_file():
        return None
    try:
        return {str(r["id"]): image_of(r) for r in load_records(Path(release)) if isinstance(r, dict) and "id" in r}
    except Exception:  # noqa: BLE001 - a damaged release: fall back to one cluster per item, and say so
        return None


def scored(predictions: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(str(p["id"]), str(p["which"])): p for p in predictions if p.get("correct") is not None}


def compare_runs(a: Any, b: Any, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The paired test of runs A and B (EvalResults) overall and per kind, on the questions both answered."""
    left, right = scored(a.predictions), scored(b.predictions)
    shared = sorted(set(left) & set(right))
    images = release_images(a.config.get("release")) or release_images(b.config.get("release"))
    scopes: dict[str, list[tuple[str, str]]] = {OVERALL: shared}
    for key in shared:
        scopes.setdefault(str(left[key].get("kind") or "-"), []).append(key)
    results = {}
    for scope, keys in scopes.items():
        if not keys:
            continue
        pairs = Paired.of([bool(left[k]["correct"]) for k in keys], [bool(right[k]["correct"]) for k in keys],
                          [(images or {}).get(k[0], f"item:{k[0]}") for k in keys])
        results[scope] = paired_test(pairs, resamples, seed)
    return {"questions_a": len(left), "questions_b": len(right), "shared": len(shared),
            "clustered_by": "image" if images is not None else "item (the release folder could not be read)",
            "alpha": ALPHA, "power": POWER, "scopes": results}


def verdict(result: dict[str, Any]) -> str:
    """Whether the observed difference is one the release can detect."""
    if result["mdd"] is None:
        return "the release cannot detect any difference at this discordance"
    if result["within_mdd"]:
        return "within the detectable difference: not reliably detected"
    return "larger than the detectable difference"


def paired_rows(comparison: dict[str, Any]) -> list[list[str]]:
    """One row per scope: n, images, A, B, B − A [95% CI], the three p-values, MDD and the verdict (points)."""
    def pts(value: Optional[float]) -> str:
        return "–" if value is None else f"{100 * value:.1f}"

    rows = []
    for scope, r in comparison["scopes"].items():
        boot = r["bootstrap"]
        mcnemar = r["mcnemar"]
        rows.append([scope, str(r["n"]), str(r["images"]), pts(r["accuracy_a"]), pts(r["accuracy_b"]),
                     f"{100 * r['difference']:+.1f} [{100 * boot['low']:+.1f}, {100 * boot['high']:+.1f}]",
                     f"{mcnemar['p_value']:.3g}{' (exact)' if mcnemar['exact'] else ''}",
                     f"{r['clustered_mcnemar']['p_value']:.3g}", f"{boot['p_value']:.3g}", pts(r["mdd"]), verdict(r)])
    return rows


PAIRED_COLUMNS = ("scope", "questions", "images", "A", "B", "B - A [95% CI]", "McNemar p", "clustered p",
                  "bootstrap p", "MDD", "detectable?")
