"""Simulated people for the whole-loop test of the authoring funnel (tests/test_funnel_loop.py): each person, on
their own Label Studio server, with their own token, judges every open task of their verification projects by a
truth the test fixed beforehand per item (drawn from known rates), in the result form of the item's kind."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from fixtures_label_studio import verify_result
from simulated_people_ls import open_tasks

LEAD_TIME = 3.0  # seconds each judgment takes, as Label Studio records it


def drawn(seed: int, key: str, rate: float) -> bool:
    """A seeded draw with probability RATE for the item KEY (the same key, the same draw, in any order)."""
    return random.Random(f"{seed}:{key}").random() < rate


def kind_result(kind: str, good: bool, data: dict[str, Any]) -> list[dict]:
    """What a person who finds the draft GOOD (or not) submits in KIND's verification config."""
    answer = "yes" if good else "no"
    if kind == "cfmm":  # the counterfactual pick is the proposed option either way: a wrong basic answer rejects
        proposed = str(data.get("proposed_answer") or "")
        return [{"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": ["yes"]}},
                {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices",
                 "value": {"choices": [answer]}},
                {"from_name": "cf_answer", "to_name": "question", "type": "choices", "value": {"choices": [proposed]}}]
    return verify_result("yes", answer)


def judge_open_tasks(people_servers: Any, prefix: str, item_of: Callable[[str, int], tuple[str, str]],
                     good: Callable[[str], bool], lead_time: float = LEAD_TIME) -> int:
    """Every person judges their open tasks: ITEM_OF(person, task id) is the task's (item key, kind), GOOD(key) the
    truth; returns how many judgments were submitted."""
    def work(email: str) -> int:
        client, done = people_servers.client(email), 0
        for task_id, data in open_tasks(client, prefix):
            key, kind = item_of(email, task_id)
            client.annotations.create(id=task_id, lead_time=lead_time, result=kind_result(kind, good(key), data))
            done += 1
        return done

    with ThreadPoolExecutor(max_workers=len(people_servers.people)) as pool:  # each on their own server, at once
        return sum(pool.map(work, people_servers.people))
