"""Simulated people working through the real Label Studio API: each person, on their own server, opens every task of
their verification projects that has no annotation yet and submits what their scripted behaviour
(`tests/simulated_annotators.py`: careful, hurried, random clicker, always agrees) makes of it, as the editor would
(`fixtures_label_studio.verify_result`), with a lead time.

The behaviour is told the task's truth by TRUTH (task data -> the right answer): the simulated person "sees" it the
way a real one sees the image. Nothing in the task data tells them whether a task is a control."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from fixtures_label_studio import verify_result


def open_tasks(client: Any, prefix: str) -> list[tuple[int, dict]]:
    """(task id, data) of every task without an annotation in the caller's verification projects titled PREFIX…"""
    found = []
    for project in client.projects.list():
        if not (project.title or "").startswith(prefix) or " verification" not in project.title:
            continue
        for task in client.tasks.list(project=project.id):
            if not task.total_annotations:
                found.append((task.id, dict(task.data)))
    return sorted(found)


def work_through(people_servers: Any, people: dict[str, Any], prefix: str, truth: Callable[[dict], str],
                 options: Sequence[str], lead_time: float = 4.0) -> dict[str, int]:
    """Each of PEOPLE (email -> simulated annotator) judges their open tasks on their own server with their own
    token; returns how many each submitted."""
    def work(email: str) -> int:
        client, annotator, done = people_servers.client(email), people[email], 0
        for task_id, data in open_tasks(client, prefix):
            proposed = str(data.get("proposed_answer") or "")
            judgment = annotator.judge(truth(data), proposed, options)
            client.annotations.create(id=task_id, lead_time=lead_time, result=verify_result(
                "yes", "yes" if judgment.answer_correct else "no",
                None if judgment.answer_correct else judgment.corrected_answer))
            done += 1
        return done

    with ThreadPoolExecutor(max_workers=len(people) or 1) as pool:  # each person on their own server, at once
        counts = dict(zip(people, pool.map(work, people)))
    return {email: n for email, n in counts.items() if n}
