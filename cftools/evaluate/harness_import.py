"""`cftools eval import RELEASE FILE...`: a harness's predictions on a cftools release, scored by cftools.

The files are what the evaluation harnesses write for the release's exports (`cftools export --format lmms-eval`,
`--format vlmevalkit`):

- lmms-eval's `--log_samples` files (`*_samples_<task>.jsonl`): one JSON line per doc; the doc carries the
  question's `item_id` and `which`; `filtered_resps` holds the generated reply (`generate_until`), or one
  (loss, is_greedy) pair per option (`multiple_choice`: the option of lowest loss is the model's choice, as
  lmms-eval takes it).
- VLMEvalKit's prediction files (`<MODEL>_<DATASET>.xlsx`, or `.tsv` / `.csv` / `.json` under its PRED_FORMAT): the
  dataset's rows with a `prediction` column; the rows carry `item_id` and `l2-category` (which question). A
  multiple-choice row's prediction is read for an option letter or an option's text (`cftools.answers`
  `extract_choice`); every other reply is read as `cftools eval` reads it. Under `--reading vlmevalkit` the
  multiple-choice and yes/no rows are read as VLMEvalKit's own scorers read them
  (`cftools.evaluate.harness_readings`), so each file's accuracy is VLMEvalKit's.

Every reply is matched to its question of RELEASE (the same questions the exports hold) and scored with the
kind's own metrics, into an ordinary run folder (config.json, predictions.jsonl, report.md/.csv/.png), so the
papers' tables and the both-right scores (CFMM acc+) are there for a harness run too, and so are the edited-image
and counterfactual-consistency tables of a release with edits (its `edited` and `irrelevant` questions:
`cftools.evaluate.consistency`). A reply that names no
question of the release, a question answered twice, or a VLMEvalKit `index` that is not a whole number >= 0 is an
error naming the file and the row; a file that cannot be read (a workbook that is not one) is one line naming it.
An lmms-eval sample whose `filtered_resps` is empty holds no reply: its question is left unanswered.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from cftools.errors import CftoolsError, InputError
from cftools.evaluate.harness_readings import LMMS_EVAL, VLMEVALKIT, read_as_vlmevalkit
from cftools.evaluate.predictions import STRICT, EvalResult, prediction_line
from cftools.evaluate.questions import Question

TABLE_SUFFIXES = (".xlsx", ".tsv", ".csv", ".json")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


# -- the release's questions ----------------------------------------------------------------------------------

def release_questions(release_dir: Path) -> dict[tuple[str, str], Question]:
    """Every question of the release as the harness exports ask it (each kind as its paper asks), by key."""
    from cftools.evaluate.questions import PromptTemplates, build_questions
    from cftools.kinds import get_kind
    from cftools.release.layout import load_records
    from cftools.release.lmms_eval import paper_mode

    records = load_records(release_dir)
    out: dict[tuple[str, str], Question] = {}
    for kind_name in sorted({str(r.get("kind")) for r in records}):
        chosen = [r for r in records if str(r.get("kind")) == kind_name]
        questions, _ = build_questions(release_dir, chosen, PromptTemplates(), paper_mode(get_kind(kind_name)), True)
        out.update({q.key: q for q in questions if not q.judged})
    return out


# -- reading the harnesses' files -----------------------------------------------------------------------------

def harness_of(path: Path) -> str:
    if path.suffix == ".jsonl":
        return LMMS_EVAL
    if path.suffix.lower() in TABLE_SUFFIXES:
        return VLMEVALKIT
    raise InputError(path, "not a harness prediction file (lmms-eval *_samples_*.jsonl; VLMEvalKit .xlsx, .tsv, "
                           ".csv or .json)")


def lmms_eval_rows(path: Path, release_dir: Path) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(where, doc, filtered_resps) of each sample line. lmms-eval logs the doc itself, or (0.7.3) only its
    doc_id: then the doc is the one the prediction line under a metric's name names (the exported task's
    process_results puts it there), else line doc_id of the task's docs file (the task named by the file name)."""
    docs: Optional[list[dict[str, Any]]] = None
    with open(path, encoding="utf-8") as fh:
        for number, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                sample = json.loads(text)
                replies = sample["filtered_resps"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise InputError(path, "not an lmms-eval sample line (no filtered_resps)", f"line {number}") from None
            doc = sample.get("doc") if isinstance(sample.get("doc"), dict) else logged_line(sample)
            if doc is None:
                docs = docs if docs is not None else task_docs(path, release_dir)
                try:
                    doc = docs[int(sample["doc_id"])]
                except (KeyError, IndexError, TypeError, ValueError):
                    raise InputError(path, "its doc_id names no doc of the task", f"line {number}") from None
            yield f"line {number}", doc, replies


def logged_line(sample: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The question a sample's metrics name: {item_id, which} of the first prediction line among them."""
    for value in sample.values():
        if isinstance(value, dict) and "id" in value and "which" in value:
            return {"item_id": value["id"], "which": value["which"]}
    return None


def task_docs(path: Path, release_dir: Path) -> list[dict[str, Any]]:
    """The docs of the task a samples file (`..._samples_TASK.jsonl`) is of, in the release's task folder."""
    task = path.stem.rsplit("_samples_", 1)[-1]
    config = release_dir / task / f"{task}.yaml"
    if "_samples_" not in path.stem or not config.is_file():
        raise InputError(path, f"its samples name no doc and no task folder {task!r} of the release holds them")
    split = next((line.split(":", 1)[1].strip() for line in config.read_text(encoding="utf-8").splitlines()
                  if line.startswith("test_split:")), "test")
    docs_file = release_dir / task / f"{split}.jsonl"
    return [json.loads(line) for line in docs_file.read_text(encoding="utf-8").splitlines() if line.strip()]


def vlmevalkit_table(path: Path) -> list[dict[str, Any]]:
    """The rows of a VLMEvalKit prediction file as VLMEvalKit writes it (xlsx, tsv, csv or a JSON list of rows),
    every cell as text."""
    try:
        rows = read_table(path)
    except (OSError, ValueError, KeyError, TypeError, csv.Error, zipfile.BadZipFile) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(path, f"cannot read the prediction file ({reason})") from None
    columns = set(rows[0]) if rows else set()
    missing = [c for c in ("item_id", "l2-category", "prediction") if c not in columns]
    if missing:
        raise InputError(path, f"no {', '.join(missing)} column: not a prediction file of a cftools VLMEvalKit "
                               "export")
    return rows


def read_table(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        from openpyxl import load_workbook
        from openpyxl.utils.exceptions import InvalidFileException

        try:
            book = load_workbook(path, read_only=True, data_only=True)
        except (zipfile.BadZipFile, InvalidFileException, KeyError) as exc:  # random bytes, 0 bytes, no workbook
            raise ValueError(f"not an xlsx workbook: {str(exc) or type(exc).__name__}") from None
        try:
            sheet = book.worksheets[0].iter_rows(values_only=True)
            cells = [["" if v is None else str(v) for v in row] for row in sheet]
        finally:
            book.close()
        return [dict(zip(cells[0], row)) for row in cells[1:]] if cells else []
    if suffix == ".json":  # pandas' to_json as VLMEvalKit dumps it: a list of rows, or columns of index -> value
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            keys = list(next(iter(data.values()), {}))
            data = [{column: values.get(key) for column, values in data.items()} for key in keys]
        return [{k: "" if v is None else str(v) for k, v in row.items()} for row in data]
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ","))


def chosen_option(question: Question, row: dict[str, Any]) -> tuple[Optional[str], Optional[int]]:
    """The option a multiple-choice row's prediction picks (its letter or its text), and its position."""
    from cftools.answers import extract_choice

    letters = {LETTERS[n]: option for n, option in enumerate(question.options or [])}
    letter = extract_choice(str(row.get("prediction") or ""), letters)
    if letter is None:
        return None, None
    return letters[letter], LETTERS.index(letter)


def vlmevalkit_line(question: Question, row: dict[str, Any], reading: str) -> dict[str, Any]:
    from cftools.evaluate.run import generated_line

    raw = str(row.get("prediction") if row.get("prediction") is not None else "")
    if str(row.get("A") or "").strip() and question.options:  # a multiple-choice row: the options were its columns
        option, position = chosen_option(question, row)
        correct = option is not None and option == question.gold_option
        extra: dict[str, Any] = {"position": position}
        if reading == VLMEVALKIT:  # as VLMEvalKit's own MCQ scorer reads the row; cftools' reading kept beside it
            harness_option, harness_correct = read_as_vlmevalkit(question, raw) or (None, False)
            if (harness_option, harness_correct) != (option, correct):
                extra.update(strict_parsed=option, strict_correct=correct)
            option, correct = harness_option, harness_correct
            extra["position"] = question.options.index(option) if option in question.options else None
        return prediction_line(question, raw, option, correct, extra=extra)
    return generated_line(question, raw, reading)


def lmms_eval_line(question: Question, replies: Any, reading: str) -> dict[str, Any]:
    from cftools.evaluate.run import generated_line, rank_line

    if isinstance(replies, list) and replies and isinstance(replies[0], (list, tuple)):  # multiple_choice
        if len(replies) != len(question.options or []):
            raise CftoolsError(f"{len(replies)} option scores for {len(question.options or [])} options")
        losses = [float(r[0]) if r and r[0] is not None else math.inf for r in replies]
        return rank_line(question, [{"mean_loss": loss} for loss in losses], "mean-loss")
    reply = replies[0] if isinstance(replies, list) and replies else replies
    return generated_line(question, str(reply if reply is not None else "").strip(), reading)


def read_file_lines(path: Path, questions: dict[tuple[str, str], Question], reading: str,
                    release_dir: Path) -> list[dict[str, Any]]:
    harness = harness_of(path)
    rows: Sequence[tuple[str, dict[str, Any], Any]]
    if harness == LMMS_EVAL:
        rows = list(lmms_eval_rows(path, release_dir))
    else:
        rows = [(f"row {n}", row, row) for n, row in enumerate(vlmevalkit_table(path), start=2)]
    lines = []
    for where, doc, replies in rows:
        if harness == LMMS_EVAL and isinstance(replies, list) and not replies:
            continue  # the harness logged no reply: the question is unanswered, not answered "[]"
        if harness == VLMEVALKIT:
            check_index(path, doc, where)
        key = (str(doc.get("item_id")), str(doc.get("which") or doc.get("l2-category")))
        question = questions.get(key)
        if question is None:
            raise InputError(path, f"item {key[0]} question {key[1]} is not a question of this release", where)
        try:
            line = (lmms_eval_line(question, replies, reading) if harness == LMMS_EVAL
                    else vlmevalkit_line(question, replies, reading))
        except CftoolsError as exc:
            raise InputError(path, str(exc), where) from None
        lines.append({**line, "harness": harness})
    return lines


def check_index(path: Path, row: dict[str, Any], where: str) -> None:
    """A VLMEvalKit row's `index` (when the file has the column) is the whole number >= 0 the export wrote."""
    if "index" not in row:
        return
    value = str(row["index"]).strip()
    if not value.isascii() or not value.isdigit():
        raise InputError(path, f"index {value[:40]!r} is not a whole number >= 0 (VLMEvalKit's row index)", where)


# -- the run ----------------------------------------------------------------------------------------------------

def import_predictions(release_dir: Path | str, files: Sequence[Path | str], out_dir: Path | str,
                       model: str = "imported", reading: str = STRICT, workspace: Any = None,
                       verify: bool = True) -> EvalResult:
    """Score the harness prediction FILES of RELEASE_DIR into the run folder OUT_DIR (see the module doc). The
    release is verified first, as `cftools eval` does (unless not VERIFY: the report then says so)."""
    from cftools import __version__
    from cftools.evaluate.predictions import READINGS, append_predictions
    from cftools.evaluate.run import PREDICTIONS_NAME, finish_run, release_content, write_config
    from cftools.release.layout import MANIFEST_NAME, hash_file, load_records

    release_dir, out_dir = Path(release_dir), Path(out_dir)
    if reading not in READINGS:
        raise CftoolsError(f"unknown reading {reading!r}; choose one of {', '.join(READINGS)}")
    if not files:
        raise CftoolsError("no prediction file given")
    content = release_content(release_dir, verify, workspace)  # refused before any file is read
    questions = release_questions(release_dir)
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    sources = []
    for path in map(Path, files):
        for line in read_file_lines(path, questions, reading, release_dir):
            key = (line["id"], line["which"])
            if key in by_key:
                raise InputError(path, f"item {key[0]} question {key[1]} is answered twice (here and in an "
                                       "earlier file or row)")
            by_key[key] = line
        sources.append({"path": str(path.resolve()), "sha256": hash_file(path), "harness": harness_of(path)})
    predictions = [by_key[key] for key in sorted(by_key)]
    ranked = sum(1 for p in predictions if p.get("scores"))
    mode = "rank" if ranked == len(predictions) else "generate" if not ranked else "mixed"
    config = {
        "release": str(release_dir.resolve()), "release_name": release_dir.resolve().name,
        "release_manifest_sha256": hash_file(release_dir / MANIFEST_NAME),
        "release_content_sha256": content, "verified": verify,
        "model": model, "mode": mode, "score": "mean-loss" if ranked else None,
        "score_rule": "lowest loss of the option wins (as the harness ranks)" if ranked else None,
        "template": "as exported", "template_sha256": None, "max_new_tokens": None, "device": "n/a", "dtype": "n/a",
        "batch_size": None, "limit": None, "judge": None, "judge_aggregate": None, "kind_options": None,
        "items": len(load_records(release_dir)), "questions": len(questions),
        "skipped": {"no_image": 0, "no_options": 0, "not_answered": len(questions) - len(predictions)},
        "prompt": None, "swap_options": None, "reading": reading if reading != STRICT else None,
        "imported_from": sources, "cftools_version": __version__,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / PREDICTIONS_NAME).exists():
        (out_dir / PREDICTIONS_NAME).unlink()  # an import is made whole again: the files are the predictions
    write_config(out_dir, config)
    append_predictions(out_dir / PREDICTIONS_NAME, predictions)
    return finish_run(out_dir, config, predictions, asked=0, workspace=workspace)
