"""Who runs a vision pipeline's ONNX files: vkumd on a device, or onnxruntime on the CPU.

A backend turns a model file into a callable ``run(x) -> first output``. The pipelines'
pre- and post-processing is the same whichever backend runs the networks, which is how the
tests compare vkumd with onnxruntime on the same inputs.

vkumd's backend imports a model once per input shape: vkumd's convolution shape rule takes
a symbolic height or width at stride 1 only, and these networks stride by 2 from their first
layer, so each shape is its own graph. The pipelines pad their inputs to a few sizes
(multiples of 32 for the detector, width buckets for the recogniser) so that few shapes
occur, and the most recently used :data:`MAX_SHAPES` per model are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vkumd.errors import VkumdValueError

Runner = Callable[[np.ndarray], np.ndarray]
# Shapes kept imported per model on vkumd's backend (each holds its graph and recording).
MAX_SHAPES = 8


class Backend(Protocol):
    """What a pipeline asks of a backend."""

    name: str

    def load(self, path: Path) -> Runner:
        """A callable running the model at ``path`` on one float32 input."""
        ...


def read_onnx(path: Path) -> Any:
    """The ``ModelProto`` at ``path`` (weights included).

    Raises:
        VkumdValueError: the onnx package is missing.
    """
    try:
        import onnx
    except ImportError:
        raise VkumdValueError("the vision pipelines read ONNX files: pip install "
                              "vkumd[onnx]") from None
    return onnx.load(str(path))


def metadata(path: Path, key: str) -> str | None:
    """A ``metadata_props`` entry of the model at ``path`` (None when absent)."""
    for prop in read_onnx(path).metadata_props:
        if prop.key == key:
            return str(prop.value)
    return None


class OnnxruntimeBackend:
    """onnxruntime's CPU provider (the reference the tests compare with).

    Args:
        threads: intra-op threads (None: onnxruntime's default).

    Raises:
        VkumdValueError: onnxruntime is not installed.
    """

    name = "onnxruntime"

    def __init__(self, threads: int | None = None) -> None:
        try:
            import onnxruntime
        except ImportError:
            raise VkumdValueError("backend 'onnxruntime' needs onnxruntime: pip install "
                                  "vkumd[onnx]") from None
        self._ort = onnxruntime
        self._threads = threads

    def load(self, path: Path) -> Runner:
        """An onnxruntime session over ``path``, called with one input."""
        options = self._ort.SessionOptions()
        if self._threads is not None:
            options.intra_op_num_threads = self._threads
        session = self._ort.InferenceSession(str(path), options,
                                             providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def run(x: np.ndarray) -> np.ndarray:
            return np.asarray(session.run(None, {name: x})[0])

        return run


class VkumdBackend:
    """vkumd on a device: the model imported per input shape (see the module docs).

    Args:
        ctx: the :class:`~vkumd.Context` (None: one created on first use and closed by
            :meth:`close`).
        device: the device for that context (index or name), when ``ctx`` is None.
    """

    name = "vkumd"
    # Each input shape is an import and a recording (tens of seconds on lavapipe), so the
    # pipelines fill every classifier and recogniser call to the full batch with blank lines.
    pad_batch = True

    def __init__(self, ctx: Any = None, device: Any = None) -> None:
        self._ctx, self._device, self._owned = ctx, device, ctx is None
        self._lock = threading.Lock()

    def context(self) -> Any:
        """The context the models run on (created on first use)."""
        with self._lock:
            if self._ctx is None:
                from vkumd.framework.context import Context

                self._ctx = Context(device=self._device)
            return self._ctx

    def load(self, path: Path) -> Runner:
        """A callable importing ``path`` for each new input shape (bounded cache)."""
        source = read_onnx(path)
        shapes: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        lock = threading.Lock()

        def model_for(shape: tuple[int, ...]) -> Any:
            with lock:
                if shape in shapes:
                    shapes.move_to_end(shape)
                    return shapes[shape]
            from vkumd.framework.frontends.onnx.model import OnnxModel

            model = OnnxModel(with_input_shape(source, shape), ctx=self.context(),
                              name=f"{path.name} at {shape}")
            with lock:
                shapes[shape] = model
                if len(shapes) > MAX_SHAPES:
                    shapes.popitem(last=False)
            return model

        input_name = source.graph.input[0].name

        def run(x: np.ndarray) -> np.ndarray:
            model = model_for(tuple(x.shape))
            return next(iter(model(**{input_name: x}).values()))

        return run

    def close(self) -> None:
        """Close the context if this backend made it (safe to call twice)."""
        with self._lock:
            if self._owned and self._ctx is not None:
                self._ctx.close()
            self._ctx = None


def with_input_shape(model: Any, shape: tuple[int, ...]) -> Any:
    """A copy of ``model`` whose first input has the concrete ``shape`` (the initializers
    shared, not copied)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)  # the protobuf copy; small beside the import that follows
    dims = out.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != len(shape):
        raise VkumdValueError(f"input of rank {len(shape)} for a model whose input has rank "
                              f"{len(dims)}")
    for d, size in zip(dims, shape, strict=True):
        d.Clear()
        d.dim_value = int(size)
    return out


def make_backend(backend: str | Backend, ctx: Any = None, device: Any = None) -> Backend:
    """A backend from its name (``"vkumd"``, ``"onnxruntime"``) or as given.

    Raises:
        VkumdValueError: an unknown name.
    """
    if not isinstance(backend, str):
        return backend
    if backend == "vkumd":
        return VkumdBackend(ctx=ctx, device=device)
    if backend == "onnxruntime":
        return OnnxruntimeBackend()
    raise VkumdValueError(f"backend {backend!r}: choose 'vkumd' or 'onnxruntime' (or pass an "
                          "object with load(path) -> run(x))")
