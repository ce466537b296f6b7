"""Prompt variants (`generate ... --prompt-variant NAME`) and their comparison (`compare_variants`).

Drafting runs against the loopback chat stub (a real process on 127.0.0.1): it logs every request, so a test sees
which template each request was rendered from. The comparison runs on a real SQLite store whose drafts are
decided with known acceptance rates per variant (seeded), as people's decisions would leave them."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
import tomlkit

from cftools.ingest.readers import ingest_table
from cftools.models import ACCEPTED, DRAFT, REJECTED, Generation, Item, utcnow

REWRITE = ("generate", "rewrite", "--group", "numerical-direct", "--quiet", "--no-rederive")
TERSE_MARK = "Rewrite the question into a counterfactual one"  # a line only the terse variant has
DEFAULT_MARK = "Think step by step"  # a line only the default template has


def configure(workspace, base_url: str, prices: dict | None = None) -> None:
    path = workspace.path("cftools.toml")
    config = tomlkit.parse(path.read_text())
    section = config["llm"]
    section["backend"], section["model"], section["base_url"] = "openai", "stub", base_url
    section["backoff_initial"], section["backoff_max"] = 0.01, 0.05
    if prices:
        table = tomlkit.table(is_super_table=True)
        for model, price in prices.items():
            table[model] = price
        section["prices"] = table
    path.write_text(tomlkit.dumps(config))
    workspace.config = tomlkit.parse(path.read_text()).unwrap()


def questions(workspace, tmp_path: Path, n: int) -> None:
    table = tmp_path / f"q{n}.csv"
    table.write_text("image,question,answer\n" + "".join(
        f"img{i}.jpg,How many things of kind {i} are there?,{i % 7}\n" for i in range(n)))
    ingest_table(workspace.store, table)


def rows(workspace, sql: str) -> list[tuple]:
    db = sqlite3.connect(workspace.root / "cftools.db", timeout=60)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def prompts_sent(llm_server) -> list[str]:
    return [m["content"] if isinstance(m["content"], str) else " ".join(p.get("text", "") for p in m["content"])
            for r in llm_server.requests() for m in r["body"]["messages"]]


# ------------------------------------------------------------------ drafting with a variant
def test_two_variants_make_two_drafts_per_source_each_recorded(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 4)
    configure(workspace, llm_server.base_url)

    default = run_cli("-w", workspace.root, *REWRITE, "--json")
    assert default.exit_code == 0, default.output
    terse = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse", "--json")
    assert terse.exit_code == 0, terse.output
    assert json.loads(terse.output)["items_created"] == 4

    sent = prompts_sent(llm_server)
    assert len(sent) == 8, "each variant asks once per source: the cache never answers one variant with the other's"
    assert sum(DEFAULT_MARK in p for p in sent) == 4 and sum(TERSE_MARK in p for p in sent) == 4

    drafts = rows(workspace, "select i.source_id, i.key, g.prompt_variant, g.template_name, g.template_hash, g.prompt "
                             "from items i join generations g on g.id = i.generation_id order by i.source_id, i.key")
    assert len(drafts) == 8 and len({d[0] for d in drafts}) == 4
    for source in {d[0] for d in drafts}:
        mine = [d for d in drafts if d[0] == source]
        assert sorted(d[2] or "" for d in mine) == ["", "terse"], "one draft per variant per source"
    for _, key, variant, name, digest, prompt in drafts:
        if variant == "terse":
            assert key.endswith(":terse") and name == "rewrite/terse/numerical-direct.j2" and TERSE_MARK in prompt
        else:
            assert name == "rewrite/numerical-direct.j2" and DEFAULT_MARK in prompt
    assert len({d[4] for d in drafts}) == 2, "each variant's own template hash"

    again = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["selected"] == 0, "a rerun of the same variant adds nothing"
    assert len(prompts_sent(llm_server)) == 8
    assert rows(workspace, "select count(*) from items") == [(8,)]


def test_a_variant_run_first_leaves_the_default_its_own_drafts(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 3)
    configure(workspace, llm_server.base_url)
    assert run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "terse").exit_code == 0
    default = run_cli("-w", workspace.root, *REWRITE, "--json")
    assert default.exit_code == 0, default.output
    assert json.loads(default.output)["items_created"] == 3
    assert rows(workspace, "select count(*), count(g.prompt_variant) from items i "
                           "join generations g on g.id = i.generation_id") == [(6, 3)]


def test_a_folder_given_on_the_command_line_is_a_variant_named_by_the_folder(workspace, tmp_path, run_cli,
                                                                               llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    folder = tmp_path / "mine" / "plain-words"
    folder.mkdir(parents=True)
    (folder / "numerical-direct.j2").write_text("Plain words please.\nQuestion: {{ question }}\nAnswer: {{ answer }}\n")

    result = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", str(folder), "--json")
    assert result.exit_code == 0, result.output
    assert all(p.startswith("Plain words please.") for p in prompts_sent(llm_server))
    recorded = rows(workspace, "select distinct g.prompt_variant, g.template_name from items i "
                               "join generations g on g.id = i.generation_id")
    assert recorded == [("plain-words", "rewrite/plain-words/numerical-direct.j2")], "no local path recorded"


def test_an_unknown_variant_is_one_line_naming_those_that_exist(workspace, tmp_path, run_cli, llm_server):
    questions(workspace, tmp_path, 2)
    configure(workspace, llm_server.base_url)
    result = run_cli("-w", workspace.root, *REWRITE, "--prompt-variant", "shouty")
    assert result.exit_code != 0
    message = result.output.strip()
    assert "unknown prompt variant 'shouty' for rewrite" in message and "terse" in message
    assert len(message.splitlines()) == 1
    assert llm_server.requests() == [] and rows(workspace, "select count(*) from generations") == [(0,)]


def test_a_generator_without_variants_refuses_the_option(workspace, tmp_path, run_cli, llm_server):
    configure(workspace, llm_server.base_url)
    result = run_cli("-w", workspace.root, "generate", "cues", "--quiet", "--prompt-variant", "terse")
    assert result.exit_code != 0
    assert "does not run prompt variants" in result.output
    assert llm_server.requests() == []
