"""An annotator's view of each kind's verification task, in a real browser.

Playwright for Python drives Debian's `chromium` (no browser download: `.ci/run` installs the package
with apt-get) against the Label Studio test server (fixture `label_studio`): an annotator logs in on the
login page, opens one task, sees its images loaded and its texts, answers through the UI and submits;
`cftools annotate pull` then reads that annotation back as a judgment. Where no browser is installed the
tests skip with the reason; under CI=true they fail instead. Set CFTOOLS_BROWSER_ARTIFACTS to a folder to
keep a screenshot of each task as the annotator saw it (and of the page where a check failed).
"""

from __future__ import annotations

import json
import os
import time
import uuid
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import PIL.Image
import pytest
from sqlalchemy import select

from fixtures_label_studio import ANNOTATORS
from test_annotate import ls_workspace, make_items, mark_checked, task_map  # noqa: F401 (ls_workspace: fixture)
from test_label_configs import text_elements

from cftools.judgments import VERIFY
from cftools.annotate.rules import render_label_config
from cftools.images import read_image_file, register_image
from cftools.models import CHECKED, IN_REVIEW, AnnotationTask, Item, Judgment, SourceQuestion

CHROMIUM = Path(os.environ.get("CFTOOLS_CHROMIUM", "/usr/bin/chromium"))
# Without the networking flags Chromium keeps dialling out, and a closed network refuses it many times over.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
UI_TIMEOUT_MS = 60_000  # the labeling app is a large bundle; the shared 2-core host can be slow to run it
PANEL = ".lsf-main-view__annotation"  # Label Studio's labeling area (the task list beside it has images too)
IMAGE_LOAD_ERROR = "There was an issue loading URL"  # what Label Studio shows instead of a broken image
ARTIFACTS = os.environ.get("CFTOOLS_BROWSER_ARTIFACTS")


def missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM}: apt-get install -y chromium (or set CFTOOLS_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    """A headless Chromium with a new, empty profile."""
    reason = missing_browser()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        context.set_default_timeout(UI_TIMEOUT_MS)
        yield context
        context.close()


@pytest.fixture(scope="module")
def annotator_page(browser_context, label_studio):
    """A page on which the first annotator has logged in through the login form."""
    email, password = ANNOTATORS[0]
    page = browser_context.new_page()
    page.goto(label_studio.url + "/user/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "/user/login" not in page.url, f"{email} could not log in"
    yield page
    page.close()


# ---------------------------------------------------------------- the labeling UI


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


def expect_texts(panel, expected: list[str]) -> None:
    """The task's visible text elements read EXPECTED, in order (whitespace-normalised; retried while the
    app draws the panel)."""
    from playwright.sync_api import expect

    expect(panel.locator(".lsf-richtext").filter(visible=True)).to_have_text(expected, use_inner_text=True)


def choose(panel, header: str, value: str) -> None:
    """Tick VALUE among the choices under HEADER (Label Studio names each choice's input by its value)."""
    heading = panel.get_by_role("heading", name=header, exact=True)
    choices = heading.locator("xpath=following-sibling::div[contains(@class, 'lsf-choices')][1]")
    choices.locator(f"input[name='{value}']").check()


def type_text(panel, name: str, text: str) -> None:
    """Fill a TextArea and press Enter, which is how Label Studio adds the text to the result."""
    field = panel.locator(f"input[name='{name}'], textarea[name='{name}']").first
    field.fill(text)
    field.press("Enter")


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


def image_names(config: str) -> list[str]:
    return [element.get("name") for element in ET.fromstring(config).iter("Image")]


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


def pushed_cvqa_task(run_cli, ls_workspace, label_studio) -> tuple[int, int]:
    """One checked C-VQA item with its image, pushed with `cftools annotate push`: (project id, task id)."""
    make_items(run_cli, label_studio.media_root / f"browser-{uuid.uuid4().hex[:6]}", 1)
    mark_checked(ls_workspace.store)
    result = run_cli("annotate", "push", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["project_id"], next(iter(task_map(ls_workspace.store).values()))


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


def pushed_kind_task(run_cli, ls_workspace, label_studio, kind: str) -> tuple[int, int]:
    """One checked KIND item with its images, pushed with `cftools annotate push --kind KIND`."""
    folder = label_studio.media_root / f"browser-{uuid.uuid4().hex[:6]}"
    if kind == "cfmm":
        add_cfmm_item(run_cli, ls_workspace.store, folder)
    else:
        add_mucr_item(ls_workspace.store, folder)
    result = run_cli("annotate", "push", "--kind", kind, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["pushed"] == 1, report
    return report["project_id"], next(iter(task_map(ls_workspace.store).values()))


# ---------------------------------------------------------------- reading, answering, pulling back


def read_and_answer(page, label_studio, kind: str, project_id: int, task_id: int) -> dict[str, float]:
    """Open the task and check what the annotator sees: every image loaded, every text field shown as
    text in the config's order; then answer (related, the marked answer wrong with a correction, one
    flag) and submit. Returns the seconds spent opening and checking + answering."""
    data = label_studio.client().tasks.get(id=task_id).data
    config = render_label_config(kind, VERIFY)
    started = time.monotonic()
    with screenshot_on_failure(page, kind):
        panel = open_task(page, label_studio.url, project_id, task_id)
        opened = time.monotonic()
        expected_images = len(image_names(config))
        widths = loaded_image_widths(page, expected_images)
        assert len(widths) == expected_images and all(width > 0 for width in widths), widths
        expect_texts(panel, [" ".join(data[field].split()) for field in text_elements(config)])
        save_screenshot(page, kind)
        headers = control_headers(config)
        choose(panel, headers["related"], "yes")
        choose(panel, headers["answer_correct"], "no")
        type_text(panel, "corrected_answer", "three")
        choose(panel, headers["flags"], "ambiguous")
        for extra in set(headers) - {"related", "answer_correct", "flags", "corrected_answer", "comment"}:
            choose(panel, headers[extra], "yes")  # a kind's own required question (CFMM: can it be determined?)
        submit(panel)
    return {"open_s": opened - started, "check_and_answer_s": time.monotonic() - opened}


def assert_pulled_back(run_cli, store, task_id: int, annotator: str) -> None:
    """`annotate pull` turns the submitted annotation into the annotator's judgment of the item."""
    result = run_cli("annotate", "pull", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["invalid"] == [] and report["judgments_added"] == 1, report
    with store.session() as session:
        task = session.execute(select(AnnotationTask).where(AnnotationTask.ls_task_id == task_id)).scalar_one()
        [judgment] = session.execute(select(Judgment).where(Judgment.task_id == task.id)).scalars()
        assert (judgment.annotator, judgment.related, judgment.answer_correct, judgment.corrected_answer,
                judgment.flags) == (annotator, True, False, "three", ["ambiguous"])
        assert session.get(Item, task.item_id).status == IN_REVIEW  # one of two judgments


# ---------------------------------------------------------------- the tests


def test_cvqa_task_in_the_browser(annotator_page, label_studio, ls_workspace, run_cli):
    project_id, task_id = pushed_cvqa_task(run_cli, ls_workspace, label_studio)
    timings = read_and_answer(annotator_page, label_studio, "cvqa", project_id, task_id)
    assert_pulled_back(run_cli, ls_workspace.store, task_id, label_studio.annotators[0])
    print(f"cvqa: {timings}")


@pytest.mark.parametrize("kind", ["cfmm", "mucr"])
def test_kind_task_in_the_browser(kind, annotator_page, label_studio, ls_workspace, run_cli):
    project_id, task_id = pushed_kind_task(run_cli, ls_workspace, label_studio, kind)
    timings = read_and_answer(annotator_page, label_studio, kind, project_id, task_id)
    assert_pulled_back(run_cli, ls_workspace.store, task_id, label_studio.annotators[0])
    print(f"{kind}: {timings}")
