"""Ops the fusion passes produce: ``fused_elementwise`` (a whole elementwise expression in
one generated kernel; its program format is :mod:`vkumd.framework.graph.fused_program`'s)
and ``add_layer_norm`` (``layer_norm(x + residual)`` in one row kernel)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import FUSED_INPUT_DTYPES, FUSED_OUTPUT_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.fused_program import OP, check_program, step_of
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, like_x, only
from vkumd.framework.graph.registry import OPS, REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.add_norm import add_layer_norm
from vkumd.framework.ops.fused import fused_elementwise
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.rows import layer_norm_reference, norm_rule
from vkumd.framework.tensor import Tensor


def _fused_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    xs = [t for t in ins if t is not None]
    check_program(attrs["program"], len(xs))
    out = attrs["dtype"]
    name = out.name if isinstance(out, dtypes.DType) else out
    if name not in FUSED_OUTPUT_DTYPES:
        raise VkumdTypeError(f"{OP}: dtype={out!r}; the result is one of "
                             f"{', '.join(FUSED_OUTPUT_DTYPES)}")
    for i, t in enumerate(xs):
        if t.dtype.name not in FUSED_INPUT_DTYPES:
            raise VkumdTypeError(f"{OP}: xs[{i}] is {t.dtype.name}; inputs are "
                                 f"{', '.join(FUSED_INPUT_DTYPES)}")
    return [TensorType(dims.broadcast(*(t.shape for t in xs)), dtypes.dtype(name))]


def _fused_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    # Each step runs the reference of the op it names, so a fused group evaluates exactly as
    # the nodes it replaced (same float64 operations in the same order).
    values: list[np.ndarray] = [a for a in args if a is not None]
    for step in attrs["program"]:
        op, rest = step[0], step[1:]
        trait = step_of(op)
        assert trait is not None  # the rule checked the program
        operands = [np.float64(a[1]) if isinstance(a, tuple) else values[a]
                    for a in rest[:trait.arity]]
        step_attrs = OPS[op].full_attrs(dict(zip(trait.params, rest[trait.arity:],
                                                 strict=False)))
        result = OPS[op].reference(operands, step_attrs, shapes)[0]
        values.append(np.asarray(result, np.float64))
    return [np.broadcast_to(values[-1], shapes[0]).copy()]


def _fused_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    fused_elementwise(ins, at["program"], dtype=at["dtype"], out=outs[0])


# Not in place: the memory planner matches byte sizes only, and a float32 [N] input of a
# float16 [2, N] result has the result's size but is read at other offsets than written.
define(OP, ("xs*",), {"program": REQUIRED, "dtype": REQUIRED}, rule=_fused_rule,
       reference=_fused_reference, lower=_fused_lower, eager=fused_elementwise)


def _add_layer_norm_rule(ins: Types, attrs: dict[str, Any], dims: DimTable
                         ) -> list[TensorType]:
    x, residual = only(ins), ins[1]
    assert residual is not None  # a required input, checked by the registry
    like_x("add_layer_norm", x, residual, "residual")
    if not dims.same_shape(x.shape, residual.shape):
        raise VkumdValueError(f"add_layer_norm: residual has shape "
                              f"{format_shape(residual.shape)}; it must be x's "
                              f"{format_shape(x.shape)}")
    return norm_rule("add_layer_norm", [x, ins[2], ins[3]], attrs["eps"], dims)


def _add_layer_norm_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    x, residual, weight, bias = ins
    add_layer_norm(x, residual, weight, bias, eps=attrs_of(node)["eps"], out=outs[0])


define("add_layer_norm", ("x", "residual", "weight?", "bias?"), {"eps": 1e-5},
       rule=_add_layer_norm_rule,
       reference=lambda a, attrs, s: layer_norm_reference([a[0] + a[1], a[2], a[3]], attrs, s),
       lower=_add_layer_norm_lower, eager=add_layer_norm)
