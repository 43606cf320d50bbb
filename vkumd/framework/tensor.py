"""``Tensor``: a shaped, typed range of device memory."""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.dtypes import DType, as_array
from vkumd.framework.strided import (
    check_span,
    contiguous_strides,
    copy_into,
    is_row_major,
    launch_copy,
)
from vkumd.framework.tensor_methods import EagerMethods
from vkumd.framework.tensor_views import ViewMethods
from vkumd.runtime.memory import Allocation
from vkumd.vk.handle import Handle

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext

# DLPack device codes (dlpack.h): host memory, and Vulkan device memory.
DLPACK_CPU = 1
DLPACK_VULKAN = 7


def normalize_shape(shape: Any) -> tuple[int, ...]:
    """Turn an int or a sequence of ints into a shape tuple; refuse negatives and non-ints."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise VkumdTypeError(f"shape {shape!r} is not a sequence of ints") from None
    if any(not isinstance(d, (int, np.integer)) or isinstance(d, bool) for d in shape):
        raise VkumdTypeError(f"shape {shape!r} must hold ints")
    if any(d < 0 for d in dims):
        raise VkumdValueError(f"shape {dims} has a negative dimension")
    return dims


# Guards every count below: tensors die in whatever thread the garbage collector runs in, and
# two threads may view one tensor at once. Re-entrant: a collection that starts while the lock
# is held may release a tensor on the same thread.
_SHARING = threading.RLock()


class _SharedMemory:
    """How many live tensors view one allocation; the last one to go frees it."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 1

    def leave(self) -> bool:
        """Drop one tensor; return whether it was the last."""
        with _SHARING:
            self.count -= 1
            return self.count == 0


