"""Prepare the next batch while this one runs: the CPU side of a model's call (image decoding, chat template,
processor) on one background thread, so the accelerator does not idle between batches.

`prefetching(answerer)` yields an answerer to ask instead of ANSWERER: its `generate` and `score_options` take
the inputs `submit` prepared ahead for exactly those prompts (prepared inline otherwise), then run the model
on this thread. Only answerers with a `prepare(mode, prompts)` method (`HFVisionModel`) are prefetched; any
other is yielded as it is. At most `DEPTH` calls wait prepared or being prepared (one batch's ahead of the one
running: memory stays bounded); a prediction of the next batch that does not come true (the batch halved after an
out-of-memory error) is dropped. An error in preparing (an unreadable image) is raised where the batch is asked,
after the batches before it are answered and written, as without prefetching. The thread is joined when the
`with` block ends, however it ends.

Prefetching is on by default for a model on a GPU and off on the CPU (there the background thread takes cores
from the model itself); CFTOOLS_PREFETCH=0 or 1 (or `EvalOptions(prefetch=...)`) decides otherwise. The results are
the same either way.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator, Optional, Sequence

PREFETCH_ENV = "CFTOOLS_PREFETCH"
THREAD_NAME = "cftools-prefetch"
DEPTH = 4  # calls waiting: a batch's rank and generate calls, for the running batch and the next


def prefetch_wanted(asked: Optional[bool] = None, device: str = "cpu") -> bool:
    """ASKED when given, else CFTOOLS_PREFETCH when set (0, no, off or false: off), else on for a model on an
    accelerator only: on the CPU the preparation would take cores from the model it is meant to keep busy."""
    if asked is not None:
        return asked
    setting = os.environ.get(PREFETCH_ENV, "").strip().lower()
    if setting:
        return setting not in ("0", "no", "off", "false")
    return not str(device).startswith("cpu")


class Prefetched:
    """ANSWERER asked with inputs prepared ahead on one background thread."""

    def __init__(self, answerer: Any, depth: int = DEPTH) -> None:
        self.answerer = answerer
        self.depth = depth
        self._pending: deque[tuple[str, list, Future]] = deque()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=THREAD_NAME)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.answerer, name)

    def submit(self, mode: str, prompts: Sequence[Any]) -> None:
        """Start preparing MODE's call on PROMPTS (nothing when it is already waiting, or there are no prompts)."""
        prompts = list(prompts)
        if not prompts or any(m == mode and p == prompts for m, p, _ in self._pending):
            return
        while len(self._pending) >= self.depth:  # the oldest is a prediction that did not come true
            self._pending.popleft()[2].cancel()
        self._pending.append((mode, prompts, self._executor.submit(self.answerer.prepare, mode, prompts)))

    def take(self, mode: str, prompts: Sequence[Any]) -> Any:
        """The prepared inputs of MODE's call on PROMPTS (waiting for them; their error raised here), or None when
        they were not submitted. Calls submitted before it and not taken are dropped."""
        prompts = list(prompts)
        while self._pending:
            waiting_mode, waiting, future = self._pending.popleft()
            if waiting_mode == mode and waiting == prompts:
                return future.result()
            future.cancel()
        return None

    def generate(self, prompts: Sequence[Any]) -> list[str]:
        return self.answerer.generate(prompts, prepared=self.take("generate", prompts))

    def score_options(self, prompts: Sequence[Any]) -> list[list[dict[str, float]]]:
        return self.answerer.score_options(prompts, prepared=self.take("rank", prompts))

    def close(self) -> None:
        """Drop what waits and join the thread (a preparation under way is finished first)."""
        for _, _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._executor.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def prefetching(answerer: Any, wanted: Optional[bool] = None) -> Iterator[Any]:
    """ANSWERER wrapped in `Prefetched` when it can prepare and prefetching is WANTED (default: `prefetch_wanted`
    for the answerer's device); the thread is joined on leaving."""
    if (answerer is None or not callable(getattr(answerer, "prepare", None))
            or not prefetch_wanted(wanted, getattr(answerer, "device", "cpu"))):
        yield answerer
        return
    prefetched = Prefetched(answerer)
    try:
        yield prefetched
    finally:
        prefetched.close()


def submit_batch(answerer: Any, calls: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """Start preparing a batch's CALLS ((mode, prompts) each) when ANSWERER prefetches."""
    if isinstance(answerer, Prefetched):
        for mode, prompts in calls:
            answerer.submit(mode, prompts)
