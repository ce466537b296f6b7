"""Soak the fault trials: many seeded SIGKILL trials per stage (tests/fault_trials.py), each checked against a
clean run of the stage. Prints one line per trial and the count survived.

    PYTHONPATH=. python bench/soak_faults.py --trials 50 [--stages generate-rewrite,export] [--seed 100]

The Label Studio stages (annotate-push, annotate-pull) run only when named in --stages; they start a server of
their own (LS_BIN, as the tests find it). The injected faults (damaged pages, a deleted store, a rewritten manifest,
a foreign --force target, two evals at once: `INJECTED_FAULTS`) take their turn among the stages, seeded too.
`two-workers` (two `generate rewrite` processes racing for one SQLite store's claims, tests/claim_trials.py) is
soaked only when named, e.g. `--stages two-workers --trials 300` beside a CPU hog: each trial must make every item
once and no model call twice.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from claim_trials import rewrite_workers  # noqa: E402
from fault_trials import (  # noqa: E402
    INJECTED_FAULTS,
    STAGES,
    clean_run,
    label_studio_for_trials,
    parse_stage_names,
    run_trial,
)


def _two_workers(seed: int, scratch: Path) -> str:
    """Two rewrite workers on one store: every item once, no model call made twice (SEED: only names the trial)."""
    scratch.mkdir(parents=True)
    outcome = rewrite_workers(scratch)
    assert outcome.each_once, outcome.describe()
    return outcome.describe()


SOAK_ONLY = {"two-workers": _two_workers}  # not among the test suite's injected faults: each takes seconds


def count_trials(names: list[str], trials: int) -> Counter:
    return Counter(names[n % len(names)] for n in range(trials))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50, help="trials in all, spread over the stages in turn")
    parser.add_argument("--stages", default=",".join([*(n for n, s in STAGES.items() if not s.needs_label_studio),
                                                      *INJECTED_FAULTS]))
    parser.add_argument("--seed", type=int, default=1000, help="first seed (the test suite uses 0-2)")
    args = parser.parse_args(argv)
    faults = {**INJECTED_FAULTS, **SOAK_ONLY}
    names = parse_stage_names(args.stages, extra=faults)
    survived, failed = 0, []
    mid_run: Counter = Counter()  # trials per stage whose kill landed while the stage was at work
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cftools-soak-") as scratch, ExitStack() as stack:
        if any(name in STAGES and STAGES[name].needs_label_studio for name in names):
            stack.enter_context(label_studio_for_trials(Path(scratch)))
        clean = {name: clean_run(STAGES[name], Path(scratch) / f"clean-{name}") for name in names if name in STAGES}
        for n in range(args.trials):
            name, seed = names[n % len(names)], args.seed + n
            try:
                if name in faults:
                    started_fault = time.monotonic()
                    what = faults[name](seed, Path(scratch) / f"trial-{n}")
                    survived += 1
                    print(f"ok   {name:18s} seed {seed}: {what} {time.monotonic() - started_fault:.1f}s", flush=True)
                    continue
                result = run_trial(STAGES[name], seed, Path(scratch) / f"trial-{n}", *clean[name])
            except Exception:  # noqa: BLE001  (a failed trial is counted and shown, the soak goes on)
                failed.append((name, seed))
                print(f"FAIL {name} seed {seed}\n{traceback.format_exc()}", flush=True)
                continue
            survived += 1
            mid_run[name] += result.mid_run
            print(f"ok   {name:18s} seed {seed}: {result.describe()} {result.seconds:.1f}s", flush=True)
    print(f"{survived}/{args.trials} trials survived in {time.monotonic() - started:.0f}s"
          + (f"; failed: {failed}" if failed else ""))
    print("killed mid-run: " + ", ".join(f"{name} {mid_run[name]}/{count_trials(names, args.trials)[name]}"
                                          for name in names if name in STAGES))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
