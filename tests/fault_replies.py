"""Reply functions of the stub LLM (`tests/llm_stub.py --reply fault_replies:NAME`) for the fault trials
(tests/fault_trials.py). They run in the stub's own process, so they live in a module; each answers the same
prompt the same way, which is what lets a killed-and-rerun stage end as a clean run does."""

from __future__ import annotations

import json
import re

from llm_stub import structured_reply

COLOURS = ("red", "green")


def _kind_number(prompt: str) -> int:
    """The N of the last 'things of kind N' fact (tests/fault_trials.write_number_table's questions)."""
    numbers = re.findall(r"things of kind (\d+)", prompt)
    return int(numbers[-1]) if numbers else 0


def _answer(prompt: str) -> int:
    answers = re.findall(r"Answer: (\d+)", prompt)
    return int(answers[-1]) if answers else 0


def cfmm_type(n: int) -> str:
    """Even images get a count pair, odd ones a color pair: half and half, so a `count,color` quota fits exactly
    however many drafts a killed run left."""
    return "count" if n % 2 == 0 else "color"


def cfmm_pairs(request: dict, text: str) -> str:
    """`generate pairs`: the pick prompt (schema cfmm_type_pick) gets the image's type, a draft prompt its pair."""
    n = _kind_number(text.rsplit("Facts:", 1)[-1])
    schema = request["response_format"]["json_schema"]
    if schema["name"] == "cfmm_type_pick":
        return json.dumps({"type": cfmm_type(n)})
    if schema["name"] != "cfmm_pair":  # the answer's re-derivation after the drafts
        return structured_reply(schema["schema"], text)
    if cfmm_type(n) == "count":
        count = _answer(text.rsplit("Facts:", 1)[-1])
        return json.dumps({"basic_question": f"How many things of kind {n} are there?",
                           "basic_options": [str(count), str(count + 1)], "basic_correct": 1,
                           "cf_question": f"If one more thing of kind {n} were added, how many things of kind {n} "
                                          f"would there be?", "cf_options": [str(count), str(count + 1)],
                           "cf_correct": 2})
    return json.dumps({"basic_question": f"What colour are the things of kind {n}?", "basic_options": list(COLOURS),
                       "basic_correct": 1, "cf_question": f"If the things of kind {n} were repainted the colour of "
                                                          f"grass, what colour would they be?",
                       "cf_options": list(COLOURS), "cf_correct": 2})


def mucr_cues(request: dict, text: str) -> str:
    """`generate cues` (schema mucr_cues), else a contextual description (`generate context`). The cue names the
    pair, so each pair's draft differs."""
    schema = request["response_format"]["json_schema"]
    if schema["name"] != "mucr_cues":
        return structured_reply(schema["schema"], text)
    cause = text.rsplit("Cause image:", 1)[-1].split("\n")[0]
    words = re.findall(r"[a-z]+", cause.lower())
    cue = " ".join(words[-2:]) or "rain"
    return json.dumps({"cue": cue, "false_cues": ["bench", "hoodie", "park"],
                       "explanation": f"In the first image, {cause.strip()} In the second image, the person is ill. "
                                      f"The causal link is that {cue} caused it."})


def ten_megabytes(request: dict, text: str) -> str:
    """A 10 MB reply (issue 39: past the default [llm] max_reply_bytes, it is a failed call, never stored)."""
    return "x" * (10 * 1024 * 1024)
