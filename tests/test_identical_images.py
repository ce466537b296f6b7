"""Issue 32: a MuCR pair whose cause and effect images are identical (the same file, or the same picture saved
again) is a check flag, `identical_images`; a real pair of different pictures is not. Real images in a real
store, the real `cftools check`."""

from __future__ import annotations

import uuid

import numpy as np
import PIL.Image
from sqlalchemy import select

from cftools.images import read_image_file, register_image
from cftools.models import CheckFlag, Item


def picture(path, seed: int, size=(64, 48)):  # noqa: ANN001, ANN201
    """A picture with structure (random blocks, scaled up): its perceptual hash means something."""
    blocks = np.random.default_rng(seed).integers(0, 255, (6, 8, 3), dtype=np.uint8)
    PIL.Image.fromarray(blocks).resize(size, PIL.Image.NEAREST).save(path)
    return path


def stored(store, path) -> str:  # noqa: ANN001
    image = read_image_file(path)
    with store.write() as session:
        register_image(store, session, image)
    return f"sha256:{image.sha256}"


def pair_item(store, cause: str, effect: str) -> str:  # noqa: ANN001
    key = f"pair:{uuid.uuid4().hex[:8]}"
    with store.write() as session:
        session.add(Item(key=key, kind="mucr", group="rain", question="rain -> cold", status="draft", data={
            "cause_image": cause, "effect_image": effect, "cause_caption": "a man in the rain",
            "effect_caption": "the man has a cold", "cue": "rain", "false_cues": ["bench", "blanket", "park"]}))
    return key


def test_identical_cause_and_effect_images_are_flagged(workspace, run_cli, tmp_path):
    store = workspace.store
    cause = stored(store, picture(tmp_path / "cause.png", 1))
    effect = stored(store, picture(tmp_path / "effect.png", 2))
    PIL.Image.open(tmp_path / "cause.png").save(tmp_path / "again.jpg", quality=90)  # the same picture, re-encoded
    again = stored(store, tmp_path / "again.jpg")
    PIL.Image.new("RGB", (48, 32), "orange").save(tmp_path / "orange.png")
    PIL.Image.new("RGB", (40, 40), "gray").save(tmp_path / "gray.png")
    same_file, same_picture, different = (pair_item(store, cause, cause), pair_item(store, cause, again),
                                          pair_item(store, cause, effect))
    # two flat fills share a pHash; their colours tell them apart
    flat = pair_item(store, stored(store, tmp_path / "orange.png"), stored(store, tmp_path / "gray.png"))
    out = run_cli("check", "--no-embeddings", "--only", "identical_images", "--json")
    assert out.exit_code == 0, out.output
    with store.session() as session:
        flags = {key: reason for key, reason in session.execute(
            select(Item.key, CheckFlag.reason).join(CheckFlag, CheckFlag.item_id == Item.id)
            .where(CheckFlag.code == "identical_images"))}
    assert sorted(flags) == sorted([same_file, same_picture])
    assert flags[same_file].startswith("the cause and effect images are the same file")
    assert flags[same_picture].startswith("the cause and effect images look the same")
    assert different not in flags and flat not in flags
