"""Nothing personal leaves (issue 43): people leave a workspace only as keyed pseudonyms, and no release holds an
email or a local absolute path.

A store with items of every kind (release_stock), judged by people with real-looking emails (configured in
[label_studio] annotators and recorded as the judges of verify tasks), MuCR pairs whose explanations, cue sets and
selection name their people, an edit verified by two people and made by a model in a local folder, a generation by
a model in a home folder: every format is exported and each file read by a scan written here (independent of
cftools' own, `cftools.release.scan`), Parquet cells and browse.html included. Releases altered afterwards to hold
an email or a path (and resealed, so that every hash still matches) are refused by `verify` and `preflight`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
import stat
from pathlib import Path

import PIL.Image
import pytest
from sqlalchemy import select

from release_stock import stock_every_kind

from cftools.boundary import KEY_DIR, KEY_NAME, workspace_boundary
from cftools.errors import CftoolsError
from cftools.images import read_image_file, register_image
from cftools.models import AnnotationTask, Generation, Item, Judgment, Release
from cftools.release.export import ExportOptions, export_formats, export_release
from cftools.release.layout import MANIFEST_NAME, hash_file, load_records
from cftools.workspace import init_workspace, load_workspace

ANN1, ANN2, ANN3 = "maria.gonzalez@uni-example.edu", "J.Smith@lab-example.org", "wei.chen@example.net"
ADJ = "adjudicator.okafor@example.com"
PEOPLE = (ANN1, ANN2, ANN3, ADJ)
EDIT_MODEL = "/root/.cache/cftools/edit-models/instruct-pix2pix-tiny"
DRAFT_MODEL = "/home/maria/models/qwen2.5-7b-instruct"
LOGIN = "mgonzalez"  # the operating system's user name of a person who waived a flag
OPTIONS = {"allow_small_groups": True}


# ---------------------------------------------------------------- the store


def configure_people(workspace) -> None:
    """[label_studio] annotators in cftools.toml (as a team's workspace has them)."""
    path = workspace.config_path
    path.write_text(path.read_text(encoding="utf-8").replace(
        "[label_studio]\n", "[label_studio]\nannotators = " + json.dumps([ANN1, ANN2, ANN3]) + "\n", 1),
        encoding="utf-8")
    workspace.config = load_workspace(workspace.root).config


def judge(workspace, keys: list[str], people: tuple[str, ...]) -> None:
    """Decided verify tasks of KEYS, each judged on its person's own server."""
    with workspace.store.write() as session:
        for key in keys:
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            for m, person in enumerate(people):
                task = AnnotationTask(item_id=item.id, ls_project_id=1, ls_task_id=100_000 + 10 * item.id + m,
                                      state="decided", decision="accepted", assignee=person,
                                      server=f"http://127.0.0.1:{8301 + m}")
                session.add(task)
                session.flush()
                session.add(Judgment(task_id=task.id, annotator=person, related=True, answer_correct=True))


def register(store, path: Path, image: PIL.Image.Image) -> str:
    image.save(path)
    found = read_image_file(path)
    with store.write() as session:
        register_image(store, session, found)
    return f"sha256:{found.sha256}"


def add_verified_edit(workspace, key: str, folder: Path) -> None:
    """An edit made by a model in a local folder, accepted by two people."""
    folder.mkdir(parents=True, exist_ok=True)
    refs = {k: {"image": register(workspace.store, folder / f"edit-{k}.png", PIL.Image.new("RGB", (20, 20), colour)),
                "provenance": {"backend": "diffusers", "model": EDIT_MODEL, "licence": "MIT", "seed": int(k)}}
            for k, colour in (("0", "red"), ("1", "blue"))}
    with workspace.store.write() as session:
        item = session.execute(select(Item).where(Item.key == key)).scalar_one()
        item.data = {**(item.data or {}), "edit": {"condition": "one box fewer", "instruction": "erase a box"},
                     "edit_candidates": refs, "edit_checks": [{"k": 1, "flags": [], "score": 0.9}],
                     "edit_selected": 1, "edit_answer": "2",
                     "edit_verification": {"1": {"decision": "accepted", "rule": "two people agree",
                                                 "annotators": [ANN1, ANN2], "answer": "2"}}}
        session.add(item)


def name_mucr_people(workspace, keys: list[str]) -> None:
    """What MuCR's select and explain tasks store: explanations and cue sets by person, the agreement and the
    selection with their people (emails, as pull records them)."""
    with workspace.store.write() as session:
        for key in keys:
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            data = dict(item.data)
            data["explanations_by_annotator"] = dict(zip((ANN1, ANN2, ANN3), data["explanations"]))
            data["cue_sets_by_annotator"] = {p: {"cue": data["cue"], "false_cues": data["false_cues"]}
                                             for p in (ANN1, ANN2, ANN3)}
            data["cue_agreement"] = {"rule": "three explanations; the cue sets agree", "annotators": [ANN1, ANN2, ANN3]}
            data["selection"] = {**data["selection"], "annotators": [ANN2, ANN3]}
            data["waived_flags"] = {"cue_not_visible": {"by": ADJ, "reason": f"checked by {ADJ} on the image"}}
            item.data = data
            session.add(item)


def draft_with_a_local_model(workspace, keys: list[str]) -> None:
    """A generation by a model in a home folder; a flag waived by a person named by their login (`flags waive`
    without CFTOOLS_USER)."""
    with workspace.store.write() as session:
        generation = Generation(generator="pairs", backend="local", model=DRAFT_MODEL, template_name="cfmm_pair",
                                template_hash="cd" * 32)
        session.add(generation)
        session.flush()
        for key in keys:
            item = session.execute(select(Item).where(Item.key == key)).scalar_one()
            item.generation_id = generation.id
            item.data = {**item.data, "waived_flags": {"leak": {"by": LOGIN, "reason": "fine", "at": "2026-11-26"}}}
            session.add(item)


@pytest.fixture
def peopled(workspace, peer_cvqa_real, tmp_path):
    configure_people(workspace)
    keys = stock_every_kind(workspace, peer_cvqa_real, tmp_path / "in")
    judge(workspace, keys["cvqa"][:4], (ANN1, ANN2))
    judge(workspace, keys["cfmm"][:2], (ANN2, ANN3))
    judge(workspace, keys["cfmm"][2:3], (ANN1, ANN2, ADJ))
    add_verified_edit(workspace, keys["cvqa"][0], tmp_path / "in" / "edits")
    name_mucr_people(workspace, keys["mucr"])
    draft_with_a_local_model(workspace, keys["cfmm"])
    return workspace, keys


def export(workspace, out: Path, fmt: str = "native", version: str = "1.0"):
    return export_release(workspace, "bench", version, out,
                          options=ExportOptions(fmt=fmt, licence="CC-BY-4.0", kind_options=OPTIONS))


# ---------------------------------------------------------------- the scan of this test (not cftools')


def strings_of(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *strings_of(v)]]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings_of(v)]
    return []


