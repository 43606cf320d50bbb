"""Numerical checks for vkumd's results, shared by its tests, demos and benchmarks.

- :func:`rel_error`: the error of a result relative to a float64 reference (Frobenius norm,
  or the largest element);
- :func:`poisoned` and :func:`poison`: outputs filled with NaN (or a sentinel for integer
  types) first, so an element a kernel never wrote shows up in the result;
- :func:`stored` and :func:`stored_tensor`: the values a tensor of a dtype actually holds,
  in float64, so a reference starts from what the device computes on rather than from the
  values before rounding.

In a test::

    from vkumd.testing.numerics import poisoned, rel_error, stored_tensor

    a, a64 = stored_tensor(ctx, rng.standard_normal((7, 13)), "float16")
    out = poisoned(ctx, (7, 13), "float16")
    vkumd.ops.gelu(a, out=out)
    assert rel_error(out, gelu64(a64)) < 1e-3
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.framework import dtypes

# An int32 output no kernel should produce by accident: a skipped element keeps it.
SENTINEL = -123456789
_FLOATS = ("float32", "float16", "bfloat16")


def _array(value: Any) -> np.ndarray:
    """A numpy array of a Tensor (read back), a torch tensor or anything array-like."""
    if hasattr(value, "detach"):  # torch: without the autograd graph, in a type numpy has
        value = value.detach().cpu().double()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    return np.asarray(value)


def rel_error(got: Any, want: Any, *, floor: float = 0.0, norm: str = "fro") -> float:
    """The error of ``got`` relative to the reference ``want``, both taken as float64.

    ``||got - want|| / max(||want||, floor)``; an all-zero reference (and no ``floor``)
    gives the absolute error. A NaN in ``got`` where ``want`` has a number fails at once,
    with a message that says an element was probably never written.

    Args:
        got: the result: an array, a vkumd Tensor (read back) or a torch tensor.
        want: the float64 reference, of the same shape.
        floor: the smallest denominator: judge a result against this scale when the
            reference is tinier (a difference of near-equal values, a subnormal result).
        norm: ``"fro"`` (the Frobenius norm of the whole array) or ``"max"`` (the largest
            absolute element).

    Returns:
        The relative error, a Python float.

    Raises:
        AssertionError: the shapes differ, or ``got`` holds NaN where ``want`` does not.
        ValueError: an unknown ``norm``.
    """
    got64 = np.asarray(_array(got), np.float64)
    want64 = np.asarray(_array(want), np.float64)
    assert got64.shape == want64.shape, f"shape {got64.shape} against {want64.shape}"
    unwritten = np.isnan(got64) & ~np.isnan(want64)
    assert not unwritten.any(), (f"NaN in the result at {int(unwritten.sum())} of "
                                 f"{unwritten.size} elements: an element was never written")
    if norm == "fro":
        size = float(np.linalg.norm(want64))
        diff = float(np.linalg.norm(got64 - want64))
    elif norm == "max":
        size = float(np.abs(want64).max(initial=0.0))
        diff = float(np.abs(got64 - want64).max(initial=0.0))
    else:
        raise ValueError(f"norm must be 'fro' or 'max', not {norm!r}")
    scale = max(size, floor)
    return diff / scale if scale else diff


def stored(values: Any, dtype: str) -> np.ndarray:
    """The float64 values a tensor of ``dtype`` holds for ``values`` (rounded as an upload
    rounds them; integer types truncate toward zero).

    Args:
        values: array-like numbers (float64 is fine: it is what references start from).
        dtype: a vkumd dtype name (``"float32"``, ``"float16"``, ``"bfloat16"``, ...).

    Returns:
        A float64 array of ``values``'s shape.
    """
    kind = dtypes.dtype(dtype)
    array = np.asarray(values, np.float64)
    if kind.is_float:
        if kind is dtypes.bfloat16:
            array = array.astype(np.float32)  # the bfloat16 rounding starts from float32
        with np.errstate(over="ignore"):
            held = dtypes.from_storage(dtypes.to_storage(array, kind), kind)
        return np.asarray(held, np.float64).reshape(np.shape(values))
    with np.errstate(invalid="ignore"):
        return np.trunc(array).astype(kind.numpy).astype(np.float64)


def stored_tensor(ctx: Any, values: Any, dtype: str) -> tuple[Any, np.ndarray]:
    """A tensor of ``values`` in ``dtype`` and the float64 values it holds, read back from
    the device (an upload and a read-back: the stored round trip).

    Args:
        ctx: the :class:`vkumd.Context` to upload into.
        values: array-like numbers; floats are uploaded as float32 and rounded to ``dtype``.
        dtype: a vkumd dtype name.

    Returns:
        ``(tensor, float64 values it holds)``.
    """
    array = np.asarray(values)
    if dtype in _FLOATS:
        array = array.astype(np.float32)
    tensor = ctx.tensor(array, dtype=dtype)
    return tensor, tensor.numpy().astype(np.float64)


def poisoned(ctx: Any, shape: int | tuple[int, ...], dtype: str = "float32") -> Any:
    """An output tensor full of NaN (:data:`SENTINEL` for int32), so an element a kernel
    skips shows in the result instead of passing as a stale zero.

    Args:
        ctx: the :class:`vkumd.Context` to allocate in.
        shape: the tensor's shape.
        dtype: ``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"int32"``.

    Returns:
        The new tensor.
    """
    if dtype == "int32":
        return ctx.tensor(np.full(shape, SENTINEL, np.int32))
    return ctx.tensor(np.full(shape, np.nan, np.float32), dtype=dtype)


def poison(tensor: Any) -> None:
    """Overwrite ``tensor`` with NaN (floats) or ``7`` (integer types) in place.

    Args:
        tensor: a vkumd Tensor whose memory a run will reuse (an arena, an output).
    """
    if tensor.dtype.name in _FLOATS:
        tensor.write(np.full(tensor.shape, np.nan, np.float32))
    else:
        tensor.write(np.full(tensor.shape, 7, np.int32).astype(tensor.dtype.storage))
