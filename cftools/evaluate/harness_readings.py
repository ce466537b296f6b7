"""Replies read as the evaluation harnesses' own scorers read them: `cftools eval --reading vlmevalkit` and
`--reading lmms-eval` (and `cftools eval import --reading ...`), so a harness's published numbers can be put beside
cftools' own.

What the harnesses do, restated from their sources (their code is not copied):

**VLMEvalKit** (github.com/open-compass/VLMEvalKit at commit e8e78f0), for the dataset types cftools' VLMEvalKit
export writes:

- yes/no (`ImageYORNDataset`; `vlmeval/dataset/utils/yorn.py` `YOrN_Extraction`, with `process_punctuation` of
  `vlmeval/smp/misc.py`): the reply lower-cased; the punctuation ; / [ ] " { } ( ) = + \\ _ - > < @ ` , ? ! is
  deleted where the reply has it beside a space (or has a comma between digits anywhere), else made a space; a
  period not followed by a digit is deleted, one after a digit ("3.") too (the script's look-behind is written
  as a look-ahead), the first 32 of them only; the words are then split on white space. "yes"
  among them and not "no" reads Yes; "no" and not "yes" reads No; else Unknown, which is wrong. So "Yes." and
  "No, it is not." are read, "True", "Yes:", "Nope" and "No doubt, yes" are not.
- multiple choice (`ImageMCQDataset`; `vlmeval/utils/matching_util.py` `can_infer` = `can_infer_option`, then
  `can_infer_text`), the choices being the option columns A, B, ... that are not empty:
  `can_infer_option`: a reply holding "Failed to obtain answer via API" reads nothing here; one holding a
  refusal phrase ("Cannot determine the answer", ...) reads Z (no option: wrong). Otherwise the characters
  . ( ) [ ] , : ; ! * # { } become spaces and the reply is split on white space: when exactly one choice letter
  (upper case) is among the words and its first occurrence is among the last four words, that letter; when no
  letter is and the word Z is, Z; else "answer is X" / "correct answer is **X**" (any case, X one of A-D) names
  X. So "Option A" and "(B)" read, a bare "a" does not. `can_infer_text`: the reply lower-cased, not longer than
  twice the options' text together, holding exactly one option's text (lower-cased, as a substring) reads that
  option. Neither: VLMEvalKit would ask its LLM judge; cftools runs no judge (its `exact_matching` policy:
  `extract_answer_from_item` in `vlmeval/dataset/utils/multiple_choice.py`), so the reply reads Z, wrong.
- every other question (C-VQA counts, MuCR C2E/E2C letters): VLMEvalKit's custom VQA dataset has no scorer, so
  cftools' own reading is kept.

**lmms-eval** (github.com/EvolvingLMMs-Lab/lmms-eval at commit 75571cf): the tasks `cftools export --format
lmms-eval` writes score with cftools' own readers, so those runs already agree; this reading is that of
lmms-eval's own tasks of the same question types, to put a number beside theirs:

- yes/no as MME reads it (`lmms_eval/tasks/mme/utils.py` `parse_pred_ans`, "brought from Otter"): the reply
  lower-cased, stripped, its periods removed; "yes" or "no" is itself; a single "y" / "n" is yes / no; otherwise
  "yes" within its first four characters is yes, else "no" within them is no, else unread. So "Nope" and "Not
  really" read no, "None" reads no, "True" and "I think yes" read nothing.
- a choice among lettered images as SEED-Bench reads it (`lmms_eval/tasks/seedbench/utils.py`
  `seed_process_result`): the reply stripped; longer than one character, its first character; right when that
  equals the gold letter. So "B) the second" reads B, "(B)" and a lower-case "b" are wrong.
- every other question keeps cftools' reading (CFMM ranks its options by loss, as lmms-eval's multiple_choice
  output type does; counts are read as cftools reads them).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional

VLMEVALKIT, LMMS_EVAL = "vlmevalkit", "lmms-eval"
HARNESS_READINGS = (VLMEVALKIT, LMMS_EVAL)
VLMEVALKIT_COMMIT = "e8e78f05f3080fe28154f2130321f17951c3be94"
LMMS_EVAL_COMMIT = "75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3"
NO_OPTION = "Z"  # VLMEvalKit's answer for a reply that names no option

# -- VLMEvalKit ---------------------------------------------------------------------------------------------------

# vlmeval/smp/misc.py process_punctuation: the characters it removes or spaces out, and its two patterns
_VLMEVALKIT_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",",
                     "?", "!")
_COMMA_BETWEEN_DIGITS = re.compile(r"(\d)(,)(\d)")
# The script's `(?!<=\d)(\.)(?!\d)` means a look-behind but is a look-ahead that never fails: every period not
# followed by a digit goes, one after a digit ("3.") too, and those count towards the 32.
_LONE_PERIOD = re.compile(r"\.(?!\d)")
_PERIODS_REMOVED = 32  # the script passes re.UNICODE (32) where `sub` takes its count
# vlmeval/utils/matching_util.py can_infer_option: what it spaces out, what it takes for a refusal, its marker
_OPTION_SEPARATORS = ".()[],:;!*#{}"
_REFUSALS = ("Sorry, I can't help with images of people yet.", "I can't process this file.",
             "I'm sorry, but without the image provided", "Cannot determine the answer")
_API_FAILURE = "Failed to obtain answer via API"
_ANSWER_IS = re.compile(r"(?i)(?:correct\s+)?answer\s+is\s+\**([ABCD])\**")
_LAST_WORDS = 4  # a lone letter counts only among the reply's last four words


def vlmevalkit_punctuation(text: str) -> str:
    """TEXT with punctuation removed or spaced out as VLMEvalKit's `process_punctuation` does."""
    out = text
    digits_comma = _COMMA_BETWEEN_DIGITS.search(text) is not None
    for mark in _VLMEVALKIT_PUNCT:
        beside_space = mark + " " in text or " " + mark in text  # judged on the text as given, as the script does
        out = out.replace(mark, "" if beside_space or digits_comma else " ")
    return _LONE_PERIOD.sub("", out, count=_PERIODS_REMOVED)


