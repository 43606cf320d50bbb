"""Tensor element types and their conversions to and from numpy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vkumd.compiler.kernels.type_codes import ELEMENT_TYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.float8 import FORMATS, float8_bits_to_float32, float32_to_float8_bits
from vkumd.framework.packed import FORMATS as PACKED_FORMATS
from vkumd.framework.packed import (
    ML_DTYPES_NAMES,
    codes_to_values,
    pack,
    packed_nbytes,
    to_codes,
    unpack,
)


@dataclass(frozen=True)
class DType:
    """A tensor element type.

    Attributes:
        name: ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"int32"``, ``"int8"``, ``"uint8"``,
            ``"int16"``, ``"uint16"``, ``"uint32"``, ``"uint64"``, ``"float64"``, ``"int64"``,
            ``"bool"`` (a float8 or packed format's name too).
        storage: the numpy dtype of the stored bits (``uint16`` for bfloat16).
        numpy: the numpy dtype that :meth:`Tensor.numpy` returns (``float32`` for bfloat16,
            which numpy lacks).
        itemsize: bytes per element.
        code: the type code kernels are compiled with (``"F32"``, ``"BF16"``, ...).
        glsl: the GLSL type kernels use for one element in storage.
        bits: bits per element (less than a byte for the packed types, several to a byte).

    ``itemsize``, ``code`` and ``glsl`` are the kernels' table's
    (:data:`vkumd.compiler.kernels.type_codes.ELEMENT_TYPES`), read once here.
    """

    name: str
    storage: np.dtype
    numpy: np.dtype
    itemsize: int = field(init=False)
    code: str = field(init=False)
    glsl: str = field(init=False)
    bits: int = field(init=False)

    def __post_init__(self) -> None:
        kernel_type = ELEMENT_TYPES[self.name]
        object.__setattr__(self, "itemsize", kernel_type.itemsize)
        object.__setattr__(self, "code", kernel_type.code)
        object.__setattr__(self, "glsl", kernel_type.glsl)
        object.__setattr__(self, "bits", kernel_type.bits or 8 * kernel_type.itemsize)

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        """Whether the type holds floating-point values."""
        return self.name in ("float32", "float16", "bfloat16", "float64") or self.is_float8

    @property
    def is_float8(self) -> bool:
        """Whether the type is one of the float8 formats (stored as its byte, read back as
        float32; only casts compute on it)."""
        return self.name in FORMATS

    @property
    def is_packed(self) -> bool:
        """Whether the type is a packed one (int4, uint4, int2, uint2, float4_e2m1,
        float8_e8m0: vkumd/framework/packed.py), which only casts and quantization read."""
        return self.name in PACKED_FORMATS

    def nbytes(self, count: int) -> int:
        """Bytes that ``count`` elements take (packed types: ``ceil(count * bits / 8)``)."""
        return packed_nbytes(count, self.bits) if self.is_packed else count * self.itemsize


float32 = DType("float32", np.dtype(np.float32), np.dtype(np.float32))
float16 = DType("float16", np.dtype(np.float16), np.dtype(np.float16))
bfloat16 = DType("bfloat16", np.dtype(np.uint16), np.dtype(np.float32))
int32 = DType("int32", np.dtype(np.int32), np.dtype(np.int32))
int8 = DType("int8", np.dtype(np.int8), np.dtype(np.int8))
uint8 = DType("uint8", np.dtype(np.uint8), np.dtype(np.uint8))
# The wider and unsigned integers and float64: stored as numpy stores them.
int16 = DType("int16", np.dtype(np.int16), np.dtype(np.int16))
uint16 = DType("uint16", np.dtype(np.uint16), np.dtype(np.uint16))
uint32 = DType("uint32", np.dtype(np.uint32), np.dtype(np.uint32))
uint64 = DType("uint64", np.dtype(np.uint64), np.dtype(np.uint64))
float64 = DType("float64", np.dtype(np.float64), np.dtype(np.float64))
WIDE: tuple[DType, ...] = (int16, uint16, uint32, uint64, float64)
# int64, as numpy stores it: numpy's and torch's default integer, so an int64 array becomes
# an int64 tensor as torch.tensor(np.arange(5)) does (computed natively or in two 32-bit
# words: DeviceCaps.int64_arithmetic).
int64 = DType("int64", np.dtype(np.int64), np.dtype(np.int64))

# The float8 formats: a byte of bits each, float32 to numpy (vkumd/framework/float8.py).
float8_e4m3fn = DType("float8_e4m3fn", np.dtype(np.uint8), np.dtype(np.float32))
float8_e4m3fnuz = DType("float8_e4m3fnuz", np.dtype(np.uint8), np.dtype(np.float32))
float8_e5m2 = DType("float8_e5m2", np.dtype(np.uint8), np.dtype(np.float32))
float8_e5m2fnuz = DType("float8_e5m2fnuz", np.dtype(np.uint8), np.dtype(np.float32))
FLOAT8: tuple[DType, ...] = (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz)
# bool: a byte of 0 or 1, numpy's bool to and from the host (comparisons give it).
bool_ = DType("bool", np.dtype(np.bool_), np.dtype(np.bool_))

ALL: tuple[DType, ...] = (float32, float16, bfloat16, int32, int8, uint8, *WIDE, *FLOAT8, int64,
                          bool_)
# The packed types: bytes of several elements (float8_e8m0 one), unpacked to numpy as int8,
# uint8 or float32 (vkumd/framework/packed.py).
PACKED: tuple[DType, ...] = tuple(DType(name, np.dtype(np.uint8), fmt.numpy)
                                  for name, fmt in PACKED_FORMATS.items())
ALL += PACKED
_BY_NAME = {d.name: d for d in ALL}
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float16): float16,
               np.dtype(np.int32): int32, np.dtype(np.int8): int8, np.dtype(np.uint8): uint8}
_FROM_NUMPY.update({d.storage: d for d in WIDE})
_FROM_NUMPY[int64.storage] = int64
_FROM_NUMPY[np.dtype(np.bool_)] = bool_
# numpy's default float: an array of it becomes a tensor only when asked for (dtype=), so
# that np.random.rand(...) does not silently make 8-byte tensors.
_ASKED_ONLY = (np.dtype(np.float64),)


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


_resolve = dtype  # host_array's keyword hides the function's name


def as_array(data: Any, what: str) -> np.ndarray:
    """``np.asarray(data)``, with numpy's refusal of ragged or unreadable data made a vkumd error.

    Raises:
        VkumdValueError: numpy cannot make one rectangular array of ``data``.
    """
    try:
        return np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise VkumdValueError(f"{what}: the data is not a rectangular array ({exc})") from None


# Kinds no tensor type holds: complex, object, bytes, str, void, datetime, timedelta.
_UNSTORABLE = "cOSUVMm"
# The integer types' ranges, checked before any integer array is stored: numpy's astype would
# wrap an int64 id of 2**33 + 1 to 1 and truncate a float id of 1.7 to 1 without a word.
INT_RANGES = {"int32": (-2**31, 2**31 - 1), "int8": (-128, 127), "uint8": (0, 255),
              "int16": (-2**15, 2**15 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
              "uint64": (0, 2**64 - 1), "int64": (-2**63, 2**63 - 1)}
INT_RANGES.update({n: (f.low, f.high) for n, f in PACKED_FORMATS.items() if f.is_int})


def host_array(data: Any, *, dtype: object | None = None, expected: DType | None = None,
               what: str = "ctx.tensor()") -> tuple[np.ndarray, DType]:
    """The one rule by which host data becomes tensor contents.

    ``ctx.tensor``, ``Tensor.write``, compiled calls, the ONNX runner and the torch bridge
    all convert through here, so they refuse the same data with the same words. Nothing is
    narrowed silently:

    - complex, object, string and datetime arrays are refused;
    - with ``expected`` (the type a graph input declares), the array must already hold that
      type (float32 for bfloat16, which numpy lacks), or be an integer array for an integer
      input whose values all fit: float64, bool or float ids are refused, an id outside
      int32 is refused rather than wrapped;
    - with ``dtype`` (the caller asking for a type), floats round to the float type asked
      for; an integer type takes only whole values within its range;
    - with ``dtype="bool"``, nonzero values (NaN included) become True, as numpy's astype;
    - with neither, the array's own type must be one vkumd stores: an int64 array becomes
      an int64 tensor and a bool array a bool tensor (as ``torch.tensor`` makes them: vkumd
      stores both exactly); float64 (numpy's default float, which would silently make
      8-byte tensors of ``np.random.rand``) needs ``dtype=``.

    Args:
        data: anything numpy makes an array of.
        dtype: the tensor type the caller asks for (``ctx.tensor(..., dtype=)``).
        expected: the type the receiving input declares.
        what: how to name the data in errors (``"ctx.tensor()"``, ``"input 'ids'"``).

    Returns:
        The array (not yet converted to storage) and the tensor type it becomes.

    Raises:
        VkumdTypeError: data of a type no tensor holds, or one that would be narrowed
            silently.
        VkumdValueError: ragged data; integer values outside the target type's range, or
            (asked for an integer type) fractional or non-finite values.
    """
    array = data if type(data) is np.ndarray else as_array(data, what)
    source = array.dtype
    if source.name in FORMATS:  # ml_dtypes' float8 arrays: widened exactly, stored back
        own = _BY_NAME[source.name]
        array, source = array.astype(np.float32), _F32
        if expected is None and dtype is None:
            return array, own
    if source.name in ML_DTYPES_NAMES:  # ml_dtypes' packed types: unpacked, stored back
        own = _BY_NAME[ML_DTYPES_NAMES[source.name]]
        array = array.astype(own.numpy)
        source = array.dtype
        if expected is None and dtype is None:
            return array, own
    if expected is not None:
        if stored_exactly(source, expected):
            return array, expected
        if source.kind in "iu" and expected.name in INT_RANGES:
            _check_range(array, expected, what)
            return array, expected
        _refuse(array, what, f"the graph takes {expected.name}; convert first (e.g. "
                             f"a.astype(np.{expected.numpy}))")
    kind = source.kind
    if kind in _UNSTORABLE:
        _refuse(array, what, "convert to a numeric type first (e.g. a.astype(np.float32))")
    if dtype is None:
        if source in _FROM_NUMPY and source not in _ASKED_ONLY:
            return array, _FROM_NUMPY[source]
        _refuse(array, what, "pass dtype= to choose the tensor type (e.g. ctx.tensor(a, "
                             "dtype='float32')) or convert first")
    target = _resolve(dtype)
    if target.name in INT_RANGES and kind != "b":
        if kind == "f" and not np.array_equal(array, np.trunc(array)):
            raise VkumdValueError(f"{what}: {target.name} holds whole numbers; the data has "
                                  "fractional, infinite or NaN values (round it first, e.g. "
                                  "np.rint(a))")
        _check_range(array, target, what)
    return array, target


_F32 = np.dtype(np.float32)


def stored_exactly(source: Any, expected: DType) -> bool:
    """Whether data of numpy dtype ``source`` is what ``expected`` stores, as it is (float32
    for bfloat16, which numpy lacks): :func:`host_array`'s first test, for a caller that has
    only an array-like's ``dtype`` and would rather not materialise it yet."""
    if source is None:  # np.dtype(None) is float64
        return False
    try:
        numpy_type = np.dtype(source)
    except TypeError:
        return False
    return _FROM_NUMPY.get(numpy_type) is expected or (numpy_type == _F32 and
                                                       expected.storage != expected.numpy)


def _refuse(array: np.ndarray, what: str, advice: str) -> None:
    if array.dtype.kind in _UNSTORABLE:
        raise VkumdTypeError(f"{what}: arrays of {array.dtype} cannot become tensors (they "
                             f"cannot be converted to any tensor type); {advice}")
    raise VkumdTypeError(f"{what}: arrays of {array.dtype} are not converted silently; "
                         f"{advice}")


def _check_range(array: np.ndarray, target: DType, what: str) -> None:
    low, high = INT_RANGES[target.name]
    if not array.size or np.can_cast(array.dtype, target.storage, "safe"):
        return
    # Floats compare as floats (an infinity has no int); Python compares them with the
    # integer bounds exactly.
    as_number = float if array.dtype.kind == "f" else int
    if as_number(array.min()) < low or as_number(array.max()) > high:
        raise VkumdValueError(f"{what}: values from {array.min()} to {array.max()} do not fit "
                              f"in {target.name} ({low} to {high}); they are refused rather "
                              "than wrapped; check "
                              "the data")


def mismatch(what: str, got: DType, expected: DType) -> VkumdTypeError:
    """The refusal of a tensor of type ``got`` where ``expected`` is declared (worded as
    :func:`host_array`'s refusals)."""
    return VkumdTypeError(f"{what} is {got.name}; the graph takes {expected.name}: tensors are "
                          "not converted silently either; convert first (ops.cast)")


def from_array(array: np.ndarray, requested: object | None, what: str = "ctx.tensor()"
               ) -> DType:
    """Choose the tensor dtype for ``array``; conversions that lose data must be asked for
    (:func:`host_array`'s rule).

    float64 (numpy's default float) needs ``dtype=``; int64 arrays become int64 tensors and
    bool arrays bool tensors; complex, object and string arrays are refused.
    """
    return host_array(array, dtype=requested, what=what)[1]


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
    """Convert ``array`` to contiguous storage bits of ``target`` (the packed types: their
    bytes, ``target.nbytes(array.size)`` of them)."""
    if target.is_packed:
        fmt = PACKED_FORMATS[target.name]
        return pack(to_codes(array, fmt), fmt.bits)
    if target is bfloat16:
        return float32_to_bfloat16_bits(np.asarray(array, dtype=np.float32))
    if target.is_float8:
        # As numpy's astype would (ml_dtypes'): past the range is infinity or NaN, not clamped.
        return float32_to_float8_bits(np.asarray(array, dtype=np.float32), FORMATS[target.name],
                                      saturate=False)
    return np.ascontiguousarray(array, dtype=target.storage)


def from_storage(bits: np.ndarray, source: DType, shape: tuple[int, ...] | None = None
                 ) -> np.ndarray:
    """Turn storage bits of ``source`` into the numpy array users see (the packed types:
    ``bits`` are the bytes, unpacked to ``shape``)."""
    if source.is_packed:
        fmt = PACKED_FORMATS[source.name]
        count = int(np.prod(shape)) if shape is not None else bits.size * 8 // fmt.bits
        return codes_to_values(unpack(bits, fmt.bits, count), fmt).reshape(
            shape if shape is not None else (count,))
    if source is bfloat16:
        return bfloat16_bits_to_float32(bits)
    if source.is_float8:
        return float8_bits_to_float32(bits, FORMATS[source.name])
    return bits
