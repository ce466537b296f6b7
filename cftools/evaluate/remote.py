"""An `hf:` model that answers on Ray workers (`cftools eval … --ray`): one worker per GPU (one per node without
GPUs) loads the model once; the driver builds the questions, keeps the predictions file (it alone writes it) and
sends each batch's prompts with their images as bytes, so a worker needs no shared file system."""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from cftools.distributed import RayWorkers, WorkerSpec, connect
from cftools.evaluate.vlm import Prompt


@dataclass
class ShippedPrompt:
    prompt: Prompt  # its images' paths are the driver's
    images: list[tuple[str, bytes]]  # (file suffix, bytes) of each image, in order


def ship(prompts: Sequence[Prompt]) -> list[ShippedPrompt]:
    return [ShippedPrompt(p, [(Path(i).suffix, Path(i).read_bytes()) for i in p.images]) for p in prompts]


class LandedAnswerer:
    """On a worker: the model, and the images of the prompts it gets written under a folder of its own (by
    content, so an image asked about twice is written once)."""

    def __init__(self, spec: str, device: str, dtype: str, allow_downloads: bool = False) -> None:
        from cftools.evaluate.answerers import load_answerer, parse_model_spec

        self.inner = load_answerer(parse_model_spec(spec), device, dtype, allow_downloads=allow_downloads)
        self.folder = Path(tempfile.mkdtemp(prefix="cftools-eval-images-"))

    def land(self, shipped: ShippedPrompt) -> Prompt:
        paths = []
        for suffix, data in shipped.images:
            path = self.folder / (hashlib.sha256(data).hexdigest() + suffix)
            if not path.exists():
                path.write_bytes(data)
            paths.append(path)
        return replace(shipped.prompt, images=paths)

    def generate(self, shipped: list[ShippedPrompt]) -> list[str]:
        return self.inner.generate([self.land(s) for s in shipped])

    def score_options(self, shipped: list[ShippedPrompt]) -> list:
        return self.inner.score_options([self.land(s) for s in shipped])


class RemoteAnswerer:
    needs_image = True

    def __init__(self, workers: RayWorkers) -> None:
        self.workers = workers

    @property
    def in_flight(self) -> int:
        return self.workers.in_flight

    def generate(self, prompts: Sequence[Prompt]) -> list[str]:
        return self.workers.call("generate", ship(prompts))

    def score_options(self, prompts: Sequence[Prompt]) -> list:
        return self.workers.call("score_options", ship(prompts))

    def close(self) -> None:
        self.workers.close()


def cluster_device(device: str, address: str) -> str:
    """DEVICE as the workers will use it: `auto` is cuda when the cluster has GPUs (the driver may have none)."""
    ray = connect(address)
    if device != "auto":
        return device
    return "cuda" if ray.cluster_resources().get("GPU", 0) else "cpu"


def remote_answerer(spec: str, device: str, dtype: str, address: str, allow_downloads: bool = False,
                    ray_config: Optional[dict[str, Any]] = None) -> RemoteAnswerer:
    connect(address)
    ray_config = ray_config or {}
    return RemoteAnswerer(RayWorkers(WorkerSpec(
        build=LandedAnswerer, args=(spec, device, dtype, allow_downloads), device=True,
        actors=ray_config.get("actors"), cpus=float(ray_config.get("cpus_per_actor") or 1))))
