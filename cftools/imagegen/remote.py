"""An image or edit backend whose pictures are made on Ray workers (`generate images|edits … --ray`).

Each worker loads the pipeline once (one per GPU; one per node without GPUs) and answers `generate_pair` /
`edit` calls; the driver keeps the run's loop (claims, what is missing, writing files and rows as results come
back). The seeds travel with each call, so candidate k is the same image whichever worker draws it. An images
API backend stays on the driver: its calls wait on the network and its request cache is the store."""

from __future__ import annotations

from typing import Any, Callable, Optional

from cftools.distributed import RayWorkers, WorkerSpec, connect

DESCRIBED = ("name", "model", "licence", "revision")


class RemoteImages:
    def __init__(self, workers: RayWorkers) -> None:
        self.workers = workers
        self.description = workers.describe(*DESCRIBED)
        self.name, self.model = self.description["name"], self.description["model"]
        self.licence = self.description["licence"]

    @property
    def in_flight(self) -> int:
        return self.workers.in_flight

    def generate_pair(self, *args: Any, **kwargs: Any) -> list:
        return self.workers.call("generate_pair", *args, **kwargs)

    def edit(self, *args: Any, **kwargs: Any) -> list:
        return self.workers.call("edit", *args, **kwargs)

    def close(self) -> None:
        self.workers.close()


def remote_images(build: Callable[..., Any], args: tuple, kwargs: dict[str, Any], address: str,
                  ray_config: Optional[dict[str, Any]] = None, backend_name: Optional[str] = None) -> Any:
    """BUILD(*ARGS, **KWARGS) (make_image_backend or make_edit_backend) on Ray workers; an API backend
    (BACKEND_NAME "openai") is built here, on the driver."""
    if backend_name == "openai":
        return build(*args, **kwargs)
    connect(address)
    ray_config = ray_config or {}
    spec = WorkerSpec(build=build, args=args, kwargs=kwargs, device=True, actors=ray_config.get("actors"),
                      cpus=float(ray_config.get("cpus_per_actor") or 1))
    return RemoteImages(RayWorkers(spec))
