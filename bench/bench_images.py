"""Benchmark: candidate images from the embedded tiny pipeline on the CPU, batched vs one image per call.

    .venv/bin/python bench/bench_images.py [--pairs 8] [--per-prompt 4] [--repeats 3] [--threads 1]
    python3 bench/bench_images.py --device cuda [--batches 1,2,4,8,16] [--calls 2] [--out FILE.jsonl]

64 images by default: 8 pairs x 4 candidates x (cause + effect). Batched is what `generate_pair` does (all
candidates of a pair, cause and effect, in one pipeline call: 8 images per call); one-at-a-time calls the same
pipeline with one prompt and one latent per call, from the same initial latents. Reports images/s for both and the
ratio (target: batched >= 2x). The best of --repeats runs is reported (the host is shared; the best run is the one
least slowed by neighbours), after one warm-up pair; images per CPU second of this process are printed
beside them, as they move less with the host's load.

With --device cuda: an SD-1.5-shaped pipeline built from configs (random weights, bench/gpu_models.py) in fp16 at
512x512, 20 DDIM steps, guidance 7.5, through `generate images`' backend (`DiffusersBackend.generate_pair`: cause
and effect candidates of a pair in one call, so an even batch of 2n) beside raw diffusers calling the same loaded
pipeline with the same batch (one prompt repeated, its own CUDA generator, PIL output): images/s of each and the
ratio (target >= 0.95x) per batch, the two interleaved call by call after one warm-up call of each per batch. Batch
1 is raw diffusers alone (a pair is two images). Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cftools.imagegen import tiny  # noqa: E402
from cftools.imagegen.base import PairSettings, candidate_seed  # noqa: E402
from cftools.evaluate.run import release_memory  # noqa: E402
from cftools.imagegen.diffusers_backend import (  # noqa: E402
    DiffusersBackend, DiffusersSettings, cpu_generators, initial_latents,
)

CAUSE = "a woman in a yellow raincoat at a bus stop, {i}"
EFFECT = "the woman in the yellow raincoat, soaked and smiling, on the bus, {i}"


def batched(backend: DiffusersBackend, pairs: int, n: int) -> int:
    made = 0
    for i in range(pairs):
        results = backend.generate_pair(CAUSE.format(i=i), EFFECT.format(i=i), generator_key=f"pair-{i}",
                                        settings=PairSettings(n=n))
        made += 2 * sum(r.ok for r in results)
    return made


def one_per_call(backend: DiffusersBackend, pairs: int, n: int) -> int:
    pipe = backend.pipeline
    side = tiny.TINY_SIZE // pipe.vae_scale_factor
    shape = (pipe.unet.config.in_channels, side, side)
    made = 0
    for i in range(pairs):
        for k in range(n):
            seed = candidate_seed(f"pair-{i}", "plain", k)
            for prompt in (CAUSE.format(i=i), EFFECT.format(i=i)):
                out = pipe(prompt=prompt, num_inference_steps=backend.default_steps,
                           guidance_scale=backend.default_guidance, generator=cpu_generators([seed]),
                           latents=initial_latents([seed], shape), output_type="np")
                made += int(np.isfinite(out.images).all())
    return made


def best_rate(run, backend: DiffusersBackend, pairs: int, n: int, repeats: int) -> tuple[float, float, int]:
    """(images per wall-clock second, images per CPU second of this process, images made), best runs."""
    rates, cpu_rates = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        made = run(backend, pairs, n)
        rates.append(made / (time.perf_counter() - started))
        cpu_rates.append(made / (time.process_time() - cpu_started))
    return max(rates), max(cpu_rates), made


def cuda_bench(args: argparse.Namespace) -> None:
    """cftools' text-to-image backend against raw diffusers on one SD-1.5-shaped pipeline, per batch size."""
    import torch
    from gpu_models import append_result, save_sd15_pipeline

    device = "cpu" if args.check_on_cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("bench_images: no CUDA GPU here; nothing measured")
        append_result(args.out, {"part": "images", "skipped": "no CUDA GPU"})
        return

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = (tiny.embedded_pipeline_folder(Path(tmp)) if args.check_on_cpu
                  else save_sd15_pipeline(Path(tmp) / "sd15", device="cuda"))
        built = time.perf_counter()
        backend = DiffusersBackend(folder, DiffusersSettings(device=device, default_steps=args.steps,
                                                             default_guidance=args.guidance))
        append_result(args.out, {"part": "images", "what": "start", "build_save_s": round(built - started, 2),
                                 "load_s": round(time.perf_counter() - built, 2), "dtype": backend.dtype,
                                 "size": "512x512", "steps": args.steps, "guidance": args.guidance,
                                 "scheduler": backend.scheduler,
                                 "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (a check)"})
        pipe = backend.pipeline

        def raw(batch: int, i: int) -> int:
            out = pipe(prompt=[CAUSE.format(i=i)] * batch, num_inference_steps=args.steps,
                       guidance_scale=args.guidance, generator=torch.Generator(device).manual_seed(i))
            return len(out.images)

        failed: list[str] = []

        def ours(batch: int, i: int) -> int:
            """Images made (a NaN image from random fp16 weights is made all the same; its failure is noted)."""
            results = backend.generate_pair(CAUSE.format(i=i), EFFECT.format(i=i),
                                            generator_key=f"pair-{i}", settings=PairSettings(n=batch // 2))
            failed.extend(r.as_dict().get("reason", "") for r in results if not r.ok)
            return 2 * len(results)

        for batch in args.batches:
            runs = {"raw": raw} if batch % 2 else {"raw": raw, "cftools": ours}
            try:
                seconds = {name: 0.0 for name in runs}
                made = {name: 0 for name in runs}
                for name, run in runs.items():  # warm-up: kernel choices for this shape
                    run(batch, 0)
                for i in range(1, args.calls + 1):
                    for name, run in runs.items():
                        sync()
                        started = time.perf_counter()
                        made[name] += run(batch, i)
                        sync()
                        seconds[name] += time.perf_counter() - started
            except Exception as exc:  # noqa: BLE001 - recorded (out of memory is a result here)
                append_result(args.out, {"part": "images", "batch": batch, "error": f"{type(exc).__name__}: "
                                         f"{str(exc).splitlines()[0][:300]}"})
                release_memory()
                continue
            rates = {name: made[name] / seconds[name] for name in runs}
            append_result(args.out, {"part": "images", "what": "rate", "batch": batch, "calls": args.calls,
                                     "images": made, **{f"{n}_images_per_s": round(r, 3) for n, r in rates.items()},
                                     "ratio": round(rates["cftools"] / rates["raw"], 4) if "cftools" in rates else None,
                                     "cftools_failed": len(failed), "failure": failed[0] if failed else None,
                                     "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
                                     if device == "cuda" else None})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batches", type=lambda t: [int(b) for b in t.split(",")], default=[1, 2, 4, 8, 16],
                        help="--device cuda: images per call")
    parser.add_argument("--calls", type=int, default=2, help="--device cuda: timed calls per batch and side")
    parser.add_argument("--steps", type=int, default=20, help="--device cuda: denoising steps")
    parser.add_argument("--guidance", type=float, default=7.5, help="--device cuda: guidance scale")
    parser.add_argument("--out", help="--device cuda: append every figure to this JSON-lines file")
    parser.add_argument("--check-on-cpu", action="store_true",
                        help="--device cuda's code path on the CPU with the embedded tiny pipeline (figures meaningless)")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--per-prompt", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    # one thread by default: on a small shared host, torch's two-thread kernels stall whenever a neighbour takes
    # a core, and the figures then measure the neighbours; --threads 0 leaves torch's own choice
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's choice)")
    args = parser.parse_args()
    if args.device == "cuda":
        cuda_bench(args)
        return
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as cache:
        folder = tiny.embedded_pipeline_folder(Path(cache))
        backend = DiffusersBackend(folder, DiffusersSettings(default_steps=tiny.TINY_STEPS,
                                                             default_guidance=tiny.TINY_GUIDANCE))
        batched(backend, 1, args.per_prompt)  # warm-up: first-call allocations and kernel choices
        one_per_call(backend, 1, 1)
        fast, fast_cpu, made = best_rate(batched, backend, args.pairs, args.per_prompt, args.repeats)
        slow, slow_cpu, made_slow = best_rate(one_per_call, backend, args.pairs, args.per_prompt, args.repeats)
    print(f"tiny pipeline, CPU ({torch.get_num_threads()} threads), {tiny.TINY_SIZE}x{tiny.TINY_SIZE}, "
          f"{tiny.TINY_STEPS} steps with guidance, best of {args.repeats}")
    print(f"batched ({2 * args.per_prompt} images per call): {made} images, {fast:.1f} images/s "
          f"({fast_cpu:.1f} per CPU second)")
    print(f"one image per call:           {made_slow} images, {slow:.1f} images/s ({slow_cpu:.1f} per CPU second)")
    print(f"ratio batched / one-at-a-time: {fast / slow:.2f}x wall-clock, {fast_cpu / slow_cpu:.2f}x CPU "
          f"(target >= 2x)")


if __name__ == "__main__":
    main()
