"""Read a counterfactual rewrite out of what a model really wrote.

The expected format ends with two labelled lines (see `prompts/rewrite/*.j2`):

    New question: How many dogs would there be if one more dog came?
    New answer: 3

Tolerated: any case and spacing around the label ("New answer:4", "new answer : 4", "**New answer:** 4",
"Counterfactual question -"), both labels on one line, the value on the next line, text before and after,
number words ("three", "twenty-one", "none" = 0), trailing punctuation, a worked sum ("2 + 1 = 3": the value
after the last "="). Without labelled lines, the first question carrying an if-clause and the first "Answer:"
after it are used.

Several candidates, the documented choice: the FIRST labelled question, and the first labelled answer after it
(small models tend to go on with made-up examples after their answer); within the answer, the first value
(after the last "=" when there is one). All values seen in the answer are kept in `candidates`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from word2number import w2n

from cftools.kinds.cvqa.model import BOOLEAN

LABEL = re.compile(r"(?i)(?:\b(?:new|counterfactual|rewritten|final)\s+(question|answer)\b)\s*\**\s*[:：=\-–—]+\s*\**")
PLAIN_LABEL = re.compile(r"(?i)\b(question|answer)\b\s*\**\s*[:：]\s*\**")
FLIPPED = re.compile(r"(?i)\bflip(?:ped)?\s+answer\s*\**\s*[:：=\-–]+\s*\**\s*(yes|no)\b")
MARKUP = re.compile(r"[*_`#>]+")
NUMBER = re.compile(r"-?\d+(?:[.,]\d+)?")
NUMBER_WORDS = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
                "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred",
                "thousand", "and"}
ZERO_WORDS = {"none", "nothing", "nobody", "no one"}
YES_NO = {"yes": "yes", "no": "no", "true": "yes", "false": "no"}
IF_CLAUSE = re.compile(r"(?i)\b(if|suppose|supposing|assuming|imagine|were|had)\b")


class RewriteParseError(ValueError):
    """The output holds no usable rewrite; the message is the reason kept with the raw text."""


@dataclass
class ParsedRewrite:
    question: str
    answer: str
    candidates: list[str] = field(default_factory=list)
    flipped_answer: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_rewrite(text: str | None, group: str) -> ParsedRewrite:
    """The new question and answer in TEXT; raises RewriteParseError with the reason when there are none."""
    if not text or not text.strip():
        raise RewriteParseError("empty output")
    clean = MARKUP.sub("", text.replace("\r\n", "\n"))
    question, answer_text = _labelled_pair(clean) or _unlabelled_pair(clean)
    if not question:
        raise RewriteParseError("no new question found")
    if answer_text is None or not answer_text.strip():
        raise RewriteParseError("no new answer found")
    if group == BOOLEAN:
        answer, candidates = _yes_no(answer_text)
    else:
        answer, candidates = _count(answer_text)
    flipped = FLIPPED.search(clean)
    return ParsedRewrite(question=question, answer=answer, candidates=candidates,
                         flipped_answer=flipped.group(1).lower() if flipped else None)


def _segments(text: str, pattern: re.Pattern) -> list[tuple[str, int, str]]:
    """(kind, position, value) for each label: the value runs to the next label or the end of its line; a label
    at the end of a line takes the next non-empty line."""
    matches = list(pattern.finditer(text))
    out = []
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        value = text[match.end():end]
        lines = [line.strip() for line in value.split("\n")]
        first = lines[0] if lines[0] else next((line for line in lines[1:] if line), "")
        out.append((match.group(1).lower(), match.start(), first))
    return out


def _pair(segments: list[tuple[str, int, str]]) -> tuple[str, str | None] | None:
    questions = [(pos, value) for kind, pos, value in segments if kind == "question" and value]
    if not questions:
        return None
    q_pos, q_value = questions[0]
    answers = [value for kind, pos, value in segments if kind == "answer" and pos > q_pos]
    return _clean_question(q_value), (answers[0] if answers else None)


def _labelled_pair(text: str) -> tuple[str, str | None] | None:
    return _pair(_segments(text, LABEL))


def _unlabelled_pair(text: str) -> tuple[str, str | None]:
    """No 'New question:' label: the first question with an if-clause, then the first 'Answer:' after it."""
    segments = [s for s in _segments(text, PLAIN_LABEL) if s[0] == "answer" or IF_CLAUSE.search(s[2])]
    found = _pair(segments)
    if found:
        return found
    for match in re.finditer(r"[^\n?.!]*\?", text):
        sentence = match.group(0).strip()
        if IF_CLAUSE.search(sentence):
            answers = [value for kind, pos, value in _segments(text, PLAIN_LABEL)
                       if kind == "answer" and pos >= match.end()]
            return _clean_question(sentence), (answers[0] if answers else None)
    return "", None


def _clean_question(value: str) -> str:
    value = value.strip().strip("\"'“”‘’ ")
    if "?" in value:
        value = value[: value.rindex("?") + 1]  # keep every "?" so a second question stays visible to checks
    return re.sub(r"\s+", " ", value).strip().strip("\"'“”")


def _count(answer_text: str) -> tuple[str, list[str]]:
    value = answer_text.split("=")[-1] if "=" in answer_text else answer_text
    candidates = _numbers(value) or _numbers(answer_text)
    if not candidates:
        raise RewriteParseError(f"the new answer has no number: {answer_text.strip()[:80]!r}")
    return candidates[0], candidates


def _numbers(text: str) -> list[str]:
    """Numbers in reading order: digits, number words (one run of words = one number), zero words."""
    found: list[tuple[int, str]] = [(m.start(), _canonical(m.group(0))) for m in NUMBER.finditer(text)]
    lowered = text.lower()
    for word in ZERO_WORDS:
        for m in re.finditer(rf"\b{word}\b", lowered):
            found.append((m.start(), "0"))
    run: list[re.Match] = []

    def flush() -> None:
        while run and run[-1].group(0) == "and":
            run.pop()
        if run:
            try:
                found.append((run[0].start(), str(w2n.word_to_num(" ".join(m.group(0) for m in run)))))
            except ValueError:
                pass
        run.clear()

    for match in re.finditer(r"[a-z]+", lowered):
        word = match.group(0)
        joined = bool(run) and lowered[run[-1].end():match.start()].strip(" -") == ""
        after_scale = bool(run) and run[-1].group(0) in ("hundred", "thousand")
        if word in NUMBER_WORDS and (joined and (word != "and" or after_scale) or (not run and word != "and")):
            run.append(match)
            continue
        flush()
        if word in NUMBER_WORDS and word != "and":
            run.append(match)
    flush()
    found.sort(key=lambda pair: pair[0])
    return list(dict.fromkeys(value for _, value in found))


def _canonical(number: str) -> str:
    number = number.replace(",", ".")
    try:
        value = float(number)
    except ValueError:
        return number
    return str(int(value)) if value.is_integer() else str(value)


def _yes_no(answer_text: str) -> tuple[str, list[str]]:
    words = [YES_NO[w] for w in re.findall(r"[a-z]+", answer_text.lower()) if w in YES_NO]
    if not words:
        raise RewriteParseError(f"the new answer is not yes or no: {answer_text.strip()[:80]!r}")
    return words[0], list(dict.fromkeys(words))
