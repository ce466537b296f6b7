"""The published C-VQA-Synthetic rows scored with a scripted model that answers every question right.

The model is the loopback chat server (tests/llm_stub.py) with the reply function
`llm_replies:cvqa_synthetic_right`: it recognises each row by its drawn image and answers in one of the forms
people and models write a choice in ("A", "(A)", "A.", "Answer: A", "The answer is A", the option's text, a
reasoning line then "The answer is (A)."). Every group should score 100 on the original and the counterfactual
question; the table shows what the reader makes of it.

    .venv/bin/python bench/bench_cvqa_synthetic.py [--rows-per-type 13] [--keep DIR]

--rows-per-type N takes the first N rows of each abs_counting type (13 gives 78 rows).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from conftest import CVQA_SYNTHETIC  # noqa: E402
from fixtures_eval import png_bytes  # noqa: E402


def subset(rows: list[dict], per_type: int | None) -> list[tuple[int, dict]]:
    taken: dict[str, int] = defaultdict(int)
    out = []
    for line, row in enumerate(rows):
        if per_type is None or taken[row["type"]] < per_type:
            taken[row["type"]] += 1
            out.append((line, row))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-type", type=int, help="only the first N rows of each type")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()

    from cftools.evaluate.run import EvalOptions, run_eval
    from cftools.kinds.cvqa.ingest import ingest_cvqa
    from cftools.release.export import ExportOptions, export_release
    from cftools.workspace import init_workspace

    folder = args.keep or Path(tempfile.mkdtemp(prefix="cvqa-synthetic-"))
    folder.mkdir(parents=True, exist_ok=True)
    with open(CVQA_SYNTHETIC, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    chosen = subset(rows, args.rows_per_type)
    images = folder / "images"
    images.mkdir(exist_ok=True)
    sample = folder / "C-VQA-Synthetic_questions.csv"
    with open(sample, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for line, row in chosen:
            writer.writerow(row)
            (images / row["img_path"]).write_bytes(png_bytes(line))

    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "llm_stub.py"), "--port", "0", "--delay", "0",
                               "--reply", "llm_replies:cvqa_synthetic_right"], stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().split()[-1]
        os.environ["BENCH_KEY"] = "sk-bench-000000"
        workspace = init_workspace(folder / "ws")
        workspace.config["llm"] = {"base_url": base_url, "api_key_env": "BENCH_KEY"}
        ingest_cvqa(workspace.store, sample, images, licence="unknown")
        exported = export_release(workspace, "synthetic", "1.0.0", out_dir=folder / "releases",
                                  options=ExportOptions(include_unverified=True, licence="unknown", force=True))
        result = run_eval(exported.path, "openai:scripted", options=EvalOptions(out_dir=folder / "run", concurrency=8),
                          workspace=workspace)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{len(chosen)} published C-VQA-Synthetic rows, a scripted model that is always right")
    print(f"{'group':<16}{'n':>4}{'original':>10}{'counterf.':>11}{'unknown':>9}")
    for row in result.summary["cvqa"]["rows"]:
        unknown = (row["unknown_original"] + row["unknown_counterfactual"]) / 2
        print(f"{row['group']:<16}{row['n']:>4}{100 * row['original']['value']:>10.1f}"
              f"{100 * row['counterfactual']['value']:>11.1f}{100 * unknown:>8.1f}%")


if __name__ == "__main__":
    main()
