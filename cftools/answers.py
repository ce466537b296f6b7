"""Reading a model's free-text reply the way a careful grader would.

Normal form (`normalize_answer`) follows the official VQA evaluation script (Antol et al., "VQA: Visual
Question Answering", ICCV 2015; the reference implementation is `vqaEval.py` in the GT-Vision-Lab/VQA
repository, functions `processPunctuation` and `processDigitArticle`):

- lowercase; punctuation becomes a space, except that a comma between digits is a thousands separator
  ("1,000" -> "1000") and a period is kept only as a decimal point ("0.250" -> "0.25"; "0." never starts a
  thousands group);
- number words become digits ("two" -> "2"; "none" -> "0" as in the script's table; longer runs such as
  "twenty one" -> "21" through word2number, which the script does not do);
- the articles a, an, the are dropped;
- contractions written without their apostrophe get it back ("dont" -> "don't", the script's table).

Which part of a reply holds the answer (`answer_segment`):

1. an explicit answer marker wins: "Answer:", "New answer:", "Final answer:", "the answer is"; then a
   result phrase ("there would be", "there will be"); the last such marker counts, so in a chain of
   thought the number after "New answer:" beats the numbers of the steps;
2. else the final line of a reply of several lines, when that line can be read;
3. else the whole reply: for numbers only if it names one number ("There are 3 birds" -> 3); several
   different numbers and no marker -> unknown.

A reply that hedges ("Roughly 5 or 6", "maybe", "I guess"), names two candidates ("5 or 6", "5-6") or says it
cannot tell is unknown, never credited; so is a yes/no reply that hedges between the two ("not necessarily, but
...", "Yes, but it would not.", "No, but it could be.", "it depends"); so is a reply that denies the answer it
names ("not 2", "Not yes.", "The answer is not B"), a count that is only the premise echoed back ("If 3 more flew
in.": an if-clause's numbers are never the answer), a change ("3 more"), and a number marked as approximate or a
bound ("~3", ">3", "3+", "3 or more"). yes/no follows negation scope: "sure", "certainly", "right", "correct" say
yes only when nothing in the reply negates ("Sure not." -> no; "No doubt, yes." -> yes); a reply that says both
yes and no is unknown. An option letter is read only where it is used as
one: "A dog is on the left." is not option A, "A." or "Answer: (A)" is.

| reply                                              | number | yes/no |
|----------------------------------------------------|--------|--------|
| "two"                                              | 2      | None   |
| "No, 3."                                           | 3      | no     |
| "If 3 more birds landed, there would be 7 birds."  | 7      | None   |
| "0.250"                                            | 0.25   | None   |
| "Roughly 5 or 6."                                  | None   | None   |
| "Sure not."                                        | None   | no     |
| "No doubt, yes."                                   | None   | yes    |

Every reader returns None when the reply cannot be read: the evaluation counts such a reply as wrong and
reports the unknown rate next to the score.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, Optional, Sequence, Union

from word2number import w2n

ANSWER_TYPES = ("number", "yes/no", "other", "choice")
CHOICE = "choice"  # a multiple-choice question: the answer is an option letter (see `extract_choice`)
Number = Union[int, float]

ARTICLES = frozenset({"a", "an", "the"})
# Words word2number understands; a run of them is read as one number ("twenty one" -> 21).
NUMBER_WORDS = frozenset({
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "billion",
})
NUMBER_JOINERS = frozenset({"and"})
# "none" is "0" in the VQA script's own table of number words.
ZERO_WORDS = frozenset({"no", "none", "nothing", "nobody", "zero", "neither"})
# Words before "one" that make it a pronoun ("the one on the left"), not a count.
PRONOUN_ONE_BEFORE = frozenset({"the", "this", "that", "each", "which", "every", "any", "no", "another"})

# The VQA script's contraction table, for the forms a model writes without the apostrophe.
CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldnt": "couldn't", "couldve": "could've",
    "didnt": "didn't", "doesnt": "doesn't", "dont": "don't", "hadnt": "hadn't", "hasnt": "hasn't",
    "havent": "haven't", "hes": "he's", "im": "i'm", "isnt": "isn't", "ive": "i've", "mightnt": "mightn't",
    "mustnt": "mustn't", "neednt": "needn't", "shouldnt": "shouldn't", "shouldve": "should've",
    "thats": "that's", "theres": "there's", "theyre": "they're", "theyve": "they've", "wasnt": "wasn't",
    "werent": "weren't", "whats": "what's", "wont": "won't", "wouldnt": "wouldn't", "wouldve": "would've",
    "youre": "you're", "youve": "you've",
}

# yes/no. Strong words are the answer itself; "no" is strong only where it opens a clause ("No, 3."), elsewhere
# it is a determiner that negates ("There are no birds").
STRONG_YES = frozenset({"yes", "yeah", "yep", "yup", "affirmative", "aye"})
STRONG_NO = frozenset({"nope", "nah", "negative"})
# Agreement words answer yes only when nothing in the reply negates: "Sure not." is no.
WEAK_YES = frozenset({"sure", "certainly", "definitely", "absolutely", "surely", "indeed", "correct", "right",
                      "true", "exactly", "agreed"})
# A weak yes-word counts only in a short clause ("That's right.", "Certainly,"), not in "the bird on the right".
WEAK_YES_CLAUSE_TOKENS = 4
NEGATORS = frozenset({"no", "not", "never", "none", "nothing", "nobody", "neither", "nor", "cannot", "false",
                      "incorrect", "wrong", "untrue"})
# Phrases that affirm even though they hold a negating word.
AFFIRMING_PHRASES = re.compile(r"\b(?:no doubt|without (?:a |any )?doubt|no question|doubtless|of course)\b")

# Phrases that say the model does not know; a reply holding one is unreadable, not "no".
UNSURE_PATTERNS = (
    r"\bnot (?:sure|certain)\b", r"\bunsure\b", r"\buncertain\b", r"\bdo(?:n't| not) know\b", r"\bunknown\b",
    r"\bunclear\b", r"\b(?:can't|cannot|can not|couldn't|could not) (?:be )?(?:determine|determined|tell|say|answer"
    r"|know|see|be sure)", r"\b(?:impossible|not possible|hard|difficult) to (?:tell|say|determine|know)\b",
    r"\bnot clear\b", r"\bno way to (?:tell|know)\b",
)
# Hedges and guesses: the reply does not commit to one answer.
HEDGE_PATTERNS = (
    r"\bmaybe\b", r"\bperhaps\b", r"\bpossibly\b", r"\bprobably\b", r"\broughly\b", r"\bapproximately\b",
    r"\bapprox\b", r"\bguess(?:ing|ed)?\b", r"\bestimated?\b", r"\bpresumably\b", r"\bor so\b",
    r"\bgive or take\b", r"\bmore or less\b", r"\beither\b.*\bor\b",
    # "not necessarily" neither affirms nor denies; "it depends" names no answer
    r"\bnot necessarily\b", r"\bit depends\b", r"\bdepends on\b", r"\bnot always\b",
)
# A clause opening with one of these qualifies the answer before it: "Yes, but it would not" says both.
CONTRAST_WORDS = frozenset({"but", "although", "though", "however", "yet", "except", "unless"})
# Words of mere possibility: "No, but it could be" leaves the question open.
POSSIBILITY_WORDS = frozenset({"could", "might", "may", "possibly", "can"})
# Words that make the number after them an approximation or a bound, not an answer.
# Words after a number that make it a change, not a count: "there would be 3 more birds".
CHANGE_WORDS = frozenset({"more", "fewer", "less", "extra", "additional"})
# Phrases after a number that make it a bound or an approximation: "3 or more", "3 at most", "3-ish".
BOUND_AFTER = ("or more", "or fewer", "or less", "or above", "or below", "at least", "at most", "plus", "ish")
# How many words before a number or an answer word a negator still denies it ("it is not 3", "not exactly 3").
NEGATION_REACH = 2
APPROXIMATORS = ("about", "around", "nearly", "almost", "over", "under", "above", "below", "more than",
                 "less than", "fewer than", "at least", "at most", "up to", "close to", "some", "roughly")

# Answer markers, strongest first; within a level the last occurrence wins. Result phrases ("there would be")
# mark a number only: "Yes, there would be no birds" answers yes.
ANSWER_MARKERS = (
    re.compile(r"\b(?:(?:final|new|updated|correct|short|my)\s+)?answer(?:\s*:|\s+(?:is|would be|will be|should be)\b"
               r"\s*:?)", re.IGNORECASE),
)
RESULT_MARKERS = (
    re.compile(r"\bthere\s+(?:would|will|should)\s+(?:now\s+|still\s+)?(?:be|remain)\b", re.IGNORECASE),
)

# A sign that makes the number beside it approximate or a bound: "~3", "≈3", ">3", "≥3", "3+" (not "3 + 4").
_BOUND_SIGN = re.compile(r"[~\u2248<>\u2264\u2265]\s*\d|\d\s*\+(?!\s*\d)")
_IF_CLAUSE = re.compile(r"\bif\b(?:[^,;:!?\n.]|\.(?=\d))*", re.IGNORECASE)  # up to the clause's end
_RANGE_DASH = re.compile(r"(?<=\d)\s*[-\u2013\u2014]\s*(?=\d)")
_THOUSANDS = re.compile(r"\b([1-9]\d{0,2})((?:,\d{3})+)\b")
_PUNCT = re.compile(r"[^\w\s.'\x01]|_")
# A minus sign that starts a number ("-1", "−1", "(-2)"), not a dash between words or numbers ("5-6").
_MINUS = re.compile(r"(?<![\w.])[-\u2212](?=\d)")
_STRAY_DOT = re.compile(r"(?<!\d)\.|\.(?!\d)")          # a dot that is not a decimal point
_STRAY_QUOTE = re.compile(r"(?<!\w)'|'(?!\w)")          # a quote mark, not an apostrophe inside a word
_NUMBER_TOKEN = re.compile(r"^-?\d+(?:\.\d+)?$")
_MARKDOWN = re.compile(r"[*#`]+")
_UNSURE = re.compile("|".join(UNSURE_PATTERNS))
_HEDGE = re.compile("|".join(HEDGE_PATTERNS))
_CLAUSE_SPLIT = re.compile(r"(?:[,;:!?\n]|\.(?!\d))+")

# A reader's verdict on one segment: a value, UNKNOWN (the segment answers but cannot be credited: stop),
# or NOT_FOUND (the segment holds no answer of this type: look further).
UNKNOWN = object()
NOT_FOUND = object()


# -- normal form ---------------------------------------------------------------------------------------------

def _tokens(text: str) -> list[str]:
    """Lowercase tokens with punctuation gone, decimal points and apostrophes inside words kept."""
    text = str(text).lower().replace("’", "'").replace("‘", "'").strip()
    text = _THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), text)
    text = _MINUS.sub("\x01", text)  # kept through the punctuation pass: -1 is its own value, not 1
    text = _PUNCT.sub(" ", text)
    text = _STRAY_DOT.sub(" ", text)
    text = _STRAY_QUOTE.sub(" ", text)
    text = text.replace("\x01", "-")
    return [CONTRACTIONS.get(token, token) for token in text.split()]


def _number_runs(tokens: list[str]) -> list[tuple[int, int, Number]]:
    """(start, end, value) of every number in the tokens: digits, or a run of number words."""
    found: list[tuple[int, int, Number]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if _NUMBER_TOKEN.match(token):
            found.append((i, i + 1, _to_number(token)))
            i += 1
            continue
        if token in NUMBER_WORDS:
            j = i + 1
            while j < len(tokens) and (tokens[j] in NUMBER_WORDS
                                       or (tokens[j] in NUMBER_JOINERS and j + 1 < len(tokens)
                                           and tokens[j + 1] in NUMBER_WORDS)):
                j += 1
            try:
                found.append((i, j, w2n.word_to_num(" ".join(tokens[i:j]))))
            except ValueError:
                pass
            i = j
            continue
        i += 1
    return found


def _to_number(token: str) -> Number:
    value = float(token)
    return int(value) if value.is_integer() and "." not in token else value


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def normalize_answer(text: Optional[str]) -> str:
    """VQA-style normal form: lowercase, no punctuation or articles, number words as digits (see module doc)."""
    if text is None:
        return ""
    tokens = ["0" if token == "none" else token for token in _tokens(text)]
    runs = {start: (end, value) for start, end, value in _number_runs(tokens)}
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if i in runs:
            end, value = runs[i]
            out.append(format_number(value))
            i = end
            continue
        if tokens[i] not in ARTICLES:
            out.append(tokens[i])
        i += 1
    return " ".join(out)


def _plain(text: str) -> str:
    """The text as one lowercase line of tokens, for phrase patterns."""
    return " ".join(_tokens(text))


def is_unsure(text: Optional[str]) -> bool:
    """Whether the reply says it cannot tell ("I'm not sure", "cannot be determined")."""
    return bool(text) and bool(_UNSURE.search(_plain(text)))


def is_hedged(text: Optional[str]) -> bool:
    """Whether the reply hedges or guesses ("maybe", "roughly", "I guess") or says it cannot tell."""
    return bool(text) and (is_unsure(text) or bool(_HEDGE.search(_plain(text))))


# -- where the answer is ---------------------------------------------------------------------------------------

def _after_last_marker(text: str, markers: Sequence[re.Pattern] = ANSWER_MARKERS) -> list[str]:
    """The text after the last answer marker of each level that occurs, strongest level first."""
    segments = []
    for marker in markers:
        matches = list(marker.finditer(text))
        if matches:
            segments.append(text[matches[-1].end():])
    return segments


def _final_line(text: str) -> Optional[str]:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if len(lines) > 1 else None


def answer_segment(text: str) -> str:
    """The part of a reply that states its answer: after the last answer marker, else the final line of
    several, else the whole reply."""
    text = _MARKDOWN.sub("", str(text))
    segments = _after_last_marker(text)
    if segments:
        return segments[0]
    return _final_line(text) or text


# Where a segment comes from: after a marker, the final line of several, or the whole reply.
MARKED, FINAL_LINE, WHOLE = "marked", "final line", "whole"


def _read(text: Optional[str], read_segment: Callable[[str, str], object],
          markers: Sequence[re.Pattern] = ANSWER_MARKERS) -> object:
    """Apply READ_SEGMENT to the answer's segments in order: marker segments, then the final line, then the
    whole reply; the first verdict other than NOT_FOUND counts (UNKNOWN reads as None)."""
    if text is None or not str(text).strip():
        return None
    text = _MARKDOWN.sub("", str(text))
    candidates = [(segment, MARKED) for segment in _after_last_marker(text, markers)]
    final_line = _final_line(text)
    if final_line is not None:
        candidates.append((final_line, FINAL_LINE))
    candidates.append((text, WHOLE))
    for segment, where in candidates:
        verdict = read_segment(segment, where)
        if verdict is UNKNOWN:
            return None
        if verdict is not NOT_FOUND:
            return verdict
    return None


# -- numbers --------------------------------------------------------------------------------------------------

def _counting_runs(tokens: list[str]) -> list[tuple[int, int, Number]]:
    """Number runs minus the pronoun "one" ("the one on the left")."""
    return [(start, end, value) for start, end, value in _number_runs(tokens)
            if not (tokens[start] == "one" and end == start + 1 and start > 0
                    and tokens[start - 1] in PRONOUN_ONE_BEFORE)]


def _approximated(tokens: list[str], start: int) -> bool:
    before = " ".join(tokens[max(0, start - 2):start])
    return any(before == phrase or before.endswith(" " + phrase) for phrase in APPROXIMATORS)


def _qualified_after(tokens: list[str], end: int) -> bool:
    """Whether the words after a number (ending at END) make it a change or a bound: "3 more", "3 or more"."""
    after = " ".join(tokens[end:end + 2])
    return (end < len(tokens) and tokens[end] in CHANGE_WORDS) or any(
        after == phrase or after.startswith(phrase + " ") for phrase in BOUND_AFTER)


def _two_candidates(tokens: list[str], runs: list[tuple[int, int, Number]], index: int) -> bool:
    """Whether the number at RUNS[INDEX] is one end of "5 or 6", "5 to 6", "5-6" or "between 5 and 6"."""
    start, end, value = runs[index]
    if index + 1 < len(runs):
        next_start, _, next_value = runs[index + 1]
        between = tokens[end:next_start]
        if next_value != value and between in (["or"], ["to"], ["and"]):
            return between != ["and"] or (start > 0 and tokens[start - 1] == "between")
    return False


def _negates(token: str) -> bool:
    return token in NEGATORS or token.endswith("n't")


def _negated(tokens: list[str], start: int) -> bool:
    """Whether the words just before TOKENS[START] deny it: "not 2", "it is not 3", "isn't 4", "not exactly 5"."""
    return any(_negates(token) and token != "no" for token in tokens[max(0, start - NEGATION_REACH):start])


def denies(text: str, phrase: str) -> bool:
    """Whether TEXT denies PHRASE where it first names it ("not bloom", "it isn't the bee"); both in normal form."""
    tokens, words = text.split(), phrase.split()
    for start in range(len(tokens) - len(words) + 1):
        if tokens[start:start + len(words)] == words:
            return _negated(tokens, start)
    return False


def _read_number_segment(segment: str, where: str) -> object:
    if is_hedged(segment) or _BOUND_SIGN.search(segment):
        return UNKNOWN  # "~3", ">3", "3+": an approximation or a bound, not a count
    # "5-6" is a range of two candidates, not two numbers side by side; an if-clause states the premise, not the
    # answer: "If 3 more flew in." (the question echoed back) names no count.
    tokens = _tokens(_RANGE_DASH.sub(" to ", _IF_CLAUSE.sub(" ", segment)))
    runs = _counting_runs(tokens)
    if not runs:
        if any(token in STRONG_YES for token in tokens):
            return NOT_FOUND  # "Yes and no.": the "no" answers a yes/no question, it is no count
        return 0 if any(token in ZERO_WORDS for token in tokens) else NOT_FOUND
    if where != MARKED and len({value for _, _, value in runs}) > 1:
        return UNKNOWN  # several different numbers and no marker says which is the answer
    start, end, _ = runs[0]
    if (_approximated(tokens, start) or _two_candidates(tokens, runs, 0) or _negated(tokens, start)
            or _qualified_after(tokens, end)):
        return UNKNOWN  # "about 5", "5 or 6", "not 5", "3 more", "3 or more": no count is stated
    return runs[0][2]


def parse_number(text: Optional[str]) -> Optional[Number]:
    """The number a reply answers with (see the module doc for which one); "none"/"no birds" -> 0; else None."""
    return _read(text, _read_number_segment, ANSWER_MARKERS + RESULT_MARKERS)  # type: ignore[return-value]


def parse_count(text: Optional[str]) -> Optional[int]:
    """A count (a whole number >= 0) from a reply ("two" -> 2, "There are 3 birds" -> 3), else None."""
    value = parse_number(text)
    if value is None or value < 0 or (isinstance(value, float) and not value.is_integer()):
        return None
    return int(value)


# -- yes / no -------------------------------------------------------------------------------------------------

def _clauses(segment: str) -> list[list[str]]:
    return [tokens for tokens in (_tokens(part) for part in _CLAUSE_SPLIT.split(segment.lower())) if tokens]


def _read_yes_no_segment(segment: str, where: str) -> object:
    if is_hedged(segment):
        return UNKNOWN
    segment = AFFIRMING_PHRASES.sub(" certainly ", segment.lower().replace("\u2019", "'"))
    clauses = _clauses(segment)
    said = set()
    for clause in clauses:
        if _denies_answer_word(clause):
            return UNKNOWN  # "Not yes.", "I would not say yes", "not no": no answer is stated
        if clause[0] == "no" or clause[-1] == "no":  # elsewhere "no" is a determiner: "there are no birds"
            said.add("no")
        said.update("yes" for token in clause if token in STRONG_YES)
        said.update("no" for token in clause if token in STRONG_NO)
    if len(said) > 1:
        return UNKNOWN  # "Yes and no."
    if said and qualified(said.copy().pop(), clauses):
        return UNKNOWN  # "Yes, but it would not.", "No, but it could be."
    if said:
        return said.pop()
    if where == FINAL_LINE:
        return NOT_FOUND  # a last line without yes or no is explanation; read the whole reply
    if any(token in NEGATORS or token.endswith("n't") for clause in clauses for token in clause):
        return "no"
    if any(token in WEAK_YES and len(clause) <= WEAK_YES_CLAUSE_TOKENS for clause in clauses for token in clause):
        return "yes"
    return NOT_FOUND


def _denies_answer_word(clause: list[str]) -> bool:
    """Whether a yes or no word in CLAUSE comes after a negator of the same clause ("not yes", "I can't say no")."""
    for index, token in enumerate(clause):
        answer_word = token in STRONG_YES or token in STRONG_NO or (token == "no" and index == len(clause) - 1)
        if answer_word and index > 0 and any(_negates(before) for before in clause[:index]):
            return True
    return False


def qualified(answer: str, clauses: list[list[str]]) -> bool:
    """Whether a contrast clause takes ANSWER back: after yes, one that negates; after either, one that says it
    could be otherwise."""
    for clause in clauses:
        if clause[0] not in CONTRAST_WORDS:
            continue
        negates = any(token in NEGATORS or token.endswith("n't") for token in clause)
        if (answer == "yes" and negates) or any(token in POSSIBILITY_WORDS for token in clause):
            return True
    return False


def parse_yes_no(text: Optional[str]) -> Optional[str]:
    """'yes' or 'no' from a reply ("yes." -> yes, "I think not" -> no, "Sure not." -> no), else None."""
    return _read(text, _read_yes_no_segment)  # type: ignore[return-value]


# -- option letters -------------------------------------------------------------------------------------------

# Words that show a letter is used as an option's name: "option B", "image C", "(A)".
_OPTION_CUE = re.compile(r"(?:option|choice|image|picture|letter|answer is|answer)\s*[:\-]?\s*\(?$", re.IGNORECASE)
# Words after which "A" is still the option ("A is the effect", "A or B"), not the article.
_AFTER_OPTION_A = frozenset({"is", "was", "would", "shows", "matches", "fits", "seems", "depicts", "or", "and"})


# A letter right after "not" ("not A", "The answer is not B", "isn't C") is denied, not picked.
_DENIED_LETTER = re.compile(r"(?:\bnot|\bnever|n't|\bnor)\s*(?:option|choice|image|picture)?\s*\(?\s*$", re.IGNORECASE)
NEGATED_LETTER = "not"  # a mention that denies a letter: the reply then picks none


def _letter_mentions(segment: str, letters: Sequence[str]) -> list[str]:
    mentions = []
    pattern = re.compile(r"(?<![A-Za-z'])(" + "|".join(re.escape(letter) for letter in letters) + r")(?![A-Za-z'])")
    for match in pattern.finditer(segment):
        before, after = segment[:match.start()], segment[match.end():]
        cued = bool(_OPTION_CUE.search(before.rstrip()))
        next_word = re.match(r"\s+([A-Za-z]+)", after)
        if match.group(1) == "A" and next_word and not cued and next_word.group(1).lower() not in _AFTER_OPTION_A:
            continue  # the article: "A dog is on the left."
        mentions.append(NEGATED_LETTER if _DENIED_LETTER.search(before) else match.group(1))
    return mentions


def extract_option_letter(text: Optional[str], letters: Sequence[str]) -> Optional[str]:
    """The option letter a reply picks ("B", "(C)", "Answer: D", "I choose A."); None for "A dog ..." or a
    reply naming several letters without a marker."""
    def read(segment: str, where: str) -> object:
        if is_hedged(segment):
            return UNKNOWN
        mentions = _letter_mentions(segment, letters)
        if not mentions:
            return NOT_FOUND
        picked = [letter for letter in mentions if letter != NEGATED_LETTER]
        if not picked:
            return UNKNOWN  # "not A": what it picks instead is not said
        mentions = picked  # "A, not B" picks A
        if where != MARKED and len(set(mentions)) > 1:
            return UNKNOWN
        return mentions[0]

    return _read(text, read)  # type: ignore[return-value]


# -- multiple choice (C-VQA-Synthetic: "Select the correct answer:A:8  B:6  C:10  D:7") ----------------------

# A letter as a whole answer: "A", "(A)", "A.", "A)", "A:", optionally followed by that option's own text ("B: 6").
_CHOICE = re.compile(r"\(?\s*([A-Za-z])\s*([).:]?)(?:\s+(.*)|)", re.DOTALL)
_CHOICE_TRIM = "\"'\u201c\u201d\u2018\u2019 \t\n.!"


def _read_choice_segment(segment: str, options: Mapping[str, str]) -> Optional[str]:
    """The letter SEGMENT answers with when it is nothing but a letter, a letter and its option's text, or an
    option's text; else None."""
    text = segment.strip(_CHOICE_TRIM)
    letter = _CHOICE.fullmatch(text)
    if letter and letter.group(1).upper() in options:
        chosen, rest = letter.group(1).upper(), (letter.group(3) or "").strip(_CHOICE_TRIM)
        if not rest or normalize_answer(rest) == normalize_answer(options[chosen]):
            return chosen
        if letter.group(2) or chosen != "A":
            return None  # "A: 6" where A is 8: a letter and another option's text contradict each other
        # "A dog": the article, not option A; the text may still name an option
    named = [key for key, value in options.items() if normalize_answer(value) and
             normalize_answer(value) == normalize_answer(text)]
    return named[0] if len(named) == 1 else None