def vlmevalkit_yes_no(reply: Optional[str]) -> Optional[str]:
    """'yes', 'no' or None (VLMEvalKit's Unknown) as `YOrN_Extraction` reads REPLY."""
    words = vlmevalkit_punctuation(str(reply or "").lower()).split()
    if "yes" in words and "no" not in words:
        return "yes"
    if "no" in words and "yes" not in words:
        return "no"
    return None


def vlmevalkit_option_letter(reply: str, choices: Mapping[str, str]) -> Optional[str]:
    """The letter `can_infer_option` reads in REPLY (NO_OPTION for a refusal); None where it reads nothing."""
    if _API_FAILURE in reply:
        return None
    if any(refusal in reply for refusal in _REFUSALS):
        return NO_OPTION
    spaced = reply
    for mark in _OPTION_SEPARATORS:
        spaced = spaced.replace(mark, " ")
    words = spaced.split()
    named = [letter for letter in choices if letter in words]
    if len(named) == 1 and words.index(named[0]) > len(words) - 1 - _LAST_WORDS:
        return named[0]
    if not named and NO_OPTION in words:
        return NO_OPTION
    marked = _ANSWER_IS.search(reply)
    if marked and marked.group(1).upper() in choices:
        return marked.group(1).upper()
    return None


def vlmevalkit_option_text(reply: str, choices: Mapping[str, str]) -> Optional[str]:
    """The letter whose option text `can_infer_text` finds in REPLY; None where it finds none or several."""
    lowered = reply.lower()
    if len(lowered) > 2 * sum(len(str(text)) for text in choices.values()):
        return None
    found = [letter for letter, text in choices.items() if str(text).lower() in lowered]
    return found[0] if len(found) == 1 else None


