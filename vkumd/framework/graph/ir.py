"""The graph IR: values (typed, with symbolic shapes) and nodes (op, inputs, attributes).

Every frontend (the builder, tracing, ONNX, torch.export) produces a :class:`Graph`; every
pass and the memory planner work on it alone. A graph keeps its nodes in a list that is a
topological order (the builder appends in order; passes keep it one); value and node ids are
stable across :meth:`Graph.copy`, so a graph before and after a pass can be compared line by
line.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Shape, as_shape
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.registry import TensorType, infer, normalize_attrs, op_info
from vkumd.framework.graph.symbols import DimTable


class ValueKind(str, enum.Enum):
    """Where a value comes from, which decides where the memory planner may put it."""

    INPUT = "input"
    WEIGHT = "weight"  # a constant: model weights and folded constants alike
    INTERMEDIATE = "intermediate"
    OUTPUT = "output"  # produced by a node and returned by the graph


class Value:
    """One tensor of a graph: its type, where it comes from and which nodes read it.

    Attributes:
        id: unique in its graph; the text form writes it ``%id``.
        type: shape and dtype.
        kind: see :class:`ValueKind`.
        name: the input's or weight's name (None for most produced values).
        producer: the node that writes it (None for inputs and weights).
        users: the nodes that read it, once per use.
        data: a weight's contents (read-only, the dtype's numpy type), else None.
    """

    __slots__ = ("id", "type", "kind", "name", "producer", "users", "data")

    def __init__(self, id: int, type: TensorType, kind: ValueKind, name: str | None = None,
                 producer: Node | None = None, data: np.ndarray | None = None) -> None:
        self.id = id
        self.type = type
        self.kind = kind
        self.name = name
        self.producer = producer
        self.users: list[Node] = []
        self.data = data

    @property
    def shape(self) -> Shape:
        """The value's shape (ints and symbolic dims)."""
        return self.type.shape

    @property
    def dtype(self) -> dtypes.DType:
        """The value's element type."""
        return self.type.dtype

    def __repr__(self) -> str:
        return f"%{self.id}"


class Node:
    """One op application: ``outputs = op(inputs) {attrs}``.

    Attributes:
        id: unique in its graph.
        op: the op's name (a key of the op registry).
        inputs: input values, None where an optional input is absent.
        attrs: attributes that differ from the op's defaults (hashable values).
        outputs: the values the node writes.
        name: an optional label (a layer's name) shown in errors and dumps.
    """

    __slots__ = ("id", "op", "inputs", "attrs", "outputs", "name")

    def __init__(self, id: int, op: str, inputs: list[Value | None], attrs: dict[str, Any],
                 name: str | None = None) -> None:
        self.id = id
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.outputs: list[Value] = []
        self.name = name

    def describe(self) -> str:
        """How errors name the node: ``node %5 = matmul`` (and its label)."""
        outs = ", ".join(f"%{v.id}" for v in self.outputs) or "?"
        label = f" ({self.name})" if self.name else ""
        return f"node {outs} = {self.op}{label}"

    def __repr__(self) -> str:
        return f"<{self.describe()}>"


