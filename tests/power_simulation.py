"""Two scripted models with a known accuracy difference on a release of clustered questions: the simulation that
checks the power figures of `cftools.evaluate.paired` (tests/test_preflight.py, bench/bench_power.py)."""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np


def simulated_differences(sizes: np.ndarray, psi: float, rho: float, delta: float, reps: int,
                          rng: np.random.Generator) -> np.ndarray:
    """REPS releases of per-question differences D (reps x questions): D is +1 with probability (ψ+δ)/2, −1 with
    (ψ−δ)/2, and the questions of one image (SIZES: questions per image, contiguous) share one draw of D with
    probability √ρ each, so two of them correlate by ρ."""
    clusters = np.repeat(np.arange(len(sizes)), sizes)
    cuts = np.array([(psi - delta) / 2, 1 - (psi + delta) / 2])  # below the first: -1; above the second: +1

    def draw(shape: tuple[int, int]) -> np.ndarray:
        return np.searchsorted(cuts, rng.random(shape)).astype(np.int8) - 1

    d = draw((reps, len(clusters)))
    if rho > 0:
        d = np.where(rng.random((reps, len(clusters))) < rho ** 0.5, draw((reps, len(sizes)))[:, clusters], d)
    return d.astype(np.int64)


def clustered_mcnemar_p(d: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Durkalski's clustered McNemar p-value of every row of D at once (the images contiguous, SIZES each)."""
    from scipy import stats

    sums = np.add.reduceat(d, np.concatenate([[0], np.cumsum(sizes)[:-1]]), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        statistic = np.nan_to_num(d.sum(axis=1) ** 2 / (sums ** 2).sum(axis=1))
    return stats.chi2.sf(statistic, 1)


def simulated_detection_rate(sizes: np.ndarray, psi: float, rho: float, delta: float, reps: int, seed: int,
                             test: Optional[Callable[[np.ndarray, np.ndarray], np.ndarray]] = None,
                             alpha: float = 0.05) -> float:
    """The share of REPS simulated releases in which TEST (default: the clustered McNemar test) finds the
    difference at level ALPHA."""
    d = simulated_differences(sizes, psi, rho, delta, reps, np.random.default_rng(seed))
    p_values = (test or clustered_mcnemar_p)(d, sizes)
    return float((p_values < alpha).mean())
