"""preflight's Markdown (a reviewer's report, `--out FILE`) names the release and the runs by their folders' names,
not by this machine's paths."""

from __future__ import annotations

from cftools.release.preflight import PreflightReport, render_markdown


def test_the_markdown_names_folders_by_their_names():
    """Before: `Release `/data/jdoe/releases/bench-1.0`.` and the runs' full paths."""
    report = PreflightReport("/data/jdoe/releases/bench-1.0", "bench", "1.0", [], None,
                             pair=["/data/jdoe/ws/runs/bench--a--generate--1", "/data/jdoe/ws/runs/bench--b--generate--2"])
    text = render_markdown(report)
    assert "/data/jdoe" not in text
    assert "Release `bench-1.0`." in text and "`bench--a--generate--1` and `bench--b--generate--2`" in text
