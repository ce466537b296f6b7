"""`--batch-size auto`: batches start large and halve on an out-of-memory error; the run goes on and the predictions
already written stay (tested on CPU with an injected out-of-memory error)."""

from __future__ import annotations

import json

import pytest

from cftools.errors import CftoolsError

from cftools.evaluate.run import (EvalOptions, AUTO_START_BATCH, DEFAULT_BATCH, is_out_of_memory, read_predictions,
                                  resolved_batch_size, run_eval)


class OutOfMemoryError(RuntimeError):
    """Named like torch's CUDA one."""


class SmallMemoryAnswerer:
    """Answers 'yes' to everything, and runs out of memory on any batch larger than LIMIT."""

    def __init__(self, limit: int) -> None:
        self.limit, self.sizes = limit, []

    def generate(self, prompts):
        self.sizes.append(len(prompts))
        if len(prompts) > self.limit:
            raise OutOfMemoryError(f"CUDA out of memory: tried a batch of {len(prompts)}")
        return ["yes"] * len(prompts)

    def score_options(self, prompts):
        raise AssertionError("generate mode only")

    def close(self):
        pass


def test_auto_batch_halves_on_out_of_memory_and_finishes(mixed_release, tmp_path):
    answerer = SmallMemoryAnswerer(limit=3)
    notes = []
    result = run_eval(mixed_release, "blind", options=EvalOptions(batch_size="auto", out_dir=tmp_path / "run"),
                      answerer=answerer, notify=notes.append)
    asked = result.config["questions"]
    assert len(read_predictions(tmp_path / "run" / "predictions.jsonl")) == asked
    assert answerer.sizes[0] > 3 and max(answerer.sizes[-3:]) <= 3  # started big, went on small
    assert any("out of memory" in note for note in notes)


def test_other_errors_are_not_taken_for_out_of_memory(mixed_release, tmp_path):
    class Broken(SmallMemoryAnswerer):
        def generate(self, prompts):
            raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_eval(mixed_release, "blind", options=EvalOptions(batch_size="auto", out_dir=tmp_path / "run"),
                 answerer=Broken(1))
    assert is_out_of_memory(MemoryError("out of memory")) and not is_out_of_memory(RuntimeError("shape mismatch"))


def test_the_default_batch_size_is_auto_on_cuda_and_8_elsewhere(mixed_release, tiny_llava_dir, tmp_path,
                                                                 monkeypatch):
    """No --batch-size: an hf: model on CUDA starts at auto's 64 (halving on out of memory), anything else at 8."""
    import torch

    assert resolved_batch_size(None, "cuda") == AUTO_START_BATCH
    assert resolved_batch_size(None, "cpu") == resolved_batch_size(None, "api") == DEFAULT_BATCH == 8
    assert resolved_batch_size(3, "cuda") == 3 and resolved_batch_size("auto", "cpu") == AUTO_START_BATCH
    on_cpu = SmallMemoryAnswerer(limit=1000)
    result = run_eval(mixed_release, "blind", options=EvalOptions(out_dir=tmp_path / "cpu"), answerer=on_cpu)
    assert result.config["batch_size"] == 8 and max(on_cpu.sizes) <= 8
    # this machine has no GPU: torch is told there is one (the model is handed in, so nothing runs on it)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    on_cuda = SmallMemoryAnswerer(limit=1000)
    result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                      options=EvalOptions(mode="generate", out_dir=tmp_path / "cuda"), answerer=on_cuda)
    assert (result.config["device"], result.config["batch_size"]) == ("cuda", AUTO_START_BATCH)
    assert on_cuda.sizes[0] == min(AUTO_START_BATCH, result.config["questions"]) > 8


# ---------------------------------------------------------------- batch invariance with a real model


@pytest.fixture
def every_kind_release(workspace, peer_cvqa_real, tmp_path):
    """A release holding every kind's question types: C-VQA counts and booleans, CFMM option questions, MuCR
    C2E/E2C (4 tokens), Cue (16) and Exp (128, unjudged). The lmms-eval format's records carry MuCR's choice
    sets, which `cftools eval` asks."""
    from release_stock import stock_every_kind

    from cftools.release.export import ExportOptions, export_release

    stock_every_kind(workspace, peer_cvqa_real, tmp_path / "in")
    return export_release(workspace, "mix", "1.0", tmp_path / "out",
                          options=ExportOptions(fmt="lmms-eval", licence="CC-BY-4.0",
                                                kind_options={"allow_small_groups": True})).path


