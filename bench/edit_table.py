"""Benchmark: the edit checks on the labelled table of real photographs and edits of known kind
(tests/edit_table.py), with each check's precision and recall; used to choose the defaults of
`cftools.imagegen.edit_checks` (docs/check.md states the figures).

    .venv/bin/python bench/edit_table.py [--rows] [--sweep NAME=V1,V2,...] [--held-out]

--rows prints every row (photo, kind, expected and given codes, the measures); --sweep recomputes the verdicts
for each value of one threshold of `edit_checks.Thresholds` (the other ones at their defaults) from the same
measures and prints precision and recall per check for each; --held-out checks the plausible edits the defaults
were not chosen on (`edit_table.HELD_OUT`) and prints which of them were flagged.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from edit_table import HELD_OUT, KINDS, PHOTOS, precision_recall, table  # noqa: E402

from cftools.imagegen import edit_checks  # noqa: E402
from cftools.imagegen.edit_checks import EDIT_CODES, Thresholds, check_edit, judge  # noqa: E402

IMAGE_CODES = tuple(c for c in EDIT_CODES if c != edit_checks.EDIT_ANSWER_NOT_FLIPPED)


def measured(rows) -> list:
    """Every row's report, its alignment measured whether or not the defaults needed it (for sweeps)."""
    reports = []
    for row in rows:
        report = check_edit(row.original, row.edited)
        if report.measures and "left" not in report.measures:
            report.measures.update(edit_checks.alignment(edit_checks.pixels(row.original),
                                                         edit_checks.pixels(row.edited), 0.0))
        reports.append(report)
    return reports


def verdicts(reports, limits: Thresholds) -> list[set[str]]:
    return [set(r.codes) if not r.measures else {f.code for f in judge(r.measures, limits)} for r in reports]


def print_scores(rows, got: list[set[str]], label: str = "") -> None:
    expected = [row.expected for row in rows]
    for code in IMAGE_CODES:
        precision, recall, wanted = precision_recall(expected, got, code)
        print(f"{label}{code:26s} rows {wanted:3d}  precision {precision:.2f}  recall {recall:.2f}")
    plausible = [g for row, g in zip(rows, got) if not row.expected]
    print(f"{label}{'plausible edits clean':26s} {sum(not g for g in plausible)}/{len(plausible)}")


def print_held_out() -> None:
    rows = table(PHOTOS, tuple(HELD_OUT))
    clean = 0
    for row in rows:
        codes = check_edit(row.original, row.edited).codes
        clean += not codes
        print(f"{'X' if codes else ' '} {row.photo[:10]:10s} {row.kind:36s} {codes}")
    print(f"held-out plausible edits clean: {clean}/{len(rows)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", action="store_true")
    parser.add_argument("--sweep", help="NAME=V1,V2,... (a field of edit_checks.Thresholds)")
    parser.add_argument("--held-out", action="store_true")
    args = parser.parse_args()
    if args.held_out:
        print_held_out()
        return
    started = time.perf_counter()
    rows = table()
    reports = measured(rows) if args.sweep else [check_edit(r.original, r.edited) for r in rows]
    print(f"{len(rows)} rows ({len(KINDS)} kinds), measured in {time.perf_counter() - started:.1f} s")
    got = verdicts(reports, Thresholds())
    if args.rows:
        for row, report, codes in zip(rows, reports, got):
            mark = " " if codes == set(row.expected) else "X"
            shown = {k: round(v, 3) for k, v in report.measures.items() if isinstance(v, float)}
            print(f"{mark} {row.photo[:10]:10s} {row.kind:28s} want {sorted(row.expected)} got {sorted(codes)} "
                  f"{shown}")
    print_scores(rows, got)
    if args.sweep:
        name, values = args.sweep.split("=", 1)
        for value in values.split(","):
            limits = dataclasses.replace(Thresholds(), **{name: float(value)})
            print(f"--- {name} = {value}")
            print_scores(rows, verdicts(reports, limits), "  ")


if __name__ == "__main__":
    main()
