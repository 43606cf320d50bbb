"""The batcher: every request's inputs in one queue, cut into device batches by one worker.

Why not TEI's way (take inputs in arrival order up to a token budget): a batch is computed at
the length of its longest input, so one long input among short ones makes the whole batch
pay for its length. The ``sorted`` policy looks at a window of the queue (the oldest
``window`` inputs), sorts it by length and takes a run of neighbours under the budget counted
in padded tokens (rows times the longest), so inputs of one batch are of similar length.
Sorting alone would let a steady flow of long inputs keep short ones waiting (or the other way
round), so an input that has waited ``max_wait`` seconds anchors the next batch whatever its
length. There is no timer: when the device is free the worker takes what is queued at once,
so a lone request is computed as soon as it arrives. ``fifo`` is TEI's batcher, kept to
measure the difference in the same run.

One worker thread owns the device (the encoder and its context are made, warmed and used on
it only). A request waits on a :class:`concurrent.futures.Future`; cancelling it (the client
went away) drops its inputs still queued.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from vkumd.serve.errors import ApiError, device_fault
from vkumd.serve.metrics import Metrics

PAD_RATIO = 1.25
PAD_SLACK = 32
RunBatch = Callable[[list[list[int]], list[bool]], np.ndarray]


def select_batch(lengths: Sequence[int], waited: Sequence[float], *, policy: str,
                 max_tokens: int, max_batch: int, window: int,
                 max_wait: float) -> list[int]:
    """Which queued inputs form the next batch.

    Args:
        lengths: tokens of each queued input, oldest first.
        waited: seconds each has waited.
        policy: ``"sorted"`` or ``"fifo"`` (see the module docstring).
        max_tokens: the budget: padded tokens (``sorted``) or real tokens (``fifo``).
        max_batch: inputs per batch at most.
        window: queued inputs ``sorted`` considers, oldest first.
        max_wait: seconds after which an input anchors the next ``sorted`` batch.

    Returns:
        Indices into the queue, ascending; never empty for a non-empty queue (one input over
        the budget goes alone).
    """
    if not lengths:
        return []
    if policy == "fifo":
        chosen, total = [], 0
        for i, n in enumerate(lengths):
            if chosen and (total + n > max_tokens or len(chosen) >= max_batch):
                break
            chosen.append(i)
            total += n
        return chosen
    seen = range(min(window, len(lengths)))
    order = sorted(seen, key=lambda i: -lengths[i])  # longest first; ties by arrival
    anchor = 0 if waited[0] >= max_wait else order[0]
    pos = order.index(anchor)
    width = real = lengths[anchor]
    chosen = [anchor]
    for i in order[pos + 1:]:  # shorter neighbours: the width stays
        rows = len(chosen) + 1
        if (rows > max_batch or rows * width > max_tokens
                or not _fits(real + lengths[i], rows * width)):
            break
        chosen.append(i)
        real += lengths[i]
    for i in reversed(order[:pos]):  # then longer ones, nearest first, while they fit
        rows = len(chosen) + 1
        if (rows > max_batch or rows * lengths[i] > max_tokens
                or not _fits(real + lengths[i], rows * lengths[i])):
            break
        chosen.append(i)
        real += lengths[i]
    return sorted(chosen)


def _fits(real: int, padded: int) -> bool:
    """Whether a batch of ``real`` tokens computed as ``padded`` (rows times the longest)
    is worth it: padding at most a quarter of the real tokens, or 32 tokens in all for
    small batches. Past that the input waits for the next batch, which costs the device
    less than computing the padding: padding is paid in every row, and the 32 is about one
    batch's fixed cost on lavapipe (about 10 ms against 0.3 ms a token for MiniLM), under
    which splitting a batch costs more than it saves."""
    return padded - real <= max(PAD_SLACK, real * (PAD_RATIO - 1))


@dataclass(eq=False)
class _Job:
    """One request: its result rows fill in as batches finish."""

    result: np.ndarray
    future: concurrent.futures.Future
    left: int

    def gone(self) -> bool:
        return self.future.done()


@dataclass(eq=False)
class _Item:
    job: _Job
    row: int
    ids: list[int]
    normalize: bool
    queued_at: float = field(default_factory=time.monotonic)


class Batcher:
    """The queue and its worker thread.

    Args:
        metrics: where to count.
        policy, max_tokens, max_batch, window, max_wait: as :func:`select_batch`.
        max_queue: inputs queued at most; past it :meth:`submit` raises a 429.
        queue_timeout: seconds an input may wait before its request is failed with 503
            (0: no limit); checked whenever a batch is formed.
    """

    def __init__(self, metrics: Metrics, *, policy: str, max_tokens: int, max_batch: int,
                 window: int, max_wait: float, max_queue: int,
                 queue_timeout: float = 0.0) -> None:
        self.metrics = metrics
        self.policy = policy
        self.max_tokens = max_tokens
        self.max_batch = max_batch
        self.window = window
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self._queue: list[_Item] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._rate = 0.0  # inputs per second, smoothed, for Retry-After
        self._thread: threading.Thread | None = None

    def start(self, setup: Callable[[], tuple[RunBatch, int]],
              on_ready: Callable[[], None], on_fail: Callable[[BaseException], None],
              teardown: Callable[[], None]) -> None:
        """Start the worker: it calls ``setup`` (load and warm the model; returns the batch
        function and the embedding width), then ``on_ready``, then serves the queue until
        :meth:`stop`, then ``teardown`` (all on the worker's thread, which owns the device).
        ``on_fail`` gets what ``setup`` raised."""
        def main() -> None:
            try:
                run, hidden = setup()
            except BaseException as exc:  # noqa: BLE001 - reported to the app, which answers 503
                on_fail(exc)
                teardown()
                return
            self.hidden = hidden
            on_ready()
            try:
                self._serve(run)
            finally:
                teardown()

        self._thread = threading.Thread(target=main, name="vkumd-serve-batcher", daemon=True)
        self._thread.start()

    def queued(self) -> int:
        """Inputs waiting now."""
        return len(self._queue)

    def retry_after(self, extra: int = 0) -> int:
        """Seconds until about ``extra`` more inputs than are queued would be computed."""
        backlog = len(self._queue) + extra
        return max(1, min(60, math.ceil(backlog / self._rate))) if self._rate > 0 else 1

    def submit(self, seqs: list[list[int]], normalize: bool) -> concurrent.futures.Future:
        """Queue one request's inputs; the future gets the ``(len(seqs), hidden)`` array.

        Raises:
            ApiError: 429 (with ``Retry-After``) when the queue cannot take them all.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        job = _Job(np.empty((len(seqs), self.hidden), np.float32), future, len(seqs))
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down; retry on another replica",
                               code="shutting_down", headers={"Retry-After": "1"})
            if len(self._queue) + len(seqs) > self.max_queue:
                self.metrics.rejected.labels("queue_full").inc()
                wait = self.retry_after(len(seqs))
                raise ApiError(429, f"the queue holds {len(self._queue)} inputs and takes "
                               f"{self.max_queue} at most; this request's {len(seqs)} do "
                               f"not fit. Retry after {wait} s", code="queue_full",
                               headers={"Retry-After": str(wait)})
            now = time.monotonic()
            self._queue += [_Item(job, row, ids, normalize, now)
                            for row, ids in enumerate(seqs)]
            self.metrics.queue_depth.set(len(self._queue))
            self._cond.notify()
        return future

    def stop(self, timeout: float = 30.0) -> None:
        """Take no more requests, compute what is queued, end the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _next(self) -> list[_Item] | None:
        with self._cond:
            while True:
                self._expire()
                live = [it for it in self._queue if not it.job.gone()]
                if len(live) != len(self._queue):
                    self.metrics.dropped.inc(len(self._queue) - len(live))
                    self._queue = live
                if live or self._stopping:
                    break
                self.metrics.queue_depth.set(0)
                self._cond.wait()
            if not live:
                return None
            now = time.monotonic()
            picked = set(select_batch([len(it.ids) for it in live],
                                      [now - it.queued_at for it in live],
                                      policy=self.policy, max_tokens=self.max_tokens,
                                      max_batch=self.max_batch, window=self.window,
                                      max_wait=self.max_wait))
            batch = [it for i, it in enumerate(live) if i in picked]
            self._queue = [it for i, it in enumerate(live) if i not in picked]
            self.metrics.queue_depth.set(len(self._queue))
        for it in batch:
            self.metrics.queue_seconds.observe(now - it.queued_at)
        return batch

    def _expire(self) -> None:
        """Fail the requests with an input queued past ``queue_timeout`` (lock held)."""
        if self.queue_timeout <= 0 or not self._queue:
            return
        limit = time.monotonic() - self.queue_timeout
        late = {id(it.job): it.job for it in self._queue if it.queued_at < limit}
        if not late:
            return
        error = ApiError(503, f"the request waited over {self.queue_timeout:g} s in the queue "
                         "(--queue-timeout-s) and was dropped uncomputed; the server is "
                         "overloaded, retry later", param=None, code="queue_timeout",
                         headers={"Retry-After": str(self.retry_after())})
        kept = [it for it in self._queue if id(it.job) not in late]
        self.metrics.timed_out.inc(len(self._queue) - len(kept))
        self._queue = kept
        for job in late.values():
            _settle(job.future, error=error)

    def _serve(self, run: RunBatch) -> None:
        while (batch := self._next()) is not None:
            started = time.perf_counter()
            try:
                out = run([it.ids for it in batch], [it.normalize for it in batch])
            except Exception as exc:  # noqa: BLE001 - one batch's fault fails only its requests
                self.metrics.failed_batches.inc()
                error = device_fault(exc)
                for job in {id(it.job): it.job for it in batch}.values():
                    _settle(job.future, error=error)
                continue
            seconds = time.perf_counter() - started
            self._count(batch, seconds)
            for row, it in enumerate(batch):
                it.job.result[it.row] = out[row]
                it.job.left -= 1
                if it.job.left == 0:
                    _settle(it.job.future, result=it.job.result)

    def _count(self, batch: list[_Item], seconds: float) -> None:
        m = self.metrics
        real = sum(len(it.ids) for it in batch)
        m.inference_seconds.observe(seconds)
        m.batch_size.observe(len(batch))
        m.batches.inc()
        m.inputs.inc(len(batch))
        m.tokens.inc(real)
        m.padded_tokens.inc(len(batch) * max(len(it.ids) for it in batch))
        rate = len(batch) / max(seconds, 1e-6)
        self._rate = rate if self._rate == 0 else 0.8 * self._rate + 0.2 * rate


def _settle(future: concurrent.futures.Future, result: object = None,
            error: BaseException | None = None) -> None:
    """Complete ``future`` unless its request was cancelled meanwhile."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass  # cancelled: the client has gone
