"""`generate … --batch-api`: a generator's requests sent as batches, their results stored as synchronous calls are.

Before the run, the requests the run would send (each job's first attempt with no cached, parseable reply; after
an unparseable reply, the next attempt) go into one batch; once it is finished the next round sends the retries,
up to the attempt limit. The run then goes on as usual (`run_llm_task`), its model calls answered from the
batches' results: same cache keys, same provenance, plus the batch id.

Each batch is recorded in the store (`llm_batches`) before it is created and until its results are stored, so a
killed cftools collects the batch it submitted instead of submitting the requests again; a batch whose create
call was cut off is found again by its input file. Requests served by the cache are never sent.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional

from rich.console import Console
from cftools.terminal import escape
from sqlalchemy import select, update

from cftools.generate.llm_task import Attempts, LLMJob, ParseError
from cftools.llm.base import Completion, LLMError, request_key
from cftools.llm.batch import DEFAULT_WINDOW, BatchClient, BatchRequest, BatchResults, BatchState
from cftools.llm.cache import cached_completions
from cftools.llm.structured import ReplyError
from cftools.models import LLMBatch, utcnow
from cftools.store import Store

DEFAULT_POLL_S = 30.0
SUBMITTED, FINISHED, COLLECTED = "submitted", "finished", "collected"


class BatchRun:
    """The batches of one generator run: those left by a killed run, then the ones this run submits."""

    def __init__(self, store: Store, backend: Any, generator: str, poll_s: float = DEFAULT_POLL_S,
                 window: str = DEFAULT_WINDOW, console: Console | None = None, quiet: bool = False) -> None:
        self.store, self.backend, self.generator = store, backend, generator
        self.client = BatchClient(backend)
        self.poll_s, self.window = poll_s, window
        self.console, self.quiet = console or Console(stderr=True), quiet
        self.results = BatchResults()
        self.used: list[int] = []  # llm_batches rows whose results this run holds
        self.submitted = 0  # requests this run sent

    # ------------------------------------------------------------------ rounds
    def prepare(self, jobs: list[LLMJob], attempts: Attempts, refresh: bool,
                afford: Optional[Callable[[list[BatchRequest]], list[BatchRequest]]] = None) -> list[LLMJob]:
        """Collect the batches still open for this generator, then send what the jobs still need, round by round.
        AFFORD (a budget) may keep only the first requests of a round; the jobs of the others are left out of this
        run. Returns the jobs to run."""
        for row_id in self.open_batches():
            self.collect(row_id)
        left_out: set[int] = set()
        for _ in range(attempts.max_attempts):
            live = [job for job in jobs if id(job) not in left_out]
            needed = needed_requests(self.store, live, attempts, self.results, refresh)
            requests = [request for request, _ in needed.values()]
            if afford is not None:
                sent = afford(requests)
                for request in requests[len(sent):]:
                    left_out.update(id(job) for job in needed[request.key][1])
                requests = sent
            if not requests:
                break
            self.collect(self.submit(requests))
        return [job for job in jobs if id(job) not in left_out]

    def open_batches(self) -> list[int]:
        with self.store.session() as session:
            return list(session.execute(select(LLMBatch.id).where(
                LLMBatch.generator == self.generator, LLMBatch.backend == self.backend.cache_id,
                LLMBatch.model == self.backend.model, LLMBatch.state != COLLECTED).order_by(LLMBatch.id)).scalars())

    def submit(self, requests: list[BatchRequest]) -> int:
        """Upload REQUESTS, record the file, create the batch, record its id; returns the record's id."""
        file_id = self.client.upload(requests)
        with self.store.write() as session:
            row = LLMBatch(generator=self.generator, backend=self.backend.cache_id, model=self.backend.model,
                           input_file_id=file_id, requests=len(requests), completion_window=self.window)
            session.add(row)
            session.flush()
            row_id = row.id
        self.create(row_id, file_id)
        self.submitted += len(requests)
        return row_id

    def create(self, row_id: int, file_id: str) -> BatchState:
        state = self.client.create(file_id, self.window, {"cftools_generator": self.generator[:512]})
        self.update(row_id, state)
        return state

    def update(self, row_id: int, batch: BatchState, **values: Any) -> None:
        with self.store.write() as session:
            session.execute(update(LLMBatch).where(LLMBatch.id == row_id).values(
                batch_id=batch.batch_id, status=batch.status, completed=batch.completed, failed=batch.failed,
                updated_at=utcnow(), **values))

    def collect(self, row_id: int) -> None:
        """Wait for the batch of record ROW_ID to finish and hold its results."""
        with self.store.session() as session:
            row = session.get(LLMBatch, row_id)
            batch_id, file_id = row.batch_id, row.input_file_id
        if batch_id is None:  # killed while creating it: the API may have made it all the same
            state = self.client.find_by_input(file_id)
            if state is None:
                state = self.create(row_id, file_id)
            else:
                self.update(row_id, state)
            batch_id = state.batch_id
        state = self.wait(row_id, batch_id)
        results = self.client.results(state)
        for key, error in results.errors.items():
            if key not in self.results.completions:
                self.results.errors[key] = error
        for key, completion in results.completions.items():
            if key in self.results.completions:  # an answer already held came first: this one is a later answer
                self.results.later.setdefault(key, []).append(completion)
                continue
            self.results.completions[key] = completion
            self.results.errors.pop(key, None)
        for key, completions in results.later.items():
            self.results.later.setdefault(key, []).extend(completions)
        self.report_problems(results)
        self.update(row_id, state, state=FINISHED)
        self.used.append(row_id)

    def report_problems(self, results: BatchResults) -> None:
        """Say what a batch's result files held besides answers (shown even with --quiet: it may be paid for)."""
        self.results.problems += results.problems
        self.results.repeated += results.repeated
        self.results.unknown += results.unknown
        self.results.unreadable += results.unreadable
        if results.problems:
            self.console.print(f"[yellow]batch results: {results.repeated} repeated custom_ids, {results.unknown} "
                               f"unknown custom_ids, {results.unreadable} unreadable lines[/]")
            for problem in results.problems[:20]:
                self.console.print(f"[yellow]  {escape(problem)}[/]", soft_wrap=True)
            if len(results.problems) > 20:
                self.console.print(f"[yellow]  … and {len(results.problems) - 20} more[/]")

    def wait(self, row_id: int, batch_id: str) -> BatchState:
        """Poll until the batch is finished, showing its status and window."""
        started = time.monotonic()
        with self.console.status("", spinner="dots") as shown:
            while True:
                state = self.client.retrieve(batch_id)
                self.update(row_id, state)
                if not self.quiet:
                    shown.update(self.describe(state, time.monotonic() - started))
                if state.finished:
                    break
                time.sleep(self.poll_s)
        if not self.quiet:
            self.console.print(self.describe(state, time.monotonic() - started))
        return state

    def describe(self, state: BatchState, waited_s: float) -> str:
        expires = ""
        if state.expires_at:
            left = state.expires_at - time.time()
            expires = f", window {self.window} ({_duration(left)} left)" if left > 0 else f", window {self.window} over"
        return (f"batch {state.batch_id}: {state.status}, {state.completed}/{state.total or '?'} done, "
                f"{state.failed} failed{expires}, waited {_duration(waited_s)}")

    def mark_collected(self) -> None:
        """The run stored every result it held: the batches are done with."""
        if self.used:
            with self.store.write() as session:
                session.execute(update(LLMBatch).where(LLMBatch.id.in_(self.used)).values(
                    state=COLLECTED, updated_at=utcnow()))

    def serve(self, key: str) -> Completion:
        """The batch's answer to the request KEY, as a fresh call's (raises LLMError when it failed or was not
        in any batch)."""
        completion = self.results.completions.get(key)
        if completion is not None:
            return Completion(text=completion.text, prompt_tokens=completion.prompt_tokens,
                              completion_tokens=completion.completion_tokens, extra=dict(completion.extra))
        error = self.results.errors.get(key)
        raise LLMError(error or "no batch answered this request; rerun to send it in a new batch")


