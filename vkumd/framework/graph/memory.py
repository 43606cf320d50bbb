"""The memory planner: every intermediate at an offset in one arena.

Given a scheduled graph (its node list, a topological order) and sizes for its symbols:

1. Liveness. An intermediate lives from the step of the node that writes it to the step of
   its last reader (its own step when nothing reads it).
2. In-place reuse. A node whose op allows it (``OpDef.inplace``: elementwise ops and
   reshape over any input, matmul over its residual) writes its output into the buffer of an
   input that dies at that node and has the same byte size. Such values form one buffer
   whose lifetime is the union of theirs.
3. Placement, greedy by size as TFLite's arena planner: buffers from largest to smallest,
   each at the best-fitting aligned gap (the smallest that holds it) between the buffers
   already placed whose lifetimes overlap its own, else past the highest of them.
4. Arenas. A kernel binds each tensor as one storage-buffer range, and a device binds at
   most ``maxStorageBufferRange`` bytes of one buffer (128 MiB on many), so the arena may
   not be one tensor past it. With ``binding_limit`` the offsets are cut into segments of at
   most that many bytes and no buffer is placed across a segment's end (it moves to the
   next segment's start); each segment is an arena of its own, allocated to its contents'
   extent. A single intermediate larger than the limit is refused: no binding can hold it.

Inputs, outputs and weights are never placed and never aliased: the caller owns them. The
one exception is an op that updates an input in place (``OpDef.updates``: ``kv_write``'s
cache): its output is that input's memory, so it is not placed either when the input is the
caller's, and shares the input's buffer (its lifetime extended) when the input is an
intermediate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.registry import op_info

DEFAULT_ALIGNMENT = 256


@dataclass(frozen=True)
class Allocation:
    """Where one intermediate lives.

    Attributes:
        value: the value's id.
        offset: byte offset in its arena (a multiple of the alignment).
        nbytes: the value's exact size.
        first: the schedule step that writes it.
        last: the last step that reads it.
        reuses: the id of the input whose buffer it overwrites in place, or None.
        arena: the index of its arena (0 unless the plan has several: see
            :attr:`MemoryPlan.arena_sizes`).
    """

    value: int
    offset: int
    nbytes: int
    first: int
    last: int
    reuses: int | None = None
    arena: int = 0


@dataclass(frozen=True)
class MemoryPlan:
    """The arena layout of a graph's intermediates for one binding of its symbols.

    Attributes:
        allocations: by value id.
        arena_bytes: the arenas' size together.
        intermediate_bytes: the sum of every intermediate's (aligned) size: the memory
            needed without any sharing.
        alignment: of every offset.
        bindings: the symbol sizes planned for.
        schedule: node ids in the order planned.
        arena_sizes: the size of each arena (one, unless a binding limit split them; each
            at most the limit).
    """

    allocations: dict[int, Allocation]
    arena_bytes: int
    intermediate_bytes: int
    alignment: int
    bindings: dict[str, int]
    schedule: tuple[int, ...]
    arena_sizes: tuple[int, ...] = ()

    def report(self) -> str:
        """``arena 1.5 MiB for 4.0 MiB of intermediates (38%), 12 values, 3 in place``."""
        share = self.arena_bytes / self.intermediate_bytes if self.intermediate_bytes else 1.0
        inplace = sum(1 for a in self.allocations.values() if a.reuses is not None)
        return (f"arena {format_bytes(self.arena_bytes)} for "
                f"{format_bytes(self.intermediate_bytes)} of intermediates ({share:.0%}), "
                f"{len(self.allocations)} values, {inplace} in place")


def format_bytes(n: int) -> str:
    """``1.5 MiB``, ``512 B``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def value_nbytes(graph: Graph, value: Value, bindings: Mapping[str, int]) -> int:
    """The byte size of ``value`` with the symbols bound."""
    count = 1
    for d in graph.dims.bind(value.shape, bindings):
        count *= d
    return value.dtype.nbytes(count)


