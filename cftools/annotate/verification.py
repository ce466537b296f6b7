"""How an item was verified: how many people judged it, who (pseudonymously), and whether each judged it on a
server of their own.

Label Studio Community scopes projects only by organization, and every user of a server is in its one
organization: on one shared server any annotator can open any other's project and read their judgments. Only when
every person works on a server of their own (`[label_studio.people."EMAIL"]`, `cftools annotate serve`) is the
verification blind by construction. Each task records the server it lived on (`AnnotationTask.server`); an item's
judgments were made on separate servers when every judged task had an assignee and no server held the judged
tasks of two different people. Everything cftools says about verification (push, `annotate status`, the data card,
croissant.json) uses the two phrases below, and never calls a shared server blind.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any, Callable, Iterable, Optional

SEPARATE = "separate servers"
SHARED = "shared server: not blind"
NOT_ANNOTATED = "not annotated"


def server_id(url: str) -> str:
    """A short id of a server (its URL's hash): names a server in a release without its address."""
    return hashlib.sha256(url.encode()).hexdigest()[:12]


def judged_on_separate_servers(judged: Iterable[tuple[str, Optional[str], str]]) -> bool:
    """JUDGED: (server URL, assignee, annotator) of each judgment. True when each came from an assigned task and no
    server held the judgments of two different people."""
    people_of_server: dict[str, set[str]] = defaultdict(set)
    seen = False
    for server, assignee, annotator in judged:
        seen = True
        if not assignee:
            return False
        people_of_server[server].add(annotator)
    return seen and all(len(people) == 1 for people in people_of_server.values())


def item_verification(judged: list[tuple[str, Optional[str], str]],
                      pseudonym: Callable[[str], str]) -> dict[str, Any]:
    """The release's per-item account: people (distinct judges), annotators (their ids by PSEUDONYM: the workspace
    boundary's, `cftools.boundary`), servers (ids), separate_servers and `how` in words."""
    if not judged:
        return {"people": 0, "annotators": [], "servers": [], "separate_servers": False, "how": NOT_ANNOTATED}
    separate = judged_on_separate_servers(judged)
    return {"people": len({annotator for _, _, annotator in judged}),
            "annotators": sorted({pseudonym(annotator) for _, _, annotator in judged}),
            "servers": sorted({server_id(server) for server, _, _ in judged}),
            "separate_servers": separate, "how": SEPARATE if separate else SHARED}


def mode_words(separate_servers: bool) -> str:
    return SEPARATE if separate_servers else SHARED


def release_words(verifications: list[dict[str, Any]]) -> str:
    """One plain sentence for a release: how its annotated items were verified."""
    annotated = [v for v in verifications if v.get("people")]
    if not annotated:
        return "No item of this release was judged by a person."
    separate = sum(1 for v in annotated if v.get("separate_servers"))
    shared = len(annotated) - separate
    if not shared:
        return (f"Verification on {SEPARATE}: every judgment of the {separate} annotated items was made by its "
                "person on a Label Studio server of their own, where no one could see another person's work.")
    text = (f"{shared} of the {len(annotated)} annotated items were judged on a {SHARED} (every annotator of a "
            "shared Label Studio Community server can open the others' projects and judgments)")
    if separate:
        text += f"; {separate} on {SEPARATE} (each person on a server of their own)"
    return text + "."


def items_by_verification(store: Any) -> dict[str, int]:
    """`annotate status`: how many judged items were judged on separate servers, how many on a shared server."""
    from collections import Counter

    from sqlalchemy import select

    from cftools.models import AnnotationTask, Judgment

    judged: dict[int, list[tuple[str, Optional[str], str]]] = defaultdict(list)
    with store.session() as session:
        for item_id, server, assignee, annotator in session.execute(
                select(AnnotationTask.item_id, AnnotationTask.server, AnnotationTask.assignee, Judgment.annotator)
                .join(Judgment, Judgment.task_id == AnnotationTask.id)
                .where(AnnotationTask.state.not_in(("deleted", "requeued")),
                       AnnotationTask.purpose.not_in(("control", "audit")))):
            judged[item_id].append((server, assignee, annotator))
    # only `how` is read (nothing leaves): the annotators may keep their names
    counts = Counter(item_verification(rows, pseudonym=str)["how"] for rows in judged.values())
    return {how: counts[how] for how in (SEPARATE, SHARED) if counts[how]}
