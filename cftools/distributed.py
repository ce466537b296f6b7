"""Where a stage's work units run: in this process, or on a Ray cluster (`--ray [ADDRESS]`).

One layer for every stage (the LLM generators, image synthesis, edits, eval). The stage keeps its loop as it is
today — it selects the work, claims it (`cftools.generate.claims`), looks the request cache up before anything is
sent, reserves `--max-cost`, and writes each result with its provenance as it arrives — and hands only the model
call to a *worker*: a Ray actor that builds the model (an LLM backend, a diffusers pipeline, an `hf:` model) once
and answers calls with it. So:

- the driver (the cftools process) alone opens the store; a worker gets plain data (messages and parameters,
  prompts, image bytes) and gives back plain results (a completion, PIL images, answers), and never sees the
  store's URL or its password;
- a rerun after any failure finds what the driver wrote and sends only what is missing, keyed as in a local run;
- a worker process that dies is restarted by Ray (`max_restarts`) and its calls in flight are sent again
  (`max_task_retries`): the driver waits for their results as if nothing happened (a result is written once,
  when it comes back to the driver);
- a node that joins the cluster mid-run gets workers of its own: the pool looks at the cluster again every
  `GROW_S` seconds while calls are made, and adds workers where there is room (unless `[ray] actors` fixes the
  number).

Workers are one per GPU (`num_gpus=1`) for a model when the cluster has GPUs, else one per node; API calls go to
async actors, one per node, each with `concurrency` calls in flight. Secrets reach workers only as environment
variables through the actor's `runtime_env` (the variables a backend names, e.g. `OPENAI_API_KEY`); nothing of
them is written to the store, the config or a log by cftools.

Ray is optional (`pip install 'cftools[ray]'`): nothing imports it until `--ray` is given.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar, Union

from cftools.errors import CftoolsError, Hint

RAY_EXTRA = "cftools[ray]"
GROW_S = 5.0  # how often a pool looks for room on nodes that joined
RESTARTS = 4  # a worker process that dies is started again this many times
TASK_RETRIES = 4  # a call whose worker died is sent again this many times
LOCAL = "local"  # `--ray` given without an address: ray.init() finds a cluster of this machine or starts one
CONNECT_CHECK_S = 10.0  # a cluster's port accepts at once; one that has not in this long is not there

Unit = TypeVar("Unit")
END = object()
MAX_THREADS = 1024  # a pool that grows as nodes join: threads start only as calls are handed out, up to this

# How many calls to keep in flight: a number, or a function asked again before each hand-out (a Ray pool's grows
# as nodes join, `in_flight_of`).
InFlight = Union[int, Callable[[], int]]


class RayError(CftoolsError):
    """Ray is not installed, the cluster cannot be reached, or a worker cannot run at all (one line)."""


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayError(f"Ray is not installed: pip install '{RAY_EXTRA}'",
                       hint=Hint(f"{{ray}} needs Ray, which is not installed: pip install '{RAY_EXTRA}'",
                                 ray="--ray")) from None
    return ray


def connect(address: Optional[str]) -> Any:
    """Ray, connected to the cluster at ADDRESS (`ray://host:10001`, `host:6379`, `auto`) or, without one, to
    this machine's (a new one when there is none); a process already connected stays so."""
    ray = require_ray()
    if not ray.is_initialized():
        silent = unanswered(address)
        if silent is not None:
            raise RayError(f"cannot connect to the Ray cluster at {address}: {silent}")
        try:
            with driver_only_hidden():  # a cluster ray.init starts here inherits this environment
                ray.init(address=None if address in (None, "", LOCAL) else address, logging_level="ERROR",
                         log_to_driver=False, configure_logging=False)
        except ImportError as exc:  # ray:// is Ray Client, which is not in Ray's core install
            raise RayError(f"cannot connect to {address}: Ray Client is not installed (pip install 'ray[client]'), "
                           f"or connect with HOST:6379 from a node of the cluster ({exc.name or exc})") from None
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RayError(f"cannot connect to the Ray cluster at {address or 'this machine'}: {first}") from None
    return ray


