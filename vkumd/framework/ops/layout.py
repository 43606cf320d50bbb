"""Moving data without arithmetic: embedding lookup, transpose and permute.

All three copy stored bits unchanged (NaN payloads and -0.0 included) and write contiguous
row-major outputs. Element types: float32, float16, bfloat16 and int32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.gather import gather_plan
from vkumd.compiler.kernels.permute import permute_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.ops.checks import check_context, check_dtype, check_tensor, output
from vkumd.framework.opset.unary import fill
from vkumd.framework.tensor import Tensor


def embedding(ids: Tensor, table: Tensor, *, out: Tensor | None = None) -> Tensor:
    """Rows of ``table`` picked by ``ids``: ``out[..., :] = table[ids[...], :]``.

    Out-of-range ids (negative, or ``>= table.shape[0]``) are not an error, because the
    host cannot see device-resident ids without waiting for them: their output rows are
    written as zeros (all-zero bits). Check ids on the host first if that must fail.

    Args:
        ids: int32 tensor of any shape (0-d included).
        table: ``(vocab, dim)`` tensor of float32, float16, bfloat16 or int32.
        out: optional output of shape ``ids.shape + (dim,)`` and table's dtype.

    Returns:
        ``ids.shape + (dim,)``, table's dtype.

    Raises:
        VkumdTypeError: ids not int32; table of an unsupported dtype; out of another dtype.
        VkumdValueError: table not 2-D; tensors of different contexts; out of the wrong shape.
    """
    op = "embedding"
    ids = check_tensor(op, ids, "ids")
    table = check_tensor(op, table, "table")
    if ids.dtype is not dtypes.int32:
        raise VkumdTypeError(f"embedding: ids are {ids.dtype.name}; they must be int32 "
                             "(cast() converts)")
    check_context(op, ids, table, "table")
    check_dtype(op, table, "table", ELEMENTWISE_CODES)
    if table.ndim != 2:
        raise VkumdValueError(f"embedding: table has shape {table.shape}; it must be 2-D "
                              "(vocab, dim)")
    vocab, dim = table.shape
    out = output(op, table.context, out, ids.shape + (dim,), table.dtype, (ids, table))
    if out.size == 0:
        return out
    if vocab == 0:
        return fill(out, 0)  # every id is out of range
    plan = gather_plan(table.context.caps, 8 * table.dtype.itemsize, dim, ids.size, vocab)
    table.context.run(plan, (ids, table, out))
    return out


def _normalize_dims(op: str, dims: Any, ndim: int) -> list[int]:
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise VkumdTypeError(f"{op}: dims must be a sequence of ints, not {type(dims).__name__}")
    result = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise VkumdTypeError(f"{op}: dims must be ints, got {d!r}")
        if not -ndim <= d < ndim:
            raise VkumdValueError(f"{op}: dimension {d} is out of range for a {ndim}-d tensor")
        result.append(d % ndim)
    if sorted(result) != list(range(ndim)):
        raise VkumdValueError(f"{op}: dims {tuple(dims)} are not a permutation of the "
                              f"{ndim} dimensions")
    return result


def permute(x: Tensor, dims: Sequence[int], *, out: Tensor | None = None) -> Tensor:
    """``x`` with its dimensions reordered (numpy's ``transpose(x, dims)``), made contiguous.

    Args:
        x: a float32, float16, bfloat16 or int32 tensor.
        dims: a permutation of ``range(x.ndim)``; negative entries count from the end.
        out: optional output of the permuted shape and x's dtype.

    Returns:
        A new contiguous tensor (or ``out``) of shape ``[x.shape[d] for d in dims]``.

    Raises:
        VkumdTypeError: x of an unsupported dtype; dims not ints; out of another dtype.
        VkumdValueError: dims not a permutation; more than 6 dimensions that cannot be
            merged; out of the wrong shape.
    """
    op = "permute"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", ELEMENTWISE_CODES)
    order = _normalize_dims(op, dims, x.ndim)
    return _permute(op, x, order, out)


def transpose(x: Tensor, dim0: int, dim1: int, *, out: Tensor | None = None) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped, made contiguous.

    Args:
        x: a float32, float16, bfloat16 or int32 tensor, at least 1-D.
        dim0: a dimension (negative counts from the end).
        dim1: another (or the same: a copy).
        out: optional output of the transposed shape and x's dtype.

    Returns:
        A new contiguous tensor (or ``out``).

    Raises:
        As :func:`permute`.
    """
    op = "transpose"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", ELEMENTWISE_CODES)
    if x.ndim == 0:
        raise VkumdValueError("transpose: x is 0-d and has no dimensions to swap")
    order = list(range(x.ndim))
    for d in (dim0, dim1):
        if isinstance(d, bool) or not isinstance(d, int):
            raise VkumdTypeError(f"transpose: dimensions must be ints, got {d!r}")
        if not -x.ndim <= d < x.ndim:
            raise VkumdValueError(f"transpose: dimension {d} is out of range for a "
                                  f"{x.ndim}-d tensor")
    i, j = dim0 % x.ndim, dim1 % x.ndim
    order[i], order[j] = order[j], order[i]
    return _permute(op, x, order, out)


def _permute(op: str, x: Tensor, order: list[int], out: Tensor | None) -> Tensor:
    shape = tuple(x.shape[d] for d in order)
    out = output(op, x.context, out, shape, x.dtype, (x,))
    if out.size == 0:
        return out
    plan = permute_plan(x.context.caps, op, 8 * x.dtype.itemsize, x.shape, tuple(order))
    x.context.run(plan, (x, out))
    return out


__all__ = ["embedding", "permute", "transpose"]
