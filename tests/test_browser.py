"""What annotators see and do, in a real browser: every task of every kind, three people.

Playwright for Python drives Debian's `chromium` (no browser download: `.ci/run` installs the package
with apt-get) against the Label Studio test server (fixture `label_studio`): each person logs in on the
login page in a browser context of their own, opens their task the documented way, sees its images loaded and
its texts, answers through the UI and submits; `cftools annotate pull` then reads the annotations back and
decides. The hostile cases of issue 23 are here too: the second person's path shows no first judgment, an edit
by another user is refused at pull, an untouched model draft is not counted, a correction outside the options
cannot be given, the third person receives the tiebreak, a returned submission comes back with its reason.
Where no browser is installed the tests skip with the reason; under CI=true they fail instead. A screenshot of
each task type as its annotator saw it (and of the page where a check failed) is kept as a test artefact in
test-artifacts/browser/ (CFTOOLS_BROWSER_ARTIFACTS names another folder; an empty value keeps none).
"""

from __future__ import annotations

import json
import os
import re
import uuid
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import PIL.Image
import pytest
from sqlalchemy import select

import httpx
from fixtures_label_studio import ADJUDICATOR, ANNOTATORS, verify_result
from test_annotate import ls_workspace, make_items, mark_checked  # noqa: F401 (ls_workspace: fixture)

from cftools.judgments import DECISION_CHOICES, FLAG_CHOICES, VERIFY
from cftools.annotate.rules import render_label_config
from cftools.images import read_image_file, register_image
from cftools.models import CHECKED, IN_REVIEW, NEEDS_ADJUDICATION, AnnotationTask, Item, SourceQuestion

