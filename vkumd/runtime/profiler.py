"""The profiler behind ``vkumd.profile()``: GPU time per dispatch and the runtime's own events.

While a :class:`Profiler` is active, every dispatch is bracketed by two timestamp queries
(on devices without them, by host timestamps around recording, and the report says so), and
the runtime reports allocations, submissions, waits and pipeline builds (with whether the
SPIR-V came from the cache) as host events. :meth:`Profiler.table` sums time by kernel;
:meth:`Profiler.export_chrome_trace` writes the Trace Event Format that Perfetto and
``chrome://tracing`` open.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vkumd.errors import VkumdError
from vkumd.vk.binding import vk

# The active profiler, read on every dispatch: a module global keeps that check one load.
current: Profiler | None = None
_activation = threading.Lock()
_TOP_OF_PIPE = vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT
_BOTTOM_OF_PIPE = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT


@dataclass
class DispatchRecord:
    """One profiled dispatch."""

    kernel: str
    stream: str
    groups: tuple[int, int, int]
    context: Any
    start_slot: int | None
    end_slot: int | None
    host_start_ns: int
    host_end_ns: int = 0
    gpu_start_ns: int | None = None
    gpu_end_ns: int | None = None

    @property
    def duration_ns(self) -> int:
        """GPU time where measured, else the host time spent recording it."""
        if self.gpu_start_ns is not None and self.gpu_end_ns is not None:
            return max(0, self.gpu_end_ns - self.gpu_start_ns)
        return self.host_end_ns - self.host_start_ns


@dataclass
class HostEvent:
    """One runtime event measured on the host."""

    kind: str
    name: str
    start_ns: int
    end_ns: int
    thread: int
    args: dict[str, Any] = field(default_factory=dict)


class Profiler:
    """Collects what the runtime does while it is active; use through ``vkumd.profile()``.

    Attributes:
        dispatches: one :class:`DispatchRecord` per dispatch, in recording order.
        events: :class:`HostEvent` objects (alloc, submit, wait, compile).
        gpu_timestamps: whether every dispatch was timed on the device.
    """

    def __init__(self) -> None:
        self.dispatches: list[DispatchRecord] = []
        self.events: list[HostEvent] = []
        self.gpu_timestamps = True
        self.started_ns = 0
        self.stopped_ns = 0
        self._lock = threading.Lock()
        self._finished = False

    # -- hooks the runtime calls -------------------------------------------------------------
    def begin_dispatch(self, stream: Any, batch: Any) -> DispatchRecord:
        slots = stream.timestamps
        record = DispatchRecord("", stream.name, (0, 0, 0), stream.context, None, None,
                                time.perf_counter_ns())
        if slots is None:
            self.gpu_timestamps = False
            return record
        record.start_slot = slots.allocate()
        pool, index = slots.location(record.start_slot)
        batch.timestamp(pool, index, _TOP_OF_PIPE)
        return record

    def end_dispatch(self, stream: Any, batch: Any, record: DispatchRecord, kernel: str,
                     groups: tuple[int, int, int]) -> None:
        record.kernel = kernel
        record.groups = tuple(groups)  # type: ignore[assignment]
        slots = stream.timestamps
        if slots is not None:
            record.end_slot = slots.allocate()
            pool, index = slots.location(record.end_slot)
            batch.timestamp(pool, index, _BOTTOM_OF_PIPE)
        record.host_end_ns = time.perf_counter_ns()
        with self._lock:
            self.dispatches.append(record)

    def host_event(self, kind: str, name: str, start_ns: int, end_ns: int,
                   args: dict[str, Any] | None = None) -> None:
        event = HostEvent(kind, name, start_ns, end_ns, threading.get_ident(), args or {})
        with self._lock:
            self.events.append(event)

    # -- activation ------------------------------------------------------------------------
    def __enter__(self) -> Profiler:
        global current
        with _activation:
            if current is not None:
                raise VkumdError("a vkumd profiler is already active; profiles do not nest")
            self.started_ns = time.perf_counter_ns()
            current = self
        return self

    def __exit__(self, *exc: object) -> None:
        global current
        with _activation:
            current = None
        self.stopped_ns = time.perf_counter_ns()
        self._finish()

    def _finish(self) -> None:
        """Wait for profiled work, read its timestamps and free the query slots."""
        if self._finished:
            return
        self._finished = True
        contexts = {id(r.context): r.context for r in self.dispatches}
        for context in contexts.values():
            if not context.released:
                context.synchronize()
        for record in self.dispatches:
            slots = None if record.context.released else record.context.timestamps
            if slots is None or record.start_slot is None or record.end_slot is None:
                continue
            record.gpu_start_ns = slots.read(record.start_slot)
            record.gpu_end_ns = slots.read(record.end_slot)
            slots.free(record.start_slot)
            slots.free(record.end_slot)
            if record.gpu_start_ns is None or record.gpu_end_ns is None:
                self.gpu_timestamps = False
            record.context = None

    # -- reports -----------------------------------------------------------------------------
    def summary(self) -> list[dict[str, Any]]:
        """Per kernel: calls, total, mean, min and max time in microseconds, busiest first."""
        rows: dict[str, list[int]] = {}
        for record in self.dispatches:
            rows.setdefault(record.kernel, []).append(record.duration_ns)
        out = [{"kernel": kernel, "calls": len(times), "total_us": sum(times) / 1e3,
                "mean_us": sum(times) / len(times) / 1e3, "min_us": min(times) / 1e3,
                "max_us": max(times) / 1e3} for kernel, times in rows.items()]
        return sorted(out, key=lambda row: -row["total_us"])

    def table(self) -> str:
        """A text table of time by kernel, then counts of the runtime's events."""
        clock = ("GPU timestamps" if self.gpu_timestamps and self.dispatches else
                 "host timestamps around recording (this device has no timestamp queries)"
                 if self.dispatches else "no dispatches")
        rows = self.summary()
        total = sum(row["total_us"] for row in rows) or 1.0
        lines = [f"vkumd profile: {len(self.dispatches)} dispatches, times from {clock}",
                 f"{'kernel':<28}{'calls':>7}{'total ms':>11}{'%':>7}{'mean us':>11}"
                 f"{'min us':>10}{'max us':>10}"]
        for row in rows:
            lines.append(f"{row['kernel']:<28}{row['calls']:>7}{row['total_us'] / 1e3:>11.3f}"
                         f"{100 * row['total_us'] / total:>7.1f}{row['mean_us']:>11.1f}"
                         f"{row['min_us']:>10.1f}{row['max_us']:>10.1f}")
        kinds: dict[str, list[int]] = {}
        for event in self.events:
            kinds.setdefault(event.kind, []).append(event.end_ns - event.start_ns)
        if kinds:
            lines.append("runtime events: " + ", ".join(
                f"{kind} x{len(t)} ({sum(t) / 1e6:.3f} ms)" for kind, t in sorted(kinds.items())))
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        """The profile as a Trace Event Format object (``{"traceEvents": [...]}``)."""
        base = self.started_ns
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "vkumd host"}},
            {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "vkumd device"}},
        ]
        for event in self.events:
            events.append({"name": event.name, "cat": event.kind, "ph": "X", "pid": 0,
                           "tid": event.thread, "ts": (event.start_ns - base) / 1e3,
                           "dur": max(event.end_ns - event.start_ns, 0) / 1e3,
                           "args": event.args})
        timed = [r for r in self.dispatches if r.gpu_start_ns is not None]
        # Device and host clocks differ; line the first GPU timestamp up with the host time
        # at which that dispatch was recorded.
        offset = (timed[0].host_start_ns - base - timed[0].gpu_start_ns) if timed else 0
        streams: dict[str, int] = {}
        for record in self.dispatches:
            tid = streams.setdefault(record.stream, len(streams))
            if record.gpu_start_ns is not None and record.gpu_end_ns is not None:
                start, dur, pid = record.gpu_start_ns + offset, record.duration_ns, 1
            else:
                start, dur, pid = record.host_start_ns - base, record.duration_ns, 0
            events.append({"name": record.kernel, "cat": "dispatch", "ph": "X", "pid": pid,
                           "tid": tid, "ts": start / 1e3, "dur": dur / 1e3,
                           "args": {"stream": record.stream, "groups": list(record.groups)}})
        for name, tid in streams.items():
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                           "args": {"name": name}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`chrome_trace` as JSON to ``path`` (open it in Perfetto)."""
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.chrome_trace(), handle)


def profile() -> Profiler:
    """Profile every vkumd context in the ``with`` block.

    Example::

        with vkumd.profile() as prof:
            y = vkumd.ops.add(a, b)
        print(prof.table())
        prof.export_chrome_trace("trace.json")
    """
    return Profiler()

