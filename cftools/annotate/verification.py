"""How an item was verified: how many people judged it, who (pseudonymously), whether each judged it on a
server proven their own, and so whether it was blind.

Label Studio Community scopes projects only by organization, and every user of a server is in its one
organization: on one shared server any annotator can open any other's project and read their judgments. Only when
every person works on a server of their own (`[label_studio.people."EMAIL"]`, `cftools annotate serve`) can the
verification be blind, and only when cftools proved it: each judgment carries the separation check that covers it
(`cftools.annotate.separation`: the server's users, which tokens it refuses, its document root). An item is blind
when every judged task had an assignee, no server URL held the judged tasks of two people, and every judgment's
check passed; otherwise it is not blind, with the reason in words that name no one. Everything cftools says about
verification (push, `annotate status`, the data card, croissant.json) uses the phrases below, and says that no one
could see another person's work only of items the checks proved blind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

from cftools.annotate.separation import NOT_CHECKED, TOKEN_ACCEPTED, check_states, problem_words

SEPARATE = "separate servers"
SHARED = "shared server: not blind"
NOT_PROVEN = "separate servers not proven: not blind"
NOT_ANNOTATED = "not annotated"


Judged = tuple  # (server URL, assignee, annotator, check): check None (never checked) or (ok, problem codes)


def judged_on_separate_servers(judged: Iterable[Judged]) -> bool:
    """JUDGED: (server URL, assignee, annotator, ...) of each judgment. True when each came from an assigned task and
    no server URL held the judgments of two different people (by URL only: the checks prove the rest)."""
    people_of_server: dict[str, set[str]] = defaultdict(set)
    seen = False
    for server, assignee, annotator, *_ in judged:
        seen = True
        if not assignee:
            return False
        people_of_server[server].add(annotator)
    return seen and all(len(people) == 1 for people in people_of_server.values())


def blindness(judged: list[Judged]) -> tuple[bool, bool, list[str]]:
    """(separate servers proven, blind, problem codes) of an item's judgments."""
    problems: list[str] = []
    for _, _, _, *check in judged:
        state = check[0] if check else None
        if state is None:
            problems.append(NOT_CHECKED)
        elif not state[0]:
            problems.extend(state[1])
    problems = list(dict.fromkeys(problems))
    separate = judged_on_separate_servers(judged) and NOT_CHECKED not in problems and TOKEN_ACCEPTED not in problems
    return separate, separate and not problems, problems


def item_verification(judged: list[Judged], pseudonym: Callable[[str], str],
                      server_id: Callable[[str], str] = str) -> dict[str, Any]:
    """The release's per-item account: people (distinct judges), annotators (their ids by PSEUDONYM: the workspace
    boundary's, `cftools.boundary`), servers (their ids by SERVER_ID, keyed by the same boundary),
    separate_servers (proven), blind, why_not_blind (words naming no one; "" when blind) and `how` in words."""
    if not judged:
        return {"people": 0, "annotators": [], "servers": [], "separate_servers": False, "how": NOT_ANNOTATED,
                "blind": False, "why_not_blind": "not annotated"}
    separate, blind, problems = blindness(judged)
    return {"people": len({person for _, _, person, *_ in judged}),
            "annotators": sorted({pseudonym(person) for _, _, person, *_ in judged}),
            "servers": sorted({server_id(server) for server, *_ in judged}),
            "separate_servers": separate, "how": how_words(judged, blind, problems), "blind": blind,
            "why_not_blind": "" if blind else why_not_blind(judged, problems)}


def how_words(judged: list[Judged], blind: bool, problems: list[str]) -> str:
    if blind:
        return SEPARATE
    if not judged_on_separate_servers(judged) or TOKEN_ACCEPTED in problems:
        return SHARED
    return NOT_PROVEN


def why_not_blind(judged: list[Judged], problems: list[str]) -> str:
    if not judged_on_separate_servers(judged):
        return SHARED_WHY
    return problem_words([p for p in problems if p != NOT_CHECKED] or problems)


SHARED_WHY = "the judges worked on one shared Label Studio server, where each could open the others' judgments"


def release_words(verifications: list[dict[str, Any]]) -> str:
    """One plain sentence for a release: how its annotated items were verified. It says no one could see another
    person's work only when the separation checks proved it of every annotated item."""
    annotated = [v for v in verifications if v.get("people")]
    if not annotated:
        return "No item of this release was judged by a person."
    blind = sum(1 for v in annotated if v.get("blind"))
    if blind == len(annotated):
        return (f"Verification on {SEPARATE}: every judgment of the {blind} annotated items was made by its "
                "person on a Label Studio server cftools proved their own (its only user, no other person's token "
                "accepted, a document root with images only), where no one could see another person's work.")
    whys: dict[tuple[str, str], int] = defaultdict(int)
    for v in annotated:
        if not v.get("blind"):
            whys[(v.get("how") or SHARED, v.get("why_not_blind") or SHARED_WHY)] += 1
    text = (f"{len(annotated) - blind} of the {len(annotated)} annotated items were not blind: "
            + "; ".join(f"{n} judged on a {SHARED} ({why})" if how == SHARED else f"{n} because {why}"
                        for (how, why), n in sorted(whys.items())))
    if blind:
        text += f"; {blind} on {SEPARATE} proven (each person on a server of their own)"
    return text + "."


def items_by_verification(store: Any) -> dict[str, int]:
    """`annotate status`: how many judged items were judged blind on separate servers, how many not (and how)."""
    from collections import Counter

    from sqlalchemy import select

    from cftools.models import AnnotationTask, Judgment

    rows: dict[int, list[tuple]] = defaultdict(list)
    with store.session() as session:
        for item_id, server, assignee, annotator, check_id in session.execute(
                select(AnnotationTask.item_id, AnnotationTask.server, AnnotationTask.assignee, Judgment.annotator,
                       Judgment.separation_check_id)
                .join(Judgment, Judgment.task_id == AnnotationTask.id)
                .where(AnnotationTask.state.not_in(("deleted", "requeued")),
                       AnnotationTask.purpose.not_in(("control", "audit")))):
            rows[item_id].append((server, assignee, annotator, check_id))
        states = check_states(session, (r[3] for judged in rows.values() for r in judged))
    # only `how` is read (nothing leaves): the annotators may keep their names
    counts = Counter(item_verification([(s, a, n, states.get(c)) for s, a, n, c in judged], pseudonym=str)["how"]
                     for judged in rows.values())
    return {how: counts[how] for how in (SEPARATE, NOT_PROVEN, SHARED) if counts[how]}
