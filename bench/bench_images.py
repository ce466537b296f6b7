"""Benchmark: candidate images from the embedded tiny pipeline on the CPU, batched vs one image per call.

    .venv/bin/python bench/bench_images.py [--pairs 8] [--per-prompt 4] [--repeats 3] [--threads 1]

64 images by default: 8 pairs x 4 candidates x (cause + effect). Batched is what `generate_pair` does (all
candidates of a pair, cause and effect, in one pipeline call: 8 images per call); one-at-a-time calls the same
pipeline with one prompt and one latent per call, from the same initial latents. Reports images/s for both and the
ratio (target: batched >= 2x). The best of --repeats runs is reported (the host is shared; the best run is the one
least slowed by neighbours), after one warm-up pair; images per CPU second of this process are printed
beside them, as they move less with the host's load.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cftools.imagegen import tiny  # noqa: E402
from cftools.imagegen.base import candidate_seed  # noqa: E402
from cftools.imagegen.diffusers_backend import DiffusersBackend, cpu_generators, initial_latents  # noqa: E402

CAUSE = "a woman in a yellow raincoat at a bus stop, {i}"
EFFECT = "the woman in the yellow raincoat, soaked and smiling, on the bus, {i}"


def batched(backend: DiffusersBackend, pairs: int, n: int) -> int:
    made = 0
    for i in range(pairs):
        results = backend.generate_pair(CAUSE.format(i=i), EFFECT.format(i=i), n=n, generator_key=f"pair-{i}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--per-prompt", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    # one thread by default: on a small shared host, torch's two-thread kernels stall whenever a neighbour takes
    # a core, and the figures then measure the neighbours; --threads 0 leaves torch's own choice
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: torch's choice)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as cache:
        folder = tiny.embedded_pipeline_folder(Path(cache))
        backend = DiffusersBackend(folder, default_steps=tiny.TINY_STEPS, default_guidance=tiny.TINY_GUIDANCE)
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
