"""The progress display of long steps: a line per step with its count and ETA on a terminal, nothing otherwise."""

from __future__ import annotations

import io

from rich.console import Console

from cftools.progress import step_progress


def terminal(buffer: io.StringIO, is_terminal: bool = True) -> Console:
    return Console(file=buffer, force_terminal=is_terminal, width=120, color_system=None)


def test_a_counted_step_shows_its_label_count_and_eta_on_a_terminal() -> None:
    buffer = io.StringIO()
    with step_progress(terminal(buffer), labels={"images": "copying images"}) as progress:
        progress("images", 0, 10)
        progress("images", 4, 10)
        progress.display.refresh()
    drawn = buffer.getvalue()
    assert "copying images" in drawn and "4/10" in drawn and "eta" in drawn


def test_a_step_of_unknown_length_shows_a_spinner_line_and_is_gone_after() -> None:
    buffer = io.StringIO()
    with step_progress(terminal(buffer)) as progress:
        with progress.waiting("starting Label Studio"):
            progress.display.refresh()
            assert "starting Label Studio" in buffer.getvalue()
        assert not progress.lines


def test_quiet_json_and_a_piped_stderr_draw_nothing() -> None:
    for options, is_terminal in (({"quiet": True}, True), ({"as_json": True}, True), ({}, False)):
        buffer = io.StringIO()
        with step_progress(terminal(buffer, is_terminal), **options) as progress:
            progress("check", 3, 5)
            progress.advance("check")
        assert buffer.getvalue() == "", options

