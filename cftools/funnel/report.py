"""The report's JSON twin (`cftools report --json`): the funnel, cost per accepted item, why items die, the redo
counts, acceptance over time (in all and per kind), and the sections other parts compute (check calibration,
prompt variants). People appear only as keyed pseudonyms, texts from them
with any email or local path replaced (`cftools.boundary`)."""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Optional

from cftools.boundary import Boundary
from cftools.checks.calibration import check_calibration, low_precision
from cftools.checks.edits import edit_codes
from cftools.funnel.facts import STAGE_MEANINGS, STAGES, CallCost, ItemFacts, StoreFacts, Verdict, read_facts
from cftools.generate.variants import compare_variants
from cftools.judgments import ADJUDICATE
from cftools.models import NEEDS_ADJUDICATION
from cftools.progress import ProgressCallback, no_progress

BY_GROUP, BY_GENERATOR, BY_EDITS = "group", "generator", "edit_backend"
FUNNEL_BY = (BY_GROUP, BY_GENERATOR, BY_EDITS)  # the funnel's tables: per kind and group, generator, edit backend
EXAMPLES = 3  # examples shown per reason
DECIDED = ("accepted", "corrected", "rejected")


@dataclass
class Report:
    """The JSON twin and the facts the page draws its drill-down from."""

    data: dict[str, Any]
    facts: StoreFacts
    tables: dict[str, dict[str, list[ItemFacts]]]  # per FUNNEL_BY: each row's items, by the row's name


@contextmanager
def paused_collection() -> Iterator[None]:
    """The cyclic garbage collector off while a report is built: it makes millions of small objects and no cycles,
    and collecting them again and again took half its time at 100,000 items."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def build_report(workspace: Any, boundary: Boundary, progress: ProgressCallback = no_progress) -> Report:
    """The report of WORKSPACE's store."""
    facts = read_facts(workspace.store, workspace.section("llm"), progress)
    items = facts.items
    tables = {by: rows_of(items, by) for by in FUNNEL_BY}
    people = Released(boundary)
    data = {
        "items": len(items),
        "stages": list(STAGES),
        "definition": STAGE_MEANINGS,
        "inputs": {"source_questions": facts.source_questions, "source_questions_drafted": facts.sources_drafted},
        "funnel": {**{by: funnel_rows(tables[by], by, facts) for by in FUNNEL_BY}, "total": funnel_cell_counts(items)},
        "cost": {by: cost_rows(facts, by, tables[by]) for by in (BY_GROUP, BY_GENERATOR)},
        "deaths": {"check_codes": check_deaths(items), "people_reasons": people_reasons(items, people),
                   "comments": comments(items, people), "hot_spots": hot_spots(tables)},
        "redo": redo_counts(items),
        "acceptance_over_time": acceptance_over_time(items),
        "acceptance_over_time_by_kind": {kind: acceptance_over_time(members)
                                         for kind, members in sorted(items_by_kind(items).items())},
    }
    with workspace.store.session() as session:
        data["calibration"] = check_calibration(session, low_precision_below=low_precision(workspace))
        data["variants"] = compare_variants(session, config=workspace.section("llm"))
    return Report(boundary.released(data), facts, tables)  # a check's reason or a group's name may hold a path or an email


def row_name(item: ItemFacts, by: str) -> str:
    return {BY_GROUP: item.group_row, BY_GENERATOR: item.generator, BY_EDITS: item.edit_backend}[by]


def rows_of(items: Iterable[ItemFacts], by: str) -> dict[str, list[ItemFacts]]:
    rows: dict[str, list[ItemFacts]] = defaultdict(list)
    for item in items:
        rows[row_name(item, by)].append(item)
    return dict(sorted(rows.items()))


def funnel_cell_counts(items: list[ItemFacts]) -> dict[str, Any]:
    """Counts per stage, per check code, each stage's share of the ingested items, and the acceptance of the items
    people decided (accepted as drafted or corrected, over accepted, corrected and rejected)."""
    reached = Counter(stage for item in items for stage in item.stages)
    counts = {stage: reached[stage] for stage in STAGES}
    by_code = Counter(code for item in items for code in item.flags)
    total = counts["ingested"]
    decided = sum(counts[s] for s in DECIDED)
    return {"counts": counts, "shares": {s: (round(n / total, 4) if total else None) for s, n in counts.items()},
            "flagged_by_code": dict(sorted(by_code.items())), "decided": decided,
            "acceptance": round((counts["accepted"] + counts["corrected"]) / decided, 4) if decided else None}


