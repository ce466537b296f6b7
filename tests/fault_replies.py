"""Reply functions of the stub LLM (`tests/llm_stub.py --reply fault_replies:NAME`) for the fault trials
(tests/fault_trials.py). They run in the stub's own process, so they live in a module; each answers the same
prompt the same way, which is what lets a killed-and-rerun stage end as a clean run does."""

from __future__ import annotations

import re

from llm_stub import context_reply

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
    """`generate pairs`: the pick prompt (it ends with "Type:") gets the image's type, a draft prompt its pair."""
    n = _kind_number(text.rsplit("Facts:", 1)[-1])
    if text.rstrip().endswith("Type:"):
        return f"Type: {cfmm_type(n)}"
    if cfmm_type(n) == "count":
        count = _answer(text.rsplit("Facts:", 1)[-1])
        return (f"How many things of kind {n} are there?\nBasic options: {count} | {count + 1}\n"
                f"Basic answer: {count}\nCounterfactual question: If one more thing of kind {n} were added, how many "
                f"things of kind {n} would there be?\nCounterfactual options: {count} | {count + 1}\n"
                f"Counterfactual answer: {count + 1}")
    return (f"What colour are the things of kind {n}?\nBasic options: red | green\nBasic answer: red\n"
            f"Counterfactual question: If the things of kind {n} were repainted the colour of grass, what colour "
            f"would they be?\nCounterfactual options: red | green\nCounterfactual answer: green")


def mucr_cues(request: dict, text: str) -> str:
    """`generate cues` (the prompt ends with "Cue:"), else a contextual description (`generate context`). The cue
    names the pair, so each pair's draft differs."""
    if not text.rstrip().endswith("Cue:"):
        return context_reply(text)
    cause = text.rsplit("Cause image:", 1)[-1].split("\n")[0]
    words = re.findall(r"[a-z]+", cause.lower())
    cue = " ".join(words[-2:]) or "rain"
    return (f"{cue}\nFalse cues: bench; hoodie; park\nExplanation: In the first image, {cause.strip()} "
            f"In the second image, the person is ill. The causal link is that {cue} caused it.")
