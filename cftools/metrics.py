"""Scores of an evaluation run, per item shape, with 95% bootstrap confidence intervals.

Every function takes *outcomes*: one dict per item with its `id`, `kind`, `group` and, per question
asked (`original`, `counterfactual`, or for MuCR `c2e`, `e2c`, `cue`, `exp`), a dict with `correct`
(bool) and `unknown` (bool: the reply could not be read; it counts as wrong). Exp outcomes hold
`similarities` (the judge's 0–10 score against each of the three reference explanations) instead.

- C-VQA (`cvqa_metrics`): accuracy on the original and on the counterfactual question per group and
  overall, and the drop (original minus counterfactual, a paired difference) — the layout of the C-VQA
  paper's Table 1.
- CFMM (`cfmm_metrics`): acc_b (basic question right), acc_c (counterfactual question right) and acc+
  (both right) per type and in total — the layout of the CFMM paper's Tables 2 and 3.
- MuCR (`mucr_metrics`): C2E, E2C and Cue accuracies (a choice among 4) and Exp, the weighted judge
  similarity (`exp_score`: weights 0.25 / 0.25 / 0.5 applied to the references in their stored order).

All accuracies are fractions in [0, 1]; intervals are percentile bootstrap intervals over items
(numpy, fixed seed, 2,000 resamples), paired wherever two numbers come from the same items.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
EXP_WEIGHTS = (0.25, 0.25, 0.5)
TOTAL = "total"
MUCR_TASKS = ("c2e", "e2c", "cue")


@dataclass(frozen=True)
class Score:
    value: Optional[float]
    low: Optional[float]
    high: Optional[float]
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bootstrap_ci(values: Sequence[float], statistic: Callable[[np.ndarray], np.ndarray] | None = None,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                 confidence: float = CONFIDENCE) -> tuple[Optional[float], Optional[float]]:
    """Percentile bootstrap interval of the mean (or of `statistic` over rows) of per-item values."""
    data = np.asarray(values, dtype=np.float64)
    if len(data) == 0:
        return None, None
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(data), size=(resamples, len(data)))
    samples = data[index]
    stats = statistic(samples) if statistic else samples.mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(low), float(high)


def mean_score(values: Sequence[float]) -> Score:
    data = np.asarray(values, dtype=np.float64)
    if len(data) == 0:
        return Score(None, None, None, 0)
    low, high = bootstrap_ci(data)
    return Score(float(data.mean()), low, high, len(data))


def accuracy(correct: Sequence[bool]) -> Score:
    """Share of questions answered right, with its 95% bootstrap interval."""
    return mean_score([1.0 if c else 0.0 for c in correct])


def rate(flags: Sequence[bool]) -> Optional[float]:
    return float(np.mean(flags)) if len(flags) else None


def _answered(outcome: dict, which: str) -> bool:
    return isinstance(outcome.get(which), dict) and outcome[which].get("correct") is not None


def _paired(outcomes: Sequence[dict], a: str, b: str) -> list[dict]:
    return [o for o in outcomes if _answered(o, a) and _answered(o, b)]


def _by_group(outcomes: Iterable[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for outcome in outcomes:
        groups[str(outcome.get("group") or "-")].append(outcome)
    return dict(sorted(groups.items()))


def _pair_row(name: str, outcomes: Sequence[dict], a: str, b: str) -> dict[str, Any]:
    pairs = _paired(outcomes, a, b)
    ca = np.array([1.0 if o[a]["correct"] else 0.0 for o in pairs])
    cb = np.array([1.0 if o[b]["correct"] else 0.0 for o in pairs])
    both = ca * cb
    diff = ca - cb
    drop = Score(float(diff.mean()) if len(diff) else None, *bootstrap_ci(diff), len(diff))
    return {
        "group": name, "n": len(pairs),
        a: accuracy(ca.astype(bool)).as_dict(), b: accuracy(cb.astype(bool)).as_dict(),
        "both": mean_score(both).as_dict(), "drop": drop.as_dict(),
        f"unknown_{a}": rate([bool(o[a].get("unknown")) for o in pairs]),
        f"unknown_{b}": rate([bool(o[b].get("unknown")) for o in pairs]),
    }


def cvqa_metrics(outcomes: Sequence[dict]) -> dict[str, Any]:
    """Per group and in total: original and counterfactual accuracy, their drop, unknown rates."""
    rows = [_pair_row(group, items, "original", "counterfactual") for group, items in _by_group(outcomes).items()]
    rows.append(_pair_row(TOTAL, outcomes, "original", "counterfactual"))
    return {"rows": rows}


def cfmm_metrics(outcomes: Sequence[dict]) -> dict[str, Any]:
    """Per type and in total: acc_b (basic), acc_c (counterfactual), acc+ (both right of the pair)."""
    rows = []
    for group, items in [*_by_group(outcomes).items(), (TOTAL, list(outcomes))]:
        row = _pair_row(group, items, "original", "counterfactual")
        rows.append({"type": group, "n": row["n"], "acc_b": row["original"], "acc_c": row["counterfactual"],
                     "acc_plus": row["both"], "unknown_b": row["unknown_original"],
                     "unknown_c": row["unknown_counterfactual"]})
    return {"rows": rows}


def exp_score(similarities: Sequence[float], weights: Sequence[float] = EXP_WEIGHTS) -> float:
    """MuCR Exp: the judge's 0–10 similarities to the three references, weighted 0.25 / 0.25 / 0.5."""
    if len(similarities) != len(weights):
        raise ValueError(f"Exp needs {len(weights)} similarities (one per reference), got {len(similarities)}")
    for s in similarities:
        if not 0 <= s <= 10:
            raise ValueError(f"a similarity is on a 0–10 scale, got {s}")
    return float(sum(w * s for w, s in zip(weights, similarities)))


def mucr_metrics(outcomes: Sequence[dict], weights: Sequence[float] = EXP_WEIGHTS) -> dict[str, Any]:
    """C2E, E2C and Cue accuracy (a choice among 4) and the mean Exp score (0–10), each with its interval."""
    result: dict[str, Any] = {}
    for task in MUCR_TASKS:
        answered = [o[task] for o in outcomes if _answered(o, task)]
        result[task] = accuracy([a["correct"] for a in answered]).as_dict()
        result[f"unknown_{task}"] = rate([bool(a.get("unknown")) for a in answered])
    judged = [o["exp"]["similarities"] for o in outcomes
              if isinstance(o.get("exp"), dict) and o["exp"].get("similarities") is not None]
    result["exp"] = mean_score([exp_score(s, weights) for s in judged]).as_dict()
    result["exp_not_judged"] = sum(1 for o in outcomes if isinstance(o.get("exp"), dict)) - len(judged)
    return result


def summarize(outcomes: Sequence[dict]) -> dict[str, Any]:
    """All metrics of a run, per item kind present."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for outcome in outcomes:
        by_kind[outcome.get("kind") or "cvqa"].append(outcome)
    summary: dict[str, Any] = {}
    if by_kind.get("cvqa"):
        summary["cvqa"] = cvqa_metrics(by_kind["cvqa"])
    if by_kind.get("cfmm"):
        summary["cfmm"] = cfmm_metrics(by_kind["cfmm"])
    if by_kind.get("mucr"):
        summary["mucr"] = mucr_metrics(by_kind["mucr"])
    return summary
