"""``vkumd.Context``: the object programs hold, with tensor factories on top of the runtime."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.errors import (
    CapabilityMissing,
    CaptureError,
    VkumdError,
    VkumdTypeError,
    VkumdValueError,
)
from vkumd.framework import dtypes
from vkumd.framework.dlpack_check import checked_producer
from vkumd.framework.opset import unary
from vkumd.framework.strided import contiguous_operands
from vkumd.framework.tensor import Tensor, normalize_shape
from vkumd.runtime.context import RuntimeContext


class Context(RuntimeContext):
    """A device, its memory pool and its work; use it as a context manager or call ``close()``.

    Args:
        device: an index into :func:`vkumd.devices`, a substring of a device name, or ``None``
            for the default choice (discrete GPU, then integrated, virtual, CPU).
        validation: enable the Khronos validation layer; ``None`` reads ``VKUMD_VALIDATION``.
        zero_memory: zero-fill every allocation so no tensor can show an earlier tensor's
            data; ``None`` reads ``VKUMD_ZERO_MEMORY``.
        block_size: bytes per pooled memory block (default 64 MiB).
        memory_limit: cap on pooled bytes; ``None`` reads ``VKUMD_MEMORY_LIMIT``.
        device_only_memory: keep tensors in memory the host never maps, as on a discrete GPU
            (host reads and writes go through staging copies); ``None`` reads
            ``VKUMD_DEVICE_ONLY_MEMORY``.

    Raises:
        VkumdTypeError: a switch (validation, zero_memory, push_descriptors,
            device_only_memory) that is not a bool or None, a ``block_size`` that is not an
            int, a ``device`` that is neither an int nor a string, a bad ``memory_limit``.
        VkumdValueError: a ``block_size`` under 1 MiB, a negative or unreadable limit, a bad
            ``VKUMD_*`` variable.
        DeviceUnavailable: no device matches ``device``.

    Example::

        with vkumd.Context() as ctx:
            t = ctx.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
            print(t.numpy())
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Kernels bind contiguous memory: a strided view among a launch's operands is copied
        # first (vkumd.framework.strided), in the one place every op's launches pass.
        self.run = contiguous_operands(self.run)

    def _new_tensor(self, shape: tuple[int, ...], dtype: dtypes.DType, zero: bool) -> Tensor:
        self.check_open("creating a tensor")
        # Python ints: numpy's int64 product wraps, and (2**32, 2**32) became 0 bytes.
        nbytes = dtype.nbytes(math.prod(shape))
        limit = self.caps.max_storage_buffer_range
        if nbytes > limit:
            raise VkumdValueError(
                f"a tensor of shape {shape} and dtype {dtype.name} needs {nbytes} bytes, more "
                f"than this device binds in one buffer (maxStorageBufferRange = {limit} bytes); "
                "split it into smaller tensors")
        allocation = self.allocate(nbytes, zero=zero) if nbytes else None
        return Tensor(self, shape, dtype, allocation)

    def empty(self, shape: Any, dtype: Any = "float32") -> Tensor:
        """A tensor with uninitialised contents, as ``numpy.empty`` (zeroed with zero_memory)."""
        return self._new_tensor(normalize_shape(shape), dtypes.dtype(dtype), zero=False)

    def zeros(self, shape: Any, dtype: Any = "float32") -> Tensor:
        """A tensor filled with zeros.

        Inside ``ctx.capture()`` the zero fill is recorded into the graph, so every replay
        starts from zeros (a fill at capture time would let replays accumulate).

        Raises:
            CaptureError: inside a capture, for a dtype the fill kernel does not take (int8,
                uint8) or the device cannot store; create that tensor before the capture.
        """
        dims, dt = normalize_shape(shape), dtypes.dtype(dtype)
        if not self.capturing:
            return self._new_tensor(dims, dt, zero=True)
        result = self._new_tensor(dims, dt, zero=False)
        try:
            return unary.fill(result, 0)
        except (VkumdTypeError, CapabilityMissing) as exc:
            result.release()
            raise CaptureError(f"ctx.zeros(dtype={dt.name}) inside ctx.capture(): its zero fill "
                               f"cannot be recorded into the graph ({exc}); create the tensor "
                               "before the capture") from exc
        except BaseException:
            result.release()
            raise

    def tensor(self, array: Any, dtype: Any = None) -> Tensor:
        """Copy ``array`` (anything numpy accepts) to a new tensor.

        Args:
            array: the data; non-contiguous arrays are copied into row-major order.
            dtype: the tensor type. Needed for float64/int64 input, which is never narrowed
                silently; float32 input with ``dtype="bfloat16"`` is rounded to nearest even.
                An integer type takes only whole values within its range (nothing wraps).

        The conversion rule is :func:`vkumd.framework.dtypes.host_array`, the one compiled
        calls, the ONNX runner and the torch bridge apply to their inputs.

        Raises:
            VkumdTypeError: complex, object, string or bool data, or float64 without ``dtype``.
            VkumdValueError: the tensor would exceed ``maxStorageBufferRange``; values an
                integer ``dtype`` does not hold (out of range, fractional, NaN).
        """
        source, target = dtypes.host_array(array, dtype=dtype)
        result = self._new_tensor(source.shape, target, zero=False)
        try:
            result.write(source)
        except BaseException:
            result.release()
            raise
        return result

    def __enter__(self) -> Context:
        return self


def from_dlpack(source: Any, context: Context, dtype: Any = None) -> Tensor:
    """Import any DLPack producer that lives in host memory (numpy, PyTorch CPU, …).

    The data is copied into a new tensor of ``context``; a vkumd tensor of the same context
    is returned as it is.

    Raises:
        VkumdTypeError: ``source`` is not a host DLPack producer, or ``context`` is not a
            Context; as :meth:`Context.tensor` for its data.
        VkumdValueError: the producer's tensor holds elements at a NULL data pointer (other
            pointers are the producer's promise: :mod:`vkumd.framework.dlpack_check`).
    """
    if not isinstance(context, Context):
        raise VkumdTypeError(f"from_dlpack(source, context): context must be a vkumd.Context, "
                             f"not {type(context).__name__}")
    if isinstance(source, Tensor) and source.context is context and dtype is None:
        return source
    try:
        array = np.from_dlpack(checked_producer(source))
    except VkumdError:
        raise
    except (TypeError, AttributeError, BufferError, RuntimeError, ValueError) as exc:
        raise VkumdTypeError(f"from_dlpack(): {type(source).__name__} is not a DLPack producer "
                             f"numpy can import ({exc}); pass a host array or tensor") from None
    return context.tensor(array, dtype=dtype)
