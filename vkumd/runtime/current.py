"""Which stream a thread's ops record into: a per-thread stack of current streams.

``with stream:`` pushes a stream and ``ctx.capture()`` pushes a
:class:`~vkumd.runtime.capture.CaptureStream`; ops record into the innermost one, or into the
context's default stream. Each thread has its own stack, as in CuPy, so a stream made current
in one thread never redirects another thread's work.

While a capture stream is current, this module refuses what would escape the graph: work
that needs the host to wait, a second capture, and ``with stream:`` (whose ops would run
eagerly and be missing from the graph).
"""

from __future__ import annotations

import threading
from typing import Any

from vkumd.errors import CaptureError, VkumdError
from vkumd.runtime.capture import CaptureStream


class CurrentStreams:
    """The current-stream stacks of one context, one per thread.

    Args:
        owner: the context whose streams may be pushed.
        default: the stream that is current when nothing was pushed.
    """

    def __init__(self, owner: Any, default: Any) -> None:
        self.owner = owner
        self.default = default
        self._local = threading.local()

    def _stack(self) -> list[Any]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def current(self) -> Any:
        """The innermost stream pushed by this thread, or the default stream."""
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else self.default

    def capture(self) -> CaptureStream | None:
        """The capture stream current on this thread, or ``None`` outside a capture."""
        current = self.current()
        return current if isinstance(current, CaptureStream) else None

    def push(self, stream: Any) -> None:
        """Make ``stream`` current for this thread until :meth:`pop`.

        Raises:
            VkumdError: ``stream`` belongs to another context.
            CaptureError: this thread is capturing a graph (captures do not nest, and a
                ``with stream:`` block would run its ops outside the graph).
        """
        if stream.context is not self.owner:
            raise VkumdError(f"{stream.name} belongs to another context")
        if self.capture() is not None:
            if isinstance(stream, CaptureStream):
                raise CaptureError(
                    "ctx.capture() inside another ctx.capture(): captures do not nest; "
                    "record the inner ops into the outer graph, or end the outer capture "
                    "before starting another")
            raise CaptureError(
                f"'with {stream.name}:' inside ctx.capture() would run its ops eagerly and "
                "leave them out of the graph; drop the with block to record them into the "
                "graph, or replay the graph on that stream afterwards with "
                "graph.replay(stream=...)")
        self._stack().append(stream)

    def pop(self, stream: Any) -> None:
        """Undo :meth:`push` of ``stream`` (a no-op if it is not the innermost)."""
        stack = getattr(self._local, "stack", None)
        if stack and stack[-1] is stream:
            stack.pop()

    def refuse_during_capture(self, what: str) -> None:
        """Raise :class:`~vkumd.errors.CaptureError` if this thread is capturing a graph:
        ``what`` would need the host to wait for device work."""
        capture = self.capture()
        if capture is not None:
            capture.refuse(what)
