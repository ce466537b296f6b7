"""Run many model requests with a bounded number in flight, a progress bar, and a write per finished request.

`run_jobs(jobs, work, write, concurrency=N)`: `work(job)` runs in a worker thread (the model call); `write(results)`
runs in the calling thread and commits what finished (one short transaction per batch, so a Ctrl-C or a kill
loses at most the requests still in flight). Each result says whether it is done, failed or came from the cache.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cftools.distributed import MAX_THREADS, InFlight, current

WRITE_BATCH = 64


@dataclass
class JobResult:
    job: Any
    ok: bool
    cached: bool = False
    value: Any = None
    error: str | None = None
    not_started: bool = False  # refused before its model call (a budget): left for a rerun, not a failure
    stops_run: BaseException | None = None  # an error that ends the whole run (an endpoint that cannot be reached)


@dataclass
class RunStats:
    total: int = 0
    done: int = 0
    failed: int = 0
    cached: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "done": self.done, "failed": self.failed, "cached": self.cached,
                "seconds": round(self.seconds, 3), "items_per_s": round(self.rate, 2),
                "interrupted": self.interrupted}


@dataclass(frozen=True)
class Shown:
    """How a run of jobs shows its progress: the bar's DESCRIPTION, on CONSOLE (None: rich's default), none if
    QUIET."""

    description: str = "requests"
    console: Console | None = None
    quiet: bool = False


def progress_bar(console: Console | None, disable: bool = False) -> Progress:
    """The requests' bar: its count, what became of them (the shared `cftools.progress` line has no such fields),
    the time so far and the ETA."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("done {task.fields[done]}  failed {task.fields[failed]}  "
                               "cached {task.fields[cached]}  {task.fields[rate]:.1f}/s"),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                    console=console, disable=disable, transient=False)


WAIT_S = 0.25


def run_jobs(jobs: Iterable[Any], work: Callable[[Any], JobResult], write: Callable[[list[JobResult]], None], *,
             concurrency: InFlight = 4, shown: Shown = Shown(), ready: list[JobResult] | None = None,
             total: int | None = None) -> RunStats:
    """Run WORK over JOBS on CONCURRENCY threads, WRITE finished results in batches. READY results (e.g. cache
    hits found in bulk) are written first without a thread. JOBS may be a lazy iterator (claimed work): it may
    yield finished JobResults (written without a thread) and None ("nothing to hand out right now"). Ctrl-C stops
    the queued jobs and returns. CONCURRENCY may be a function (a Ray pool's, which grows as nodes join): asked
    again before each hand-out, with exactly that many calls in flight."""
    ready = list(ready or [])
    if total is None:
        jobs = list(jobs)
        total = len(jobs) + len(ready)
    source = iter(jobs)
    stats = RunStats(total=total)
    finished: queue.Queue[JobResult] = queue.Queue()
    started = time.perf_counter()

    def safe_work(job: Any) -> None:
        try:
            finished.put(work(job))
        except BaseException as exc:  # noqa: BLE001 (a bug in one job must not stop the batch)
            finished.put(JobResult(job=job, ok=False, error=f"{type(exc).__name__}: {exc}",
                                   stops_run=exc if getattr(exc, "stops_run", False) else None))

    with progress_bar(shown.console, disable=shown.quiet) as progress:
        task = progress.add_task(shown.description, total=stats.total, done=0, failed=0, cached=0, rate=0.0)

        def record(batch: list[JobResult]) -> None:
            write(batch)
            for result in batch:
                stats.done += result.ok
                stats.failed += not result.ok and not result.not_started
                stats.cached += result.cached
                if result.error and len(stats.errors) < 20:
                    stats.errors.append(result.error)
            stats.seconds = time.perf_counter() - started
            progress.update(task, advance=len(batch), done=stats.done, failed=stats.failed, cached=stats.cached,
                            rate=(stats.done + stats.failed) / max(stats.seconds, 1e-9))

        for start in range(0, len(ready), WRITE_BATCH * 8):
            record(ready[start:start + WRITE_BATCH * 8])
        growing = callable(concurrency)
        # a fixed pool keeps twice its threads' jobs handed out (the next ones wait in its queue); a growing one
        # starts a thread per call as its limit rises, so exactly that many are handed out
        pool = ThreadPoolExecutor(max_workers=MAX_THREADS if growing else current(concurrency),
                                  thread_name_prefix="cftools-llm")
        in_flight, exhausted = 0, False
        try:
            while True:
                done_now: list[JobResult] = []
                while not exhausted and in_flight < (current(concurrency) if growing else 2 * current(concurrency)):
                    job = next(source, StopIteration)
                    if job is StopIteration:
                        exhausted = True
                    elif job is None:  # nothing to hand out now: write what finished, or wait a little
                        if in_flight == 0 and not done_now:
                            time.sleep(WAIT_S)
                        break
                    elif isinstance(job, JobResult):
                        done_now.append(job)
                    else:
                        pool.submit(safe_work, job)
                        in_flight += 1
                for start in range(0, len(done_now), WRITE_BATCH * 8):
                    record(done_now[start:start + WRITE_BATCH * 8])
                if in_flight == 0:
                    if exhausted:
                        break
                    continue
                batch = [finished.get()]
                while len(batch) < WRITE_BATCH:
                    try:
                        batch.append(finished.get_nowait())
                    except queue.Empty:
                        break
                in_flight -= len(batch)
                stop = next((r.stops_run for r in batch if r.stops_run is not None), None)
                record([r for r in batch if r.stops_run is None])
                if stop is not None:  # no job is handed out any more; those in flight end (the finally waits)
                    raise stop
        except KeyboardInterrupt:
            stats.interrupted = True
            pool.shutdown(wait=False, cancel_futures=True)
        finally:
            pool.shutdown(wait=not stats.interrupted, cancel_futures=True)
    stats.seconds = time.perf_counter() - started
    return stats
