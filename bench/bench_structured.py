"""Benchmark: structured output on the embedded model, per generator, on the shipped examples.

    PYTHONPATH=. .venv/bin/python bench/bench_structured.py [--mode constrained|unconstrained|both] [--n 2]
    PYTHONPATH=. .venv/bin/python bench/bench_structured.py --compile     # schema compile times (llguidance)
    PYTHONPATH=. .venv/bin/python bench/bench_structured.py --engines     # llguidance vs xgrammar (if importable)

Each generator runs through its library call in a fresh workspace on the shipped examples (C-VQA sample rows for
`rewrite` ×3 groups, examples/mucr for `captions`, `context`, `cues`, examples/cfmm for `pairs-pick` and `pairs`,
and the MuCR judge on drafted explanations), one attempt per request, greedy. Per generator: requests, replies
that parsed, the parse rate, and the decoding speed (completion tokens / model seconds, from the generation
records). `--mode`: `constrained` (the schema as a grammar, the default path), `unconstrained` (the same prompts,
the schema only in the prompt, the reply validated), or both.

The same script runs on a checkout of the code from before structured output (free-text prompts and parsers):
there, every generator is free text whatever the mode, and the judge reply is read by the free-text reader.
The rewrite throughput against the loopback stub is bench/bench_generate.py, run on both checkouts.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import select
from cftools.generate.llm_task import LLMRun

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
STRUCTURED = importlib.util.find_spec("cftools.llm.structured") is not None


def fresh_workspace(tmp: Path, name: str) -> Any:
    from cftools.workspace import init_workspace

    return init_workspace(tmp / name)


def generation_stats(store: Any, generators: tuple[str, ...]) -> dict[str, Any]:
    from cftools.models import Generation

    with store.session() as session:
        rows = session.execute(select(Generation).where(Generation.generator.in_(generators))).scalars().all()
    fresh = [g for g in rows if not g.cached and g.latency_s and g.completion_tokens]
    tokens, seconds = sum(g.completion_tokens for g in fresh), sum(g.latency_s for g in fresh)
    parsed = sum(1 for g in rows if g.parsed and not g.parse_error and not g.error)
    return {"requests": len(rows), "parsed": parsed, "parse_rate": round(parsed / len(rows), 3) if rows else None,
            "tokens": tokens, "tok_per_s": round(tokens / seconds, 2) if seconds else None,
            "unparsed_reasons": sorted({(g.parse_error or g.error or "")[:80] for g in rows
                                        if not (g.parsed and not g.parse_error)})[:3]}


def cvqa_rows(n: int) -> list[tuple[str, str, str]]:
    """N number and N yes/no questions of the shipped C-VQA sample (their original question and answer)."""
    counts, yes_no = [], []
    with open(EXAMPLES / "cvqa" / "C-VQA-Real_questions.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            answer = row["answer"].strip().lower()
            bucket = counts if answer.isdigit() else yes_no if answer in ("yes", "no") else None
            if bucket is not None and len(bucket) < n:
                bucket.append((Path(row["img_path"]).name, row["query"].strip(), answer))
    return counts + yes_no


def run_rewrite(ws: Any, backend: Any, n: int) -> tuple[str, ...]:
    from cftools.ingest.readers import ingest_table
    from cftools.kinds.cvqa.generate import llm_params, rewrite

    table = ws.root / "sources.csv"
    with open(table, "w", newline="") as fh:
        csv.writer(fh).writerows([("image", "question", "answer"), *cvqa_rows(n)])
    ingest_table(ws.store, table)
    for group in ("numerical-direct", "numerical-indirect", "boolean"):
        rewrite(ws.store, backend, group, run=LLMRun(max_attempts=1, params=llm_params({}, "local"), quiet=True),
                limit=n)
    return ("rewrite",)


def run_captions(ws: Any, backend: Any, n: int) -> tuple[str, ...]:
    from cftools.kinds.mucr import generate as mucr

    params = mucr.text_params({}, max(mucr.CAPTIONS_MAX_TOKENS, getattr(mucr, "CAPTION_PAIR_TOKENS", 0) * 2))
    mucr.draft_captions(ws.store, backend, EXAMPLES / "mucr" / "seeds.txt",
                        run=LLMRun(max_attempts=1, params=params, quiet=True), per_group=2)
    return ("captions",)


def local_context_params() -> dict[str, Any]:
    from cftools.kinds.mucr import generate as mucr

    return {**mucr.text_params({}, mucr.CONTEXT_MAX_TOKENS), "max_tokens": mucr.LOCAL_CONTEXT_MAX_TOKENS,
            **({"stop_regex": mucr.CONTEXT_STOP_REGEX} if hasattr(mucr, "CONTEXT_STOP_REGEX") else {})}


def run_context_and_cues(ws: Any, backend: Any, n: int) -> tuple[str, ...]:
    from cftools.kinds.mucr import cues
    from cftools.kinds.mucr.generate import write_context
    from cftools.kinds.mucr.ingest import ingest_captions
    from cftools.models import Item

    ingest_captions(ws.store, EXAMPLES / "mucr" / "captions.csv")
    write_context(ws.store, backend, run=LLMRun(max_attempts=1, params=local_context_params(), quiet=True), limit=n)
    with ws.store.write() as session:  # the cue prompt reads the descriptions only: stand-in image names
        for item in session.execute(select(Item).where(Item.kind == "mucr")).scalars():
            if (item.data or {}).get("context"):
                item.data = {**item.data, "cause_image": "cause.png", "effect_image": "effect.png"}
                session.add(item)
    local_cues = getattr(cues, "LOCAL_CUES_MAX_TOKENS", cues.CUES_MAX_TOKENS)
    cues.draft_cues(ws.store, backend,
                    run=LLMRun(max_attempts=1, quiet=True,
                               params={"temperature": 0.0, "max_tokens": local_cues}), limit=n)
    return ("context", "cues")


def run_pairs(ws: Any, backend: Any, n: int) -> tuple[str, ...]:
    from cftools.ingest.readers import ingest_table
    from cftools.kinds.cfmm.generate import generate_pairs, llm_params, parse_quota

    ingest_table(ws.store, EXAMPLES / "cfmm" / "sources.csv", EXAMPLES / "cfmm" / "images")
    generate_pairs(ws.store, backend, run=LLMRun(max_attempts=1, params=llm_params({}, "local"), quiet=True),
                   quota=parse_quota("count,color,size,shape,direction,common"), limit=2 * n)
    return ("pairs-pick", "pairs")


EXPLANATIONS = [
    ("In the first image, a man runs through heavy rain. In the second image, he sits with a cold. "
     "The causal link is that the rain made him ill.",
     "In the first image, a man is soaked by rain. In the second image, the man sneezes on a bench. "
     "The causal link is that getting wet gave him a cold."),
    ("In the first image, a woman forgets to water a plant. In the second image, the plant wilts. "
     "The causal link is the lack of water.",
     "In the first image, a plant stands dry on a sill. In the second image, its leaves hang down. "
     "The causal link is that nobody watered it."),
    ("In the first image, a car speeds. In the second image, police stop it. The causal link is speeding.",
     "In the first image, a driver goes too fast. In the second image, an officer writes a ticket. "
     "The causal link is that speeding got him pulled over."),
]


def run_judge(backend: Any, n: int, constrained: bool) -> dict[str, Any]:
    """The MuCR Exp judge on N (candidate, reference) pairs: replies the scoring can read."""
    from cftools.kinds.mucr.explanations import judge_prompts, parse_judge_parts
    from cftools.llm.prompts import load_prompt

    template = load_prompt("eval/mucr_judge.j2")
    schema = None
    if STRUCTURED:
        from cftools.kinds.mucr.explanations import JUDGE_SCHEMA, scores_line

        schema = JUDGE_SCHEMA
    read, tokens, seconds = 0, 0, 0.0
    pairs = EXPLANATIONS[:n]
    for candidate, reference in pairs:
        prompt = judge_prompts(template, candidate, [reference])[0]
        messages, params = [{"role": "user", "content": prompt}], {"temperature": 0.0, "max_tokens": 32}
        if schema is not None:
            from cftools.llm.structured import structured_request

            messages, params = structured_request(backend, schema, messages, params)
        completion = backend.complete(messages, params)
        tokens += completion.completion_tokens or 0
        seconds += completion.latency_s or 0.0
        text = completion.text
        if schema is not None:
            try:
                text = scores_line(schema.read(text))
            except ValueError:
                pass
        read += parse_judge_parts(text) is not None
    return {"requests": len(pairs), "parsed": read, "parse_rate": round(read / len(pairs), 3),
            "tokens": tokens, "tok_per_s": round(tokens / seconds, 2) if seconds else None}


def measure(mode: str, n: int) -> dict[str, Any]:
    from cftools.llm.local import LocalBackend

    backend = LocalBackend(loader="transformers", threads=1)
    if mode == "unconstrained":
        backend.structured_output = "prompt"  # the schema in the prompt, no grammar: the reply is only validated
    backend.load()
    results: dict[str, Any] = {}
    runs: list[tuple[str, Callable]] = [("rewrite", run_rewrite), ("captions", run_captions),
                                        ("context+cues", run_context_and_cues), ("pairs", run_pairs)]
    with tempfile.TemporaryDirectory(prefix="cftools-bench-structured-") as tmp:
        for name, run in runs:
            ws = fresh_workspace(Path(tmp), name.replace("+", "-"))
            started = time.perf_counter()
            generators = run(ws, backend, n)
            for generator in generators:
                results[generator] = generation_stats(ws.store, (generator,))
            print(f"  {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            ws.close()
    results["mucr-judge"] = run_judge(backend, n, mode == "constrained")
    backend.close()
    return results


def compile_times() -> dict[str, Any]:
    """Milliseconds to compile each generator's schema into a grammar (fresh cache), and the one-off tokenizer."""
    from transformers import AutoTokenizer

    from cftools.kinds.cfmm.generate import DRAFT_SCHEMA, pick_schema
    from cftools.kinds.cvqa.generate import BOOLEAN_REWRITE, COUNT_REWRITE
    from cftools.kinds.mucr.cues import CUES_SCHEMA
    from cftools.kinds.mucr.generate import CONTEXT_SCHEMA, captions_schema
    from cftools.kinds.mucr.explanations import JUDGE_SCHEMA
    from cftools.generate.rederive import rederive_schema
    from cftools.llm import constrained
    from cftools.llm.local import LocalBackend, converted_dir

    tokenizer = AutoTokenizer.from_pretrained(converted_dir(LocalBackend(loader="transformers").gguf))
    constrained.compile_grammar({"type": "object"})  # imports llguidance
    started = time.perf_counter()
    constrained.guidance_tokenizer(tokenizer)
    out: dict[str, Any] = {"tokenizer_ms": round((time.perf_counter() - started) * 1000, 1)}
    for schema in (COUNT_REWRITE, BOOLEAN_REWRITE, CONTEXT_SCHEMA, captions_schema(4), CUES_SCHEMA,
                   pick_schema(["count", "color", "size"]), DRAFT_SCHEMA, JUDGE_SCHEMA, rederive_schema(int)):
        constrained._GRAMMARS.clear()
        started = time.perf_counter()
        constrained.compile_grammar(schema.json_schema)
        out[schema.name] = round((time.perf_counter() - started) * 1000, 2)
    return out