def extract_choice(text: Optional[str], options: Mapping[str, str]) -> Optional[str]:
    """The option letter a reply to a multiple-choice question picks. Read: "A", "(A)", "A.", "Answer: A",
    "The answer is A", the option's text ("8" for A:8), or the letter with its own text ("A: 8"); nothing else
    ("A dog", "I think A or B", a hedge) is unknown. OPTIONS maps each letter to its text."""
    options = {str(key).upper(): str(value) for key, value in options.items()}
    if not options or text is None or not str(text).strip():
        return None
    text = _MARKDOWN.sub("", str(text))
    marked = _after_last_marker(text)
    final_line = _final_line(text)
    segments = marked[:1] or ([final_line] if final_line is not None else []) + [text]
    for segment in segments:
        if is_hedged(segment):
            return None
        chosen = _read_choice_segment(segment, options)
        if chosen is not None or marked:
            return chosen  # after an answer marker the answer is there or nowhere
    return None


def choice_options(gold: Optional[str], options: Optional[Mapping[str, str]]) -> Optional[dict[str, str]]:
    """OPTIONS when GOLD is one of their letters (the question is multiple choice), else None."""
    if not options or gold is None:
        return None
    options = {str(key).upper(): str(value) for key, value in options.items()}
    return options if str(gold).strip().upper() in options else None


