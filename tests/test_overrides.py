"""`cftools init --with-prompts`: the workspace's copies of prompts/ and annotation/ win over the packaged ones,
and the provenance names the file and its hash."""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from cftools.generate.llm_task import LLMRun
from cftools.annotate.rules import render_label_config
from cftools.kinds.cvqa.model import NUMERICAL_DIRECT
from cftools.kinds.cvqa.generate import rewrite
from cftools.models import Generation, Item
from cftools.resources import packaged_dir
from cftools.workspace import load_workspace
from fixtures_llm import stub_backend
from test_generate import NUMBER_QUESTIONS, write_table


def test_with_prompts_copies_the_templates(tmp_path, run_cli):
    out = run_cli("init", tmp_path / "ws", "--with-prompts")
    assert out.exit_code == 0, out.output
    for name in ("prompts/rewrite/boolean.j2", "prompts/eval/short_answer.j2", "annotation/cvqa/verify.xml.j2"):
        copy = tmp_path / "ws" / name
        packaged = packaged_dir(name.split("/")[0]) / name.split("/", 1)[1]
        assert copy.read_bytes() == packaged.read_bytes()
    edited = tmp_path / "ws" / "prompts" / "rewrite" / "boolean.j2"
    edited.write_text("mine")
    assert run_cli("init", tmp_path / "ws", "--with-prompts").exit_code == 0
    assert edited.read_text() == "mine"  # a second run keeps the user's edits


def test_an_edited_prompt_wins_and_show_names_its_file(tmp_path, run_cli, stub, monkeypatch):
    assert run_cli("init", tmp_path / "ws", "--with-prompts").exit_code == 0
    monkeypatch.setenv("CFTOOLS_WORKSPACE", str(tmp_path / "ws"))
    edited = tmp_path / "ws" / "prompts" / "rewrite" / f"{NUMERICAL_DIRECT}.j2"
    edited.write_text(edited.read_text() + "\n{# our edit #}Be brief.\n")
    ws = load_workspace(tmp_path / "ws")
    assert run_cli("ingest", "table", write_table(tmp_path / "t.csv", NUMBER_QUESTIONS)).exit_code == 0
    rewrite(ws.store, stub_backend(stub), NUMERICAL_DIRECT, run=LLMRun(quiet=True, workspace_root=ws.root), limit=1)
    with ws.store.session() as session:
        gen = session.execute(select(Generation)).scalars().first()
        item = session.execute(select(Item).where(Item.origin == "generated")).scalars().first()
    assert gen.template_name == str(edited)
    assert gen.template_hash == hashlib.sha256(edited.read_text().encode()).hexdigest()
    assert "Be brief." in gen.prompt
    shown = run_cli("show", item.id)
    assert str(edited) in shown.output.replace("\n", "")
    ws.close()


def test_an_edited_label_config_wins(tmp_path, run_cli):
    assert run_cli("init", tmp_path / "ws", "--with-prompts").exit_code == 0
    config = tmp_path / "ws" / "annotation" / "cvqa" / "verify.xml.j2"
    config.write_text(config.read_text().replace('<Header value="Image"/>', '<Header value="Our picture"/>'))
    assert "Our picture" in render_label_config("cvqa", "verify", str(tmp_path / "ws"))
    assert "Our picture" not in render_label_config("cvqa", "verify")