def updated_value(node: Node) -> Value | None:
    """The input ``node`` updates in place and returns as its output (``OpDef.updates``)."""
    index = op_info(node.op).updated_input()
    if index is None or index >= len(node.inputs):
        return None
    return node.inputs[index]


def _lifetimes(graph: Graph) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """``(spans, aliases)``: the steps each intermediate lives, and by output id the value
    an updating node's output is (its input's memory, whoever owns it)."""
    step = {node.id: i for i, node in enumerate(graph.nodes)}
    spans: dict[int, tuple[int, int]] = {}
    aliases: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None and v.producer is not None and step.get(v.producer.id, i) >= i:
                raise GraphError(f"input %{v.id} is written later in the schedule",
                                 node.describe())
        updated = updated_value(node)
        if updated is not None:
            aliases[node.outputs[0].id] = updated.id
        for v in node.outputs:
            if v.kind is ValueKind.INTERMEDIATE or (updated is not None
                                                    and v.kind is ValueKind.OUTPUT):
                last = max((step[u.id] for u in v.users), default=i)
                spans[v.id] = (i, last)
    return spans, aliases


def _buffers(graph: Graph, spans: dict[int, tuple[int, int]], sizes: dict[int, int],
             inplace: bool, aliases: dict[int, int]) -> tuple[dict[int, int], dict[int, int]]:
    """Group values into buffers: ``(value id -> buffer root id, value id -> reused id)``."""
    root = {vid: vid for vid in spans}
    reuses: dict[int, int] = {}
    tail = {vid: vid for vid in spans}  # root -> its buffer's latest value
    for out, src in aliases.items():  # in node order: a chain of updates is one buffer
        if src in root:
            root[out] = root[src]
            tail[root[src]] = out
            reuses[out] = src
    if not inplace:
        return root, reuses
    for i, node in enumerate(graph.nodes):
        info = op_info(node.op)
        if not info.inplace or info.updates is not None:
            continue
        taken: set[int] = set()
        for out in node.outputs:
            if out.id not in spans:
                continue
            for index, v in enumerate(node.inputs):
                if v is None or v.id not in spans or v.id in taken:
                    continue
                if not info.overwritable(index) or any(
                        u is v and not info.overwritable(j)
                        for j, u in enumerate(node.inputs) if j != index):
                    continue  # matmul(h, w, residual=h) reads h's rows after writing some
                r = root[v.id]
                dies_here = spans[v.id][1] == i and tail[r] == v.id
                if dies_here and sizes[v.id] == sizes[out.id] and sizes[out.id] > 0:
                    root[out.id] = r
                    tail[r] = out.id
                    reuses[out.id] = v.id
                    taken.add(v.id)
                    break
    return root, reuses


