"""Benchmark: edit candidates from the embedded tiny InstructPix2Pix pipeline on the CPU, batched vs one per call;
with --model, a real edit pipeline (on a GPU) through `generate edits`' backend beside raw diffusers.

    .venv/bin/python bench/bench_edits.py [--items 8] [--per-item 8] [--repeats 3] [--threads 1]
    .venv/bin/python bench/bench_edits.py --model FOLDER_OR_ID [--size 512x512] [--steps 8] [--items 4]
    python3 bench/bench_edits.py --device cuda [--batches 1,4,8,16] [--calls 2] [--out FILE.jsonl]

Batched is what `DiffusersEditBackend.edit` does (all candidates of an item in one pipeline call); one per call
calls the same pipeline with one prompt, one image and one generator per call, seeded alike. Reports images/s for
both and the ratio (target: batched >= 2x). With --model, the backend's images/s beside raw diffusers calling the
loaded pipeline with the same batch and settings (target >= 0.95x). The best of --repeats runs is reported, after
a warm-up item.

With --device cuda: an InstructPix2Pix pipeline of SD-1.5's shape built from configs (random weights,
bench/gpu_models.py), fp16, 512x512, 20 steps, guidance 7.5, through `generate edits`' backend beside raw diffusers
on the same loaded pipeline, per batch (all candidates of an item in one call), interleaved call by call after one
warm-up call of each: images/s and the ratio (target >= 0.95x). Without CUDA it says so and exits 0.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

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


def raw_calls(backend, items: int, n: int, settings: dict, per_call: int,  # noqa: ANN001
              count_all: bool = False) -> int:
    """The loaded pipeline called directly, PER_CALL images a call, with the backend's steps, guidance and size;
    the finite images made (every image made with COUNT_ALL)."""
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
            made += (1 if count_all else int(np.isfinite(np.asarray(out.images)).all())) * len(seeds)
    return made


def best_rate(run, repeats: int) -> tuple[float, int]:  # noqa: ANN001
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        made = run()
        rates.append(made / (time.perf_counter() - started))
    return max(rates), made


def cuda_bench(args: argparse.Namespace) -> None:
    """`generate edits`' backend against raw diffusers on one SD-1.5-shaped InstructPix2Pix pipeline, per batch."""
    import torch
    from gpu_models import append_result, save_sd15_pipeline

    device = "cpu" if args.check_on_cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_edits: no CUDA GPU here; nothing measured")
        append_result(args.out, {"part": "edits", "skipped": "no CUDA GPU"})
        return
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = (tiny_edit.embedded_edit_pipeline_folder(Path(tmp)) if args.check_on_cpu
                  else save_sd15_pipeline(Path(tmp) / "ip2p", edit=True, device="cuda"))
        built = time.perf_counter()
        backend = make_edit_backend({"device": device, "steps": args.steps or 20, "guidance": 7.5,
                                     "licence": "Apache-2.0"}, model=str(folder))
        settings = {"seed": 0, "size": args.size or ("512x512" if device == "cuda" else "64x64")}
        append_result(args.out, {"part": "edits", "what": "start", "build_save_s": round(built - started, 2),
                                 "load_s": round(time.perf_counter() - built, 2), "dtype": backend.dtype,
                                 "size": settings["size"], "steps": backend.default_steps,
                                 "guidance": backend.default_guidance, "pipeline": type(backend.pipeline).__name__,
                                 "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (a check)"})
        failed: list[str] = []

        def ours(batch: int) -> int:
            """Images made (a NaN image from random fp16 weights is made all the same; its failure is noted)."""
            results = backend.edit(original(0), INSTRUCTION.format(i=0), EditSettings(n=batch, **settings))
            failed.extend(r.as_dict().get("reason", "") for r in results if not r.ok)
            return len(results)

        runs = {"raw": lambda b: raw_calls(backend, 1, b, settings, b, count_all=True), "cftools": ours}
        for batch in args.batches:
            seconds, made = {name: 0.0 for name in runs}, {name: 0 for name in runs}
            try:
                for run in runs.values():  # warm-up: kernel choices for this shape
                    run(batch)
                for _ in range(args.calls):
                    for name, run in runs.items():
                        if device == "cuda":
                            torch.cuda.synchronize()
                        started = time.perf_counter()
                        made[name] += run(batch)
                        if device == "cuda":
                            torch.cuda.synchronize()
                        seconds[name] += time.perf_counter() - started
            except Exception as exc:  # noqa: BLE001 - recorded (out of memory is a result here)
                append_result(args.out, {"part": "edits", "batch": batch, "error": f"{type(exc).__name__}: "
                                         f"{str(exc).splitlines()[0][:300]}"})
                continue
            rates = {name: made[name] / seconds[name] for name in runs}
            append_result(args.out, {"part": "edits", "what": "rate", "batch": batch, "calls": args.calls,
                                     "images": made, **{f"{n}_images_per_s": round(r, 3) for n, r in rates.items()},
                                     "ratio": round(rates["cftools"] / rates["raw"], 4),
                                     "cftools_failed": len(failed), "failure": failed[0] if failed else None,
                                     "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
                                     if device == "cuda" else None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--per-item", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's choice)")
    parser.add_argument("--model", help="a real edit pipeline folder or hub id (downloads allowed)")
    parser.add_argument("--size", help="WIDTHxHEIGHT for --model (default: the original's)")
    parser.add_argument("--steps", type=int, help="denoising steps for --model")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batches", type=lambda t: [int(b) for b in t.split(",")], default=[1, 4, 8, 16],
                        help="--device cuda: candidates per item (images per call)")
    parser.add_argument("--calls", type=int, default=2, help="--device cuda: timed calls per batch and side")
    parser.add_argument("--out", help="--device cuda: append every figure to this JSON-lines file")
    parser.add_argument("--check-on-cpu", action="store_true",
                        help="--device cuda's code path on the CPU with the embedded tiny pipeline (figures meaningless)")
    args = parser.parse_args()
    if args.device == "cuda":
        cuda_bench(args)
        return
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
