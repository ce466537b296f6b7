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


# -- a scripted model that knows the published C-VQA-Synthetic answers ------------------------------------------

SYNTHETIC_FORMS = ("{letter}", "({letter})", "{letter}.", "Answer: {letter}", "The answer is {letter}", "{text}",
                   "Let me look at the shapes.\nThe answer is ({letter}).")


def synthetic_image_rows() -> dict[str, dict]:
    """sha256 of the image drawn for each published Synthetic row (tests/fixtures_eval.png_bytes of its line) ->
    the row and its line number."""
    import csv
    import hashlib

    from conftest import CVQA_SYNTHETIC
    from fixtures_eval import png_bytes

    with open(CVQA_SYNTHETIC, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {hashlib.sha256(png_bytes(n)).hexdigest(): {**row, "line": n} for n, row in enumerate(rows)}


_SYNTHETIC: dict[str, dict] = {}


def cvqa_synthetic_right(request: dict, text: str) -> str:
    """Answers every C-VQA-Synthetic question right (it recognises the row by its image), each in one of the
    forms people and models write a choice in: a letter, "(A)", "A.", "Answer: A", "The answer is A", the option's
    text."""
    import base64
    import hashlib
    import re

    if not _SYNTHETIC:
        _SYNTHETIC.update(synthetic_image_rows())
    content = request["messages"][-1]["content"]
    url = next(part["image_url"]["url"] for part in content if part["type"] == "image_url")
    row = _SYNTHETIC[hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest()]
    which = "new " if row["new query"] in text else ""
    letter = row[f"{which}answer"]
    options = dict(re.findall(r"\b([A-Z])\s*:\s*(\S+)", row[f"{which}query"].split("answer:", 1)[1]))
    form = SYNTHETIC_FORMS[(row["line"] * 2 + bool(which)) % len(SYNTHETIC_FORMS)]
    return form.format(letter=letter, text=options[letter])