# Variables that hold what only the driver may know (the store's password): a local cluster that ray.init starts is
# this process's child, and its workers would inherit them. The workspace adds its [store] password_env.
DRIVER_ONLY: set[str] = {"PGPASSWORD"}


def keep_on_driver(variable: str) -> None:
    """VARIABLE is not passed on to the processes of a Ray cluster this process starts."""
    DRIVER_ONLY.add(variable)


@contextlib.contextmanager
def driver_only_hidden() -> Iterator[None]:
    """The DRIVER_ONLY variables out of this process's environment for the block, then back."""
    saved = {name: os.environ.pop(name) for name in sorted(DRIVER_ONLY) if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def unanswered(address: Optional[str]) -> Optional[str]:
    """Why nothing answers at ADDRESS (`host:port` or `ray://host:port`), found before ray.init, which retries such
    an address for minutes with only log lines; None when it answers, or is no host and port (`auto`, none)."""
    target = (address or "").removeprefix("ray://")
    host, colon, port = target.rpartition(":")
    if not colon or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_CHECK_S):
            return None
    except OSError as exc:
        return f"nothing answers on {target} ({exc.strerror or type(exc).__name__}); is the cluster started there?"


@dataclass(frozen=True)
class WorkerSpec:
    """What each worker builds once: BUILD(*ARGS, **KWARGS), a module-level function (Ray ships it by name)."""

    build: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    device: bool = False  # loads a model: one worker per GPU, or per node without GPUs
    concurrency: int = 1  # calls one worker runs at once (API calls: an async actor with many)
    secrets: tuple[str, ...] = ()  # environment variables the worker reads (sent through runtime_env only)
    actors: Optional[int] = None  # a fixed number of workers ([ray] actors); None: as the cluster allows
    cpus: float = 1.0  # CPUs a model worker asks for ([ray] cpus_per_actor)


class Hosted:
    """The object a worker holds; what building it raised is raised again by every call (Ray restarts a worker
    whose process died, not one whose model cannot load: the user must hear why)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.error: Optional[BaseException] = None
        try:
            self.obj = spec.build(*spec.args, **spec.kwargs)
        except Exception as exc:  # noqa: BLE001 (kept and raised on each call, with its own type)
            self.obj, self.error = None, exc

    def ready(self) -> int:
        if self.error is not None:
            raise self.error
        return os.getpid()

    @staticmethod
    def node() -> str:
        """The id of the Ray node this worker runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        if self.error is not None:
            raise self.error
        return getattr(self.obj, method)(*args, **kwargs)

    def describe(self, names: tuple[str, ...]) -> dict[str, Any]:
        """Plain attributes of the object (its name, model, licence), for the driver's reports."""
        if self.error is not None:
            raise self.error
        return {name: getattr(self.obj, name, None) for name in names}


class CftoolsWorker:
    """A model worker: one call at a time (the model is the bottleneck)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.hosted = Hosted(spec)

    def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        return self.hosted.call(method, args, kwargs)

    def ready(self) -> int:
        """This worker's process id, once its object is built (what building it raised, raised)."""
        return self.hosted.ready()

    def describe(self, names: tuple[str, ...]) -> dict[str, Any]:
        return self.hosted.describe(names)

    def node(self) -> str:
        return self.hosted.node()


class CftoolsApiWorker:
    """An API worker: an async actor whose calls wait on the network side by side, `concurrency` at once (the
    backends are blocking clients: each call waits on a thread of the actor's own pool)."""

    def __init__(self, spec: WorkerSpec) -> None:
        from concurrent.futures import ThreadPoolExecutor as Pool

        self.hosted = Hosted(spec)
        self.pool = Pool(max_workers=max(1, spec.concurrency), thread_name_prefix="cftools-api")

    async def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: self.hosted.call(method, args, kwargs))

    async def ready(self) -> int:
        return self.hosted.ready()

    async def describe(self, names: tuple[str, ...]) -> dict[str, Any]:
        return self.hosted.describe(names)

    async def node(self) -> str:
        return self.hosted.node()


