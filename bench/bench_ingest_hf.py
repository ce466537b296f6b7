"""Ingest a local VQAv2-shaped Parquet dataset (10,000 rows with images, as the Hub lays it out) with `ingest hf`.

Writes the dataset with `datasets` (the Hub's VQAv2 columns: question_id, image_id, question, answers,
multiple_choice_answer, answer_type, and an Image feature of 64x64 PNG and JPEG images, three questions per image
as in VQAv2, so one distinct image per three rows) into a temp folder, then times `cftools ingest hf` on it in a
fresh workspace. Target (issue 46): under 60 s.

    .venv/bin/python bench/bench_ingest_hf.py [--rows 10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = "how many what color is the are there people dogs cats on in of a this man woman table".split()
ANSWERS = ["yes", "no", "1", "2", "3", "red", "blue", "white", "tennis", "0", "4", "frisbee"]
TYPES = ["yes/no", "number", "other"]
QUESTIONS_PER_IMAGE = 3


def image_bytes(rng: random.Random, index: int) -> bytes:
    """A 64x64 image with some texture (a flat one would compress to nothing), PNG or JPEG in turn."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (64, 64), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = rng.randrange(56), rng.randrange(56)
        draw.rectangle((x, y, x + rng.randrange(4, 24), y + rng.randrange(4, 24)),
                       fill=tuple(rng.randrange(256) for _ in range(3)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG" if index % 2 else "JPEG")
    return buffer.getvalue()


def write_dataset(path: Path, n: int) -> Path:
    import datasets

    rng = random.Random(0)
    images = [image_bytes(rng, i) for i in range((n + QUESTIONS_PER_IMAGE - 1) // QUESTIONS_PER_IMAGE)]
    rows: dict[str, list] = {k: [] for k in ("question_id", "image_id", "question", "answers",
                                             "multiple_choice_answer", "answer_type", "image")}
    for i in range(n):
        image_id = 100_000 + i // QUESTIONS_PER_IMAGE
        answers = [{"answer": rng.choice(ANSWERS), "answer_confidence": "yes", "answer_id": j + 1}
                   for j in range(10)]
        rows["question_id"].append(1_000_000 + i)
        rows["image_id"].append(image_id)
        rows["question"].append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + "?")
        rows["answers"].append(answers)
        rows["multiple_choice_answer"].append(answers[0]["answer"])
        rows["answer_type"].append(rng.choice(TYPES))
        rows["image"].append({"bytes": images[i // QUESTIONS_PER_IMAGE],
                              "path": f"COCO_val2014_{image_id:012d}.jpg"})
    features = datasets.Features({
        "question_id": datasets.Value("int64"), "image_id": datasets.Value("int64"),
        "question": datasets.Value("string"),
        "answers": datasets.List({"answer": datasets.Value("string"), "answer_confidence": datasets.Value("string"),
                                  "answer_id": datasets.Value("int64")}),
        "multiple_choice_answer": datasets.Value("string"), "answer_type": datasets.Value("string"),
        "image": datasets.Image()})
    datasets.disable_progress_bars()
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="keep the dataset and workspace in this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="cftools-bench-ingest-hf-"))
    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    data = write_dataset(folder / "validation-00000-of-00001.parquet", args.rows)
    n_images = (args.rows + QUESTIONS_PER_IMAGE - 1) // QUESTIONS_PER_IMAGE
    print(f"wrote {args.rows:,} rows, {n_images:,} distinct images ({data.stat().st_size / 2**20:.1f} MiB) "
          f"in {time.perf_counter() - t:.1f} s")
    ws = folder / "ws"
    subprocess.run([sys.executable, "-m", "cftools.cli", "init", str(ws)], check=True, capture_output=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cftools.cli", "--workspace", str(ws), "ingest", "hf", str(data),
                    "--licence", "CC-BY-4.0", "--quiet"], check=True)
    elapsed = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"ingest hf: {elapsed:.1f} s, {args.rows / elapsed:,.0f} rows/s, peak RSS {peak_mib:,.0f} MiB")
    print(f"target: < 60 s -> {'OK' if elapsed < 60 else 'MISSED'}")
    if args.keep is None:
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
