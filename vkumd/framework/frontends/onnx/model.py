"""A loaded ONNX model: the IR after passes, callable with numpy inputs by ONNX name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.frontends.onnx.importer import Dynamic, Imported, import_model
from vkumd.framework.frontends.onnx.run import run_graph
from vkumd.framework.graph import Graph, run_passes

_INT32 = np.iinfo(np.int32)


class OnnxModel:
    """An imported model bound to a context.

    Attributes:
        graph: the IR after the default passes (what the executor runs).
        imported: the import's record (graph before passes, ONNX names and types).

    Args:
        imported: the result of :func:`import_model`.
        ctx: the context to run on (created on first call when None).
    """

    def __init__(self, imported: Imported, ctx: Any = None) -> None:
        self.imported = imported
        self.graph: Graph = run_passes(imported.graph)
        self._ctx = ctx

    @property
    def input_names(self) -> list[str]:
        """The ONNX names of the inputs, in order."""
        return list(self.imported.input_names)

    @property
    def output_names(self) -> list[str]:
        """The ONNX names of the outputs, in order."""
        return list(self.imported.output_names)

    def _context(self) -> Any:
        if self._ctx is None:
            from vkumd.framework.context import Context

            self._ctx = Context()
        return self._ctx

    def _prepare(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        imp = self.imported
        missing = [n for n in imp.input_names if n not in inputs]
        unknown = [n for n in inputs if n not in imp.input_names]
        if missing or unknown:
            raise VkumdValueError(f"inputs missing: {missing}, unknown: {unknown}; the model "
                                  f"takes {imp.input_names}")
        out: dict[str, np.ndarray] = {}
        for name, elem in zip(imp.input_names, imp.input_types, strict=True):
            array = np.asarray(inputs[name])
            if elem == onnx.TensorProto.INT64:
                if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
                    raise VkumdValueError(f"input {name!r} has int64 values outside int32's "
                                          "range; vkumd stores int64 as int32")
                array = array.astype(np.int32)
            elif elem == onnx.TensorProto.BOOL:
                array = array.astype(np.uint8)
            elif array.dtype.kind == "f" and array.dtype.itemsize == 8:
                raise VkumdTypeError(f"input {name!r} is float64; pass float32")
            out[name] = array
        return out

    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Run the model.

        Args:
            inputs: an array per ONNX input name.

        Returns:
            An array per ONNX output name, of the output's ONNX type (int64, bool restored).

        Raises:
            VkumdValueError: missing or unknown inputs, int64 values outside int32.
            NoDeviceKernel: the graph needs a kernel vkumd lacks.
        """
        results = run_graph(self.graph, self._context(), self._prepare(inputs))
        out: dict[str, np.ndarray] = {}
        for name, elem, array in zip(self.imported.output_names, self.imported.output_types,
                                     results.values(), strict=True):
            target = onnx.helper.tensor_dtype_to_np_dtype(elem)
            out[name] = (array != 0) if target == np.bool_ else array.astype(target, copy=False)
        return out


def load(source: str | Path | bytes | onnx.ModelProto, ctx: Any = None,
         dynamic: Dynamic | None = None) -> OnnxModel:
    """Import an ONNX model and run the graph passes over it.

    Args:
        source: a path, serialized bytes or a ``ModelProto``.
        ctx: the :class:`~vkumd.Context` to run on (default: one created on first call).
        dynamic: per input name, axis -> symbol name (``{"input_ids": {0: "batch"}}``).

    Returns:
        The :class:`OnnxModel`: ``.graph`` and ``model(**inputs) -> dict of arrays``.

    Raises:
        UnsupportedModelError: listing every node vkumd cannot import.
    """
    return OnnxModel(import_model(source, dynamic), ctx)
