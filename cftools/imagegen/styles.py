"""Styles: a Jinja2 template per style that turns a description into a prompt and a negative prompt.

A style file defines two macros, `prompt(description)` and `negative(description)`. The built-in styles live
in `prompts/images/<name>.j2` (a workspace's copy wins); a folder of the user's own `<name>.j2` files can add or
override them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from cftools.imagegen.base import ImageGenError
from cftools.resources import packaged_dir

BUILTIN_STYLES = packaged_dir("prompts") / "images"
DEFAULT_STYLES = ("photograph", "comic")


@dataclass(frozen=True)
class Style:
    name: str
    template: str  # the Jinja2 source; kept so two runs can tell whether a style changed

    def _module(self):  # noqa: ANN202
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        return env.from_string(self.template).module

    def prompt(self, description: str) -> str:
        return str(self._module().prompt(description)).strip()

    def negative(self, description: str) -> str | None:
        text = str(self._module().negative(description)).strip()
        return text or None


PLAIN = Style("plain", "{% macro prompt(d) %}{{ d }}{% endmacro %}{% macro negative(d) %}{% endmacro %}")


def load_style(name: str, folder: Path | None = None) -> Style:
    """The style NAME from FOLDER if it has `NAME.j2`, else the built-in one; unknown -> a one-line error."""
    for base in ([Path(folder)] if folder else []) + [BUILTIN_STYLES]:
        path = base / f"{name}.j2"
        if path.is_file():
            source = path.read_text(encoding="utf-8")
            style = Style(name, source)
            try:
                style.prompt("x"), style.negative("x")
            except (jinja2.TemplateError, AttributeError) as exc:
                raise ImageGenError(f"{path}: not a style template (needs macros prompt and negative: {exc})") from None
            return style
    known = sorted(p.stem for p in BUILTIN_STYLES.glob("*.j2"))
    raise ImageGenError(f"unknown style {name!r}; built-in styles: {', '.join(known)}")


def parse_styles(text: str, folder: Path | None = None) -> list[Style]:
    """'photograph,comic' -> the two styles."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    return [load_style(n, folder) for n in names]


def as_style(style: Style | str | None) -> Style:
    if style is None:
        return PLAIN
    return style if isinstance(style, Style) else load_style(style)
