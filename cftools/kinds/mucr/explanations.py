"""MuCR Exp, scored as the paper defines it: the judge scores each PART of a model's explanation against the
human references, S1 the cause-image part, S2 the effect-image part, S3 the causal-link part (0–10 each), and
Exp = 0.25·S1 + 0.25·S2 + 0.5·S3.

An explanation is split into its three parts the way the published references are written: at "In the first
image …" (or "The first image shows/depicts …", "Image 1 …", "In the left image …"), at "In the second image …" (or
its variants) and at the causal sentence ("The causal link is …", "The connection is …", "The causal reasoning is
…", "This is because …", "Therefore …"); an explanation without those markers is split by sentences (first,
second, the rest). The judge (prompts/eval/mucr_judge.j2) sees the
candidate's parts and one reference's parts and replies `S1: n, S2: n, S3: n`; one call per reference. A part's
score over the references is the best-matching reference's (`best-match`, the default: each part's own best, so
S1, S2 and S3 may come from different references) or their mean (`mean`).
"""

from __future__ import annotations

import re
from statistics import mean
from typing import Any, Literal, Optional, Sequence

from pydantic import Field

from cftools.llm.structured import OutputSchema, Reply

PARTS = ("S1", "S2", "S3")
PART_NAMES = {"S1": "cause image", "S2": "effect image", "S3": "causal link"}
PART_WEIGHTS = {"S1": 0.25, "S2": 0.25, "S3": 0.5}
AGGREGATES = ("best-match", "mean")
DEFAULT_AGGREGATE = "best-match"

# Where each part starts. The published references open with "In the first image, …" / "In the second image, …";
# models as often write "The first image shows/depicts …", "In the first picture …", "Image 1 shows …", "In the
# left image …" (the cause is shown first, on the left).
_PICTURE = r"(?:image|picture|panel|photo|photograph)"


def _opening(ordinal: str, number: str, side: str) -> re.Pattern:
    return re.compile(rf"\b(?:(?:in|on)\s+)?the\s+(?:{ordinal}|{side})\s+{_PICTURE}\b"
                      rf"|\b(?:(?:in|on)\s+)?{_PICTURE}\s*(?:{number}|#\s*{number[0]})\b", re.IGNORECASE)


FIRST = _opening("first", "1|one", "left|cause|former")
SECOND = _opening("second", "2|two", "right|effect|latter")
LINK = re.compile(r"\b(?:the (?:causal )?(?:link|connection|relationship|reasoning|reason|relation)\b"
                  r"|the cause (?:is|was)\b|this (?:is because|shows|suggests|indicates|implies|means)\b"
                  r"|therefore\b|thus\b|hence\b|as a result\b|consequently\b|so\b(?=[^.]*\bcaus))",
                  re.IGNORECASE)
SENTENCE = re.compile(r"(?<=[.!?])\s+")
# What after a part's number makes it no single 0-10 score: a range, another scale, a percentage, an exponent.
NOT_ONE_SCORE = re.compile(r"\s*(?:[-\u2013]\s*\d|/\s*\d|out\s+of\s+\d|%|[eE][-+]?\d|(?:to|or)\s+\d)", re.IGNORECASE)
JUDGE_LINE = re.compile(r"\bS\s*([123])\s*[:=\-–]?\s*(\d+(?:\.\d+)?)(?:\s*(?:/|out of)\s*10\b)?", re.IGNORECASE)


def _markers(text: str) -> tuple[Optional[re.Match], Optional[re.Match], Optional[re.Match]]:
    """Where the cause-image, effect-image and causal-link parts start: the first opening of each, each searched
    after the one before it (the effect part may name "the first image" again)."""
    first = FIRST.search(text)
    second = SECOND.search(text, first.end() if first else 0)
    link = LINK.search(text, second.end() if second else (first.end() if first else 0))
    return first, second, link


def split_parts(text: str) -> dict[str, str]:
    """{"S1": cause-image part, "S2": effect-image part, "S3": causal-link part}; a missing part is ""."""
    text = re.sub(r"\s+", " ", (text or "").strip().lstrip("'\""))
    first, second, link = _markers(text)
    if first is None and second is None:
        sentences = [s for s in SENTENCE.split(text) if s.strip()]
        return {"S1": sentences[0] if sentences else "", "S2": sentences[1] if len(sentences) > 1 else "",
                "S3": " ".join(sentences[2:])}
    start2 = second.start() if second else None
    start3 = link.start() if link else None
    s1_end = start2 if start2 is not None else (start3 if start3 is not None else len(text))
    s1 = text[first.start():s1_end] if first else ""
    s2 = text[start2:start3 if start3 is not None else len(text)] if start2 is not None else ""
    s3 = text[start3:] if start3 is not None else ""
    return {part: value.strip() for part, value in zip(PARTS, (s1, s2, s3))}


