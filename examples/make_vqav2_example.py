"""Writes the small VQAv2-format example (questions, annotations, images) in examples/vqav2/.

The images are drawn shapes, so every answer can be checked by eye. Run once; the output is committed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from PIL import Image, ImageDraw

HERE = Path(__file__).parent / "vqav2"
COLORS = {"red": (220, 40, 40), "blue": (40, 80, 220), "green": (40, 170, 60), "yellow": (235, 200, 40)}

# image_id -> list of (shape, color) drawn on it
SCENES = {
    9001: [("circle", "red")] * 3,
    9002: [("circle", "blue")] * 2 + [("square", "green")],
    9003: [("square", "yellow")] * 4,
    9004: [("circle", "green")],
    9005: [("square", "red")] * 2 + [("circle", "red")] * 2,
    9006: [],
}


def draw(scene: list[tuple[str, str]], seed: int) -> Image.Image:
    rng = random.Random(seed)
    img = Image.new("RGB", (160, 120), (245, 245, 240))
    pen = ImageDraw.Draw(img)
    for i, (shape, color) in enumerate(scene):
        x, y = 10 + (i % 4) * 37, 15 + (i // 4) * 50 + rng.randint(0, 20)
        box = (x, y, x + 28, y + 28)
        (pen.ellipse if shape == "circle" else pen.rectangle)(box, fill=COLORS[color])
    return img


def ten(answer: str, variants: dict[str, int] | None = None) -> list[str]:
    """Ten human answers: mostly ANSWER, plus some disagreement."""
    answers = []
    for text, n in (variants or {}).items():
        answers += [text] * n
    return answers + [answer] * (10 - len(answers))


QUESTIONS = [
    (9001, "How many circles are there?", "number", ten("3", {"4": 1})),
    (9001, "Are the circles red?", "yes/no", ten("yes")),
    (9002, "How many blue circles are there?", "number", ten("2")),
    (9002, "Is there a square in the picture?", "yes/no", ten("yes", {"no": 1})),
    (9002, "What color is the square?", "other", ten("green")),
    (9003, "How many squares are there?", "number", ten("4", {"3": 2})),
    (9003, "Are there any circles?", "yes/no", ten("no")),
    (9004, "How many circles are in the image?", "number", ten("1")),
    (9004, "What shape is shown?", "other", ten("circle", {"ball": 5})),  # a 5-5 tie
    (9005, "How many red shapes are there?", "number", ten("4", {"2": 3})),
    (9005, "Is everything red?", "yes/no", ten("yes")),
    (9006, "How many shapes are there?", "number", ten("0", {"none": 2})),
    (9006, "Is the picture empty?", "yes/no", ten("yes")),
]


def main() -> None:
    (HERE / "images").mkdir(parents=True, exist_ok=True)
    for image_id, scene in SCENES.items():
        draw(scene, image_id).save(HERE / "images" / f"COCO_val2014_{image_id:012d}.jpg", quality=90)
    questions, annotations = [], []
    for n, (image_id, question, answer_type, answers) in enumerate(QUESTIONS):
        qid = image_id * 1000 + n
        questions.append({"image_id": image_id, "question": question, "question_id": qid})
        annotations.append({
            "question_type": " ".join(question.lower().split()[:2]), "answer_type": answer_type,
            "multiple_choice_answer": max(set(answers), key=answers.count), "image_id": image_id,
            "question_id": qid,
            "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": i + 1} for i, a in enumerate(answers)],
        })
    info = {"description": "cftools example in VQAv2 format (drawn shapes)", "version": "2.0"}
    (HERE / "questions.json").write_text(json.dumps({
        "info": info, "task_type": "Open-Ended", "data_type": "mscoco", "license": {}, "data_subtype": "val2014",
        "questions": questions}, indent=1))
    (HERE / "annotations.json").write_text(json.dumps({
        "info": info, "license": {}, "data_subtype": "val2014", "annotations": annotations}, indent=1))


if __name__ == "__main__":
    main()
