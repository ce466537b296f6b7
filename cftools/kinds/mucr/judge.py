"""The MuCR Exp judge's output schema: one score per part of the explanation, 0–10 (prompts/eval/mucr_judge.j2).

The reply is validated against `JudgeScores`; what the scoring reads (`explanations.judge_result`) is the same
"S1: n, S2: n, S3: n" line whichever way the judge wrote it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cftools.llm.structured import OutputSchema, Reply

Score = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]  # an enum: the strict subset of the hosted APIs has no ranges


class JudgeScores(Reply):
    S1: Score = Field(description="How similar the cause-image parts are")
    S2: Score = Field(description="How similar the effect-image parts are")
    S3: Score = Field(description="How similar the causal-link parts are")


JUDGE_SCHEMA = OutputSchema("mucr_judge_scores", JudgeScores)


def scores_line(reply: JudgeScores) -> str:
    """The validated reply as the scoring reads it."""
    return f"S1: {reply.S1}, S2: {reply.S2}, S3: {reply.S3}"
