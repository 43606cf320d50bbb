"""Ops the fusion passes produce: ``fused_elementwise`` (a whole elementwise expression in
one generated kernel; its program format is :mod:`vkumd.framework.graph.fused_program`'s)
and ``add_layer_norm`` (``layer_norm(x + residual)`` in one row kernel).

``fused_elementwise`` computes in float32 and rounds once to the output type, so it is at
least as accurate as the chain of eager ops it replaces (which rounds after every op). The
first call with a new program compiles a kernel (through the SPIR-V cache, keyed on the
generated text); later calls reuse its pipeline."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.add_norm_plan import add_layer_norm_plan
from vkumd.compiler.kernels.elementwise import ELEMENTWISE_MAX_DIMS
from vkumd.compiler.kernels.fused_elementwise import (
    FUSED_INPUT_CODES,
    FUSED_MAX_INPUTS,
    FUSED_OUTPUT_CODES,
)
from vkumd.compiler.kernels.fused_elementwise_plan import fused_elementwise_plan
from vkumd.compiler.kernels.limits import FUSED_INPUT_DTYPES, FUSED_OUTPUT_DTYPES
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.fused_program import OP, Program, check_program, step_of
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, like_x, only
from vkumd.framework.graph.registry import OPS, REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import (
    broadcast,
    check_context,
    check_dtype,
    check_storage,
    check_tensor,
    output,
)
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.norms import check_norm_call, layer_norm_reference, norm_rule
from vkumd.framework.tensor import Tensor, normalize_shape


@functools.lru_cache(maxsize=1024)
def glsl_steps(program: Program) -> tuple[tuple[Any, ...], ...]:
    """``program`` (checked) as the generator's steps: each op's GLSL expression, from its
    declaration's elementwise trait, then the step's operands."""
    steps = []
    for step in program:
        trait = step_of(step[0])
        assert trait is not None  # check_program refused any other op
        params = step[1 + trait.arity:]
        # A numeric op's params are read by its expression as constant operands.
        consts = tuple(("const", p) for p in params) if trait.numeric else ()
        steps.append((trait.expression(params), *step[1:1 + trait.arity], *consts))
    return tuple(steps)


def _check_inputs(inputs: Any) -> list[Tensor]:
    if isinstance(inputs, Tensor) or not isinstance(inputs, Sequence) or not inputs:
        raise VkumdTypeError("fused_elementwise: inputs must be a non-empty list of tensors")
    if len(inputs) > FUSED_MAX_INPUTS:
        raise VkumdValueError(f"fused_elementwise: {len(inputs)} inputs; a generated kernel "
                              f"takes at most {FUSED_MAX_INPUTS} (split the expression)")
    tensors = [check_tensor("fused_elementwise", t, f"inputs[{i}]") for i, t in enumerate(inputs)]
    for i, t in enumerate(tensors):
        check_context("fused_elementwise", tensors[0], t, f"inputs[{i}]")
        check_dtype("fused_elementwise", t, f"inputs[{i}]", FUSED_INPUT_CODES)
    return tensors


def _result_dtype(tensors: list[Tensor], dtype: Any, out: Any) -> dtypes.DType:
    """``dtype``; else ``out``'s; else the first float input's; else float32."""
    if dtype is not None:
        chosen = dtypes.dtype(dtype)
    elif isinstance(out, Tensor):
        chosen = out.dtype
    else:
        chosen = next((t.dtype for t in tensors if t.dtype.is_float), dtypes.float32)
    if chosen.name not in FUSED_OUTPUT_CODES:
        raise VkumdTypeError(f"fused_elementwise: the result is {chosen.name}; it must be one "
                             f"of {', '.join(FUSED_OUTPUT_CODES)}")
    return chosen


def fused_elementwise(inputs: Sequence[Tensor], program: tuple, *,
                      out_shape: Sequence[int] | None = None, dtype: Any = None,
                      out: Tensor | None = None) -> Tensor:
    """Run ``program`` over ``inputs`` in one kernel.

    Args:
        inputs: 1 to 8 tensors of one context (float32, float16, bfloat16, int32, int8,
            uint8 or bool; integers and bool are read as their values), broadcastable to one
            shape.
        program: SSA steps, e.g. ``(("mul", 0, 1), ("add", 2, ("const", 1.5)),
            ("gelu", 3))`` for ``gelu(inputs[0] * inputs[1] + 1.5)``; the format is
            documented in :mod:`vkumd.framework.graph.fused_program`.
        out_shape: the result's shape (the inputs broadcast into it); default the inputs'
            broadcast shape, or ``out``'s.
        dtype: the result's type (float32, float16 or bfloat16); default ``out``'s, else the
            first float input's, else float32.
        out: optional result tensor; it may not be one of the inputs.

    Returns:
        The result.

    Raises:
        VkumdTypeError: not tensors, a malformed program, unsupported dtypes.
        VkumdValueError: too many inputs, shapes that do not broadcast (or more than six
            dimensions), an ``out`` of the wrong shape or dtype, a step reading a value not
            yet defined.
        CapabilityMissing: 16-bit or 8-bit types the device cannot store, or a push block
            past the device's limit.
    """
    tensors = _check_inputs(inputs)
    program = check_program(program, len(tensors))
    result = _result_dtype(tensors, dtype, out)
    context = tensors[0].context
    check_storage("fused_elementwise", result, context)
    shapes = tuple(t.shape for t in tensors)
    if out_shape is None and isinstance(out, Tensor):
        out_shape = out.shape
    if out_shape is None:
        target = broadcast("fused_elementwise", *shapes)
    else:
        target = normalize_shape(out_shape)  # int() let 2.5 pass and "ab" raise ValueError
        if broadcast("fused_elementwise", target, *shapes) != target:
            raise VkumdValueError(f"fused_elementwise: inputs of shapes {list(shapes)} do not "
                                  f"broadcast into out_shape {target}")
    if len(target) > ELEMENTWISE_MAX_DIMS:
        raise VkumdValueError(f"fused_elementwise: {len(target)} dimensions; at most "
                              f"{ELEMENTWISE_MAX_DIMS}")
    out = output("fused_elementwise", context, out, target, result, tensors)
    if out.size == 0:
        return out
    plan = fused_elementwise_plan(context.caps, glsl_steps(program),
                                  tuple(FUSED_INPUT_CODES[t.dtype.name] for t in tensors),
                                  FUSED_OUTPUT_CODES[result.name], shapes, target)
    context.run(plan, (*tensors, out))
    return out


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


def add_layer_norm(x: Tensor, residual: Tensor, weight: Tensor | None = None,
                   bias: Tensor | None = None, *, eps: float = 1e-5,
                   out: Tensor | None = None) -> Tensor:
    """``layer_norm(x + residual, weight, bias, eps=eps)`` over the last dimension.

    The sum is formed in float32 and never stored (nor rounded to x's type); mean and
    biased variance are accumulated in float32, as :func:`~vkumd.ops.layer_norm`.

    Args:
        x: float32, float16 or bfloat16, at least 1-D.
        residual: x's shape and dtype.
        weight: optional scale, shape ``(x.shape[-1],)``, x's dtype.
        bias: optional shift, shape ``(x.shape[-1],)``, x's dtype.
        eps: added to the variance (finite, >= 0).
        out: optional output of x's shape and dtype (neither x nor residual).

    Returns:
        The normalised sum, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; residual, weight, bias or out of another dtype;
            non-numeric eps.
        VkumdValueError: 0-d x; a residual of another shape; weight or bias of the wrong
            length; eps negative or not finite; out of the wrong shape or aliasing an input.
    """
    op = "add_layer_norm"
    x, rows, cols, eps = check_norm_call(op, x, (residual, weight, bias),
                                         ("residual", "weight?", "bias?"), eps)
    out = output(op, x.context, out, x.shape, x.dtype, (x, residual))
    if out.size == 0:
        return out
    plan = add_layer_norm_plan(x.context.caps, ROW_CODES[x.dtype.name], rows, cols, eps,
                               weight is not None, bias is not None)
    x.context.run(plan, (x, residual, weight, bias, out))
    return out


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
