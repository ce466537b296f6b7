"""C-VQA scores the paper's way: replies read as the paper's own scripts read them (`cftools eval --reading paper`).

The C-VQA repository scores a model in two steps (scripts/format_response.py, then scripts/calc_acc.py, at commit
8a1bf38 of github.com/Letian2003/C-VQA). What they do, restated (their code is not copied):

- **count questions** (every `type` but boolean, original and counterfactual alike): the reply is lower-cased and
  cut into word tokens (`\\b\\w+\\b`; a comma is kept as an empty token). A reply with no token fails. A reply
  that *starts* with "if" is read after its first comma (no comma: it fails); otherwise a reply holding "if" is
  read only before it. The answer is then the first token that is all digits, or the first of the words no, zero,
  none (0) and one … ten (1 … 10), whichever comes first; none of them: it fails.
  So "-4" reads as 4 (the minus is not a word character), "3 or 4" as 3, "3.5" as 3, "There are no birds" as 0,
  "They would be the same." fails. A token is "all digits" as Python's `str.isdigit` says and its value is `int()`
  of it, so non-ASCII decimal digits count: fullwidth "３" and Arabic-Indic "٣" read as 3 (the formatted reply is
  written as the int, "3", and matches the gold). A superscript "²" is a digit to `isdigit` but not to `int()`:
  the script stops with an error there; cftools reads that reply as "fail".
- **yes/no questions** (`type` boolean): the reply's word tokens; any of no, false, not anywhere reads as "no";
  else any of yes, true, be, is, are reads as "yes"; else it fails. So "They would be the same." reads as yes
  (it holds "be"), "Yes and no." as no, "Maybe." fails, "isn't" neither says "is" nor "not" (its tokens are
  "isn" and "t") and fails.
- **scoring** (calc_acc.py): the formatted reply, as the text the CSV holds, must equal the gold answer's text
  exactly; a failed reply is wrong. Accuracy per `type` is right / all rows, original and counterfactual apart,
  and the drop is original minus counterfactual, as cftools' C-VQA table gives them.

cftools' own reading (`cftools.answers`) differs on purpose: a negative count is not a count, a hedge or two
candidates ("3 or 4", "maybe") are unreadable, a yes/no reply is read in its negation scope ("there are no
birds" does not answer "no" to "is the bird gone?"). Questions the scripts do not read (C-VQA-Synthetic's
multiple choice) keep cftools' reading.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from cftools.kinds.cvqa.model import BOOLEAN, COUNT_GROUPS

SCRIPT_COMMIT = "8a1bf38003a99619679369028b63d0d550809b30"
SCRIPT_NUMBER_WORDS = {"no": 0, "zero": 0, "none": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                       "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
SCRIPT_NO_WORDS = frozenset({"no", "false", "not"})
SCRIPT_YES_WORDS = frozenset({"yes", "true", "be", "is", "are"})
COMMA = ""  # how the scripts' tokenizer keeps a comma
_WORD_OR_COMMA = re.compile(r"(\b\w+\b)|,")
_WORD = re.compile(r"\b\w+\b")


def script_count(reply: Optional[str]) -> Optional[int]:
    """A count question's reply as format_response.py reads it (None where it writes "fail")."""
    tokens = [m.group(1) or COMMA for m in _WORD_OR_COMMA.finditer(str(reply or "").lower())]
    if tokens and tokens[0] == "if":
        tokens = tokens[tokens.index(COMMA) + 1:] if COMMA in tokens else []
    elif "if" in tokens:
        tokens = tokens[:tokens.index("if")]
    for token in tokens:
        if token.isdigit():  # str.isdigit, as the script: fullwidth "３" and Arabic-Indic "٣" are digits too
            return script_int(token)
        if token in SCRIPT_NUMBER_WORDS:
            return SCRIPT_NUMBER_WORDS[token]
    return None


def script_int(token: str) -> Optional[int]:
    """int(TOKEN) as the script takes it: "３" and "٣" are 3. A token str.isdigit() accepts but int() does not
    (a superscript "²") stops the script with a ValueError; cftools reads it as "fail" instead."""
    try:
        return int(token)
    except ValueError:
        return None


def script_yes_no(reply: Optional[str]) -> Optional[str]:
    """A boolean question's reply as format_response.py reads it (None where it writes "fail")."""
    tokens = set(_WORD.findall(str(reply or "").lower()))
    if tokens & SCRIPT_NO_WORDS:
        return "no"
    if tokens & SCRIPT_YES_WORDS:
        return "yes"
    return None


def read_as_scripts(question: Any, raw: Optional[str]) -> Optional[tuple[Optional[str], bool]]:
    """(parsed, correct) of a reply as the C-VQA scripts score it; None for a question they do not read."""
    if question.group == BOOLEAN:
        parsed = script_yes_no(raw)
    elif question.group in COUNT_GROUPS:
        count = script_count(raw)
        parsed = None if count is None else str(count)
    else:
        return None
    return parsed, parsed is not None and parsed == str(question.gold)
