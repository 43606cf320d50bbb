"""New shapes over the same memory: flatten, squeeze and unsqueeze (reshape, a graph op, is
:mod:`vkumd.framework.opset.layout`'s).

``squeeze`` and ``unsqueeze`` are always views: a new :class:`~vkumd.framework.tensor.Tensor`
over the same allocation with size-1 dimensions dropped or inserted (no launch, no copy).
``flatten`` is a view of contiguous data and a copy of a strided view, as ``torch.flatten``.
Writes through the view are seen by the original and the reverse, work on both is ordered
(hazard tracking keys memory by its allocation), and the memory goes back to the pool once
every tensor over it has been released.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.ops.checks import check_tensor
from vkumd.framework.tensor import Tensor


def dim_index(op: str, dim: Any, ndim: int, what: str = "dim") -> int:
    """``dim`` as an index in ``range(ndim)`` (negative counts from the end).

    Raises:
        VkumdTypeError: ``dim`` is not an int.
        VkumdValueError: it is out of range.
    """
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
        raise VkumdTypeError(f"{op}: {what} must be an int, not {dim!r}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise VkumdValueError(f"{op}: {what}={dim} is out of range for a {ndim}-d tensor "
                              f"(use {-max(ndim, 1)} to {max(ndim, 1) - 1})")
    return int(dim) % max(ndim, 1)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``x`` with dimensions ``start_dim`` to ``end_dim`` (inclusive) merged into one: a view.

    A 0-d ``x`` becomes 1-D, as ``torch.flatten``.

    Raises:
        VkumdTypeError: dims not ints.
        VkumdValueError: dims out of range, or ``start_dim`` after ``end_dim``.
    """
    op = "flatten"
    x = check_tensor(op, x, "x")
    if x.ndim == 0:
        dim_index(op, start_dim, 0, "start_dim")
        dim_index(op, end_dim, 0, "end_dim")
        return x.alias((1,))
    first = dim_index(op, start_dim, x.ndim, "start_dim")
    last = dim_index(op, end_dim, x.ndim, "end_dim")
    if first > last:
        raise VkumdValueError(f"flatten: start_dim={start_dim} comes after end_dim={end_dim} "
                              f"for a {x.ndim}-d tensor")
    merged = math.prod(x.shape[first:last + 1])
    return x.alias(x.shape[:first] + (merged,) + x.shape[last + 1:])


def squeeze(x: Tensor, dim: int | None = None) -> Tensor:
    """``x`` without its size-1 dimensions (all of them, or ``dim`` if it is 1): a view.

    As ``torch.squeeze``, a ``dim`` whose size is not 1 leaves the shape as it is.

    Raises:
        VkumdTypeError: ``dim`` not an int.
        VkumdValueError: ``dim`` out of range.
    """
    x = check_tensor("squeeze", x, "x")
    if dim is None:
        kept = [i for i, n in enumerate(x.shape) if n != 1]
    else:
        d = dim_index("squeeze", dim, x.ndim)
        kept = [i for i in range(x.ndim) if x.ndim == 0 or i != d or x.shape[d] != 1]
    return x.as_strided(tuple(x.shape[i] for i in kept),
                        tuple(x.element_strides[i] for i in kept), x.element_offset)


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """``x`` with a size-1 dimension inserted at ``dim`` (``-1`` appends): a view.

    Raises:
        VkumdTypeError: ``dim`` not an int.
        VkumdValueError: ``dim`` outside ``[-x.ndim - 1, x.ndim]``.
    """
    x = check_tensor("unsqueeze", x, "x")
    d = dim_index("unsqueeze", dim, x.ndim + 1)
    # The new dimension's stride is what PyTorch gives it (it never moves).
    inner = x.shape[d] * x.element_strides[d] if d < x.ndim else 1
    return x.as_strided(x.shape[:d] + (1,) + x.shape[d:],
                        x.element_strides[:d] + (inner,) + x.element_strides[d:],
                        x.element_offset)


__all__ = ["flatten", "squeeze", "unsqueeze"]