def file_texts(folder: Path) -> dict[str, str]:
    """Every file's text: Parquet as the strings of its cells, images left out, data: URIs cut from the HTML."""
    import pyarrow.parquet as pq

    texts = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if path.suffix in (".png", ".jpg", ".jpeg"):
            continue
        if path.suffix == ".parquet":
            texts[rel] = "\n".join(strings_of(pq.read_table(path).to_pylist()))
        else:
            texts[rel] = re.sub(r"data:[\w/+.-]+;base64,[A-Za-z0-9+/=]+", "", path.read_text("utf-8", "replace"))
    return texts


def personal_data(folder: Path, extra_paths: tuple[str, ...] = ()) -> list[str]:
    found = []
    for rel, text in file_texts(folder).items():
        lowered = text.lower()
        found += [f"{rel}: {p}" for p in (*PEOPLE, LOGIN) if p.lower() in lowered]
        found += [f"{rel}: {m}" for m in re.findall(r"[\w.+-]+@[\w-]+\.[\w.]+", text)]
        found += [f"{rel}: {p}" for p in ("/home/", "/root/", "/tmp/", "/Users/", "C:\\", *extra_paths) if p in text]
    return found


def test_releases_of_every_kind_and_format_hold_no_email_and_no_local_path(peopled, tmp_path):
    workspace, keys = peopled
    ids = {p: workspace_boundary(workspace).pseudonym(p) for p in PEOPLE}
    formats = list(export_formats())
    assert {"native", "cvqa", "cfmm", "mucr", "lmms-eval", "vlmevalkit"} <= set(formats)
    for fmt in formats:
        result = export(workspace, tmp_path / "out", fmt)
        assert result.n_items, fmt
        assert personal_data(result.path, (str(workspace.root), str(tmp_path))) == [], fmt
    native = tmp_path / "out" / "bench-1.0"
    assert any(p.suffix == ".parquet" for p in native.rglob("*")) and (native / "browse.html").is_file()
    records = {r["id"]: r for r in load_records(native)}
    mucr = records[keys["mucr"][0]]["data"]
    assert set(mucr["explanations_by_annotator"]) == set(mucr["cue_sets_by_annotator"]) == {ids[ANN1], ids[ANN2],
                                                                                          ids[ANN3]}
    assert mucr["cue_agreement"]["annotators"] == [ids[ANN1], ids[ANN2], ids[ANN3]]
    assert mucr["selection"]["annotators"] == [ids[ANN2], ids[ANN3]]
    assert mucr["waived_flags"]["cue_not_visible"] == {"by": ids[ADJ],
                                                       "reason": f"checked by {ids[ADJ]} on the image"}
    edited = records[keys["cvqa"][0]]
    assert edited["data"]["edit_verification"]["1"]["annotators"] == [ids[ANN1], ids[ANN2]]
    assert edited["data"]["edited_image_model"] == "instruct-pix2pix-tiny"
    assert {ids[ANN1], ids[ANN2]} <= set(edited["verification"]["annotators"])  # beside the stock's judges
    assert {ids[p] for p in (ANN1, ANN2, ADJ)} <= set(records[keys["cfmm"][2]]["verification"]["annotators"])
    assert records[keys["cfmm"][0]]["data"]["waived_flags"]["leak"]["by"] == workspace_boundary(workspace).pseudonym(
        LOGIN)
    manifest = json.loads((native / MANIFEST_NAME).read_text())
    assert manifest["provenance"][keys["cfmm"][0]]["generation"]["model"] == "qwen2.5-7b-instruct"
    analysis = json.loads((native / "annotation_analysis.json").read_text())
    stock = {workspace_boundary(workspace).pseudonym(name) for name in ("ann1", "ann2")}  # release_stock's judges
    assert {p["id"] for p in analysis["people"]} <= set(ids.values()) | stock and analysis["people"]


