"""`release diff`'s score changes name a run's model and folder as eval's reports do: a local folder by its name."""

from __future__ import annotations

from pathlib import Path

from cftools.evaluate.rescore import RunChange, score_changes_markdown
from cftools.release.diff import ReleaseDiff, ReleaseSide


def test_a_local_model_and_the_run_folder_are_named_by_their_names():
    """Before: `hf:/data/jdoe/models/qwen2-vl (generate): `/data/jdoe/ws/runs/bench-1--qwen2-vl--generate--ab12``."""
    side = ReleaseSide(Path("/data/jdoe/releases/bench-1"), "bench", "1", "0" * 64)
    run = RunChange("/data/jdoe/ws/runs/bench-1--qwen2-vl--generate--ab12", "hf:/data/jdoe/models/qwen2-vl",
                    "generate", [])
    text = score_changes_markdown(ReleaseDiff(side, side, []), [run])
    assert "/data/jdoe" not in text
    assert "hf:qwen2-vl (generate): `bench-1--qwen2-vl--generate--ab12`" in text