def _within_segment(offset: int, size: int, segment: int | None) -> int:
    """``offset``, or the next segment's start when ``size`` bytes from it would cross the
    end of its segment (``segment`` None: no segments)."""
    if segment is None:
        return offset
    end = (offset // segment + 1) * segment
    return offset if offset + size <= end else end


def place(buffers: list[tuple[int, int, int, int]], alignment: int,
          segment: int | None = None) -> dict[int, int]:
    """Offsets for ``buffers`` of ``(size, first step, last step, key)``, by key.

    Greedy by size: largest first (ties by first step, then key, so plans are
    deterministic); each goes into the smallest aligned gap between the already placed
    buffers whose lifetimes (inclusive) overlap its own, else just past the highest of them.
    With ``segment`` (a multiple of ``alignment``, at least every size), no buffer crosses
    a multiple of it.
    """
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    offsets: dict[int, int] = {}
    for size, start, end, key in sorted(buffers, key=lambda b: (-b[0], b[1], b[3])):
        if size == 0:
            offsets[key] = 0
            continue
        live = sorted((o, s) for o, s, a, b in placed if a <= end and start <= b)
        best, best_gap, cursor = None, None, 0
        for o, s in live:
            at = _within_segment(cursor, size, segment)
            gap = o - at
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = at, gap
            cursor = max(cursor, _align(o + s, alignment))
        offsets[key] = _within_segment(cursor, size, segment) if best is None else best
        placed.append((offsets[key], size, start, end))
    return offsets


def _segment(binding_limit: int | None, alignment: int) -> int | None:
    """The arena segment for a binding limit: the limit rounded down to the alignment."""
    if binding_limit is None:
        return None
    segment = binding_limit // alignment * alignment
    if segment < alignment:
        raise GraphError(f"binding_limit={binding_limit} bytes is less than the alignment "
                         f"({alignment} bytes)")
    return segment


def plan_memory(graph: Graph, bindings: Mapping[str, int] | None = None, *,
                alignment: int = DEFAULT_ALIGNMENT, inplace: bool = True,
                binding_limit: int | None = None) -> MemoryPlan:
    """Offsets in arenas for the intermediates of ``graph``, in its node order.

    Args:
        graph: a graph whose node list is the schedule (a topological order).
        bindings: a size for every symbol in the intermediates' shapes.
        alignment: of every offset, in bytes (a power of two).
        inplace: allow elementwise outputs to overwrite an input dying at their node.
        binding_limit: the most bytes one arena may hold (the device's
            ``maxStorageBufferRange``); None: one arena of any size.

    Returns:
        The plan.

    Raises:
        GraphError: the node list is not a topological order; an intermediate larger than
            ``binding_limit`` (naming the node that writes it).
        VkumdValueError: a symbol without a size, or a bad alignment.
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise GraphError(f"alignment must be a power of two, got {alignment}")
    segment = _segment(binding_limit, alignment)
    env = dict(bindings or {})
    spans, aliases = _lifetimes(graph)
    values = {v.id: v for v in graph.values()}
    sizes = {vid: value_nbytes(graph, values[vid], env) for vid in spans}
    root, reuses = _buffers(graph, spans, sizes, inplace, aliases)
    last_step = len(graph.nodes) - 1
    for out, src in aliases.items():
        if root.get(out, out) not in spans or src not in spans:
            # The caller's memory (an input's): nothing to place, for the chain of updates.
            for vid in [v for v, r in root.items() if r == root.get(out, out)]:
                for table in (spans, sizes, root, reuses):
                    table.pop(vid, None)
        elif values[out].kind is ValueKind.OUTPUT:
            # An intermediate updated and returned: held to the end, as an output is.
            spans[out] = (spans[out][0], last_step)
    members: dict[int, list[int]] = {}
    for vid, r in root.items():
        members.setdefault(r, []).append(vid)
    buffers = []
    for r, vids in members.items():
        start = min(spans[v][0] for v in vids)
        end = max(spans[v][1] for v in vids)
        size = _align(sizes[r], alignment)
        if segment is not None and size > segment:
            producer = values[r].producer
            raise GraphError(f"an intermediate of {sizes[r]} bytes is more than this device "
                             f"binds in one buffer (maxStorageBufferRange = {binding_limit} "
                             "bytes); use a smaller batch or input size",
                             producer.describe() if producer else None)
        buffers.append((size, start, end, r))
    offsets = place(buffers, alignment, segment)
    arena_of = {r: 0 if segment is None else offsets[r] // segment for r in offsets}
    base = {r: arena_of[r] * (segment or 0) for r in offsets}
    allocations = {
        vid: Allocation(vid, offsets[root[vid]] - base[root[vid]], sizes[vid], spans[vid][0],
                        spans[vid][1], reuses.get(vid), arena_of[root[vid]])
        for vid in spans}
    extents = [0] * (max(arena_of.values(), default=0) + 1)
    for size, _, _, r in buffers:
        extents[arena_of[r]] = max(extents[arena_of[r]], offsets[r] - base[r] + size)
    total = sum(_align(s, alignment) for s in sizes.values())
    return MemoryPlan(allocations, sum(extents), total, alignment,
                      graph.dims.normalize_env(env), tuple(n.id for n in graph.nodes),
                      tuple(extents))
