"""Issue 32: a person can overrule a check. `cftools flags waive ITEM CODE --reason TEXT` records who and when in
the item's history, the next `cftools check` moves the item on, `flags list` shows the waiver, `flags undo`
withdraws it, and a release's data card counts waivers. Real store, real images, the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from cftools.models import Item, ItemEvent
from test_identical_images import pair_item, picture, stored


def status_of(store, key: str) -> str:  # noqa: ANN001
    with store.session() as session:
        return session.execute(select(Item.status).where(Item.key == key)).scalar_one()


def test_a_waived_flag_lets_the_item_move_on_with_the_waiver_in_its_history(workspace, run_cli, tmp_path,
                                                                             monkeypatch):
    store = workspace.store
    image = stored(store, picture(tmp_path / "cause.png", 1))
    key = pair_item(store, image, image)  # the same image twice: identical_images
    assert run_cli("check", "--no-embeddings").exit_code == 0
    assert status_of(store, key) == "draft"
    [row] = [r for r in json.loads(run_cli("flags", "list", key, "--json").output) if r["code"] == "identical_images"]
    assert row["waived"] is None and row["reason"].startswith("the cause and effect images are the same file")
    refused = run_cli("flags", "waive", key, "identical_images")
    assert refused.exit_code != 0 and "--reason" in refused.output
    unknown = run_cli("flags", "waive", key, "no_such_flag", "--reason", "x")
    assert unknown.exit_code != 0 and f"item {key} has no flag 'no_such_flag'" in unknown.output

    monkeypatch.setenv("CFTOOLS_USER", "reviewer@example.com")
    out = run_cli("flags", "waive", key, "identical_images", "--reason", "a still scene: the cue is the caption",
                  "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["by"] == "reviewer@example.com"
    flags = json.loads(run_cli("flags", "list", key, "--json").output)
    remaining = [r["code"] for r in flags if not r["waived"]]
    for code in remaining:  # any other flag the pair has is waived too: only waived flags are left
        assert run_cli("flags", "waive", key, code, "--reason", "looked at").exit_code == 0
    assert run_cli("check", "--no-embeddings").exit_code == 0
    assert status_of(store, key) == "checked"  # the check moved it on
    with store.session() as session:
        item = session.execute(select(Item).where(Item.key == key)).scalar_one()
        events = session.execute(select(ItemEvent).where(ItemEvent.item_id == item.id, ItemEvent.stage == "flags")
                                 .order_by(ItemEvent.id)).scalars().all()
    assert events[0].detail["waived"] == "identical_images" and events[0].detail["by"] == "reviewer@example.com"
    assert events[0].detail["reason"] == "a still scene: the cue is the caption" and events[0].detail["at"]

    # the data card counts the waivers
    out = run_cli("export", "waived", "--version", "1", "--licence", "CC0-1.0", "--include-unverified", "--json")
    assert out.exit_code == 0, out.output
    card = (Path(json.loads(out.output)["path"]) / "README.md").read_text()
    assert f"A person waived {1 + len(remaining)} of these flags on 1 items" in card

    out = run_cli("flags", "undo", key, "identical_images", "--json")
    assert out.exit_code == 0, out.output
    [row] = [r for r in json.loads(run_cli("flags", "list", key, "--json").output) if r["code"] == "identical_images"]
    assert row["waived"] is None
    assert run_cli("flags", "undo", key, "identical_images").exit_code != 0  # nothing to undo any more