class Tensor(EagerMethods, ViewMethods, Handle):
    """A strided array in device memory: ``shape``, element strides and an element offset
    over an allocation, as a PyTorch tensor over its storage.

    Create tensors through a context (``ctx.tensor``, ``ctx.empty``, ``ctx.zeros``); the memory
    returns to the context's pool when the tensor is released or garbage-collected. Several
    tensors may view one allocation (:meth:`as_strided`, behind ``reshape``/``view``,
    ``transpose``/``permute``/``.T``, ``expand``, ``t[...]``, ``narrow``, ``diagonal``): the
    memory returns to the pool once every one of them is released, in any order. A view that
    is not contiguous from its allocation's start is copied (one strided-copy launch) before
    a kernel reads it, except by the binary kernel on CPU drivers, which reads it in place;
    see :mod:`vkumd.framework.strided`.

    Operators and methods (``+``, ``@``, ``reshape``, ``t[1:3]``, ``sum`` …) come from
    :class:`~vkumd.framework.graph.methods.TensorMethods` (shared with the tracer's tensor)
    through :class:`~vkumd.framework.tensor_methods.EagerMethods`; each is a call into
    :mod:`vkumd.framework.ops`.

    Attributes:
        shape: dimensions, row-major.
        dtype: the :class:`~vkumd.framework.dtypes.DType`.
        context: the owning context.
    """

    def __init__(self, context: RuntimeContext, shape: tuple[int, ...], dtype: DType,
                 allocation: Allocation | None, strides: tuple[int, ...] | None = None,
                 offset: int = 0, capacity: int | None = None) -> None:
        super().__init__()
        self.context = context
        self.shape = shape
        self.dtype = dtype
        self.allocation = allocation
        # Shapes never change, so the sizes ops read on every call are worked out once.
        self.size = math.prod(shape)
        """Number of elements."""
        self.nbytes = dtype.nbytes(self.size)
        """Bytes of the elements (a view's, not its storage's)."""
        # None: row-major (worked out when asked: most tensors are never asked).
        self._strides = strides
        self.element_offset = offset
        """The first element's index in the allocation, as ``storage_offset()`` (read-only)."""
        self.capacity = self.size if capacity is None else capacity
        """Elements of the allocation this tensor views (read-only)."""
        self._row_major = strides is None or is_row_major(shape, strides)
        # A zero-size tensor owns no memory; `handle` still marks it alive.
        self.handle = allocation if allocation is not None else False
        # Every launch binds it, so the binding is made once; a plain attribute, not a
        # property, because ops read it for each operand of each launch (0.08 us a read).
        self.binding: tuple[Any, int, int] | None = (
            (allocation.buffer, allocation.offset, self.nbytes)
            if allocation is not None and self.size and self._row_major and offset == 0
            else None)
        """The ``(VkBuffer, offset, range)`` a kernel binds for this tensor (read-only); None
        when it is empty (a zero-size tensor owns no memory), released, or a view that is
        not contiguous from its allocation's start (ops copy such a view first: see
        :mod:`vkumd.framework.strided`)."""
        # None while this is the allocation's only tensor (the common case costs nothing).
        self._shared: _SharedMemory | None = None

    # numpy ufuncs and numpy scalars defer to our reflected operators (`np.float32(2) * t`
    # is a device scale) instead of silently copying the tensor to the host.
    __array_ufunc__ = None

    def alias(self, shape: tuple[int, ...]) -> Tensor:
        """A new tensor of ``shape`` over this tensor's memory, without a copy when this one
        is contiguous (a copy in new memory otherwise, as ``torch.reshape``).

        Writes through either are seen by the other, and work on both is ordered (hazard
        tracking keys memory by its allocation, which they share). The memory is freed once
        every tensor viewing it is released, in whatever order.

        Args:
            shape: a shape with exactly as many elements (already normalized).

        Returns:
            The view, of this tensor's dtype and context.

        Raises:
            VkumdValueError: the element counts differ, or the tensor was released.
        """
        self._live_allocation("Tensor.alias()")
        if math.prod(shape) != self.size:
            raise VkumdValueError(f"cannot view a tensor of shape {self.shape} ({self.size} "
                                  f"elements) as shape {shape} ({math.prod(shape)} elements)")
        if not self._row_major:
            return self.copied().alias(shape)
        return self.as_strided(shape, contiguous_strides(shape), self.element_offset)

    def as_strided(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                   dtype: DType | None = None) -> Tensor:
        """A view of ``shape`` with element ``strides`` from element ``offset`` of this
        tensor's allocation, as ``torch.as_strided`` (no copy, no launch); with ``dtype`` (of
        this dtype's width: :func:`vkumd.framework.opset.bitcast.bitcast` checks) its bits
        read as that type.

        Raises:
            VkumdValueError: the view reaches outside the allocation, or the tensor was
                released.
        """
        allocation = self._live_allocation("Tensor.as_strided()")
        shape, strides, offset = tuple(shape), tuple(strides), int(offset)
        check_span("Tensor.as_strided()", shape, strides, offset, self.capacity)
        packed = self.dtype.is_packed or (dtype is not None and dtype.is_packed)
        if packed and (offset or not is_row_major(shape, strides)):
            raise VkumdTypeError(f"Tensor.as_strided(): {self.dtype.name} packs several "
                                 "elements to a byte, so only whole, row-major views of it "
                                 "exist (reshape); cast to int8, uint8 or float32 first to "
                                 "slice, transpose or broadcast it")
        view = Tensor(self.context, shape, self.dtype if dtype is None else dtype,
                      allocation if math.prod(shape) else None, strides, offset, self.capacity)
        if view.allocation is not None:
            with _SHARING:
                if self._shared is None:
                    self._shared = _SharedMemory()
                self._shared.count += 1
                view._shared = self._shared
        return view

    def copied(self) -> Tensor:
        """A contiguous copy of this tensor in new memory, starting at its allocation's
        first element, so kernels bind it (one strided-copy launch)."""
        allocation = self._live_allocation("Tensor.copied()")
        result = self.context.empty(self.shape, self.dtype)
        if allocation is not None and self.size:
            try:
                launch_copy(self, result)
            except BaseException:
                result.release()
                raise
        return result

    @property
    def element_strides(self) -> tuple[int, ...]:
        """Element strides, as ``torch.Tensor.stride()``."""
        strides = self._strides
        return contiguous_strides(self.shape) if strides is None else strides

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def address(self) -> int:
        """The device address of the first element (for kernels that read through
        ``buffer_reference`` pointers); 0 when the tensor is empty or released."""
        allocation = self.allocation
        return allocation.device_address if allocation is not None else 0

    def _live_allocation(self, what: str) -> Allocation | None:
        self.context.check_open(what)
        if self.released:
            raise VkumdValueError(f"{what}: the tensor was released")
        return self.allocation

    def numpy(self) -> np.ndarray:
        """Copy the tensor to a new numpy array (bfloat16 comes back as float32)."""
        allocation = self._live_allocation("Tensor.numpy()")
        if allocation is not None and self.binding is None:
            # A strided view: its elements gathered on the device (one launch), then read.
            return self.copied().numpy()
        self.context.before_host_access(self, "Tensor.numpy()")
        packed = self.dtype.is_packed
        bits = np.empty((self.nbytes,) if packed else self.shape, dtype=self.dtype.storage)
        if allocation is not None:
            self.context.transfers.download(allocation, memoryview(bits).cast("B"))
        return dtypes.from_storage(bits, self.dtype, self.shape if packed else None)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def write(self, array: Any, *, stream: Any = None) -> None:
        """Overwrite the tensor's contents with ``array`` (same shape; converted to the dtype).

        Args:
            array: the new contents.
            stream: for memory the host cannot map, copy through staging memory on this
                stream (a transfer stream overlaps the copy with compute) and return without
                waiting; order later work after it with ``stream.record()`` and
                ``other.wait(event)``. Memory the host maps is written directly, after the
                work that uses the tensor has finished.
        """
        allocation = self._live_allocation("Tensor.write()")
        source = as_array(array, "Tensor.write()")
        if source.shape != self.shape:
            raise VkumdValueError(f"cannot write an array of shape {source.shape} into a tensor "
                                  f"of shape {self.shape}")
        dtypes.host_array(source, dtype=self.dtype, what="Tensor.write() cannot write the array")
        if allocation is None:
            return
        if self.binding is None:
            # A strided view: uploaded whole, then scattered into place (one launch).
            if stream is not None:
                raise VkumdValueError("Tensor.write(stream=...): this tensor is a strided "
                                      "view; write it without stream=, or copy_() a tensor "
                                      "uploaded on that stream")
            copy_into("Tensor.write()", self, self.context.tensor(source, dtype=self.dtype))
            return
        bits = dtypes.to_storage(source, self.dtype)
        if stream is not None and getattr(stream, "context", None) is not self.context:
            raise VkumdValueError("Tensor.write(stream=...): the stream belongs to another "
                                  "context (or is not a vkumd stream); pass a stream of the "
                                  "tensor's context")
        if stream is not None and not allocation.host_visible:
            self.context.refuse_during_capture("Tensor.write()")
            stream.upload(allocation, memoryview(bits).cast("B"))
            return
        self.context.before_host_access(self, "Tensor.write()")
        self.context.transfers.upload(allocation, memoryview(bits).cast("B"))

    # -- in place, as PyTorch: the result is written into this tensor ----------------------
    # Here, not in EagerMethods: the traced tensor shares every method of that set, and a
    # graph has no in-place update (its ``+=`` falls back to ``+`` and rebinds).
    def _in_place(self, symbol: str, op: str, other: Any, **kwargs: Any) -> Tensor:
        shape = getattr(other, "shape", None)
        if shape is not None and tuple(shape) != self.shape:
            try:
                grown = np.broadcast_shapes(self.shape, tuple(shape)) != self.shape
            except ValueError:
                grown = True
            if grown:
                raise VkumdValueError(
                    f"t {symbol}= x: x of shape {tuple(shape)} does not broadcast into t's "
                    f"shape {self.shape}; an in-place op keeps t's shape and memory (write "
                    f"t = t {symbol} x for a new tensor)")
        if self.binding is None and self.size:
            # A strided view: the result is computed into new memory, then written through
            # the view into the base's memory (one more launch).
            self._live_allocation(f"t {symbol}= x")
            return self.copy_(getattr(self._ops, op)(self, other, **kwargs))
        return getattr(self._ops, op)(self, other, out=self, **kwargs)

    def __iadd__(self, other: Any) -> Tensor:
        """``t += x``: add into ``t``'s own memory, as PyTorch (see
        :mod:`vkumd.framework.tensor_methods` for the rules).

        Raises:
            VkumdValueError: ``x`` would broadcast ``t`` larger; as :func:`vkumd.ops.add`.
        """
        return self._in_place("+", "add", other)

    def __isub__(self, other: Any) -> Tensor:
        """``t -= x``: subtract in place."""
        return self._in_place("-", "sub", other)

    def __imul__(self, other: Any) -> Tensor:
        """``t *= x``: multiply in place."""
        return self._in_place("*", "mul", other)

    def __itruediv__(self, other: Any) -> Tensor:
        """``t /= x``: divide in place."""
        return self._in_place("/", "div", other)

    def __ifloordiv__(self, other: Any) -> Tensor:
        """``t //= x``: floor-divide in place."""
        return self._in_place("//", "div", other, rounding="floor")

    def __imatmul__(self, other: Any) -> Tensor:
        raise VkumdTypeError("t @= x is not supported in place (as in PyTorch): a product "
                             "generally has another shape; write t = t @ x")

    # -- DLPack -------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        """``(kDLCPU, 0)`` for host-visible tensors; device memory is ``(kDLVulkan, index)``.

        Raises:
            ContextClosed: the context was closed.
        """
        self.context.check_open("Tensor.__dlpack_device__()")
        if self.allocation is None or self.allocation.host_visible:
            return (DLPACK_CPU, 0)
        return (DLPACK_VULKAN, self.context.caps.index)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """Export the tensor's memory without a copy (host-visible tensors only).

        The consumer shares the bytes, after the work submitted so far that uses the tensor
        (later device work is not ordered against the consumer's reads). The memory stays
        allocated while the consumer holds the view: after ``release()`` of this tensor it
        is not reused until the view dies, and after ``ctx.close()`` the memory stays mapped
        (and the device open) until the last view dies, so reading the view never touches
        freed memory.

        Raises:
            ContextClosed: the context was closed.
            VkumdValueError: the tensor was released, lives in memory the host cannot map (a
                discrete GPU, or ``device_only_memory``), or is bfloat16 (which numpy cannot
                read).
        """
        return self._host_array("__dlpack__").__dlpack__(**kwargs)

    def _host_array(self, what: str) -> np.ndarray:
        """A numpy array over the tensor's mapped memory that pins it while it lives."""
        allocation = self._live_allocation(what)
        if self.dtype.storage != self.dtype.numpy or self.dtype.is_packed:  # bfloat16, float8
            raise VkumdValueError(f"{what}: {self.dtype.name} tensors cannot be shared with "
                                  "numpy; use .numpy(), which converts to "
                                  f"{self.dtype.numpy}")
        if allocation is None:
            return np.empty(self.shape, dtype=self.dtype.storage)
        count = self.size if self.binding is not None else self.capacity
        if not allocation.host_visible:
            raise VkumdValueError(
                f"{what}: this tensor is in device memory the host cannot map (a discrete GPU, "
                "or device_only_memory / VKUMD_DEVICE_ONLY_MEMORY=1), so it cannot be shared "
                "without a copy; copy it to the host with .numpy() instead")
        self.context.before_host_access(self, what)
        allocation.invalidate()
        flat = np.frombuffer(allocation.host_view(), dtype=self.dtype.storage, count=count)
        # Every view the consumer makes keeps `flat` alive, and `flat` is the one owner of the
        # memoryview over the mapping; when it dies, no view is left.
        self.context.pin_host_view(allocation)
        done = weakref.finalize(flat, self.context.unpin_host_view, allocation)
        done.atexit = False  # at exit the process frees everything; views may outlive this
        if self.binding is not None:
            return flat.reshape(self.shape)
        # A strided view exports its strides (DLPack carries them): the consumer sees the
        # very elements this view does, in the allocation's memory.
        item = self.dtype.storage.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[self.element_offset:], self.shape,
            tuple(s * item for s in self.element_strides), writeable=flat.flags.writeable)

    # -- lifetime -----------------------------------------------------------------------
    def _release(self) -> None:
        allocation = self.allocation
        if allocation is not None:
            self.allocation = None
            self.binding = None
            shared = self._shared
            if shared is None or shared.leave():
                self.context.release_tensor_memory(allocation)

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        layout = ("" if self.binding is not None or self.size == 0 else
                  f" strides={self.element_strides} offset={self.element_offset}")
        return f"<vkumd.Tensor shape={self.shape} dtype={self.dtype.name}{layout}{state}>"

    def __len__(self) -> int:
        if not self.shape:
            raise VkumdTypeError("len() of a 0-d tensor")
        return self.shape[0]
