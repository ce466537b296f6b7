"""Reply functions for the loopback chat server (`python tests/llm_stub.py --reply llm_replies:NAME`, or
`llm_server.use_reply("llm_replies:NAME")`): they run inside the server process, so they live in a module."""

from __future__ import annotations


def eval_answers(request: dict, text: str) -> str:
    """What a vision model might say to the eval fixtures' questions (tests/fixtures_eval.py)."""
    if "How many" in text:
        return "There are two birds."
    if "color" in text:
        return "It is red."
    return "Yes."


def judge_seven(request: dict, text: str) -> str:
    """A judge that scores every part of every explanation 7 (of 10)."""
    return "S1: 7\nS2: 7\nS3: 7"
