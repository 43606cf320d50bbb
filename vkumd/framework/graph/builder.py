"""GraphBuilder: the API frontends (model builders, tracing, importers) build graphs with.

Example::

    b = GraphBuilder("mlp")
    x = b.input("x", ("batch", "seq", 384), "float32")
    w = b.weight("w", np.zeros((1536, 384), np.float32))
    y = b.gelu(b.matmul(x, w, trans_b=True))
    b.output(y)
    graph = b.build()

Values are handles (:class:`~vkumd.framework.graph.ir.Value`); each op method appends one
node at once, so a shape error is raised at the line that caused it, naming the node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.graph.builder_ops import OpMethods
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.ir import Graph, Value


def _attr(value: Any) -> Any:
    """An attribute as the IR stores it: hashable (lists become tuples, names Dims stay)."""
    if isinstance(value, (list, tuple)):
        return tuple(_attr(v) for v in value)
    if isinstance(value, dtypes.DType):
        return value.name
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        raise VkumdTypeError("array attributes are not supported; pass a weight instead")
    return value


class GraphBuilder(OpMethods):
    """Builds a :class:`~vkumd.framework.graph.ir.Graph` one node at a time.

    Args:
        name: the graph's name (shown in dumps).
    """

    def __init__(self, name: str = "graph") -> None:
        self.graph = Graph(name)

    def input(self, name: str, shape: Iterable[object], dtype: object = "float32") -> Value:
        """A graph input of ``shape`` (ints, symbol names such as ``"batch"``, Dims).

        Args:
            name: unique among inputs and weights.
            shape: the input's dimensions.
            dtype: its element type (default float32).

        Returns:
            The input's value handle.

        Raises:
            GraphError: a duplicate name. VkumdTypeError, VkumdValueError: a bad shape/dtype.
        """
        return self.graph.add_input(name, shape, dtype)

    def weight(self, name: str, data: object, dtype: object | None = None) -> Value:
        """A named constant (a model weight) holding a copy of ``data``.

        Args:
            name: unique among inputs and weights.
            data: an array; float64 arrays need ``dtype`` (int64 ones are stored as int64).
            dtype: the stored type; default the array's.

        Returns:
            The weight's value handle.

        Raises:
            GraphError: a duplicate name. VkumdTypeError: an array type that needs ``dtype``.
        """
        return self.graph.add_weight(name, data, dtype)

    def constant(self, data: object, dtype: object | None = None, name: str = "const"
                 ) -> Value:
        """An unnamed constant (given a fresh name from ``name``).

        Args and errors as :meth:`weight`.

        Returns:
            The constant's value handle.
        """
        return self.graph.add_weight(self.graph.unique_name(name), data, dtype)

    def assume_equal(self, a: str, b: str | int) -> None:
        """Declare symbolic dim ``a`` the same size as ``b`` (a symbol or an int).

        Raises:
            VkumdValueError: the declaration contradicts an earlier one.
        """
        self.graph.dims.equate(a, b)

    def operand(self, x: object, like: Value) -> Value:
        """``x`` as a value: itself, or a Python/numpy scalar or array made a constant of
        ``like``'s dtype (so ``b.add(x, 1.0)`` works as in numpy).

        Raises:
            VkumdTypeError: ``x`` is neither a value nor numeric.
        """
        if isinstance(x, Value):
            return x
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.number,
                                                                 np.ndarray)):
            raise VkumdTypeError(f"operands must be graph values or numbers, not "
                                 f"{type(x).__name__}")
        try:
            data = np.asarray(x, dtype=np.float64)
        except OverflowError:  # an int past float64 is infinity, as in the eager ops
            data = np.asarray(np.inf if x > 0 else -np.inf)  # type: ignore[operator]
        return self.constant(data, like.dtype)

    def op(self, op: str, *inputs: Value | None, label: str | None = None, **attrs: Any
           ) -> Any:
        """Append a node of any registered op (the generic form of the op methods).

        Args:
            op: the op's name.
            inputs: its inputs (None for an absent optional one).
            label: an optional name for dumps and errors.
            attrs: its attributes.

        Returns:
            The output value, or a tuple of them for an op with several outputs.

        Raises:
            UnsupportedOpError, GraphError, GraphTypeError: as shape inference, naming the node.
        """
        node = self.graph.add_node(op, list(inputs), {k: _attr(v) for k, v in attrs.items()},
                                   label)
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    def _apply(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any]) -> Any:
        return self.op(op, *inputs, **attrs)

    def output(self, *values: Value) -> None:
        """Append ``values`` to the graph's outputs.

        Raises:
            GraphError: a value of another graph.
        """
        known = {id(v) for v in self.graph.values()}
        for v in values:
            if id(v) not in known:
                raise GraphError(f"output {v!r} is not a value of graph {self.graph.name}")
        self.graph.set_outputs([*self.graph.outputs, *values])

    def build(self, check: bool = True) -> Graph:
        """The graph built so far (checked unless ``check`` is False).

        Returns:
            The graph; the builder keeps adding to the same object.

        Raises:
            GraphError: see :meth:`Graph.check`.
        """
        if check:
            self.graph.check()
        return self.graph

