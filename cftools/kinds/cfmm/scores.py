"""CFMM scores as the paper reports them (Eyes Can Deceive, Tables 2-3, metrics from MME).

Per type: acc_b (the basic question right), acc_c (the counterfactual question right), acc+ (both questions of
the pair right). The paper's totals are **the sum of the six per-type percentages** (full score 600 for each of
acc_b, acc_c and acc+), so every type weighs the same whatever its size; beside them we report the plain overall
accuracy (every pair weighs the same). Random choice between two options scores 50 / 50 / 25 per type, so
300 / 300 / 150 summed.

Intervals are 95% percentile bootstrap intervals: over pairs for a type and for the overall accuracy; for the
summed totals, pairs are resampled within each type (the types' sizes are fixed by design) and the six resampled
percentages summed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from cftools.evaluate.metrics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, TOTAL, by_group, pair_row

if TYPE_CHECKING:  # numpy is imported where it is used, not at `cftools --help`
    import numpy as np

SUMMED = "sum of types"
RANDOM = "random"
RANDOM_RATES = {"acc_b": 0.5, "acc_c": 0.5, "acc_plus": 0.25}
METRICS = ("acc_b", "acc_c", "acc_plus")


def type_row(name: str, outcomes: Sequence[dict]) -> dict[str, Any]:
    row = pair_row(name, outcomes, "original", "counterfactual")
    return {"type": name, "n": row["n"], "acc_b": row["original"], "acc_c": row["counterfactual"],
            "acc_plus": row["both"], "unknown_b": row["unknown_original"], "unknown_c": row["unknown_counterfactual"]}


def correctness(outcomes: Sequence[dict]) -> dict[str, np.ndarray]:
    """Per metric: one 0/1 value per pair with both questions answered."""
    import numpy as np

    pairs = [o for o in outcomes if isinstance(o.get("original"), dict) and isinstance(o.get("counterfactual"), dict)]
    basic = np.array([1.0 if o["original"]["correct"] else 0.0 for o in pairs])
    cf = np.array([1.0 if o["counterfactual"]["correct"] else 0.0 for o in pairs])
    return {"acc_b": basic, "acc_c": cf, "acc_plus": basic * cf}


def summed_score(per_type: dict[str, dict[str, np.ndarray]], metric: str) -> dict[str, Any]:
    """The sum over types of each type's accuracy (a fraction per type: 6.0 = 600 points), with a stratified
    bootstrap interval."""
    import numpy as np

    present = {t: values[metric] for t, values in per_type.items() if len(values[metric])}
    if not present:
        return {"value": None, "low": None, "high": None, "n": 0, "types": 0}
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    total = np.zeros(BOOTSTRAP_RESAMPLES)
    for values in present.values():
        index = rng.integers(0, len(values), size=(BOOTSTRAP_RESAMPLES, len(values)))
        total += values[index].mean(axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(total, [alpha, 1.0 - alpha])
    return {"value": float(sum(v.mean() for v in present.values())), "low": float(low), "high": float(high),
            "n": int(sum(len(v) for v in present.values())), "types": len(present)}


def summarize(outcomes: Sequence[dict], types: Sequence[str]) -> dict[str, Any]:
    groups = by_group(outcomes)
    ordered = [t for t in types if t in groups] + [t for t in groups if t not in types]
    rows = [type_row(t, groups[t]) for t in ordered]
    overall = type_row(TOTAL, outcomes)
    per_type = {t: correctness(groups[t]) for t in ordered}
    summed = {metric: summed_score(per_type, metric) for metric in METRICS}
    n_types = max((s["types"] for s in summed.values()), default=0)
    random_row = {"type": RANDOM, "n": None, **{m: {"value": v, "low": None, "high": None} for m, v in
                                                 RANDOM_RATES.items()}}
    random_summed = {m: {"value": v * n_types, "low": None, "high": None} for m, v in RANDOM_RATES.items()}
    return {"rows": rows + [overall], "summed": summed, "summed_types": n_types, "random": random_row,
            "random_summed": random_summed,
            "definition": "summed = the sum of the per-type percentages (full score 100 per type: 600 for six "
                          "types), as the CFMM paper reports its totals; total = plain accuracy over all pairs"}


def table_rows(section: dict[str, Any], fmt: Any) -> list[list[str]]:
    def dash(value: Any) -> str:
        return "–" if value is None else str(value)

    rows = [[r["type"], dash(r["n"]), fmt.pct(r["acc_b"]), fmt.rate(r["unknown_b"]), fmt.pct(r["acc_c"]),
             fmt.rate(r["unknown_c"]), fmt.pct(r["acc_plus"])] for r in section["rows"]]
    random_row = section.get("random")
    if random_row:
        rows.append([f"{RANDOM} (chance)", "–", fmt.pct(random_row["acc_b"]), "–", fmt.pct(random_row["acc_c"]), "–",
                     fmt.pct(random_row["acc_plus"])])
    summed = section.get("summed")
    if summed:
        full = 100 * section.get("summed_types", 0)
        rows.append([f"{SUMMED} (of {full})", dash(summed["acc_b"]["n"]), fmt.pct(summed["acc_b"]), "–",
                     fmt.pct(summed["acc_c"]), "–", fmt.pct(summed["acc_plus"])])
        chance = section.get("random_summed") or {}
        rows.append([f"{RANDOM} summed (of {full})", "–", fmt.pct(chance.get("acc_b")), "–",
                     fmt.pct(chance.get("acc_c")), "–", fmt.pct(chance.get("acc_plus"))])
    return rows
