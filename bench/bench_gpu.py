"""The built-in eval runner on a GPU: a LLaVA-1.5-7B-shaped model (random weights, bf16) through `cftools eval`.

    python3 bench/bench_gpu.py [--part llava|agreement|all] [--out FILE.jsonl] [--budget SECONDS]
    python3 bench/bench_gpu.py --part llava --modes generate --batches 32,auto --compare-prefetch 32,auto
    python3 bench/bench_gpu.py --part llava --batches 32,64 --compare-compile 32,64
    .venv/bin/python bench/bench_gpu.py --device cpu --small      # the same code path on a 2-layer model (CPU)

Without CUDA (and without --device cpu) it says so and exits 0. Every figure is one JSON line, printed and
appended to --out as soon as it is measured, so a part stopped by its time limit keeps what it measured.

- `llava`: the model is built from configs straight on the GPU, saved to a folder and loaded back as `hf:FOLDER`
  (`HFVisionModel.load`, what `cftools eval --model hf:FOLDER` loads); time to first question = that load plus
  the first one-question eval. Then `run_eval` (the library call `cftools eval` makes, the loaded model handed in)
  in generate mode (C-VQA questions, 16 new tokens) and rank mode (CFMM questions, 2 or 4 options) at each of
  --batches ("auto" = the default batch size on CUDA): questions/s, peak GPU memory, and the fraction of the
  hardware limit. The limit is FLOPs / peak: 2 x language-model parameters (embeddings and the output layer, which
  runs for one token a step, excluded) x tokens
  (prompt tokens + new tokens, or prefix + option tokens), + 2 x vision parameters x 577 per image, over the bf16
  matrix rate measured here (an 8192^3 product) and over the datasheet's dense 989 TFLOP/s. Batch 1 asks
  --questions-b1 questions, the others --questions. Runs whose predicted time would pass --budget are skipped
  (recorded). Answers of each batch size are compared with batch 1's on the questions both asked. Before the
  timed runs, one untimed warm-up eval at the largest batch (the first timed run would otherwise pay for the
  kernels' first launches). --modes limits the modes. For each batch of --compare-prefetch the run is made
  twice, with the next batch prepared on a background thread (prefetch, the default on a GPU) and without
  (CFTOOLS_PREFETCH=0's path), side by side: questions/s of both, their ratio, and changed answers (none
  expected). Without --compare-prefetch every run prefetches. For each batch of --compare-compile, a generate run
  with compiled decoding (`cftools eval --compile`: a static cache compiled by transformers, prompts padded to
  64-token buckets) follows the eager one: questions/s of both, their ratio, the changed answers, and the
  compilation's time and shapes (its untimed warm-up eval on the same questions, so every bucket is compiled).
- `agreement`: the tiny test LLaVA (tests/fixtures_eval.py) on CPU fp32 and on CUDA fp32: identical answers, the
  largest option-score difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_models import append_result, build_llava_7b, parameter_counts  # noqa: E402

DATASHEET_TFLOPS = 989.0  # H100/H200 SXM dense bf16
IMAGE_PATCHES = 577  # 24 x 24 patches + the class token at 336 px
RANK_ITEMS_PER_QUESTION = 2  # a CFMM item asks two questions (original, counterfactual)


def measured_tflops(device: str) -> float | None:
    """The bf16 matrix rate of this GPU: median of 20 timed 8192^3 products on random data."""
    import torch

    if device != "cuda":
        return None
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    del a, b
    return 2 * 8192 ** 3 / sorted(times)[len(times) // 2] / 1e12


def counting_model(base: Any) -> Any:
    """BASE (an HFVisionModel) with a count of the prompt, option and image tokens it runs."""
    from cftools.evaluate.vlm import HFVisionModel

    class Counting(HFVisionModel):
        tokens = 0
        images = 0

        shapes: set = set()

        def _cpu_inputs(self, texts, prompts, bucket=None):  # noqa: ANN001, ANN202
            encoded = super()._cpu_inputs(texts, prompts, bucket)
            self.shapes.add(tuple(encoded["input_ids"].shape))  # (rows, prompt length): one graph each compiled
            self.tokens += int(encoded["attention_mask"].sum())
            self.images += sum(len(p.images) for p in prompts)
            return encoded

        def _option_ids(self, prompt, prefix):  # noqa: ANN001, ANN202
            ids = super()._option_ids(prompt, prefix)
            self.tokens += sum(len(i) for i in ids)
            return ids

    return Counting(base.model, base.processor, base.device, base.dtype, name=base.name)


def write_releases(folder: Path, items: int) -> dict[str, Path]:
    from fixtures_eval import cfmm_record, cvqa_record, png_bytes, write_release

    images = {}
    cvqa = [cvqa_record(i, "g", "1", str(i % 7), "number") for i in range(items)]
    cfmm = [cfmm_record(i, "g") for i in range(items)]
    for record in cvqa + cfmm:
        images[record["id"]] = png_bytes(int(record["id"].split("-")[1]), size=64)
    return {"generate": write_release(folder / "cvqa", cvqa, images),
            "rank": write_release(folder / "cfmm", cfmm, images)}


def answers(result: Any) -> dict[tuple, Any]:
    return {(p["id"], p["which"]): (p["raw"], p["parsed"]) for p in result.predictions}


def eval_once(release: Path, folder: Path, model: Any, mode: str, batch: Any, questions: int, out: Path,
              device: str, dtype: str, prefetch: bool = True, compiled: bool = False) -> tuple[dict[str, Any], Any]:
    """One `run_eval` at BATCH on QUESTIONS questions (the next batch prepared ahead when PREFETCH; decoding compiled
    when COMPILED): the figures, and the result."""
    import torch

    from cftools.evaluate.run import EvalOptions, run_eval

    first: list[float] = []
    notes: list[str] = []
    model.tokens = model.images = 0
    model.shapes = set()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    options = EvalOptions(mode=mode, batch_size=None if batch == "auto" else batch, device=device, dtype=dtype,
                          limit=max(1, questions // RANK_ITEMS_PER_QUESTION), out_dir=out, prefetch=prefetch,
                          compile=compiled)
    result = run_eval(release, f"hf:{folder}", options=options, answerer=model, notify=notes.append,
                      progress=lambda done, total: done and not first and first.append(time.perf_counter()))
    seconds = time.perf_counter() - started
    asked = result.config["questions"]
    figures = {"mode": mode, "batch": batch, "prefetch": prefetch, "compiled": compiled,
               "batch_size_used": result.config["batch_size"],
               "questions": asked,
               "seconds": round(seconds, 3), "questions_per_s": round(asked / seconds, 3),
               "first_batch_s": round(first[0] - started, 3) if first else None,
               "tokens": model.tokens, "images": model.images, "notes": notes,
               "shapes": [list(shape) for shape in sorted(model.shapes)]}
    if device == "cuda":
        figures["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    return figures, result


def limit_fraction(figures: dict[str, Any], params: dict[str, int], peak: float | None,
                   new_tokens: int) -> None:
    """Add FLOPs and the fraction of the hardware limit (measured peak and datasheet) to FIGURES."""
    tokens = figures["tokens"] + (new_tokens * figures["questions"] if figures["mode"] == "generate" else 0)
    flops = 2 * params["language"] * tokens + 2 * params["vision"] * IMAGE_PATCHES * figures["images"]
    figures["tflop"] = round(flops / 1e12, 2)
    for name, rate in (("measured", peak), ("datasheet", DATASHEET_TFLOPS)):
        if rate:
            limit = flops / (rate * 1e12)
            figures[f"limit_s_{name}"] = round(limit, 3)
            figures[f"fraction_of_limit_{name}"] = round(limit / figures["seconds"], 4)


def plan(batches: list[Any], modes: list[str], compare: list[Any],
         compile_at: list[Any] = ()) -> list[tuple[str, Any, bool, bool]]:
    """The runs (mode, batch, prefetch, compiled), the most telling first (a slow part is cut at its end): large
    batches, then auto, 8, 1; at the batches of COMPARE, without prefetching and then with it; at those of
    COMPILE_AT, a generate run with compiled decoding after the eager ones."""
    first = [b for b in (32, 64, "auto") if b in batches]
    order = first + sorted((b for b in batches if b not in first), key=lambda b: -b)  # then 8, then 1
    runs = []
    for batch in order:
        for mode in ("generate", "rank"):
            if mode in modes:
                prefetches = (False, True) if batch in compare else (True,)
                runs += [(mode, batch, prefetch, False) for prefetch in prefetches]
                if mode == "generate" and batch in compile_at:
                    runs.append((mode, batch, True, True))
    return runs


def warm_up(releases: dict[str, Path], folder: Path, model: Any, args: argparse.Namespace, tmp: Path) -> None:
    """Untimed generate evals, one per batch size of the plan (two batches' worth each), so that no timed run pays
    for the first launches of its shapes (measured on an H200: a second identical run at batch 32, warmed up at 64
    only, was 1.4x the first)."""
    from cftools.evaluate.run import AUTO_START_BATCH

    for batch in sorted({AUTO_START_BATCH if b == "auto" else b for b in args.batches if b != 1}):
        figures, _ = eval_once(releases["generate"], folder, model, "generate", batch, 2 * batch,
                               tmp / f"warm-up-{batch}", args.device, args.dtype)
        append_result(args.out, {"part": "llava", "what": "warm-up", "batch": batch, "seconds": figures["seconds"]})


def compare_prefetch(out: str | None, mode: str, batch: Any, results: dict[tuple, dict], tmp: Path) -> None:
    """Questions/s with and without prefetching at BATCH, their ratio, and how many answers differ."""
    from cftools.evaluate.run import load_run

    off, on = results.get((mode, batch, False)), results.get((mode, batch, True))
    if not off or not on:
        return
    before, after = (answers(load_run(tmp / run_folder(mode, batch, p))) for p in (False, True))
    shared = [k for k in before if k in after]
    append_result(out, {"part": "llava", "what": "prefetch", "mode": mode, "batch": batch,
                        "questions_per_s_without": off["questions_per_s"],
                        "questions_per_s_with": on["questions_per_s"],
                        "ratio": round(on["questions_per_s"] / off["questions_per_s"], 3),
                        "questions": len(shared), "changed": sum(before[k] != after[k] for k in shared)})


def run_folder(mode: str, batch: Any, prefetch: bool, compiled: bool = False) -> str:
    return f"{mode}-{batch}" + ("" if prefetch else "-no-prefetch") + ("-compiled" if compiled else "")


def compile_warm_up(releases: dict[str, Path], folder: Path, model: Any, args: argparse.Namespace, tmp: Path,
                    batch: Any) -> None:
    """An untimed compiled generate eval at BATCH on the timed run's questions (so every prompt bucket and the last
    batch's shape are compiled before it): the compilation's time and the shapes it compiled, recorded."""
    figures, _ = eval_once(releases["generate"], folder, model, "generate", batch, args.questions,
                           tmp / f"compile-warm-up-{batch}", args.device, args.dtype, compiled=True)
    append_result(args.out, {"part": "llava", "what": "compile-warm-up", "batch": batch, "seconds": figures["seconds"],
                             "first_batch_s": figures["first_batch_s"], "shapes": figures["shapes"]})


def compare_compiled(out: str | None, batch: Any, results: dict[tuple, dict], tmp: Path) -> None:
    """Questions/s of generate at BATCH eager and compiled, their ratio, and how many answers differ."""
    from cftools.evaluate.run import load_run

    eager, compiled = results.get(("generate", batch, True)), results.get(("generate", batch, True, True))
    if not eager or not compiled:
        return
    before, after = (answers(load_run(tmp / run_folder("generate", batch, True, c))) for c in (False, True))
    shared = [k for k in before if k in after]
    append_result(out, {"part": "llava", "what": "compiled", "mode": "generate", "batch": batch,
                        "questions_per_s_eager": eager["questions_per_s"],
                        "questions_per_s_compiled": compiled["questions_per_s"],
                        "ratio": round(compiled["questions_per_s"] / eager["questions_per_s"], 3),
                        "questions": len(shared), "changed": sum(before[k] != after[k] for k in shared)})


def llava_part(args: argparse.Namespace) -> None:
    import torch

    from cftools.evaluate.vlm import HFVisionModel

    deadline = time.monotonic() + args.budget
    peak = measured_tflops(args.device)
    append_result(args.out, {"part": "llava", "what": "peak", "measured_bf16_tflops": peak and round(peak, 1),
                             "datasheet_bf16_tflops": DATASHEET_TFLOPS,
                             "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                             "torch": torch.__version__})
    with tempfile.TemporaryDirectory(dir=model_tmp(args.tmp)) as tmp:
        folder = Path(tmp) / "llava-7b-shaped"
        started = time.perf_counter()
        model, processor = build_llava_7b(args.device, args.dtype, small=args.small)
        params = parameter_counts(model)
        built = time.perf_counter()
        model.save_pretrained(folder)
        processor.save_pretrained(folder)
        del model
        saved = time.perf_counter()
        if args.device == "cuda":
            torch.cuda.empty_cache()
        loaded = counting_model(HFVisionModel.load(str(folder), device=args.device, dtype=args.dtype))
        load_s = time.perf_counter() - saved
        releases = write_releases(Path(tmp), max(args.questions, args.questions_b1))
        first, _ = eval_once(releases["generate"], folder, loaded, "generate", 1, 2, Path(tmp) / "first",
                             args.device, args.dtype)
        append_result(args.out, {"part": "llava", "what": "start", "params": params, "dtype": args.dtype,
                                 "build_s": round(built - started, 2), "save_s": round(saved - built, 2),
                                 "load_s": round(load_s, 2),
                                 "time_to_first_question_s": round(load_s + first["first_batch_s"], 2),
                                 "image_processor": type(getattr(loaded.processor, "image_processor", None)).__name__,
                                 "first_eval": first})
        warm_up(releases, folder, loaded, args, Path(tmp))
        results: dict[tuple, dict] = {}
        for mode, batch, prefetch, compiled in plan(args.batches, args.modes, args.compare_prefetch,
                                                    args.compare_compile):
            questions = args.questions_b1 if batch == 1 else args.questions
            # the last run of this mode (the plan goes from large batches to small) predicts this one's time
            rate = next((r["questions_per_s"] for (m, *_), r in reversed(results.items()) if m == mode), None)
            left = deadline - time.monotonic()
            if compiled and left > 60:  # the compilation (about 50 s on an H200) stays out of the timed run
                compile_warm_up(releases, folder, loaded, args, Path(tmp), batch)
                left = deadline - time.monotonic()
            if rate and questions / rate * 1.2 + 5 > left:
                append_result(args.out, {"part": "llava", "what": "skipped", "mode": mode, "batch": batch,
                                         "prefetch": prefetch,
                                         "why": f"predicted {questions / rate:.0f} s, {left:.0f} s left"})
                continue
            try:
                figures, result = eval_once(releases[mode], folder, loaded, mode, batch, questions,
                                            Path(tmp) / run_folder(mode, batch, prefetch, compiled), args.device,
                                            args.dtype, prefetch and not args.control, compiled)
            except Exception as exc:  # noqa: BLE001 - recorded (an out-of-memory error is a result here)
                append_result(args.out, {"part": "llava", "what": "failed", "mode": mode, "batch": batch,
                                         "prefetch": prefetch,
                                         "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"})
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                continue
            limit_fraction(figures, params, peak, 16)
            results[(mode, batch, prefetch, True) if compiled else (mode, batch, prefetch)] = figures
            append_result(args.out, {"part": "llava", "what": "eval", **figures})
            if compiled:
                compare_compiled(args.out, batch, results, Path(tmp))
                continue
            if prefetch and batch in args.compare_prefetch:
                compare_prefetch(args.out, mode, batch, results, Path(tmp))
            if batch == 1 and prefetch:  # batch 1 runs last: its answers against every other batch size's
                compare_with_batch_1(args.out, mode, answers(result), results, Path(tmp))


def compare_with_batch_1(out: str | None, mode: str, reference: dict[tuple, Any], results: dict[tuple, dict],
                         tmp: Path) -> None:
    """Changed answers between batch 1 and each other batch size of MODE, on the questions both asked."""
    from cftools.evaluate.run import load_run

    for other_mode, batch, prefetch, *compiled in results:
        if other_mode == mode and batch != 1 and prefetch and not compiled:
            got = answers(load_run(tmp / f"{mode}-{batch}"))
            shared = [k for k in reference if k in got]
            append_result(out, {"part": "llava", "what": "batch_invariance", "mode": mode, "batch": batch,
                                "compared_with": 1, "questions": len(shared),
                                "changed": sum(reference[k] != got[k] for k in shared)})


def agreement_part(args: argparse.Namespace) -> None:
    """The tiny LLaVA's answers and option scores on the CPU (fp32) and on CUDA (fp32)."""
    from fixtures_eval import build_tiny_llava

    from cftools.evaluate.run import EvalOptions, run_eval

    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        folder = build_tiny_llava(Path(tmp) / "tiny")
        releases = write_releases(Path(tmp), 32)
        other = "cuda" if args.device == "cuda" else "cpu"
        for mode in ("generate", "rank"):
            runs = {}
            for device in ("cpu", other):
                runs[device] = run_eval(releases[mode], f"hf:{folder}",
                                        options=EvalOptions(mode=mode, batch_size=8, device=device, dtype="fp32",
                                                            out_dir=Path(tmp) / f"{mode}-{device}"))
            cpu, gpu = ({(p["id"], p["which"]): p for p in runs[d].predictions} for d in ("cpu", other))
            same = sum(cpu[k]["raw"] == gpu[k]["raw"] and cpu[k]["parsed"] == gpu[k]["parsed"] for k in cpu)
            diffs = [abs(a["sum_logprob"] - b["sum_logprob"]) for k in cpu if cpu[k]["scores"]
                     for a, b in zip(cpu[k]["scores"], gpu[k]["scores"])]
            append_result(args.out, {"part": "agreement", "mode": mode, "devices": ["cpu", other], "dtype": "fp32",
                                     "questions": len(cpu), "identical_answers": same,
                                     "agreement": round(same / len(cpu), 4),
                                     "max_score_diff_nats": max(diffs) if diffs else None})


def model_tmp(asked: str | None) -> str | None:
    """Where the 7B folder (14 GB) is saved: ASKED, else /dev/shm where it has room (memory, not disk: the save
    and the load measure cftools, not the disk), else the system's temporary folder."""
    import shutil

    if asked:
        return asked
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 20 * 2 ** 30 else None


def parse_batches(text: str) -> list[Any]:
    return [b if b == "auto" else int(b) for b in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("llava", "agreement", "all"), default="all")
    parser.add_argument("--out", help="append every figure to this JSON-lines file")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dtype", default=None, help="bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--small", action="store_true", help="2 thin layers instead of 7B (a CPU check of the path)")
    parser.add_argument("--batches", type=parse_batches, default=parse_batches("1,8,32,64,auto"))
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["generate", "rank"],
                        help="the llava part's modes (generate,rank)")
    parser.add_argument("--control", action="store_true",
                        help="the compared 'with' runs prefetch nothing either: the changed answers of two identical "
                             "runs (the GPU's own run-to-run differences), to read the prefetch comparison against")
    parser.add_argument("--compare-prefetch", type=parse_batches, default=[],
                        help="batches run both with and without prefetching, side by side (e.g. 32,auto)")
    parser.add_argument("--compare-compile", type=parse_batches, default=[],
                        help="batches whose generate run is made again with compiled decoding (e.g. 32,64)")
    parser.add_argument("--questions", type=int, default=256, help="questions per run at batch > 1")
    parser.add_argument("--questions-b1", type=int, default=32, help="questions at batch 1")
    parser.add_argument("--budget", type=float, default=240, help="seconds the llava part may take")
    parser.add_argument("--tmp", default=None, help="where the model folder is saved (default: /dev/shm when it has "
                                                    "20 GiB free, else the system's temporary folder)")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU here; nothing measured (use --device cpu --small for a CPU check)")
        append_result(args.out, {"part": args.part, "skipped": "no CUDA GPU"})
        return 0
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.part in ("agreement", "all"):
        agreement_part(args)
    if args.part in ("llava", "all"):
        llava_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