def unwrap(exc: BaseException) -> BaseException:
    """The error a worker raised, as the caller would have seen it locally (Ray wraps it)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


class RayWorkers:
    """A pool of workers on the connected cluster; `call` runs a method of the workers' object on the least busy
    worker and waits for its result (callers run as many calls at once as they want results in flight)."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.ray = require_ray()
        if not self.ray.is_initialized():
            raise RayError("Ray is not connected (cftools.distributed.connect first)")
        self.spec = spec
        self.actors: list[Any] = []
        self.busy: dict[int, int] = {}
        self.handed: dict[int, int] = {}  # calls handed to each worker so far (`calls_by_node`)
        self.placed: set[str] = set()  # nodes given a worker of their own (one worker per node)
        self._lock = threading.Lock()
        self._grown_at = 0.0
        self.grow()
        if not self.actors:
            raise RayError("the Ray cluster has no room for a worker (no CPU or GPU free)")
        self.check()

    # ------------------------------------------------------------------ the pool's size
    def wanted(self) -> int:
        """How many workers the cluster has room for now."""
        if self.spec.actors:
            return int(self.spec.actors)
        if self.spec.device and self.gpus():
            return int(self.gpus())
        return len(self.alive_nodes())

    def gpus(self) -> float:
        return float(self.ray.cluster_resources().get("GPU", 0))

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [node for node in self.ray.nodes() if node.get("Alive")]

    def per_node(self) -> bool:
        """One worker per node (no fixed number, no GPUs to count): each is placed on its node by name."""
        return not self.spec.actors and not (self.spec.device and self.gpus())

    def actor_options(self, node_id: Optional[str] = None) -> dict[str, Any]:
        env = {name: os.environ[name] for name in self.spec.secrets if os.environ.get(name)}
        options: dict[str, Any] = {"max_restarts": RESTARTS, "max_task_retries": TASK_RETRIES,
                                   "scheduling_strategy": "SPREAD"}
        if node_id is not None:
            # an API worker asks for no CPU: SPREAD alone may put the new node's worker on the head (issue 45)
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
        if env:
            options["runtime_env"] = {"env_vars": env}
        if self.spec.device and self.gpus():
            options.update(num_gpus=1, num_cpus=self.spec.cpus)
        elif self.spec.device:
            options.update(num_cpus=self.spec.cpus)
        else:  # API calls wait on the network: they take no CPU from the models' workers
            options.update(num_cpus=0, max_concurrency=max(1, self.spec.concurrency))
        return options

    def grow(self) -> int:
        """Add workers up to what the cluster has room for (nodes that joined since the last look); returns how
        many there are."""
        with self._lock:
            self._grown_at = time.monotonic()
            kind = self.ray.remote(CftoolsWorker if self.spec.device else CftoolsApiWorker)
            if self.per_node():
                for node in self.alive_nodes():
                    if node["NodeID"] not in self.placed:
                        self.placed.add(node["NodeID"])
                        self._add(kind.options(**self.actor_options(node["NodeID"])))
                return len(self.actors)
            for _ in range(self.wanted() - len(self.actors)):
                self._add(kind.options(**self.actor_options()))
            return len(self.actors)

    def _add(self, actor_class: Any) -> None:
        actor = actor_class.remote(self.spec)
        self.busy[id(actor)] = self.handed[id(actor)] = 0
        self.actors.append(actor)

    def nodes(self) -> list[str]:
        """The node each worker runs on."""
        return self.ray.get([actor.node.remote() for actor in self.actors])

    def calls_by_node(self) -> dict[str, int]:
        """How many calls the workers of each node were handed so far."""
        found: dict[str, int] = {}
        for actor, node in zip(self.actors, self.nodes()):
            found[node] = found.get(node, 0) + self.handed[id(actor)]
        return found

    @property
    def size(self) -> int:
        return len(self.actors)

    @property
    def in_flight(self) -> int:
        """Calls worth having in flight at once: every worker busy."""
        per_worker = 1 if self.spec.device else max(1, self.spec.concurrency)
        return max(1, self.size * per_worker)

    def check(self) -> None:
        """Fail at once, on one line, when the first worker cannot build its object (a bad model folder)."""
        try:
            self.ray.get(self.actors[0].ready.remote())
        except self.ray.exceptions.RayTaskError as exc:
            raise unwrap(exc) from None  # the model's own error (a CftoolsError says what to do)
        except Exception as exc:  # noqa: BLE001
            raise RayError(f"a Ray worker did not start: {first_line(unwrap(exc))}") from None

    # ------------------------------------------------------------------ calls
    def _pick(self) -> Any:
        if not self.spec.actors and time.monotonic() - self._grown_at > GROW_S:
            self.grow()
        with self._lock:
            actor = min(self.actors, key=lambda a: self.busy[id(a)])
            self.busy[id(actor)] += 1
            self.handed[id(actor)] += 1
            return actor

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """METHOD(*ARGS, **KWARGS) of the workers' object, run by the least busy worker; its error is raised
        here with its own type."""
        actor = self._pick()
        try:
            return self.ray.get(actor.call.remote(method, args, kwargs))
        except self.ray.exceptions.RayTaskError as exc:
            raise unwrap(exc) from None
        except self.ray.exceptions.RayActorError as exc:
            raise RayError(f"a Ray worker died for good (it was restarted {RESTARTS} times): "
                           f"{first_line(exc)}") from None
        finally:
            with self._lock:
                self.busy[id(actor)] -= 1

    def describe(self, *names: str) -> dict[str, Any]:
        """Plain attributes of the workers' object (all workers build the same one)."""
        try:
            return self.ray.get(self.actors[0].describe.remote(names))
        except self.ray.exceptions.RayTaskError as exc:
            raise unwrap(exc) from None

    def pids(self) -> list[int]:
        """The workers' process ids (for a test that kills one)."""
        return self.ray.get([actor.ready.remote() for actor in self.actors])

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 (best effort: the cluster may be gone already)
                pass
        self.actors, self.placed = [], set()