def test_pseudonyms_are_keyed_stable_in_a_workspace_and_differ_between_workspaces(peopled, tmp_path):
    workspace, keys = peopled
    first = export(workspace, tmp_path / "out", version="1.0")
    second = export(workspace, tmp_path / "out", version="2.0")
    ids = [r["verification"]["annotators"] for r in load_records(first.path) if r["verification"]["people"]]
    assert ids == [r["verification"]["annotators"] for r in load_records(second.path) if r["verification"]["people"]]
    released = {i for group in ids for i in group}
    mine = workspace_boundary(workspace).pseudonym(ANN2)
    assert mine in released and all(re.fullmatch(r"annotator-[0-9a-f]{12}", i) for i in released)
    # nothing computed from the email alone gives the id: the former formula, plain hashes, an unkeyed HMAC
    email = ANN2.strip().lower()
    guesses = [hashlib.sha256(f"cftools-annotator:{email}".encode()).hexdigest(),
               *(hashlib.new(name, value.encode()).hexdigest() for name in ("sha256", "sha1", "md5", "blake2b")
                 for value in (email, ANN2)), hmac.new(b"", email.encode(), hashlib.sha256).hexdigest()]
    assert all("annotator-" + g[:12] not in released and g[:12] != mine[-12:] for g in guesses)
    other = init_workspace(tmp_path / "other")
    try:
        assert workspace_boundary(other).pseudonym(ANN2) != mine
    finally:
        other.close()
    # the key: made once, 0600, in the workspace's hidden folder, and nowhere a release, the store or the config is
    key_file = workspace.root / KEY_DIR / KEY_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_text().strip()
    assert workspace_boundary(workspace).pseudonym(ANN2) == mine and key_file.read_text().strip() == key
    for path in [*first.path.rglob("*"), workspace.config_path, *workspace.root.glob("cftools.db*")]:
        if path.is_file():
            assert key.encode() not in path.read_bytes() and bytes.fromhex(key) not in path.read_bytes(), path


