"""Annotator quality by simulation (issue 33): does the naming rule catch a random clicker and spare a careful
person, and does the release error-rate interval cover the truth and stay narrow with an audit?

Scripted people (tests/simulated_annotators.py) judge simulated tasks; controls (tasks with a settled answer)
come at DEFAULT_CONTROL_RATE; the naming rule is cftools.annotate.quality.named_below with its defaults, checked
after every control as `annotate status` would; the error rate is quality.release_error_rate. Fixed seeds.

Tasks: half yes/no questions, half counts with 6 options; the proposed answer is wrong in 30% of tasks (a wrong
one is another option at random). A person right with probability p gives the right verdict; a slip passes a
wrong proposed answer, or "corrects" a right one to another option.

Targets:
  (a) a random clicker among careful people is named after at most 25 controls in >= 95% of runs;
  (b) a careful person (90%) is wrongly named over 1,000 tasks in <= 1% of runs;
  (c) the release error-rate interval covers the simulated true error rate in >= 93% of runs;
  (d) with an audit of 10% of the items its half-width is <= 3 points at 2,000 items.

The release: each item goes to two people of the team at random; equal verdicts release that answer, different
ones go to a third person, whose verdict is released. An item is wrong when both judges were wrong the same way or
the adjudicator was wrong. Each person's control accuracy comes from ~1 control per 10 of their tasks.

    .venv/bin/python bench/bench_annotators.py [--runs 2000] [--release-runs 150] [--items 2000] [--audit 0.1]
                                               [--workers 2] [--plot naming.png]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from cftools.annotate.quality import (  # noqa: E402
    DEFAULT_CONTROL_RATE, DEFAULT_MIN_ACCURACY, DEFAULT_MIN_CONTROLS, Decider, ItemEvidence, named_below,
    release_error_rate,
)
from simulated_annotators import always_agrees, careful, hurried, random_clicker  # noqa: E402

YES_NO = ["yes", "no"]
COUNTS = [str(n) for n in range(6)]
WRONG_PROPOSED = 0.3


@lru_cache(maxsize=None)
def named(correct: int, n: int) -> bool:
    """The rule as status applies it (cached: it depends on the counts alone)."""
    return named_below(correct, n, DEFAULT_MIN_ACCURACY)


def task(rng: random.Random, yes_no_share: float = 0.5) -> tuple[str, str, list[str]]:
    """(truth, proposed answer, options) of one simulated task."""
    options = YES_NO if rng.random() < yes_no_share else COUNTS
    truth = rng.choice(options)
    proposed = rng.choice([o for o in options if o != truth]) if rng.random() < WRONG_PROPOSED else truth
    return truth, proposed, options


def right(person, rng: random.Random, yes_no_share: float = 0.5) -> bool:  # noqa: ANN001
    truth, proposed, options = task(rng, yes_no_share)
    return person.judge(truth, proposed, options).verdict(proposed) == truth


# ---------------------------------------------------------------- naming


def controls_until_named(person, rng: random.Random, tasks: int,  # noqa: ANN001
                         yes_no_share: float = 0.5) -> tuple[int, int]:
    """Work through TASKS tasks (each a control with DEFAULT_CONTROL_RATE), checking the rule after each control;
    (controls judged when named or at the end, 1 if named else 0)."""
    correct = n = 0
    for _ in range(tasks):
        if rng.random() >= DEFAULT_CONTROL_RATE:
            continue  # an ordinary task: nothing to score
        n += 1
        correct += right(person, rng, yes_no_share)
        if named(correct, n):
            return n, 1
    return n, 0


def naming(runs: int, progress: Progress, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Per scripted person: (controls when named or at the end, named) of each run of 1,000 tasks."""
    # (person, share of yes/no controls): a random clicker is right half the time on a yes/no question (the
    # hardest to catch), less often on a count.
    makers = {"random clicker": (random_clicker, 0.5), "random clicker, yes/no only": (random_clicker, 1.0),
              "always agrees": (always_agrees, 0.5), "hurried (75%)": (hurried, 0.5), "careful (90%)": (careful, 0.5)}
    out: dict[str, list[tuple[int, int]]] = {}
    job = progress.add_task("naming", total=runs * len(makers))
    for label, (make, yes_no_share) in makers.items():
        results = []
        for run in range(runs):
            rng = random.Random(f"naming:{label}:{seed}:{run}")
            results.append(controls_until_named(make(seed=seed * 100_000 + run), rng, 1000, yes_no_share))
            progress.advance(job)
        out[label] = results
    return out


# ---------------------------------------------------------------- the release


