"""A command's summary read from its table of lines (cftools.commands.summary): what is printed, where, and when."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from rich.console import Console

from cftools.commands.summary import Line, always, print_lines


@dataclass
class Inner:
    made: int = 2
    refused: list[dict] = field(default_factory=lambda: [{"reason": "no [red]colour[/]"}])


@dataclass
class Report:
    done: int = 3
    skipped: int = 0
    names: list[str] = field(default_factory=lambda: ["b [x]", "a"])
    counts: dict[str, int] = field(default_factory=lambda: {"rejected": 1, "accepted": 2})
    inner: Inner = field(default_factory=Inner)
    message: str = ""


TABLE = (
    Line("message", "{value}", stop=True),
    Line("done", "{value} done of {total} ({report.skipped} skipped)", when=always),
    Line("skipped", "{value} skipped"),
    Line("names", "[red]not blind:[/] {value}", each=True, to_stderr=True),
    Line("counts", lambda count, _: f"  {count[1]} {count[0]}", each=True),
    Line("inner", lines=(Line("made", "{report.made} made", when=always), Line("refused", "{reason}", each=True))),
)


def printed(report: Report) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    print_lines(TABLE, report, Console(file=out, width=200), Console(file=err, width=200), total=5)
    return out.getvalue(), err.getvalue()


def test_each_line_in_order_when_its_condition_holds_on_its_console():
    out, err = printed(Report())
    assert out.splitlines() == ["3 done of 5 (0 skipped)", "  2 accepted", "  1 rejected", "2 made",
                                "no [red]colour[/]"]
    assert err.splitlines() == ["not blind: b [x]", "not blind: a"]  # data is escaped: rich keeps its brackets


def test_a_stopping_line_ends_the_summary():
    out, err = printed(Report(message="nothing to do [yet]", skipped=4))
    assert (out, err) == ("nothing to do [yet]\n", "")


def test_a_report_given_as_a_dict_is_read_by_its_keys():
    out, err = io.StringIO(), io.StringIO()
    table = (Line("done", "{value} done", when=always), Line("skipped", "{value} skipped"))
    print_lines(table, {"done": 2, "skipped": 0}, Console(file=out, width=80), Console(file=err, width=80))
    assert (out.getvalue(), err.getvalue()) == ("2 done\n", "")