def engines(repeats: int = 3) -> dict[str, Any]:
    """llguidance against xgrammar (when importable) on the rewrite prompt: compile ms and tokens/s, greedy."""
    import torch
    from transformers import LogitsProcessorList

    from cftools.kinds.cvqa.generate import COUNT_REWRITE
    from cftools.llm.constrained import json_logits_processor
    from cftools.llm.local import LocalBackend
    from cftools.llm.prompts import load_prompt

    backend = LocalBackend(loader="transformers", threads=1)
    backend.load()
    tokenizer, model = backend._loaded
    prompt = load_prompt("rewrite/numerical-direct.j2").render(question="How many cats are on the sofa?", answer="2")
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    n_prompt = inputs["input_ids"].shape[1]

    def speed(make: Callable[[], list]) -> float:
        best = 0.0
        for _ in range(repeats):
            started = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(**inputs, max_new_tokens=120, do_sample=False, temperature=None, top_p=None,
                                     top_k=None, pad_token_id=tokenizer.eos_token_id,
                                     logits_processor=LogitsProcessorList(make()))
            best = max(best, (out.shape[1] - n_prompt) / (time.perf_counter() - started))
        return round(best, 2)

    schema = COUNT_REWRITE.json_schema
    result: dict[str, Any] = {"none_tok_per_s": speed(lambda: [])}
    json_logits_processor(tokenizer, schema)  # warm: tokenizer and grammar
    result["llguidance_tok_per_s"] = speed(lambda: [json_logits_processor(tokenizer, schema)])
    if importlib.util.find_spec("xgrammar") is not None:
        import xgrammar
        import xgrammar.contrib.hf

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
        started = time.perf_counter()
        compiled = xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(schema), any_whitespace=False)
        result["xgrammar_compile_ms"] = round((time.perf_counter() - started) * 1000, 1)
        result["xgrammar_tok_per_s"] = speed(lambda: [xgrammar.contrib.hf.LogitsProcessor(compiled)])
    from cftools.llm import constrained

    constrained._GRAMMARS.clear()
    started = time.perf_counter()
    constrained.compile_grammar(schema)
    result["llguidance_compile_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("constrained", "unconstrained", "both"), default="both")
    parser.add_argument("--n", type=int, default=2, help="requests per generator (per group for rewrite)")
    parser.add_argument("--compile", action="store_true", help="only the schema compile times")
    parser.add_argument("--engines", action="store_true", help="only llguidance against xgrammar")
    args = parser.parse_args()
    if args.compile:
        print(json.dumps(compile_times(), indent=1))
        return
    if args.engines:
        print(json.dumps(engines(), indent=1))
        return
    modes = ("unconstrained", "constrained") if args.mode == "both" else (args.mode,)
    report = {"structured_code": STRUCTURED}
    for mode in modes if STRUCTURED else ("free-text",):
        print(f"{mode}:", file=sys.stderr, flush=True)
        report[mode] = measure(mode, args.n)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