MIXES = {
    "4 careful (90%)": lambda s: [careful(name=f"c{i}", seed=s) for i in range(4)],
    "3 careful, 1 hurried (75%)": lambda s: [careful(name=f"c{i}", seed=s) for i in range(3)]
                                            + [hurried(name="h", seed=s)],
    "95/90/85/75%": lambda s: [careful(a, name=f"p{a}", seed=s) for a in (0.95, 0.9, 0.85)]
                              + [hurried(name="h", seed=s)],
    "3 careful, 1 always agrees": lambda s: [careful(name=f"c{i}", seed=s) for i in range(3)]
                                            + [always_agrees(name="a", seed=s)],
}


def one_release(people: list, n_items: int, audit_share: float, rng: random.Random) -> dict:  # noqa: ANN001
    """Simulate one release; its true error rate and both intervals (with the audit, and the model alone)."""
    tasks_per_person = 2 * n_items // len(people)
    scores = {}
    for person in people:  # the controls mixed into their queue
        n = sum(rng.random() < DEFAULT_CONTROL_RATE for _ in range(tasks_per_person))
        scores[person.name] = (sum(right(person, rng) for _ in range(n)), n)
    evidence, wrong = [], {}
    for i in range(n_items):
        truth, proposed, options = task(rng)
        first, second = rng.sample(people, 2)
        a = first.judge(truth, proposed, options).verdict(proposed)
        b = second.judge(truth, proposed, options).verdict(proposed)
        if a == b:
            released, deciders, adjudicated = a, (first, second), False
        else:
            third = rng.choice([p for p in people if p not in (first, second)])
            released, deciders, adjudicated = third.judge(truth, proposed, options).verdict(proposed), (third,), True
        key = f"i{i}"
        evidence.append(ItemEvidence(key, tuple(Decider(p.name, *scores[p.name]) for p in deciders), adjudicated))
        wrong[key] = released != truth
    audited = rng.sample(sorted(wrong), int(round(audit_share * n_items)))
    with_audit = release_error_rate(evidence, {key: not wrong[key] for key in audited})
    model = release_error_rate(evidence, draws=500, seed=rng.randrange(2**31))
    truth = sum(wrong.values()) / n_items
    return {"truth": truth, "audit": with_audit.interval, "model": model.interval,
            "clt": clt_interval(evidence, wrong, audited)}


def clt_interval(evidence: list, wrong: dict, audited: list) -> tuple[float, float] | None:  # noqa: ANN001
    """ppi-python's own (Wald) PPI++ interval of the same release, for comparison, when ppi-python is installed
    (cftools does not depend on it: see quality._ppi_interval)."""
    try:
        from ppi_py import ppi_mean_ci
    except ImportError:
        return None
    import numpy as np

    from cftools.annotate.quality import _point_accuracy, predicted_error

    predicted = {e.item: predicted_error([_point_accuracy(d) for d in e.deciders]) for e in evidence}
    chosen = set(audited)
    rest = [e.item for e in evidence if e.item not in chosen]
    low, high = ppi_mean_ci(np.array([float(wrong[k]) for k in audited]), np.array([predicted[k] for k in audited]),
                            np.array([predicted[k] for k in rest]), alpha=0.05)
    found, total = sum(wrong[k] for k in audited), len(evidence)
    return ((found + len(rest) * max(float(low[0]), 0.0)) / total,
            (found + len(rest) * min(float(high[0]), 1.0)) / total)


def release_run(label: str, run: int, n_items: int, audit_share: float, seed: int) -> tuple[str, dict]:
    rng = random.Random(f"release:{label}:{seed}:{run}")
    return label, one_release(MIXES[label](seed * 100_000 + run), n_items, audit_share, rng)


def releases(runs: int, n_items: int, audit_share: float, progress: Progress, seed: int,
             workers: int) -> dict[str, list[dict]]:
    """RUNS simulated releases per team, in WORKERS processes (each run seeded by its team and number alone)."""
    from concurrent.futures import ProcessPoolExecutor

    out: dict[str, list[dict]] = {label: [] for label in MIXES}
    job = progress.add_task("releases", total=runs * len(MIXES))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        jobs = [(label, run) for label in MIXES for run in range(runs)]
        for label, result in pool.map(release_run, [j[0] for j in jobs], [j[1] for j in jobs],
                                      [n_items] * len(jobs), [audit_share] * len(jobs), [seed] * len(jobs),
                                      chunksize=8):
            out[label].append(result)
            progress.advance(job)
    return out


# ---------------------------------------------------------------- report


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def share(values: list[bool]) -> float:
    return 100.0 * sum(values) / len(values) if values else float("nan")


def verdict(ok: bool) -> str:
    return "[green]meets[/]" if ok else "[red]misses[/]"


