"""What a project's instructions promise about an unusable submission holds where the project is: a person's own
project returns it to them with the reason; the shared project (no `[label_studio] annotators`) cannot return it to
anyone, so it says the submission is not counted (pull offers the task to one more person)."""

from __future__ import annotations

import pytest

from cftools.judgments import ADJUDICATE, VERIFY
from cftools.kinds import get_kind

TASKS = [(kind, task) for kind in ("cvqa", "cfmm", "mucr") for task in (VERIFY, ADJUDICATE,
                                                                        *get_kind(kind).hooks.annotate.tasks)
         if task not in get_kind(kind).hooks.annotate.authoring_tasks]


@pytest.mark.parametrize(("kind", "task"), sorted(set(TASKS)))
def test_only_a_persons_own_project_promises_the_submission_back(kind, task):
    hooks = get_kind(kind).hooks.annotate
    own = hooks.instructions(task)
    shared = hooks.instructions(task, shared_project=True)
    assert "comes back to you with the reason" in own
    assert "comes back to you" not in shared and "offered to one more person" in shared


@pytest.mark.parametrize("kind", ["cvqa", "cfmm", "mucr"])
def test_the_shared_adjudication_says_a_judges_own_adjudication_is_not_counted(kind):
    hooks = get_kind(kind).hooks.annotate
    assert "yourself, leave it to someone else" in hooks.instructions(ADJUDICATE, shared_project=True)
    assert "yourself" not in hooks.instructions(ADJUDICATE)


def test_an_authoring_task_returns_its_submissions_in_any_project():
    assert "comes back to you with the reason" in get_kind("cfmm").hooks.annotate.instructions(
        "author", shared_project=True)