class Graph:
    """A dataflow graph of :class:`Node` values over :class:`Value` tensors.

    Attributes:
        name: shown in the text form and the DOT export.
        inputs: the graph's inputs, in call order.
        weights: its constants.
        nodes: its nodes, in a topological order.
        outputs: the values it returns, in order.
        dims: which symbolic dims are declared equal.
        passes_run: the names of the passes that produced this graph, in order.
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.inputs: list[Value] = []
        self.weights: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.dims = DimTable()
        self.passes_run: list[str] = []
        self._next_value = 0
        self._next_node = 0

    # -- building ------------------------------------------------------------------------

    def _value(self, type: TensorType, kind: ValueKind, name: str | None = None,
               producer: Node | None = None, data: np.ndarray | None = None) -> Value:
        value = Value(self._next_value, type, kind, name, producer, data)
        self._next_value += 1
        return value

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"an input or weight needs a non-empty name, not {name!r}")
        if any(v.name == name for v in (*self.inputs, *self.weights)):
            raise GraphError(f"the graph already has an input or weight called {name!r}")

    def add_input(self, name: str, shape: Iterable[object], dtype: object) -> Value:
        """A new graph input.

        Args:
            name: unique among inputs and weights; the reference evaluator binds by it.
            shape: ints and symbol names (``("batch", "seq", 384)``) or :class:`Dim` values.
            dtype: a :class:`~vkumd.framework.dtypes.DType`, its name or a numpy dtype.

        Returns:
            The input's value.

        Raises:
            GraphError: a duplicate or empty name. VkumdTypeError/VkumdValueError: a bad
                shape or dtype.
        """
        self._check_name(name)
        value = self._value(TensorType(as_shape(shape), dtypes.dtype(dtype)), ValueKind.INPUT,
                            name)
        self.inputs.append(value)
        return value

    def add_weight(self, name: str, data: object, dtype: object | None = None) -> Value:
        """A new constant holding ``data`` (copied, stored as ``dtype``'s numpy type).

        Args:
            name: unique among inputs and weights.
            data: an array (or scalar); float64 needs ``dtype`` (int64 is stored as int64).
            dtype: the stored type; default the array's own (float32, float16, int32, ...).

        Returns:
            The weight's value.

        Raises:
            GraphError: a duplicate name. VkumdTypeError: an array type that needs ``dtype``.
        """
        self._check_name(name)
        array = np.asarray(data)
        dt = dtypes.from_array(array, dtype)
        # to_storage's ascontiguousarray turns a 0-d array into 1-d; keep the shape.
        stored = dtypes.from_storage(dtypes.to_storage(array, dt), dt).reshape(array.shape)
        stored = stored.copy()
        stored.setflags(write=False)
        value = self._value(TensorType(tuple(stored.shape), dt), ValueKind.WEIGHT, name,
                            data=stored)
        self.weights.append(value)
        return value

    def unique_name(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``... whichever no input or weight has yet."""
        taken = {v.name for v in (*self.inputs, *self.weights)}
        name, i = base, 0
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        return name

    def add_node(self, op: str, inputs: Sequence[Value | None],
                 attrs: Mapping[str, Any] | None = None, name: str | None = None) -> Node:
        """Append an ``op`` node; its outputs' types come from shape inference.

        Args:
            op: a registered op name.
            inputs: values of this graph (None for an absent optional input).
            attrs: the op's attributes; those equal to the defaults are dropped.
            name: an optional label for errors and dumps.

        Returns:
            The node; ``node.outputs`` holds its new values.

        Raises:
            UnsupportedOpError, GraphError, GraphTypeError: as
                :func:`~vkumd.framework.graph.registry.infer`, naming the node.
        """
        where = f"node %{self._next_value} = {op}" + (f" ({name})" if name else "")
        info = op_info(op, where)
        for v in inputs:
            if v is not None and not isinstance(v, Value):
                raise GraphError(f"inputs must be graph values, not {type(v).__name__} {v!r}",
                                 where)
        clean = normalize_attrs(info, dict(attrs or {}), where)
        types = infer(op, [v.type if v is not None else None for v in inputs], clean,
                      self.dims, where)
        node = Node(self._next_node, op, info.padded(inputs), clean, name)
        self._next_node += 1
        node.outputs = [self._value(t, ValueKind.INTERMEDIATE, producer=node) for t in types]
        for v in inputs:
            if v is not None:
                v.users.append(node)
        self.nodes.append(node)
        return node

    def set_outputs(self, values: Sequence[Value]) -> None:
        """Make ``values`` the graph's outputs (replacing any before)."""
        self.outputs = list(values)
        self._refresh_kinds()

    def _refresh_kinds(self) -> None:
        returned = {v.id for v in self.outputs}
        for node in self.nodes:
            for v in node.outputs:
                v.kind = ValueKind.OUTPUT if v.id in returned else ValueKind.INTERMEDIATE

    # -- editing (for passes, on a copy) ----------------------------------------------------

    def replace_uses(self, old: Value, new: Value) -> None:
        """Make every reader of ``old`` (nodes and the graph's outputs) read ``new``."""
        if old is new:
            return
        for node in old.users:
            node.inputs = [new if v is old else v for v in node.inputs]
            new.users.append(node)
        old.users = []
        if any(v is old for v in self.outputs):
            self.set_outputs([new if v is old else v for v in self.outputs])

    def remove_node(self, node: Node) -> None:
        """Delete ``node``, whose outputs nothing may read any more.

        Raises:
            GraphError: an output of the node is still read or returned.
        """
        returned = {v.id for v in self.outputs}
        for v in node.outputs:
            if v.users or v.id in returned:
                raise GraphError(f"%{v.id} is still used; replace its uses first",
                                 node.describe())
        self.nodes.remove(node)
        for v in node.inputs:
            if v is not None and node in v.users:
                v.users = [u for u in v.users if u is not node]

    def remove_weight(self, value: Value) -> None:
        """Delete an unused constant."""
        if value.users or any(v is value for v in self.outputs):
            raise GraphError(f"weight %{value.id} ({value.name}) is still used")
        self.weights.remove(value)

    # -- reading ---------------------------------------------------------------------------

    def values(self) -> Iterator[Value]:
        """Every value: inputs, weights, then node outputs in node order."""
        yield from self.inputs
        yield from self.weights
        for node in self.nodes:
            yield from node.outputs

    def topological_order(self) -> list[Node]:
        """The nodes in an order where each comes after the producers of its inputs.

        Ties keep the current list order, so an already ordered graph is returned as is.

        Raises:
            GraphError: the nodes form a cycle (naming one node on it).
        """
        position = {node.id: i for i, node in enumerate(self.nodes)}
        waiting: dict[int, int] = {}
        for node in self.nodes:
            producers = {v.producer.id for v in node.inputs
                         if v is not None and v.producer is not None}
            waiting[node.id] = len(producers & set(position))
        ready = sorted(position[n.id] for n in self.nodes if waiting[n.id] == 0)
        order: list[Node] = []
        heapq.heapify(ready)
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            readers = {u.id: u for v in node.outputs for u in v.users}
            for user in readers.values():
                if user.id in waiting:
                    waiting[user.id] -= 1
                    if waiting[user.id] == 0:
                        heapq.heappush(ready, position[user.id])
        if len(order) != len(self.nodes):
            stuck = next(n for n in self.nodes if waiting[n.id] > 0)
            raise GraphError("the nodes form a cycle", stuck.describe())
        return order

    def copy(self) -> Graph:
        """An independent graph with the same ids (weights' read-only data is shared)."""
        g = Graph(self.name)
        g.dims = self.dims.copy()
        g.passes_run = list(self.passes_run)
        g._next_value, g._next_node = self._next_value, self._next_node
        vmap: dict[int, Value] = {}
        for src, dst in ((self.inputs, g.inputs), (self.weights, g.weights)):
            for v in src:
                vmap[v.id] = Value(v.id, v.type, v.kind, v.name, data=v.data)
                dst.append(vmap[v.id])
        for node in self.nodes:
            inputs = [vmap[v.id] if v is not None else None for v in node.inputs]
            twin = Node(node.id, node.op, inputs, dict(node.attrs), node.name)
            for v in inputs:
                if v is not None:
                    v.users.append(twin)
            for v in node.outputs:
                vmap[v.id] = Value(v.id, v.type, v.kind, v.name, producer=twin)
                twin.outputs.append(vmap[v.id])
            g.nodes.append(twin)
        g.outputs = [vmap[v.id] for v in self.outputs]
        return g

    def check(self) -> None:
        """Validate the graph; see :func:`vkumd.framework.graph.check.check_graph`."""
        from vkumd.framework.graph.check import check_graph

        check_graph(self)

    def to_dot(self) -> str:
        """The graph in Graphviz DOT; see :func:`vkumd.framework.graph.printing.to_dot`."""
        from vkumd.framework.graph.printing import to_dot

        return to_dot(self)

    def summary(self, bindings: Mapping[str, int] | None = None, *, alignment: int = 256
                ) -> str:
        """A text table of the graph; see :func:`vkumd.framework.graph.summary.summarize`."""
        from vkumd.framework.graph.summary import summarize

        return summarize(self, bindings, alignment=alignment)

    def __repr__(self) -> str:
        return (f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.weights)} weights, "
                f"{len(self.nodes)} nodes, {len(self.outputs)} outputs>")

    def __str__(self) -> str:
        from vkumd.framework.graph.printing import format_graph

        return format_graph(self)
