"""Kinds: the built-in three are registered like plugins; a toy kind shipped as its own package (tests/toy_kind,
registered through a `cftools.kinds` entry point) goes through check -> push -> pull -> export -> eval without a
line of it in a stage module."""

from __future__ import annotations

import csv
import json

import uuid
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from cftools.kinds import ItemDataError, get_kind, kind_names
from cftools.kinds import registry
from cftools.models import ACCEPTED, CHECKED, DRAFT, Item, SourceQuestion, utcnow
from test_annotate import configure, result, statuses, task_map, TOKEN_ENV
from cftools.workspace import load_workspace

TOY_PACKAGE = Path(__file__).parent / "toy_kind"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def toy_installed(monkeypatch):
    """The toy package on sys.path with its dist-info, so importlib.metadata sees its entry point."""
    monkeypatch.syspath_prepend(str(TOY_PACKAGE))
    registry._from_entry_points.cache_clear()
    yield
    registry._from_entry_points.cache_clear()


def test_builtin_kinds_are_listed_with_what_they_declare(run_cli):
    out = run_cli("kinds", "--json")
    assert out.exit_code == 0, out.output
    kinds = {k["name"]: k for k in json.loads(out.output)}
    assert {"cvqa", "cfmm", "mucr"} <= set(kinds)
    assert [g["name"] for g in kinds["cvqa"]["generators"]] == ["rewrite", "reparse"]
    assert "arithmetic" in [c["code"] for c in kinds["cvqa"]["checks"]]
    assert kinds["cvqa"]["export_formats"] == [{"name": "cvqa", "description": kinds["cvqa"]["export_formats"][0]
                                                ["description"]}]
    assert kinds["cfmm"]["metrics"][:3] == ["acc_b", "acc_c", "acc_plus"]
    assert set(kinds["mucr"]["tasks"]) == {"verify", "adjudicate", "select", "explain"}
    assert [g["name"] for g in kinds["mucr"]["generators"]][-1] == "cues"
    assert [f["name"] for f in kinds["mucr"]["export_formats"]] == ["mucr"]
    table = run_cli("kinds")
    assert all(name in table.output for name in ("cvqa", "cfmm", "mucr"))


def test_the_builtin_kinds_come_from_entry_points():
    from importlib.metadata import entry_points

    names = {e.name for e in entry_points(group="cftools.kinds")}
    assert {"cvqa", "cfmm", "mucr"} <= names


def test_bad_item_data_names_the_item_and_the_field():
    with pytest.raises(ItemDataError) as err:
        get_kind("cfmm").hooks.ingest.validate({"options": {"original": ["a", "b"]}}, item="pair-7")
    assert "pair-7" in str(err.value) and "options" in str(err.value)
    with pytest.raises(ItemDataError, match="c2e_answer"):
        get_kind("mucr").hooks.ingest.validate({"c2e_answer": "first"}, item="m1")
    assert get_kind("cvqa").hooks.ingest.validate({"cvqa_type": "direct", "line": 3}).cvqa_type == "direct"


def test_an_unknown_kind_is_a_clear_error():
    from cftools.errors import CftoolsError

    with pytest.raises(CftoolsError, match="unknown kind 'nope'.*cvqa"):
        get_kind("nope")


def test_a_kind_registers_through_its_entry_point(toy_installed):
    assert "toy" in kind_names()
    toy = get_kind("toy")
    assert toy.title.startswith("Toy")
    with pytest.raises(ItemDataError, match="colour"):
        toy.hooks.ingest.validate({"shape": "square"}, item="toy-1")



def test_kinds_shows_the_stages_each_kind_fills(toy_installed, run_cli):
    out = run_cli("kinds", "--json")
    assert out.exit_code == 0, out.output
    stages = {k["name"]: k["stages"] for k in json.loads(out.output)}
    every = ["ingest", "generate", "check", "annotate", "release", "evaluate"]
    assert stages["cvqa"] == stages["cfmm"] == stages["mucr"] == every
    assert stages["toy"] == ["ingest", "check", "annotate", "release", "evaluate"]  # it generates nothing
    table = run_cli("kinds")
    assert table.exit_code == 0 and "stages" in table.output and "evaluate" in table.output


