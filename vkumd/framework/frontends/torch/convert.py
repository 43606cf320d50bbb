"""An aten-level FX graph as vkumd IR: :class:`Converter` walks the nodes once, in order.

Placeholders are either inputs (new data on every call; their shapes, symbolic where torch
traced them so, come from the fake tensors FX recorded) or weights (read once from the
tensors of the first call). Nodes over constants only run in torch here and become weights;
every other node goes through its handler in :mod:`.aten_map`/:mod:`.aten_layout`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from vkumd.framework import dtypes
from vkumd.framework.frontends.torch.aten_map import HANDLERS, meta
from vkumd.framework.frontends.torch.dims import dim_of, ir_dtype, shape_of
from vkumd.framework.frontends.torch.support import WEIGHT, constant_nodes
from vkumd.framework.graph.builder import GraphBuilder
from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.errors import UnsupportedOpError
from vkumd.framework.graph.ir import Graph, Value, ValueKind


@dataclass(frozen=True)
class Const:
    """A value known at conversion time: a torch tensor (made an IR weight when a handler
    reads it) or a tuple of them."""

    value: Any
    name: str = "const"


@dataclass
class Converted:
    """What a conversion produced.

    Attributes:
        graph: the IR (before the passes).
        inputs: placeholder index -> IR input name, for the tensors fed on every call.
        shapes: placeholder index -> the input's IR shape (to bind symbols for size results).
        outputs: one entry per FX output: ``("value", i, dtype)`` the graph's i-th output,
            returned as torch ``dtype``; ``("input", j)`` placeholder j passed through;
            ``("const", tensor)``; ``("size", dim)``; ``("none",)``.
        ranges: IR inputs the runner fills with ``arange(start, end, step)`` of the sizes
            bound on each call (``torch.arange(seq)`` of a symbolic ``seq``).
    """

    graph: Graph
    inputs: dict[int, str] = field(default_factory=dict)
    shapes: dict[int, tuple[int | Dim, ...]] = field(default_factory=dict)
    outputs: list[tuple[Any, ...]] = field(default_factory=list)
    ranges: dict[str, tuple[int | Dim, int | Dim, int]] = field(default_factory=dict)


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


class Converter:
    """Converts one FX graph (see the module docstring).

    Args:
        gm: an aten-level graph module, with ``meta["val"]`` on its nodes.
        kinds: placeholder name -> ``"input"`` or ``"weight"`` (absent: input).
        values: the real values of the placeholders, in order (weights are read from them).
        name: the IR graph's name.
    """

    def __init__(self, gm: fx.GraphModule, kinds: dict[str, str], values: Sequence[Any],
                 name: str = "torch") -> None:
        self.gm = gm
        self.kinds = kinds
        self.values = list(values)
        self.b = GraphBuilder(name)
        self._weights: dict[int, Value] = {}
        self._constants = constant_nodes(gm, kinds)
        self._keep: list[torch.Tensor] = []
        self.ranges: dict[str, tuple[int | Dim, int | Dim, int]] = {}

    # -- helpers handlers call ---------------------------------------------------------------
    def weight_of(self, tensor: torch.Tensor, name: str = "const") -> Value:
        """``tensor`` as an IR weight (made once per tensor object)."""
        found = self._weights.get(id(tensor))
        if found is not None:
            return found
        t = tensor.detach().cpu()
        dtype = ir_dtype(t.dtype)
        if t.dtype == torch.bfloat16:
            data = t.float().numpy()  # numpy has no bfloat16; the graph stores it as such
        elif t.dtype == torch.int64:
            # Checked, never wrapped; a refusal makes the graph run in torch.
            data = dtypes.host_array(t.contiguous().numpy(), expected=dtypes.int32,
                                     what=f"weight {name!r}")[0].astype(np.int32)
        else:
            data = t.contiguous().numpy()
        made = self.b.weight(self.b.graph.unique_name(_identifier(name)), data, dtype)
        self._weights[id(tensor)] = made
        self._keep.append(tensor)  # keeps id(tensor) unique while converting
        return made

    def cast_to_ir(self, x: Value, dtype: str) -> Value:
        """``x`` in IR dtype ``dtype`` (a cast node only where it differs)."""
        return x if x.dtype.name == dtype else self.b.cast(x, dtype)

    def cast_to(self, x: Value, dtype: torch.dtype) -> Value:
        """``x`` in the IR dtype torch ``dtype`` runs as."""
        return self.cast_to_ir(x, ir_dtype(dtype))

    def promote(self, node: fx.Node, x: Any) -> Any:
        """A binary op's operand in the type of the op's result (torch promotes; the IR
        takes one dtype). Numbers are left to the builder, which types them."""
        val = meta(node)
        if isinstance(x, Value) and isinstance(val, torch.Tensor):
            return self.cast_to(x, val.dtype)
        return x

    # -- the walk ----------------------------------------------------------------------------
    def _arg(self, env: dict[fx.Node, Any], a: Any) -> Any:
        if isinstance(a, fx.Node):
            a = env[a]
        if isinstance(a, Const):
            return (self.weight_of(a.value, a.name) if isinstance(a.value, torch.Tensor)
                    else a.value)
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(env, x) for x in a)
        return a

    def _real(self, env: dict[fx.Node, Any], a: Any) -> Any:
        if isinstance(a, fx.Node):
            return env[a].value
        if isinstance(a, (list, tuple)):
            return type(a)(self._real(env, x) for x in a)
        return a

    def convert(self) -> Converted:
        """Walk the graph.

        Returns:
            The :class:`Converted` graph.

        Raises:
            UnsupportedOpError: a node without a handler (naming it and its op).
            GraphError: a node whose shapes or types the IR refuses (naming it).
        """
        env: dict[fx.Node, Any] = {}
        out = Converted(self.b.graph, ranges=self.ranges)
        index = 0
        by_value: dict[int, int] = {}
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node] = self._placeholder(node, index, out, by_value)
                index += 1
            elif node.op == "get_attr":
                env[node] = Const(getattr(self.gm, node.target))
            elif node.op == "call_function":
                env[node] = self._call(env, node)
            elif node.op == "output":
                self._outputs(env, node, out, by_value)
            else:
                raise UnsupportedOpError(f"FX {node.op} node {node.name} ({node.target}) is "
                                         "not supported; pass an aten-level graph")
        return out

    def _placeholder(self, node: fx.Node, index: int, out: Converted,
                     by_value: dict[int, int]) -> Any:
        real = self.values[index] if index < len(self.values) else None
        val = meta(node)
        if self.kinds.get(node.name) == WEIGHT:
            return Const(real, node.name)
        if isinstance(val, torch.SymInt) or isinstance(real, int):
            return dim_of(val if val is not None else real)
        if not isinstance(val, torch.Tensor):
            val = real
        if not isinstance(val, torch.Tensor):
            return Const(real)  # a non-tensor argument (None, a float): fixed per graph
        shape = shape_of(val.shape)
        name = _identifier(node.name)
        value = self.b.input(name, shape, ir_dtype(val.dtype))
        out.inputs[index] = name
        out.shapes[index] = shape
        by_value[value.id] = index
        return value

    def _call(self, env: dict[fx.Node, Any], node: fx.Node) -> Any:
        if node in self._constants:
            # Runs once, in torch, on the real weights (positions, a transposed weight).
            result = node.target(*self._real(env, node.args), **self._real(env, node.kwargs))
            return Const(result)
        handler = HANDLERS.get(node.target)
        if handler is None:
            raise UnsupportedOpError(f"{node.target} has no vkumd counterpart", node.name)
        args = self._arg(env, node.args)
        kwargs = {k: self._arg(env, v) for k, v in node.kwargs.items()}
        result = handler(self, node, *args, **kwargs)
        val = meta(node)
        if isinstance(result, Value) and isinstance(val, torch.Tensor):
            result = self.cast_to(result, val.dtype)
        if node.target is operator.getitem and result is None:
            raise UnsupportedOpError(f"result {node.args[1]} of {node.args[0]} is not "
                                     "computed by vkumd", node.name)
        return result

    def _outputs(self, env: dict[fx.Node, Any], node: fx.Node, out: Converted,
                 by_value: dict[int, int]) -> None:
        items = node.args[0]
        items = list(items) if isinstance(items, (list, tuple)) else [items]
        produced: dict[int, int] = {}
        for item in items:
            r = env[item] if isinstance(item, fx.Node) else item
            if r is None:
                out.outputs.append(("none",))
            elif isinstance(r, Const):
                out.outputs.append(("const", r.value))
            elif isinstance(r, (int, Dim)):
                out.outputs.append(("size", r))
            elif isinstance(r, Value) and r.kind is ValueKind.INPUT:
                out.outputs.append(("input", by_value[r.id]))
            elif isinstance(r, Value) and r.kind is ValueKind.WEIGHT:
                out.outputs.append(("const", torch.from_numpy(np.array(r.data))))
            elif isinstance(r, Value):
                if r.id not in produced:
                    produced[r.id] = len(produced)
                    self.b.output(r)
                val = meta(item)
                dtype = val.dtype if isinstance(val, torch.Tensor) else torch.float32
                out.outputs.append(("value", produced[r.id], dtype))
            else:
                raise UnsupportedOpError(f"output {item} is a {type(r).__name__}")
