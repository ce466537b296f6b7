"""`--batch-size auto`: batches start large and halve on an out-of-memory error; the run goes on and the predictions
already written stay (tested on CPU with an injected out-of-memory error)."""

from __future__ import annotations

import pytest

from cftools.evaluate.run import (AUTO_START_BATCH, DEFAULT_BATCH, is_out_of_memory, read_predictions,
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
    result = run_eval(mixed_release, "blind", batch_size="auto", out_dir=tmp_path / "run", answerer=answerer,
                      notify=notes.append)
    asked = result.config["questions"]
    assert len(read_predictions(tmp_path / "run" / "predictions.jsonl")) == asked
    assert answerer.sizes[0] > 3 and max(answerer.sizes[-3:]) <= 3  # started big, went on small
    assert any("out of memory" in note for note in notes)


def test_other_errors_are_not_taken_for_out_of_memory(mixed_release, tmp_path):
    class Broken(SmallMemoryAnswerer):
        def generate(self, prompts):
            raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_eval(mixed_release, "blind", batch_size="auto", out_dir=tmp_path / "run", answerer=Broken(1))
    assert is_out_of_memory(MemoryError("out of memory")) and not is_out_of_memory(RuntimeError("shape mismatch"))


def test_the_default_batch_size_is_auto_on_cuda_and_8_elsewhere(mixed_release, tiny_llava_dir, tmp_path,
                                                                 monkeypatch):
    """No --batch-size: an hf: model on CUDA starts at auto's 64 (halving on out of memory), anything else at 8."""
    import torch

    assert resolved_batch_size(None, "cuda") == AUTO_START_BATCH
    assert resolved_batch_size(None, "cpu") == resolved_batch_size(None, "api") == DEFAULT_BATCH == 8
    assert resolved_batch_size(3, "cuda") == 3 and resolved_batch_size("auto", "cpu") == AUTO_START_BATCH
    on_cpu = SmallMemoryAnswerer(limit=1000)
    result = run_eval(mixed_release, "blind", out_dir=tmp_path / "cpu", answerer=on_cpu)
    assert result.config["batch_size"] == 8 and max(on_cpu.sizes) <= 8
    # this machine has no GPU: torch is told there is one (the model is handed in, so nothing runs on it)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    on_cuda = SmallMemoryAnswerer(limit=1000)
    result = run_eval(mixed_release, f"hf:{tiny_llava_dir}", mode="generate", out_dir=tmp_path / "cuda",
                      answerer=on_cuda)
    assert (result.config["device"], result.config["batch_size"]) == ("cuda", AUTO_START_BATCH)
    assert on_cuda.sizes[0] == min(AUTO_START_BATCH, result.config["questions"]) > 8


# ---------------------------------------------------------------- batch invariance with a real model


@pytest.fixture
def every_kind_release(workspace, peer_cvqa_real, tmp_path):
    """A release holding every kind's question types: C-VQA counts and booleans, CFMM option questions, MuCR
    C2E/E2C (4 tokens), Cue (16) and Exp (128, unjudged). The lmms-eval format's records carry MuCR's choice
    sets, which `cftools eval` asks."""
    from release_stock import stock_every_kind

    from cftools.release.export import export_release

    stock_every_kind(workspace, peer_cvqa_real, tmp_path / "in")
    return export_release(workspace, "mix", "1.0", tmp_path / "out", fmt="lmms-eval", licence="CC-BY-4.0",
                          options={"allow_small_groups": True}).path


def test_replies_do_not_depend_on_the_batch(every_kind_release, tiny_llava_dir, tmp_path):
    """Greedy replies are the same whatever questions share the batch: at batch size 1, 3, 8 and auto a question
    gets the same reply, read the same way (a 16-token MuCR cue batched with 128-token explanations included)."""
    runs = {}
    for size in (1, 3, 8, "auto"):
        result = run_eval(every_kind_release, f"hf:{tiny_llava_dir}", mode="generate", batch_size=size,
                          device="cpu", out_dir=tmp_path / f"run-{size}")
        runs[size] = {(p["id"], p["which"]): (p["raw"], p["parsed"], p["correct"]) for p in result.predictions}
    whichs = {which for _, which in runs[1]}
    assert {"original", "counterfactual", "c2e", "e2c", "cue", "exp"} <= whichs
    for size in (3, 8, "auto"):
        assert runs[size] == runs[1], size
