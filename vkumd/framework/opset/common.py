"""Pieces the op families' definitions share: reading a node's attributes, the common
lowering shapes, and handing a host result back as a tensor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import unary_double_plan
from vkumd.compiler.kernels.limits import DOUBLE_UNARY_OPS
from vkumd.framework import dtypes
from vkumd.framework.graph.fused_program import step
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.registry import OPS
from vkumd.framework.ops.checks import FLOATS, check_dtype, check_tensor, output
from vkumd.framework.tensor import Tensor

Lowering = Callable[[Node, list[Any], list[Tensor]], None]
"""``(node, input tensors, output tensors)``: record the node's launches into the outputs."""
HostFn = Callable[[Any, list[Any], dict[str, Any], list[tuple[int, ...]]], Any]
"""``(ctx, input tensors, attrs, output shapes)``: the node's outputs, computed in numpy."""


def attrs_of(node: Node) -> dict[str, Any]:
    """The node's attributes with every default filled in."""
    return OPS[node.op].full_attrs(node.attrs)


def binary(fn: Callable[..., Tensor]) -> Lowering:
    """The lowering of a two-input op whose eager function takes ``(a, b, out=)``."""
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        fn(ins[0], ins[1], out=outs[0])
    return lower


def unary(fn: Callable[..., Tensor]) -> Lowering:
    """The lowering of a one-input op whose eager function takes ``(x, out=)``."""
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        fn(ins[0], out=outs[0])
    return lower


def _generated(inputs: list[Any], program: tuple, *, dtype: dtypes.DType,
               out: Tensor) -> Tensor:
    # The fused family's eager function, found through its record: that family imports this
    # module, so this module cannot import it.
    return OPS["fused_elementwise"].eager(inputs, program, dtype=dtype, out=out)


def one_step(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    """Lower an elementwise node as a one-step generated kernel (what elementwise fusion
    makes of it inside a chain); a float64 one of the unary math set as the double kernel."""
    if node.op in DOUBLE_UNARY_OPS and node.outputs[0].dtype.name == "float64":
        double_unary(node.op, ins[0], outs[0])
        return
    program = (step(node.op, list(range(len(ins))), node.attrs),)
    _generated(ins, program, dtype=node.outputs[0].dtype, out=outs[0])


def host_tensor(ctx: Any, like: dtypes.DType, array: np.ndarray) -> Tensor:
    """``array`` uploaded as a contiguous tensor of ``like``."""
    return ctx.tensor(np.ascontiguousarray(array), dtype=like)


def double_unary(op: str, x: Tensor, out: Tensor) -> Tensor:
    """``out = op(x)`` for float64 ``x`` and ``out`` of its shape, computed in double
    (``op`` a key of :data:`~vkumd.compiler.kernels.limits.DOUBLE_UNARY_OPS`)."""
    if out.size:
        x.context.run(unary_double_plan(x.context.caps, op, x.size), (x, out))
    return out


def unary_eager(op: str, doc: str) -> Callable[..., Tensor]:
    """The public eager function of a one-input float op that has no kernel of its own: a
    one-step generated kernel, computed in float32 and rounded once to x's type (float64, for
    the ops of :data:`~vkumd.compiler.kernels.limits.DOUBLE_UNARY_OPS`, in double).

    Args:
        op: the op's name (its record's elementwise trait gives the step).
        doc: the function's first docstring line (what it computes).
    """
    double = op in DOUBLE_UNARY_OPS
    types = (*FLOATS, "float64") if double else FLOATS

    def eager(x: Tensor, *, out: Tensor | None = None) -> Tensor:
        x = check_tensor(op, x, "x")
        check_dtype(op, x, "x", types)
        out = output(op, x.context, out, x.shape, x.dtype)
        if x.dtype.name == "float64":
            return double_unary(op, x, out)
        return _generated([x], ((op, 0),), dtype=x.dtype, out=out)

    eager.__name__ = eager.__qualname__ = op
    eager.__module__ = "vkumd.ops"
    double_note = "; float64 is computed in double" if double else ""
    listed = ", ".join(types)
    eager.__doc__ = f"""{doc}

    Computed in float32 (a generated kernel) and rounded once to x's type{double_note}.

    Args:
        x: {listed} tensor of any shape.
        out: optional output of x's shape and dtype.

    Returns:
        The result, x's shape and dtype.

    Raises:
        VkumdTypeError: x not a float tensor, or out of another dtype.
        VkumdValueError: out of another shape.
        CapabilityMissing: a type the device cannot store (float64 without shaderFloat64).
    """
    return eager
