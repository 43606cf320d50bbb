"""Continuous batching: many requests share a runner's slots, one decode step at a time.

Each :meth:`Scheduler.step` admits queued requests into free slots (one prefill each), then
runs one ``runner.decode`` for every active sequence and samples each sequence's next token
with its own :class:`~vkumd.framework.models.sampling.Sampler`. A sequence that finishes (an
end-of-sequence id, a stop string, ``max_new_tokens``, the context's end) releases its slot
at once and the others carry on untouched; a queued request takes the slot on the next step,
as llama.cpp's server slots and vLLM do.

Threads: :meth:`Scheduler.submit` and :meth:`Handle.cancel` may be called from any thread.
The runner is driven by one thread at a time: either a loop started with
:meth:`Scheduler.start` (a server), or whoever iterates a handle (a plain call: the
iteration steps the scheduler itself while no loop runs).

The runner is anything with ``slots``, ``max_context``, ``prefill(slot, ids) -> logits``,
``decode({slot: id}) -> {slot: logits}`` and ``release(slot)``
(:class:`~vkumd.framework.models.llama.LlamaRunner`, or a numpy model in tests).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.framework.models.sampling import Sampler, SamplingParams
from vkumd.framework.models.text_stream import Detokenizer, StopFilter

_ids = itertools.count(1)


class RequestCancelled(VkumdError):
    """The request was cancelled before it finished."""


class Handle:
    """One submitted request: iterate it for text pieces as they come.

    Attributes:
        id: a number unique in this process.
        prompt_ids: the prompt's token ids.
        params: its :class:`SamplingParams`.
        tokens: the generated ids so far (an end-of-sequence id is not among them).
        finish_reason: None while running; then ``"stop"`` (an end-of-sequence id or a stop
            string), ``"length"`` (``max_new_tokens`` or the context's end), ``"cancelled"``
            or ``"error"``.
        error: the exception that ended it, for ``"error"``.
        prefill_seconds, decode_seconds: time spent in its prefill and in the decode steps it
            took part in (shared with the sequences decoded beside it).
        decode_steps: the decode steps it took part in (a token each, the end-of-sequence
            id among them; its first token comes from the prefill).
    """

    def __init__(self, scheduler: Scheduler, prompt_ids: list[int],
                 params: SamplingParams) -> None:
        self.id = next(_ids)
        self.prompt_ids = prompt_ids
        self.params = params
        self.tokens: list[int] = []
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self.prefill_seconds = 0.0
        self.decode_seconds = 0.0
        self.decode_steps = 0
        self.submitted = time.perf_counter()
        self.first_token_at: float | None = None
        self._scheduler = scheduler
        self._pieces: deque[str] = deque()
        self._text: list[str] = []
        self._cancel = False
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        """Whether the request has finished (any way)."""
        return self._done.is_set()

    @property
    def text(self) -> str:
        """The text emitted so far (safe to read from any thread while it grows)."""
        with self._scheduler._lock:
            return "".join(self._text)

    def cancel(self) -> None:
        """Stop the request. Its slot is freed at once, or by the next step when another
        thread is stepping the scheduler. Safe from any thread and after the request has
        finished (then it does nothing)."""
        self._scheduler._cancel(self)

    def __iter__(self) -> Iterator[str]:
        """Text pieces as they are generated; ends when the request finishes.

        Raises:
            RequestCancelled: it was cancelled.
            Exception: whatever ended it with ``"error"`` (a device fault, NaN logits).
        """
        scheduler = self._scheduler
        while True:
            with scheduler._lock:
                while not self._pieces and not self.done and scheduler._looping:
                    scheduler._changed.wait()
                piece = self._pieces.popleft() if self._pieces else None
                finished = self.done and not self._pieces
                drive = piece is None and not finished
            if piece is not None:
                yield piece
            elif finished:
                self._raise()
                return
            elif drive:
                scheduler.step()

    def result(self, timeout: float | None = None) -> str:
        """The whole text, waiting for the end (stepping the scheduler while no loop runs).

        Raises:
            VkumdError: ``timeout`` seconds passed first (the request keeps running).
            RequestCancelled, Exception: as iteration does.
        """
        if self._scheduler._looping:
            if not self._done.wait(timeout):
                raise VkumdError(f"request {self.id} did not finish within {timeout} s")
        else:
            while not self.done:
                self._scheduler.step()
        self._raise()
        return self.text

    def _raise(self) -> None:
        if self.finish_reason == "cancelled":
            raise RequestCancelled(f"request {self.id} was cancelled")
        if self.error is not None:
            raise self.error


class _Sequence:
    """A request in a slot."""

    def __init__(self, handle: Handle, slot: int, vocab_size: int,
                 decode: Callable[[list[int]], str]) -> None:
        self.handle = handle
        self.slot = slot
        self.sampler = Sampler(handle.params, vocab_size, handle.prompt_ids)
        self.detokenizer = Detokenizer(decode, handle.prompt_ids)
        self.stop = StopFilter(handle.params.stop)
        self.length = len(handle.prompt_ids)  # positions in the slot's cache
        self.next_token: int | None = None    # sampled, not yet fed to the model


class Scheduler:
    """Continuous batching of generation requests over a runner's slots.

    Args:
        runner: the model (see the module docstring).
        decode: ids -> text, special tokens skipped (the tokenizer's ``decode``).
        eos_ids: ids that end a sequence (not emitted).
        vocab_size: the logits' length (default: ``runner.vocab_size``).
    """

    def __init__(self, runner: Any, decode: Callable[[list[int]], str],
                 eos_ids: Sequence[int] = (), vocab_size: int | None = None) -> None:
        self.runner = runner
        self.decode = decode
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.vocab_size = int(runner.vocab_size if vocab_size is None else vocab_size)
        self.max_context = int(runner.max_context)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._step_lock = threading.Lock()
        self._queue: deque[Handle] = deque()
        self._active: dict[int, _Sequence] = {}
        self._free = list(range(int(runner.slots)))
        self._looping = False
        self._closing = False
        self._thread: threading.Thread | None = None

    # -- submitting ---------------------------------------------------------------------

    def check_prompt(self, prompt_ids: Any) -> list[int]:
        """``prompt_ids`` as a list of ints the model can take.

        Raises:
            VkumdTypeError: not a sequence of ints.
            VkumdValueError: empty, an id outside the vocabulary, or longer than the
                context allows (it must leave room for one generated token).
        """
        if isinstance(prompt_ids, (str, bytes)) or not isinstance(prompt_ids, Sequence):
            raise VkumdTypeError(f"prompt ids must be a list of ints, not "
                                 f"{type(prompt_ids).__name__}")
        ids = []
        for index, value in enumerate(prompt_ids):
            if isinstance(value, bool) or not isinstance(value, int):
                raise VkumdTypeError(f"prompt ids[{index}] is {type(value).__name__}, not int")
            if not 0 <= value < self.vocab_size:
                raise VkumdValueError(f"prompt ids[{index}] is {value}; the vocabulary has "
                                      f"ids 0 to {self.vocab_size - 1}")
            ids.append(int(value))
        if not ids:
            raise VkumdValueError("the prompt is empty; give at least one token")
        if len(ids) >= self.max_context:
            raise VkumdValueError(f"the prompt is {len(ids)} tokens; the context holds "
                                  f"{self.max_context}, which must leave room for at least "
                                  "one generated token (shorten the prompt or load the model "
                                  "with a larger max_context)")
        return ids

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams | None = None) -> Handle:
        """Queue a request; it starts at the next step with a free slot.

        Args:
            prompt_ids: the prompt's token ids.
            params: the sampling parameters (default: greedy, 128 new tokens).

        Returns:
            The request's :class:`Handle`.

        Raises:
            VkumdTypeError, VkumdValueError: see :meth:`check_prompt`.
            VkumdError: the scheduler is closed.
        """
        if params is None:
            params = SamplingParams()
        if not isinstance(params, SamplingParams):
            raise VkumdTypeError(f"params must be SamplingParams, not {type(params).__name__}")
        handle = Handle(self, self.check_prompt(prompt_ids), params)
        with self._lock:
            if self._closing:
                raise VkumdError("the scheduler is closed; it takes no more requests")
            if params.max_new_tokens == 0:
                self._finish_locked(handle, "length")
            else:
                self._queue.append(handle)
            self._changed.notify_all()
        return handle

    def _cancel(self, handle: Handle) -> None:
        with self._lock:
            if handle.done:
                return
            handle._cancel = True
            if handle in self._queue:
                self._queue.remove(handle)
                self._finish_locked(handle, "cancelled")
            self._changed.notify_all()
        # With no loop thread the caller may free the slot now (a stream dropped mid-way),
        # unless another thread is stepping: then that step frees it.
        if not self._looping and self._step_lock.acquire(blocking=False):
            try:
                self._admit(admit=False)
            finally:
                self._step_lock.release()

    # -- state ------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Requests queued or running."""
        with self._lock:
            return len(self._queue) + len(self._active)

    @property
    def active(self) -> int:
        """Requests holding a slot."""
        with self._lock:
            return len(self._active)

    @property
    def queued(self) -> int:
        """Requests waiting for a slot."""
        with self._lock:
            return len(self._queue)

    # -- stepping ---------------------------------------------------------------------

    def step(self) -> bool:
        """Admit queued requests into free slots, then decode one token for every active
        sequence. Returns whether there was anything to do."""
        with self._step_lock:
            admitted = self._admit()
            for sequence in admitted:
                self._prefill(sequence)
            with self._lock:
                batch = [s for s in self._active.values() if s.next_token is not None]
            if batch:
                self._decode(batch)
            return bool(admitted or batch)

    def _admit(self, admit: bool = True) -> list[_Sequence]:
        """Free the slots of cancelled sequences, then (``admit``) fill free slots."""
        with self._lock:
            for sequence in list(self._active.values()):
                if sequence.handle._cancel:
                    self._retire_locked(sequence, "cancelled")
            admitted = []
            while admit and self._queue and self._free:
                handle = self._queue.popleft()
                sequence = _Sequence(handle, self._free.pop(0), self.vocab_size, self.decode)
                self._active[sequence.slot] = sequence
                admitted.append(sequence)
        return admitted

    def _prefill(self, sequence: _Sequence) -> None:
        handle = sequence.handle
        start = time.perf_counter()
        try:
            logits = self.runner.prefill(sequence.slot, handle.prompt_ids)
            handle.prefill_seconds = time.perf_counter() - start
            token = sequence.sampler(logits)
        except Exception as exc:  # a fault fails this request; the others go on
            self._fail([sequence], exc)
            return
        self._take(sequence, token)

    def _decode(self, batch: list[_Sequence]) -> None:
        full = [s for s in batch if s.length >= self.max_context]
        for sequence in full:
            self._finish(sequence, "length")
        batch = [s for s in batch if s.length < self.max_context]
        if not batch:
            return
        start = time.perf_counter()
        try:
            logits = self.runner.decode({s.slot: s.next_token for s in batch})
        except Exception as exc:  # the step's requests fail; the scheduler stays usable
            self._fail(batch, exc)
            return
        seconds = time.perf_counter() - start
        for sequence in batch:
            sequence.length += 1
            sequence.next_token = None
            sequence.handle.decode_seconds += seconds
            sequence.handle.decode_steps += 1
            try:
                token = sequence.sampler(logits[sequence.slot])
            except Exception as exc:
                self._fail([sequence], exc)
                continue
            self._take(sequence, token)

    def _take(self, sequence: _Sequence, token: int) -> None:
        """Record a sampled token: emit its text, or end the sequence."""
        handle = sequence.handle
        if handle.first_token_at is None:
            handle.first_token_at = time.perf_counter()
        if token in self.eos_ids:
            self._finish(sequence, "stop")
            return
        handle.tokens.append(token)
        text = sequence.stop.add(sequence.detokenizer.add(token))
        with self._lock:
            if text:
                handle._pieces.append(text)
                handle._text.append(text)
            self._changed.notify_all()
        if sequence.stop.stopped:
            self._finish(sequence, "stop")
        elif len(handle.tokens) >= handle.params.max_new_tokens:
            self._finish(sequence, "length")
        else:
            sequence.next_token = token

    def _finish(self, sequence: _Sequence, reason: str) -> None:
        tail = sequence.stop.add(sequence.detokenizer.flush()) + sequence.stop.flush()
        with self._lock:
            if tail:
                sequence.handle._pieces.append(tail)
                sequence.handle._text.append(tail)
            self._retire_locked(sequence, reason)

    def _fail(self, sequences: list[_Sequence], exc: BaseException) -> None:
        with self._lock:
            for sequence in sequences:
                sequence.handle.error = exc
                self._retire_locked(sequence, "error")

    def _retire_locked(self, sequence: _Sequence, reason: str) -> None:
        if self._active.get(sequence.slot) is sequence:
            del self._active[sequence.slot]
            try:
                self.runner.release(sequence.slot)
            finally:
                self._free.append(sequence.slot)
                self._free.sort()
        self._finish_locked(sequence.handle, reason)

    def _finish_locked(self, handle: Handle, reason: str) -> None:
        if handle.finish_reason is None:
            handle.finish_reason = reason
        handle._done.set()
        self._changed.notify_all()

    # -- a loop thread (servers) --------------------------------------------------------

    def start(self) -> None:
        """Run :meth:`step` on a daemon thread whenever there is work, until :meth:`close`.
        Handles then block in iteration instead of stepping themselves."""
        with self._lock:
            if self._thread is not None:
                return
            self._looping = True
            self._thread = threading.Thread(target=self._loop, name="vkumd-scheduler",
                                            daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._closing and not self._queue and not self._active:
                    self._changed.wait()
                if self._closing:
                    return
            try:
                self.step()
            except Exception as exc:  # never let the loop die with requests waiting on it
                with self._lock:
                    running = list(self._active.values())
                self._fail(running, exc)

    def close(self) -> None:
        """Stop the loop (if started) and cancel every queued or running request. Safe twice."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._step_lock, self._lock:
            for handle in list(self._queue):
                self._finish_locked(handle, "cancelled")
            self._queue.clear()
            for sequence in list(self._active.values()):
                self._retire_locked(sequence, "cancelled")
            self._looping = False
            self._changed.notify_all()
