"""Issue 32 in a real browser (the fixtures of tests/test_browser.py: Debian's Chromium driven by Playwright, the
Label Studio test server, three people who log in through the login form): no answer field starts with a model's
value, so an untouched cue set cannot be submitted. Screenshots in test-artifacts/browser/."""

from __future__ import annotations

import uuid

from test_annotate import ls_workspace  # noqa: F401 (fixture)
from test_browser import (  # noqa: F401 (browser, pages, team_workspace: fixtures)
    add_explain_item, assigned, browser, label_all, pages, push_json, save_screenshot, screenshot_on_failure, submit,
    submit_expecting_warning, team_workspace, type_text,
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
