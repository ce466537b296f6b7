"""Image backends and an eval answerer that a test holds at a known point on Ray workers (tests/test_ray.py): each wraps the real
backend (built in the worker as cftools builds it) and, while the hold is armed, answers the first call of the
run and holds every later one until the test releases them, leaving a marker for each held call. The hold lives in
a folder of the machine's temporary directory named for the cluster, which the test process and its workers share.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from cftools.evaluate.remote import LandedAnswerer
from cftools.imagegen import make_image_backend as real_image_backend
from cftools.imagegen.edits import make_edit_backend as real_edit_backend

POLL_S = 0.05


def hold_dir(gcs_address: str) -> Path:
    return Path(tempfile.gettempdir()) / f"cftools-held-images-{gcs_address.replace(':', '-').replace('.', '-')}"


def this_cluster_hold() -> Path:
    import ray

    return hold_dir(ray.get_runtime_context().gcs_address)


def arm(folder: Path) -> None:
    """From now on the first call is answered and every later one held until `release`."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    (folder / "armed").touch()


def held(folder: Path) -> int:
    return len(list(folder.glob("held-*")))


def release(folder: Path) -> None:
    (folder / "released").touch()


def wait_if_held() -> None:
    folder = this_cluster_hold()
    if not (folder / "armed").exists() or (folder / "released").exists():
        return
    try:  # the run's first call (of any worker) goes through
        os.close(os.open(folder / "first", os.O_CREAT | os.O_EXCL))
        return
    except FileExistsError:
        pass
    (folder / f"held-{uuid.uuid4().hex}").touch()
    while not (folder / "released").exists():
        time.sleep(POLL_S)


class Held:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate_pair(self, *args: Any, **kwargs: Any) -> Any:
        wait_if_held()
        return self.inner.generate_pair(*args, **kwargs)

    def edit(self, *args: Any, **kwargs: Any) -> Any:
        wait_if_held()
        return self.inner.edit(*args, **kwargs)


def held_image_backend(*args: Any, **kwargs: Any) -> Held:
    return Held(real_image_backend(*args, **kwargs))


def held_edit_backend(*args: Any, **kwargs: Any) -> Held:
    return Held(real_edit_backend(*args, **kwargs))


class HeldAnswerer(LandedAnswerer):
    """`cftools.evaluate.remote.LandedAnswerer`, held like the image backends (the eval stage's workers)."""

    def generate(self, shipped: list) -> list:
        wait_if_held()
        return super().generate(shipped)

    def score_options(self, shipped: list) -> list:
        wait_if_held()
        return super().score_options(shipped)
