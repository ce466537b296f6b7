"""`cftools export NAME --version V --format vlmevalkit`: the release as VLMEvalKit custom datasets.

VLMEvalKit loads a benchmark from one TSV in `$LMUData` (`LMUData/<DATASET>.tsv`): `index`, `image` (the image's
bytes in base64; a JSON list of them for a question with several images), `question`, `answer`, `category`, and
for multiple-choice questions the options as columns `A`, `B`, ... (a file with an `A` column loads as a custom
MCQ dataset, one without as a custom VQA dataset). So each kind gives up to two files:

    CF_<NAME>_<KIND>_MCQ.tsv   the questions with options (CFMM, MuCR Cue): `answer` is the right option's letter
    CF_<NAME>_<KIND>_VQA.tsv   the questions without (C-VQA; MuCR C2E/E2C, answered with an image's letter)

Names start with `CF_`, so none collides with VLMEvalKit's own datasets (its `CVQA` is the unrelated cultural
VQA). Besides VLMEvalKit's columns each row has `l2-category` (which question of the item: original,
counterfactual, c2e, ...), `split`, `item_id` and `answer_type`, so scores can be joined back to the release.
Free-text questions scored by a judge (MuCR Exp) are left out.
"""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path
from typing import Any, Sequence

from cftools.errors import CftoolsError

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
BASE_COLUMNS = ("index", "image", "question", "answer", "category", "l2-category", "split", "item_id", "answer_type")
PAIR_TEXT = {"original": "original_question", "counterfactual": "question"}


def dataset_name(name: str, kind: str, shape: str) -> str:
    return "CF_" + re.sub(r"[^A-Za-z0-9_]+", "_", f"{name}_{kind}_{shape}").strip("_")


def image_cell(paths: Sequence[Path]) -> str:
    encoded = [base64.b64encode(Path(p).read_bytes()).decode("ascii") for p in paths]
    return encoded[0] if len(encoded) == 1 else json.dumps(encoded)


def question_text(question: Any, record: dict[str, Any], is_mcq: bool) -> str:
    """The question as VLMEvalKit should show it: for a multiple-choice pair question the bare question (VLMEvalKit
    lists the options itself); otherwise the prompt `cftools eval` renders."""
    which = question.which.split(":", 1)[0]
    if is_mcq and which in PAIR_TEXT and record.get(PAIR_TEXT[which]):
        return str(record[PAIR_TEXT[which]])
    return question.prompt.text


def is_multiple_choice(question: Any) -> bool:
    from cftools.evaluate.questions import LETTER

    return bool(question.options) and question.answer_type != LETTER and question.gold_option in question.options


def tsv_row(index: int, question: Any, record: dict[str, Any], n_letters: int) -> dict[str, Any]:
    mcq = is_multiple_choice(question)
    row = {"index": index, "image": image_cell(question.prompt.images),
           "question": question_text(question, record, mcq),
           "answer": LETTERS[question.options.index(question.gold_option)] if mcq else question.gold,
           "category": question.group, "l2-category": question.which, "split": record.get("split") or "",
           "item_id": question.item_id, "answer_type": question.answer_type}
    if mcq:
        row.update({LETTERS[n]: (question.options[n] if n < len(question.options) else "") for n in range(n_letters)})
    return row


def write_tsv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), delimiter="\t", lineterminator="\n",
                                quoting=csv.QUOTE_MINIMAL)
        writer.writeheader()
        writer.writerows(rows)


def write_vlmevalkit(items: list, folder: Path, name: str, splits: dict[str, float], context: Any) -> None:
    """The VLMEvalKit TSVs of ITEMS (see the module's docstring)."""
    from cftools.release.lmms_eval import eval_questions

    records = {e.record["id"]: e.record for e in items}
    asked = eval_questions(items, folder, context)
    if not any(asked.values()):
        raise CftoolsError("no question of this release can be asked (items need an image, and MuCR pairs both "
                           "images): nothing to write as VLMEvalKit datasets")
    for kind_name, pairs in asked.items():
        questions = [q for q, _ in pairs]
        mcq = [q for q in questions if is_multiple_choice(q)]
        vqa = [q for q in questions if not is_multiple_choice(q)]
        if mcq:
            n_letters = max(len(q.options) for q in mcq)
            if n_letters > len(LETTERS):
                raise CftoolsError(f"{kind_name}: a question has {n_letters} options; VLMEvalKit takes at most 26")
            rows = [tsv_row(n, q, records[q.item_id], n_letters) for n, q in enumerate(mcq)]
            write_tsv(folder / f"{dataset_name(name, kind_name, 'MCQ')}.tsv", rows,
                      [*BASE_COLUMNS, *LETTERS[:n_letters]])
        if vqa:
            rows = [tsv_row(n, q, records[q.item_id], 0) for n, q in enumerate(vqa)]
            write_tsv(folder / f"{dataset_name(name, kind_name, 'VQA')}.tsv", rows, BASE_COLUMNS)
