"""The CFMM checks: leakage, options_invalid, no_condition, subject_drift, blind_answerable (issue 14).

Each returns a Flag with a reason a person can act on, a Note when it applies but cannot decide, or None.
Words are compared after `normalize_answer` (lower case, no punctuation, number words as digits, no articles)
and a small table of synonyms (grey/gray, large/big, ...), so "If I painted this bus blue, what colour would it
be?" leaks the answer "Blue" and "If three more birds landed ..." leaks "3".
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from cftools.answers import normalize_answer
from cftools.kinds.base import Check
from cftools.findings import Flag, Note, Result

# The if-clause of a counterfactual question: from its opening word to the comma (or "then", or the end).
CONDITION = re.compile(r"\b(?:if|suppose|supposing|imagine|imagining|assuming|assume|provided)\b"
                       r"(?P<clause>[^,?.]*?)(?:,|\.|\bthen\b|\?|$)", re.IGNORECASE)
# Words that say nothing about which thing a question is about.
FUNCTION_WORDS = frozenset("""
a an the this that these those there here it its it's they them their he she his her i me my we our you your
is are was were be been being am do does did would will could can should might may must shall have has had
what which who whom whose how many much where when why whether or and of in on at to from by for with about
into onto over under than then if as so not no some any all each every one other another more less most least
picture image photo shown see seen visible color colour kind type sort thing things number
""".split())
# What a type asks about, not which thing a question is about (for subject_drift only: they can be answers).
TYPE_WORDS = frozenset("""
shape size big bigger little littler tall taller short shorter way direction side left right up down face facing
""".split())
# Same meaning, one spelling: a leaked answer may use either.
SYNONYMS = {
    "gray": "grey", "large": "big", "huge": "big", "small": "little", "tiny": "little", "larger": "bigger",
    "smaller": "littler", "above": "up", "upward": "up", "upwards": "up", "below": "down", "downward": "down",
    "downwards": "down", "leftward": "left", "rightward": "right", "circular": "round", "circle": "round",
    "square": "square", "quadrilateral": "square", "sphere": "round", "spherical": "round",
    "crimson": "red", "scarlet": "red", "navy": "blue", "azure": "blue",
}
BLIND_MARGIN = 1.0  # mean log-probability per token by which the blind model must prefer the correct option


def words(text: Optional[str]) -> list[str]:
    """Normalized words with synonyms folded (number words as digits)."""
    return [SYNONYMS.get(w, w) for w in normalize_answer(text or "").split()]


def stem(word: str) -> str:
    """A crude singular: enough to see that "dogs" and "dog" are the same subject."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def content_words(text: Optional[str]) -> set[str]:
    return {stem(w) for w in words(text) if w not in FUNCTION_WORDS and w not in TYPE_WORDS and not w.isdigit()}


def condition_of(question: Optional[str]) -> Optional[str]:
    """The if-clause of QUESTION (without its opening word), or None when it has none."""
    match = CONDITION.search(question or "")
    if match is None or not match.group("clause").strip():
        return None
    return match.group("clause").strip()


