"""Who runs a vision pipeline's ONNX files: vkumd on a device, or onnxruntime on the CPU.

A backend turns a model file into a callable ``run(x) -> first output``. The pipelines'
pre- and post-processing is the same whichever backend runs the networks, which is how the
tests compare vkumd with onnxruntime on the same inputs.

vkumd's backend imports a model once for every size whose height and width are multiples
of :data:`SIZE_MULTIPLE` (the pipelines pad pages and lines so): the spatial axes are
declared ``32*h`` and ``32*w``, which strided convolutions and pooling keep symbolic (each
halving of a ``32*h`` size is exact: :func:`~vkumd.framework.opset.conv.window_size`), and
each page size is a recording of the one compiled graph. A model that cannot be imported so
(an op whose shape rule needs a fixed size) falls back to one import per input shape, the
reason kept in :attr:`VkumdBackend.imports`; the most recently used :data:`MAX_SHAPES` such
shapes per model are kept.
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
# What the pipelines pad heights and widths to (the detector's five halvings need 32); an
# axis of such a size is imported as a multiple of a symbol.
SIZE_MULTIPLE = 32
# The symbols of the spatial axes of an NCHW input (other axes stay as the call gives them).
_SPATIAL = {2: "h", 3: "w"}


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
    """vkumd on a device: each model imported once for all page sizes where its ops allow
    (see the module docs).

    Args:
        ctx: the :class:`~vkumd.Context` (None: one created on first use and closed by
            :meth:`close`).
        device: the device for that context (index or name), when ``ctx`` is None.

    Attributes:
        imports: per model file name and input signature, how it was imported: ``"symbolic
            (1, 3, 32*h, 32*w)"``, or ``"per shape: "`` and why the symbolic import was
            refused.
    """

    name = "vkumd"
    # A new batch size is still a new import or recording (the batch stays fixed), so the
    # pipelines fill every classifier and recogniser call to the full batch with blank lines.
    pad_batch = True

    def __init__(self, ctx: Any = None, device: Any = None) -> None:
        self._ctx, self._device, self._owned = ctx, device, ctx is None
        self._lock = threading.Lock()
        self.imports: dict[str, str] = {}

    def context(self) -> Any:
        """The context the models run on (created on first use)."""
        with self._lock:
            if self._ctx is None:
                from vkumd.framework.context import Context

                self._ctx = Context(device=self._device)
            return self._ctx

    def load(self, path: Path) -> Runner:
        """A callable importing ``path`` once per input signature (batch, channels, and
        which spatial sizes are multiples of :data:`SIZE_MULTIPLE`), or, where the model's
        ops refuse symbolic sizes, once per input shape (bounded cache)."""
        from vkumd.framework.frontends.onnx.errors import UnsupportedModelError
        from vkumd.framework.frontends.onnx.model import OnnxModel

        source = read_onnx(path)
        input_name = source.graph.input[0].name
        shapes: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        symbolic: dict[tuple[int | str, ...], Any] = {}  # None: refused, import per shape
        lock = threading.Lock()

        def per_shape(shape: tuple[int, ...]) -> Any:
            with lock:
                if shape in shapes:
                    shapes.move_to_end(shape)
                    return shapes[shape]
            model = OnnxModel(with_input_shape(source, shape), ctx=self.context(),
                              name=f"{path.name} at {shape}")
            with lock:
                shapes[shape] = model
                if len(shapes) > MAX_SHAPES:
                    shapes.popitem(last=False)
            return model

        def model_for(shape: tuple[int, ...]) -> Any:
            key = symbolic_signature(shape)
            if not any(isinstance(d, str) for d in key):
                return per_shape(shape)
            with lock:
                known = key in symbolic
                found = symbolic.get(key)
            if known:
                return found or per_shape(shape)
            dynamic = {input_name: {axis: d for axis, d in enumerate(key)
                                    if isinstance(d, str)}}
            label = f"{path.name} {tuple(key)}"
            try:
                model = OnnxModel(with_input_shape(source, shape), dynamic=dynamic,
                                  ctx=self.context(), name=label)
                self.imports[label] = f"symbolic {tuple(key)}"
            except UnsupportedModelError as exc:
                model = None
                self.imports[label] = f"per shape: {exc}"
            with lock:
                symbolic[key] = model
            return model or per_shape(shape)

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


def symbolic_signature(shape: tuple[int, ...]) -> tuple[int | str, ...]:
    """``shape`` with each spatial axis that is a multiple of :data:`SIZE_MULTIPLE` written
    as that multiple of its symbol (``(1, 3, 64, 100)`` -> ``(1, 3, "32*h", 100)``)."""
    return tuple(f"{SIZE_MULTIPLE}*{_SPATIAL[axis]}"
                 if axis in _SPATIAL and size and size % SIZE_MULTIPLE == 0 else size
                 for axis, size in enumerate(shape))


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
