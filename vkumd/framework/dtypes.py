"""Tensor element types and their conversions to and from numpy."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vkumd.compiler.kernels.type_codes import ELEMENT_TYPES
from vkumd.errors import VkumdTypeError


@dataclass(frozen=True)
class DType:
    """A tensor element type.

    Attributes:
        name: ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"int32"``, ``"int8"``, ``"uint8"``.
        storage: the numpy dtype of the stored bits (``uint16`` for bfloat16).
        numpy: the numpy dtype that :meth:`Tensor.numpy` returns (``float32`` for bfloat16,
            which numpy lacks).
        itemsize: bytes per element.
        code: the type code kernels are compiled with (``"F32"``, ``"BF16"``, ...).
        glsl: the GLSL type kernels use for one element in storage.

    ``itemsize``, ``code`` and ``glsl`` are the kernels' table's
    (:data:`vkumd.compiler.kernels.type_codes.ELEMENT_TYPES`), read once here.
    """

    name: str
    storage: np.dtype
    numpy: np.dtype
    itemsize: int = field(init=False)
    code: str = field(init=False)
    glsl: str = field(init=False)

    def __post_init__(self) -> None:
        kernel_type = ELEMENT_TYPES[self.name]
        object.__setattr__(self, "itemsize", kernel_type.itemsize)
        object.__setattr__(self, "code", kernel_type.code)
        object.__setattr__(self, "glsl", kernel_type.glsl)

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        """Whether the type holds floating-point values."""
        return self.name in ("float32", "float16", "bfloat16")


float32 = DType("float32", np.dtype(np.float32), np.dtype(np.float32))
float16 = DType("float16", np.dtype(np.float16), np.dtype(np.float16))
bfloat16 = DType("bfloat16", np.dtype(np.uint16), np.dtype(np.float32))
int32 = DType("int32", np.dtype(np.int32), np.dtype(np.int32))
int8 = DType("int8", np.dtype(np.int8), np.dtype(np.int8))
uint8 = DType("uint8", np.dtype(np.uint8), np.dtype(np.uint8))

ALL: tuple[DType, ...] = (float32, float16, bfloat16, int32, int8, uint8)
_BY_NAME = {d.name: d for d in ALL}
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float16): float16,
               np.dtype(np.int32): int32, np.dtype(np.int8): int8, np.dtype(np.uint8): uint8}


def dtype(value: object) -> DType:
    """Resolve a :class:`DType`, a name, or a numpy dtype to a :class:`DType`.

    Raises:
        VkumdTypeError: the type is not one vkumd stores.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        as_numpy = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        as_numpy = None
    if as_numpy is not None and as_numpy in _FROM_NUMPY:
        return _FROM_NUMPY[as_numpy]
    names = ", ".join(_BY_NAME)
    raise VkumdTypeError(f"dtype {value!r} is not supported; use one of: {names}")


def from_array(array: np.ndarray, requested: object | None) -> DType:
    """Choose the tensor dtype for ``array``; conversions that lose data must be asked for.

    float64 and int64 (numpy's defaults) need ``dtype=``; complex, object, bool and string
    arrays are refused.
    """
    kind = array.dtype.kind
    if kind in "cOSUVMmb" and requested is None:
        raise VkumdTypeError(f"arrays of {array.dtype} cannot become tensors; convert to a "
                             "numeric type first (e.g. array.astype(np.float32))")
    if kind in "cOSUVMm":
        raise VkumdTypeError(f"arrays of {array.dtype} cannot be converted to a tensor")
    if requested is not None:
        return dtype(requested)
    if array.dtype in _FROM_NUMPY:
        return _FROM_NUMPY[array.dtype]
    raise VkumdTypeError(
        f"arrays of {array.dtype} are not converted silently; pass dtype= to choose the tensor "
        f"type (e.g. ctx.tensor(a, dtype='float32')) or convert first")


def float32_to_bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest, ties to even) and return the uint16 bits."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = np.isnan(values)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    # Keep NaN a NaN: rounding could carry a NaN payload into infinity.
    rounded[nan] = np.uint16(0x7FC0)
    return rounded


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_storage(array: np.ndarray, target: DType) -> np.ndarray:
    """Convert ``array`` to contiguous storage bits of ``target``."""
    if target is bfloat16:
        return float32_to_bfloat16_bits(np.asarray(array, dtype=np.float32))
    return np.ascontiguousarray(array, dtype=target.storage)


def from_storage(bits: np.ndarray, source: DType) -> np.ndarray:
    """Turn storage bits of ``source`` into the numpy array users see."""
    if source is bfloat16:
        return bfloat16_bits_to_float32(bits)
    return bits