class Released:
    """People and their texts as they may leave (`Boundary`): each person's pseudonym computed once."""

    def __init__(self, boundary: Boundary) -> None:
        self.pseudonym: Callable[[str], str] = lru_cache(maxsize=None)(boundary.pseudonym)
        self.boundary = boundary

    def text(self, value: Optional[str]) -> Optional[str]:
        return self.boundary.released_text(value) if value else value


@dataclass
class Tally:
    """How often one reason was given, and its first EXAMPLES examples."""

    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, example: Callable[[], dict[str, Any]]) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example())


def most_frequent(tallies: dict[str, Tally], name: str) -> list[dict[str, Any]]:
    return [{name: key, "count": tally.count, "examples": tally.examples}
            for key, tally in sorted(tallies.items(), key=lambda kv: (-kv[1].count, kv[0]))]


def funnel_rows(rows: dict[str, list[ItemFacts]], by: str, facts: Optional[StoreFacts] = None) -> list[dict[str, Any]]:
    out = []
    for name, members in rows.items():
        row: dict[str, Any] = {"name": name}
        if by == BY_GROUP:
            row.update(kind=members[0].kind, group=members[0].group)
        elif by == BY_GENERATOR and facts is not None and name in facts.generators:
            row.update(facts.generators[name].as_dict())
        out.append({**row, **funnel_cell_counts(members)})
    return out


def cost_rows(facts: StoreFacts, by: str, rows: dict[str, list[ItemFacts]]) -> list[dict[str, Any]]:
    """Tokens, money and people's time per row (BY kind and group or generator), in total and per accepted item
    (accepted or corrected)."""
    calls: dict[str, CallCost] = defaultdict(CallCost)
    for (group_row, generator), cost in facts.costs.items():
        calls[group_row if by == BY_GROUP else generator].merge(cost)
    out = []
    for name in sorted(set(rows) | set(calls)):
        members, cost = rows.get(name, []), calls.get(name, CallCost())
        accepted = sum(bool({"accepted", "corrected"} & item.stages) for item in members)
        seconds = sum(item.people_seconds for item in members)
        tokens = cost.prompt_tokens + cost.completion_tokens
        out.append({"name": name, "items": len(members), "accepted": accepted, "calls": cost.calls,
                    "prompt_tokens": cost.prompt_tokens, "completion_tokens": cost.completion_tokens,
                    "money": round(cost.money, 6) if cost.money is not None else None, "priced": cost.money is not None,
                    "people_seconds": round(seconds, 3),
                    "tokens_per_accepted": per(tokens, accepted),
                    "money_per_accepted": per(cost.money, accepted),
                    "people_seconds_per_accepted": per(seconds, accepted)})
    return out


def per(amount: Optional[float], count: int) -> Optional[float]:
    return round(amount / count, 6) if amount is not None and count else None


# ---------------------------------------------------------------- why items die


def dead(item: ItemFacts, holds_nothing: frozenset[str] = frozenset(edit_codes())) -> bool:
    """Rejected by people, or still held by a check no person waived (an edit check ranks the item's edited images
    and never holds it: `cftools.checks.runner.text_codes`)."""
    return "rejected" in item.stages or (item.status == "draft" and bool(set(item.flags) - item.waived - holds_nothing))