def plot(path: Path, named_runs: dict[str, list[tuple[int, int]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = list(range(0, 101))
    for label, results in named_runs.items():
        ax.plot(xs, [share([bool(hit) and n <= x for n, hit in results]) for x in xs], label=label)
    ax.axvline(25, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("controls judged")
    ax.set_ylabel("% of runs named")
    ax.set_title(f"Named by min_accuracy {DEFAULT_MIN_ACCURACY:g} after {DEFAULT_MIN_CONTROLS} controls "
                 f"(1 task in {round(1 / DEFAULT_CONTROL_RATE)} a control)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="runs per scripted person (naming)")
    parser.add_argument("--release-runs", type=int, default=150, help="simulated releases per team mix")
    parser.add_argument("--workers", type=int, default=2, help="processes simulating releases")
    parser.add_argument("--items", type=int, default=2000, help="items per release")
    parser.add_argument("--audit", type=float, default=0.1, help="share of the items audited")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", type=Path, help="write a PNG of the share named against controls judged")
    args = parser.parse_args()
    console = Console(width=150)
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        named_runs = naming(args.runs, progress, args.seed)
        release_runs = releases(args.release_runs, args.items, args.audit, progress, args.seed, args.workers)

    table = Table(title=f"Naming: min_accuracy {DEFAULT_MIN_ACCURACY:g}, Wilson 95%, from the "
                        f"{DEFAULT_MIN_CONTROLS}th control, control rate {DEFAULT_CONTROL_RATE:g}; "
                        f"{args.runs} runs of 1,000 tasks each")
    for column in ("person", "named within 25 controls", "named within 1,000 tasks", "median controls when named"):
        table.add_column(column, justify="right" if column != "person" else "left")
    for label, results in named_runs.items():
        when = sorted(n for n, hit in results if hit)
        table.add_row(label, f"{share([bool(hit) and n <= 25 for n, hit in results]):.1f}%",
                      f"{share([bool(hit) for _, hit in results]):.2f}%", str(when[len(when) // 2]) if when else "-")
    console.print(table)
    clicker = min(share([bool(hit) and n <= 25 for n, hit in named_runs[label]])
                  for label in ("random clicker", "random clicker, yes/no only"))
    careful_named = share([bool(hit) for _, hit in named_runs["careful (90%)"]])

    table = Table(title=f"Release error rate: {args.release_runs} releases of {args.items} items per team, "
                        f"audit of {args.audit:.0%}")
    for column in ("team", "true error (mean)", "covered: PPI, audit", "covered: model alone (misses above)",
                   "half-width PPI (mean / 95th pct)", "half-width model (mean)",
                   "covered: ppi-python's Wald interval"):
        table.add_column(column, justify="right" if column != "team" else "left")
    covered_audit, covered_model, widths = [], [], []
    for label, results in release_runs.items():
        audit_hits = [r["audit"].low <= r["truth"] <= r["audit"].high for r in results]
        model_hits = [r["model"].low <= r["truth"] <= r["model"].high for r in results]
        model_above = sum(r["model"].low > r["truth"] for r in results)  # the model overstated the error rate
        clt = [r["clt"][0] <= r["truth"] <= r["clt"][1] for r in results if r["clt"] is not None]
        half = [100 * (r["audit"].high - r["audit"].low) / 2 for r in results]
        model_half = [100 * (r["model"].high - r["model"].low) / 2 for r in results]
        covered_audit += audit_hits
        covered_model += model_hits
        widths.append(half)
        table.add_row(label, f"{100 * sum(r['truth'] for r in results) / len(results):.2f}%",
                      f"{share(audit_hits):.1f}%",
                      f"{share(model_hits):.1f}% ({model_above} of {len(results) - sum(model_hits)})",
                      f"{sum(half) / len(half):.2f} / {percentile(half, 95):.2f} pts",
                      f"{sum(model_half) / len(model_half):.2f} pts", f"{share(clt):.1f}%" if clt else "-")
    console.print(table)

    console.print(f"(a) random clicker named within 25 controls: {clicker:.1f}% of runs at worst (yes/no only; "
                  "target >= 95%): "
                  f"{verdict(clicker >= 95)}")
    console.print(f"(b) careful person (90%) wrongly named over 1,000 tasks: {careful_named:.2f}% of runs "
                  f"(target <= 1%): {verdict(careful_named <= 1)}")
    console.print(f"(c) coverage of the error-rate interval, all teams: {share(covered_audit):.1f}% with the audit "
                  f"(PPI), {share(covered_model):.1f}% model alone (target >= 93%): "
                  f"{verdict(share(covered_audit) >= 93)} with the audit")
    means = [sum(w) / len(w) for w in widths]
    console.print(f"(d) half-width with a {args.audit:.0%} audit at {args.items} items: mean per team "
                  f"{min(means):.2f} to {max(means):.2f} points (target <= 3): {verdict(max(means) <= 3)}; "
                  f"95th percentile over all runs {percentile([x for w in widths for x in w], 95):.2f}")
    if args.plot:
        plot(args.plot, named_runs)
        console.print(f"plot: {args.plot}")
    console.print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
