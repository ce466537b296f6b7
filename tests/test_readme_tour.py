"""The README's "A walk through the flow" runs as written (issue 46: its `ingest` line had no `--licence`, so export
refused later; its `annotate controls` line had no `--images`; nothing ran the tour).

The test reads the README's bash block itself, so README and test cannot drift: each `cftools ...` line is run in
order, in-process, exactly as written except for the file names below (PLACEHOLDERS: the README's names for a
person's files, here the shipped examples'). Each step must exit 0 and do what its comment says (STEPS); a line the
test does not know fails it, so a new line in the tour needs its check here.

What the README asks a person to do besides the commands is done here too, and only that:
- "Edit cftools.toml first": [llm] points at the loopback LLM stub (tests/llm_stub.py; its answers are well-formed
  rewrites, not true ones, so the answers' re-derivation is off), [label_studio] at the session's Label Studio server;
- "people judge the tasks in Label Studio": the two annotators accept every task through the real API.
The embedded models are used where the tour names no model: the edit pipeline, the duplicate check's embedder and
the text-only baseline of `eval --model blind`."""

from __future__ import annotations

import re
import shlex
import shutil
import uuid
from pathlib import Path
from typing import Callable

from click.testing import CliRunner
from sqlalchemy import func, select

from fixtures_label_studio import verify_result

from cftools.cli import main
from cftools.models import (
    ACCEPTED, CHECKED, DRAFT, IN_REVIEW, AnnotationTask, ControlItem, DatasetLicence, Item, Judgment, SourceQuestion,
)
from cftools.workspace import load_workspace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TOKEN_ENV = "CFTOOLS_TEST_TOUR_LS_TOKEN"

# The README's names for a person's files -> the shipped examples (folders are copied under the Label Studio
# server's document root, where a real setup keeps the images it shows).
PLACEHOLDERS = {
    "questions.json": EXAMPLES / "vqav2" / "questions.json",
    "annotations.json": EXAMPLES / "vqav2" / "annotations.json",
    "my-items.csv": EXAMPLES / "cvqa" / "drawn-shapes.csv",
    "edits.csv": EXAMPLES / "edits" / "hand-made" / "edits.csv",
    "controls.csv": EXAMPLES / "cvqa" / "controls.csv",
}
FOLDERS = {"val2014/": EXAMPLES / "vqav2" / "images", "my-edits/": EXAMPLES / "edits" / "hand-made"}


