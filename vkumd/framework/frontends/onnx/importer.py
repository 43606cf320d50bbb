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
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.errors import VkumdError, VkumdValueError
from vkumd.framework.frontends.onnx import derived as derived_mod
from vkumd.framework.frontends.onnx import (  # noqa: F401
    ops_activation,
    ops_attention,
    ops_control,
    ops_host,
    ops_index,
    ops_linalg,
    ops_logic,
    ops_math,
    ops_norms,
    ops_quant,
    ops_recurrent,
    ops_reduce,
    ops_resample,
    ops_rows,
    ops_sequence,
    ops_shape,
    ops_signal,
    ops_vision,
)
from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import (
    HostStep,
    MalformedGraphError,
    NeedsConstant,
    OnHost,
    OnnxFileError,
    Refusal,
    TooBig,
    Unsupported,
    UnsupportedModelError,
)
from vkumd.framework.frontends.onnx.files import ordered_nodes, read_model
from vkumd.framework.frontends.onnx.fold import on_host, shape_like, too_big
from vkumd.framework.frontends.onnx.int64_values import int64_data_values
from vkumd.framework.frontends.onnx.patterns import attention_idioms, fuse_erf_gelu
from vkumd.framework.frontends.onnx.schema import legacy_broadcast, undeclared_attributes
from vkumd.framework.frontends.onnx.state import (
    CONVERTERS,
    IR_DTYPES,
    State,
    ir_dtype,
    node_attrs,
    type_name,
)
from vkumd.framework.graph import Dim, Graph, GraphBuilder, sym
from vkumd.framework.graph.dims import as_dim, linear, solve

Dynamic = Mapping[str, Mapping[int, "str | Dim"]]
_IDENTIFIER = re.compile(r"[^A-Za-z0-9_]")
# What marks a dynamic= string as a multiple of a symbol ("32*h") rather than a name.
_LINEAR_TEXT = re.compile(r"[*+]")
# What _run_converter returns for a node it refused (and recorded).
_REFUSED = object()
# What a malformed node or graph makes onnx's helpers, numpy or a converter raise; each
# becomes a refusal (or an OnnxFileError) that names the node, not a bare traceback.
_MALFORMED = (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError,
              ZeroDivisionError, RecursionError)


