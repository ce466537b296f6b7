"""Benchmark: edit candidates from the embedded tiny InstructPix2Pix pipeline on the CPU, batched vs one per call;
with --model, a real edit pipeline (on a GPU) through `generate edits`' backend beside raw diffusers.

    .venv/bin/python bench/bench_edits.py [--items 8] [--per-item 8] [--repeats 3] [--threads 1]
    .venv/bin/python bench/bench_edits.py --model FOLDER_OR_ID [--size 512x512] [--steps 8] [--items 4]

Batched is what `DiffusersEditBackend.edit` does (all candidates of an item in one pipeline call); one per call
calls the same pipeline with one prompt, one image and one generator per call, seeded alike. Reports images/s for
both and the ratio (target: batched >= 2x). With --model, the backend's images/s beside raw diffusers calling the
loaded pipeline with the same batch and settings (target >= 0.95x). The best of --repeats runs is reported, after
a warm-up item.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import PIL.Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cftools.imagegen import tiny_edit  # noqa: E402
from cftools.imagegen.edits import EditSettings, make_edit_backend  # noqa: E402

INSTRUCTION = "turn the television off, {i}"


def original(i: int, size: int = 64) -> PIL.Image.Image:
    return PIL.Image.fromarray(np.random.default_rng(i).integers(0, 255, (size, size, 3), dtype=np.uint8))


def batched(backend, items: int, n: int, settings: dict) -> int:  # noqa: ANN001
    made = 0
    for i in range(items):
        made += sum(r.ok for r in backend.edit(original(i), INSTRUCTION.format(i=i), EditSettings(n=n, **settings)))
    return made


def raw_calls(backend, items: int, n: int, settings: dict, per_call: int) -> int:  # noqa: ANN001
    """The loaded pipeline called directly, PER_CALL images a call, with the backend's steps, guidance and size."""
    import torch

    pipe = backend.pipeline
    steps = settings.get("steps") or backend.default_steps
    width, height = backend._size(original(0), settings.get("size"))  # noqa: SLF001 - the same size as the backend
    made = 0
    for i in range(items):
        image = original(i).resize((width, height))
        for start in range(0, n, per_call):
            seeds = [settings.get("seed", 0) + k for k in range(start, min(n, start + per_call))]
            out = pipe(prompt=[INSTRUCTION.format(i=i)] * len(seeds), image=[image] * len(seeds),
                       generator=[torch.Generator("cpu").manual_seed(s) for s in seeds], output_type="np",
                       **backend.call_kwargs(steps, backend.default_guidance))
            made += int(np.isfinite(np.asarray(out.images)).all()) * len(seeds)
    return made


def best_rate(run, repeats: int) -> tuple[float, int]:  # noqa: ANN001
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        made = run()
        rates.append(made / (time.perf_counter() - started))
    return max(rates), made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--per-item", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's choice)")
    parser.add_argument("--model", help="a real edit pipeline folder or hub id (downloads allowed)")
    parser.add_argument("--size", help="WIDTHxHEIGHT for --model (default: the original's)")
    parser.add_argument("--steps", type=int, help="denoising steps for --model")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    settings = {"seed": 0, **({"size": args.size} if args.size else {}), **({"steps": args.steps} if args.steps else {})}
    with tempfile.TemporaryDirectory() as cache:
        if args.model:
            backend = make_edit_backend({"allow_downloads": True, "allow_non_commercial": True}, model=args.model)
        else:
            backend = make_edit_backend({"cache_dir": cache})
        batched(backend, 1, args.per_item, settings)  # warm-up: first-call allocations and kernel choices
        fast, made = best_rate(lambda: batched(backend, args.items, args.per_item, settings), args.repeats)
        if args.model:
            raw, made_raw = best_rate(lambda: raw_calls(backend, args.items, args.per_item, settings,
                                                        args.per_item), args.repeats)
            print(f"{args.model} on {backend.device} ({backend.dtype}), licence {backend.licence}, best of "
                  f"{args.repeats}: generate edits' backend {fast:.3f} images/s, raw diffusers {raw:.3f} images/s "
                  f"({made} / {made_raw} images): {fast / raw:.3f}x (target >= 0.95x)")
            return
        raw_calls(backend, 1, 1, settings, 1)
        slow, made_slow = best_rate(lambda: raw_calls(backend, args.items, args.per_item, settings, 1), args.repeats)
    print(f"tiny InstructPix2Pix pipeline, CPU ({torch.get_num_threads()} threads), {tiny_edit.TINY_EDIT_SIZE}, "
          f"{tiny_edit.TINY_EDIT_STEPS} steps, best of {args.repeats}")
    print(f"batched ({args.per_item} images per call): {made} images, {fast:.1f} images/s")
    print(f"one image per call:        {made_slow} images, {slow:.1f} images/s")
    print(f"ratio batched / one per call: {fast / slow:.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
