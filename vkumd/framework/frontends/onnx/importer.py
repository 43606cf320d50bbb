"""ONNX ``ModelProto`` -> vkumd graph IR.

Initializers become weights (when a node reads them), graph inputs keep their symbolic
dimensions, every node goes through the converter of its operator, and every refusal of the
model is collected so that one :class:`UnsupportedModelError` lists them all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.errors import VkumdError
from vkumd.framework.frontends.onnx import ops_linalg, ops_math, ops_shape  # noqa: F401
from vkumd.framework.frontends.onnx.errors import (
    NeedsConstant,
    Refusal,
    Unsupported,
    UnsupportedModelError,
)
from vkumd.framework.frontends.onnx.patterns import fuse_erf_gelu
from vkumd.framework.frontends.onnx.state import CONVERTERS, State, ir_dtype, node_attrs
from vkumd.framework.graph import Dim, Graph, GraphBuilder, sym

Dynamic = Mapping[str, Mapping[int, str]]
_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")


@dataclass
class Imported:
    """An imported model: its graph and what is needed to call it as ONNX would.

    Attributes:
        graph: the IR before passes.
        input_names: ONNX names of the graph inputs, in order.
        input_types: their ONNX element types.
        output_names: ONNX names of the outputs, in order.
        output_types: their ONNX element types (results are converted back to them).
    """

    graph: Graph
    input_names: list[str] = field(default_factory=list)
    input_types: list[int] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    output_types: list[int] = field(default_factory=list)


def symbol(name: str) -> str:
    """``name`` made an identifier a symbolic dim may carry (``batch size`` -> ``batch_size``)."""
    clean = _IDENTIFIER.sub("_", name) or "dim"
    return clean if not clean[0].isdigit() else f"d_{clean}"


def _input_shape(vi: onnx.ValueInfoProto, overrides: Mapping[int, str]) -> list[int | Dim]:
    dims = vi.type.tensor_type.shape.dim
    shape: list[int | Dim] = []
    for i, d in enumerate(dims):
        if i in overrides:
            shape.append(sym(symbol(overrides[i])))
        elif d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            shape.append(sym(symbol(d.dim_param)))
        else:
            shape.append(sym(symbol(f"{vi.name}_{i}")))  # unnamed unknown: its own symbol
    return shape


def _opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def as_model(source: str | Path | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A ``ModelProto`` from a path, serialized bytes or a model."""
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, bytes):
        return onnx.load_from_string(source)
    return onnx.load(str(source))


def import_model(source: str | Path | bytes | onnx.ModelProto, dynamic: Dynamic | None = None,
                 constants: Mapping[str, np.ndarray] | None = None) -> Imported:
    """Translate an ONNX model into a graph of vkumd's IR.

    Args:
        source: a path, serialized bytes or a ``ModelProto``.
        dynamic: per input name, axis -> symbol name, overriding the model's dims
            (``{"input_ids": {0: "batch", 1: "seq"}}``).
        constants: graph inputs to bind to these values (folded like initializers; how a
            model whose shapes or axes are inputs is specialized).

    Returns:
        The :class:`Imported` model (graph before passes, names and ONNX types).

    Raises:
        UnsupportedModelError: listing every node (and input) vkumd cannot import.
    """
    model = as_model(source)
    g = model.graph
    builder = GraphBuilder(symbol(g.name or "onnx"))
    st = State(builder, _opset(model))
    refusals: list[Refusal] = []
    initialized = {t.name for t in g.initializer}
    for t in g.initializer:
        st.bind(t.name, numpy_helper.to_array(t))
    out = Imported(builder.graph)
    for name, array in (constants or {}).items():
        st.bind(name, np.asarray(array))
    for vi in g.input:
        if vi.name in initialized or vi.name in (constants or {}):
            continue
        elem = vi.type.tensor_type.elem_type
        try:
            dt = ir_dtype(elem)
        except Unsupported as exc:
            refusals.append(Refusal(vi.name, "graph input", str(exc)))
            continue
        shape = _input_shape(vi, (dynamic or {}).get(vi.name, {}))
        st.bind(vi.name, builder.input(vi.name, shape, dt))
        out.input_names.append(vi.name)
        out.input_types.append(elem)
    poisoned: set[str] = {r.name for r in refusals}
    for node in fuse_erf_gelu(list(g.node), st.env):
        _convert(st, node, refusals, poisoned)
    outputs = []
    for vi in g.output:
        if vi.name in poisoned or vi.name not in st.env:
            continue
        try:
            outputs.append(st.value(vi.name))
        except Unsupported as exc:
            refusals.append(Refusal(vi.name, "graph output", str(exc)))
            continue
        out.output_names.append(vi.name)
        out.output_types.append(vi.type.tensor_type.elem_type)
    if refusals:
        raise UnsupportedModelError(refusals, g.name or "model")
    builder.output(*outputs)
    builder.build()
    return out


def _convert(st: State, node: onnx.NodeProto, refusals: list[Refusal], poisoned: set[str]
             ) -> None:
    """Convert one node, or record why not (and mark its outputs unusable downstream)."""
    spec = CONVERTERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if spec is None:
        where = f" of domain {node.domain!r}" if node.domain not in ("", "ai.onnx") else ""
        refusals.append(Refusal(node.name, node.op_type, f"operator{where} not supported"))
        poisoned.update(node.output)
        return
    if any(n in poisoned for n in node.input if n):
        poisoned.update(node.output)  # its cause is already listed
        return
    try:
        attrs = node_attrs(node)
        extra = sorted(set(attrs) - spec.attrs)
        if extra:
            raise Unsupported(f"attribute {', '.join(extra)} is not supported")
        results = spec.fn(st, node, attrs)
    except (Unsupported, VkumdError) as exc:
        needs = exc.name if isinstance(exc, NeedsConstant) else None
        refusals.append(Refusal(node.name, node.op_type, str(exc), needs))
        poisoned.update(node.output)
        return
    for name, result in zip(node.output, results, strict=False):
        if name and result is not None:
            st.bind(name, result if not isinstance(result, np.generic) else np.asarray(result))
