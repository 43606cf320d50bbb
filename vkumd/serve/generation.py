"""Text generation served: one thread drives the generator's scheduler for every request.

Requests join a queue of waiting sequences; the loop thread gives each a slot of the
scheduler as one frees up (FIFO), then calls ``scheduler.step()`` over and over: each step
prefills the sequences that joined and decodes one token of every active sequence, so
requests arriving at different times share each decode step (continuous batching) and a
finished one leaves without the others restarting. The scheduler turns tokens into text
(whole UTF-8 characters, stop strings held back and cut) and ends a sequence on its
end-of-sequence id, a stop string, ``max_tokens`` or the context's end; after each step the
thread hands each sequence's new text to its request's event-loop queue. A request whose
client has gone is cancelled: its slot is freed before the next step.

The thread owns the device: the generator is loaded, warmed up, stepped and closed on it
only. :class:`Backend` is the one place that knows the generator's API
(``vkumd.models.TextGenerator`` and its ``Scheduler``, docs/generation.md).
"""

from __future__ import annotations

import asyncio
import importlib
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vkumd.serve.errors import ApiError, device_fault, invalid
from vkumd.serve.metrics import Metrics


def load_generator(spec: str, slots: int, max_context: int, device: str | None = None,
                   **options: Any) -> tuple[Any, Any]:
    """The generator ``--generate-model`` names, and the context made for it (None for
    ``module:function``, which makes its own): a ``.gguf`` file, a Hugging Face directory,
    or ``module:function`` (called with ``slots`` and ``max_context``). ``options``
    (``compute``, ``cache_dtype``) go to the loader; None values are left out."""
    path = Path(spec)
    if ":" in spec and not path.exists():
        module, _, name = spec.partition(":")
        return getattr(importlib.import_module(module), name)(
            slots=slots, max_context=max_context), None
    from vkumd.framework.context import Context
    from vkumd.models import TextGenerator

    ctx = Context(device=device)
    try:
        load = TextGenerator.from_pretrained if path.is_dir() else TextGenerator.from_gguf
        given = {k: v for k, v in options.items() if v is not None}
        return load(path, ctx, slots=slots, max_context=max_context, **given), ctx
    except BaseException:
        ctx.close()
        raise


def served_names(spec: str) -> tuple[str, ...]:
    """The names a generation request's ``model`` may give: the file's stem and ``spec``."""
    stem = Path(spec).name.removesuffix(".gguf") if ":" not in spec else spec
    return tuple(dict.fromkeys((stem, spec)))


