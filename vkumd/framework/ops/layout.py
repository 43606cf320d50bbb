"""Moving data without arithmetic: embedding lookup, transpose and permute.

All three copy stored bits unchanged (NaN payloads and -0.0 included) and write contiguous
row-major outputs. Element types: float32, float16, bfloat16 and int32.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from vkumd.compiler.kernels import WORKGROUP, transformer
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.ops import _rows
from vkumd.framework.ops.elementwise import _check_tensor, fill
from vkumd.framework.tensor import Tensor

MAX_DIMS = 6
_COPY_TYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32"}
_GATHER_PUSH = struct.Struct("<3I")
_PERMUTE_PUSH = struct.Struct("<15I")
_PERMUTE_CHUNK = 4096  # elements of a row per workgroup (shaders/permute.comp CHUNK)


def _check_copyable(op: str, t: Tensor, what: str) -> None:
    if t.dtype.name not in _COPY_TYPES:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}; it takes "
                             f"{', '.join(_COPY_TYPES)}")
    if t.dtype.itemsize == 2 and not t.context.caps.storage_16bit:
        raise CapabilityMissing(f"{op}: {t.dtype.name} tensors need 16-bit storage, which "
                                f"{t.context.caps.name} lacks")


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
    ids = _check_tensor(op, ids, "ids")
    table = _check_tensor(op, table, "table")
    if ids.dtype is not dtypes.int32:
        raise VkumdTypeError(f"embedding: ids are {ids.dtype.name}; they must be int32 "
                             "(cast() converts)")
    if table.context is not ids.context:
        raise VkumdValueError("embedding: ids and table belong to different contexts")
    _check_copyable(op, table, "table")
    if table.ndim != 2:
        raise VkumdValueError(f"embedding: table has shape {table.shape}; it must be 2-D "
                              "(vocab, dim)")
    vocab, dim = table.shape
    out = _rows.output(op, table, out, ids.shape + (dim,))
    if out.size == 0:
        return out
    if vocab == 0:
        return fill(out, 0)  # every id is out of range
    vec = 4 if dim % 4 == 0 else 1
    variant = {"WIDTH": 8 * table.dtype.itemsize, "VEC": vec,
               WORKGROUP: transformer.row_layout(table.context.caps)[WORKGROUP]}
    push = _GATHER_PUSH.pack(dim // vec, ids.size, vocab)
    table.context.dispatch("gather_rows", variant,
                           [_rows.buffer(ids), _rows.buffer(table), _rows.buffer(out)],
                           push, _rows.rows_grid(table.context, ids.size), writes=(2,))
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


def _merged(shape: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
    """Adjacent output dimensions that stay adjacent in the source, merged into one."""
    pairs = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    if not pairs:
        return [1], [0]
    merged = [pairs[0]]
    for n, s in pairs[1:]:
        outer_n, outer_s = merged[-1]
        if outer_s == s * n:
            merged[-1] = (outer_n * n, s)
        else:
            merged.append((n, s))
    return [n for n, _ in merged], [s for _, s in merged]


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
    x = _check_tensor(op, x, "x")
    _check_copyable(op, x, "x")
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
    x = _check_tensor(op, x, "x")
    _check_copyable(op, x, "x")
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
    shape = [x.shape[d] for d in order]
    out = _rows.output(op, x, out, tuple(shape))
    if out.size == 0:
        return out
    source_strides = [math.prod(x.shape[d + 1:]) for d in range(x.ndim)]
    merged_shape, merged_strides = _merged(shape, [source_strides[d] for d in order])
    if len(merged_shape) > MAX_DIMS:
        raise VkumdValueError(f"{op}: this reordering of shape {x.shape} needs "
                              f"{len(merged_shape)} dimensions after merging; at most "
                              f"{MAX_DIMS}")
    # Outer dimensions locate a row of the innermost one; the kernel walks that row.
    outer, outer_strides = merged_shape[:-1], merged_strides[:-1]
    cols, rows = merged_shape[-1], out.size // merged_shape[-1]
    pad = MAX_DIMS - 1 - len(outer)
    chunks = -(-cols // _PERMUTE_CHUNK)
    push = _PERMUTE_PUSH.pack(rows, cols, merged_strides[-1], chunks, len(outer), *outer,
                              *([1] * pad), *outer_strides, *([0] * pad))
    variant = {"WIDTH": 8 * x.dtype.itemsize,
               WORKGROUP: transformer.permute_workgroup(x.context.caps, cols)}
    x.context.dispatch("permute", variant, [_rows.buffer(x), _rows.buffer(out)], push,
                       _rows.looped_grid(x.context, rows * chunks), writes=(1,))
    return out


__all__ = ["embedding", "permute", "transpose"]
