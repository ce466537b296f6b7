"""An eval run's predictions: reading a reply into an answer, the prediction log (the run's cache: appended and
fsync'ed per batch, a truncated last line dropped on restart), per-item outcomes, and the store's Prediction rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence


from cftools.answers import (CHOICE, denies, extract_answer, extract_choice, extract_option_letter, is_hedged,
                             normalize_answer)
from cftools.errors import InputError, naming_the_file
from cftools.evaluate.harness_readings import HARNESS_READINGS, read_as_harness
from cftools.evaluate.questions import LETTER, Question

# -- reading answers ------------------------------------------------------------------------------------------

@dataclass
class EvalResult:
    out_dir: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    predictions: list[dict[str, Any]]
    asked: int                # questions asked in this invocation (0 when everything was cached)
    notes: list[str] = field(default_factory=list)  # why an earlier run folder was not reused


# How replies are read: cftools' own careful reading, as each paper's own scripts read them (where the kind has
# such a reading: C-VQA's format_response.py + calc_acc.py), or as a harness's own scorers read them
# (`cftools.evaluate.harness_readings`); `cftools eval --reading`.
STRICT, PAPER = "strict", "paper"
READINGS = (STRICT, PAPER, *HARNESS_READINGS)


def read_reply(question: Question, raw: str, reading: str = STRICT) -> tuple[Optional[str], bool, dict[str, Any]]:
    """(parsed answer, correct, what the line adds) for a generated reply under READING. Read another way than
    cftools' own, a line also keeps cftools' strict reading where it differs (`strict_parsed`, `strict_correct`)."""
    parsed, correct = read_generated(question, raw)
    other = other_reading(question, raw, reading)
    if other is None:
        return parsed, correct, {}
    extra = {"strict_parsed": parsed, "strict_correct": correct} if other != (parsed, correct) else {}
    return other[0], other[1], extra


def other_reading(question: Question, raw: Optional[str], reading: str) -> Optional[tuple[Optional[str], bool]]:
    """(parsed, correct) under READING where it is not cftools' strict one and reads QUESTION; else None."""
    if reading == PAPER:
        from cftools.kinds import get_kind

        return get_kind(question.kind).hooks.evaluate.read_as_paper(question, raw)
    if reading in HARNESS_READINGS:
        return read_as_harness(question, raw, reading)
    return None


