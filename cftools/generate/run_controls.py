"""What a generate command asks of its runs beyond the generator itself: the money (tokens and cost per run, a
budget that stops dispatching), a dry run that only estimates, and the Batch API.

The command wraps its backend in a `ControlledBackend` (`cftools.commands.generation.run_with_llm`); every
`run_llm_task` of the command finds the controls on it, so each generator gets them without code of its own:
- `start` before a run: an estimate instead of the run (`--estimate`), or the batches sent and collected
  (`--batch-api`), whose results the backend then hands out instead of calling the model;
- `reserve` before each model call: with `max_cost`, the call's worst-case cost (its prompt tokens and its
  `max_tokens` at the model's price) is reserved first, and a call whose reservation would take spending plus what
  is reserved past the budget is never started; the difference is released when the reply comes back. So spending
  never exceeds the budget by more than the requests in flight could cost at worst (by nothing, when the prompt
  tokens are counted exactly and the API keeps to `max_tokens`);
- `gate` on the jobs: no job is dispatched once a call was refused (those in flight finish and are stored);
- `record` in the writer: tokens and cost of what was stored.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional

from rich.console import Console
from sqlalchemy import func, select

from cftools.errors import Hint
from cftools.llm.base import DEFAULT_PARAMS, Completion, Message, request_key
from cftools.llm.cost import WORST_CASE_COST, BudgetReached, Price, TokenCounter, Usage, token_counter
from cftools.llm.runner import JobResult
from cftools.models import Generation
from cftools.store import Store

if TYPE_CHECKING:
    from cftools.distributed import InFlight


BATCH_SERVING_WORKERS = 64


@dataclass
class RunControls:
    config: dict[str, Any] = field(default_factory=dict)  # the [llm] section
    price: Optional[Price] = None
    max_cost: Optional[float] = None
    estimate: bool = False
    batch_api: bool = False
    poll_s: float = 30.0
    window: str = "24h"
    usage: Usage = field(default_factory=Usage)
    selected: int = 0  # jobs over every run of the command
    done: int = 0  # jobs stored with their output
    stopped: bool = False  # the budget stopped dispatching
    estimates: list[dict[str, Any]] = field(default_factory=list)
    batches: list[Any] = field(default_factory=list)  # this command's BatchRuns
    counter: Optional[TokenCounter] = None
    estimated_keys: set[str] = field(default_factory=set)
    spent: float = 0.0  # what the model calls that came back cost (as they come back, before they are stored)
    reserved: float = 0.0  # the worst-case cost of the calls in flight
    in_flight: int = 0  # calls holding a reservation
    refused: bool = False  # a call did not fit in the budget: no more are started (a batch's answers are still served)
    batch_worst: dict[str, float] = field(default_factory=dict)  # request key -> its worst case, as a budget sent it

    def __post_init__(self) -> None:
        self.usage.price = self.price
        self._settled = threading.Condition()

    @property
    def left(self) -> int:
        """Jobs of the command's runs not stored yet (a rerun does them)."""
        return max(0, self.selected - self.done)

    @property
    def exhausted(self) -> bool:
        return self.max_cost is not None and (self.refused or max(self.usage.cost, self.spent) >= self.max_cost)

    # ------------------------------------------------------------------ reservations (--max-cost)
    def worst_case(self, backend: Any, messages: list[Message], params: dict[str, Any], batch: bool = False) -> float:
        """The most a call may cost: its prompt tokens and its whole `max_tokens` at the model's price."""
        if self.counter is None:
            self.counter = token_counter(backend, self.config)
        most_out = int(params.get("max_tokens") or DEFAULT_PARAMS["max_tokens"])
        return self.price.cost(self.counter.count(messages), most_out, batch)

    def charge_unmetered(self, completion: Completion, backend: Any, messages: list[Message], params: dict[str, Any],
                         reservation: float = 0.0, batch: bool = False) -> Completion:
        """A paid reply without token counts is charged at its worst case (the reservation a budget made for it),
        written on the completion so the run's cost, its summary and the stored call all say so."""
        if self.price is None or (completion.prompt_tokens is not None and completion.completion_tokens is not None):
            return completion
        completion.extra[WORST_CASE_COST] = reservation or self.worst_case(backend, messages, params, batch)
        return completion

    def reserve(self, backend: Any, messages: list[Message], params: dict[str, Any]) -> float:
        """Reserve a call's worst-case cost before it is sent (0 without a budget). When it does not fit in what
        the spending and the calls in flight leave of the budget, wait for calls in flight to settle; when none is
        left and it still does not fit, raise BudgetReached and stop dispatching."""
        if self.max_cost is None or self.price is None:
            return 0.0
        most = self.worst_case(backend, messages, params)
        with self._settled:
            while not self.refused and self.spent + self.reserved + most > self.max_cost:
                if self.in_flight == 0:  # nothing in flight will free any of the budget
                    self.refused = self.stopped = True
                    break
                self._settled.wait()  # a call in flight will settle below its worst case: then it may fit
            if self.refused:
                raise BudgetReached(f"not sent: at most ${most:.6f} would take the spending past the maximum cost "
                                    f"${self.max_cost:.6f} (${self.spent:.6f} spent)", hint=Hint(
                                        f"not sent: at most ${most:.6f} would take the spending past {{max_cost}} "
                                        f"${self.max_cost:.6f} (${self.spent:.6f} spent)", max_cost="--max-cost"))
            self.reserved += most
            self.in_flight += 1
        return most

    def settle(self, reservation: float, completion: Optional[Completion]) -> None:
        """A call came back (or failed): its reservation is released and what it cost is spent. A reply without
        token counts is taken at its worst case."""
        if self.max_cost is None or self.price is None:
            return
        if completion is None:
            cost = 0.0
        elif completion.prompt_tokens is None or completion.completion_tokens is None:
            cost = completion.extra.get(WORST_CASE_COST, reservation)
        else:
            cost = self.price.cost(completion.prompt_tokens, completion.completion_tokens)
        with self._settled:
            self.in_flight -= 1
            # counted, not compared: sums of float costs need not come back to exactly 0
            self.reserved = self.reserved - reservation if self.in_flight else 0.0
            self.spent += cost
            self._settled.notify_all()

    # ------------------------------------------------------------------ hooks of run_llm_task
    def start(self, store: Store, backend: "ControlledBackend", task: Any, jobs: list[Any], attempts: Any,
              refresh: bool, console: Console | None, quiet: bool) -> Optional[list[Any]]:
        """Before a run: the jobs to run (those a budget leaves out of a batch are not), or None when the run must
        not call the model (an estimate was asked for)."""
        self.selected += len(jobs)
        if self.estimate:
            self.estimates.append(self.estimate_run(store, backend, task, jobs, attempts, refresh))
            return None
        if self.batch_api and jobs and not self.exhausted:
            from cftools.generate.batch_api import BatchRun

            run = BatchRun(store, backend.inner, task.generator, self.poll_s, self.window, console, quiet)
            afford = None if self.max_cost is None else (lambda requests: self.affordable(run, requests))
            jobs = run.prepare(jobs, attempts, refresh, afford)
            backend.serving = run
            self.batches.append(run)
        return jobs

    def workers(self, backend: "ControlledBackend", workers: "InFlight") -> "InFlight":
        """Threads for the run: answers from a batch are at hand, so they are stored in larger groups."""
        from cftools.distributed import current

        return max(current(workers), BATCH_SERVING_WORKERS) if backend.serving is not None else workers

    def affordable(self, run: Any, requests: list[Any]) -> list[Any]:
        """The first REQUESTS whose cost, at most (the prompt, and `max_tokens` of reply each, at the batch
        price), fits in what is left of the budget after what was spent and what the run's batches already hold.
        A batch is paid as a whole, so the budget is kept before it is sent, not while it runs."""
        held = sum(self.held_cost(key, c) for key, c in run.results.completions.items())
        left = (self.max_cost or 0.0) - self.usage.cost - held
        if self.counter is None:
            self.counter = token_counter(run.backend, self.config)
        chosen = []
        for request in requests:
            most = self.price.cost(self.counter.count(request.messages),
                                   int(request.params.get("max_tokens") or DEFAULT_PARAMS["max_tokens"]), batch=True)
            if most > left:
                self.stopped = True
                break
            left -= most
            self.batch_worst[request.key] = most
            chosen.append(request)
        return chosen

    def held_cost(self, key: str, completion: Completion) -> float:
        """What a batch's answer costs: at its tokens, or at the worst case of its request when it has none."""
        if completion.prompt_tokens is None or completion.completion_tokens is None:
            return self.batch_worst.get(key, 0.0)
        return self.price.cost(completion.prompt_tokens, completion.completion_tokens, batch=True)

    def gate(self, source: Iterator[Any]) -> Iterator[Any]:
        """SOURCE until the budget is spent; then nothing more is dispatched."""
        for job in source:
            if self.exhausted:
                self.stopped = True
                return
            yield job

    def record(self, results: list[JobResult]) -> None:
        """Tokens and cost of a batch of stored results (a job's every attempt: fresh calls and cache hits)."""
        self.done += sum(1 for result in results if result.ok)
        for result in results:
            for attempt in result.job.attempts:
                if attempt.completion is not None:
                    self.usage.add(attempt.completion, fresh=attempt.fresh)

    def finish(self, backend: "ControlledBackend", stored_all: bool) -> None:
        """After a run: its batches' results are stored (unless it stopped early: a rerun collects them again)."""
        run, backend.serving = backend.serving, None
        if run is not None and stored_all and not self.stopped:
            run.mark_collected()

    # ------------------------------------------------------------------ --estimate
    def estimate_run(self, store: Store, backend: Any, task: Any, jobs: list[Any], attempts: Any,
                     refresh: bool) -> dict[str, Any]:
        """Prompt tokens of the requests the run would send (cached ones are free) and what they would cost."""
        from cftools.llm.cache import cached_completions

        firsts = [(job, request_key(backend.cache_id, backend.model, job.messages,
                                    attempts.new_attempt(job).params)) for job in jobs]
        # a request an earlier run of this command already counted (a staged generator asking again) counts once
        firsts = [(job, key) for job, key in firsts if key not in self.estimated_keys]
        self.estimated_keys.update(key for _, key in firsts)
        jobs = [job for job, _ in firsts]
        cached = set() if refresh else set(cached_completions(store, [key for _, key in firsts]))
        to_send = [job for job, key in firsts if key not in cached]
        if self.counter is None:
            self.counter = token_counter(backend.inner, self.config)
        prompt_tokens = sum(self.counter.count(job.messages) for job in to_send)
        max_out = int(attempts.base_params.get("max_tokens") or 0)
        typical = typical_completion_tokens(store, task.generator, backend.model)
        estimate: dict[str, Any] = {
            "generator": task.generator, "model": backend.model, "requests": len(to_send),
            "cached": len(jobs) - len(to_send), "prompt_tokens": prompt_tokens,
            "prompt_tokens_exact": self.counter.exact, "tokens_counted_by": self.counter.source,
            "completion_tokens_max": max_out * len(to_send),
            "completion_tokens_typical": round(typical * len(to_send)) if typical is not None else None,
            "batch_api": self.batch_api, "cost_max": None, "cost_typical": None}
        if self.price is not None:
            estimate["cost_max"] = round(self.price.cost(prompt_tokens, estimate["completion_tokens_max"],
                                                         self.batch_api), 6)
            if typical is not None:
                estimate["cost_typical"] = round(self.price.cost(prompt_tokens, estimate["completion_tokens_typical"],
                                                                 self.batch_api), 6)
        return estimate


