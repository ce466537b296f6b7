"""Writes small VQAv2-format question/annotation files for tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_vqav2(folder: Path, records: list[dict], subtype: str = "val2014") -> tuple[Path, Path]:
    """RECORDS: dicts with question_id, image_id, question, answers (list of ten), answer_type."""
    folder.mkdir(parents=True, exist_ok=True)
    questions = [{"image_id": r["image_id"], "question": r["question"], "question_id": r["question_id"]}
                 for r in records]
    annotations = [{"question_id": r["question_id"], "image_id": r["image_id"], "answer_type": r["answer_type"],
                    "question_type": "how many", "multiple_choice_answer": r["answers"][0],
                    "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1}
                                for i, a in enumerate(r["answers"])]} for r in records]
    q_path, a_path = folder / "questions.json", folder / "annotations.json"
    q_path.write_text(json.dumps({"info": {}, "data_subtype": subtype, "questions": questions}))
    a_path.write_text(json.dumps({"info": {}, "data_subtype": subtype, "annotations": annotations}))
    return q_path, a_path


def sample_records() -> list[dict]:
    return [
        {"question_id": 1, "image_id": 11, "question": "How many dogs?", "answer_type": "number",
         "answers": ["2"] * 7 + ["3"] * 3},
        {"question_id": 2, "image_id": 11, "question": "Is it sunny?", "answer_type": "yes/no",
         "answers": ["yes"] * 5 + ["no"] * 5},  # a tie
        {"question_id": 3, "image_id": 12, "question": "What color is the car?", "answer_type": "other",
         "answers": ["red", "blue"] * 5},  # a tie in other order
    ]