def tour_lines() -> list[list[str]]:
    """The commands of the README's "A walk through the flow" bash block as words, comments dropped, in order
    (`a && b` is two commands)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## A walk through the flow\n.*?```bash\n(.*?)```", readme, re.S)
    assert block, "README.md has no bash block under 'A walk through the flow'"
    commands = []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words:
            commands += split_and(words)
    return commands


def split_and(words: list[str]) -> list[list[str]]:
    """`a && b` -> [a, b]."""
    parts: list[list[str]] = [[]]
    for word in words:
        parts.append([]) if word == "&&" else parts[-1].append(word)
    return [p for p in parts if p]


# ---------------------------------------------------------------- what each step says it does

class Tour:
    def __init__(self, root: Path, files: dict[str, Path], label_studio, llm_url: str, prefix: str) -> None:
        self.cwd, self.files, self.ls, self.llm_url, self.prefix = root, files, label_studio, llm_url, prefix

    def ws(self):
        return load_workspace(self.cwd)

    def count(self, query) -> int:  # noqa: ANN001
        ws = self.ws()
        try:
            with ws.store.session() as session:
                return session.execute(query).scalar_one()
        finally:
            ws.close()

    def items(self, **where) -> int:
        query = select(func.count()).select_from(Item)
        for name, value in where.items():
            query = query.where(getattr(Item, name) == value)
        return self.count(query)

    def data_items(self, key: str) -> int:
        ws = self.ws()
        try:
            with ws.store.session() as session:
                return sum(1 for data in session.execute(select(Item.data)).scalars() if (data or {}).get(key))
        finally:
            ws.close()


def after_init(tour: Tour, out: str) -> None:
    """The workspace is there (the tour goes into it next); the person's settings: the LLM stub and the Label Studio
    server."""
    config = tour.cwd / "my-bench" / "cftools.toml"
    text = config.read_text()
    text = text.replace('\nbackend = "local"\n', f'\nbackend = "openai"\nbase_url = "{tour.llm_url}"\n'
                        'api_key_env = "CFTOOLS_TEST_TOUR_LLM_KEY"\nrederive = false\n', 1)
    text = text.replace('\nmodel = "smollm2-135m-instruct"\n', '\nmodel = "stub"\n', 1)
    text = text.replace("\n[label_studio]\n", f'\n[label_studio]\nurl = "{tour.ls.url}"\ndocument_root = '
                        f'"{tour.ls.media_root}"\nproject_prefix = "{tour.prefix}"\n', 1)
    config.write_text(text.replace('token_env = "LABEL_STUDIO_API_KEY"', f'token_env = "{TOKEN_ENV}"'))
    assert load_workspace(config.parent).config["llm"]["base_url"] == tour.llm_url


def ingested_vqav2(tour: Tour, out: str) -> None:
    assert tour.count(select(func.count()).select_from(SourceQuestion).where(
        SourceQuestion.dataset == "vqav2:val2014")) == 13
    assert tour.count(select(DatasetLicence.licence).where(DatasetLicence.dataset == "vqav2:val2014")) \
        == "CC-BY-4.0"


def ingested_cvqa(tour: Tour, out: str) -> None:
    assert tour.items(status=DRAFT) == 6


def drafted(tour: Tour, out: str) -> None:
    assert tour.items(group="boolean") > 2  # the two boolean items people wrote, and the drafts


def edited(tour: Tour, out: str) -> None:
    assert tour.data_items("edit_candidates") >= 6  # every item with an image and a condition


def imported_edits(tour: Tour, out: str) -> None:
    assert "7 edits read" in out


def checked(tour: Tour, out: str) -> None:
    assert tour.items(status=CHECKED) > 0 and tour.items(status=DRAFT) == 0, out


def controls_loaded(tour: Tour, out: str) -> None:
    assert tour.count(select(func.count()).select_from(ControlItem)) == 4
    assert "0 without an image" in out


def pushed(tour: Tour, out: str) -> None:
    """Tasks on the server; then the two people accept every one (what the README's next comment says)."""
    tasks = tour.count(select(func.count()).select_from(AnnotationTask).where(AnnotationTask.ls_task_id.is_not(None)))
    assert tasks >= tour.items(status=IN_REVIEW) > 0 and tour.items(status=CHECKED) == 0, out
    for email in tour.ls.annotators:
        client = tour.ls.client(email)
        for project in client.projects.list():
            if (project.title or "").startswith(tour.prefix):
                for task in client.tasks.list(project=project.id):
                    client.annotations.create(id=task.id, lead_time=3.0, result=verify_result("yes", "yes"))


def pulled(tour: Tour, out: str) -> None:
    assert tour.count(select(func.count()).select_from(Judgment)) > 0
    assert tour.items(status=ACCEPTED) > 0 and tour.items(status=IN_REVIEW) == 0, out  # both accepted every task


def status_shown(tour: Tour, out: str) -> None:
    assert re.search(r"accepted\s*│\s*\d+", out), out


def reported(tour: Tour, out: str) -> None:
    assert (tour.cwd / "report.html").is_file() and re.search(r"\d+ items: ingested \d+, drafted \d+", out), out


def released(version: str) -> Callable[[Tour, str], None]:
    def check(tour: Tour, out: str) -> None:
        folder = tour.cwd / "releases" / f"mybench-{version}"
        assert (folder / "croissant.json").is_file() and (folder / "browse.html").is_file(), out
        assert re.search(r"\d+ items \(\d+ verified, 0 unverified\)", out), out
    return check


def verified(tour: Tour, out: str) -> None:
    assert re.search(r"OK: \d+ files in releases/mybench-1.0.0 match the manifest", out), out


def preflighted(tour: Tour, out: str) -> None:
    assert "MDD" in out and "human ceiling" in out and "Every check passed" in out, out


def diffed(tour: Tour, out: str) -> None:
    assert "mybench 1.0.0 → mybench 1.1.0" in out and "0 added, 0 removed" in out, out


def evaluated(tour: Tour, out: str) -> None:
    runs = list((tour.cwd / "runs").glob("mybench-1.0.0--blind--*/report.md"))
    assert runs and re.search(r"(\d+) of \1 questions answered", out), out


STEPS: dict[str, Callable[[Tour, str], None]] = {
    "init": after_init,
    "ingest vqav2": ingested_vqav2,
    "ingest cvqa": ingested_cvqa,
    "generate rewrite": drafted,
    "generate edits": edited,
    "ingest edits": imported_edits,
    "check": checked,
    "annotate controls": controls_loaded,
    "annotate push": pushed,
    "annotate pull": pulled,
    "status": status_shown,
    "report": reported,
    "export mybench --version 1.0.0": released("1.0.0"),
    "verify": verified,
    "preflight": preflighted,
    "export mybench --version 1.1.0": released("1.1.0"),
    "release diff": diffed,
    "eval": evaluated,
}


def step_of(words: list[str]) -> Callable[[Tour, str], None]:
    """The check of a tour line: the longest STEPS name its words start with."""
    text = " ".join(words)
    names = [n for n in STEPS if text == n or text.startswith(n + " ")]
    assert names, f"README tour line `cftools {text}` has no check in tests/test_readme_tour.py (STEPS)"
    return STEPS[max(names, key=len)]


def substituted(words: list[str], files: dict[str, Path]) -> list[str]:
    return [str(files[w]) if w in files else w for w in words]


def test_the_readme_names_only_files_the_test_knows():
    """Every file name on a tour line is an example's (PLACEHOLDERS) or made by an earlier line."""
    made = {"my-bench", "releases/mybench-1.0.0", "mybench@1.0.0", "mybench@1.1.0", "mybench"}
    for words in tour_lines():
        for word in words:
            if re.search(r"\.(json|csv)$|/$", word):
                assert word in PLACEHOLDERS or word in FOLDERS or word in made, f"{word!r} in `{shlex.join(words)}`"


def test_the_readme_tour_runs_as_written(label_studio, llm_server, tmp_path, monkeypatch):
    # the images are served from under the server's document root; the workspace must not be there (push refuses)
    images = label_studio.media_root / f"tour-{uuid.uuid4().hex[:8]}"
    files: dict[str, Path] = dict(PLACEHOLDERS)
    for name, folder in FOLDERS.items():
        files[name] = shutil.copytree(folder, images / name.rstrip("/"))
    monkeypatch.chdir(tmp_path)
    for variable in ("CFTOOLS_WORKSPACE", "LABEL_STUDIO_URL", "LOCAL_FILES_DOCUMENT_ROOT"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.setenv("CFTOOLS_TEST_TOUR_LLM_KEY", "stub-key")
    tour = Tour(tmp_path, files, label_studio, llm_server.base_url, f"tour-{uuid.uuid4().hex[:8]}")
    runner = CliRunner()
    lines = tour_lines()
    assert lines[0][:2] == ["cftools", "init"]
    ran = []
    for words in lines:
        line = shlex.join(words)
        if words[0] == "cd":
            tour.cwd = tour.cwd / words[1]
            monkeypatch.chdir(tour.cwd)
            continue
        assert words[0] == "cftools", f"README tour line `{line}` is not a cftools command"
        check = step_of(words[1:])
        result = runner.invoke(main, substituted(words[1:], files), catch_exceptions=False)
        assert result.exit_code == 0, f"`{line}` exited {result.exit_code}:\n{result.output}"
        check(tour, result.output)
        ran.append(check)
    assert ran == list(STEPS.values()), "the README's tour and STEPS differ in their steps or their order"


def test_controls_whose_images_are_not_beside_the_file_are_refused_naming_images(workspace, run_cli):
    """Issue 46: the tour's `annotate controls` line had no --images. Without it the images are looked for beside
    the file; one that is not there stops the load in one line that names --images, and nothing is loaded."""
    assert run_cli("ingest", "cvqa", PLACEHOLDERS["my-items.csv"], "--images", FOLDERS["val2014/"]).exit_code == 0
    result = run_cli("annotate", "controls", PLACEHOLDERS["controls.csv"], "--kind", "cvqa")
    assert result.exit_code == 1
    line, = result.stderr.strip().splitlines()
    assert "controls.csv, line 2: image 'COCO_val2014_000000009003.jpg' is not a file in" in line and "--images" in line
    with workspace.store.session() as session:
        assert session.execute(select(func.count()).select_from(ControlItem)).scalar_one() == 0
    loaded = run_cli("annotate", "controls", PLACEHOLDERS["controls.csv"], "--kind", "cvqa", "--images",
                     FOLDERS["val2014/"])
    assert loaded.exit_code == 0 and "4 cvqa controls added" in loaded.output, loaded.output