@dataclass
class Imported:
    """An imported model: its graph and what is needed to call it as ONNX would.

    Attributes:
        graph: the IR before passes.
        input_names: ONNX names of the graph inputs, in order.
        input_types: their ONNX element types.
        input_dtypes: the IR dtypes that store them (INT64 as int64 where it carries data,
            else int32: :mod:`.int64_values`).
        output_names: ONNX names of the outputs, in order.
        output_types: their ONNX element types (results are converted back to them).
        input_shapes: the graph inputs' shapes (where the symbols' sizes are read).
        derived: graph inputs computed from the sizes (:mod:`.derived`) -> their ONNX names.
        derived_env: what those are computed from.
        derived_shapes: their shapes as probed at import (checked on every call).
    """

    graph: Graph
    input_names: list[str] = field(default_factory=list)
    input_types: list[int] = field(default_factory=list)
    input_dtypes: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    output_types: list[int] = field(default_factory=list)
    input_shapes: list[tuple[int | Dim, ...]] = field(default_factory=list)
    derived: dict[str, str] = field(default_factory=dict)
    derived_env: dict[str, np.ndarray | Derived] = field(default_factory=dict)
    derived_shapes: dict[str, tuple[int | Dim, ...]] = field(default_factory=dict)

    def derived_feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph inputs computed from the sizes of ``inputs`` (by ONNX name), stored as
        vkumd stores them (int64 as int32).

        Raises:
            VkumdValueError: the computation fails at these sizes.
        """
        if not self.derived:
            return {}
        bindings: dict[str, int] = {}
        for name, shape in zip(self.input_names, self.input_shapes, strict=True):
            for axis, d in enumerate(shape):
                if isinstance(d, Dim) and linear(d) is not None:
                    symbol_name, value = solve(d, int(np.shape(inputs[name])[axis]),
                                               f"input {name!r} axis {axis}")
                    bindings[symbol_name] = value
        cache: dict[str, np.ndarray] = {}
        feeds = {}
        for input_name, onnx_name in self.derived.items():
            try:
                array = derived_mod.evaluate(onnx_name, self.derived_env, bindings, cache)
            except Unsupported as exc:
                raise VkumdValueError(str(exc)) from exc
            if array.dtype.kind in "iu" and array.dtype.itemsize == 8:
                array = array.astype(np.int32)
            want = tuple(d.bind(bindings) if isinstance(d, Dim) else d
                         for d in self.derived_shapes[input_name])
            if array.shape != want:
                # Probing saw a shape these sizes do not give (a slice clamped at a constant
                # the probes passed, e.g. position ids past the table's length).
                raise VkumdValueError(
                    f"{onnx_name!r}, computed from the sizes {bindings}, has shape "
                    f"{array.shape}, not {want} as at import; the model does not take these "
                    "sizes (a sequence longer than a table it slices?)")
            feeds[input_name] = array
        return feeds


def symbol(name: str) -> str:
    """``name`` made an identifier a symbolic dim may carry (``batch size`` -> ``batch_size``)."""
    clean = _IDENTIFIER.sub("_", name) or "dim"
    return clean if not clean[0].isdigit() else f"d_{clean}"


def _input_shape(vi: onnx.ValueInfoProto, overrides: Mapping[int, str], where: str
                 ) -> list[int | Dim]:
    dims = vi.type.tensor_type.shape.dim
    shape: list[int | Dim] = []
    for i, d in enumerate(dims):
        if i in overrides:
            shape.append(_override(vi.name, i, overrides[i]))
        elif d.HasField("dim_value"):
            if d.dim_value < 0:
                raise OnnxFileError(f"{where}: graph input {vi.name!r} has dim {i} = "
                                    f"{d.dim_value}; a dimension is >= 0 (or a name)")
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            shape.append(sym(symbol(d.dim_param)))
        else:
            shape.append(sym(symbol(f"{vi.name}_{i}")))  # unnamed unknown: its own symbol
    return shape


def _override(name: str, axis: int, given: Any) -> Dim:
    """A ``dynamic=`` entry as a dimension: a name (made an identifier), a multiple of one
    (``"32*h"`` or ``32 * sym("h")``, what a strided convolution keeps symbolic).

    Raises:
        VkumdValueError: anything else.
    """
    if isinstance(given, str) and not _LINEAR_TEXT.search(given):
        return sym(symbol(given))
    try:
        dim = as_dim(given) if isinstance(given, (str, Dim)) else None
    except VkumdValueError as exc:
        raise VkumdValueError(f"dynamic[{name!r}][{axis}] = {given!r}: {exc}") from None
    if not isinstance(dim, Dim) or linear(dim) is None:
        raise VkumdValueError(f"dynamic[{name!r}][{axis}] = {given!r}: give a symbol name or "
                              "a multiple of one ('32*h', 32 * sym('h'))")
    return dim


def _opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def as_model(source: str | Path | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """A checked ``ModelProto`` from a path, serialized bytes or a model
    (:func:`~.files.read_model`: regular files only, sizes and graph structure checked).

    Raises:
        OnnxFileError: the model cannot be read, or is malformed (naming what and where).
    """
    return read_model(source)[0]


def import_model(source: str | Path | bytes | onnx.ModelProto, dynamic: Dynamic | None = None,
                 constants: Mapping[str, np.ndarray] | None = None, name: str | None = None
                 ) -> Imported:
    """Translate an ONNX model into a graph of vkumd's IR.

    Args:
        source: a path, serialized bytes or a ``ModelProto``.
        dynamic: per input name, axis -> symbol name, overriding the model's dims
            (``{"input_ids": {0: "batch", 1: "seq"}}``), or a multiple of a symbol
            (``{"x": {2: "32*h", 3: 32 * sym("w")}}``: strided convolutions and pooling keep
            such a size symbolic when the stride divides the multiple).
        constants: graph inputs to bind to these values (folded like initializers; how a
            model whose shapes or axes are inputs is specialized).
        name: how errors name the model (default: its path, else its graph's name).

    Returns:
        The :class:`Imported` model (graph before passes, names and ONNX types).

    Raises:
        UnsupportedModelError: listing every node (and input) vkumd cannot import.
        OnnxFileError: the model cannot be read or is malformed (:func:`as_model`);
            :class:`~.errors.MalformedGraphError` when its graph is not well formed.
    """
    model, where = read_model(source)
    where = name or where
    try:
        return _import(model, where, dynamic, constants)
    except _MALFORMED as exc:
        if isinstance(exc, VkumdError):
            raise
        raise OnnxFileError(f"{where}: cannot import the model ({type(exc).__name__}: "
                            f"{str(exc)[:300]}); it is malformed (check it with "
                            "onnx.checker.check_model)") from exc


def _import(model: onnx.ModelProto, where: str, dynamic: Dynamic | None,
            constants: Mapping[str, np.ndarray] | None) -> Imported:
    g = model.graph
    builder = GraphBuilder(symbol(g.name or "onnx"))
    st = State(builder, _opset(model))
    st.convert_node = lambda node, refused, poisoned: _convert(st, node, refused, poisoned)
    st.int64_data = int64_data_values(g)
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
            dt = "int64" if vi.name in st.int64_data else ir_dtype(elem)
        except Unsupported as exc:
            refusals.append(Refusal(vi.name, "graph input", str(exc)))
            continue
        shape = _input_shape(vi, (dynamic or {}).get(vi.name, {}), where)
        st.bind(vi.name, builder.input(vi.name, shape, dt))
        out.input_names.append(vi.name)
        out.input_types.append(elem)
        out.input_dtypes.append(dt)
        out.input_shapes.append(tuple(shape))
    for vi in g.output:
        try:
            ir_dtype(vi.type.tensor_type.elem_type)
        except Unsupported as exc:
            refusals.append(Refusal(vi.name, "graph output", str(exc)))
    poisoned: set[str] = {r.name for r in refusals}
    nodes = ordered_nodes(g, where)
    # Before the idioms are fused, which would drop the attributes of the nodes they join.
    undeclared = _undeclared(nodes, st.opset, refusals, poisoned)
    for node in attention_idioms(fuse_erf_gelu(nodes, st.env), st.env):
        if id(node) not in undeclared:
            _convert(st, node, refusals, poisoned)
    outputs = []
    for vi in g.output:
        if vi.name in poisoned or vi.name not in st.env:
            continue
        try:
            value = st.value(vi.name)
        except Unsupported as exc:
            refusals.append(Refusal(vi.name, "graph output", str(exc)))
            continue
        _check_output_type(vi, value.dtype.name, where)
        outputs.append(value)
        out.output_names.append(vi.name)
        out.output_types.append(vi.type.tensor_type.elem_type)
    if refusals:
        raise UnsupportedModelError(refusals, where)
    builder.output(*outputs)
    builder.build()
    out.derived = dict(st.derived_inputs)
    out.derived_shapes = {name: tuple(st.env[onnx_name].shape)
                          for name, onnx_name in out.derived.items()}
    out.derived_env = _closure(st.env, list(out.derived.values()))
    return out


def _undeclared(nodes: list[onnx.NodeProto], opset: int, refusals: list[Refusal],
                poisoned: set[str]) -> set[int]:
    """Refuse the default-domain nodes with attributes their schema does not declare;
    returns their ids (they are not converted)."""
    refused = set()
    for node in nodes:
        why = undeclared_attributes(node, opset) if node.domain in ("", "ai.onnx") else None
        if why is not None:
            refusals.append(Refusal(node.name, node.op_type, why))
            poisoned.update(node.output)
            refused.add(id(node))
    return refused


_INT64 = onnx.TensorProto.INT64


def _check_output_type(vi: onnx.ValueInfoProto, computed: str, where: str) -> None:
    """Refuse a graph output whose declared element type is not what the graph computes
    (compared as vkumd stores them: an int64 output computed as int32 is restored to its
    declared type on return)."""
    declared = vi.type.tensor_type.elem_type
    if IR_DTYPES[declared] != computed and (declared, computed) != (_INT64, "int64"):
        raise MalformedGraphError(
            f"{where}: the graph declares output {vi.name!r} as {type_name(declared)}, but "
            f"computes it as {computed}; declare the type the graph computes (or add a Cast)")


def _closure(env: Mapping[str, object], names: list[str]) -> dict[str, np.ndarray | Derived]:
    """The bindings the derived values ``names`` are computed from (not the weights)."""
    out: dict[str, np.ndarray | Derived] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if not name or name in out:
            continue
        bound = env[name]
        assert isinstance(bound, (np.ndarray, Derived))
        out[name] = bound
        if isinstance(bound, Derived):
            todo.extend(bound.inputs)
    return out


def _convert(st: State, node: onnx.NodeProto, refusals: list[Refusal], poisoned: set[str]
             ) -> None:
    """Convert one node, or record why not (and mark its outputs unusable downstream).

    A node that reads only known arrays and :class:`Derived` values is computed on the host:
    now when no symbol is involved, else at call time (a Derived)."""
    ours = node.domain in ("", "ai.onnx")
    spec = CONVERTERS.get(node.op_type) if ours else None
    if any(n in poisoned for n in node.input if n):
        poisoned.update(node.output)  # its cause is already listed
        return
    if ours and legacy_broadcast(node.op_type, st.opset):
        refusals.append(Refusal(node.name, node.op_type, f"at opset {st.opset} it broadcasts as "
                                "ONNX did before opset 7 (by its 'broadcast' attribute), which "
                                "vkumd does not implement; convert the model to opset 7 or "
                                "later (onnx.version_converter)"))
        poisoned.update(node.output)
        return
    bounds = [st.env[n] for n in node.input if n and n in st.env]
    static = ours and all(isinstance(b, (np.ndarray, Derived)) for b in bounds)
    oversize = too_big(st, node) if static and node.input else None
    if oversize is not None:
        if spec is None:
            refusals.append(Refusal(node.name, node.op_type, f"{oversize} (vkumd has no device "
                                    "kernel for it, so it cannot be left to the device)"))
            poisoned.update(node.output)
            return
        # Too big to fold: the converter sees only small known arrays and emits device work.
        static, st.device_only = False, True
    if spec is None and not static:
        where = f" of domain {node.domain!r}" if not ours else ""
        refusals.append(Refusal(node.name, node.op_type, f"operator{where} not supported"))
        poisoned.update(node.output)
        return
    try:
        results = _run_converter(st, node, spec, static, bounds, refusals, poisoned)
    except _MALFORMED as exc:
        if isinstance(exc, VkumdError):
            raise
        refusals.append(Refusal(node.name, node.op_type, f"malformed ({type(exc).__name__}: "
                                f"{str(exc)[:200]}); check its attributes' types and inputs"))
        poisoned.update(node.output)
        return
    finally:
        st.device_only = False
    if results is _REFUSED:
        if oversize is not None:  # say why the host did not compute it instead
            last = refusals[-1]
            refusals[-1] = Refusal(last.name, last.op_type, f"{last.reason}; and it is not "
                                   f"folded on the host: {oversize}", last.needs)
        return
    for name, result in zip(node.output, results, strict=False):
        if name and result is not None:
            st.bind(name, result if not isinstance(result, np.generic) else np.asarray(result))


def _run_converter(st: State, node: onnx.NodeProto, spec: Any, static: bool, bounds: list[Any],
                   refusals: list[Refusal], poisoned: set[str]) -> Any:
    """The node's results from its converter, or from the host; :data:`_REFUSED` when it is
    refused (recorded in ``refusals``)."""
    if spec is not None and static and shape_like(bounds):
        # Shape arithmetic (Equal, Not, Where, Mod on shape vectors): folded by ONNX's
        # reference implementation, since a converter would make device work of it and
        # leave what depends on it (an Expand's shape, a Reshape's) unknown at import.
        try:
            return [on_host(st, node)]
        except Unsupported:
            pass  # several outputs, or the reference refuses it: the converter decides
    try:
        if spec is None or (static and not spec.derived
                            and any(isinstance(b, Derived) for b in bounds)):
            raise OnHost("computed from the sizes")
        attrs = node_attrs(node)
        extra = sorted(set(attrs) - spec.attrs)
        if extra:
            raise Unsupported(f"attribute {', '.join(extra)} is not supported")
        results = spec.fn(st, node, attrs)
    except (Unsupported, VkumdError) as exc:
        if static:
            try:
                results = [on_host(st, node)]
            except Unsupported as host_exc:
                exc = host_exc if isinstance(exc, OnHost) or isinstance(host_exc, TooBig) else exc
            else:
                exc = None
        if exc is not None:
            needs = exc.name if isinstance(exc, NeedsConstant) else None
            step = exc.call if isinstance(exc, HostStep) else None
            refusals.append(Refusal(node.name, node.op_type, str(exc), needs, step))
            poisoned.update(node.output)
            return _REFUSED
    return results