CHROMIUM = Path(os.environ.get("CFTOOLS_CHROMIUM", "/usr/bin/chromium"))
# Without the networking flags Chromium keeps dialling out, and a closed network refuses it many times over.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
UI_TIMEOUT_MS = 60_000  # the labeling app is a large bundle; the shared 2-core host can be slow to run it
PANEL = ".lsf-main-view__annotation"  # Label Studio's labeling area (the task list beside it has images too)
IMAGE_LOAD_ERROR = "There was an issue loading URL"  # what Label Studio shows instead of a broken image
ARTIFACTS = os.environ.get("CFTOOLS_BROWSER_ARTIFACTS",
                           str(Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"))


def missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set CFTOOLS_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A headless Chromium; each person gets a context (cookies, session) of their own."""
    reason = missing_browser()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


PASSWORDS = {email: password for email, password in (*ANNOTATORS, ADJUDICATOR)}


@pytest.fixture(scope="module")
def pages(browser, label_studio):
    """email -> a page on which that person has logged in through the login form (three people)."""
    found = {}
    for email, password in PASSWORDS.items():
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(UI_TIMEOUT_MS)
        page = context.new_page()
        log_in(page, label_studio.url, email, password)
        assert "/user/login" not in page.url, f"{email} could not log in"
        found[email] = page
    yield found
    for page in found.values():
        page.context.close()


@pytest.fixture
def team_workspace(ls_workspace, label_studio):
    """A workspace whose tasks cftools assigns to the three people of the test server."""
    from test_assignment import assign_to

    assign_to(ls_workspace, [*label_studio.annotators, label_studio.adjudicator])
    return ls_workspace


# ---------------------------------------------------------------- the labeling UI


def log_in(page, url: str, email: str, password: str) -> None:
    """Post Label Studio's login form at URL as EMAIL and wait for the page it leads to (the login page again when
    refused: a later goto is then not cut off by this navigation)."""
    page.goto(url + "/user/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.keyboard.press("Enter")


def open_task(page, url: str, project_id: int, task_id: int):
    """The labeling panel of one task, once the app has drawn its controls."""
    page.goto(f"{url}/projects/{project_id}/data?task={task_id}")
    page.wait_for_load_state("networkidle")  # the app redraws the panel once the task and its drafts are in
    panel = page.locator(PANEL)
    panel.locator(".lsf-choices").first.wait_for()
    return panel


def loaded_image_widths(page, expected: int) -> list[int]:
    """naturalWidth of each image of the task, once EXPECTED images have loaded or Label Studio shows its
    error box for one that could not (then fewer widths, or a 0, come back)."""
    # One look at the page per poll: the app redraws the panel while it starts (an <img> may be replaced,
    # or be there before its src is), so widths read on a later call could belong to a discarded node.
    widths = page.wait_for_function(
        """([selector, expected, error]) => {
            const panel = document.querySelector(selector);
            if (!panel) return false;
            const images = [...panel.querySelectorAll("img")];
            const loaded = images.length >= expected && images.every(img => img.complete && img.naturalWidth > 0);
            return (loaded || panel.innerText.includes(error)) && images.map(img => img.naturalWidth);
        }""", arg=[PANEL, expected, IMAGE_LOAD_ERROR])
    return widths.json_value()


def type_text(panel, name: str, text: str) -> None:
    """Fill a TextArea and add it to the result as Label Studio asks: Enter in a one-line field, Shift+Enter in a
    larger one."""
    field = panel.locator(f"input[name='{name}'], textarea[name='{name}']").first
    field.fill(text)
    field.press("Shift+Enter" if field.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")


def submit(panel) -> dict:
    page = panel.page
    with page.expect_response(lambda r: r.request.method == "POST" and "/annotations" in r.url) as response:
        page.locator("[data-testid=bottombar-submit-button]").click()
    assert response.value.status == 201, response.value.text()
    return response.value.json()


def control_headers(config: str) -> dict[str, str]:
    """Control name -> the Header just above it, as the annotator reads it."""
    found, last = {}, None
    for element in ET.fromstring(config).iter():
        if element.tag == "Header":
            last = element.get("value")
        elif element.tag in ("Choices", "TextArea"):
            found[element.get("name")] = last
    return found


def save_screenshot(page, name: str) -> None:
    if ARTIFACTS:
        Path(ARTIFACTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(ARTIFACTS, f"{name}.png")), full_page=True)


@contextmanager
def screenshot_on_failure(page, name: str) -> Iterator[None]:
    try:
        yield
    except Exception:
        save_screenshot(page, f"{name}-failed")
        raise


# ---------------------------------------------------------------- a task of each kind in Label Studio


def draw(path: Path, colour: str, size: tuple[int, int] = (48, 32)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PIL.Image.new("RGB", size, colour).save(path)
    return path


def add_cfmm_item(run_cli, store, folder: Path) -> None:
    """A checked CFMM item on a real image: the basic question comes in as a table row (so the image is in
    the store), the counterfactual one and both option pairs are the item."""
    draw(folder / "bus.png", "red")
    (folder / "basic.csv").write_text("image,question,answer\nbus.png,What colour is the bus?,red\n")
    result = run_cli("ingest", "table", folder / "basic.csv", "--images", folder)
    assert result.exit_code == 0, result.output
    with store.write() as session:
        source = session.execute(select(SourceQuestion).order_by(SourceQuestion.id.desc())).scalars().first()
        session.add(Item(key=f"cfmm:{uuid.uuid4().hex[:8]}", kind="cfmm", group="color", source_id=source.id,
                         question="If the bus were painted like the sky, what colour would it be?", answer="blue",
                         status=CHECKED, data={"type": "color", "options": {"original": ["red", "blue"],
                                                                            "counterfactual": ["red", "blue"]}}))


def add_mucr_item(store, folder: Path) -> None:
    """A checked MuCR item: a cause and an effect image in the store, named in its data by SHA-256."""
    with store.write() as session:
        refs = {}
        for side, colour, size in (("cause", "orange", (48, 32)), ("effect", "gray", (40, 40))):
            image = read_image_file(draw(folder / f"{side}.png", colour, size))
            register_image(store, session, image)
            refs[f"{side}_image"] = f"sha256:{image.sha256}"
        session.add(Item(key=f"mucr:{uuid.uuid4().hex[:8]}", kind="mucr", group="human", status=CHECKED,
                         question="What did the phone cause?", answer="phone", data={
                             **refs, "cause_caption": "A man looks at his phone while driving.",
                             "effect_caption": "The car has hit a lamp post.", "cue": "phone",
                             "false_cues": ["lamp post", "steering wheel", "street"],
                             "explanations": ["In the first image the driver looks at his phone.",
                                              "In the second image the car has crashed.",
                                              "The causal link is that he did not watch the road."]}))


# ---------------------------------------------------------------- people at work


def label_all(page, url: str, project_id: int):
    """The documented path: a person opens their project and presses "Label All Tasks" (the server's /next)."""
    page.goto(f"{url}/projects/{project_id}/data?labeling=1")
    page.wait_for_load_state("networkidle")
    panel = page.locator(PANEL)
    panel.locator(".lsf-choices, textarea").first.wait_for()
    close_instructions(page)
    return panel


def close_instructions(page) -> str:
    """The project's instructions, which Label Studio shows before the first task; closed, and their text returned
    ("" when none showed)."""
    modal = page.locator(".lsf-modal-ls_visible, .ant-modal-content").filter(has_text="Labeling Instructions")
    try:
        modal.first.wait_for(timeout=5_000)
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: no instructions shown
        return ""
    text = modal.first.inner_text()
    page.keyboard.press("Escape")
    modal.first.wait_for(state="hidden", timeout=10_000)
    return text


def choices_under(panel, header: str):
    heading = panel.get_by_role("heading", name=header, exact=True)
    return heading.locator("xpath=following::div[contains(@class, 'lsf-choices')][1]")


HOTKEY = re.compile(r"\s*\[\w+\]$")  # Label Studio shows each choice's hotkey after its label: "Yes[1]"


def pick(panel, header: str, label: str) -> None:
    """Tick the choice that reads LABEL under HEADER, as a person does (by what it says on screen)."""
    wanted = re.compile("^" + re.escape(label) + r"\s*(\[\w+\])?$")
    choices_under(panel, header).locator("label").filter(has_text=wanted).first.click()


def choice_labels(panel, header: str) -> list[str]:
    return [HOTKEY.sub("", t.strip()) for t in choices_under(panel, header).locator("label").all_inner_texts()]


def headers_of(kind: str, task: str) -> dict[str, str]:
    return control_headers(render_label_config(kind, task))


def assigned(store, purpose: str = VERIFY) -> list[AnnotationTask]:
    with store.session() as session:
        rows = list(session.execute(select(AnnotationTask).where(AnnotationTask.purpose.like(f"{purpose}%"),
                                                                 AnnotationTask.state == "open")
                                    .order_by(AnnotationTask.id)).scalars())
        for row in rows:
            session.expunge(row)
    return rows


def item_status(store, item_id: int) -> str:
    with store.session() as session:
        return session.get(Item, item_id).status


def push_json(run_cli, *args: str) -> dict:
    out = run_cli("annotate", "push", *args, "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def pull_json(run_cli) -> dict:
    out = run_cli("annotate", "pull", "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def next_task_id(label_studio, email: str, project_id: int) -> int | None:
    response = httpx.get(f"{label_studio.url}/api/projects/{project_id}/next",
                         headers={"Authorization": f"Token {label_studio.token(email)}"}, timeout=30)
    return response.json()["id"] if response.status_code == 200 else None


def test_cvqa_two_people_blind_then_a_third_adjudicates(pages, label_studio, team_workspace, run_cli):
    store = team_workspace.store
    make_items(run_cli, label_studio.media_root / f"browser-{uuid.uuid4().hex[:6]}", 1)
    mark_checked(store)
    push_json(run_cli)
    first, second = assigned(store)
    headers = headers_of("cvqa", VERIFY)
    page = pages[first.assignee]
    with screenshot_on_failure(page, "cvqa-verify"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        assert loaded_image_widths(page, 1)[0] > 0
        assert "cvqa_type" not in panel.inner_text() and "line 2" not in panel.inner_text()  # no internal fields
        assert choice_labels(panel, headers["flags"]) == [label for _, label in FLAG_CHOICES]
        save_screenshot(page, "cvqa-verify")
        pick(panel, headers["related"], "Yes")
        pick(panel, headers["answer_correct"], "No")
        type_text(panel, "corrected_answer", "3")
        pick(panel, headers["flags"], FLAG_CHOICES[0][1])
        type_text(panel, "comment", "FIRST-PERSON-COMMENT")
        submit(panel)
    # the second person's documented path: their own project, their task, nothing of the first judgment
    page = pages[second.assignee]
    with screenshot_on_failure(page, "cvqa-verify-second"):
        page.goto(f"{label_studio.url}/projects/{second.ls_project_id}/data")
        page.wait_for_load_state("networkidle")
        assert first.assignee not in page.inner_text("body")
        panel = label_all(page, label_studio.url, second.ls_project_id)
        shown = panel.inner_text()
        assert "FIRST-PERSON-COMMENT" not in shown and first.assignee not in shown
        assert not choices_under(panel, headers["related"]).locator("input:checked").count()
        pick(panel, headers["related"], "Yes")
        pick(panel, headers["answer_correct"], "Yes")
        submit(panel)
    report = pull_json(run_cli)
    assert report["judgments_added"] == 2 and report["refused"] == [] and report["invalid"] == []
    assert item_status(store, first.item_id) == NEEDS_ADJUDICATION
    pushed = push_json(run_cli, "--adjudicate")
    [third] = pushed["assigned"]
    assert third not in (first.assignee, second.assignee)
    [task] = assigned(store, "adjudicate")
    assert next_task_id(label_studio, third, task.ls_project_id) == task.ls_task_id  # the third person receives it
    page = pages[third]
    with screenshot_on_failure(page, "cvqa-adjudicate"):
        panel = label_all(page, label_studio.url, task.ls_project_id)
        assert "FIRST-PERSON-COMMENT" in panel.inner_text()  # the adjudicator sees both judgments
        save_screenshot(page, "cvqa-adjudicate")
        pick(panel, "Your decision", DECISION_CHOICES[1][1])
        type_text(panel, "corrected_answer", "3")
        submit(panel)
    report = pull_json(run_cli)
    assert report["decisions"] == {"adjudicated accepted": 1}, report
    with store.session() as session:
        assert session.get(Item, first.item_id).answer == "3"


def submit_expecting_warning(panel, message: str) -> None:
    """Submit with a required question unanswered: Label Studio refuses and says which question."""
    from playwright.sync_api import expect

    page = panel.page
    page.locator("[data-testid=bottombar-submit-button]").click()
    warning = page.get_by_text(message)
    expect(warning.first).to_be_visible()
    # its OK button, as a person closes it: an Escape pressed on a loaded machine can reach the page before the
    # dialog listens for keys, and the warning stays
    page.get_by_role("button", name="OK", exact=True).filter(visible=True).first.click()
    expect(warning.first).to_be_hidden()


def test_cfmm_verify_offers_only_the_options_and_keeps_cannot_be_determined(pages, label_studio, team_workspace,
                                                                             run_cli):
    store = team_workspace.store
    add_cfmm_item(run_cli, store, label_studio.media_root / f"browser-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "cfmm")
    first, second = assigned(store)
    headers = headers_of("cfmm", VERIFY)
    page = pages[first.assignee]
    with screenshot_on_failure(page, "cfmm-verify"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        assert loaded_image_widths(page, 1)[0] > 0
        # the counterfactual answer is picked among the item's own options: nothing else can be given
        assert choice_labels(panel, headers["cf_answer"]) == ["red", "blue", "cannot be determined"]
        assert panel.locator("textarea[name=corrected_answer], input[name=corrected_answer]").count() == 0
        save_screenshot(page, "cfmm-verify")
        pick(panel, headers["related"], "Yes")
        submit_expecting_warning(panel, "Please answer (ii)")  # the warning names the question, not the control
        pick(panel, headers["basic_correct"], "Yes")
        pick(panel, headers["cf_answer"], "cannot be determined")
        submit(panel)
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=[
        {"from_name": "related", "to_name": "image", "type": "choices", "value": {"choices": ["yes"]}},
        {"from_name": "basic_correct", "to_name": "basic_question", "type": "choices", "value": {"choices": ["yes"]}},
        {"from_name": "cf_answer", "to_name": "question", "type": "choices", "value": {"choices": ["blue"]}}])
    report = pull_json(run_cli)
    assert report["invalid"] == [] and item_status(store, first.item_id) == NEEDS_ADJUDICATION
    status = json.loads(run_cli("annotate", "status", "--json").output)
    assert status["agreement"]["cfmm verification"]["counterfactual_answer"]["n_items"] == 1
    push_json(run_cli, "--kind", "cfmm", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    page = pages[task.assignee]
    with screenshot_on_failure(page, "cfmm-adjudicate"):
        panel = label_all(page, label_studio.url, task.ls_project_id)
        shown = panel.inner_text()
        assert "counterfactual answer='cannot be determined'" in shown and "ambiguous" not in shown.lower().replace(
            "ambiguous:", "")  # its own label, not relabelled
        assert choice_labels(panel, "Corrected counterfactual answer (only for: accept with the corrected answer)") \
            == ["red", "blue"]
        save_screenshot(page, "cfmm-adjudicate")
        pick(panel, "Your decision", DECISION_CHOICES[0][1])
        submit(panel)
    assert pull_json(run_cli)["decisions"] == {"adjudicated accepted": 1}


def test_mucr_verify_an_edit_by_another_person_is_refused(pages, label_studio, team_workspace, run_cli):
    store = team_workspace.store
    add_mucr_item(store, label_studio.media_root / f"browser-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr")
    first, second = assigned(store)
    headers = headers_of("mucr", VERIFY)
    page = pages[first.assignee]
    with screenshot_on_failure(page, "mucr-verify"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        assert loaded_image_widths(page, 2) and all(w > 0 for w in loaded_image_widths(page, 2))
        save_screenshot(page, "mucr-verify")
        pick(panel, headers["related"], "Yes")
        pick(panel, headers["answer_correct"], "Yes")
        submit(panel)
    assert pull_json(run_cli)["judgments_added"] == 1
    # another person opens the first one's task in the first one's project and changes the judgment (Update)
    intruder = second.assignee
    page = pages[intruder]
    with screenshot_on_failure(page, "mucr-verify-intruder"):
        panel = open_task(page, label_studio.url, first.ls_project_id, first.ls_task_id)
        close_instructions(page)
        pick(panel, headers["answer_correct"], "No")
        with page.expect_response(lambda r: r.request.method == "PATCH" and "/annotations/" in r.url) as response:
            page.get_by_text("Update", exact=True).filter(visible=True).last.click()
        assert response.value.status == 200
    report = pull_json(run_cli)
    assert [r["reason"] for r in report["refused"]] == [
        f"task {first.ls_task_id}: changed by {intruder} after {first.assignee} submitted it: not counted"]
    assert report["judgments_removed"] == 1 and item_status(store, first.item_id) == IN_REVIEW
    # nothing stuck (issue 32): the item comes back to the first person as a new task that says why
    [again] = [t for t in assigned(store) if t.assignee == first.assignee]
    assert again.id != first.id and report["returned"][first.assignee][0]["task"] == first.ls_task_id
    shown = label_studio.client().tasks.get(id=again.ls_task_id).data["returned"]
    assert shown.startswith("Returned to you") and "changed by someone else after you submitted it" in shown
    assert intruder not in shown and first.assignee not in shown  # no email on a person's screen (issue 43)
    label_studio.client(first.assignee).annotations.create(id=again.ls_task_id, result=verify_result("yes", "yes"))
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=verify_result("no", "no"))
    report = pull_json(run_cli)
    assert report["refused"] == [] and item_status(store, first.item_id) == NEEDS_ADJUDICATION
    push_json(run_cli, "--kind", "mucr", "--adjudicate")
    [task] = assigned(store, "adjudicate")
    assert task.assignee not in (first.assignee, second.assignee)
    page = pages[task.assignee]
    with screenshot_on_failure(page, "mucr-adjudicate"):
        panel = label_all(page, label_studio.url, task.ls_project_id)
        assert "Person 1: related=yes" in panel.inner_text() and first.assignee not in panel.inner_text()
        save_screenshot(page, "mucr-adjudicate")
        pick(panel, "Your decision", DECISION_CHOICES[2][1])
        submit(panel)
    assert pull_json(run_cli)["decisions"] == {"adjudicated rejected": 1}


def test_mucr_select_numbered_pairs_and_the_tiebreak_reaches_a_third_person(pages, label_studio, team_workspace,
                                                                             run_cli):
    from test_mucr_annotate import caption_pairs, pick as select_result

    store = team_workspace.store
    [pair_id] = caption_pairs(team_workspace, label_studio.media_root / f"select-{uuid.uuid4().hex[:6]}", 1,
                              per_style=3)
    push_json(run_cli, "--kind", "mucr", "--task", "select")
    first, second = assigned(store, "select")
    headers = headers_of("mucr", "select")
    page = pages[first.assignee]
    with screenshot_on_failure(page, "mucr-select"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        widths = loaded_image_widths(page, 6)
        assert len(widths) == 6 and all(w > 0 for w in widths)  # three pairs, each cause beside its effect
        pairs = panel.locator(".cf-cand")
        assert pairs.count() == 3
        assert [pairs.nth(n).locator("figcaption").all_inner_texts() for n in range(3)] == [
            [f"cause {n}", f"effect {n}"] for n in (1, 2, 3)]
        assert [pairs.nth(n).locator(".cf-num").all_inner_texts() for n in range(3)] == [[str(n)] * 2 for n in (1, 2, 3)]
        # the choices are the numbers shown, one per candidate that exists
        assert choice_labels(panel, headers["best_cause"]) == ["1", "2", "3"]
        assert choice_labels(panel, headers["best_effect"]) == ["1", "2", "3"]
        save_screenshot(page, "mucr-select")
        pick(panel, headers["best_cause"], "2")
        pick(panel, headers["best_effect"], "3")
        submit(panel)
    label_studio.client(second.assignee).annotations.create(id=second.ls_task_id, result=select_result(0, 0))
    report = pull_json(run_cli)
    assert report["invalid"] == [] and len(report["tiebreaks"]) == 1, report
    [third_task] = [t for t in assigned(store, "select") if t.assignee not in (first.assignee, second.assignee)]
    third = third_task.assignee
    assert report["tiebreaks"][0]["sent_to"] == [third]
    # the third person receives it: the server's /next hands it to them, and their "Label All Tasks" opens it
    assert next_task_id(label_studio, third, third_task.ls_project_id) == third_task.ls_task_id
    page = pages[third]
    with screenshot_on_failure(page, "mucr-select-third"):
        panel = label_all(page, label_studio.url, third_task.ls_project_id)
        assert panel.locator(".cf-cand").count() == 3
        pick(panel, headers["best_cause"], "2")
        pick(panel, headers["best_effect"], "3")
        submit(panel)
    pull_json(run_cli)
    with store.session() as session:
        selection = session.get(Item, pair_id).data["selection"]["photograph"]
    # shown as 2 and 3: the second and third best ranked candidates, k = 1 and 2
    assert (selection["cause"], selection["effect"], sorted(selection["annotators"])) == (
        1, 2, sorted([first.assignee, third]))


def add_explain_item(store, folder: Path) -> int:
    """A selected MuCR pair with its cue set and the model's explanation draft, checked: ready to explain."""
    add_mucr_item(store, folder)
    with store.write() as session:
        item = session.execute(select(Item).where(Item.kind == "mucr").order_by(Item.id.desc())).scalars().first()
        item.data = {**item.data, "explanation_draft": DRAFT}
        session.add(item)
        session.flush()
        return item.id


DRAFT = ("In the first image, a man looks at his phone while driving. In the second image, his car has hit a lamp "
         "post. The causal link is that he did not watch the road.")


def write_cues(panel) -> None:
    """The cue set in one's own words: the fields start empty (issue 32); not the model's set retyped (issue 43)."""
    type_text(panel, "cue", "phone")
    type_text(panel, "false_cues", "lamp post\nseat belt\nrain")


def test_mucr_explain_a_copied_draft_is_not_counted_and_comes_back_with_the_reason(pages, label_studio,
                                                                                   team_workspace, run_cli):
    store = team_workspace.store
    item_id = add_explain_item(store, label_studio.media_root / f"explain-{uuid.uuid4().hex[:6]}")
    push_json(run_cli, "--kind", "mucr", "--task", "explain")
    tasks = assigned(store, "explain")
    assert len({t.assignee for t in tasks}) == 3  # three different people, a task each
    first = tasks[0]
    page = pages[first.assignee]
    with screenshot_on_failure(page, "mucr-explain"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        field = panel.locator("textarea[name=explanation]")
        assert field.input_value() == ""  # never pre-filled with the model's draft
        assert "The causal link is that he did not watch the road." in panel.inner_text()  # shown as a reference
        save_screenshot(page, "mucr-explain")
        submit_expecting_warning(panel, "Please answer (i)")  # the form as it came: nothing of one's own to submit
        type_text(panel, "explanation", DRAFT.upper().replace(",", ""))  # the draft, copied (case and commas aside)
        write_cues(panel)
        submit(panel)
    report = pull_json(run_cli)
    [returned] = report["returned"][first.assignee]
    assert returned["reason"] == "the explanation is the model's draft: write your own explanation"
    [again] = [t for t in assigned(store, "explain") if t.assignee == first.assignee]
    assert again.id != first.id and again.ls_project_id == first.ls_project_id
    with screenshot_on_failure(page, "mucr-explain-returned"):
        panel = label_all(page, label_studio.url, first.ls_project_id)
        assert "Returned to you" in panel.inner_text() and returned["reason"] in panel.inner_text()
        save_screenshot(page, "mucr-explain-returned")
        type_text(panel, "explanation", "In the first image a driver reads a message. In the second image the car "
                                        "is against a post. The causal link is his distraction.")
        write_cues(panel)
        submit(panel)
    others = [t for t in assigned(store, "explain") if t.assignee != first.assignee]
    own_words = ["In the first image someone texts at the wheel. In the second image the bonnet is crumpled against "
                 "a pole. The causal link is that his eyes were on the screen.",
                 "In the first image the phone lights up in his hand. In the second image there is a crash at the "
                 "roadside. The causal link is the distraction."]  # each person's own (near copies do not count)
    for n, task in enumerate(others):
        label_studio.client(task.assignee).annotations.create(id=task.ls_task_id, result=[
            {"from_name": "explanation", "to_name": "cause_image", "type": "textarea",
             "value": {"text": [own_words[n]]}},
            {"from_name": "cue", "to_name": "cause_image", "type": "textarea", "value": {"text": ["phone"]}},
            {"from_name": "false_cues", "to_name": "cause_image", "type": "textarea",
             "value": {"text": ["lamp post\nseat belt\nrain"]}}])
    report = pull_json(run_cli)
    assert report["invalid"] == [] and item_status(store, item_id) == "accepted", report
    with store.session() as session:
        explanations = session.get(Item, item_id).data["explanations"]
    assert len(explanations) == 3 and DRAFT not in explanations


def test_cfmm_author_an_invalid_submission_comes_back_to_its_author(pages, label_studio, team_workspace, run_cli):
    folder = label_studio.media_root / f"author-{uuid.uuid4().hex[:6]}"
    draw(folder / "bus.png", "red")
    (folder / "basic.csv").write_text("image,question,answer\nbus.png,What colour is the bus?,red\n")
    assert run_cli("ingest", "table", folder / "basic.csv", "--images", folder).exit_code == 0
    pushed = push_json(run_cli, "--kind", "cfmm", "--task", "author")
    [(author, project_id)] = pushed["project_ids"].items()
    headers = headers_of("cfmm", "author")
    page = pages[author]
    with screenshot_on_failure(page, "cfmm-author"):
        panel = label_all(page, label_studio.url, project_id)
        assert loaded_image_widths(page, 1)[0] > 0
        assert "Color" in choice_labels(panel, headers["type"])
        save_screenshot(page, "cfmm-author")
        pick(panel, headers["type"], "Color")
        type_text(panel, "basic_question", "What colour is the bus?")  # and no options: not a usable pair
        submit(panel)
    report = pull_json(run_cli)["authoring"]
    [returned] = report["returned"][author]
    assert returned["reason"] == "'basic_option_a' is empty"
    with screenshot_on_failure(page, "cfmm-author-returned"):
        panel = label_all(page, label_studio.url, project_id)
        assert "Returned to you" in panel.inner_text() and "'basic_option_a' is empty" in panel.inner_text()
        pick(panel, headers["type"], "Color")
        for name, text in (("basic_question", "What colour is the bus?"), ("basic_option_a", "red"),
                           ("basic_option_b", "blue"), ("cf_question", "If the bus were painted like the sky, what "
                                                                       "colour would it be?"),
                           ("cf_option_a", "red"), ("cf_option_b", "blue")):
            type_text(panel, name, text)
        pick(panel, headers["basic_correct"], "A")
        pick(panel, headers["cf_correct"], "B")
        submit(panel)
    report = pull_json(run_cli)["authoring"]
    assert report["items_added"] == 1 and report["returned"] == {} and report["refused"] == []
