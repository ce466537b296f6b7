"""MuCR's scores: C2E, E2C and Cue accuracy, facets, and the Exp parts of a judged explanation."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from cftools.kinds.mucr.model import TASKS

TASK_LABELS = {"c2e": "C2E", "e2c": "E2C", "cue": "Cue"}


def choice_scores(outcomes: Sequence[dict]) -> dict[str, Any]:
    from cftools.evaluate.metrics import accuracy, answered, rate

    result: dict[str, Any] = {}
    for task in TASKS:
        asked = [o[task] for o in outcomes if answered(o, task)]
        result[task] = accuracy([a["correct"] for a in asked]).as_dict()
        result[f"unknown_{task}"] = rate([bool(a.get("unknown")) for a in asked])
    return result


def facet_groups(outcomes: Sequence[dict], facet: str) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for outcome in outcomes:
        value = (outcome.get("facets") or {}).get(facet)
        if value and value != "-":
            groups.setdefault(str(value), []).append(outcome)
    return groups


def parts_of(exp: dict[str, Any]) -> Optional[dict[str, float]]:
    """A judged explanation's part scores; an outcome holding only three numbers is read as S1, S2, S3."""
    from cftools.kinds.mucr.explanations import PARTS

    if exp.get("parts"):
        return {p: float(exp["parts"][p]) for p in PARTS}
    similarities = exp.get("similarities")
    if similarities and len(similarities) == 3 and all(isinstance(v, (int, float)) for v in similarities):
        return dict(zip(PARTS, map(float, similarities)))
    return None
