"""Whose judgment an annotation is: Label Studio records who made it (`completed_by`) and who changed it last
(`updated_by`); a judgment counts only from the person the task is for, and only as that person left it."""

from __future__ import annotations

from typing import Any, Optional


def person_of(user: Any, people: dict[int, str]) -> Optional[str]:
    """The person (their email) of a Label Studio user id (or user object) in an export, PEOPLE being the server's
    users; `user:<id>` for one not listed."""
    if isinstance(user, dict):
        user = user.get("id")
    return None if user is None else people.get(user) or f"user:{user}"


def refusal(annotation: dict, task_id: Any, people: dict[int, str], person: Optional[str]) -> Optional[str]:
    """Why ANNOTATION of TASK_ID is not its person's judgment as they left it, None when it is: made by someone
    else than PERSON (when the task is assigned), or changed by someone else than its author."""
    author, editor = person_of(annotation.get("completed_by"), people), person_of(annotation.get("updated_by"), people)
    if person and author != person:
        return f"task {task_id}: made by {author}, assigned to {person}: not counted"
    if editor is not None and editor != author:
        return f"task {task_id}: changed by {editor} after {author} submitted it: not counted"
    return None
