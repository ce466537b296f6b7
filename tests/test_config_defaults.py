"""The defaults docs/config.md states are the code's: each numeric default in a table row is the constant the code
falls back to when the key is left out (the [edits] rows said "the pipeline's" while cftools passes 28 steps and
guidance 4 to every pipeline)."""

import re
from pathlib import Path

import pytest

from cftools.annotate import label_studio, quality
from cftools.checks import calibration
from cftools.imagegen import diffusers_backend, edit_base, tiny, tiny_edit

CONFIG_MD = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def default_cell(section: str, key: str) -> str:
    """The default column of KEY's row in the `## [SECTION]` table of docs/config.md."""
    body = CONFIG_MD.read_text(encoding="utf-8").split(f"## [{section}]\n", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in body.splitlines() if line.startswith(f"| `{key}` |"))
    return row.split("|")[3].strip()


def numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)]


@pytest.mark.parametrize("section, key, expected", [
    ("edits", "steps", [edit_base.DEFAULT_STEPS, tiny_edit.TINY_EDIT_STEPS]),
    ("edits", "guidance", [edit_base.DEFAULT_GUIDANCE, tiny_edit.TINY_EDIT_GUIDANCE]),
    ("images", "steps", [diffusers_backend.DEFAULT_STEPS, tiny.TINY_STEPS]),
    ("images", "guidance", [diffusers_backend.DEFAULT_GUIDANCE, tiny.TINY_GUIDANCE]),
    ("images", "strength", [diffusers_backend.DEFAULT_STRENGTH]),
    ("label_studio", "batch_size", [label_studio.DEFAULT_BATCH]),
    ("label_studio", "timeout", [label_studio.TIMEOUT_S]),
    ("label_studio", "retries", [label_studio.RETRIES]),
    ("label_studio", "pull_workers", [label_studio.PULL_WORKERS]),
    ("label_studio", "export_chunk", [label_studio.EXPORT_CHUNK]),
    ("annotate", "control_rate", [quality.DEFAULT_CONTROL_RATE]),
    ("annotate", "min_accuracy", [quality.DEFAULT_MIN_ACCURACY]),
    ("annotate", "min_controls", [quality.DEFAULT_MIN_CONTROLS]),
    ("checks", "low_precision", [calibration.DEFAULT_LOW_PRECISION]),
])
def test_a_documented_default_is_the_codes(section, key, expected):
    assert numbers(default_cell(section, key)) == [float(e) for e in expected], (section, key)


def test_guidance_0_is_taken_with_the_embedded_pipelines(tmp_path):
    """`guidance = 0` (no guidance) is a value, not a key left out: it was replaced by the embedded default."""
    from cftools.imagegen import make_image_backend
    from cftools.imagegen.edits import make_edit_backend

    images = make_image_backend({"guidance": 0, "cache_dir": str(tmp_path)})
    edits = make_edit_backend({"guidance": 0, "cache_dir": str(tmp_path)})
    try:
        assert images.default_guidance == 0 and edits.default_guidance == 0
    finally:
        images.close()
        edits.close()


@pytest.mark.parametrize("section, key, expected", [
    ("edits", "steps", edit_base.DEFAULT_STEPS), ("edits", "guidance", edit_base.DEFAULT_GUIDANCE),
    ("images", "steps", diffusers_backend.DEFAULT_STEPS), ("images", "guidance", diffusers_backend.DEFAULT_GUIDANCE),
    ("images", "strength", diffusers_backend.DEFAULT_STRENGTH),
    ("label_studio", "batch_size", label_studio.DEFAULT_BATCH), ("label_studio", "timeout", label_studio.TIMEOUT_S),
    ("label_studio", "retries", label_studio.RETRIES), ("label_studio", "pull_workers", label_studio.PULL_WORKERS),
    ("annotate", "control_rate", quality.DEFAULT_CONTROL_RATE), ("checks", "low_precision", calibration.DEFAULT_LOW_PRECISION),
])
def test_the_value_init_shows_commented_out_is_the_default(tmp_path, section, key, expected):
    """A commented-out `key = value` in the cftools.toml init writes reads as the default ([edits] showed 20 steps
    and guidance 7.5 where cftools uses 28 and 4)."""
    import tomllib

    from cftools.workspace import init_workspace

    init_workspace(tmp_path / "ws").close()
    text = (tmp_path / "ws" / "cftools.toml").read_text(encoding="utf-8")
    body = re.split(r"^\[([a-z_]+)\]\s*$", text, flags=re.M)
    sections = {body[i]: body[i + 1] for i in range(1, len(body), 2)}
    line = re.search(rf"^# ({key} = [^#\n]*)", sections[section], re.M).group(1)
    assert tomllib.loads(line)[key] == expected