def test_every_kind_hook_belongs_to_one_stage():
    from cftools.kinds.base import STAGE_CLASSES, STAGE_HOOKS

    grouped = [hook for hooks in STAGE_HOOKS.values() for hook in hooks]
    assert len(grouped) == len(set(grouped))
    identity = {"kind", "fills"}
    assert {n for cls in STAGE_CLASSES.values() for n in dir(cls) if not n.startswith("_")} - identity == set(grouped)


def test_the_kind_itself_holds_no_hook_and_says_where_one_went():
    from cftools.kinds.base import STAGE_HOOKS, Kind

    assert not {hook for hooks in STAGE_HOOKS.values() for hook in hooks} & set(dir(Kind))
    with pytest.raises(AttributeError, match=r"kind 'cvqa' has no 'task_data'.*kind\.hooks\.annotate\.task_data"):
        get_kind("cvqa").task_data  # noqa: B018


def test_a_stage_a_kind_gives_nothing_is_none_and_the_stages_get_its_defaults(toy_installed):
    toy = get_kind("toy")
    assert toy.generate is None and toy.annotate is toy.hooks.annotate
    assert toy.hooks.generate.generators == () and toy.hooks.generate.edit_subject(object(), None) is None
    assert not toy.hooks.generate.fills("edit_subject") and get_kind("cvqa").hooks.generate.fills("edit_subject")
    assert toy.hooks.check.answer_style(object()) is None  # a default of a stage it fills
    assert toy.hooks.annotate.label_config("verify").startswith("<View")  # its own template root


def test_a_stage_declared_with_the_wrong_hooks_class_is_refused_at_registration():
    from cftools.errors import CftoolsError
    from cftools.kinds import CheckHooks, Kind

    class Misplaced(Kind):
        name = "misplaced"
        annotate = CheckHooks

    with pytest.raises(CftoolsError, match="kind 'misplaced': annotate = .*CheckHooks.* not a subclass of "
                                           "AnnotateHooks"):
        registry.register(Misplaced)
    assert "misplaced" not in kind_names()


def test_a_kind_written_the_old_way_keeps_working():
    """Hooks as the kind's own attributes (before the stage objects): each becomes its stage's hook, and the kind's
    methods still reach the defaults and its other hooks through `self`."""
    from cftools.kinds import ItemData, Kind

    class OldData(ItemData):
        shape: str

    class OldKind(Kind):
        name = "old"
        title = "Old: hooks on the kind"
        data_model = OldData
        tasks = {"verify": "cvqa/verify.xml.j2", "adjudicate": "cvqa/adjudicate.xml.j2"}
        metrics = ("accuracy",)

        def __init__(self) -> None:  # written before Kind had an __init__: does not call it
            self.seen = []

        def task_data(self, item, source, image_value, extra_images):  # noqa: ANN001, ANN201
            return {"image": image_value, "kind": self.name, "config": self.task_template("verify")}

        def summarize(self, outcomes):  # noqa: ANN001, ANN201
            self.seen.append(len(outcomes))
            return {"n": len(outcomes), "metrics": list(self.metrics)}

    try:
        old = registry.register(OldKind)
        assert get_kind("old") is old
        assert old.stages() == ["ingest", "annotate", "evaluate"] and old.generate is None
        assert old.describe()["tasks"] == OldKind.tasks and old.describe()["fields"] == ["shape"]
        with pytest.raises(ItemDataError, match="shape"):
            old.hooks.ingest.validate({}, item="old-1")
        item = type("Item", (), {"question": "q", "answer": "a"})()
        assert old.hooks.annotate.task_data(item, None, "/img.png", {}) == {
            "image": "/img.png", "kind": "old", "config": "cvqa/verify.xml.j2"}
        assert old.hooks.annotate.task_payload("verify", "", item, None, "/img.png", {})["kind"] == "old"
        assert old.hooks.evaluate.summarize([{}, {}]) == {"n": 2, "metrics": ["accuracy"]} and old.seen == [2]
        assert old.hooks.release.diff_fields({"question": "q"})["question"] == [None, "q"]  # a default
    finally:
        registry.unregister("old")