# -- by answer type -------------------------------------------------------------------------------------------

def _read_other_segment(segment: str, where: str) -> object:
    if is_hedged(segment):
        return UNKNOWN
    normal = normalize_answer(segment)
    if not normal and where == MARKED:
        return UNKNOWN  # "Answer: A" names nothing this reader can credit; the marker word is not the answer
    return normal or NOT_FOUND


def extract_answer(text: Optional[str], answer_type: Optional[str],
                   options: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The reply read for its answer type, as a string: "3", "yes", an option letter ("choice", with OPTIONS), or
    the normal form; None when unreadable."""
    if answer_type == CHOICE:
        return extract_choice(text, options or {})
    if answer_type == "number":
        value = parse_number(text)
        return None if value is None else format_number(value)
    if answer_type == "yes/no":
        return parse_yes_no(text)
    return _read(text, _read_other_segment)  # type: ignore[return-value]


def infer_answer_type(answer: Optional[str], options: Optional[Mapping[str, str]] = None) -> str:
    """The answer type of a gold answer: choice (a letter of the question's OPTIONS), else VQA's yes/no, number or
    other."""
    if choice_options(answer, options):
        return CHOICE
    normal = normalize_answer(answer)
    if normal in ("yes", "no"):
        return "yes/no"
    if _NUMBER_TOKEN.match(normal):
        return "number"
    return "other"


def answers_match(predicted: Optional[str], gold: Optional[str], answer_type: Optional[str],
                  options: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a reply reads as the gold answer; an unreadable reply is wrong. A multiple-choice question (OPTIONS
    given and the gold one of their letters) reads a letter or an option's text."""
    answer_type = answer_type or infer_answer_type(gold, options)
    if choice_options(gold, options) and answer_type in (CHOICE, "other"):
        return extract_choice(predicted, options or {}) == str(gold).strip().upper()
    parsed = extract_answer(predicted, answer_type)
    if parsed is None:
        return False
    expected = extract_answer(gold, answer_type)
    if expected is None:
        expected = normalize_answer(gold)
    return parsed == expected
