"""Two models on the same questions: the paired test, and the smallest difference a release can detect.

Each question asked of both models gives a pair of correctness bits (a, b) and their difference D = b - a in
{-1, 0, 1}; the accuracy difference is the mean of D. Questions about one image are not independent (a model that
misreads the image misreads it for every question), so the tests and the power are clustered by image.

The tests (`paired_test`):
- **McNemar's test** on the b (A wrong, B right) and c (A right, B wrong) discordant questions: chi² = (b − c)² /
  (b + c) with 1 degree of freedom, or, when b + c < EXACT_BELOW, the exact binomial test of b ~ Bin(b + c, 1/2)
  (scipy.stats.binomtest). It treats every question as independent.
- **The clustered McNemar test** of Durkalski, Palesch, Lipsitz & Rust (2003), "Analysis of clustered
  matched-pair data", Statistics in Medicine 22:2417–2428: chi² = (Σ_g S_g)² / Σ_g S_g², where S_g = Σ_{i∈g} D_i
  is image g's sum of differences. With one question per image it is McNemar's statistic.
- **A paired bootstrap clustered by image**: images are drawn with replacement (numpy, seeded), every question of
  a drawn image comes along; the percentile interval of the resampled differences is the CI, and the two-sided
  p-value is the share of resampled differences at least as far from the observed one as the observed one is from
  zero (the bootstrap distribution shifted to the null; Efron & Tibshirani 1993, §16.4).

The minimum detectable difference (`minimum_detectable_difference`): the smallest |δ| that the clustered McNemar
test (two-sided, level α) detects with probability `power`, from Connor's sample-size formula for McNemar's test
(R. J. Connor 1987, "Sample size for testing differences in proportions for the paired-sample design",
Biometrics 43:207–211):

    n = [z_{1−α/2} √ψ + z_{power} √(ψ − δ²)]² / δ²

with ψ = P(discordant) = P(b) + P(c), extended to clusters by the variances of Durkalski's statistic. Per question,
with ρ the intra-image correlation of D and m_w = Σ m_g² / Σ m_g the size-weighted mean number of questions per
image (Kish's design effect, Kish 1965 "Survey Sampling" §5.4: deff = 1 + (m_w − 1) ρ):

    V1 = (ψ − δ²) · deff                   the variance of D under the alternative, per question
    V0 = V1 + δ² · m_w                     the expectation of Σ_g S_g² / n, the test's variance estimate
    δ √n = z_{1−α/2} √V0 + z_{power} √V1   solved for δ (scipy.optimize.brentq)

With one question per image (m_w = 1) V0 = ψ and V1 = ψ − δ²: Connor's formula. `bench/bench_power.py` and
tests/test_preflight.py check by simulation that a difference equal to the MDD is detected in 80% of runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:  # numpy is imported where it is used, not at `cftools --help`
    import numpy as np

ALPHA = 0.05
POWER = 0.80
EXACT_BELOW = 25  # fewer discordant pairs than this: McNemar's exact (binomial) test
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
BOOTSTRAP_CHUNK = 200  # resamples drawn at once (bounds the memory of a 10,000-image release)


@dataclass(frozen=True)
class Paired:
    """Per question: A's and B's correctness, and the image (cluster) the question is about."""

    a: Any  # np.ndarray of bool
    b: Any
    clusters: Any  # np.ndarray of int: the image's index

    @classmethod
    def of(cls, a: Sequence[bool], b: Sequence[bool], images: Sequence[str]) -> "Paired":
        import numpy as np

        _, index = np.unique(np.asarray([str(i) for i in images], dtype=object), return_inverse=True)
        return cls(np.asarray(a, dtype=bool), np.asarray(b, dtype=bool), np.asarray(index, dtype=np.int64))

    @property
    def n(self) -> int:
        return len(self.a)

    @property
    def difference(self) -> Any:
        """D = b - a per question (-1, 0 or 1)."""
        return self.b.astype("int64") - self.a.astype("int64")


def cluster_sums(values: "np.ndarray", clusters: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """(per-cluster sums of VALUES, per-cluster sizes), clusters numbered 0..G-1."""
    import numpy as np

    count = int(clusters.max()) + 1 if len(clusters) else 0
    return (np.bincount(clusters, weights=values, minlength=count),
            np.bincount(clusters, minlength=count).astype(np.float64))


def mcnemar(b: int, c: int) -> dict[str, Any]:
    """McNemar's test on B (A wrong, B right) and C (A right, B wrong): exact below EXACT_BELOW discordant pairs."""
    from scipy import stats

    discordant = b + c
    if discordant == 0:
        return {"b": b, "c": c, "statistic": 0.0, "p_value": 1.0, "exact": True}
    statistic = (b - c) ** 2 / discordant
    if discordant < EXACT_BELOW:
        p_value = float(stats.binomtest(b, discordant, 0.5).pvalue)
        return {"b": b, "c": c, "statistic": statistic, "p_value": p_value, "exact": True}
    return {"b": b, "c": c, "statistic": statistic, "p_value": float(stats.chi2.sf(statistic, 1)), "exact": False}


def clustered_mcnemar(d: "np.ndarray", clusters: "np.ndarray") -> dict[str, Any]:
    """Durkalski et al. (2003): (Σ D)² / Σ_g S_g², chi² with 1 degree of freedom."""
    from scipy import stats

    sums, _ = cluster_sums(d.astype(float), clusters)
    denominator = float((sums ** 2).sum())
    if denominator == 0:
        return {"statistic": 0.0, "p_value": 1.0}
    statistic = float(d.sum()) ** 2 / denominator
    return {"statistic": statistic, "p_value": float(stats.chi2.sf(statistic, 1))}


