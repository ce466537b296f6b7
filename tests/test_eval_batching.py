"""`--batch-size auto`: batches start large and halve on an out-of-memory error; the run goes on and the predictions
already written stay (tested on CPU with an injected out-of-memory error)."""

from __future__ import annotations

import pytest

from cftools.evaluate.run import is_out_of_memory, read_predictions, run_eval


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
