"""Rank mode on a tiny random LLaVA on CPU: shared-prefix option scoring vs one full forward pass per option.

    .venv/bin/python bench/bench_rank.py [--items 16] [--hidden 256] [--layers 4] [--threads 1]

Each item has an image and a long question (prompt prefix >= 600 tokens, image tokens included) and 4
options. "shared" runs the prefix once with use_cache and scores the 4 options in one pass over the
repeated cache (cftools.vlm.HFVisionModel.score_options); "full" runs prefix + option once per option
(score_options_full). Items are timed interleaved. Prints ms per item for both, the speed-up, and the largest score difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fixtures_eval import build_tiny_llava, png_bytes  # noqa: E402

from cftools.evaluate.vlm import HFVisionModel, Prompt  # noqa: E402

CONTEXT = ("The picture was taken on a rainy afternoon in a small harbour town. Several boats are moored along "
           "the quay, a man in a yellow coat is carrying a basket of fish, two children are watching seagulls, "
           "and a red car is parked next to the fish market with its lights on. ")
OPTIONS = ["red", "green", "dark blue", "black"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_llava(Path(tmp) / "model", hidden=args.hidden, layers=args.layers, image_size=112,
                                  patch=14, max_positions=2048)
        model = HFVisionModel.load(str(folder), device="cpu", dtype="fp32")
        prompts = []
        for i in range(args.items):
            image = Path(tmp) / f"{i}.png"
            image.write_bytes(png_bytes(i, size=120))
            question = f"{CONTEXT * 2}Question {i}: what color would the car be if it were repainted?"
            prompts.append(Prompt(question, [image], OPTIONS))
        encoded = model.processor(images=[model_image(prompts[0])], text=[model.prefix_text(prompts[0])],
                                  return_tensors="pt")
        prefix_tokens = encoded["input_ids"].shape[1]

        model.score_options([prompts[0]])  # warm-up
        model.score_options_full(prompts[0])
        shared, full, t_shared, t_full = [], [], 0.0, 0.0
        for prompt in prompts:  # interleaved, so a noisy neighbour slows both alike
            start = time.perf_counter()
            shared.append(model.score_options([prompt])[0])
            t_shared += time.perf_counter() - start
            start = time.perf_counter()
            full.append(model.score_options_full(prompt))
            t_full += time.perf_counter() - start
        diff = max(abs(a["sum_logprob"] - b["sum_logprob"]) for s, f in zip(shared, full) for a, b in zip(s, f))
        print(f"model: tiny LLaVA, hidden {args.hidden}, {args.layers} layers, {args.threads} threads, CPU fp32")
        print(f"{args.items} items x {len(OPTIONS)} options, prompt prefix {prefix_tokens} tokens "
              f"(image tokens included)")
        print(f"shared prefix (KV cache reused): {t_shared / args.items * 1000:.1f} ms/item")
        print(f"full forward per option:         {t_full / args.items * 1000:.1f} ms/item")
        print(f"speed-up: {t_full / t_shared:.2f}x   (largest score difference {diff:.2e} nats)")


def model_image(prompt: Prompt):  # noqa: ANN201
    from cftools.evaluate.vlm import load_image

    return load_image(prompt.images[0])


if __name__ == "__main__":
    main()
