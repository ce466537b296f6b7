"""What the checks flag on the peer C-VQA sample, and how fast they run on a larger store.

1. Ingests the peer sample (C-VQA-Real and C-VQA-Synthetic, 300 rows each) into a fresh workspace,
   runs every check, and prints per file how many rows each check applies to, flags, and could not
   decide on; then lists the flagged rows and the numerical-direct rows that do not pass `arithmetic`.
2. With --scale N (default 20000; 0 skips it): a C-VQA CSV of N rows made by repeating the Real
   sample's rows under new image names (every 10th row shares its image with the row before, so
   that duplicates and embeddings have work), ingested and checked; prints items/s.

    .venv/bin/python bench/bench_checks.py [--scale 20000] [--no-embeddings] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cftools.checks import CheckOptions, ItemResult, check_codes, run_checks  # noqa: E402

CODES = check_codes()
from cftools.kinds.cvqa.ingest import ingest_cvqa  # noqa: E402
from cftools.workspace import init_workspace  # noqa: E402

SHARED = Path(os.environ.get("CFTOOLS_SHARED", ROOT.parent / "shared"))
PEER = SHARED / "data" / "peer" / "C-VQA"
FILES = {"C-VQA-Real": PEER / "C-VQA-Real" / "C-VQA-Real_questions.csv",
         "C-VQA-Synthetic": PEER / "C-VQA-Synthetic" / "C-VQA-Synthetic_questions.csv"}


def peer_sample(folder: Path, use_embeddings: bool) -> None:
    print("== peer sample: rows each check applies to / flags / could not decide")
    header = f"{'check':<18}" + "".join(f"{name:>26}" for name in FILES)
    lines: dict[str, list[str]] = {code: [] for code in CODES}
    results: dict[str, list[ItemResult]] = {}
    for name, path in FILES.items():
        workspace = init_workspace(folder / name)
        ingest_cvqa(workspace.store, path)
        collected: list[ItemResult] = []
        start = time.perf_counter()
        report = run_checks(workspace.store, options=CheckOptions(use_embeddings=use_embeddings),
                            on_result=collected.append)
        elapsed = time.perf_counter() - start
        results[name] = collected
        for code in CODES:
            lines[code].append(f"{report.applied[code]:>8} {report.flags[code]:>7} {report.notes[code]:>9}")
        print(f"{name}: {report.candidates} rows, {report.moved_to_checked} checked, {report.flagged} flagged "
              f"in {elapsed:.1f} s (duplicate: {report.duplicate_mode})")
        workspace.close()
    print(header)
    print(f"{'':<18}" + "".join(f"{'applied flagged undecided':>26}" for _ in FILES))
    for code in CODES:
        print(f"{code:<18}" + "".join(f"{cell:>26}" for cell in lines[code]))

    print("\n== flagged rows")
    for name, collected in results.items():
        for r in collected:
            for flag in r.flags:
                print(f"{name} {r.item.image_name} [{r.item.group}] {flag.code}: {flag.reason}")
                print(f"    Q: {r.item.question}  A: {r.item.answer}  (original answer {r.item.source_answer})")

    print("\n== numerical-direct rows that do not pass arithmetic (flagged or undecided)")
    for name, collected in results.items():
        for r in collected:
            if "arithmetic" not in r.checks:
                continue
            for finding in [f for f in r.flags if f.code == "arithmetic"] + [n for n in r.notes
                                                                             if n.code == "arithmetic"]:
                why = getattr(finding, "reason", None) or f"undecided: {finding.text}"
                print(f"{name} {r.item.image_name}: {r.item.question} -> {r.item.answer}: {why}")


def scaled_csv(path: Path, n: int) -> None:
    with open(FILES["C-VQA-Real"], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        image = 0
        for i in range(n):
            row = dict(rows[i % len(rows)])
            if i % 10:
                image += 1
            row["img_path"] = f"COCO_val2014_{image:012d}.jpg"
            row["query"] = f"{row['query']} ({i})"  # a distinct source question per row
            writer.writerow(row)


def scale(folder: Path, n: int, use_embeddings: bool) -> None:
    print(f"\n== scale: {n} C-VQA rows")
    csv_path = folder / "scaled.csv"
    scaled_csv(csv_path, n)
    workspace = init_workspace(folder / "scaled")
    ingest_cvqa(workspace.store, csv_path)
    start = time.perf_counter()
    report = run_checks(workspace.store, options=CheckOptions(use_embeddings=use_embeddings))
    elapsed = time.perf_counter() - start
    print(f"checked {report.candidates} items in {elapsed:.1f} s: {report.candidates / elapsed:.0f} items/s "
          f"({report.moved_to_checked} checked, {report.flagged} flagged; {report.embedded} questions embedded; "
          f"duplicate: {report.duplicate_mode})")
    print("flags: " + ", ".join(f"{code} {report.flags[code]}" for code in CODES))
    start = time.perf_counter()
    again = run_checks(workspace.store, options=CheckOptions(use_embeddings=use_embeddings))
    print(f"rerun: {again.candidates} items to check, {time.perf_counter() - start:.1f} s")
    workspace.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=20000, help="rows of the scaled run (0: skip it)")
    parser.add_argument("--no-embeddings", action="store_true", help="duplicates by normalised text only")
    parser.add_argument("--keep", type=Path, help="keep the workspaces in this folder")
    args = parser.parse_args()
    for path in FILES.values():
        if not path.exists():
            sys.exit(f"peer data not found at {path} (set CFTOOLS_SHARED)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        peer_sample(folder, not args.no_embeddings)
        if args.scale:
            scale(folder, args.scale, not args.no_embeddings)


if __name__ == "__main__":
    main()
