"""Gather the GPU suite's JSON lines into one `gpu_results.json` and a readable `gpu_results.md`.

    python3 bench/gpu_report.py OUT_DIR

Reads OUT_DIR/gpu_results.jsonl (the benches' figures) and OUT_DIR/parts.jsonl (each part's exit status and
seconds, written by bench/gpu_suite.sh).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read_lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a part's time limit
            continue
    return lines


def markdown(figures: list[dict], parts: list[dict]) -> str:
    out = ["# GPU suite results", "", "| part | exit | seconds | timed out |", "|---|---|---|---|"]
    out += [f"| {p['part']} | {p['rc']} | {p['seconds']} | {p['rc'] in (124, 137)} |" for p in parts]
    evals = [f for f in figures if f.get("what") == "eval"]
    if evals:
        out += ["", "## Built-in runner, LLaVA-1.5-7B-shaped (bf16)", "",
                "| mode | batch | prefetch | compiled | used | questions | s | questions/s | first batch s | peak GiB "
                "| TFLOP | fraction of limit (measured peak) | (datasheet) | notes |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {f['mode']} | {f['batch']} | {f.get('prefetch', True)} | {f.get('compiled', False)} | "
                f"{f['batch_size_used']} | "
                f"{f['questions']} | {f['seconds']} | "
                f"{f['questions_per_s']} | {f['first_batch_s']} | {f.get('peak_memory_gib')} | {f.get('tflop')} | "
                f"{f.get('fraction_of_limit_measured')} | {f.get('fraction_of_limit_datasheet')} | "
                f"{'; '.join(f.get('notes') or [])} |" for f in evals]
    ratios = [f for f in figures if f.get("what") == "prefetch"]
    if ratios:
        out += ["", "## Prefetching the next batch: with vs without", "",
                "| mode | batch | questions/s without | with | ratio | questions | changed answers |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {f['mode']} | {f['batch']} | {f['questions_per_s_without']} | {f['questions_per_s_with']} | "
                f"{f['ratio']} | {f['questions']} | {f['changed']} |" for f in ratios]
    compiled = [f for f in figures if f.get("what") == "compiled"]
    if compiled:
        out += ["", "## Compiled decoding (eval --compile): eager vs compiled", "",
                "| batch | questions/s eager | compiled | ratio | questions | changed answers |",
                "|---|---|---|---|---|---|"]
        out += [f"| {f['batch']} | {f['questions_per_s_eager']} | {f['questions_per_s_compiled']} | {f['ratio']} | "
                f"{f['questions']} | {f['changed']} |" for f in compiled]
    for name in ("images", "edits"):
        rates = [f for f in figures if f.get("part") == name and f.get("what") == "rate"]
        if rates:
            out += ["", f"## {name}: cftools vs raw diffusers (fp16, 512x512, 20 steps, CFG 7.5)", "",
                    "| batch | raw images/s | cftools images/s | ratio | peak GiB |", "|---|---|---|---|---|"]
            out += [f"| {f['batch']} | {f.get('raw_images_per_s')} | {f.get('cftools_images_per_s')} | "
                    f"{f.get('ratio')} | {f.get('peak_memory_gib')} |" for f in rates]
    rest = [f for f in figures if f.get("what") not in ("eval", "rate", "prefetch", "compiled")]
    if rest:
        out += ["", "## Other figures", ""] + [f"- `{json.dumps(f)}`" for f in rest]
    return "\n".join(out) + "\n"


def main() -> None:
    out = Path(sys.argv[1])
    figures = read_lines(out / "gpu_results.jsonl")
    parts = read_lines(out / "parts.jsonl")
    (out / "gpu_results.json").write_text(json.dumps({"parts": parts, "figures": figures}, indent=1),
                                          encoding="utf-8")
    (out / "gpu_results.md").write_text(markdown(figures, parts), encoding="utf-8")
    print(markdown(figures, parts))


if __name__ == "__main__":
    main()
