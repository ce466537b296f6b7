"""An LLM backend whose calls run on Ray workers (`generate … --ray`): the stand-in the generators' runs get.

The driver builds its own copy of the backend the same way (cheap: a client, or the embedded model not yet
loaded) for what a run asks of it besides calls — name, model, `cache_id` (the request cache's key), the way it
takes a schema, its tokenizer for `--max-cost` — and sends only `complete(messages, params)` to the workers. So the
cache lookup, the budget's reservation, the retries of unparseable replies and the provenance happen in the driver
exactly as in a local run (`cftools.generate.llm_task`)."""

from __future__ import annotations

from typing import Any, Optional

from cftools.distributed import RayWorkers, WorkerSpec, connect
from cftools.llm import make_backend
from cftools.llm.base import Completion, Message

API_CONCURRENCY = 8  # calls in flight per API worker unless --concurrency says otherwise


class RemoteBackend:
    def __init__(self, local: Any, workers: RayWorkers) -> None:
        self.local, self.workers = local, workers

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def model(self) -> str:
        return self.local.model

    @property
    def cache_id(self) -> str:
        return self.local.cache_id

    @property
    def ray_workers(self) -> int:
        """How many workers answer (a run keeps each of them busy: threads = workers x concurrency)."""
        return self.workers.size

    def complete(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        return self.workers.call("complete", messages, params)

    def close(self) -> None:
        self.workers.close()
        self.local.close()

    def __getattr__(self, name: str) -> Any:  # what a kind asks of its backend beyond the protocol
        return getattr(self.local, name)


def remote_backend(config: dict[str, Any], backend: Optional[str], model: Optional[str], address: str,
                   ray_config: Optional[dict[str, Any]] = None, concurrency: Optional[int] = None) -> RemoteBackend:
    """The configured backend with its calls on the Ray cluster at ADDRESS ([ray] actors / cpus_per_actor)."""
    local = make_backend(config, backend, model)
    connect(address)
    ray_config = ray_config or {}
    api = local.name != "local"
    key_env = getattr(local, "api_key_env", None)
    spec = WorkerSpec(build=make_backend, args=(config, backend, model), device=not api,
                      concurrency=(concurrency or API_CONCURRENCY) if api else 1,
                      secrets=(key_env,) if key_env else (), actors=ray_config.get("actors"),
                      cpus=float(ray_config.get("cpus_per_actor") or 1))
    try:
        return RemoteBackend(local, RayWorkers(spec))
    except BaseException:
        local.close()
        raise