def test_replies_do_not_depend_on_the_batch(every_kind_release, tiny_llava_dir, tmp_path):
    """Greedy replies are the same whatever questions share the batch: at batch size 1, 3, 8 and auto a question
    gets the same reply, read the same way (a 16-token MuCR cue batched with 128-token explanations included)."""
    runs = {}
    for size in (1, 3, 8, "auto"):
        result = run_eval(every_kind_release, f"hf:{tiny_llava_dir}",
                          options=EvalOptions(mode="generate", batch_size=size, device="cpu",
                                              out_dir=tmp_path / f"run-{size}"))
        runs[size] = {(p["id"], p["which"]): (p["raw"], p["parsed"], p["correct"]) for p in result.predictions}
    whichs = {which for _, which in runs[1]}
    assert {"original", "counterfactual", "c2e", "e2c", "cue", "exp"} <= whichs
    for size in (3, 8, "auto"):
        assert runs[size] == runs[1], size


# ---------------------------------------------------------------- prefetch: the next batch prepared while one runs


def prefetch_threads() -> list:
    import threading

    from cftools.evaluate.prefetch import THREAD_NAME

    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def recording_preparer(model, calls: list):
    """MODEL whose `prepare` records (thread name, each prompt's images) per call, in the order prepared."""
    import threading

    prepare = model.prepare

    def recorded(mode, prompts):
        calls.append((threading.current_thread().name, [list(p.images) for p in prompts]))
        return prepare(mode, prompts)

    model.prepare = recorded
    return model


@pytest.mark.parametrize("mode", ["generate", "rank"])
def test_prefetch_on_and_off_give_the_same_predictions(mixed_release, tiny_llava_dir, tmp_path, mode):
    """The tiny LLaVA on the CPU answers and scores every question the same with the next batch prepared on a
    background thread as with everything on one thread (CFTOOLS_PREFETCH=0's path), and no thread is left."""
    from cftools.evaluate.prefetch import THREAD_NAME
    from cftools.evaluate.vlm import HFVisionModel

    runs, threads = {}, {}
    for prefetch in (False, True):
        calls: list = []
        model = recording_preparer(HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32"), calls)
        result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                          options=EvalOptions(mode=mode, batch_size=3, device="cpu",
                                              out_dir=tmp_path / f"run-{prefetch}", prefetch=prefetch), answerer=model)
        runs[prefetch] = {(p["id"], p["which"]): (p["raw"], p["parsed"], p.get("scores"), p["correct"])
                          for p in result.predictions}
        threads[prefetch] = {name.startswith(THREAD_NAME) for name, _ in calls}
        assert prefetch_threads() == []
    assert len(runs[True]) == len(runs[False]) > 3
    assert runs[True] == runs[False]
    assert threads == {False: {False}, True: {True}}  # prepared inline without, on the prefetch thread with


def test_an_unreadable_image_mid_run_names_its_record_and_keeps_the_answers_before(mixed_release, tiny_llava_dir,
                                                                                    tmp_path):
    """An image that fails to decode while the batch before it runs (prepared ahead) stops the run with an error
    naming the record that shows it; the predictions of the batches before it are kept (as without prefetching),
    and no thread is left."""
    from cftools.evaluate.vlm import HFVisionModel

    calls: list = []
    model = recording_preparer(HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32"), calls)
    run_eval(mixed_release, f"hf:{tiny_llava_dir}",
             options=EvalOptions(mode="generate", batch_size=1, device="cpu", verify=False, out_dir=tmp_path / "first",
                                 prefetch=False), answerer=model)
    order = [images[0] for _, batch in calls for images in batch]  # each question's image, in the order asked
    late = max(i for i in range(len(order)) if order[i] not in order[:i])  # the image first shown last
    assert late >= 2
    broken = order[late]
    broken.write_bytes(b"not a PNG")
    with pytest.raises(CftoolsError) as caught:
        run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                 options=EvalOptions(mode="generate", batch_size=1, device="cpu", verify=False,
                                     out_dir=tmp_path / "second", prefetch=True), answerer=model)
    records = [json.loads(line) for line in (mixed_release / "records.jsonl").read_text().splitlines()]
    showing = {r["id"] for r in records if r.get("image") == f"images/{broken.name}"}
    message = str(caught.value)
    assert message.startswith("record ") and "cannot read the image" in message
    assert message.split()[1] in showing
    assert len(read_predictions(tmp_path / "second" / "predictions.jsonl")) == late
    assert prefetch_threads() == []