def test_two_processes_making_the_key_at_once_agree(tmp_path):
    from multiprocessing import get_context

    from cftools.boundary import workspace_key

    root = tmp_path / "ws"
    root.mkdir()
    with get_context("spawn").Pool(4) as pool:
        keys = pool.map(workspace_key, [root] * 8)
    assert len(set(keys)) == 1 and [p.name for p in (root / KEY_DIR).iterdir()] == [KEY_NAME]


# ---------------------------------------------------------------- verify and preflight refuse what was slipped in


def reseal(folder: Path, changed: list[str]) -> None:
    """The CHANGED files' SHA-256s written into croissant.json and the manifest: only the scan can tell."""
    croissant = json.loads((folder / "croissant.json").read_text())
    for entry in croissant.get("distribution") or []:
        if entry.get("contentUrl") in changed:
            entry["sha256"] = hash_file(folder / entry["contentUrl"])
    (folder / "croissant.json").write_text(json.dumps(croissant, indent=2), encoding="utf-8")
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    for entry in manifest["files"]:
        if entry["path"] in [*changed, "croissant.json"]:
            entry["sha256"] = hash_file(folder / entry["path"])
            entry["size"] = (folder / entry["path"]).stat().st_size
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def slip_into_records(folder: Path, text: str) -> str:
    lines = (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["data"] = {**record["data"], "note": text}
    lines[0] = json.dumps(record, sort_keys=True, ensure_ascii=False)
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "records.jsonl"


def slip_into_parquet(folder: Path, text: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = next((folder / "data").glob("*.parquet"))
    table = pq.read_table(path)
    questions = table.column("question").to_pylist()
    questions[0] = f"{questions[0]} ({text})"
    table = table.set_column(table.schema.get_field_index("question"), "question",
                             pa.array(questions, type=table.schema.field("question").type))
    pq.write_table(table, path)
    return path.relative_to(folder).as_posix()


def slip_into_browse(folder: Path, text: str) -> str:
    page = (folder / "browse.html").read_text(encoding="utf-8")
    (folder / "browse.html").write_text(page.replace("</body>", f"<p>{text}</p></body>", 1), encoding="utf-8")
    return "browse.html"


@pytest.fixture
def released(peopled, tmp_path):
    workspace, _ = peopled
    return workspace, export(workspace, tmp_path / "out").path


SLIPS = [("records", slip_into_records, "ask maria.gonzalez@uni-example.edu", "m…@uni-example.edu"),
         ("parquet", slip_into_parquet, "from somebody.else@mail-example.com", "s…@mail-example.com"),
         ("browse", slip_into_browse, "contact J.Smith@lab-example.org", "J…@lab-example.org"),
         ("path", slip_into_records, "made in /home/maria/bench/images/cat.png", "/home/…")]


@pytest.mark.parametrize("where, slip, text, shown", SLIPS, ids=[s[0] for s in SLIPS])
def test_verify_and_preflight_refuse_a_release_altered_to_hold_personal_data(released, run_cli, tmp_path, where,
                                                                             slip, text, shown):
    workspace, clean = released
    assert run_cli("verify", clean).exit_code == 0
    altered = tmp_path / "altered"
    shutil.copytree(clean, altered)
    changed = slip(altered, text)
    reseal(altered, [changed])
    verified = run_cli("verify", altered)
    assert verified.exit_code == 1, verified.output
    assert f"personal data: {changed}" in verified.output and shown in verified.output, verified.output
    assert "do not match the manifest" not in verified.output  # resealed: the scan alone finds it
    full = re.search(r"[\w.+-]+@[\w.-]+|/home/\S+", text).group(0)
    assert full not in verified.output  # named in part only
    code, checks = preflight_checks(run_cli, altered)
    assert code != 0 and checks["personal_data"]["status"] == "fail", checks
    assert changed in checks["personal_data"]["detail"] and checks["sha256"]["status"] == "pass"
    assert preflight_checks(run_cli, clean)[1]["personal_data"]["status"] == "pass"


def preflight_checks(run_cli, folder: Path) -> tuple[int, dict[str, dict]]:
    """`preflight --json`'s exit code and checks by name (the JSON comes first; a failure's line may follow)."""
    out = run_cli("preflight", folder, "--json")
    report, _ = json.JSONDecoder().raw_decode(out.output)
    return out.exit_code, {c["name"]: c for c in report["checks"]}


def test_verify_without_a_workspace_still_refuses_any_email(released, run_cli, tmp_path, monkeypatch):
    _, clean = released
    altered = tmp_path / "alone"
    shutil.copytree(clean, altered)
    reseal(altered, [slip_into_records(altered, "ann@example.org wrote this")])
    monkeypatch.delenv("CFTOOLS_WORKSPACE")
    monkeypatch.chdir(tmp_path)
    out = run_cli("verify", altered)
    assert out.exit_code == 1 and "an email address (a…@example.org)" in out.output, out.output


# ---------------------------------------------------------------- export refuses, all or nothing


def test_export_refuses_a_release_that_would_hold_an_email_and_writes_nothing(peopled, tmp_path):
    workspace, _ = peopled
    workspace.config["release"]["creators"] = [{"name": "Maria", "email": ANN1}]
    out = tmp_path / "out"
    with pytest.raises(CftoolsError) as refused:
        export(workspace, out)
    message = str(refused.value)
    assert "croissant.json" in message and "m…@uni-example.edu" in message and ANN1 not in message
    assert not out.exists() or list(out.iterdir()) == []
    with workspace.store.session() as session:
        assert session.execute(select(Release)).first() is None
    workspace.config["release"]["creators"] = ["Maria"]
    workspace.config["release"]["data_collection"] = "Photographs from /home/maria/photos, sorted by hand."
    with pytest.raises(CftoolsError, match=r"local absolute path \(/home/…\)"):
        export(workspace, out)
    assert not out.exists() or list(out.iterdir()) == []


def test_eval_reports_name_a_local_model_by_its_folder_name():
    from cftools.evaluate.report import render_markdown

    config = {"model": "hf:/home/maria/models/qwen2-vl-2b", "mode": "generate", "release_name": "bench",
              "items": 0, "questions": 0, "template": "plain", "judge": "openai:/root/judges/llama"}
    text = render_markdown(config, {})
    assert "hf:qwen2-vl-2b" in text and "openai:llama" in text and "/home/" not in text and "/root/" not in text


def test_the_boundary_rewrites_people_and_paths_and_the_scan_names_what_it_finds(tmp_path):
    from cftools.boundary import Boundary
    from cftools.release.scan import scan_release

    boundary = Boundary(root=tmp_path, people=frozenset({ANN1, "plain-name"}), own_paths=(str(tmp_path),))
    value = {ANN1.upper(): [f"seen by {ANN1} and x.y@example.org", "/opt/models/flux", f"{tmp_path}/a/b.png"],
             "plain-name": "b", "url": "https://example.org/home/x", "ratio": "1/2"}
    out = boundary.released(value)
    me = boundary.pseudonym(ANN1)
    assert out == {me: [f"seen by {me} and {boundary.pseudonym('x.y@example.org')}", "flux", "b.png"],
                   "plain-name": "b", "url": "https://example.org/home/x", "ratio": "1/2"}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.md").write_text(f"fine\nby {ANN1}\nat {tmp_path}/x\n", encoding="utf-8")
    found = scan_release(tmp_path / "r", boundary)
    assert found[0] == "a.md line 2: the email of a person of this workspace (m…@uni-example.edu)"
    assert found[1].startswith("a.md line 3: a path of this workspace or home folder (") and len(found) == 2
    assert scan_release(tmp_path / "r", Boundary())[0] == "a.md line 2: an email address (m…@uni-example.edu)"
