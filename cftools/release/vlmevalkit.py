"""`cftools export NAME --version V --format vlmevalkit`: the release as VLMEvalKit custom datasets.

VLMEvalKit loads a benchmark from one TSV in `$LMUData` (`LMUData/<DATASET>.tsv`): `index`, `image` (the image's
bytes in base64; a JSON list of them for a question with several images), `question`, `answer`, `category`, and
for multiple-choice questions the options as columns `A`, `B`, ... Each kind gives up to three files, each in the
dataset type VLMEvalKit can score where it has one:

    CF_<NAME>_<KIND>_MCQ.tsv        questions with options (CFMM, MuCR Cue): `answer` is the right option's letter;
                                    the question text holds no options (VLMEvalKit lists them itself). VLMEvalKit
                                    loads it as a custom MCQ dataset and scores the accuracy per question.
    CF_<NAME>_<KIND>_YN.tsv         yes/no questions (C-VQA boolean): `answer` Yes or No, for VLMEvalKit's Y/N
                                    dataset class (ImageYORNDataset, named in vlmevalkit_config.json: VLMEvalKit
                                    takes a custom file as Y/N only from a config).
    CF_<NAME>_<KIND>_OpenEnded.tsv  every other question (C-VQA counts; MuCR C2E/E2C, answered with an image's
                                    letter): "openended" in the name makes VLMEvalKit prompt them as open
                                    questions; its custom VQA dataset has no scorer, so `cftools eval import`
                                    scores them.

`vlmevalkit_config.json` holds the `data` part of a VLMEvalKit `--config` file (each dataset with its class);
README.md says how to run it and what VLMEvalKit scores itself. The kinds' own metrics (C-VQA per group, the
CFMM both-right score acc+, MuCR C2E/E2C/Cue) come from `cftools eval import FOLDER PREDICTION_FILES...`, which
reads VLMEvalKit's prediction files back: besides VLMEvalKit's columns each row has `l2-category` (which question
of the item: original, counterfactual, c2e, ..., and `edited`: the original question about the item's edited image,
whose answer is the edited image's, `data.edited_answer`; `irrelevant`: the original question about the item's
irrelevant-edited image, whose answer stays, `data.irrelevant_edited_answer`), `split`, `item_id`, `answer_type`
and `pair_index` (the `original` and the `edited` row of an item name each other's index), and the folder holds
the native `records.jsonl`. Names start with `CF_`, so none collides with VLMEvalKit's own datasets (its `CVQA` is
the unrelated cultural VQA). Free-text questions scored by a judge (MuCR Exp) are left out.
"""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path
from typing import Any, Sequence

from cftools.evaluate.harness_readings import LETTERS, is_multiple_choice
from cftools.errors import CftoolsError
from cftools.kinds.registry import get_kind

BASE_COLUMNS = ("index", "image", "question", "answer", "category", "l2-category", "split", "item_id", "answer_type",
                "pair_index")
# The question asked about both images of an item with an edit: the original image's row and the edited image's
# row name each other's index (`pair_index`; empty for every other row, or where the two are in different files).
IMAGE_PAIR = ("original", "edited")
# The record field holding a multiple-choice question's own text (without its options), by which question it is.
PAIR_TEXT = {"original": "original_question", "counterfactual": "question", "edited": "original_question",
             "irrelevant": "original_question"}
MCQ, YES_NO, OPEN = "MCQ", "YN", "OpenEnded"
# The VLMEvalKit class that loads each file (`--config`): its custom MCQ and VQA classes, its Y/N class.
DATASET_CLASSES = {MCQ: "CustomMCQDataset", YES_NO: "ImageYORNDataset", OPEN: "CustomVQADataset"}
CONFIG_NAME = "vlmevalkit_config.json"


def dataset_name(name: str, kind: str, shape: str) -> str:
    return "CF_" + re.sub(r"[^A-Za-z0-9_]+", "_", f"{name}_{kind}_{shape}").strip("_")


def image_cell(paths: Sequence[Path]) -> str:
    encoded = [base64.b64encode(Path(p).read_bytes()).decode("ascii") for p in paths]
    return encoded[0] if len(encoded) == 1 else json.dumps(encoded)


def shape_of(question: Any) -> str:
    if is_multiple_choice(question):
        return MCQ
    if question.answer_type == "yes/no" and str(question.gold).strip().lower() in ("yes", "no"):
        return YES_NO
    return OPEN


def bare_question(question: Any, record: dict[str, Any], release: Any) -> str:
    """A multiple-choice question without its options (VLMEvalKit lists them itself): a pair question's own text;
    MuCR's cue question rendered with no options."""
    which = question.which.split(":", 1)[0]
    if which in PAIR_TEXT and record.get(PAIR_TEXT[which]):
        return str(record[PAIR_TEXT[which]])
    if which == "cue":
        from cftools.evaluate.questions import PromptTemplates

        form = "composite" if len(question.prompt.images) == 1 else "split"
        text = PromptTemplates(None, Path(release.workspace.root)).named("mucr_cue").render(options=[], form=form)
        return "\n".join(line for line in text.strip().splitlines() if not line.startswith(("Options:", "Answer")))
    return question.prompt.text


def tsv_row(index: int, question: Any, record: dict[str, Any], n_letters: int, release: Any) -> dict[str, Any]:
    shape = shape_of(question)
    answer = {MCQ: lambda: LETTERS[question.options.index(question.gold_option)],
              YES_NO: lambda: str(question.gold).strip().capitalize(), OPEN: lambda: question.gold}[shape]()
    row = {"index": index, "image": image_cell(question.prompt.images),
           "question": bare_question(question, record, release) if shape == MCQ else question.prompt.text,
           "answer": answer, "category": question.group, "l2-category": question.which,
           "split": record.get("split") or "", "item_id": question.item_id, "answer_type": question.answer_type}
    if shape == MCQ:
        row.update({LETTERS[n]: (question.options[n] if n < len(question.options) else "") for n in range(n_letters)})
    return row


