"""Scores of an evaluation run, per item shape, with 95% bootstrap confidence intervals.

The functions take *outcomes*: one dict per item with its `id`, `kind`, `group` and, per question
asked (`original`, `counterfactual`, ...), a dict with `correct` (bool) and `unknown` (bool: the reply could
not be read; it counts as wrong). Each kind's `summarize` builds its section from these helpers and says which
paper's definition it follows (`cftools/kinds/`).

All accuracies are fractions in [0, 1]; intervals are percentile bootstrap intervals over items
(numpy, fixed seed, 2,000 resamples), paired wherever two numbers come from the same items.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Sequence

if TYPE_CHECKING:  # numpy is imported where it is used, not at `cftools --help`
    import numpy as np


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
TOTAL = "total"


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
    import numpy as np

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
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    if len(data) == 0:
        return Score(None, None, None, 0)
    low, high = bootstrap_ci(data)
    return Score(float(data.mean()), low, high, len(data))


def accuracy(correct: Sequence[bool]) -> Score:
    """Share of questions answered right, with its 95% bootstrap interval."""
    return mean_score([1.0 if c else 0.0 for c in correct])


def exact_accuracy(n_correct: int, n: int) -> Optional[Fraction]:
    """The share of questions answered right (`accuracy`'s value) as an exact fraction, None of no question: the
    parts `cftools release diff` splits a score change into add up exactly."""
    return Fraction(n_correct, n) if n else None


def rate(flags: Sequence[bool]) -> Optional[float]:
    import numpy as np

    return float(np.mean(flags)) if len(flags) else None


def answered(outcome: dict, which: str) -> bool:
    return isinstance(outcome.get(which), dict) and outcome[which].get("correct") is not None


def paired(outcomes: Sequence[dict], a: str, b: str) -> list[dict]:
    return [o for o in outcomes if answered(o, a) and answered(o, b)]


def by_group(outcomes: Iterable[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for outcome in outcomes:
        groups[str(outcome.get("group") or "-")].append(outcome)
    return dict(sorted(groups.items()))


def pair_row(name: str, outcomes: Sequence[dict], a: str, b: str) -> dict[str, Any]:
    import numpy as np

    pairs = paired(outcomes, a, b)
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


def summarize(outcomes: Sequence[dict]) -> dict[str, Any]:
    """All metrics of a run: one section per item kind present, computed by the kind."""
    from cftools.kinds import get_kind

    by_kind: dict[str, list[dict]] = defaultdict(list)
    for outcome in outcomes:
        by_kind[str(outcome.get("kind"))].append(outcome)
    return {name: get_kind(name).hooks.evaluate.summarize(items) for name, items in sorted(by_kind.items())}
