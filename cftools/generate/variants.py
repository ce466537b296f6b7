"""Prompt variants and models compared by what people made of their drafts (`compare_variants`, for the report).

An arm is the drafts of one generator of one kind drafted with one prompt variant (`generations.prompt_variant`;
NULL is the generator's default template, named "default" here), or with one model. Its acceptance is the share of
its decided drafts that people accepted (accepted as drafted or corrected, or adjudicated to accept: the item ends
`accepted`) of those decided (`accepted` or `rejected`), with a Wilson interval. Two arms of the same kind,
generator and comparison are tested against each other with the two-proportion z-test (the chi-square test of the
2x2 table without continuity correction, which is the same test) and the difference's interval is Newcombe's
hybrid score interval, built from the two arms' Wilson intervals; `better` names an arm only when p < 0.05.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import combinations
from typing import Any, Optional

from sqlalchemy import case, func, select
from sqlmodel import Session

from cftools.annotate.quality import CONFIDENCE, share_with_interval, wilson_interval
from cftools.llm.cost import usage_by
from cftools.llm.prompts import DEFAULT_VARIANT
from cftools.models import ACCEPTED, REJECTED, Generation, Item

SIGNIFICANCE = 0.05
BY_VARIANT, BY_MODEL = "prompt_variant", "model"

DEFINITION = (
    "acceptance = drafts people accepted (accepted or corrected, or adjudicated to accept) / drafts decided "
    "(accepted or rejected), per kind and generator, for each prompt variant ('default' = the generator's default "
    "template) and each model; interval: Wilson score, 95%. Two arms are compared with the two-proportion z-test; "
    "the difference (a minus b) has Newcombe's hybrid score interval, 95%; 'better' names the arm with the higher "
    "acceptance only when p < 0.05. cost_per_accepted = what the arm's drafting calls cost (every attempt; cache "
    "hits free; redos left out; priced with [llm.prices]) / accepted, null when a model has no price or nothing was "
    "accepted. Redone drafts (generate --redo) are in no arm.")


def compare_variants(session: Session, config: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Acceptance per prompt variant and per model (within a kind and generator), cost per accepted item (priced
    with CONFIG, the workspace's [llm] section; none: costs are null), and the pairwise tests (see the module)."""
    counts = decided_counts(session)
    costs = drafting_costs(session, config or {})
    arms = [arm_row(by, kind, generator, name, decided, accepted, costs.get((by, generator, name)))
            for (by, kind, generator, name), (decided, accepted) in sorted(counts.items())]
    comparisons = [comparison_row(a, b) for a, b in arm_pairs(arms)]
    return {"definition": DEFINITION, "arms": arms, "comparisons": comparisons}


def decided_counts(session: Session) -> dict[tuple[str, str, str, str], tuple[int, int]]:
    """(decided, accepted) drafts generated in this store per (by, kind, generator, arm name), for both ways of
    splitting them."""
    decided = func.sum(case((Item.status.in_((ACCEPTED, REJECTED)), 1), else_=0))
    accepted = func.sum(case((Item.status == ACCEPTED, 1), else_=0))
    query = (select(Item.kind, Generation.generator, Generation.prompt_variant, Generation.model, decided, accepted)
             .join(Generation, Generation.id == Item.generation_id)
             .where(Item.origin == "generated")  # not items read back from a release: decided elsewhere
             .where(Item.redo_of.is_(None))  # a redo is drafted from its own template and the people's reasons
             .group_by(Item.kind, Generation.generator, Generation.prompt_variant, Generation.model))
    counts: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for kind, generator, variant, model, n_decided, n_accepted in session.execute(query):
        for key in ((BY_VARIANT, kind, generator, variant or DEFAULT_VARIANT), (BY_MODEL, kind, generator, model)):
            counts[key][0] += int(n_decided or 0)
            counts[key][1] += int(n_accepted or 0)
    return {key: (n, k) for key, (n, k) in counts.items()}


def drafting_costs(session: Session, config: dict[str, Any]) -> dict[tuple[str, str, str], Optional[float]]:
    """What each arm's calls cost, per (by, generator, arm name); None when a model among them has no price."""
    costs: dict[tuple[str, str, str], Optional[float]] = {}
    redo = Generation.params["redo"].as_string()  # a redo's calls are no arm's: its drafts are left out too
    for (generator, model, variant, redone), usage in usage_by(session, config, Generation.prompt_variant,
                                                               redo).items():
        if redone is not None:
            continue
        cost = usage.cost if usage.price is not None else None
        for key in ((BY_VARIANT, generator, variant or DEFAULT_VARIANT), (BY_MODEL, generator, model)):
            known = costs.get(key, 0.0)
            costs[key] = None if known is None or cost is None else known + cost
    return costs


def arm_row(by: str, kind: str, generator: str, name: str, decided: int, accepted: int,
            cost: Optional[float]) -> dict[str, Any]:
    acceptance, interval = share_with_interval(accepted, decided)
    return {"by": by, "kind": kind, "generator": generator, "name": name, "decided": decided, "accepted": accepted,
            "acceptance": acceptance, "interval": interval,
            "cost_per_accepted": round(cost / accepted, 6) if cost is not None and accepted else None}


def arm_pairs(arms: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every two arms of the same comparison, kind and generator that both have decided drafts (in name order)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for arm in arms:
        if arm["decided"]:
            groups[(arm["by"], arm["kind"], arm["generator"])].append(arm)
    return [pair for _, members in sorted(groups.items()) for pair in combinations(members, 2)]


def comparison_row(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    p_value = two_proportion_p(a["accepted"], a["decided"], b["accepted"], b["decided"])
    better = None
    if p_value < SIGNIFICANCE and a["acceptance"] != b["acceptance"]:
        better = a["name"] if a["acceptance"] > b["acceptance"] else b["name"]
    return {"by": a["by"], "kind": a["kind"], "generator": a["generator"], "a": a["name"], "b": b["name"],
            "difference": a["acceptance"] - b["acceptance"],
            "interval": list(difference_interval(a["accepted"], a["decided"], b["accepted"], b["decided"])),
            "p_value": p_value, "better": better}


def two_proportion_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """The two-sided p-value of the pooled two-proportion z-test (as chi-square of the 2x2 table, uncorrected)."""
    from scipy.stats import chi2_contingency

    if (k1 + k2) in (0, n1 + n2):  # both all accepted or both none: no difference to test
        return 1.0
    return float(chi2_contingency([[k1, n1 - k1], [k2, n2 - k2]], correction=False).pvalue)


def difference_interval(k1: int, n1: int, k2: int, n2: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p1 - p2, from the two Wilson intervals."""
    one, two = wilson_interval(k1, n1, confidence), wilson_interval(k2, n2, confidence)
    difference = one.estimate - two.estimate
    low = difference - math.hypot(one.estimate - one.low, two.high - two.estimate)
    high = difference + math.hypot(one.high - one.estimate, two.estimate - two.low)
    return max(-1.0, low), min(1.0, high)