def in_flight_of(backend: Any) -> InFlight:
    """The calls BACKEND wants at once: for one on a Ray pool a function of the pool's size now (a node that joins
    mid-run adds workers, and so calls in flight), else its fixed `in_flight` (1 when it has none)."""
    if isinstance(getattr(backend, "workers", None), RayWorkers):
        return lambda: backend.in_flight
    return int(getattr(backend, "in_flight", 1) or 1)


def current(limit: InFlight) -> int:
    """LIMIT now (at least 1)."""
    return max(1, int(limit() if callable(limit) else limit))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def as_completed(units: Iterable[Unit], work: Callable[[Unit], Any], in_flight: InFlight = 1) -> Iterator[tuple[Unit, Any]]:
    """(unit, WORK(unit)) for every unit, each as soon as it is done, with up to IN_FLIGHT units worked on at once
    (threads; each waits on its worker; a function is asked again before each hand-out, so a pool that grows gets
    more). With IN_FLIGHT the number 1 the units are done one after the other in this thread, as a local run always
    did. The caller writes each result as it comes, in its own thread (the driver is the only writer). An error of
    WORK is raised once the units in flight have come back (those are yielded first)."""
    if not callable(in_flight) and in_flight <= 1:
        for unit in units:
            yield unit, work(unit)
        return
    pending: dict[Future, Unit] = {}
    source = iter(units)
    failure: Optional[BaseException] = None
    threads = MAX_THREADS if callable(in_flight) else in_flight
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="cftools-dispatch") as pool:
        def fill() -> None:
            while failure is None and len(pending) < min(current(in_flight), threads):
                unit = next(source, END)
                if unit is END:
                    return
                pending[pool.submit(work, unit)] = unit

        fill()
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in done:
                unit = pending.pop(future)
                try:
                    result = future.result()
                except BaseException as exc:  # noqa: BLE001 (raised below, after the others came back)
                    failure = failure or exc
                    continue
                yield unit, result
            fill()
    if failure is not None:
        raise failure
