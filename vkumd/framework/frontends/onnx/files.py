"""An ONNX model as untrusted input: read, its tensors' sizes checked, its graph validated.

Before anything is converted or allocated from it, a model is checked the way onnxruntime's
loader checks one:

- the file is a regular file (:mod:`vkumd.framework.untrusted`) of at most 2 GiB (protobuf's
  limit for one message), and decodes as a ``ModelProto`` with a graph;
- every tensor stored in the model (initializers, ``Constant`` values) has an element type
  ONNX defines, non-negative dims, and exactly the data its dims and type need;
- external data is read only from regular files inside the model's directory, each span
  checked against the file's size before it is read;
- the graph is well formed: one writer per name, no node writing a graph input or an
  initializer, every declared output produced, every name read defined, no cycle (nodes out
  of order are sorted, as onnxruntime does);
- its nodes and outputs are what ONNX's schemas allow at its opset (:mod:`.schema`).
"""

from __future__ import annotations

import heapq
import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from vkumd.framework.frontends.onnx.errors import MalformedGraphError, OnnxFileError
from vkumd.framework.frontends.onnx.schema import check_model, node_label
from vkumd.framework.untrusted import open_regular, pread_exact, read_regular

# protobuf refuses to serialize a message past 2 GiB; a bigger .onnx file is not a model.
MAX_MODEL_BYTES = 2**31
_MAX_RANK = 64
_MAX_DIM = 2**62
# Sub-byte types: elements per byte (and per int32_data entry).
_PACKED = {getattr(onnx.TensorProto, name, -1): per for name, per in (
    ("INT4", 2), ("UINT4", 2), ("FLOAT4E2M1", 2), ("INT2", 4), ("UINT2", 4))}
_COMPLEX = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}