def test_an_old_style_hook_on_a_subclass_of_a_built_in_kind_overrides_that_hook_only():
    from cftools.kinds.cvqa import CvqaKind

    class MyCvqa(CvqaKind):
        name = "mycvqa"

        def task_data(self, item, source, image_value, extra_images):  # noqa: ANN001, ANN201
            return {"image": image_value, "mine": True}

    try:
        mine = registry.register(MyCvqa)
        assert mine.hooks.annotate.task_data(object(), None, "/img.png", {}) == {"image": "/img.png", "mine": True}
        assert mine.hooks.annotate.tasks == get_kind("cvqa").hooks.annotate.tasks and mine.stages() == get_kind(
            "cvqa").stages()
    finally:
        registry.unregister("mycvqa")


def test_mucr_declares_each_task_once():
    mucr = get_kind("mucr").hooks.annotate
    assert list(mucr.tasks) == ["verify", "adjudicate", "select", "explain"]
    assert {name: mucr.tasks[name] for name in mucr.task_specs} == {
        name: spec.template for name, spec in mucr.task_specs.items()}


class ColourAnswerer:
    """Answers every toy question with the colour written in it (a stand-in for a model)."""

    def generate(self, prompts):
        return [p.text.rsplit(" ", 1)[-1].rstrip("?") for p in prompts]

    def score_options(self, prompts):
        raise AssertionError("not asked in generate mode")

    def close(self):
        pass


