"""GGUF's tensor storage types in numpy: block sizes, dequantisation, and a quantiser.

A quantized row of ``K`` values is ``ceil(K / 32)`` blocks of 32 values, little-endian:

- ``Q8_0``: float16 scale ``d``, 32 int8 ``q`` (34 bytes); ``x = d * q``.
- ``Q4_0``: float16 ``d``, 16 bytes of nibbles (18 bytes); ``x = d * (nibble - 8)``.
- ``Q4_1``: float16 ``d``, float16 minimum ``m``, 16 bytes (20 bytes); ``x = d * nibble + m``.

In both 4-bit formats byte ``j`` of a block holds value ``j`` in its low nibble and value
``j + 16`` in its high nibble. A row whose length is not a multiple of 32 ends in a partial
block whose tail is padding (zeros when :func:`quantize` writes it).
"""

from __future__ import annotations

import numpy as np

from vkumd.compiler.kernels.limits import QTYPES as BLOCK_QTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.opset.quantized import dequantize as dequantize_blocks

BLOCK = 32
# qtype -> (values per block, bytes per block); a float type is one value per "block". The
# block formats are the kernels' (compiler/kernels/limits.py).
QTYPES: dict[str, tuple[int, int]] = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
                                      **BLOCK_QTYPES}
FLOAT_QTYPES = ("F32", "F16", "BF16")
# How a float qtype is stored; BF16 is kept as its uint16 bit patterns.
STORAGE = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}


def row_bytes(qtype: str, k: int) -> int:
    """Bytes one row of ``k`` values of ``qtype`` takes (partial last block included).

    Raises:
        VkumdValueError: ``qtype`` is not one of :data:`QTYPES`.
    """
    values, size = _spec(qtype)
    return -(-k // values) * size


def _spec(qtype: str) -> tuple[int, int]:
    spec = QTYPES.get(qtype)
    if spec is None:
        raise VkumdValueError(f"qtype {qtype!r} is not supported; use one of "
                              f"{', '.join(QTYPES)}")
    return spec


def dequantize(raw: np.ndarray, qtype: str, k: int) -> np.ndarray:
    """Float32 values of quantized (or float) rows.

    Args:
        raw: ``uint8 [N, row_bytes(qtype, k)]`` blocks for a ``Q*`` type; for a float type,
            the values ``[N, k]`` in their storage dtype (float32, float16, uint16 bits of
            bfloat16) or any float array.
        qtype: one of :data:`QTYPES`.
        k: values per row (the last block may be partial).

    Returns:
        ``float32 [N, k]``, a new array.

    Raises:
        VkumdValueError: unknown ``qtype``, or ``raw``'s row length does not fit ``k``.
        VkumdTypeError: quantized ``raw`` is not uint8.
    """
    _spec(qtype)
    if qtype in FLOAT_QTYPES:
        arr = np.asarray(raw)
        if qtype == "BF16" and arr.dtype == np.uint16:
            arr = dtypes.bfloat16_bits_to_float32(arr)
        out = np.array(arr, dtype=np.float32, copy=True)
        if out.ndim < 1 or out.shape[-1] != k:
            raise VkumdValueError(f"dequantize: {qtype} rows of {k} values were asked for, "
                                  f"the array has shape {out.shape}")
        return out.reshape(-1, k)
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise VkumdTypeError(f"dequantize: {qtype} blocks must be uint8, not {raw.dtype}")
    expected = row_bytes(qtype, k)
    if raw.ndim != 2 or raw.shape[1] != expected:
        raise VkumdValueError(f"dequantize: {qtype} rows of {k} values take {expected} bytes "
                              f"each ([N, {expected}] uint8), the array has shape {raw.shape}")
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN or inf scale decodes as such
        return dequantize_blocks(raw, qtype, k).astype(np.float32, copy=False)


def quantize(w: np.ndarray, qtype: str) -> np.ndarray:
    """Quantize float rows to ``qtype``'s blocks (for tests and small test models).

    Args:
        w: float values ``[N, K]`` (a 1-D array is one row); finite.
        qtype: one of :data:`QTYPES`.

    Returns:
        For a ``Q*`` type ``uint8 [N, row_bytes(qtype, K)]`` (the last block of a row padded
        with zeros); for a float type the values in its storage dtype (float32, float16, or
        bfloat16's uint16 bits, rounded to nearest even), in ``w``'s shape.

    Raises:
        VkumdValueError: unknown ``qtype``, or ``w`` holds NaN or infinity.
    """
    _spec(qtype)
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise VkumdValueError(f"quantize: the values to store as {qtype} hold NaN or infinity")
    if qtype == "BF16":
        return dtypes.float32_to_bfloat16_bits(w.astype(np.float32))
    if qtype in FLOAT_QTYPES:
        return w.astype(STORAGE[qtype])
    rows = w.reshape(1, -1) if w.ndim == 1 else w.reshape(-1, w.shape[-1])
    n, k = rows.shape
    nb = -(-k // BLOCK)
    padded = np.zeros((n, nb * BLOCK))
    padded[:, :k] = rows
    x = padded.reshape(n, nb, BLOCK)
    if qtype == "Q8_0":
        d = np.abs(x).max(axis=-1, keepdims=True) / 127.0
        q = np.clip(np.round(x / np.where(d == 0, 1.0, d)), -127, 127).astype(np.int8)
        body = [q.view(np.uint8)]
        heads = [d]
    elif qtype == "Q4_0":
        # The scale's sign follows the value of largest magnitude, which maps to nibble 0,
        # so the other end of the range keeps all 16 levels.
        idx = np.abs(x).argmax(axis=-1)[..., None]
        d = np.take_along_axis(x, idx, axis=-1) / -8.0
        q = np.clip(np.floor(x / np.where(d == 0, 1.0, d) + 8.5), 0, 15).astype(np.uint8)
        body = [q[..., :16] | (q[..., 16:] << 4)]
        heads = [d]
    else:
        lo = x.min(axis=-1, keepdims=True)
        d = (x.max(axis=-1, keepdims=True) - lo) / 15.0
        q = np.clip(np.floor((x - lo) / np.where(d == 0, 1.0, d) + 0.5), 0, 15)
        body = [q[..., :16].astype(np.uint8) | (q[..., 16:].astype(np.uint8) << 4)]
        heads = [d, lo]
    parts = [h.astype("<f2").view(np.uint8) for h in heads] + body
    out = np.concatenate(parts, axis=-1)
    return np.ascontiguousarray(out.reshape(n, nb * QTYPES[qtype][1]))


__all__ = ["BLOCK", "FLOAT_QTYPES", "QTYPES", "STORAGE", "dequantize", "quantize", "row_bytes"]
