"""`cftools check` over stored edit candidates says how many it could not measure again (a candidate's file, or
its item's original image, gone from the store) instead of keeping their stored results silently."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from test_edit_checks_registry import add_candidates, item_ids, items_ws, photo, ranking  # noqa: F401  (a fixture)

from cftools.models import Image, Item


def test_candidates_that_cannot_be_measured_are_counted_and_keep_their_results(items_ws, run_cli, tmp_path):  # noqa: F811
    store = items_ws.store
    first = item_ids(store)[0]
    add_candidates(store, first, tmp_path / "candidates", photo(0))
    with store.session() as session:  # the noise candidate's file is gone from the store
        ref = session.get(Item, first).data["edit_candidates"]["1"]["image"]
        path = session.execute(select(Image.path).where(Image.sha256 == ref.removeprefix("sha256:"))).scalar_one()
    Path(path).unlink()
    out = run_cli("check", "--no-embeddings")
    assert out.exit_code == 0, out.output
    # before: only "1 items' stored edit candidates checked again and re-ranked", the gone candidate unmentioned
    assert "1 edit candidates were not checked again" in " ".join(out.output.split())
    kept = [c for c in ranking(store, first) if c["k"] == 1]
    assert kept and not kept[0]["flags"]  # its stored (unflagged) result is kept, not measured
    assert all(c["flags"] for c in ranking(store, first) if c["k"] == 0)  # the others were measured
