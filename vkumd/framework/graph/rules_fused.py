"""Ops that fusion passes produce: ``fused_elementwise`` (its program format, the program
check and the shape rule) and ``add_layer_norm``.

A ``fused_elementwise`` node computes one elementwise expression over its inputs, which
broadcast (numpy rules) to the output's shape. Attributes:

``program``
    A tuple of steps in SSA form. Values ``0 .. len(inputs) - 1`` are the node's inputs;
    step ``k`` defines value ``len(inputs) + k``; the node's result is the last step's value.
    A step is ``(op, *operands)``; an operand is an earlier value's number or
    ``("const", number)``. The ops and their operands:

    * ``add``, ``sub``, ``mul``: two operands. ``div``: two, then optionally the rounding
      ``"floor"`` or ``"trunc"`` (as the ``div`` op's attribute).
    * ``eq``, ``ne``, ``lt``, ``le``, ``gt``, ``ge``: two operands; 1.0 where true, else 0.0.
    * ``where``: ``(cond, a, b)``; ``a`` where ``cond`` is nonzero, else ``b``.
    * ``relu``, ``gelu``, ``gelu_tanh``, ``silu``, ``exp``, ``sqrt``, ``tanh``, ``erf``,
      ``sigmoid``: one operand.
    * ``cast``: one operand, then a float dtype name; rounds the value to that type.

    Example over two inputs: ``(("mul", 0, 1), ("add", 2, ("const", 1.5)), ("gelu", 3))``
    is ``gelu(x0 * x1 + 1.5)``. Programs are tuples of tuples, so they hash (one generated
    kernel per distinct program) and CSE compares nodes by them.
``dtype``
    The output's dtype name: float32, float16 or bfloat16.

Semantics: every value is a real number; the kernel computes in float32 and rounds once, to
``dtype``, when it stores the result (a ``cast`` step rounds in between); the reference
evaluator computes in float64. Inputs may be float32, float16, bfloat16, int32, int8 or
uint8 (integer inputs are read as their value, so they suit ``where``'s condition).

``add_layer_norm(x, residual, weight?, bias?) {eps}`` is ``layer_norm(x + residual)``: x and
residual of one shape and dtype, weight and bias as layer_norm's.
"""

from __future__ import annotations

import numbers
from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.registry import REQUIRED, TensorType, register
from vkumd.framework.graph.rules_elementwise import FLOATS, Types, norm_rule, same_dtype
from vkumd.framework.graph.symbols import DimTable

OP = "fused_elementwise"
# Operand count of each step op (div and cast also take one parameter after them).
STEP_ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "eq": 2, "ne": 2, "lt": 2, "le": 2,
              "gt": 2, "ge": 2, "where": 3, "relu": 1, "gelu": 1, "gelu_tanh": 1, "silu": 1,
              "exp": 1, "sqrt": 1, "tanh": 1, "erf": 1, "sigmoid": 1, "cast": 1}
DIV_ROUNDINGS = ("floor", "trunc")
INPUT_DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "uint8")

Step = tuple[Any, ...]
Program = tuple[Step, ...]


def _operand(where: str, item: Any, limit: int) -> None:
    """Refuse an operand that is neither an earlier value nor ``("const", number)``."""
    if isinstance(item, int) and not isinstance(item, bool):
        if not 0 <= item < limit:
            raise VkumdValueError(f"{OP}: {where} reads value {item}; only values 0 to "
                                  f"{limit - 1} are defined before it")
        return
    if (isinstance(item, tuple) and len(item) == 2 and item[0] == "const"
            and isinstance(item[1], numbers.Real) and not isinstance(item[1], bool)):
        return
    raise VkumdTypeError(f"{OP}: {where} has operand {item!r}; an operand is a value number "
                         "or ('const', number)")


def check_program(program: Any, inputs: int) -> Program:
    """``program`` checked against the format above, for a node with ``inputs`` inputs.

    Args:
        program: the ``program`` attribute.
        inputs: how many inputs the node has.

    Returns:
        The program (unchanged).

    Raises:
        VkumdTypeError: not a tuple of tuples, an unknown op, a malformed operand or
            parameter.
        VkumdValueError: an empty program, a step reading a value not yet defined, or the
            wrong number of operands.
    """
    if not isinstance(program, tuple) or not all(isinstance(s, tuple) for s in program):
        raise VkumdTypeError(f"{OP}: program must be a tuple of step tuples, not {program!r}")
    if not program:
        raise VkumdValueError(f"{OP}: program has no steps; it needs at least one")
    for k, step in enumerate(program):
        where = f"step {k} {step!r}"
        if not step or step[0] not in STEP_ARITY:
            raise VkumdTypeError(f"{OP}: {where} has no known op; steps are "
                                 f"{', '.join(STEP_ARITY)}")
        op, args = step[0], step[1:]
        arity = STEP_ARITY[op]
        operands, params = args[:arity], args[arity:]
        if len(operands) < arity or len(params) > (1 if op in ("div", "cast") else 0):
            raise VkumdValueError(f"{OP}: {where}: {op} takes {arity} operand(s)"
                                  + (" and one parameter" if op in ("div", "cast") else ""))
        for item in operands:
            _operand(where, item, inputs + k)
        if op == "cast" and (len(params) != 1 or params[0] not in FLOATS):
            raise VkumdTypeError(f"{OP}: {where}: cast needs a target dtype, one of "
                                 f"{', '.join(FLOATS)}")
        if op == "div" and params and params[0] not in DIV_ROUNDINGS:
            raise VkumdTypeError(f"{OP}: {where}: div's rounding is 'floor' or 'trunc', not "
                                 f"{params[0]!r}")
    return program


def constants(program: Program) -> list[float]:
    """Every constant of ``program``, in order of appearance (as floats)."""
    return [float(a[1]) for step in program for a in step[1:] if isinstance(a, tuple)]


# Not in place: the memory planner matches byte sizes only, and a float32 [N] input of a
# float16 [2, N] result has the result's size but is read at other offsets than written.
@register(OP, ("xs*",), {"program": REQUIRED, "dtype": REQUIRED})
def _fused_elementwise(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    xs = [t for t in ins if t is not None]
    check_program(attrs["program"], len(xs))
    out = attrs["dtype"]
    name = out.name if isinstance(out, dtypes.DType) else out
    if name not in FLOATS:
        raise VkumdTypeError(f"{OP}: dtype={out!r}; the result is one of {', '.join(FLOATS)}")
    for i, t in enumerate(xs):
        if t.dtype.name not in INPUT_DTYPES:
            raise VkumdTypeError(f"{OP}: xs[{i}] is {t.dtype.name}; inputs are "
                                 f"{', '.join(INPUT_DTYPES)}")
    return [TensorType(dims.broadcast(*(t.shape for t in xs)), dtypes.dtype(name))]


@register("add_layer_norm", ("x", "residual", "weight?", "bias?"), {"eps": 1e-5})
def _add_layer_norm(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, residual = ins[0], ins[1]
    assert x is not None and residual is not None
    same_dtype("add_layer_norm", ("x", x), ("residual", residual))
    if not dims.same_shape(x.shape, residual.shape):
        raise VkumdValueError(f"add_layer_norm: residual has shape "
                              f"{format_shape(residual.shape)}; it must be x's "
                              f"{format_shape(x.shape)}")
    return norm_rule("add_layer_norm", [x, ins[2], ins[3]], attrs["eps"], dims)