def pair_rows(rows: list[dict[str, Any]]) -> None:
    """Each row's `pair_index`: the index of the row that asks the same question about the item's other image."""
    where = {(r["item_id"], r["l2-category"]): r["index"] for r in rows}
    for row in rows:
        role = row["l2-category"]
        other = IMAGE_PAIR[1 - IMAGE_PAIR.index(role)] if role in IMAGE_PAIR else None
        row["pair_index"] = where.get((row["item_id"], other), "") if other else ""


def write_tsv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), delimiter="\t", lineterminator="\n",
                                quoting=csv.QUOTE_MINIMAL)
        writer.writeheader()
        writer.writerows(rows)


def write_vlmevalkit(release: Any) -> None:
    """The VLMEvalKit TSVs of the release's items, their config, card and records (see the module's docstring)."""
    from cftools.release.lmms_eval import eval_questions
    from cftools.release.records import write_records

    items, folder, name = release.items, release.folder, release.name
    records = {e.record["id"]: e.record for e in items}
    asked = eval_questions(release)
    if not any(asked.values()):
        raise CftoolsError("no question of this release can be asked (items need an image, and MuCR pairs both "
                           "images): nothing to write as VLMEvalKit datasets")
    write_records(sorted(items, key=lambda e: e.record["id"]), folder / "records.jsonl")
    datasets: dict[str, str] = {}
    scores: dict[str, str] = {}
    for kind_name, pairs in asked.items():
        questions = [q for q, _ in pairs]
        for shape in (MCQ, YES_NO, OPEN):
            members = [q for q in questions if shape_of(q) == shape]
            if not members:
                continue
            n_letters = max(len(q.options) for q in members) if shape == MCQ else 0
            if n_letters > len(LETTERS):
                raise CftoolsError(f"{kind_name}: a question has {n_letters} options; VLMEvalKit takes at most 26")
            dataset = dataset_name(name, kind_name, shape)
            rows = [tsv_row(n, q, records[q.item_id], n_letters, release) for n, q in enumerate(members)]
            pair_rows(rows)
            write_tsv(folder / f"{dataset}.tsv", rows, [*BASE_COLUMNS, *LETTERS[:n_letters]])
            datasets[dataset], scores[dataset] = shape, kind_scores(get_kind(kind_name))
    config = {"data": {d: {"class": DATASET_CLASSES[shape], "dataset": d} for d, shape in sorted(datasets.items())}}
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(card_text(name, release.version, datasets, scores), encoding="utf-8")


def kind_scores(kind: Any) -> str:
    """A kind's own scores as the card names them: its short title and its metrics (`CFMM: acc_b, acc_c, ...`)."""
    return f"{kind.title.split(':')[0]}: {', '.join(kind.hooks.evaluate.metrics)}"


def card_text(name: str, version: str, datasets: dict[str, str], scores: dict[str, str]) -> str:
    """The format's card: what each file is, how to run VLMEvalKit on them, what it scores and what cftools does.
    DATASETS: each file's shape; SCORES: each file's kind's own scores (`kind_scores`)."""
    rows = [f"| `{d}.tsv` | {DATASET_CLASSES[shape]} | "
            + {MCQ: "VLMEvalKit (accuracy per question); the kind's scores "
                    f"({scores[d]}) by `cftools eval import`",
               YES_NO: f"VLMEvalKit (Y/N accuracy); the kind's scores ({scores[d]}) by "
                       "`cftools eval import`",
               OPEN: "`cftools eval import` (VLMEvalKit's custom VQA class has no scorer)"}[shape] + " |"
            for d, shape in sorted(datasets.items())]
    return "\n".join([
        f"# {name} {version} for VLMEvalKit", "",
        "Counterfactual benchmark items as VLMEvalKit custom datasets, written by `cftools export --format "
        "vlmevalkit`.", "",
        "| file | VLMEvalKit class | scored by |", "|---|---|---|", *rows, "",
        "## Run", "",
        "Copy the `.tsv` files into `$LMUData`, add your model to the `model` part of `vlmevalkit_config.json` and "
        "run `python run.py --config vlmevalkit_config.json` in VLMEvalKit (the config names each file's class: "
        "VLMEvalKit takes a custom file as Y/N only from a config).", "",
        "## Scores", "",
        "VLMEvalKit scores the `_MCQ` and `_YN` files per question. The rest is scored by cftools: the "
        "`_OpenEnded` files, and every kind's own metrics (C-VQA per group, original and counterfactual; the "
        "CFMM both-right score acc+ and the paper's sums; MuCR C2E, E2C and Cue). Run "
        "`cftools eval import THIS_FOLDER PREDICTION_FILES... --out RUN_DIR` on VLMEvalKit's prediction files "
        "(`MODEL_DATASET.xlsx`, or .tsv/.json under its PRED_FORMAT): each row carries its `item_id` and "
        "`l2-category` (which question of the item), and this folder holds the release's `records.jsonl`.", "",
        "An item with an edited image has an `edited` row beside its `original` row: the original question about the "
        "edited image, whose answer is the edited image's; the two rows name each other in `pair_index`. "
        "`cftools eval import` reports the paired score (both right) of such items. "
        "An item with an irrelevant edit has an `irrelevant` row too: the original question about the "
        "irrelevant-edited image, whose answer stays; `cftools eval import` reports the counterfactual "
        "consistency (the answer changes if and only if the edit is relevant) of items with all three rows.", ""])
