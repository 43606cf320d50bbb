"""Where each node runs: the one decision of device or host, and the lowering that records a
device node's launches.

Every op's facts are its registry record's (:mod:`vkumd.framework.opset`): a node runs on the
device when its op has a lowering (``OpDef.lower``: the same ``vkumd.ops`` call eager code
makes, with ``out=`` the node's outputs) and the op's kernels take the node
(``OpDef.refuse`` gives no reason), or when the op is a view (``reshape``: no launch).
Otherwise it can only run on the host, through ``OpDef.host`` where the op has one.
``vkumd.compile``, the ONNX runner and the torch backend all ask :func:`device_reason`; a
graph whose every node runs on the device can be recorded and replayed
(:func:`check_lowerable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from typing import Any

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.errors import CapabilityMissing
from vkumd.framework.graph.errors import UnsupportedOpError
from vkumd.framework.graph.ir import Graph, Node
from vkumd.framework.graph.registry import OPS, OpDef
from vkumd.framework.tensor import Tensor

Lowering = Callable[[Node, list[Any], list[Tensor]], None]
"""``(node, input tensors, output tensors)``: record the node's launches into the outputs."""


class _OpNames(Set[str]):
    """The names of the ops whose record satisfies a predicate, read live from the registry
    (the op families may declare theirs after this module is imported)."""

    def __init__(self, predicate: Callable[[OpDef], bool]) -> None:
        self._predicate = predicate

    def __contains__(self, op: object) -> bool:
        record = OPS.get(op) if isinstance(op, str) else None
        return record is not None and self._predicate(record)

    def __iter__(self) -> Iterator[str]:
        return (name for name, record in OPS.items() if self._predicate(record))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Lowerings(Mapping[str, Lowering]):
    """Every op's lowering by name, read live from the registry."""

    def __getitem__(self, op: str) -> Lowering:
        record = OPS.get(op)
        if record is None or record.lower is None:
            raise KeyError(op)
        return record.lower

    def __iter__(self) -> Iterator[str]:
        return (name for name, record in OPS.items() if record.lower is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class NoDeviceKernel(CapabilityMissing):
    """A node no device kernel runs (its op, or its op on that dtype), where the caller asked
    for device work only."""


VIEW_OPS: Set[str] = _OpNames(lambda record: record.view)
"""Ops whose output is its input's bytes under another shape: a view, zero launches."""
LOWERINGS: Mapping[str, Lowering] = _Lowerings()
"""The lowering of every op that has one."""


def device_reason(node: Node) -> str | None:
    """Why ``node`` cannot run on the device; None when it can (or is a view).

    Raises:
        UnsupportedOpError: an op the registry does not know.
    """
    record = OPS.get(node.op)
    if record is None:
        raise UnsupportedOpError(f"op {node.op!r} is not supported; supported ops: "
                                 f"{', '.join(sorted(OPS))}", node.describe())
    if record.view:
        return None
    if record.lower is None:
        return f"{node.op} has no device kernel"
    return record.refuse(node) if record.refuse is not None else None


def lowering_for(node: Node) -> Lowering:
    """The lowering of ``node``'s op.

    Raises:
        UnsupportedOpError: the op has no lowering; the message names the node and lists the
            ops that have one.
    """
    found = LOWERINGS.get(node.op)
    if found is None:
        raise UnsupportedOpError(
            f"op {node.op!r} has no lowering to vkumd.ops, so the graph cannot be compiled; "
            f"ops with one: {', '.join(sorted(LOWERINGS))} (and reshape, a view). Give its "
            "record in vkumd.framework.opset a lower=", node.describe())
    return found


def check_lowerable(nodes: list[Node]) -> None:
    """Raise :class:`UnsupportedOpError` for the first node that cannot run on the device
    (:func:`device_reason`), so the graph cannot be recorded."""
    for node in nodes:
        if node.op not in VIEW_OPS:
            lowering_for(node)
        reason = device_reason(node)
        if reason is not None:
            raise UnsupportedOpError(reason, node.describe())


def check_recordable(graph: Graph) -> None:
    """Raise :class:`UnsupportedOpError` when ``graph`` cannot be recorded and replayed: a node
    the device cannot run (:func:`check_lowerable`), or a value the executor moves with its
    copy kernel (outputs it does not compute, views) of a type that kernel does not move.
    Inputs given as arrays are written by the host, whatever their type."""
    check_lowerable(graph.nodes)
    moved = [*(v for v in graph.outputs if v.producer is None),
             *(v for n in graph.nodes if n.op in VIEW_OPS for v in n.outputs)]
    for v in moved:
        if v.dtype.name not in ELEMENTWISE_CODES:
            raise UnsupportedOpError(f"the graph's {v.kind.value} %{v.id} is {v.dtype.name}; "
                                     "recorded graphs move such values with the "
                                     f"copy kernel, which moves {', '.join(ELEMENTWISE_CODES)}")
