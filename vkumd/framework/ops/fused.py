"""``fused_elementwise``: one generated kernel computing a whole elementwise expression.

The expression is a program in the format of the graph's ``fused_elementwise`` op
(:mod:`vkumd.framework.graph.fused_program`): SSA steps over the inputs, which broadcast
(numpy rules) to the output's shape. It is computed in float32 and rounded once to the
output type, so the result is at least as accurate as the chain of eager ops it replaces
(which rounds after every op). The first call with a new program compiles a kernel (through
the SPIR-V cache, keyed on the generated text); later calls reuse its pipeline.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_MAX_DIMS
from vkumd.compiler.kernels.fused_elementwise import (
    FUSED_INPUT_CODES,
    FUSED_MAX_INPUTS,
    FUSED_OUTPUT_CODES,
)
from vkumd.compiler.kernels.fused_elementwise_plan import fused_elementwise_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.fused_program import Program, check_program, step_of
from vkumd.framework.ops.checks import (
    broadcast,
    check_context,
    check_dtype,
    check_storage,
    check_tensor,
    output,
)
from vkumd.framework.tensor import Tensor, normalize_shape

__all__ = ["fused_elementwise"]


@functools.lru_cache(maxsize=1024)
def glsl_steps(program: Program) -> tuple[tuple[Any, ...], ...]:
    """``program`` (checked) as the generator's steps: each op's GLSL expression, from its
    declaration's elementwise trait, then the step's operands."""
    steps = []
    for step in program:
        trait = step_of(step[0])
        assert trait is not None  # check_program refused any other op
        steps.append((trait.expression(step[1 + trait.arity:]), *step[1:1 + trait.arity]))
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
        inputs: 1 to 8 tensors of one context (float32, float16, bfloat16, int32, int8 or
            uint8; integers are read as their values), broadcastable to one shape.
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
