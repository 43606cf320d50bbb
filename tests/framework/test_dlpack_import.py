"""DLPack import of a producer's raw pointers: a NULL data pointer under elements is refused
(numpy alone allocated uninitialised memory in its place and the import returned whatever it
held); an empty tensor may have one; other pointers are the producer's DLPack promise."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import vkumd
from vkumd.errors import VkumdValueError
from vkumd.framework.dlpack_check import DLDataType, DLDevice, DLTensor

KDLCPU, KDLFLOAT = 1, 2


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class NullProducer:
    """A host producer of float32 ``shape`` whose data pointer is NULL (a broken exporter)."""

    def __init__(self, *shape: int) -> None:
        self.calls = 0
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = None
        t.device = DLDevice(KDLCPU, 0)
        t.ndim = len(shape)
        t.dtype = DLDataType(KDLFLOAT, 32, 1)
        t.shape = self._shape

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDLCPU, 0)

    def __dlpack__(self, **_: Any) -> Any:
        self.calls += 1
        return _capsule(ctypes.addressof(self._managed), b"dltensor", None)


@pytest.mark.parametrize("shape", [(4,), (2, 3), ()])
def test_a_null_data_pointer_under_elements_is_refused(ctx: Any, shape: tuple) -> None:
    with pytest.raises(VkumdValueError, match="NULL data pointer"):
        vkumd.from_dlpack(NullProducer(*shape), ctx)


def test_an_empty_tensor_may_have_a_null_pointer(ctx: Any) -> None:
    producer = NullProducer(0, 3)
    t = vkumd.from_dlpack(producer, ctx)
    assert t.shape == (0, 3) and producer.calls == 1


def test_real_producers_still_import(ctx: Any) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(vkumd.from_dlpack(a, ctx).numpy(), a)
    t = ctx.tensor(a)
    np.testing.assert_array_equal(vkumd.from_dlpack(t, ctx, dtype="float16").numpy(), a)