def vlmevalkit_choice(reply: Optional[str], choices: Mapping[str, str]) -> str:
    """The letter VLMEvalKit's exact matching gives REPLY among CHOICES (letter -> option text): `can_infer`,
    and NO_OPTION where it reads nothing (VLMEvalKit's LLM judge, which would be asked then, is not run)."""
    text = str(reply if reply is not None else "")
    return vlmevalkit_option_letter(text, choices) or vlmevalkit_option_text(text, choices) or NO_OPTION


# -- lmms-eval ----------------------------------------------------------------------------------------------------

_MME_PREFIX = 4  # parse_pred_ans looks for yes / no in the reply's first four characters


def lmms_eval_yes_no(reply: Optional[str]) -> Optional[str]:
    """'yes', 'no' or None ("other") as lmms-eval's MME task (`parse_pred_ans`) reads REPLY."""
    text = str(reply or "").lower().strip().replace(".", "")
    if text in ("yes", "no"):
        return text
    if len(text) == 1:
        return {"y": "yes", "n": "no"}.get(text)
    prefix = text[:_MME_PREFIX]
    return "yes" if "yes" in prefix else "no" if "no" in prefix else None


def lmms_eval_letter(reply: Optional[str]) -> Optional[str]:
    """The letter lmms-eval's SEED-Bench task takes from REPLY: its first character (None for an empty reply)."""
    text = str(reply or "").strip()
    return text[:1] or None


LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # VLMEvalKit's option columns, in order


def is_multiple_choice(question: Any) -> bool:
    """Whether the VLMEvalKit export writes QUESTION as multiple choice (option columns, letter answer)."""
    from cftools.evaluate.questions import LETTER

    return bool(question.options) and question.answer_type != LETTER and question.gold_option in question.options


# -- by question --------------------------------------------------------------------------------------------------

def option_choices(question: Any) -> Optional[dict[str, str]]:
    """Letter -> option text of a multiple-choice question as VLMEvalKit's MCQ file lists it (its non-empty
    option columns); None for a question the export does not write as multiple choice."""
    if not is_multiple_choice(question):
        return None
    return {LETTERS[n]: option for n, option in enumerate(question.options) if str(option).strip()}


def read_as_harness(question: Any, raw: Optional[str], reading: str) -> Optional[tuple[Optional[str], bool]]:
    """(parsed, correct) of a reply as the harness READING names scores it; None for a question that harness
    leaves to cftools' reading (see the module doc)."""
    if reading == VLMEVALKIT:
        return read_as_vlmevalkit(question, raw)
    if reading == LMMS_EVAL:
        return read_as_lmms_eval(question, raw)
    raise ValueError(f"not a harness reading: {reading!r}")


def is_yes_no(question: Any) -> bool:
    return question.answer_type == "yes/no" and str(question.gold).strip().lower() in ("yes", "no")


def read_as_vlmevalkit(question: Any, raw: Optional[str]) -> Optional[tuple[Optional[str], bool]]:
    choices = option_choices(question)
    if choices is not None:
        letter = vlmevalkit_choice(raw, choices)
        option = choices.get(letter)
        return option, option is not None and option == question.gold_option
    if is_yes_no(question):
        answer = vlmevalkit_yes_no(raw)
        return answer, answer == str(question.gold).strip().lower()
    return None


def read_as_lmms_eval(question: Any, raw: Optional[str]) -> Optional[tuple[Optional[str], bool]]:
    from cftools.evaluate.questions import LETTER

    if question.answer_type == LETTER:
        letter = lmms_eval_letter(raw)
        return letter, letter is not None and letter == str(question.gold).strip()
    if is_yes_no(question):
        answer = lmms_eval_yes_no(raw)
        return answer, answer == str(question.gold).strip().lower()
    return None