def clustered_bootstrap(d: "np.ndarray", clusters: "np.ndarray", resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED, confidence: float = 1 - ALPHA) -> dict[str, Any]:
    """The accuracy difference's percentile interval and two-sided p-value, resampling images (seeded)."""
    import numpy as np

    sums, sizes = cluster_sums(d.astype(float), clusters)
    observed = float(d.mean()) if len(d) else 0.0
    if len(sums) == 0:
        return {"difference": None, "low": None, "high": None, "p_value": None, "resamples": 0}
    rng = np.random.default_rng(seed)
    draws = []
    for start in range(0, resamples, BOOTSTRAP_CHUNK):
        rows = min(BOOTSTRAP_CHUNK, resamples - start)
        counts = rng.multinomial(len(sums), np.full(len(sums), 1.0 / len(sums)), size=rows)
        draws.append((counts @ sums) / (counts @ sizes))
    stats = np.concatenate(draws)
    tail = (1 - confidence) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    far = int((np.abs(stats - observed) >= abs(observed) - 1e-12).sum()) if observed else resamples
    return {"difference": observed, "low": float(low), "high": float(high),
            "p_value": min(1.0, (far + 1) / (resamples + 1)), "resamples": resamples}


def intra_cluster_correlation(d: "np.ndarray", clusters: "np.ndarray") -> Optional[float]:
    """The correlation of D between two questions of one image (pairwise estimator, clipped to [0, 1]); None
    when no image has two questions or D does not vary."""
    centred = d.astype(float) - d.mean()
    sums, sizes = cluster_sums(centred, clusters)
    pairs = float((sizes ** 2).sum() - len(d))
    variance = float((centred ** 2).mean())
    if pairs <= 0 or variance == 0:
        return None
    within = float((sums ** 2).sum() - (centred ** 2).sum())  # Σ_g Σ_{i≠j} e_i e_j
    return min(1.0, max(0.0, within / (pairs * variance)))


def weighted_cluster_size(sizes: Sequence[float]) -> float:
    """m_w = Σ m² / Σ m: the mean number of questions per image, seen from a question (Kish)."""
    total = float(sum(sizes))
    return float(sum(m * m for m in sizes)) / total if total else 1.0


def design_effect(m_w: float, rho: float) -> float:
    return 1.0 + (m_w - 1.0) * rho


def power_of(delta: float, n: int, psi: float, rho: float = 0.0, m_w: float = 1.0, alpha: float = ALPHA) -> float:
    """The clustered McNemar test's power to detect DELTA (see the module docstring)."""
    from scipy import stats

    if n <= 0 or psi <= 0 or delta <= 0:
        return 0.0
    deff = design_effect(m_w, rho)
    v1 = max((psi - delta ** 2) * deff, 0.0)
    v0 = v1 + delta ** 2 * m_w
    if v1 == 0:
        return 1.0
    z_alpha = stats.norm.ppf(1 - alpha / 2)
    return float(stats.norm.cdf((delta * n ** 0.5 - z_alpha * v0 ** 0.5) / v1 ** 0.5))


def minimum_detectable_difference(n: int, psi: float, rho: float = 0.0, m_w: float = 1.0, alpha: float = ALPHA,
                                  power: float = POWER) -> Optional[float]:
    """The smallest accuracy difference (a fraction) the clustered McNemar test detects with POWER at level ALPHA
    over N questions with discordance PSI, intra-image correlation RHO and weighted image size M_W; None when no
    difference up to PSI (the largest possible) reaches that power."""
    from scipy.optimize import brentq

    if n <= 0 or psi <= 0:
        return None
    high = min(psi, psi ** 0.5)
    if power_of(high, n, psi, rho, m_w, alpha) < power:
        return None
    return float(brentq(lambda delta: power_of(delta, n, psi, rho, m_w, alpha) - power, 1e-9, high, xtol=1e-7))


def observed_design(pairs: Paired) -> dict[str, Any]:
    """What a stored pair of runs says about the design: discordance ψ, intra-image correlation ρ, m_w."""
    d = pairs.difference
    _, sizes = cluster_sums(d.astype(float), pairs.clusters)
    return {"psi": float((d != 0).mean()) if len(d) else 0.0,
            "rho": intra_cluster_correlation(d, pairs.clusters) or 0.0, "m_w": weighted_cluster_size(sizes),
            "n": len(d), "images": int(len(sizes))}


def paired_test(pairs: Paired, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, Any]:
    """Everything `eval compare` says of one set of paired questions: accuracies, McNemar, the clustered McNemar,
    the clustered bootstrap, and the minimum detectable difference at the observed design."""
    d = pairs.difference
    design = observed_design(pairs)
    mdd = minimum_detectable_difference(len(d), design["psi"], design["rho"], design["m_w"])
    bootstrap = clustered_bootstrap(d, pairs.clusters, resamples, seed)
    difference = bootstrap["difference"]
    return {
        "n": pairs.n, "images": design["images"],
        "accuracy_a": float(pairs.a.mean()) if pairs.n else None,
        "accuracy_b": float(pairs.b.mean()) if pairs.n else None,
        "difference": difference,
        "mcnemar": mcnemar(int(((~pairs.a) & pairs.b).sum()), int((pairs.a & ~pairs.b).sum())),
        "clustered_mcnemar": clustered_mcnemar(d, pairs.clusters),
        "bootstrap": bootstrap,
        "design": design,
        "mdd": mdd,
        "within_mdd": None if mdd is None or difference is None else abs(difference) < mdd,
    }
