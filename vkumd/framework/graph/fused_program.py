"""The program format of ``fused_elementwise``, the op elementwise fusion produces, and its
check.

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
    * an op whose trait is ``numeric`` (``clip``, ``leaky_relu``, ``elu``, ...): its operands,
      then every one of its numeric params, in the trait's order (``("clip", 2, 0.0, 6.0)``).

    Example over two inputs: ``(("mul", 0, 1), ("add", 2, ("const", 1.5)), ("gelu", 3))``
    is ``gelu(x0 * x1 + 1.5)``. Programs are tuples of tuples, so they hash (one generated
    kernel per distinct program) and CSE compares nodes by them.
``dtype``
    The output's dtype name: float32, float16 or bfloat16.

Semantics: every value is a real number; the kernel computes in float32 and rounds once, to
``dtype``, when it stores the result (a ``cast`` step rounds in between); the reference
evaluator computes in float64. Inputs may be float32, float16, bfloat16, int32, int8, uint8
or bool (integer and bool inputs are read as their value, so they suit ``where``'s
condition).

A step op is any op whose registry record has an
:attr:`~vkumd.framework.graph.registry.OpDef.elementwise` trait: its arity and params come
from there.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.operands import FLOATS
from vkumd.framework.graph.registry import (
    OPS,
    REQUIRED,
    Elementwise,
    float32_refusal,
    outside_float32,
)

OP = "fused_elementwise"
DIV_ROUNDINGS = ("floor", "trunc")

Step = tuple[Any, ...]
Program = tuple[Step, ...]


def step_of(op: Any) -> Elementwise | None:
    """The elementwise trait of step op ``op`` (None: not a step op)."""
    record = OPS.get(op) if isinstance(op, str) else None
    trait = record.elementwise if record is not None else None
    return trait if trait is not None and trait.rewrite is None else None


def step_ops() -> list[str]:
    """Every op a program step may name, sorted."""
    return sorted(name for name in OPS if step_of(name) is not None)


def step(op: str, operands: Sequence[Any], attrs: Mapping[str, Any]) -> Step:
    """The program step computing elementwise op ``op`` on ``operands`` (value numbers or
    constants) with attributes ``attrs`` (defaults may be left out); a param equal to its
    default is left out of the step."""
    record = OPS[op]
    trait = record.elementwise
    if trait is None:
        raise VkumdValueError(f"{OP}: {op} is not elementwise; it cannot be a program step")
    full = record.full_attrs(attrs)
    if trait.rewrite is not None:
        return trait.rewrite(list(operands), full)
    if trait.numeric:
        return (op, *operands, *(float(full[p]) for p in trait.params))
    params = (full[p] for p in trait.params
              if record.attrs[p] is REQUIRED or full[p] != record.attrs[p])
    return (op, *operands, *params)


def _operand(where: str, item: Any, limit: int) -> None:
    """Refuse an operand that is neither an earlier value nor ``("const", number)``."""
    if isinstance(item, int) and not isinstance(item, bool):
        if not 0 <= item < limit:
            raise VkumdValueError(f"{OP}: {where} reads value {item}; only values 0 to "
                                  f"{limit - 1} are defined before it")
        return
    if (isinstance(item, tuple) and len(item) == 2 and item[0] == "const"
            and isinstance(item[1], numbers.Real) and not isinstance(item[1], bool)):
        if outside_float32(item[1]):  # the kernel takes its constants as float32
            raise VkumdValueError(float32_refusal(OP, f"{where}: constant", item[1]))
        return
    raise VkumdTypeError(f"{OP}: {where} has operand {item!r}; an operand is a value number "
                         "or ('const', number)")


def _numbers(where: str, op: str, trait: Elementwise, params: Sequence[Any]) -> None:
    """Refuse a numeric step whose params are not all there, or not float32 numbers."""
    if len(params) != len(trait.params):
        raise VkumdValueError(f"{OP}: {where}: {op} takes its parameters "
                              f"{', '.join(trait.params)} after its operand(s)")
    for name, value in zip(trait.params, params, strict=True):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise VkumdTypeError(f"{OP}: {where}: {op}'s {name} must be a real number, not "
                                 f"{value!r}")
        if outside_float32(value):
            raise VkumdValueError(float32_refusal(OP, f"{where}: {name}", value))


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
        trait = step_of(step[0]) if step else None
        if trait is None:
            raise VkumdTypeError(f"{OP}: {where} has no known op; steps are "
                                 f"{', '.join(step_ops())}")
        op, args = step[0], step[1:]
        arity = trait.arity
        operands, params = args[:arity], args[arity:]
        if len(operands) < arity or len(params) > len(trait.params):
            raise VkumdValueError(f"{OP}: {where}: {op} takes {arity} operand(s)"
                                  + (" and one parameter" if trait.params else ""))
        for item in operands:
            _operand(where, item, inputs + k)
        if trait.numeric:
            _numbers(where, op, trait, params)
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
