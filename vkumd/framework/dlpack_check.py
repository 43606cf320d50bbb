"""What vkumd checks of a DLPack producer's tensor before numpy imports it.

A ``DLTensor`` is a raw pointer, a shape and strides that the producer vouches for: the
DLPack contract. Of a wild pointer nothing can be known without reading it, so that stays
the producer's promise (``docs/reliability.md``). A NULL data pointer under a tensor that
holds elements is knowable, and numpy does not refuse it: it allocates uninitialised memory
in its place, so the import returned whatever that memory held. vkumd refuses it.

The capsule is taken from the producer once, read here (the legacy ``"dltensor"`` layout,
the one a producer returns when no ``max_version`` is asked for), and handed to numpy
through :class:`_Taken`, so the producer is asked only once, as numpy alone would ask it.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

from vkumd.errors import VkumdValueError

_LEGACY_NAME = b"dltensor"


class DLDevice(ctypes.Structure):
    """dlpack.h's DLDevice: the device type and id of a tensor's memory."""

    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    """dlpack.h's DLDataType: type code, bits per lane and lanes."""

    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    """dlpack.h's DLTensor, the first member of the legacy DLManagedTensor."""

    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_IS_VALID = ctypes.pythonapi.PyCapsule_IsValid
_IS_VALID.restype = ctypes.c_int
_IS_VALID.argtypes = [ctypes.py_object, ctypes.c_char_p]
_GET_POINTER = ctypes.pythonapi.PyCapsule_GetPointer
_GET_POINTER.restype = ctypes.c_void_p
_GET_POINTER.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Taken:
    """The producer for numpy: its device, and the capsule already taken from it."""

    def __init__(self, source: Any, capsule: Any) -> None:
        self._source = source
        self._capsule = capsule

    def __dlpack_device__(self) -> Any:
        return self._source.__dlpack_device__()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("the DLPack capsule was consumed already")
        return capsule


def checked_producer(source: Any) -> Any:
    """``source`` for ``np.from_dlpack``, once its tensor's data pointer is checked.

    Args:
        source: a DLPack producer (``__dlpack__`` and ``__dlpack_device__``).

    Returns:
        An object numpy imports as it would import ``source``.

    Raises:
        VkumdValueError: the tensor holds elements at a NULL data pointer.
        AttributeError, TypeError, BufferError: as the producer's ``__dlpack__`` raises them
            (the caller words those).
    """
    capsule = source.__dlpack__()
    if _IS_VALID(capsule, _LEGACY_NAME):
        tensor = DLTensor.from_address(_GET_POINTER(capsule, _LEGACY_NAME))
        if not tensor.data and tensor.ndim >= 0:
            count = math.prod(tensor.shape[i] for i in range(tensor.ndim)) if tensor.ndim else 1
            if count != 0:
                raise VkumdValueError(
                    f"from_dlpack(): {type(source).__name__} exports a tensor of {count} "
                    "element(s) at a NULL data pointer; the producer is broken (check how it "
                    "made the tensor). Other pointers are the producer's promise under the "
                    "DLPack contract and cannot be checked")
    return _Taken(source, capsule)
