"""Ingest a VQAv2-size file pair (443,757 questions, 4,437,570 answers, no images) into a fresh workspace.

Prints rows/s and the ingest process's peak memory. Target (issue 2): under 60 s and under 2 GiB.

    .venv/bin/python bench/bench_ingest.py [--questions 443757] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = "how many what color is the are there people dogs cats on in of a this man woman table".split()
ANSWERS = ["yes", "no", "1", "2", "3", "red", "blue", "white", "tennis", "0", "4", "frisbee"]
TYPES = ["yes/no", "number", "other"]


def write_files(folder: Path, n: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    q_path, a_path = folder / "v2_OpenEnded_mscoco_val2014_questions.json", folder / "v2_mscoco_val2014_annotations.json"
    with open(q_path, "w") as q, open(a_path, "w") as a:
        q.write('{"info": {}, "task_type": "Open-Ended", "data_type": "mscoco", "license": {}, '
                '"data_subtype": "val2014", "questions": [')
        a.write('{"info": {}, "license": {}, "data_subtype": "val2014", "annotations": [')
        for i in range(n):
            qid, image_id = 1_000_000 + i, 100_000 + i // 3
            question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + "?"
            answers = [{"answer": rng.choice(ANSWERS), "answer_confidence": "yes", "answer_id": j + 1}
                       for j in range(10)]
            sep = "," if i else ""
            q.write(sep + json.dumps({"image_id": image_id, "question": question, "question_id": qid}))
            a.write(sep + json.dumps({"question_type": "what", "multiple_choice_answer": answers[0]["answer"],
                                      "answers": answers, "image_id": image_id,
                                      "answer_type": rng.choice(TYPES), "question_id": qid}))
        q.write("]}")
        a.write("]}")
    return q_path, a_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=443_757)
    parser.add_argument("--keep", type=Path, help="keep the generated files and workspace in this folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="cftools-bench-ingest-"))
    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    q_path, a_path = write_files(folder, args.questions)
    print(f"wrote {args.questions:,} questions / {args.questions * 10:,} answers "
          f"({(q_path.stat().st_size + a_path.stat().st_size) / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    ws = folder / "ws"
    subprocess.run([sys.executable, "-m", "cftools.cli", "init", str(ws)], check=True, capture_output=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cftools.cli", "--workspace", str(ws), "ingest", "vqav2",
                    "--questions", str(q_path), "--annotations", str(a_path)], check=True)
    elapsed = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"ingest: {elapsed:.1f} s, {args.questions / elapsed:,.0f} questions/s "
          f"({args.questions * 10 / elapsed:,.0f} answers/s), peak RSS {peak_mib:,.0f} MiB")
    print(f"target: < 60 s and < 2048 MiB -> {'OK' if elapsed < 60 and peak_mib < 2048 else 'MISSED'}")


if __name__ == "__main__":
    main()
