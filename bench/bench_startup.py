"""How long `cftools --help` takes to start (issue 39: under 1 s), and which heavy modules it imports.

Runs `python -m cftools --help` in a fresh subprocess RUNS times (after one warm-up run that fills the OS file
cache and the bytecode cache) and prints the median and the spread of the wall times, then lists the heavy
modules the start-up imported (from one run under `python -X importtime`), largest first. On a shared machine
compare medians taken in the same run: the load of other processes adds to every figure.

    .venv/bin/python bench/bench_startup.py [--runs 11]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the start of a command should not pay for: the store's engine and migrations, array and model libraries,
# HTTP clients and the SDKs; each belongs to the command that uses it.
HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "numpy", "torch", "transformers", "diffusers", "label_studio_sdk",
         "pandas", "pyarrow", "datasets", "openai", "httpx", "PIL", "sklearn", "nltk", "matplotlib")


def command() -> list[str]:
    return [sys.executable, "-m", "cftools", "--help"]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def timed_run() -> float:
    start = time.perf_counter()
    subprocess.run(command(), check=True, stdout=subprocess.DEVNULL, env=environment(), cwd=ROOT)
    return time.perf_counter() - start


def heavy_imports() -> list[tuple[str, float]]:
    """(top-level heavy package, cumulative import seconds) that `cftools --help` loaded."""
    result = subprocess.run([sys.executable, "-X", "importtime", *command()[1:]], capture_output=True, text=True,
                            check=True, env=environment(), cwd=ROOT)
    found: dict[str, float] = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        top = name.strip().split(".")[0]
        if top in HEAVY and name.strip() == top:
            found[top] = int(cumulative) / 1e6
    return sorted(found.items(), key=lambda item: -item[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    timed_run()  # warm-up: bytecode and file caches
    times = [timed_run() for _ in range(args.runs)]
    print(f"cftools --help: median {statistics.median(times):.3f} s over {args.runs} runs "
          f"(min {min(times):.3f}, max {max(times):.3f})")
    try:
        load = os.getloadavg()[0]
        print(f"load average while measuring: {load:.1f} on {os.cpu_count()} CPUs")
    except OSError:
        pass
    heavy = heavy_imports()
    print("heavy modules imported at start: " + (", ".join(f"{name} {s:.2f} s" for name, s in heavy) or "none"))


if __name__ == "__main__":
    main()