def typical_completion_tokens(store: Store, generator: str, model: str) -> Optional[float]:
    """The mean output length of this generator's earlier paid calls with MODEL (None when there were none)."""
    with store.session() as session:
        mean = session.execute(select(func.avg(Generation.completion_tokens)).where(
            Generation.generator == generator, Generation.model == model, Generation.cached.is_(False),
            Generation.completion_tokens.is_not(None))).scalar_one()
    return float(mean) if mean is not None else None


class ControlledBackend:
    """A backend with a command's controls on it; in a batch run, its calls are answered from the batches."""

    def __init__(self, inner: Any, controls: RunControls) -> None:
        self.inner, self.controls = inner, controls
        self.serving: Any = None  # a BatchRun while a --batch-api run goes on

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def cache_id(self) -> str:
        return self.inner.cache_id

    def complete(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        if self.serving is not None:
            completion = self.serving.serve(request_key(self.cache_id, self.model, messages, params))
            return self.controls.charge_unmetered(completion, self.inner, messages, params, batch=True)
        reservation = self.controls.reserve(self.inner, messages, params)
        completion = None
        try:
            completion = self.controls.charge_unmetered(self.inner.complete(messages, params), self.inner, messages,
                                                        params, reservation)
            return completion
        finally:
            self.controls.settle(reservation, completion)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # what a kind asks of its backend beyond the protocol
        return getattr(self.inner, name)
