"""The float64 kernels, computed in double: ``shaders/unary_double.comp`` (the unary math
set), ``shaders/axis_double.comp`` (reductions, argmax, softmax and scans along an axis) and
``shaders/matmul_double.comp`` (batched matmul), built only where the device has
``shaderFloat64`` (no variant otherwise, so a launch is refused by the registry, and the ops
refuse earlier with the feature named).
"""

from __future__ import annotations

import functools
import struct
from typing import Any

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import DOUBLE_UNARY_OPS
from vkumd.compiler.kernels.reduce import REDUCE_OPS
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

UNARY_DOUBLE_PUSH = PushLayout("n:u32")
_WORKGROUP = 64


def _float64_variants(ops: list[int]) -> Any:
    """A kernel's variants: one per OP code in ``ops`` (none: no OP constant), only where
    the device has ``shaderFloat64``."""
    chosen = ([{WORKGROUP: _WORKGROUP, "OP": op} for op in ops] if ops
              else [{WORKGROUP: _WORKGROUP}])
    return lambda caps: chosen if caps.shader_float64 else []


def _double_bits(value: float) -> int:
    """A float64's bits, for a ``u64`` push member."""
    return struct.unpack("<Q", struct.pack("<d", value))[0]

UNARY_DOUBLE = register(Kernel(
    name="unary_double",
    source="unary_double.comp",
    buffers=2,
    push=UNARY_DOUBLE_PUSH,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=_float64_variants(list(DOUBLE_UNARY_OPS.values())),
))


def unary_double_plan(caps: DeviceCaps, op: str, size: int) -> FixedLaunch:
    """Op ``op`` (a key of :data:`DOUBLE_UNARY_OPS`) over ``size`` contiguous float64
    elements. Operands: x, out.

    Raises:
        VkumdValueError: 2^32 elements or more (the kernel indexes in 32 bits).
    """
    if size >= 1 << 32:
        raise VkumdValueError(f"{op}: x has {size} elements; the float64 kernels index at "
                              "most 2^32 - 1; split the tensor")
    return _unary_double_plan(caps, op, size)


@functools.lru_cache(maxsize=1024)
def _unary_double_plan(caps: DeviceCaps, op: str, size: int) -> FixedLaunch:
    program = UNARY_DOUBLE.specialize({WORKGROUP: _WORKGROUP, "OP": DOUBLE_UNARY_OPS[op]})
    return FixedLaunch(program, UNARY_DOUBLE_PUSH.pack(size), grid(caps, size, _WORKGROUP),
                       (1,))


# axis_double.comp's OP codes: the reductions (reduce.py's codes), argmax and argmin, and the
# along-axis ops whose output has x's shape.
AXIS_DOUBLE_OPS = {**REDUCE_OPS, "argmax": 12, "argmin": 13, "softmax": 14,
                   "log_softmax": 15, "cumsum": 16, "cumprod": 17}
# The push flags: scans' exclusive and reverse, arg's last index among equals.
EXCLUSIVE, REVERSE, LAST = 1, 2, 4
AXIS_DOUBLE_PUSH = PushLayout("cols:u32", "rows:u32", "inner:u32", "flags:u32",
                              "denominator:u64")

AXIS_DOUBLE = register(Kernel(
    name="axis_double",
    source="axis_double.comp",
    buffers=2,
    push=AXIS_DOUBLE_PUSH,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=_float64_variants(list(AXIS_DOUBLE_OPS.values())),
))


def axis_double_plan(caps: DeviceCaps, op: str, rows: int, cols: int, inner: int = 1, *,
                     flags: int = 0, denominator: float | None = None) -> FixedLaunch:
    """Op ``op`` (a key of :data:`AXIS_DOUBLE_OPS`) of float64 x ``[rows, cols, inner]``
    along ``cols``, in double. Operands: x, out (``[rows, inner]`` for a reduction, int32 for
    argmax and argmin; x's shape for softmax, log_softmax, cumsum and cumprod).

    Args:
        flags: :data:`EXCLUSIVE` and :data:`REVERSE` for the scans, :data:`LAST` for argmax.
        denominator: what mean, var and std divide by (default ``cols``); softmax's scale
            (log_softmax's is 1).

    Raises:
        VkumdValueError: x has 2^32 elements or more (the kernel indexes in 32 bits).
    """
    if rows * cols * inner >= 1 << 32:
        raise VkumdValueError(f"{op}: x has {rows * cols * inner} elements; the float64 "
                              "kernels index at most 2^32 - 1; split the tensor")
    den = float(cols if denominator is None else denominator)
    return _axis_double_plan(caps, op, rows, cols, inner, flags, den)


@functools.lru_cache(maxsize=1024)
def _axis_double_plan(caps: DeviceCaps, op: str, rows: int, cols: int, inner: int, flags: int,
                      denominator: float) -> FixedLaunch:
    program = AXIS_DOUBLE.specialize({WORKGROUP: _WORKGROUP, "OP": AXIS_DOUBLE_OPS[op]})
    push = AXIS_DOUBLE_PUSH.pack(cols, rows, inner, flags, _double_bits(denominator))
    return FixedLaunch(program, push, grid(caps, rows * inner, _WORKGROUP), (1,))


# matmul_double.comp's flags.
TRANS_A, TRANS_B, A_REPEATS, B_REPEATS, R_REPEATS, HAS_BIAS, HAS_RESIDUAL = (
    1 << bit for bit in range(7))
MATMUL_DOUBLE_PUSH = PushLayout("m:u32", "n:u32", "k:u32", "count:u32", "flags:u32", "pad:u32",
                                "alpha:u64")

MATMUL_DOUBLE = register(Kernel(
    name="matmul_double",
    source="matmul_double.comp",
    buffers=5,
    push=MATMUL_DOUBLE_PUSH,
    spec_constants={WORKGROUP: 0},
    variants=_float64_variants([]),
))


def matmul_double_plan(caps: DeviceCaps, m: int, n: int, k: int, count: int, flags: int,
                       alpha: float) -> FixedLaunch:
    """A batched float64 matmul in double (``count`` entries of ``[m, k] @ [k, n]``, each
    operand's layout and the epilogue in ``flags``). Operands: a, b, out, bias, residual
    (the last two optional).

    Raises:
        VkumdValueError: an operand of 2^32 elements or more (32-bit indexing).
    """
    if max(count * m * n, count * m * k, count * k * n) >= 1 << 32:
        raise VkumdValueError(f"matmul: {count} x [{m}, {k}] @ [{k}, {n}] passes the float64 "
                              "kernel's 32-bit indexing; split the batch")
    return _matmul_double_plan(caps, m, n, k, count, flags, float(alpha))


@functools.lru_cache(maxsize=1024)
def _matmul_double_plan(caps: DeviceCaps, m: int, n: int, k: int, count: int, flags: int,
                        alpha: float) -> FixedLaunch:
    program = MATMUL_DOUBLE.specialize({WORKGROUP: _WORKGROUP})
    push = MATMUL_DOUBLE_PUSH.pack(m, n, k, count, flags, 0, _double_bits(alpha))
    return FixedLaunch(program, push, grid(caps, count * m * n, _WORKGROUP), (2,))