def strict_lines(predictions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The predictions as cftools' strict reading has them: a line read otherwise takes its strict reading back."""
    return [{**p, "parsed": p["strict_parsed"], "correct": p["strict_correct"],
             "unknown": p["strict_parsed"] is None} if "strict_correct" in p else p for p in predictions]


def reading_differences(predictions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The questions a run read the paper's or a harness's way reads otherwise than cftools' strict reading would:
    id, which, raw, gold, and both readings (`paper`: the run's reading)."""
    return sorted(({"id": p["id"], "which": p["which"], "raw": p.get("raw"), "gold": p.get("gold"),
                    "paper": p.get("parsed"), "paper_correct": p.get("correct"), "strict": p.get("strict_parsed"),
                    "strict_correct": p.get("strict_correct")}
                   for p in predictions if "strict_correct" in p), key=lambda d: (str(d["id"]), str(d["which"])))


def read_generated(question: Question, raw: str) -> tuple[Optional[str], bool]:
    """(parsed answer, correct) for a generated reply, read as cftools reads it (`cftools.answers`)."""
    if question.answer_type == LETTER:
        parsed = extract_option_letter(raw, question.options or [])
        return parsed, parsed == question.gold
    if question.answer_type == CHOICE:
        parsed = extract_choice(raw, question.choices or {})
        return parsed, parsed is not None and parsed == question.gold.strip().upper()
    if question.options:
        parsed = read_option(raw, question.options)
        return parsed, parsed is not None and parsed == (question.gold_option or question.gold)
    parsed = extract_answer(raw, question.answer_type)
    if parsed is None:
        return None, False
    expected = extract_answer(question.gold, question.answer_type) or normalize_answer(question.gold)
    return parsed, parsed == expected


def read_option(raw: Optional[str], options: Sequence[str]) -> Optional[str]:
    """The option a free reply names: the one it equals, else the only one it contains (whole words), unless the
    reply hedges ("maybe bloom") or denies it ("not the bee"): then none."""
    normal = normalize_answer(raw)
    if not normal:
        return None
    for option in options:
        if normalize_answer(option) == normal:
            return option
    if is_hedged(raw):
        return None
    named = [o for o in options if normalize_answer(o) and f" {normalize_answer(o)} " in f" {normal} "]
    if len(named) != 1 or denies(normal, normalize_answer(named[0])):
        return None
    return named[0]


def prediction_line(question: Question, raw: Optional[str], parsed: Optional[str], correct: Optional[bool],
                    scores: Optional[list[dict[str, Any]]] = None, extra: Optional[dict[str, Any]] = None) -> dict:
    line = {"id": question.item_id, "which": question.which, "kind": question.kind, "group": question.group,
            "gold": question.gold if not question.judged else None, "raw": raw, "parsed": parsed,
            "unknown": parsed is None and not question.judged, "correct": correct, "scores": scores}
    if question.facets:
        line["facets"] = dict(question.facets)
    line.update(extra or {})
    return line


# -- the prediction log -----------------------------------------------------------------------------------------

def read_predictions(path: Path, truncate: bool = True) -> dict[tuple[str, str], dict[str, Any]]:
    """The predictions already made. Lines are written whole with their newline, so only a last line without
    one can be cut short (a killed run): it is cut off the file and its question is asked again. With
    TRUNCATE false the file is left as it is (another process may be writing that line now)."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    complete_end = data.rfind(b"\n") + 1
    if complete_end < len(data) and truncate:
        with open(path, "r+b") as fh:
            fh.truncate(complete_end)
    done: dict[tuple[str, str], dict[str, Any]] = {}
    for number, raw in enumerate(data[:complete_end].split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            done[(str(line["id"]), str(line["which"]))] = line
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
            raise InputError(path, "malformed prediction line (delete the run folder to start over)",
                             f"line {number}") from None
    return done


def append_predictions(path: Path, lines: Sequence[dict[str, Any]]) -> None:
    if not lines:
        return
    # a full disk may cut the last line: the next run's read_predictions drops it and asks its question again
    with naming_the_file(path), open(path, "a", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def outcomes_from_predictions(predictions: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_item: dict[str, dict[str, Any]] = {}
    for line in predictions:
        outcome = by_item.setdefault(line["id"], {"id": line["id"], "kind": line.get("kind"),
                                                  "group": line.get("group")})
        if line.get("facets"):
            outcome["facets"] = line["facets"]
        if "similarities" in line:  # a judged free-text answer
            outcome[line["which"]] = {k: line.get(k) for k in ("similarities", "parts", "exp_score", "aggregate")}
        else:
            # the answer as read: the consistency score compares the replies about an item's images
            outcome[line["which"]] = {"correct": bool(line.get("correct")), "unknown": bool(line.get("unknown")),
                                      "answer": line.get("parsed")}
    return list(by_item.values())


def record_eval_run(store: Any, result: EvalResult) -> None:
    """Keep one EvalRun row per run folder in the workspace store (updated on each rerun), with its predictions
    in the Prediction table (replaced whole, so a rerun leaves exactly the run's predictions)."""
    from sqlalchemy import delete, select

    from cftools.models import EvalRun, Prediction

    out = str(result.out_dir.resolve())
    with store.write() as session:
        row = session.execute(select(EvalRun).where(EvalRun.out_dir == out)).scalar_one_or_none()
        if row is None:
            row = EvalRun(release=result.config["release"], model_spec=result.config["model"],
                          mode=result.config["mode"], out_dir=out)
        row.config = result.config
        row.summary = json.loads(json.dumps(result.summary, default=str))
        session.add(row)
        session.flush()
        session.execute(delete(Prediction).where(Prediction.run_id == row.id))
        session.add_all([prediction_row(row.id, line) for line in result.predictions])


def prediction_row(run_id: int, line: dict[str, Any]) -> Any:
    """A prediction line as a row of the store's Prediction table; the judge's similarities of an explanation
    ride in `scores` beside the option scores."""
    from cftools.models import Prediction

    scores: dict[str, Any] = {}
    if line.get("scores") is not None:
        scores["options"] = line["scores"]
    for key in ("similarities", "parts", "exp_score", "gold", "unknown", "kind", "group", "facets"):
        if line.get(key) is not None:
            scores[key] = line[key]
    return Prediction(run_id=run_id, item_key=str(line["id"]), which=str(line["which"]), raw=line.get("raw"),
                      parsed=line.get("parsed"), scores=scores or None, correct=line.get("correct"))