def check_deaths(items: list[ItemFacts]) -> list[dict[str, Any]]:
    """Per check code (most frequent first): items it flagged, how many of them died, examples with the reason."""
    flagged: dict[str, list[ItemFacts]] = defaultdict(list)
    for item in items:
        for code in item.flags:
            flagged[code].append(item)
    out = []
    for code, members in sorted(flagged.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        died = [item for item in members if dead(item)]
        out.append({"code": code, "flagged": len(members), "died": len(died),
                    "examples": [{"item": item.key, "reason": item.flags[code]} for item in (died or members)[:EXAMPLES]]})
    return out


def judgment_reasons(row: Verdict) -> list[str]:
    """What a judgment says against its draft, as reasons a reader can count."""
    reasons = [f"flag: {flag}" for flag in row.flags]
    if row.related is False:
        reasons.append("not about the image")
    if row.answer_correct is False:
        reasons.append("answer corrected" if row.corrected_answer else "answer wrong")
    if row.purpose == ADJUDICATE and row.decision == "reject":
        reasons.append("adjudicated: reject")
    return reasons


def people_reasons(items: list[ItemFacts], people: Released) -> list[dict[str, Any]]:
    """The reasons people gave on the items they rejected, most frequent first, with examples."""
    found: dict[str, Tally] = defaultdict(Tally)
    for item in items:
        if "rejected" not in item.stages:
            continue
        for row in item.judgments:
            for reason in judgment_reasons(row):
                found[reason].add(lambda: {"item": item.key, "person": people.pseudonym(row.person),
                                           "comment": people.text(row.comment)})
    return most_frequent(found, "reason")


def comments(items: list[ItemFacts], people: Released) -> list[dict[str, Any]]:
    """People's comments on rejected or corrected items (the same words counted together), most frequent first."""
    found: dict[str, Tally] = defaultdict(Tally)
    for item in items:
        if not {"rejected", "corrected"} & item.stages:
            continue
        for row in item.judgments:
            text = " ".join((row.comment or "").split())
            if text:
                found[people.text(text)].add(lambda: {"item": item.key, "person": people.pseudonym(row.person)})
    return most_frequent(found, "comment")


def disputed(item: ItemFacts) -> bool:
    """Its two judgments disagreed: it went to adjudication (decided or waiting)."""
    return item.status == NEEDS_ADJUDICATION or "adjudicated" in item.stages or any(
        row.purpose == ADJUDICATE for row in item.judgments)


def hot_spots(tables: dict[str, dict[str, list[ItemFacts]]]) -> list[dict[str, Any]]:
    """Rows where people disagree most: the share of judged items that went to adjudication, highest first."""
    out = []
    for by, rows in tables.items():
        for name, members in rows.items():
            judged = [item for item in members if set(DECIDED) & item.stages or item.status == NEEDS_ADJUDICATION]
            if judged:
                n = sum(disputed(item) for item in judged)
                out.append({"by": by, "name": name, "judged": len(judged), "disputed": n,
                            "share": round(n / len(judged), 4)})
    return sorted(out, key=lambda row: (-row["share"], -row["disputed"], row["by"], row["name"]))


# ---------------------------------------------------------------- redo, time, other parts' sections


def redo_counts(items: list[ItemFacts]) -> list[dict[str, Any]]:
    """Per kind and generator: drafts redone (`generate --redo`), how many of them people decided and accepted."""
    rows: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for item in items:
        if item.redo_of is None:
            continue
        counts = rows[(item.kind, item.generator)]
        counts["redone"] += 1
        counts["decided"] += bool(set(DECIDED) & item.stages)
        counts["accepted"] += bool({"accepted", "corrected"} & item.stages)
    return [{"kind": kind, "generator": generator, "redone": c["redone"], "decided": c["decided"],
             "accepted": c["accepted"], "acceptance": round(c["accepted"] / c["decided"], 4) if c["decided"] else None}
            for (kind, generator), c in sorted(rows.items())]


def items_by_kind(items: list[ItemFacts]) -> dict[str, list[ItemFacts]]:
    kinds: dict[str, list[ItemFacts]] = defaultdict(list)
    for item in items:
        kinds[item.kind].append(item)
    return kinds


def acceptance_over_time(items: list[ItemFacts]) -> list[dict[str, Any]]:
    """Per day (UTC) of the items' last decision: decided, accepted (as drafted or corrected), and the share."""
    days: dict[str, Counter] = defaultdict(Counter)
    for item in items:
        if item.decided_at is None or not set(DECIDED) & item.stages:
            continue
        counts = days[item.decided_at.date().isoformat()]
        counts["decided"] += 1
        counts["accepted"] += bool({"accepted", "corrected"} & item.stages)
    return [{"day": day, "decided": c["decided"], "accepted": c["accepted"],
             "acceptance": round(c["accepted"] / c["decided"], 4)} for day, c in sorted(days.items())]