def read_model(source: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """A checked ``ModelProto`` from a path, serialized bytes or a model.

    Args:
        source: the model.

    Returns:
        The model (external data loaded) and how messages name it (its path, or its graph).

    Raises:
        OnnxFileError: the file cannot be read or decoded, or a tensor or external-data
            reference is malformed.
        MalformedGraphError: the graph is not well formed (:func:`ordered_nodes`), or a
            node or output breaks ONNX's schemas (:func:`~.schema.check_model`).
    """
    if isinstance(source, onnx.ModelProto):
        model, where, base = source, f"model {source.graph.name or '(unnamed)'!r}", None
    elif isinstance(source, (bytes, bytearray, memoryview)):
        where, base = "the model bytes", None
        model = _decode(bytes(source), where)
    else:
        where, base = str(source), Path(source).parent
        model = _decode(read_regular(source, MAX_MODEL_BYTES, OnnxFileError), where)
    for tensor, owner in _tensors(model.graph):
        _check_tensor(tensor, owner, where)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _load_external(tensor, owner, where, base)
    ordered_nodes(model.graph, where)
    check_model(model, where)
    return model, where


def _decode(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise OnnxFileError(f"{where}: not an ONNX model: protobuf cannot decode it "
                            f"({type(exc).__name__}: {str(exc)[:200]}); the file is truncated, "
                            "corrupt or not .onnx") from None
    if not model.HasField("graph") or not model.graph.output:
        raise OnnxFileError(f"{where}: the model has no graph or its graph declares no "
                            "output; it is empty, truncated or not an .onnx file")
    return model


def _tensors(graph: onnx.GraphProto, scope: str = "") -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every tensor the graph stores, with who holds it (for messages), subgraphs included."""
    for t in graph.initializer:
        yield t, f"{scope}initializer {t.name!r}"
    for node in graph.node:
        for a in node.attribute:
            what = f"{scope}{node.op_type} node {node.name or '(unnamed)'!r} attribute {a.name!r}"
            if a.HasField("t"):
                yield a.t, what
            for t in a.tensors:
                yield t, what
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _tensors(sub, f"{what}: ")


def _element(tensor: onnx.TensorProto, owner: str, where: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, ValueError, TypeError):
        raise OnnxFileError(f"{where}: {owner} has data_type {tensor.data_type}, which is not "
                            "an ONNX element type; the file is corrupt or from a newer "
                            "ONNX") from None


def _check_tensor(tensor: onnx.TensorProto, owner: str, where: str) -> None:
    """Refuse a tensor whose dims disagree with the data it holds (before numpy sees it)."""
    dims = list(tensor.dims)
    if len(dims) > _MAX_RANK or any(d < 0 or d > _MAX_DIM for d in dims):
        raise OnnxFileError(f"{where}: {owner} has dims {dims[:_MAX_RANK + 1]}; dims must be "
                            f"0..{_MAX_DIM}, at most {_MAX_RANK} of them")
    if tensor.data_type == onnx.TensorProto.STRING:
        if len(tensor.string_data) != math.prod(dims):
            raise OnnxFileError(f"{where}: {owner} has dims {dims} but "
                                f"{len(tensor.string_data)} strings")
        return
    element = _element(tensor, owner, where)
    count = math.prod(dims)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return  # checked against its file by _load_external
    if tensor.data_type in _PACKED:
        need_bytes = need_items = -(-count // _PACKED[tensor.data_type])
    else:
        need_bytes = count * element.itemsize
        need_items = 2 * count if tensor.data_type in _COMPLEX else count
    if tensor.HasField("raw_data"):
        have, need, unit = len(tensor.raw_data), need_bytes, "bytes of raw_data"
    else:
        have = (len(tensor.float_data) + len(tensor.int32_data) + len(tensor.int64_data)
                + len(tensor.double_data) + len(tensor.uint64_data))
        need, unit = need_items, "values"
    if have != need:
        kind = onnx.TensorProto.DataType.Name(tensor.data_type)
        raise OnnxFileError(f"{where}: {owner}: a {kind} tensor of dims {dims} needs {need} "
                            f"{unit}, the file holds {have}; the file is corrupt")


def _load_external(tensor: onnx.TensorProto, owner: str, where: str, base: Path | None) -> None:
    """Read an external tensor's bytes into ``raw_data``, from inside the model's directory."""
    if base is None:
        raise OnnxFileError(f"{where}: {owner} keeps its data in an external file, which "
                            "vkumd reads only for a model loaded from its path (pass the "
                            ".onnx file's path, not its bytes or a ModelProto)")
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    target = (base / location).resolve()
    if not location or Path(location).is_absolute() or not target.is_relative_to(
            base.resolve()):
        raise OnnxFileError(f"{where}: {owner} names external data {location[:200]!r}, which "
                            f"is not a file inside the model's directory {base}; vkumd reads "
                            "external data only from there")
    try:
        offset, length = int(info.get("offset", "0")), info.get("length")
        length = int(length) if length is not None else None
    except ValueError:
        raise OnnxFileError(f"{where}: {owner}: external data offset {info.get('offset')!r} "
                            f"or length {info.get('length')!r} is not an integer") from None
    element = _element(tensor, owner, where)
    count = math.prod(tensor.dims)
    need = (-(-count // _PACKED[tensor.data_type]) if tensor.data_type in _PACKED
            else count * element.itemsize)
    fd, size = open_regular(target, OnnxFileError)
    try:
        if offset < 0 or (length is not None and length != need) or offset + need > size:
            raise OnnxFileError(f"{where}: {owner}: dims {list(tensor.dims)} need {need} bytes "
                                f"of {target} from offset {offset} (length field {length}); "
                                f"the file has {size} bytes")
        tensor.raw_data = pread_exact(fd, need, offset, target, owner, OnnxFileError)
    finally:
        os.close(fd)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


def ordered_nodes(graph: onnx.GraphProto, where: str) -> list[onnx.NodeProto]:
    """The graph's nodes, checked and in an order where each follows what it reads.

    Args:
        graph: the (top-level) graph.
        where: how messages name the model.

    Returns:
        The nodes: as stored when already ordered, else sorted (stable).

    Raises:
        MalformedGraphError: two nodes write one name, a node writes a graph input or an
            initializer, an output has no producer, a node reads a name nothing defines, or
            the nodes form a cycle; naming the nodes and the name.
    """
    sources: dict[str, str] = {}
    for t in graph.initializer:
        if t.name in sources:
            raise MalformedGraphError(f"{where}: two initializers are named {t.name!r}")
        sources[t.name] = "initializer"
    for vi in graph.input:
        if sources.get(vi.name) == "graph input":
            raise MalformedGraphError(f"{where}: two graph inputs are named {vi.name!r}")
        sources.setdefault(vi.name, "graph input")
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.output:
            if not name:
                continue
            if name in producer:
                raise MalformedGraphError(
                    f"{where}: {node_label(nodes[producer[name]], producer[name])} and "
                    f"{node_label(node, i)} both write {name!r}; a name has one writer "
                    "(onnxruntime refuses this model too)")
            if name in sources:
                raise MalformedGraphError(
                    f"{where}: {node_label(node, i)} writes {name!r}, which is a "
                    f"{sources[name]}; a node output may not shadow one (onnxruntime refuses "
                    "this model too)")
            producer[name] = i
    for vi in graph.output:
        if vi.name not in producer and vi.name not in sources:
            raise MalformedGraphError(f"{where}: the graph declares output {vi.name!r}, but no "
                                      "node, input or initializer produces it")
    deps: list[set[int]] = []
    for i, node in enumerate(nodes):
        for name in node.input:
            if name and name not in producer and name not in sources:
                raise MalformedGraphError(f"{where}: {node_label(node, i)} reads {name!r}, "
                                          "which no node, graph input or initializer defines")
        deps.append({producer[n] for n in node.input if n in producer})
    if all(j < i for i, d in enumerate(deps) for j in d):
        return nodes
    return [nodes[i] for i in _sorted(nodes, deps, where)]


def _sorted(nodes: list[onnx.NodeProto], deps: list[set[int]], where: str) -> list[int]:
    """Kahn's algorithm, taking the lowest index ready first (stable for ordered parts)."""
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in nodes]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(nodes):
        stuck = min(i for i, n in enumerate(waiting) if n)
        name = next(n for n in nodes[stuck].input
                    if n and any(waiting[j] for j in deps[stuck] if n in nodes[j].output))
        raise MalformedGraphError(f"{where}: the nodes form a cycle: "
                                  f"{node_label(nodes[stuck], stuck)} reads {name!r}, which "
                                  "depends on its own result; an ONNX graph is acyclic")
    return order
