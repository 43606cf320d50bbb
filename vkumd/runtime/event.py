"""Events: points in a stream's work that other streams and the host can wait for.

Get one from :meth:`vkumd.runtime.stream.Stream.record`. With timestamp queries an event also
carries the device time at which the stream passed it.
"""

from __future__ import annotations

import numbers
import time
import weakref
from typing import TYPE_CHECKING, Any

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.submission.timeline import FOREVER_NS

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext
    from vkumd.runtime.stream import Stream


def timeout_ns(timeout: float | None) -> int:
    """``timeout`` seconds (``None``: forever) as the nanoseconds a Vulkan wait takes."""
    if timeout is None:
        return FOREVER_NS
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise VkumdTypeError(f"timeout={timeout!r} is a {type(timeout).__name__}; pass a "
                             "number of seconds >= 0, or None to wait as long as it takes")
    if not timeout >= 0:  # also refuses NaN
        raise VkumdValueError(f"timeout={timeout} is negative or NaN; pass seconds >= 0 "
                              "or None")
    return int(timeout * 1e9)


class Event:
    """A point in a stream's work. Get one from :meth:`Stream.record`.

    Args:
        context: the owning context.
        timing: take a timestamp-query slot, for :meth:`elapsed_time` on the device clock.

    Attributes:
        stream: the stream it was last recorded on (``None`` before that).
        value: that stream's submission value it completes with.

    Raises:
        ContextClosed: ``context`` was closed.
        VkumdTypeError: ``context`` is not a vkumd Context.
    """

    def __init__(self, context: RuntimeContext, timing: bool = True) -> None:
        # Duck-typed: importing the context class here would tie event.py and context.py
        # into a loop.
        if not callable(getattr(context, "check_open", None)):
            raise VkumdTypeError(f"Event(context) takes a vkumd Context, not "
                                 f"{type(context).__name__}")
        context.check_open("creating an event")
        self.context = context
        self.stream: Stream | None = None
        self.value = 0
        self.host_ns = 0
        self.released = False
        self._timed = False
        slots = context.timestamps if timing else None
        self._slot = slots.allocate() if slots is not None else None
        self._free_slot = (weakref.finalize(self, _free_slot, weakref.ref(context), self._slot)
                           if self._slot is not None else None)

    @property
    def timestamp_slot(self) -> int | None:
        """The context's timestamp-query slot this event writes, or ``None``."""
        return self._slot

    def check_usable(self, what: str, context: Any = None) -> None:
        """Raise if the event cannot be used (by ``context``, when given).

        Raises:
            ContextClosed: its context was closed.
            VkumdError: it was released.
            VkumdValueError: it belongs to another context than ``context``.
        """
        self.context.check_open(what)
        if self.released:
            raise VkumdError(f"{what}: the event was released; record a new one")
        if context is not None and context is not self.context:
            raise VkumdValueError(
                f"{what}: the event belongs to another context; a stream can only record or "
                "wait for events of its own context (wait for it on the host with "
                "event.synchronize() instead)")

    def set_point(self, stream: Stream, value: int) -> None:
        """Make the event stand for submission ``value`` of ``stream`` (what
        :meth:`Stream.record` does)."""
        self.check_usable("Event.set_point()", stream.context)
        self.stream = stream
        self.value = value
        self.host_ns = time.perf_counter_ns()
        self._timed = stream.timestamps is not None

    @property
    def done(self) -> bool:
        """Whether the device has passed the event (True if it was never recorded)."""
        self.check_usable("Event.done")
        stream = self.stream
        if stream is None or stream.released:
            return True
        return stream.completed_value() >= self.value

    def query(self) -> bool:
        """Same as :attr:`done`, for CuPy's spelling."""
        return self.done

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until the device has passed the event.

        Raises:
            TimeoutError: not passed within ``timeout`` seconds.
            VkumdTypeError, VkumdValueError: ``timeout`` is not a number of seconds >= 0.
            ContextClosed: the context was closed.
            VkumdError: the event was released.
        """
        timeout_ns(timeout)
        self.check_usable("Event.synchronize()")
        stream = self.stream
        if stream is not None and not stream.released:
            self.context.refuse_during_capture("Event.synchronize()")
            stream.wait_value(self.value, timeout, what="Event.synchronize()")

    def timestamp_ns(self) -> int:
        """The device time of the event in nanoseconds (waits for it first)."""
        self.check_usable("Event.timestamp_ns()")
        if self.stream is None:
            raise VkumdValueError("the event was never recorded; call stream.record(event)")
        self.synchronize()
        slots = self.context.timestamps
        if slots is None or self._slot is None or not self._timed:
            return self.host_ns
        stamp = slots.read(self._slot)
        if stamp is None:
            raise VkumdError("the event's timestamp was not written; record it again")
        return stamp

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of device time from this event to ``end``.

        Both events are waited for. Timestamps come from GPU timestamp queries; on a device
        without them, from the host clock when each event was recorded (which includes
        queueing delays).
        """
        if not isinstance(end, Event):
            raise VkumdTypeError(f"elapsed_time() takes an Event, not {type(end).__name__}")
        return (end.timestamp_ns() - self.timestamp_ns()) / 1e6

    def release(self) -> None:
        """Give the event's timestamp slot back now rather than when it is collected.

        Safe to call twice; the event cannot be used afterwards.
        """
        if self.released:
            return
        self.released = True
        if self._free_slot is not None:
            self._free_slot()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return f"<vkumd.Event value={self.value}{state}>"


def _free_slot(context_ref: Any, slot: int) -> None:
    context = context_ref()
    if context is not None and not context.closed and context.timestamps is not None:
        context.timestamps.free(slot)
