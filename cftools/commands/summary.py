"""What a command prints after its library call, read from a table: one `Line` per field of the library's report
(how it reads, when it is printed), printed in order by `print_lines`. A command module declares its table; its
body makes the call and hands the report over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from rich.console import Console

from cftools.terminal import escape

# TEXT of a line: a template over {value} (the field, escaped when it is text) and the context's names, or a
# function of the value and the context giving one line, a list of lines or a rich renderable (a table).
Text = Union[str, Callable[[Any, Mapping[str, Any]], Any]]


def given(value: Any, context: Mapping[str, Any]) -> bool:
    """The default condition: the field holds something (a count above 0, a list or text not empty)."""
    return bool(value)


def always(value: Any, context: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Line:
    """One row of a summary: the report's FIELD, its TEXT, WHEN it is printed; EACH: a line per element (a dict's
    sorted items); LINES: a nested table over the field's value instead of TEXT; STOP: nothing after it is printed;
    TO_STDERR: a warning's line; SOFT_WRAP: rich's soft_wrap for a long line (a path is not broken); MARKUP: False
    for a line printed as it is."""

    field: str
    text: Text = ""
    when: Callable[[Any, Mapping[str, Any]], bool] = given
    each: bool = False
    lines: tuple["Line", ...] = ()
    stop: bool = False
    to_stderr: bool = False
    soft_wrap: Optional[bool] = None
    markup: Optional[bool] = None


def print_lines(table: Iterable[Line], fields: Any, out: Console, err: Console, **context: Any) -> None:
    """Print FIELDS (a library's report: an object, or a dict of its fields) by TABLE on OUT (a line marked
    to_stderr on ERR); CONTEXT: what the lines read beside it (the command's options), with FIELDS itself as `report`
    (in a nested table: the field it is over)."""
    context = {"report": fields, **context}
    for line in table:
        value = fields[line.field] if isinstance(fields, Mapping) else getattr(fields, line.field)
        if not line.when(value, context):
            continue
        if line.lines:
            print_lines(line.lines, value, out, err, **{**context, "report": value})
        else:
            elements = (sorted(value.items()) if isinstance(value, Mapping) else value) if line.each else [value]
            for element in elements:
                for text in rendered(line.text, element, context):
                    (err if line.to_stderr else out).print(text, soft_wrap=line.soft_wrap, markup=line.markup)
        if line.stop:
            return


def rendered(text: Text, value: Any, context: Mapping[str, Any]) -> list[Any]:
    """TEXT for VALUE: the template filled (text escaped, so rich takes none of it for a style), or what the
    function gives."""
    if callable(text):
        lines = text(value, context)
        return list(lines) if isinstance(lines, (list, tuple)) else [lines]
    if isinstance(value, Mapping):
        return [text.format(**{**context, **{k: escaped(v) for k, v in value.items()}})]
    return [text.format(value=escaped(value), **context)]


def escaped(value: Any) -> Any:
    return escape(value) if isinstance(value, str) else value
