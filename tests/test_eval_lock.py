"""A run folder's lock names the process and machine that hold it only while it is held: a finished run folder (one
may share it) names no host."""

from __future__ import annotations

import socket

import pytest

from cftools.errors import CftoolsError
from cftools.evaluate.lock import owner_path, predictions_lock


def test_the_owner_is_named_while_held_and_gone_after(tmp_path):
    """Before: `.locks/predictions.jsonl.owner` stayed behind with 'process N on HOST' after the run."""
    predictions = tmp_path / "predictions.jsonl"
    with predictions_lock(predictions):
        assert socket.gethostname() in owner_path(predictions).read_text(encoding="utf-8")
        with pytest.raises(CftoolsError, match=f"in use by process \\d+ on {socket.gethostname()}"):
            with predictions_lock(predictions):
                pass
        assert owner_path(predictions).is_file()  # the refused second run left the holder's note alone
    assert not owner_path(predictions).exists()
    host = socket.gethostname().encode()
    assert not any(host in p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    with predictions_lock(predictions):  # free again
        pass