class PreparingAnswerer(SmallMemoryAnswerer):
    """Answers 'yes'; prepares ahead (a record of the prompts) and checks what it is handed is what it is asked."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.prepared_used = 0

    def prepare(self, mode, prompts):
        return (mode, [p.text for p in prompts])

    def generate(self, prompts, prepared=None):
        if prepared is not None:
            assert prepared == ("generate", [p.text for p in prompts])
            self.prepared_used += 1
        return super().generate(prompts)


def test_prefetch_follows_a_batch_halved_after_out_of_memory(mixed_release, tmp_path):
    """A batch prepared ahead at the old size is dropped when the batch halves; the run finishes with every
    question answered once, from inputs prepared for exactly its prompts."""
    answerer = PreparingAnswerer(limit=3)
    result = run_eval(mixed_release, "blind",
                      options=EvalOptions(batch_size=8, out_dir=tmp_path / "run", prefetch=True), answerer=answerer)
    assert len(read_predictions(tmp_path / "run" / "predictions.jsonl")) == result.config["questions"]
    assert answerer.prepared_used == len(answerer.sizes) and max(answerer.sizes[-2:]) <= 3
    assert prefetch_threads() == []


def test_a_killed_prefetching_run_resumes_asking_only_the_rest(tiny_llava_dir, tmp_path):
    """`cftools eval` with CFTOOLS_PREFETCH=1, killed (SIGKILL) after 5 prediction lines while the next batch is
    being prepared, and run again: every question answered exactly once, the rerun asking the rest."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from fixtures_eval import cvqa_record, png_bytes, write_release
    from killed_runs import eval_held_after, kill_when_held

    records = [cvqa_record(i, "boolean", "yes", "no", "yes/no") for i in range(12)]
    release = write_release(tmp_path / "big-1.0", records, {r["id"]: png_bytes(i) for i, r in enumerate(records)})
    out = tmp_path / "run"
    args = ["eval", str(release), "--model", f"hf:{tiny_llava_dir}", "--batch-size", "1", "--device", "cpu",
            "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "CFTOOLS_PREFETCH": "1"}
    env.pop("CFTOOLS_WORKSPACE", None)
    process = subprocess.Popen(eval_held_after(5, *args), env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    assert kill_when_held(process, out / "predictions.jsonl", 5) == 5
    finished = subprocess.run([sys.executable, "-m", "cftools.cli", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    lines = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    keys = [(line["id"], line["which"]) for line in lines]
    assert len(keys) == len(set(keys)) == 24
    assert "19 questions asked now" in " ".join(finished.stdout.split())


def test_prefetch_is_on_for_a_gpu_off_on_the_cpu_unless_asked(monkeypatch):
    from cftools.evaluate.prefetch import PREFETCH_ENV, prefetch_wanted

    monkeypatch.delenv(PREFETCH_ENV, raising=False)
    assert prefetch_wanted(None, "cuda") and not prefetch_wanted(None, "cpu")
    assert prefetch_wanted(True, "cpu") and not prefetch_wanted(False, "cuda")
    monkeypatch.setenv(PREFETCH_ENV, "0")
    assert not prefetch_wanted(None, "cuda") and prefetch_wanted(True, "cuda")
    monkeypatch.setenv(PREFETCH_ENV, "1")
    assert prefetch_wanted(None, "cpu")


# ---------------------------------------------------------------- compiled decoding (--compile): static KV cache


def test_compiled_decoding_is_off_unless_asked_for_or_cftools_compile_says_so(monkeypatch):
    from cftools.evaluate.answerers import parse_model_spec
    from cftools.evaluate.run import compiled_decoding_wanted
    from cftools.evaluate.vlm import COMPILE_ENV, COMPILED_DECODING, compile_by_default, compiled_decoding_options

    hf, blind = parse_model_spec("hf:some/model"), parse_model_spec("blind")
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    assert not compile_by_default() and compiled_decoding_options(False) == {}
    assert compiled_decoding_options(True) == COMPILED_DECODING == {"cache_implementation": "static"}
    assert not compiled_decoding_wanted(None, hf, False) and compiled_decoding_wanted(True, hf, False)
    monkeypatch.setenv(COMPILE_ENV, "1")
    assert compile_by_default() and compiled_decoding_wanted(None, hf, False)
    assert not compiled_decoding_wanted(False, hf, False)  # --no-compile wins over the variable
    assert not compiled_decoding_wanted(True, blind, False)  # only hf: models decode compiled
    notes = []
    assert not compiled_decoding_wanted(True, hf, True, notes.append) and "Ray" in notes[0]
    monkeypatch.setenv(COMPILE_ENV, "0")
    assert not compile_by_default()


def spied_generate(model, calls: list) -> None:
    """Record the options and input shape of every generate() call of MODEL's transformers model, then run it."""
    real = model.model.generate

    def generate(**kwargs):
        calls.append((tuple(kwargs["input_ids"].shape), kwargs.get("cache_implementation")))
        return real(**kwargs)

    model.model.generate = generate


def test_replies_are_the_same_with_compiled_decoding(mixed_release, tiny_llava_dir, tmp_path):
    """The tiny LLaVA on the CPU gives every question the same reply with --compile (a static KV cache, compiled on a
    GPU and here not; prompts padded to a multiple of PROMPT_BUCKET tokens; the last, short batch filled with copies
    of its first prompt to the batch's rows) as without; the option reaches every generate() call."""
    from cftools.evaluate.vlm import PROMPT_BUCKET, HFVisionModel

    runs, calls = {}, {False: [], True: []}
    for compiled in (False, True):
        model = HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32")
        spied_generate(model, calls[compiled])
        result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                          options=EvalOptions(mode="generate", batch_size=3, device="cpu", compile=compiled,
                                              out_dir=tmp_path / f"run-{compiled}"), answerer=model)
        runs[compiled] = {(p["id"], p["which"]): (p["raw"], p["parsed"], p["correct"]) for p in result.predictions}
        assert result.config["compile"] is (True if compiled else None)
    questions = len(runs[True])
    assert questions == len(runs[False]) > 3 and questions % 3  # a short last batch
    assert runs[True] == runs[False]
    assert {option for _, option in calls[False]} == {None} and {option for _, option in calls[True]} == {"static"}
    assert {rows for (rows, _), _ in calls[True]} == {3}  # the short batch was filled
    assert all(length % PROMPT_BUCKET == 0 for (_, length), _ in calls[True])
    assert any(length % PROMPT_BUCKET for (_, length), _ in calls[False])  # bucketing changed the shapes
    assert len({shape for shape, _ in calls[True]}) < len({shape for shape, _ in calls[False]})


def test_eval_compile_option_is_recorded_in_the_run(mixed_release, tiny_llava_dir, tmp_path):
    from click.testing import CliRunner

    from cftools.cli import main

    for flag, recorded in (("--compile", True), ("--no-compile", None)):
        out = tmp_path / flag
        result = CliRunner().invoke(main, ["eval", "run", str(mixed_release), "--model", f"hf:{tiny_llava_dir}",
                                           "--mode", "generate", "--device", "cpu", "--limit", "2", "--quiet",
                                           "--out", str(out), flag])
        assert result.exit_code == 0, result.output
        assert json.loads((out / "config.json").read_text())["compile"] is recorded


def test_compiled_decoding_follows_a_batch_halved_after_out_of_memory(mixed_release, tiny_llava_dir, tmp_path):
    """With --compile, a batch halved after an out-of-memory error is not filled back up to the width that ran out
    of memory: the run goes on at the smaller width and its replies are those of an eager run."""
    from cftools.evaluate.vlm import HFVisionModel

    runs, rows = {}, []
    for compiled in (False, True):
        model = HFVisionModel.load(str(tiny_llava_dir), device="cpu", dtype="fp32")
        if compiled:
            real = model.model.generate

            def generate(**kwargs):
                rows.append(kwargs["input_ids"].shape[0])
                if kwargs["input_ids"].shape[0] > 2:
                    raise OutOfMemoryError("CUDA out of memory: injected")
                return real(**kwargs)

            model.model.generate = generate
        result = run_eval(mixed_release, f"hf:{tiny_llava_dir}",
                          options=EvalOptions(mode="generate", batch_size=4, device="cpu", compile=compiled,
                                              out_dir=tmp_path / f"run-{compiled}"), answerer=model)
        runs[compiled] = {(p["id"], p["which"]): (p["raw"], p["parsed"]) for p in result.predictions}
    assert rows[0] == 4 and set(rows[1:]) == {2}
    assert runs[True] == runs[False] and len(runs[True]) > 4
