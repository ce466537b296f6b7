"""Where the GPU time of `generate` goes at batch 32 on the LLaVA-1.5-7B shape, and what the runner's switches do.

    python3 bench/gpu_profile.py --out FILE.jsonl --table-dir DIR [--budget SECONDS]
    .venv/bin/python bench/gpu_profile.py --device cpu --small    # the same code on a 2-layer model (CPU)

Without CUDA (and without --device cpu) it says so and exits 0. Every figure is one JSON line, printed and appended
to --out as soon as it is measured. The model is built from configs straight on the device (random weights, bf16)
and wrapped in `HFVisionModel` (cftools' runner); the questions are C-VQA-like (two questions per image, one image
each, 16 new tokens), prepared once (`prepare("generate", ...)`), so nothing here times the CPU preparation.

- `facts`: the attention implementation the language model and the vision tower use, versions, tokens a question.
- `time`: at one batch (CUDA events, median of --repeats after a warm-up): the vision tower alone (image features
  through the projector), the prompt alone as one forward pass, `generate(max_new_tokens=1)` (prefill through
  generate) and the full `generate` (16 tokens); the difference over 15 is the time of one decoding step.
- `profile`: torch.profiler over one full generate: the top-20 ops by GPU time (a table written to
  --table-dir/profile_top20.txt), the GPU's busy time (the sum of its kernels) against the wall time.
- `variants`: the runner's switches side by side on the same --batches batches: questions/s of each and the
  answers changed against the baseline (and a second baseline run: the GPU's own run-to-run differences).
  `baseline` = transformers' generate() as the runner calls it; `sdpa`/`eager` = the other attention
  implementation; `static` = a static KV cache (`cache_implementation="static"`, no compilation);
  `static-compiled` = the same, compiled by transformers (torch.compile of the decoding step, CUDA graphs): what
  `CFTOOLS_COMPILE=1` does; its first call (the compilation) timed apart. (A plain greedy loop of the runner's own,
  with no host sync between steps, was measured in the first round too and removed: no faster than generate().)
- `prefill` (`--parts prefill`; not in the default parts: ~1-2 minutes of compilation): the lever the `time` part
  points at next, the prefill's elementwise work between its matrix products. The language model's prompt pass
  eager against the same pass under `torch.compile` (inductor fuses RMSNorm, rotary embeddings, SiLU and the
  residual adds), and under `mode="max-autotune-no-cudagraphs"`: each one's compilation (first call) timed apart,
  then the median of --repeats, and the largest difference of the last position's logits against eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_models import append_result, build_llava_7b  # noqa: E402

NEW_TOKENS = 16


def question_prompts(folder: Path, count: int) -> list[Any]:
    """COUNT prompts worded like `cftools eval`'s C-VQA questions: two per image (original, counterfactual)."""
    from fixtures_eval import png_bytes

    from cftools.evaluate.vlm import Prompt

    prompts = []
    for i in range(count):
        image = folder / f"image-{i // 2}.png"
        if not image.exists():
            image.write_bytes(png_bytes(i // 2, size=64))
        question = (f"How many birds are there in picture {i // 2}?" if i % 2 == 0
                    else f"How many birds would there be if {i // 2} more flew in?")
        prompts.append(Prompt(text=f"{question}\nAnswer the question using a single word or number.",
                              images=[image], max_new_tokens=NEW_TOKENS))
    return prompts


class Clock:
    """Times a callable: CUDA events on a GPU (median of REPEATS after one warm-up call), the host clock on the CPU."""

    def __init__(self, device: str) -> None:
        self.device = device

    def seconds(self, work: Callable[[], Any], repeats: int) -> float:
        import torch

        work()
        times = []
        for _ in range(repeats):
            if self.device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                work()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1000)
            else:
                started = time.perf_counter()
                work()
                times.append(time.perf_counter() - started)
        return statistics.median(times)

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()


def attention_facts(model: Any) -> dict[str, Any]:
    """The attention implementation each part of MODEL says it uses."""
    config = model.config
    parts = {"model": config, "text": getattr(config, "text_config", None),
             "vision": getattr(config, "vision_config", None)}
    return {name: getattr(part, "_attn_implementation", None) for name, part in parts.items() if part is not None}


def timings(runner: Any, inputs: dict[str, Any], clock: Clock, repeats: int) -> dict[str, float]:
    """Seconds (median) of the vision tower, the prompt's forward pass, generate of 1 and of NEW_TOKENS tokens."""
    import torch

    model = runner.model
    pad = runner.tokenizer.pad_token_id
    text_inputs = {k: v for k, v in inputs.items() if k != "pixel_values"}

    def vision() -> Any:
        return model.get_image_features(pixel_values=inputs["pixel_values"],
                                        vision_feature_layer=model.config.vision_feature_layer,
                                        vision_feature_select_strategy=model.config.vision_feature_select_strategy)

    def prompt_pass() -> Any:
        return model(**inputs, use_cache=True, **runner._keep(1))

    def text_pass() -> Any:  # the language model alone on the same tokens (image tokens embedded as text ones)
        ids = text_inputs["input_ids"].clamp(max=model.config.text_config.vocab_size - 1)
        return model.model.language_model(input_ids=ids, attention_mask=text_inputs["attention_mask"], use_cache=True)

    def generate(tokens: int) -> Callable[[], Any]:
        return lambda: model.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                      num_beams=1, pad_token_id=pad)

    figures = {}
    with torch.inference_mode():
        for name, work in (("vision_tower", vision), ("prompt_forward", prompt_pass),
                           ("language_model_prompt_forward", text_pass), ("generate_1", generate(1)),
                           (f"generate_{NEW_TOKENS}", generate(NEW_TOKENS))):
            try:
                figures[name] = round(clock.seconds(work, repeats), 4)
            except Exception as exc:  # noqa: BLE001 - one figure that cannot be had does not stop the rest
                figures[f"{name}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if f"generate_{NEW_TOKENS}" in figures and "generate_1" in figures:
        figures["decode_step"] = round((figures[f"generate_{NEW_TOKENS}"] - figures["generate_1"]) / (NEW_TOKENS - 1),
                                       5)
    return figures


def prefill_compiled(runner: Any, inputs: dict[str, Any], clock: Clock, repeats: int,
                     deadline: float) -> list[dict[str, Any]]:
    """The language model's prompt pass eager and compiled (see the module's `prefill`): one record per way."""
    import torch

    model = runner.model
    language_model = model.model.language_model
    ids = inputs["input_ids"].clamp(max=model.config.text_config.vocab_size - 1)
    mask = inputs["attention_mask"]
    records: list[dict[str, Any]] = []
    reference = None
    for way, mode in (("eager", None), ("compiled", "default"), ("compiled-max-autotune", "max-autotune-no-cudagraphs")):
        if mode is not None and deadline - time.monotonic() < 90:
            records.append({"way": way, "skipped": f"{deadline - time.monotonic():.0f} s left"})
            continue
        forward = language_model if mode is None else torch.compile(language_model, mode=mode, dynamic=False)
        try:
            with torch.inference_mode():
                clock.sync()
                started = time.perf_counter()
                last = forward(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state[:, -1].float()
                clock.sync()
                first = time.perf_counter() - started
                seconds = clock.seconds(lambda: forward(input_ids=ids, attention_mask=mask, use_cache=False),
                                        repeats)
        except Exception as exc:  # noqa: BLE001 - a way that fails is a result
            records.append({"way": way, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
            continue
        reference = last if reference is None else reference
        records.append({"way": way, "first_call_s": round(first, 3), "seconds": round(seconds, 4),
                        "tokens": int(mask.sum()), "max_abs_diff_vs_eager": round(float((last - reference).abs()
                                                                                          .max()), 5)})
        torch._dynamo.reset()  # the next way compiles afresh
    return records


def profile_one(runner: Any, inputs: dict[str, Any], table_dir: Path | None, device: str) -> dict[str, Any]:
    """torch.profiler over one full generate: the top-20 table (to TABLE_DIR), busy GPU time against the wall."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    model, pad = runner.model, runner.tokenizer.pad_token_id
    with torch.inference_mode(), profile(activities=activities) as prof:
        started = time.perf_counter()
        model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
                       pad_token_id=pad)
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - started
    events = prof.key_averages()
    sort = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=20, max_name_column_width=70)
    by_input = prof.key_averages(group_by_input_shape=True).table(sort_by=sort, row_limit=25,
                                                                  max_name_column_width=50)
    if table_dir:
        (table_dir / "profile_top20.txt").write_text(table + "\n\nby input shape:\n" + by_input, encoding="utf-8")
    print(table)
    # kernels only (an op's self time on the GPU is its kernels' time again): the profiler's "Self CUDA time total"
    busy = sum(getattr(e, "self_device_time_total", 0) for e in events
               if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA")) / 1e6
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))
    return {"wall_s": round(wall, 4), "gpu_busy_s": round(busy, 4), "gpu_busy_fraction": round(busy / wall, 3),
            "kernel_launches": launches}


def run_variant(runner: Any, batches: list[list[Any]], prepared: list[Any], clock: Clock) -> tuple[float, list[str]]:
    """Seconds of the runner's generate over BATCHES (their inputs PREPARED ahead), and the answers."""
    clock.sync()
    started = time.perf_counter()
    replies: list[str] = []
    for prompts, ready in zip(batches, prepared):
        replies += runner.generate(prompts, prepared=ready)
    clock.sync()
    return time.perf_counter() - started, replies


def switch(runner: Any, name: str, baseline_attention: str) -> Callable[[], None]:
    """Set RUNNER to variant NAME; returns what undoes it."""
    from cftools.evaluate.vlm import COMPILED_DECODING

    if name in ("sdpa", "eager"):
        runner.model.set_attn_implementation(name)
        return lambda: runner.model.set_attn_implementation(baseline_attention)
    if name in ("static", "static-compiled"):
        runner.generate_options = {**COMPILED_DECODING, "disable_compile": name == "static"}
        return lambda: setattr(runner, "generate_options", {})
    return lambda: None


def variants(runner: Any, prompts: list[Any], batch: int, args: argparse.Namespace, clock: Clock,
             deadline: float) -> None:
    """Questions/s and changed answers of each variant against the baseline, on the same prepared batches."""
    batches = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
    prepared = [runner.prepare("generate", b) for b in batches]
    attention = attention_facts(runner.model).get("text") or "sdpa"
    names = ["baseline", "baseline-again", "eager" if attention != "eager" else "sdpa", "static",
             "static-compiled"]
    if args.device != "cuda":
        names.remove("static-compiled")  # transformers compiles on accelerators only
    reference: list[str] = []
    for name in names:
        if name not in args.variants.split(",") and not name.startswith("baseline"):
            continue
        if deadline - time.monotonic() < (120 if name == "static-compiled" else 20):
            append_result(args.out, {"part": "profile", "what": "variant-skipped", "variant": name,
                                     "why": f"{deadline - time.monotonic():.0f} s left"})
            continue
        undo = switch(runner, name, attention)
        try:
            first_s, _ = run_variant(runner, batches[:1], prepared[:1], clock)  # warm-up (or compilation)
            seconds, replies = run_variant(runner, batches, prepared, clock)
        except Exception as exc:  # noqa: BLE001 - a variant that fails is a result
            append_result(args.out, {"part": "profile", "what": "variant-failed", "variant": name,
                                     "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
            continue
        finally:
            undo()
        reference = reference or replies
        append_result(args.out, {"part": "profile", "what": "variant", "variant": name, "batch": batch,
                                 "questions": len(replies), "seconds": round(seconds, 3),
                                 "questions_per_s": round(len(replies) / seconds, 2),
                                 "first_batch_s": round(first_s, 3),
                                 "changed_vs_baseline": sum(a != b for a, b in zip(reference, replies))})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="append every figure to this JSON-lines file")
    parser.add_argument("--table-dir", type=Path, help="where the profiler's table is written")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true", help="2 thin layers instead of 7B (a CPU check of the path)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=4, help="batches each variant answers")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per figure of the time part")
    parser.add_argument("--variants", default="eager,sdpa,static,static-compiled")
    parser.add_argument("--parts", default="time,profile,variants",
                        help="which parts to run, of time, profile, variants, prefill")
    parser.add_argument("--budget", type=float, default=300,
                        help="seconds this may take (variants are skipped past it)")
    args = parser.parse_args()
    import torch
    import transformers

    from cftools.evaluate.vlm import HFVisionModel

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_profile: no CUDA GPU here; nothing measured (use --device cpu --small for a CPU check)")
        append_result(args.out, {"part": "profile", "skipped": "no CUDA GPU"})
        return 0
    deadline = time.monotonic() + args.budget
    dtype = "bf16" if args.device == "cuda" else "fp32"
    model, processor = build_llava_7b(args.device, dtype, small=args.small)
    runner = HFVisionModel(model, processor, args.device, dtype, name="llava-7b-shaped")
    clock = Clock(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        prompts = question_prompts(Path(tmp), args.batch * args.batches)
        inputs = runner._to_device(runner.prepare("generate", prompts[:args.batch]).groups[0][1])
        mask = inputs["attention_mask"]
        append_result(args.out, {"part": "profile", "what": "facts", "attention": attention_facts(model),
                                 "torch": torch.__version__, "transformers": transformers.__version__,
                                 "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                                 "batch": args.batch, "prompt_tokens_max": mask.shape[1],
                                 "prompt_tokens_mean": round(float(mask.sum()) / mask.shape[0], 1),
                                 "padding_fraction": round(1 - float(mask.sum()) / mask.numel(), 4)})
        parts = set(args.parts.split(","))
        if "time" in parts:
            append_result(args.out, {"part": "profile", "what": "time", "batch": args.batch,
                                     **timings(runner, inputs, clock, args.repeats)})
        if "profile" in parts:
            append_result(args.out, {"part": "profile", "what": "profile", "batch": args.batch,
                                     **profile_one(runner, inputs, args.table_dir, args.device)})
        if "prefill" in parts:
            for record in prefill_compiled(runner, inputs, clock, args.repeats, deadline):
                append_result(args.out, {"part": "profile", "what": "prefill", "batch": args.batch, **record})
        if "variants" in parts:
            variants(runner, prompts, args.batch, args, clock, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
