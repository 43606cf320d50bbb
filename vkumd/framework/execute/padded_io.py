"""Moving a call's inputs into a bucket's padded tensors, and its outputs back out.

Padding and cutting both touch only leading parts of plain-symbol axes, so they are row
gathers: with ``k`` the last axis whose size differs, the tensor is a table of
``prod(shape[:k+1])`` rows of ``prod(shape[k+1:])`` elements, and ``ops.embedding`` picks
rows by index (an out-of-range index writes a zero row: the padding). A cut along the first
axis only is a prefix, returned as a view. Dtypes the gather kernel does not take go
through the host.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.execute.arena import view
from vkumd.framework.tensor import Tensor

_MAX_INDEX_TENSORS = 32


class RowIndices:
    """Index tensors for row gathers, kept (bounded, least recently used out) so a repeated
    size uploads nothing."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self._cache: OrderedDict[tuple, Tensor] = OrderedDict()

    def get(self, kind: str, true: tuple[int, ...], padded: tuple[int, ...]) -> Tensor:
        """int32 row indices: ``"cut"`` picks the true rows of a padded table, ``"pad"``
        places the true rows in a padded table (-1, a zero row, elsewhere)."""
        key = (kind, true, padded)
        found = self._cache.get(key)
        if found is not None:
            self._cache.move_to_end(key)
            return found
        if kind == "cut":
            grid = np.indices(true).reshape(len(true), -1)
            rows = np.ravel_multi_index(tuple(grid), padded)
        else:
            grid = np.indices(padded).reshape(len(padded), -1)
            inside = np.all(grid < np.array(true)[:, None], axis=0)
            clipped = np.minimum(grid, np.array(true)[:, None] - 1)
            rows = np.where(inside, np.ravel_multi_index(tuple(clipped), true), -1)
        made = self.context.tensor(rows.astype(np.int32))
        self._cache[key] = made
        if len(self._cache) > _MAX_INDEX_TENSORS:
            self._cache.popitem(last=False)[1].release()
        return made

    def release(self) -> None:
        """Free every index tensor."""
        for t in self._cache.values():
            t.release()
        self._cache.clear()


def _split(true: tuple[int, ...], padded: tuple[int, ...]) -> int:
    """The last axis whose true size differs from the padded one."""
    return max(i for i, (a, b) in enumerate(zip(true, padded, strict=True)) if a != b)


def _gatherable(dt: dtypes.DType, true: tuple[int, ...]) -> bool:
    return dt.name in ELEMENTWISE_CODES and math.prod(true) > 0


def write_input(name: str, target: Tensor, value: Any, indices: RowIndices) -> None:
    """Put a call's input ``value`` (numpy-like or a Tensor, of the true shape) into the
    bucket's tensor ``target``, zero-padded.

    Raises:
        VkumdTypeError: a Tensor of another dtype.
        VkumdValueError: a Tensor of another context.
    """
    if value is target:  # the caller filled the recording's own tensor: nothing to move
        return
    if not isinstance(value, Tensor):
        array = np.asarray(value)
        if array.shape != target.shape:
            padded = np.zeros(target.shape, dtype=array.dtype)
            padded[tuple(slice(0, n) for n in array.shape)] = array
            array = padded
        target.write(array)
        return
    if value.context is not target.context:
        raise VkumdValueError(f"input {name!r} is a tensor of another context")
    if value.dtype is not target.dtype:
        raise VkumdTypeError(f"input {name!r} is {value.dtype.name}; the graph takes "
                             f"{target.dtype.name} (ops.cast converts)")
    if value.shape == target.shape:
        ops.copy(value, out=target)
        return
    true, padded = value.shape, target.shape
    if not _gatherable(value.dtype, true):
        write_input(name, target, value.numpy(), indices)
        return
    k = _split(true, padded)
    inner = math.prod(true[k + 1:])
    rows = indices.get("pad", true[:k + 1], padded[:k + 1])
    table = view(value, (math.prod(true[:k + 1]), inner))
    ops.embedding(rows, table, out=view(target, (rows.size, inner)))


def read_output(source: Tensor, true: tuple[int, ...], indices: RowIndices) -> Tensor:
    """The true part of a bucket's output ``source``: itself, a view of its prefix, or a
    new tensor."""
    padded = source.shape
    if true == padded:
        return source
    if all(a == b for a, b in zip(true[1:], padded[1:], strict=True)):
        return view(source, true)
    if not _gatherable(source.dtype, true):
        host = source.numpy()[tuple(slice(0, n) for n in true)]
        return source.context.tensor(host, dtype=source.dtype)
    k = _split(true, padded)
    inner = math.prod(padded[k + 1:])
    rows = indices.get("cut", true[:k + 1], padded[:k + 1])
    out = source.context.empty(true, source.dtype)
    table = view(source, (math.prod(padded[:k + 1]), inner))
    ops.embedding(rows, table, out=view(out, (rows.size, inner)))
    return out