class Backend:
    """The generator as the loop uses it: tokenize, render chat, submit, step, cancel.

    Args:
        generator: a ``TextGenerator`` (or an object with its ``encode``, ``render_chat``,
            ``scheduler``, ``runner``, ``config`` and ``close``); its scheduler's loop must
            not be started: the service's thread steps it.
        ctx: the context made for it, closed after it (None: the generator's own).
    """

    def __init__(self, generator: Any, ctx: Any = None) -> None:
        self.generator = generator
        self.ctx = ctx
        self.scheduler = generator.scheduler
        self.slots = int(generator.runner.slots)
        self.context = int(min(generator.config.context_length, self.scheduler.max_context))
        self.vocab_size = int(self.scheduler.vocab_size)

    @property
    def lost(self) -> str | None:
        """What lost the generator's device, or None while it works (or it has no context,
        as a test's numpy generator)."""
        ctx = self.ctx if self.ctx is not None else getattr(self.generator, "context", None)
        error = ctx.device.health.lost if ctx is not None else None
        return None if error is None else str(error)

    def encode(self, text: str) -> list[int]:
        """Token ids of a completion prompt (BOS first where the model has one)."""
        return list(self.generator.encode(text))

    def chat_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` through the model's chat template."""
        return self.encode(self.generator.render_chat(messages))

    def submit(self, job: Job) -> Any:
        """Start ``job`` in a slot; its handle's ``text`` grows with each :meth:`step`."""
        from vkumd.framework.models.sampling import SamplingParams

        return self.scheduler.submit(job.ids, SamplingParams.create(**job.params))

    def step(self) -> None:
        """One prefill-and-decode round of every active sequence."""
        self.scheduler.step()

    def close(self) -> None:
        """Free the model, then the context made for it."""
        try:
            self.generator.close()
        finally:
            if self.ctx is not None:
                self.ctx.close()


@dataclass(eq=False)
class Job:
    """One request's sequence, from queueing to its last token.

    ``events`` (on the request's event loop) gets ``("text", str)`` pieces, then
    ``("done", finish_reason, prompt_tokens, completion_tokens)`` or ``("error", ApiError)``.
    """

    ids: list[int]
    params: dict[str, Any]  # SamplingParams.create's arguments
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    arrived: float = field(default_factory=time.perf_counter)
    queued_at: float = field(default_factory=time.monotonic)
    handle: Any = None
    sent: int = 0  # characters of the handle's text handed out
    counted: int = 0  # generated tokens counted in the metrics
    cancelled: bool = False

    def push(self, *event: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:
            pass  # the request's loop has closed: nobody is listening


class GenerationService:
    """The waiting queue, the slots and the loop thread.

    Args:
        metrics: where to count.
        load: makes the :class:`Backend` (on the loop thread, which owns the device).
        max_queue: sequences waiting for a slot at most; past it :meth:`submit` raises 429.
        queue_timeout: seconds a sequence may wait for a slot before it fails with 503
            (0: no limit).
    """

    def __init__(self, metrics: Metrics, load: Callable[[], Backend], *, max_queue: int,
                 queue_timeout: float = 0.0) -> None:
        self.metrics = metrics
        self.load = load
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.backend: Backend | None = None
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._seconds = 0.0  # a sequence's time in its slot, smoothed, for Retry-After
        self._thread: threading.Thread | None = None

    def start(self, on_ready: Callable[[], None], on_fail: Callable[[BaseException], None]
              ) -> None:
        """Start the thread: load the generator, ``on_ready``, then serve until
        :meth:`stop`; ``on_fail`` gets what loading raised."""
        def main() -> None:
            try:
                self.backend = self.load()
            except BaseException as exc:  # noqa: BLE001 - reported to the app: 503s
                on_fail(exc)
                return
            on_ready()
            try:
                self._serve(self.backend)
            finally:
                self._close(self.backend)

        self._thread = threading.Thread(target=main, name="vkumd-serve-generate", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job`` for a slot.

        Raises:
            ApiError: 429 with ``Retry-After`` when the waiting queue is full, 503 while
                shutting down.
        """
        with self._cond:
            if self._stopping:
                raise ApiError(503, "the server is shutting down; retry on another replica",
                               code="shutting_down", headers={"Retry-After": "1"})
            if len(self._waiting) >= self.max_queue:
                self.metrics.rejected.labels("generate_queue_full").inc()
                wait = self._retry_after()
                raise ApiError(429, f"{len(self._running)} sequences are generating and "
                               f"{len(self._waiting)} wait for a slot, the most this server "
                               f"queues (--generate-max-queue). Retry after {wait} s",
                               param=None, code="queue_full",
                               headers={"Retry-After": str(wait)})
            self._waiting.append(job)
            self.metrics.waiting_sequences.set(len(self._waiting))
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """The client has gone: drop ``job`` (its slot is freed before the next step)."""
        with self._cond:
            job.cancelled = True
            self._cond.notify()

    def stop(self, timeout: float = 60.0) -> None:
        """Take no more requests, finish those accepted, free the device."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _retry_after(self) -> int:
        """Seconds until about one more waiting sequence than now would have a slot."""
        slots = self.backend.slots if self.backend is not None else 1
        return max(1, min(60, math.ceil(self._seconds * (len(self._waiting) + 1) / slots)))

    def _serve(self, backend: Backend) -> None:
        while True:
            with self._cond:
                while not (self._waiting or self._running or self._stopping):
                    self._cond.wait()
                if self._stopping and not self._waiting and not self._running:
                    return
                self._expire()
                self._leave(backend, [j for j in self._running if j.cancelled], "cancelled")
                while self._waiting and self._waiting[0].cancelled:
                    self._waiting.popleft()
                    self.metrics.sequences.labels("cancelled").inc()
                joining = []
                while self._waiting and len(self._running) + len(joining) < backend.slots:
                    job = self._waiting.popleft()
                    if not job.cancelled:
                        joining.append(job)
                    else:
                        self.metrics.sequences.labels("cancelled").inc()
                self.metrics.waiting_sequences.set(len(self._waiting))
            if not joining and not self._running:
                continue
            try:
                for job in joining:
                    job.handle = backend.submit(job)
                    self._running.append(job)
                    self.metrics.prompt_tokens.inc(len(job.ids))
                self.metrics.active_sequences.set(len(self._running))
                began = time.perf_counter()
                backend.step()
            except Exception as exc:  # noqa: BLE001 - the step's sequences fail, the server stays
                error = device_fault(exc)
                for job in joining:
                    if job not in self._running:
                        job.push("error", error)
                        self.metrics.sequences.labels("error").inc()
                self._leave(backend, list(self._running), "error", error)
                continue
            self.metrics.step_seconds.observe(time.perf_counter() - began)
            self.metrics.step_sequences.observe(len(self._running))
            for job in list(self._running):
                self._advance(backend, job)

    def _expire(self) -> None:
        """Fail the sequences that waited for a slot past ``queue_timeout`` (lock held)."""
        if self.queue_timeout <= 0:
            return
        limit = time.monotonic() - self.queue_timeout
        while self._waiting and self._waiting[0].queued_at < limit:
            job = self._waiting.popleft()
            self.metrics.sequences.labels("timeout").inc()
            job.push("error", ApiError(
                503, f"the request waited over {self.queue_timeout:g} s for a generation "
                "slot (--queue-timeout-s) and was dropped; the server is overloaded, retry "
                "later", param=None, code="queue_timeout",
                headers={"Retry-After": str(self._retry_after())}))

    def _leave(self, backend: Backend, jobs: list[Job], how: str,
               error: ApiError | None = None) -> None:
        """Take ``jobs`` out of their slots (a cancel frees the slot at the next step)."""
        for job in jobs:
            if job in self._running:
                self._running.remove(job)
            if job.handle is not None:
                job.handle.cancel()
            self.metrics.sequences.labels(how).inc()
            if error is not None:
                job.push("error", error)
        self.metrics.active_sequences.set(len(self._running))

    def _advance(self, backend: Backend, job: Job) -> None:
        """Hand out ``job``'s new text; once the scheduler has ended it, its end."""
        handle = job.handle
        text = handle.text
        if len(handle.tokens) > job.counted:
            if job.counted == 0:
                self.metrics.first_token_seconds.observe(time.perf_counter() - job.arrived)
            self.metrics.generated_tokens.inc(len(handle.tokens) - job.counted)
            job.counted = len(handle.tokens)
        if len(text) > job.sent:
            job.push("text", text[job.sent:])
            job.sent = len(text)
        if not handle.done:
            return
        self._running.remove(job)
        self.metrics.active_sequences.set(len(self._running))
        reason = handle.finish_reason
        self.metrics.sequences.labels(reason).inc()
        if reason == "error":
            job.push("error", device_fault(handle.error or RuntimeError("unknown")))
        elif reason == "cancelled":
            job.push("error", ApiError(503, "the sequence was cancelled", param=None,
                                       code="cancelled"))
        else:
            job.push("done", reason, len(job.ids), len(handle.tokens))
        took = time.monotonic() - job.queued_at
        self._seconds = took if self._seconds == 0 else 0.8 * self._seconds + 0.2 * took

    def _close(self, backend: Backend) -> None:
        with self._cond:
            waiting, self._waiting = list(self._waiting), deque()
        error = ApiError(503, "the server stopped", param=None, code="shutting_down",
                         headers={"Retry-After": "1"})
        for job in waiting + self._running:
            job.push("error", error)
        try:
            backend.close()
        except Exception as exc:  # noqa: BLE001 - shutting down: report, do not raise
            print(f"vkumd serve: stopped; freeing the generator raised {type(exc).__name__}: "
                  f"{exc}", file=sys.stderr, flush=True)
        else:
            print("vkumd serve: stopped; the generator's device memory is freed",
                  file=sys.stderr, flush=True)


def check_length(backend: Backend, ids: list[int], max_tokens: int | None, limit: int,
                 param: str) -> int:
    """The ``max_tokens`` a request gets: the one asked, or (chat without one) what the
    context leaves, up to ``limit``.

    Raises:
        ApiError: 400 ``context_length_exceeded`` when the prompt and ``max_tokens`` do not
            fit in the context.
    """
    room = backend.context - len(ids)
    if max_tokens is None:
        max_tokens = min(limit, room)
    if room < 1 or max_tokens > room:
        raise invalid(f"This model's maximum context length is {backend.context} tokens. "
                      f"However, you requested {len(ids) + max(max_tokens, 1)} tokens "
                      f"({len(ids)} in the prompt, {max(max_tokens, 1)} for the completion). "
                      "Please reduce the prompt or the completion length.",
                      param=param, code="context_length_exceeded")
    return max_tokens