def add_toy_items(store, folder: Path, run_cli) -> list[str]:
    """Three toy items on real images (ingested as a table so the images are in the store)."""
    folder.mkdir(parents=True)
    colours = ["red", "green", "blue"]
    rows = []
    for i, colour in enumerate(colours):
        PIL.Image.new("RGB", (10 + i, 10), colour).save(folder / f"toy{i}.png")
        rows.append({"image": f"toy{i}.png", "question": f"Which colour is shape {i}?", "answer": colour})
    with open(folder / "toy.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["image", "question", "answer"])
        writer.writeheader()
        writer.writerows(rows)
    assert run_cli("ingest", "table", folder / "toy.csv", "--images", folder, "--licence", "CC-BY-4.0").exit_code == 0
    shapes = ["square", "circle", "blob"]
    with store.write() as session:
        sources = session.execute(select(SourceQuestion).order_by(SourceQuestion.id)).scalars().all()
        for source, shape in zip(sources, shapes):
            session.add(Item(key=f"toy:{source.id}", kind="toy", group=shape, source_id=source.id,
                             question=f"Which colour would the {shape} be if it were painted {source.answer}?",
                             answer=source.answer, status=DRAFT, origin="ingested",
                             data={"shape": shape, "colour": source.answer}, created_at=utcnow(),
                             updated_at=utcnow()))
    return shapes


def test_a_toy_kind_goes_through_the_whole_flow(toy_installed, workspace, label_studio, run_cli, monkeypatch,
                                                  tmp_path):
    prefix = f"toy-{uuid.uuid4().hex[:8]}"
    configure(workspace.root, label_studio.url, label_studio.media_root, prefix)
    monkeypatch.setenv(TOKEN_ENV, label_studio.admin_token)
    monkeypatch.delenv("LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    ws = load_workspace(workspace.root)
    add_toy_items(ws.store, label_studio.media_root / prefix, run_cli)

    # check: the kind's own check flags the blob; the others move to checked
    out = run_cli("check", "--json", "--no-embeddings")
    assert out.exit_code == 0, out.output
    by_group = {i.group: i.status for i in _items(ws.store)}
    assert by_group == {"square": CHECKED, "circle": CHECKED, "blob": DRAFT}
    assert "toy_blob" in out.output

    # push with the kind's own label config (from its package), two annotators, pull
    out = run_cli("annotate", "push", "--kind", "toy", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["pushed"] == 2
    tasks = task_map(ws.store)
    admin = label_studio.client()
    task = admin.tasks.get(id=next(iter(tasks.values())))
    assert task.data["shape"] in ("square", "circle") and task.data["kind"] == "toy"
    one, two = (label_studio.client(email) for email in label_studio.annotators)
    for task_id in tasks.values():
        one.annotations.create(id=task_id, result=result("yes", "yes"))
        two.annotations.create(id=task_id, result=result("yes", "yes"))
    out = run_cli("annotate", "pull", "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["invalid"] == []
    assert sorted(statuses(ws.store).values()) == [ACCEPTED, ACCEPTED, DRAFT]

    # export: native and the kind's own format
    out = run_cli("export", "toybench", "--version", "1.0.0", "--licence", "CC0-1.0", "--json")
    assert out.exit_code == 0, out.output
    release = Path(json.loads(out.output)["path"])
    records = [json.loads(line) for line in (release / "records.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in records} == {"toy"} and len(records) == 2
    out = run_cli("export", "toybench", "--version", "1.0.0", "--licence", "CC0-1.0", "--format", "toy-csv", "--json")
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(open(Path(json.loads(out.output)["path"]) / "toybench.csv")))
    assert sorted(r["answer"] for r in rows) == ["green", "red"]

    # eval: the kind's questions and metric
    from cftools.evaluate.run import EvalOptions, run_eval

    result_ = run_eval(release, "blind", options=EvalOptions(out_dir=tmp_path / "run"), answerer=ColourAnswerer())
    assert result_.summary["toy"]["accuracy"]["value"] == 1.0
    assert "Toy accuracy" in (tmp_path / "run" / "report.md").read_text()
    ws.close()


def _items(store):
    with store.session() as session:
        return session.execute(select(Item).where(Item.kind == "toy")).scalars().all()


def test_stage_modules_name_no_kind():
    """Outside cftools/kinds/ no code names a kind or a C-VQA group (docstrings and comments aside)."""
    import ast
    import re

    names = re.compile(r"^(cvqa|cfmm|mucr|numerical-direct|numerical-indirect|boolean)$")
    offenders = []
    for path in sorted((ROOT / "cftools").rglob("*.py")):
        if "kinds" in path.relative_to(ROOT / "cftools").parts:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if names.match(node.value):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                if re.match(r"cftools\.kinds\.(cvqa|cfmm|mucr)", module):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {module}")
    assert offenders == []


def test_the_plugin_example_in_the_docs_registers_with_the_stages_it_declares():
    text = (ROOT / "docs" / "kinds.md").read_text(encoding="utf-8")
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(example, "docs/kinds.md", "exec"), namespace)  # noqa: S102 (our own docs)
    try:
        mine = registry.register(namespace["MyKind"])
        assert mine.stages() == ["ingest", "annotate"] and mine.evaluate is None
        item = type("Item", (), {"question": "Which shape?", "data": {"shape": "square"}})()
        assert mine.hooks.annotate.task_data(item, None, "/img.png", {})["shape"] == "square"
        assert mine.hooks.evaluate.metrics == () and mine.describe()["fields"] == ["shape"]
    finally:
        registry.unregister("mykind")


def kind_receiver(node) -> bool:  # noqa: ANN001
    """Whether NODE reads as a kind: `get_kind(...)`, `kinds[...]`, or a name `kind`/`kind_obj`."""
    import ast

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "get_kind":
        return True
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "kinds":
        return True
    return isinstance(node, ast.Name) and node.id in ("kind", "kind_obj")


def test_no_stage_asks_a_kind_for_a_hook_directly():
    """Read from the source with `ast`: every hook is asked through `kind.hooks.<stage>` (a kind has no hook of its
    own; asking it is an AttributeError at run time, on whatever path first reaches it)."""
    import ast

    from cftools.kinds.base import HOOK_STAGE

    direct = [f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
              for path in sorted((ROOT / "cftools").rglob("*.py"))
              for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
              if isinstance(node, ast.Attribute) and node.attr in HOOK_STAGE and kind_receiver(node.value)]
    assert not direct, "ask kind.hooks.<stage>.<hook>: " + "; ".join(direct)
