"""One worker thread per model: runs jobs in order and merges concurrent embedding requests.

Requests from many connections land in one queue. An embedding job (for a reranker: a job of
(query, text) windows, scored by the same merged path) is merged with the embedding
jobs queued behind it while their tokens fit ``max_batch_tokens``; the merged inputs are sorted by
length and cut into forward passes whose padded size (longest x count) fits the same budget, so
each pass pads little and the encoder's unpadded path skips the rest. Other jobs (classification,
tagging, QA, fill-mask) run one at a time; each batches its own inputs by length.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertkit.model.kernels import trim_heap


class HeapTrim:
    """Gives the heap's free memory back to the OS (glibc ``malloc_trim``) between forward passes:
    at most every ``every`` seconds under load, and whenever the queue runs empty (once
    ``idle_every`` seconds have passed since the last trim); by default after every pass (a trim
    every 10-20 passes let RSS swing by 120-240 MiB in between).

    Activations of every new batch shape come from the heap, fragment it, and glibc keeps the free
    pages: a server's RSS then grows without bound (MiniLM-L6 on CPU: +66% in a 10-minute soak).
    Trimming returns the free pages and keeps RSS flat. The earlier fix, an mmap threshold of
    128 KiB (``mallopt``), also kept RSS flat but mapped and unmapped every activation of every
    pass: the page faults and unmaps cost 10-25% of the served throughput at concurrency 64
    (benchmarks/serve_load.py, MiniLM, 2 cores). A no-op where there is no glibc.
    """

    def __init__(self, every: float = 0.0, idle_every: float = 0.0) -> None:
        self.every, self.idle_every = every, idle_every
        self.last = time.monotonic()

    def __call__(self, idle: bool) -> bool:
        """Trim if it is time (``idle``: the queue is empty); True when it trimmed."""
        now = time.monotonic()
        due = now - self.last >= (self.idle_every if idle else self.every)
        if not due or not trim_heap():
            return False
        self.last = time.monotonic()
        return True


@dataclass
class Job:
    fn: Callable[[], Any] | None = None
    """A task to run alone (None for an embedding job)."""
    encodings: Sequence[Any] = ()
    """An embedding job's inputs."""
    future: Future = field(default_factory=Future)

    @property
    def tokens(self) -> int:
        return sum(len(e.input_ids) for e in self.encodings)


def token_budget_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices sorted longest first, cut so that each batch's longest x count <= ``max_tokens``
    (one input longer than the budget gets a batch of its own).

    >>> token_budget_batches([5, 9, 2, 8], 18)
    [[1, 3], [0, 2]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class Worker:
    """Runs one model's jobs on its own thread (see the module doc)."""

    def __init__(
        self,
        name: str,
        embed: Callable[[Sequence[Any]], np.ndarray] | None,
        max_batch_tokens: int,
        on_batch: Callable[[int, int, float], None] | None = None,
    ) -> None:
        self.name, self.embed, self.max_batch_tokens = name, embed, max_batch_tokens
        self.on_batch = on_batch or (lambda size, tokens, seconds: None)
        self._jobs: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self.trim_heap = HeapTrim()
        self._thread = threading.Thread(target=self._loop, name=f"bertkit-{name}", daemon=True)
        self._thread.start()

    def queued(self) -> int:
        with self._cv:
            return len(self._jobs)

    def submit(self, job: Job) -> Future:
        with self._cv:
            if self._stopping:
                job.future.set_exception(RuntimeError("the server is shutting down"))
                return job.future
            self._jobs.append(job)
            self._cv.notify()
        return job.future

    def run(self, fn: Callable[[], Any]) -> Future:
        return self.submit(Job(fn=fn))

    def embed_later(self, encodings: Sequence[Any]) -> Future:
        return self.submit(Job(encodings=encodings))

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the queued jobs, then end the thread."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._thread.join(timeout)

    def _take(self) -> list[Job] | None:
        with self._cv:
            while not self._jobs and not self._stopping:
                self._cv.wait()
            if not self._jobs:
                return None
            first = self._jobs.popleft()
            group = [first]
            if first.fn is None:
                tokens = first.tokens
                while self._jobs and self._jobs[0].fn is None:
                    nxt = self._jobs[0].tokens
                    if tokens + nxt > self.max_batch_tokens:
                        break
                    group.append(self._jobs.popleft())
                    tokens += nxt
            return group

    def _loop(self) -> None:
        while (group := self._take()) is not None:
            live = [j for j in group if j.future.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                if live[0].fn is not None:
                    live[0].future.set_result(live[0].fn())
                else:
                    self._embed_group(live)
            except BaseException as e:
                for j in live:
                    if not j.future.done():
                        j.future.set_exception(e)
            self.trim_heap(idle=not self.queued())

    def _embed_group(self, jobs: list[Job]) -> None:
        assert self.embed is not None
        encodings = [e for j in jobs for e in j.encodings]
        lengths = [len(e.input_ids) for e in encodings]
        vectors: list[np.ndarray | None] = [None] * len(encodings)
        for idx in token_budget_batches(lengths, self.max_batch_tokens):
            t0 = time.perf_counter()
            out = self.embed([encodings[i] for i in idx])
            self.on_batch(len(idx), sum(lengths[i] for i in idx), time.perf_counter() - t0)
            for i, v in zip(idx, out):
                vectors[i] = v
        start = 0
        for j in jobs:
            n = len(j.encodings)
            j.future.set_result(np.stack(vectors[start : start + n]))  # type: ignore[arg-type]
            start += n
