"""What text from the data (questions, answers, model replies, names) may print to a terminal.

`escape` makes such text inert: Rich markup is escaped (a `[red]` in a question stays text) and every control
character is shown as a visible escape (`\\x1b`, `\\x00`, `\\n`, a bidirectional override as `\\u202e`), so a reply
cannot move the cursor, recolour or clear the screen, hide text, or split one field over several lines.
"""

from __future__ import annotations

import re

from rich.markup import escape as escape_markup

# C0 and C1 controls and DEL, and the format characters that reorder or hide text (bidi controls, zero widths).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _visible(match: re.Match) -> str:
    char = match.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if char in named:
        return named[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def control_escaped(text: str) -> str:
    """TEXT with every control and hiding/reordering format character written as a visible escape."""
    return _CONTROL.sub(_visible, text)


def escape(text: str) -> str:
    """TEXT from the data, safe to hand to a Rich console: markup escaped, control characters made visible."""
    return escape_markup(control_escaped(str(text)))


