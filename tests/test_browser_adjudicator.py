"""Issue 43 in a real browser (the fixtures of tests/test_browser.py: Debian's Chromium driven by Playwright, the
Label Studio test server, people who log in through the login form): an adjudicator's screen of each kind shows the
other judges as "Person 1/2/3" and no email of theirs, neither in the page's text nor in its HTML. The only address
Label Studio itself may put on the page is the adjudicator's own (their account, their project's title); the
labeling panel, and the task's JSON as the browser received it (hidden fields too), hold none at all. Screenshots in
test-artifacts/browser/adjudicator-*.png."""

from __future__ import annotations

import re
import uuid

import pytest

from test_adjudicator_screens import disputed, explained_pair
from test_annotate import ls_workspace  # noqa: F401 (fixture)
from test_browser import (  # noqa: F401 (browser, pages, team_workspace: fixtures)
    UI_TIMEOUT_MS, assigned, browser, label_all, log_in, pages, push_json, save_screenshot, screenshot_on_failure,
    team_workspace,
)
from test_judgments_own import FOURTH, four  # noqa: F401 (four: fixture)

EMAIL_ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def addresses(text: str) -> set[str]:
    return {a.lower() for a in EMAIL_ADDRESS.findall(text)}


def adjudicator_screen(page, url: str, project_id: int, adjudicator: str, name: str, judgments: str) -> str:
    """Open the adjudicator's task the documented way, keep a screenshot with the JUDGMENTS header in view, and
    check the page names no one but the adjudicator (Label Studio's own account menu and the project's title): the
    labeling panel, where the task's data is drawn, holds no address at all. Returns the panel's text."""
    received: list[str] = []  # the task as the browser received it: hidden fields are there too

    def keep_task(response) -> None:  # noqa: ANN001
        if re.search(r"/api/(tasks\b|dm/actions\?id=next_task)", response.url) and response.ok:
            received.append(response.text())

    page.on("response", keep_task)
    with screenshot_on_failure(page, name):
        panel = label_all(page, url, project_id)
        page.remove_listener("response", keep_task)
        assert received, "the browser received no task"
        assert all(addresses(body) == set() for body in received), [addresses(body) for body in received]
        shown, drawn = panel.inner_text(), panel.inner_html()
        panel.get_by_role("heading", name=judgments, exact=True).scroll_into_view_if_needed()
        save_screenshot(page, name)
        assert addresses(shown) == set() and addresses(drawn) == set(), (addresses(shown), addresses(drawn))
        assert addresses(page.inner_text("body")) <= {adjudicator}
        assert addresses(page.content()) <= {adjudicator}
    return shown


@pytest.mark.parametrize("kind", ["cvqa", "cfmm", "mucr"])
def test_an_adjudicators_screen_shows_people_by_number_and_no_email(kind, pages, label_studio, team_workspace,
                                                                    run_cli):
    store = team_workspace.store
    _, judges = disputed(kind, label_studio, store, run_cli)
    push_json(run_cli, "--kind", kind, "--adjudicate")
    [task] = assigned(store, "adjudicate")
    assert task.assignee not in judges
    shown = adjudicator_screen(pages[task.assignee], label_studio.url, task.ls_project_id, task.assignee,
                               f"adjudicator-{kind}", "First judgment")
    assert "Person 1: related=yes" in shown and "Person 2: related=" in shown
    assert "(an email address)" in shown  # the first judge's comment is there, the address they typed is not


def test_a_mucr_cue_set_adjudicators_screen_shows_people_by_number_and_no_email(browser, label_studio,  # noqa: F811
                                                                              four, run_cli):
    from test_judgments_own import OWN_WORDS

    store = four.store
    _, people = explained_pair(label_studio, store, run_cli)
    push_json(run_cli, "--kind", "mucr", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    assert task.assignee == FOURTH[0] and task.assignee not in people
    context = browser.new_context(viewport={"width": 1400, "height": 1800})  # the three people's sets in view
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    try:
        log_in(page, label_studio.url, FOURTH[0], FOURTH[1])
        shown = adjudicator_screen(page, label_studio.url, task.ls_project_id, task.assignee,
                                   "adjudicator-mucr-cue-set",
                                   "The three people's explanations and cue sets (when their cue sets differ)")
    finally:
        context.close()
    assert all(f"Person {n}: {text}" in shown for n, text in enumerate(OWN_WORDS, start=1))
