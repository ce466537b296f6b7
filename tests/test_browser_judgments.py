"""Issue 32 in a real browser (the fixtures of tests/test_browser.py: Debian's Chromium driven by Playwright, the
Label Studio test server, three people who log in through the login form): no answer field starts with a model's
value, so an untouched cue set cannot be submitted. Screenshots in test-artifacts/browser/."""

from __future__ import annotations

import re
import uuid

from test_annotate import ls_workspace  # noqa: F401 (fixture)
from test_browser import (  # noqa: F401 (browser, pages, team_workspace: fixtures)
    add_explain_item, assigned, browser, label_all, log_in, pages, push_json, save_screenshot, screenshot_on_failure,
    submit, submit_expecting_warning, team_workspace, type_text,
)


def test_mucr_explain_cue_fields_start_empty_and_untouched_cannot_be_submitted(pages, label_studio,  # noqa: F811
                                                                               team_workspace, run_cli):
    store = team_workspace.store
    add_explain_item(store, label_studio.media_root / f"cues-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr", "--task", "explain")
    task = assigned(store, "explain")[0]
    page = pages[task.assignee]
    with screenshot_on_failure(page, "mucr-explain-cues"):
        panel = label_all(page, label_studio.url, task.ls_project_id)
        for name in ("cue", "false_cues"):  # never pre-filled with the model's cue set
            assert panel.locator(f"textarea[name={name}], input[name={name}]").first.input_value() == ""
        shown = panel.inner_text()
        assert "for reference only (not your answer)" in shown and "cue: phone" in shown  # the model's, marked so
        save_screenshot(page, "mucr-explain-cues")
        type_text(panel, "explanation", "In the first image a driver reads a message. In the second image the car "
                                        "is against a post. The causal link is his distraction.")
        submit_expecting_warning(panel, "Please answer (ii)")  # the cue left as it came: refused
        type_text(panel, "cue", "phone")
        submit_expecting_warning(panel, "Please answer (iii)")
        type_text(panel, "false_cues", "lamp post\nsteering wheel\nstreet")
        annotation = submit(panel)
    texts = {r["from_name"]: r["value"]["text"] for r in annotation["result"]}
    assert texts["cue"] == ["phone"] and texts["false_cues"][0].splitlines() == ["lamp post", "steering wheel",
                                                                                "street"]


def test_mucr_cue_set_adjudicator_sees_all_three_and_accepts_a_persons_set(browser, pages, label_studio,  # noqa: F811
                                                                          team_workspace, run_cli):
    from test_browser import UI_TIMEOUT_MS, choice_labels, item_status, pick, pull_json
    from test_judgments_own import CUE_SETS, FOURTH, OWN_WORDS, explained
    from fixtures_label_studio import signup

    if FOURTH[0] not in label_studio.users:
        user_id, token = signup(label_studio.url, label_studio.admin_token, *FOURTH)
        label_studio.users[FOURTH[0]] = {"id": user_id, "token": token}
    config = team_workspace.root / "cftools.toml"  # a fourth person beside the three, last in the list
    config.write_text(re.sub(r'(?m)^(annotators = \[.*)\]$', rf'\1, "{FOURTH[0]}"]', config.read_text(), count=1))
    store = team_workspace.store
    item_id = add_explain_item(store, label_studio.media_root / f"adj-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr", "--task", "explain")
    for task, text, (cue, false_cues) in zip(assigned(store, "explain"), OWN_WORDS, CUE_SETS):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id,
                                                              result=explained(text, cue, false_cues))
    pull_json(run_cli)
    push_json(run_cli, "--kind", "mucr", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    assert task.assignee == FOURTH[0]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(UI_TIMEOUT_MS)
    page = context.new_page()
    try:
        log_in(page, label_studio.url, FOURTH[0], FOURTH[1])
        with screenshot_on_failure(page, "mucr-adjudicate-cue-set"):
            panel = label_all(page, label_studio.url, task.ls_project_id)
            shown = panel.inner_text()
            assert all(text in shown for text in OWN_WORDS)  # all three explanations and cue sets
            assert "cue: screen; false cues: car; pavement; bend" in shown
            header = "Whose cue set you accept (for a cue-set disagreement, with: accept)"
            assert choice_labels(panel, header) == ["1", "2", "3"]
            save_screenshot(page, "mucr-adjudicate-cue-set")
            pick(panel, "Your decision", "Accept the proposed answer")
            pick(panel, header, "3")
            submit(panel)
    finally:
        context.close()
    report = pull_json(run_cli)
    assert report["decisions"] == {"adjudicated accepted": 1}, report
    assert item_status(store, item_id) == "accepted"
    with store.session() as session:
        from cftools.models import Item

        data = session.get(Item, item_id).data
    assert (data["cue"], data["false_cues"]) == ("screen", ["car", "pavement", "bend"])


def test_edit_task_shows_both_images_and_the_condition_and_pull_stores_the_answer(pages, label_studio,  # noqa: F811
                                                                                 team_workspace, run_cli):
    """Issue 34: a person opens the edit task, sees the original beside the edited image with the condition, the
    instruction and the original question (not the counterfactual one, not its answer), answers and submits; with
    a second person's judgment, pull accepts the edit with their answer."""
    from sqlalchemy import select, update

    from test_annotate import make_items
    from test_browser import headers_of, loaded_image_widths, pick, pull_json
    from test_edits import add_edit, edit_result

    from cftools.models import Item

    store = team_workspace.store
    folder = label_studio.media_root / f"edit-{uuid.uuid4().hex[:6]}"
    make_items(run_cli, folder, 1)
    with store.write() as session:
        session.execute(update(Item).values(status="accepted"))
        item_id = session.execute(select(Item.id)).scalar_one()
    add_edit(store, item_id, folder / "edit")
    push_json(run_cli, "--kind", "cvqa", "--task", "edit")
    first, second = assigned(store, "edit")
    headers = headers_of("cvqa", "edit")
    page = pages[first.assignee]
    with screenshot_on_failure(page, "cvqa-edit"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        widths = loaded_image_widths(page, 2)
        assert len(widths) == 2 and all(widths)  # the original and the edited image, both loaded
        shown = panel.inner_text()
        assert "Original image" in shown and "Edited image" in shown
        assert "there are two squares" in shown and "add one more square" in shown  # condition, instruction
        assert "How many squares are there in picture 0?" in shown and "one more was added" not in shown
        save_screenshot(page, "cvqa-edit")
        pick(panel, headers["shows_condition"], "Yes")
        pick(panel, headers["other_change"], "No")
        type_text(panel, "edited_answer", "two")
        annotation = submit(panel)
    assert {r["from_name"] for r in annotation["result"]} == {"shows_condition", "other_change", "edited_answer"}
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=edit_result(answer="2"))
    report = pull_json(run_cli)
    assert report["judgments_added"] == 2 and report["invalid"] == [] and report["refused"] == []
    with store.session() as session:
        data = session.get(Item, item_id).data
    assert data["edit_selected"] == 1 and data["edit_answer"] == "2"