def missing_parts(text: str) -> list[str]:
    """The parts of the three-part form an explanation lacks (its markers), e.g. ["S3"]."""
    found = dict(zip(PARTS, _markers(text or "")))
    return [part for part in PARTS if not found[part]]


def parse_judge_parts(text: str) -> Optional[dict[str, float]]:
    """`S1: 7, S2: 8, S3: 5` (any order, `7/10` too) -> {"S1": 7.0, ...}; None unless all three are on 0–10."""
    scores: dict[str, float] = {}
    for match in JUDGE_LINE.finditer(text or ""):
        part = f"S{match.group(1)}"
        if part in scores:
            continue
        if NOT_ONE_SCORE.match(text, match.end()):
            return None  # "S1: 7-8", "S3: 5/5", "S2: 7/100": a range or another scale, not one score of 0-10
        scores[part] = float(match.group(2))
    if set(scores) != set(PARTS) or not all(0 <= v <= 10 for v in scores.values()):
        return None
    return {part: scores[part] for part in PARTS}


def aggregate_parts(per_reference: Sequence[dict[str, float]], how: str = DEFAULT_AGGREGATE) -> dict[str, float]:
    """One score per part over the references: the best-matching reference's, or the mean."""
    if how not in AGGREGATES:
        raise ValueError(f"unknown aggregate {how!r}; choose one of {', '.join(AGGREGATES)}")
    if not per_reference:
        raise ValueError("Exp needs at least one reference score")
    pick = max if how == "best-match" else mean
    return {part: float(pick([scores[part] for scores in per_reference])) for part in PARTS}


def exp_score(parts: dict[str, float] | Sequence[float]) -> float:
    """Exp = 0.25·S1 + 0.25·S2 + 0.5·S3 from the part scores (0–10 each)."""
    values = dict(zip(PARTS, parts)) if not isinstance(parts, dict) else parts
    if set(values) != set(PARTS):
        raise ValueError(f"Exp needs the three part scores S1, S2, S3, got {sorted(values)}")
    for part, value in values.items():
        if not 0 <= value <= 10:
            raise ValueError(f"{part} is on a 0–10 scale, got {value}")
    return float(sum(PART_WEIGHTS[p] * values[p] for p in PARTS))


def judge_prompts(template: Any, explanation: str, references: Sequence[str]) -> list[str]:
    """One judge prompt per reference, both explanations shown part by part."""
    candidate = split_parts(explanation)
    return [template.render(candidate=candidate, reference=split_parts(ref), part_names=PART_NAMES).strip()
            for ref in references]


def judge_result(replies: Sequence[str], how: str = DEFAULT_AGGREGATE) -> dict[str, Any]:
    """What a prediction line keeps of the judge's replies: the part scores per reference, the aggregated part
    scores and Exp; `similarities` is None when a reply cannot be read (the item counts as not judged)."""
    per_reference = [parse_judge_parts(reply) for reply in replies]
    if not per_reference or any(s is None for s in per_reference):
        return {"similarities": None, "parts": None, "exp_score": None, "aggregate": how}
    parts = aggregate_parts(per_reference, how)
    return {"similarities": [[s[p] for p in PARTS] for s in per_reference], "parts": parts,
            "exp_score": exp_score(parts), "aggregate": how}


# -- the judge's reply: one score per part, 0-10 (prompts/eval/mucr_judge.j2); validated against JudgeScores, read
# by `judge_result` as the same "S1: n, S2: n, S3: n" line whichever way the judge wrote it

Score = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # an enum: the strict subset of the hosted APIs has no ranges


class JudgeScores(Reply):
    S1: Score = Field(description="How similar the cause-image parts are")
    S2: Score = Field(description="How similar the effect-image parts are")
    S3: Score = Field(description="How similar the causal-link parts are")


JUDGE_SCHEMA = OutputSchema("mucr_judge_scores", JudgeScores)


def scores_line(reply: JudgeScores) -> str:
    """The validated reply as the scoring reads it."""
    return f"S1: {reply.S1}, S2: {reply.S2}, S3: {reply.S3}"
