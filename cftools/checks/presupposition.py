"""Reading a counterfactual question's presupposition: where its condition is, and what change it makes.

`find_condition` finds the counterfactual condition ("if ...", "suppose ...", "assuming ...",
"were the dog to leave", "had two dogs left") and returns the presupposition's text.
`parse_change` reads the change a numerical-direct presupposition makes to a count:

| presupposition                                  | change      |
|-------------------------------------------------|-------------|
| "if 2 more hydrants were added"                 | + 2         |
| "if one brown dog disappeared and two joined"   | - 1, + 2    |
| "if the number of skiers was doubled"           | x 2         |
| "if the number of glasses was reduced by half"  | x 1/2       |
| "if all the birds flew away" / "if there were no chairs" | = 0 |
| "if 3 cows were laying"                         | not a change: None, with the reason |

A presupposition it cannot read gives `Change(ops=(), unreadable=REASON)`: the arithmetic check
then reports it instead of flagging it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from cftools.answers import NUMBER_WORDS, parse_number

_NUMBER_WORD = "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
NUMBER = rf"(?:\d+(?:\.\d+)?|(?:{_NUMBER_WORD})(?:[\s-]+(?:and\s+)?(?:{_NUMBER_WORD}))*)"
NUMBER_RE = re.compile(rf"\b{NUMBER}\b")
MULTIPLE_CHOICE_TAIL = re.compile(r"\s*select the correct answer\s*:.*$", re.IGNORECASE | re.DOTALL)

# Counterfactual conditions: (name, pattern). The presupposition is the text the pattern introduces.
_SUBJECT = rf"(?:the|a|an|all|some|any|every|its|their|his|her|it|they|he|she|we|you|someone|somebody|{NUMBER})"
CONDITIONS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in (
    ("if", r"\b(?:what\s+)?if\b"),
    ("suppose", r"\bsuppos(?:e|ing|ed)\b"),
    ("assuming", r"\bassum(?:e|ing)\b"),
    ("imagine", r"\bimagin(?:e|ing)\b"),
    ("provided", r"\bprovided\b"),
    ("in case", r"\bin case\b"),
    ("were ... to", rf"\bwere\s+{_SUBJECT}\b(?:\s+[\w'-]+){{0,6}}?\s+to\s+\w+"),
    ("had", r"(?:^had\s+[^,?]+,|(?:[,;]\s*|\bbe\s+)had\s+(?!to\b)\w+)"),
))


@dataclass(frozen=True)
class Condition:
    marker: str  # which kind of condition: "if", "suppose", "were ... to", ...
    text: str  # the presupposition, without the marker


def strip_options(question: str) -> str:
    """The question without a multiple-choice tail ("Select the correct answer: A:8 B:6 ...")."""
    return MULTIPLE_CHOICE_TAIL.sub("", question).strip()


def find_condition(question: str) -> Optional[Condition]:
    """The first counterfactual condition in QUESTION, or None when it has none."""
    text = strip_options(question)
    found = []
    for name, pattern in CONDITIONS:
        match = pattern.search(text)
        if match:
            found.append((match.start(), name, match))
    if not found:
        return None
    start, name, match = min(found, key=lambda f: f[0])
    if name in ("were ... to", "had"):
        rest = text[match.start():]
        rest = re.sub(r"^[,;\s]*(?:be\s+)?", "", rest).split(",")[0]
    else:
        rest = text[match.end():]
    rest = rest.split("?")[0]
    if start <= 2 or not text[:start].strip(" ,;"):
        # "If 2 dogs left, how many ..." -- the condition ends at the comma
        rest = re.split(r"[,.]\s", rest, maxsplit=1)[0]
    return Condition(name, rest.strip(" ,.;:"))


# ---------------------------------------------------------------- the change


@dataclass(frozen=True)
class Op:
    kind: str  # "add" | "sub" | "mul" | "set"
    value: Fraction
    words: str  # the words it was read from

    def describe(self) -> str:
        value = _fmt(self.value)
        return {"add": f"+{value}", "sub": f"-{value}", "mul": f"x{value}", "set": f"={value}"}[self.kind]


@dataclass(frozen=True)
class Change:
    ops: tuple[Op, ...] = ()
    unreadable: Optional[str] = None  # why the change could not be read

    def apply(self, count: Fraction) -> Fraction:
        for op in self.ops:
            if op.kind == "add":
                count += op.value
            elif op.kind == "sub":
                count -= op.value
            elif op.kind == "mul":
                count *= op.value
            else:
                count = op.value
        return count

    def describe(self) -> str:
        return ", ".join(f"{op.describe()} ({op.words})" for op in self.ops)


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def _words(*phrases: str) -> re.Pattern:
    return re.compile(r"\b(?:" + "|".join(phrases) + r")\b")


# Words that make the count grow or shrink. A clause with both kinds of verb is not read.
ADD_VERBS = _words(
    r"add(?:s|ed|ing)?", r"c(?:a|o)me(?:s)?(?:\s+(?:in|back|along|over))?", r"coming", r"join(?:s|ed|ing)?",
    r"arriv(?:e|es|ed|ing)", r"appear(?:s|ed|ing)?", r"enter(?:s|ed|ing)?", r"plac(?:e|es|ed|ing)",
    r"put", r"brought", r"bring(?:s)?", r"includ(?:e|ed)", r"introduc(?:e|ed)", r"show(?:s|ed)?\s+up",
    r"walk(?:s|ed)?\s+in", r"gain(?:s|ed)?", r"increas(?:e|es|ed)\s+by", r"put\s+(?:in|on|there|here)",
    r"born", r"grew", r"sprouted", r"installed", r"built", r"drawn", r"painted\s+on",
)
REMOVE_VERBS = _words(
    r"remov(?:e|es|ed|ing)", r"took\s+(?:away|out|off)", r"tak(?:e|es|en)\s*(?:away|out|off)?", r"left",
    r"leav(?:e|es|ing)", r"(?:flew|flown|fly|flies|ran|run|runs|walked|went|gone|drove|driven|swam|rode)"
    r"\s+(?:away|off|out)", r"gone", r"eaten", r"ate", r"eat(?:s)?", r"disappear(?:s|ed|ing)?",
    r"vanish(?:es|ed)?", r"subtract(?:ed)?", r"delet(?:e|ed)", r"cut\s+(?:down|off|out)", r"fell(?:\s+off)?",
    r"fallen", r"lost", r"los(?:e|es)", r"died", r"dead", r"missing", r"destroyed", r"popped", r"broken",
    r"decreas(?:e|es|ed)\s+by", r"reduc(?:e|es|ed)\s+by", r"hidden", r"hid", r"sold", r"given\s+away",
    r"knocked\s+(?:down|over|off)", r"dropped", r"stolen", r"minus",
)
MORE_WORDS = _words(r"more", r"another", r"additional", r"extra", r"plus", r"else")
LESS_WORDS = _words(r"less", r"fewer")
MULTIPLIERS: tuple[tuple[re.Pattern, Fraction], ...] = (
    (_words(r"doubl(?:e|es|ed|ing)", r"twice(?:\s+as\s+many)?", r"two\s+times"), Fraction(2)),
    (_words(r"tripl(?:e|es|ed|ing)", r"thrice", r"three\s+times"), Fraction(3)),
    (_words(r"quadrupl(?:e|es|ed|ing)", r"four\s+times"), Fraction(4)),
    (_words(r"halv(?:e|es|ed|ing)", r"half", r"by\s+half", r"cut\s+in\s+half", r"divided\s+by\s+(?:2|two)"),
     Fraction(1, 2)),
)
TIMES = re.compile(rf"\b({NUMBER})\s+times\s+(?:as\s+many|more|the\s+number)\b")
SET_TO = re.compile(rf"\b(?:increas|decreas|reduc|chang|rais|lower|dropp)(?:e|es|ed|ing)\s+to\s+({NUMBER})\b")
FRACTIONS = _words(r"thirds?", r"quarters?", r"fifths?", r"percent", r"%", r"fraction", r"most", r"some",
                   r"several", r"few", r"many", r"lots?", r"bunch", r"dozens")
ALL_GONE = _words(r"no", r"none", r"nothing", r"nobody", r"zero", r"neither", r"without")
ALL_WORDS = _words(r"all", r"every", r"everything", r"everyone", r"everybody", r"each", r"only", r"entire", r"whole")
SIDE_LEFT = re.compile(r"\b(?:on|to|at|from|in)\s+(?:the|his|her|their|its|your|my)\s+left(?:[\s-]+(?:hand|side))?\b"
                       r"|\bleft[\s-]+(?:hand|side|most|one|ones)\b|\bleftmost\b")
CLAUSE_SPLIT = re.compile(r"\s*(?:[,;]|\band\s+then\b|\bthen\b|\band\b|\bwhile\b|\bbut\b|\bafter\s+which\b)\s*")
SMALL_QUANTITIES = (
    (re.compile(r"\ba\s+(?:couple|pair)(?:\s+of)?\b"), Fraction(2)),
    (re.compile(r"\ba\s+dozen\b"), Fraction(12)),
    (re.compile(r"\bboth\b"), Fraction(2)),
    (re.compile(r"\b(?:another|an?)\b"), Fraction(1)),
)


def numbers_in(text: str) -> list[tuple[str, Fraction]]:
    """Every number written in TEXT (digits or words), with the words it was read from."""
    found = []
    for match in NUMBER_RE.finditer(text.lower()):
        value = parse_number(match.group(0))
        if value is not None:
            found.append((match.group(0), Fraction(str(value))))
    return found


def parse_change(presupposition: str) -> Change:
    """The change a numerical-direct presupposition makes to the count (see the module's table)."""
    text = SIDE_LEFT.sub(" ", presupposition.lower())
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return Change(unreadable="the presupposition is empty")
    ops: list[Op] = []
    for clause in CLAUSE_SPLIT.split(text):
        clause = clause.strip()
        if not clause:
            continue
        op = _clause_op(clause)
        if isinstance(op, str):
            return Change(unreadable=op)
        if op is not None:
            ops.append(op)
    if not ops:
        return Change(unreadable=f"no added, removed, multiplied or emptied count in '{presupposition}'")
    return Change(tuple(ops))


def _clause_op(clause: str) -> Op | str | None:
    """The change one clause makes; a string says why it cannot be read; None: the clause changes nothing."""
    for pattern, factor in MULTIPLIERS:
        if pattern.search(clause):
            return Op("mul", factor, clause)
    times = TIMES.search(clause)
    if times:
        return Op("mul", Fraction(str(parse_number(times.group(1)))), clause)
    set_to = SET_TO.search(clause)
    if set_to:
        return Op("set", Fraction(str(parse_number(set_to.group(1)))), clause)

    adds, removes = bool(ADD_VERBS.search(clause)), bool(REMOVE_VERBS.search(clause))
    more, less = bool(MORE_WORDS.search(clause)), bool(LESS_WORDS.search(clause))
    numbers = numbers_in(clause)
    if ALL_GONE.search(clause) and not numbers and not adds and not more:
        return Op("set", Fraction(0), clause)  # "if there were no chairs", "if none were left"
    if ALL_WORDS.search(clause) and removes and not numbers and not adds:
        return Op("set", Fraction(0), clause)  # "if all the birds flew away", "if the only man was removed"
    if adds and removes:
        return f"both an increase and a decrease in '{clause}'"
    direction = "add" if adds else "sub" if removes else None
    if direction is None:
        direction = "add" if more and not less else "sub" if less and not more else None
    if direction is None:
        if numbers:
            return f"'{clause}' gives a number but no change (nothing added, removed or multiplied)"
        return None
    if numbers:
        return Op(direction, numbers[0][1], clause)
    if FRACTIONS.search(clause):
        return f"'{clause}' changes an unstated amount"
    for pattern, value in SMALL_QUANTITIES:
        if pattern.search(clause):
            return Op(direction, value, clause)
    the = re.search(r"\bthe\s+(?:[\w'-]+\s+){0,3}?(was|were|is|are)\b", clause)
    if the and direction == "sub" and the.group(1) in ("were", "are"):
        return Op("set", Fraction(0), clause)  # "if the bells were removed": all of them
    if re.search(r"\b(?:the|this|that|it|one)\b", clause):
        return Op(direction, Fraction(1), clause)  # "if the boat was removed", "if one left"
    return f"'{clause}' does not say how many"