def contains_phrase(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    return n > 0 and any(list(haystack[i:i + n]) == list(needle) for i in range(len(haystack) - n + 1))


# -- what a CFMM item holds ------------------------------------------------------------------------------------

def data_of(item: Any) -> dict[str, Any]:
    return getattr(item, "data", None) or {}


def basic_question(item: Any) -> Optional[str]:
    return data_of(item).get("basic_question") or getattr(item, "source_question", None)


def basic_answer(item: Any) -> Optional[str]:
    value = data_of(item).get("basic_answer")
    return value if value is not None else getattr(item, "source_answer", None)


def options_of(item: Any, which: str) -> Optional[list]:
    options = data_of(item).get("options") or {}
    return options.get(which) if isinstance(options, dict) else None


# -- the checks -------------------------------------------------------------------------------------------------

def check_leakage(item: Any) -> Result:
    """The correct counterfactual answer is named in the if-clause and is not already part of the basic question."""
    condition = condition_of(item.question)
    answer = [w for w in words(item.answer) if w not in FUNCTION_WORDS or w.isdigit()]
    if condition is None or not answer:
        return None
    if not contains_phrase(words(condition), answer):
        return None
    if contains_phrase(words(basic_question(item)), answer):
        return None  # the subject named again in the condition ("If the dog shrank ...") is not leakage
    if names_the_change(condition, item.answer, item.question):
        return None
    return Flag("leakage", f"the counterfactual answer {item.answer!r} is given away by the if-clause "
                           f"('{condition}')")


# The if-clause states what is left, not a change: "if 3 kites were left in the sky", "if only two remained".
REMAINING = re.compile(r"\b(?:(?:were|are|is|was|be|been)\s+(?:still\s+)?left|remain(?:s|ed|ing)?|only)\b",
                       re.IGNORECASE)


def names_the_change(condition: str, answer: Optional[str], question: str) -> bool:
    """Whether the answer's number is the size of the change the if-clause makes ("If one cup fell off the table,
    how many cups would be on the table?" - 1), while the question asks for the count after it, not for that same
    change ("... how many cups fell off?"): the presupposition naming a change of N does not leak an answer N."""
    from cftools.answers import parse_number
    from cftools.checks.presupposition import ADD_VERBS, REMOVE_VERBS, parse_change

    value = parse_number(answer)
    if value is None or REMAINING.search(condition):
        return False
    change = parse_change(condition)
    if change.unreadable or not any(op.kind in ("add", "sub") and op.value == value for op in change.ops):
        return False
    asking = CONDITION.sub(" ", question)
    return not (ADD_VERBS.search(asking) or REMOVE_VERBS.search(asking))


def option_problem(options: Any, correct: Optional[str], which: str) -> Optional[str]:
    if not isinstance(options, list) or len(options) != 2:
        return f"the {which} question needs exactly two options, has {len(options) if isinstance(options, list) else 0}"
    normal = [normalize_answer(str(o)) for o in options]
    if any(not n for n in normal):
        return f"an option of the {which} question is empty"
    if normal[0] == normal[1]:
        return f"the two options of the {which} question are the same ({options[0]!r}, {options[1]!r})"
    if correct is None or normalize_answer(correct) not in normal:
        return f"the correct {which} answer {correct!r} is not one of its options {options}"
    return None


def check_options_invalid(item: Any) -> Result:
    for which, correct in (("basic", basic_answer(item)), ("counterfactual", item.answer)):
        problem = option_problem(options_of(item, "original" if which == "basic" else "counterfactual"), correct, which)
        if problem:
            return Flag("options_invalid", problem)
    return None


def check_no_condition(item: Any) -> Result:
    basic = basic_question(item)
    if basic and normalize_answer(basic) == normalize_answer(item.question):
        return Flag("no_condition", "the counterfactual question is the basic question unchanged")
    if condition_of(item.question) is None:
        return Flag("no_condition", "the counterfactual question has no if-clause (if, suppose, imagine, ...)")
    return None


def check_subject_drift(item: Any) -> Result:
    """None of the basic question's subject words come back in the counterfactual question."""
    subject = content_words(basic_question(item))
    if not subject:
        return None
    if subject & content_words(item.question):
        return None
    return Flag("subject_drift", f"the counterfactual question is about something else: it names none of "
                                 f"{', '.join(sorted(subject))} from the basic question")


# -- blind_answerable: a text-only model ranks the two options ---------------------------------------------------

Ranker = Callable[[str, Sequence[str]], list[float]]  # (question, options) -> a score per option, higher better
_ranker: dict[str, Any] = {}
_lock = threading.Lock()


def set_blind_ranker(ranker: Optional[Ranker], margin: Optional[float] = None) -> None:
    """Use RANKER (and MARGIN) for blind_answerable in this process; None goes back to the configured model."""
    with _lock:
        _ranker.pop("rank", None)
        _ranker.pop("margin", None)
        if ranker is not None:
            _ranker["rank"] = ranker
        if margin is not None:
            _ranker["margin"] = margin


def configure_blind_model(config: dict[str, Any]) -> None:
    """The text-only model blind_answerable ranks with: `[checks] blind_answerable_model` (a GGUF file, read with
    transformers). Without one the check is not decided: the embedded 135M model is too weak to judge a pair (it
    flagged 7 of 12 sound CFMM pairs), so it is never used for this check."""
    path = (config.get("checks") or {}).get("blind_answerable_model")
    with _lock:
        if _ranker.get("model_path") != path:
            _ranker.pop("model", None)
        _ranker["model_path"] = str(path) if path else None


def blind_ranker() -> Optional[Ranker]:
    """A ranker set in this process, else the configured model (loaded once), else None."""
    with _lock:
        if "rank" in _ranker:
            return _ranker["rank"]
        path = _ranker.get("model_path")
        if not path:
            return None
        if "model" not in _ranker:
            from cftools.llm.local import LocalBackend, smollm2_gguf

            try:
                embedded = Path(path).resolve() == smollm2_gguf().resolve()
            except Exception:  # noqa: BLE001 - no embedded model installed: the configured one cannot be it
                embedded = False
            if embedded:
                return None
            backend = LocalBackend(model=Path(path).stem, model_path=path, loader="transformers")
            _ranker["model"] = lambda question, options: [
                s["sum_logprob"] / max(1, s["n_tokens"]) for s in backend.score_replies(
                    [{"role": "user", "content": question + "\nAnswer with one of: " + " or ".join(options)}],
                    list(options))]
        return _ranker["model"]


NO_BLIND_MODEL = ("could not decide: no text-only model is configured for blind_answerable ([checks] "
                  "blind_answerable_model = a GGUF file of a capable model); the embedded 135M model is not used, it "
                  "flagged 7 of 12 sound CFMM pairs")


def check_blind_answerable(item: Any) -> Result:
    options = options_of(item, "counterfactual")
    if not isinstance(options, list) or len(options) != 2 or item.answer is None:
        return None
    normal = [normalize_answer(str(o)) for o in options]
    if normalize_answer(item.answer) not in normal:
        return None  # options_invalid says why
    try:
        ranker = blind_ranker()
        if ranker is None:
            return Note("blind_answerable", NO_BLIND_MODEL)
        scores = ranker(item.question, [str(o) for o in options])
    except Exception as exc:  # noqa: BLE001 - no model: the check could not decide, which is said, not raised
        return Note("blind_answerable", f"no text-only model to rank the options ({str(exc).splitlines()[0][:120]})")
    correct = normal.index(normalize_answer(item.answer))
    margin = scores[correct] - scores[1 - correct]
    threshold = _ranker.get("margin", BLIND_MARGIN)
    if margin > threshold:
        return Flag("blind_answerable", f"a text-only model picks {options[correct]!r} without the image, "
                                        f"by a margin of {margin:.2f} (> {threshold:g}): the text gives it away")
    return None


def declared_checks() -> tuple[Check, ...]:

    from cftools.checks import rules

    every = "all CFMM items"
    return (
        Check("two_questions", rules.check_two_questions, lambda i: True, every),
        Check("leakage", check_leakage, lambda i: True, every + " (the if-clause against the counterfactual answer)"),
        Check("options_invalid", check_options_invalid, lambda i: True, every),
        Check("no_condition", check_no_condition, lambda i: True, every),
        Check("subject_drift", check_subject_drift, lambda i: True, every),
        Check("blind_answerable", check_blind_answerable, lambda i: True,
              every + " (a text-only model ranks the counterfactual options)"),
        Check("answer_disputed", rules.check_answer_disputed, rules.rederived, rules.REDERIVED_SCOPE),
    )