def needed_requests(store: Store, jobs: Iterable[LLMJob], attempts: Attempts,
                    results: BatchResults, refresh: bool) -> dict[str, tuple[BatchRequest, list[LLMJob]]]:
    """What each job needs sent next, by request key with the jobs that need it: its first attempt with no reply
    (from the batches or the cache) when every earlier reply was unparseable; nothing for a job with a parseable
    reply, a failed request, or no attempts left."""
    backend = attempts.backend
    plans = [(job, [(params, request_key(backend.cache_id, backend.model, job.messages, params))
                    for params in (attempts.params_of(job, n) for n in range(1, attempts.max_attempts + 1))])
             for job in jobs]
    cache = {} if refresh else cached_completions(store, [key for _, plan in plans for _, key in plan])
    needed: dict[str, tuple[BatchRequest, list[LLMJob]]] = {}
    for job, plan in plans:
        for params, key in plan:
            if key in results.errors:
                break
            completion = results.completions.get(key) or cache.get(key)
            if completion is None:
                needed.setdefault(key, (BatchRequest(key, job.messages, params), []))[1].append(job)
                break
            if parses(attempts, completion.text, job) or serve_first_usable(results, key, attempts, job):
                break
    return needed


def serve_first_usable(results: BatchResults, key: str, attempts: Attempts, job: LLMJob) -> bool:
    """When the first answer of KEY does not parse, the first later answer that does (a custom_id answered twice:
    both were paid for) becomes the one served, the unusable one kept among the later ones. True if one did."""
    later = results.later.get(key) or []
    usable = next((c for c in later if parses(attempts, c.text, job)), None)
    if usable is None or key not in results.completions:
        return False
    later.remove(usable)
    later.insert(0, results.completions[key])
    results.completions[key] = usable
    return True


def parses(attempts: Attempts, text: str, job: LLMJob) -> bool:
    try:
        attempts.task.parse(text, job)
    except (ParseError, ReplyError):
        return False
    return True


def open_batches(store: Store) -> list[dict[str, Any]]:
    """Every batch not yet stored (`cftools generate status`): submitted or finished, with what is known of it."""
    with store.session() as session:
        rows = session.execute(select(LLMBatch).where(LLMBatch.state != COLLECTED).order_by(LLMBatch.id)).scalars()
        return [{"batch_id": r.batch_id, "generator": r.generator, "backend": r.backend, "model": r.model,
                 "state": r.state, "status": r.status, "requests": r.requests, "completed": r.completed,
                 "failed": r.failed, "window": r.completion_window, "input_file_id": r.input_file_id,
                 "submitted_at": r.created_at, "updated_at": r.updated_at} for r in rows]


def _duration(seconds: Optional[float]) -> str:
    seconds = max(0, int(seconds or 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
