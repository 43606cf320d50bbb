"""A loaded ONNX model: the IR after passes, callable with numpy inputs by ONNX name."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError
from vkumd.framework.frontends.onnx.files import read_model
from vkumd.framework.frontends.onnx.importer import Dynamic, Imported, import_model
from vkumd.framework.frontends.onnx.run import run_graph
from vkumd.framework.frontends.onnx.segments import Segmented, first_host_step
from vkumd.framework.frontends.onnx.state import IR_DTYPES
from vkumd.framework.graph import Graph, evaluate, run_passes

_INTEGER_INPUTS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
# Specializations kept per model (one per distinct value of its shape inputs).
MAX_SPECIALIZATIONS = 16


def _shape_inputs(model: onnx.ModelProto, exc: UnsupportedModelError) -> list[str] | None:
    """The graph inputs to specialize on, when every refusal only lacked a value: the
    integer ones, and any other a refusal names (Resize's float scales, Pad's value)."""
    if not all(r.needs for r in exc.refusals):
        return None
    init = {t.name for t in model.graph.initializer}
    needed = {n for r in exc.refusals
              for n in (r.needs if isinstance(r.needs, tuple) else (r.needs,))}
    names = [vi.name for vi in model.graph.input if vi.name not in init
             and (vi.type.tensor_type.elem_type in _INTEGER_INPUTS or vi.name in needed)]
    return names or None


class OnnxModel:
    """An imported model bound to a context.

    A model whose shapes, axes or slice bounds are graph inputs (ONNX allows it; exporters
    rarely do) cannot be imported once for all values: it is *specialized*, imported again
    for each distinct value of its integer inputs, which are then folded like initializers.
    A model with a node whose output size depends on its input values (NonZero, Unique,
    Compress) runs in *segments* around it (:mod:`.segments`): the device work before it,
    the node on the host, the rest imported per shape of its outputs.

    Attributes:
        graph: the IR after the default passes (what the executor runs); for a specialized
            model, the latest specialization's (None before the first call).
        imported: the import's record (graph before passes, ONNX names and types).
        specialized_on: the integer inputs folded per call (empty for most models).
        segmented: the model's split around its first host step, or None.
        device_nodes_run: how many graph nodes the latest call ran on the device (0: its
            outputs were sizes, constants, inputs or host steps' results).
        host_steps_run: the registry ops the latest call ran as host steps, in order.

    Args:
        source: the model.
        dynamic: symbol overrides, as :func:`load`.
        ctx: the context to run on (created on first call when None).
        name: how errors name the model (its path, when it was read from one).

    Raises:
        UnsupportedModelError: listing every node vkumd cannot import.
    """

    def __init__(self, source: onnx.ModelProto, dynamic: Dynamic | None = None,
                 ctx: Any = None, name: str | None = None) -> None:
        self._source, self._dynamic, self._ctx, self._name = source, dynamic, ctx, name
        self._cache: dict[bytes, tuple[Imported, Graph]] = {}
        # Calls from several threads share one context and one specialization cache.
        self._lock = threading.Lock()
        self.specialized_on: list[str] = []
        self.graph: Graph | None = None
        self.segmented: Segmented | None = None
        self.device_nodes_run = 0
        self.host_steps_run: list[str] = []
        try:
            self.imported: Imported | None = import_model(source, dynamic, name=name)
        except UnsupportedModelError as exc:
            step = first_host_step(exc)
            if step is not None:
                self.imported = None
                self._all_inputs = [(vi.name, vi.type.tensor_type.elem_type)
                                    for vi in source.graph.input
                                    if vi.name not in {t.name for t in source.graph.initializer}]
                self.segmented = Segmented(source, step, self._segment, name or "model")
                return
            names = _shape_inputs(source, exc)
            if names is None:
                raise
            self.imported, self.specialized_on = None, names
            self._all_inputs = [(vi.name, vi.type.tensor_type.elem_type)
                                for vi in source.graph.input
                                if vi.name not in {t.name for t in source.graph.initializer}]
            return
        self.graph = run_passes(self.imported.graph)

    def _segment(self, model: onnx.ModelProto, name: str) -> OnnxModel:
        """A segment of a segmented model as a model of its own (sharing the context)."""
        names = {vi.name for vi in model.graph.input}
        dynamic = {k: v for k, v in (self._dynamic or {}).items() if k in names}
        return OnnxModel(model, dynamic or None, self._ctx, name)

    def _run_segments(self, inputs: dict[str, Any], how: str) -> dict[str, np.ndarray]:
        assert self.segmented is not None
        ctx = self._context() if how == "__call__" else None

        def prepare(segment: OnnxModel) -> None:
            if segment._ctx is None:
                segment._ctx = ctx

        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            raise VkumdValueError(f"inputs missing: {missing}, unknown: {unknown}; the model "
                                  f"takes {self.input_names}")
        out, ran = self.segmented.run(inputs, how, prepare)
        if how == "__call__":
            prefix = self.segmented.prefix
            before = [op for s in ran if s is prefix for op in s.host_steps_run]
            after = [op for s in ran if s is not prefix for op in s.host_steps_run]
            self.device_nodes_run = sum(s.device_nodes_run for s in ran)
            self.host_steps_run = [*before, self.segmented.call.op, *after]
        return out

    def _specialize(self, inputs: dict[str, Any]) -> tuple[Imported, Graph]:
        values = {n: np.asarray(inputs[n]) for n in self.specialized_on if n in inputs}
        key = b"".join(n.encode() + str(a.shape).encode() + a.tobytes()
                       for n, a in sorted(values.items()))
        with self._lock:
            if key not in self._cache:
                if len(self._cache) >= MAX_SPECIALIZATIONS:
                    self._cache.pop(next(iter(self._cache)))
                imported = import_model(self._source, self._dynamic, values, name=self._name)
                self._cache[key] = (imported, run_passes(imported.graph))
            return self._cache[key]

    @property
    def input_names(self) -> list[str]:
        """The ONNX names of the inputs, in order."""
        if self.imported is None:
            return [n for n, _ in self._all_inputs]
        return list(self.imported.input_names)

    @property
    def output_names(self) -> list[str]:
        """The ONNX names of the outputs, in order."""
        return [vi.name for vi in self._source.graph.output]

    def _context(self) -> Any:
        with self._lock:
            if self._ctx is None:
                from vkumd.framework.context import Context

                self._ctx = Context()
            return self._ctx

    def _prepare(self, imp: Imported, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in self.input_names]
        if missing or unknown:
            raise VkumdValueError(f"inputs missing: {missing}, unknown: {unknown}; the model "
                                  f"takes {self.input_names}")
        out: dict[str, np.ndarray] = {}
        for name, elem, dtype in zip(imp.input_names, imp.input_types, imp.input_dtypes,
                                     strict=True):
            out[name] = _input_array(name, elem, inputs[name], dtype)
        out.update(imp.derived_feeds(inputs))
        return out

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the model on the device.

        Args:
            inputs: an array per ONNX input name.

        Returns:
            An array per ONNX output name, of the output's ONNX type (int64, bool restored).

        Raises:
            VkumdValueError: missing or unknown inputs, int64 values outside int32.
            VkumdTypeError: an input of another type than the model's (nothing is narrowed
                silently: float64, float ids and non-bool masks are refused).
            NoDeviceKernel: the graph needs a kernel vkumd lacks.
        """
        if self.segmented is not None:
            return self._run_segments(inputs, "__call__")
        imp, feed = self._bind(inputs)
        assert self.graph is not None
        result = self._typed(imp, run_graph(self.graph, self._context(), feed).values())
        self.device_nodes_run, self.host_steps_run = len(self.graph.nodes), []
        return result

    def evaluate(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the model's IR in float64 numpy (:func:`vkumd.framework.graph.evaluate`), with
        no device: the check of an import whose ops have no kernel yet.

        Args and errors as :meth:`__call__` (without ``NoDeviceKernel``).

        Returns:
            An array per ONNX output name, rounded to the output's ONNX type.
        """
        if self.segmented is not None:
            return self._run_segments(inputs, "evaluate")
        imp, feed = self._bind(inputs)
        assert self.graph is not None
        return self._typed(imp, evaluate(self.graph, feed))

    def _bind(self, inputs: dict[str, Any]) -> tuple[Imported, dict[str, np.ndarray]]:
        if self.imported is None:
            imp, self.graph = self._specialize(inputs)
        else:
            imp = self.imported
        return imp, self._prepare(imp, inputs)

    @staticmethod
    def _typed(imp: Imported, arrays: Iterable[np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name, elem, array in zip(imp.output_names, imp.output_types, arrays, strict=True):
            target = onnx.helper.tensor_dtype_to_np_dtype(elem)
            out[name] = (array != 0) if target == np.bool_ else array.astype(target, copy=False)
        return out


def _input_array(name: str, elem: int, value: Any, dtype: str | None = None) -> np.ndarray:
    """An ONNX input's array as vkumd stores it, by the one conversion rule
    (:func:`vkumd.framework.dtypes.host_array`): int64 ids within int32 (never wrapped),
    int64 data as int64 (``dtype``, the graph input's IR type); nothing else narrowed."""
    what = f"input {name!r}"
    array = dtypes.as_array(value, what)
    if elem == onnx.TensorProto.BOOL:
        if array.dtype != np.bool_:
            raise VkumdTypeError(f"{what}: arrays of {array.dtype} are not converted silently; "
                                 "the graph takes bool; convert first (e.g. a.astype(np.bool_))")
        return array
    stored = dtype if elem == onnx.TensorProto.INT64 and dtype else IR_DTYPES.get(elem)
    if stored is None:
        return array  # the import refused the type already
    if (array.dtype.name == stored and dtypes.dtype(stored).storage != dtypes.dtype(stored).numpy
            and not dtypes.dtype(stored).is_packed):  # host_array unpacks ml_dtypes' int4...
        # ml_dtypes' bfloat16 or float8, widened exactly; stored rounds back
        array = array.astype(np.float32)
    array, target = dtypes.host_array(array, expected=dtypes.dtype(stored), what=what)
    # Checked to fit, so the narrowing to the stored integer type is exact.
    return array.astype(target.storage, copy=False) if array.dtype.kind in "iu" else array


def load(source: str | Path | bytes | onnx.ModelProto, ctx: Any = None,
         dynamic: Dynamic | None = None) -> OnnxModel:
    """Import an ONNX model and run the graph passes over it.

    Args:
        source: a path, serialized bytes or a ``ModelProto``.
        ctx: the :class:`~vkumd.Context` to run on (default: one created on first call).
        dynamic: per input name, axis -> symbol name (``{"input_ids": {0: "batch"}}``)
            or a multiple of one (``{"x": {2: "32*h", 3: "32*w"}}``; an image's height and
            width through strided convolutions: docs/graphs.md, "Symbolic image sizes").

    Returns:
        The :class:`OnnxModel`: ``.graph`` and ``model(**inputs) -> dict of arrays``.

    Raises:
        UnsupportedModelError: listing every node vkumd cannot import.
        OnnxFileError: the file cannot be read or the model is malformed (naming the file
            and the tensor, node or field).
    """
    model, name = read_model(source)
    return OnnxModel(model, dynamic, ctx, name)
