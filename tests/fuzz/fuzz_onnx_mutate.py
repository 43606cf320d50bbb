"""Seeded field-level mutations of ONNX models (``ModelProto``), and byte-level ones of the
serialized file.

Each mutation breaks one rule an importer must check or survive: dims and dtypes that
disagree with data, attributes of the wrong value or type, names that two nodes write or
that shadow inputs, dropped and duplicated nodes, cycles, truncated ``raw_data``, huge
shapes fed to shape-producing ops.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import onnx
from fuzz_mutate import EDGE_FLOATS, edge_int, mutate_bytes
from onnx import TensorProto

_TYPES = [t for t in TensorProto.DataType.values() if t != TensorProto.UNDEFINED] + [0, 99]
_OPS = ["Add", "MatMul", "Gemm", "Reshape", "ConstantOfShape", "Expand", "Tile", "Range",
        "Gather", "Softmax", "LayerNormalization", "Concat", "Slice", "Transpose", "Cast",
        "Identity", "Where", "Loop", "If", "NoSuchOp", ""]


def _value_infos(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)


def _names(m: onnx.ModelProto) -> list[str]:
    names = [vi.name for vi in m.graph.input] + [t.name for t in m.graph.initializer]
    return names + [o for n in m.graph.node for o in n.output]


def change_dim(m: onnx.ModelProto, rng: random.Random) -> None:
    """A graph input's or output's dim set to a boundary value, a new symbol, or removed."""
    vis = [vi for vi in _value_infos(m) if vi.type.tensor_type.HasField("shape")]
    if not vis:
        return
    shape = rng.choice(vis).type.tensor_type.shape
    if not shape.dim:
        shape.dim.add().dim_value = edge_int(rng) % 2**63
        return
    dim = rng.choice(shape.dim)
    roll = rng.random()
    if roll < 0.6:
        dim.dim_value = edge_int(rng) % 2**63
    elif roll < 0.8:
        dim.dim_param = rng.choice(["batch", "seq", "n", "", "x" * 300])
    else:
        del shape.dim[rng.randrange(len(shape.dim))]


def change_dtype(m: onnx.ModelProto, rng: random.Random) -> None:
    """A value's or an initializer's element type changed (data left as it was)."""
    if m.graph.initializer and rng.random() < 0.5:
        rng.choice(m.graph.initializer).data_type = rng.choice(_TYPES)
    else:
        rng.choice(_value_infos(m)).type.tensor_type.elem_type = rng.choice(_TYPES)


def change_initializer_dims(m: onnx.ModelProto, rng: random.Random) -> None:
    """An initializer's dims no longer match its data (huge, zero, negative, one more)."""
    if not m.graph.initializer:
        return
    t = rng.choice(m.graph.initializer)
    if t.dims and rng.random() < 0.7:
        t.dims[rng.randrange(len(t.dims))] = edge_int(rng) % 2**63 - (2**62 if
                                                                       rng.random() < 0.1 else 0)
    else:
        t.dims.append(rng.choice([0, 2, 2**40]))


def corrupt_raw_data(m: onnx.ModelProto, rng: random.Random) -> None:
    """An initializer's raw_data truncated, grown, or moved to the typed fields."""
    inits = [t for t in m.graph.initializer if t.raw_data]
    if not inits:
        return
    t = rng.choice(inits)
    roll = rng.random()
    if roll < 0.6:
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data))]
    elif roll < 0.8:
        t.raw_data = t.raw_data + b"\0" * rng.randint(1, 7)
    else:
        t.float_data.extend([1.0, 2.0])  # both raw and typed data set


def huge_numbers(m: onnx.ModelProto, rng: random.Random) -> None:
    """An integer initializer's values (shapes, axes, starts) or a float one's set to
    boundary numbers."""
    if not m.graph.initializer:
        return
    t = rng.choice(m.graph.initializer)
    array = onnx.numpy_helper.to_array(t).copy()
    if array.size == 0:
        return
    flat = array.reshape(-1)
    i = rng.randrange(flat.size)
    if array.dtype.kind in "iu":
        info_max = int(np.iinfo(array.dtype).max)
        flat[i] = rng.choice([0, -1, -2, 10**6, 10**9, info_max, -info_max]) % (info_max + 1)
        if array.dtype.kind == "i" and rng.random() < 0.5:
            flat[i] = -flat[i]
    elif array.dtype.kind == "f":
        with np.errstate(over="ignore"):  # 1e300 in float16 is the infinity wanted
            flat[i] = rng.choice(EDGE_FLOATS)
    t.CopyFrom(onnx.numpy_helper.from_array(array, t.name))


def change_attribute(m: onnx.ModelProto, rng: random.Random) -> None:
    """An attribute's value set to a boundary, its type changed, or it removed/added."""
    nodes = list(m.graph.node)
    if not nodes:
        return
    node = rng.choice(nodes)
    roll = rng.random()
    if not node.attribute or roll < 0.15:
        node.attribute.append(onnx.helper.make_attribute(
            rng.choice(["axis", "perm", "epsilon", "to", "value", "bogus"]),
            rng.choice([edge_int(rng), rng.choice(EDGE_FLOATS), [edge_int(rng)] * 3, "s"])))
        return
    attr = rng.choice(node.attribute)
    if roll < 0.3:
        node.attribute.remove(attr)
    elif roll < 0.45:  # the type tag changed, the value kept in the old field
        attr.type = rng.choice(list(onnx.AttributeProto.AttributeType.values()))
    elif attr.type == onnx.AttributeProto.INT or roll < 0.55:
        attr.type, attr.i = onnx.AttributeProto.INT, edge_int(rng) % 2**63 - (
            2**63 if rng.random() < 0.3 else 0)
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(EDGE_FLOATS)
    elif attr.type == onnx.AttributeProto.INTS:
        values = list(attr.ints) or [0]
        values[rng.randrange(len(values))] = edge_int(rng) % 2**62
        if rng.random() < 0.3:
            values = values + values
        del attr.ints[:]
        attr.ints.extend(values)
    elif attr.type == onnx.AttributeProto.TENSOR:
        attr.t.dims[:] = [edge_int(rng) % 2**40]
    else:
        attr.type, attr.f = onnx.AttributeProto.FLOAT, rng.choice(EDGE_FLOATS)


def rename(m: onnx.ModelProto, rng: random.Random) -> None:
    """A node input or output renamed: to another value (two writers, shadowing, a cycle),
    to nothing, or to a name no one writes; or a graph output renamed."""
    nodes = list(m.graph.node)
    if not nodes:
        return
    node = rng.choice(nodes)
    names = _names(m)
    target = rng.choice(names + ["", "nowhere", node.output[0] if node.output else "x"])
    if rng.random() < 0.5 and node.input:
        node.input[rng.randrange(len(node.input))] = target
    elif node.output:
        node.output[rng.randrange(len(node.output))] = target
    if rng.random() < 0.15 and m.graph.output:
        rng.choice(m.graph.output).name = rng.choice(names + ["nowhere"])


def restructure(m: onnx.ModelProto, rng: random.Random) -> None:
    """A node dropped, duplicated, moved, or its inputs added/removed; an initializer
    duplicated or shadowing an input."""
    nodes = m.graph.node
    roll = rng.random()
    if roll < 0.3 and nodes:
        del nodes[rng.randrange(len(nodes))]
    elif roll < 0.5 and nodes:
        nodes.insert(rng.randrange(len(nodes) + 1), rng.choice(list(nodes)))
    elif roll < 0.6 and len(nodes) > 1:
        node = nodes[rng.randrange(len(nodes))]
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        nodes.remove(node)
        nodes.insert(rng.randrange(len(nodes) + 1), copy)
    elif roll < 0.75 and nodes:
        node = rng.choice(list(nodes))
        if node.input and rng.random() < 0.5:
            del node.input[-1]
        else:
            node.input.append(rng.choice(_names(m)))
    elif roll < 0.85 and m.graph.initializer:
        t = rng.choice(list(m.graph.initializer))
        dup = onnx.TensorProto()
        dup.CopyFrom(t)
        if m.graph.input and rng.random() < 0.5:
            dup.name = rng.choice(m.graph.input).name
        m.graph.initializer.append(dup)
    elif m.graph.output:
        m.graph.output.append(m.graph.output[0])


def change_op(m: onnx.ModelProto, rng: random.Random) -> None:
    """A node's op type, domain, or the model's opset changed."""
    roll = rng.random()
    if roll < 0.6 and m.graph.node:
        rng.choice(list(m.graph.node)).op_type = rng.choice(_OPS)
    elif roll < 0.75 and m.graph.node:
        rng.choice(list(m.graph.node)).domain = rng.choice(["com.microsoft", "ai.onnx.ml", "x"])
    elif m.opset_import:
        m.opset_import[0].version = rng.choice([0, 1, 6, 12, 13, 99, 2**62])
    if rng.random() < 0.1:
        m.ir_version = rng.choice([0, 1, 3, 99, 2**62])


def huge_constant(m: onnx.ModelProto, rng: random.Random) -> None:
    """A ConstantOfShape/Expand/Tile/Range of a huge size added and fed to an output."""
    n = rng.choice([16000, 10**5, 2**31, 10**9])
    name = f"huge_{rng.randint(0, 99)}"
    shape = onnx.numpy_helper.from_array(np.array([n, n], "int64"),
                                         name + "_shape")
    m.graph.initializer.append(shape)
    op = rng.choice(["ConstantOfShape", "Expand", "Range"])
    if op == "ConstantOfShape":
        node = onnx.helper.make_node(op, [shape.name], [name])
    elif op == "Expand":
        one = onnx.numpy_helper.from_array(np.ones(1, "float32"), name + "_one")
        m.graph.initializer.append(one)
        node = onnx.helper.make_node(op, [one.name, shape.name], [name])
    else:
        parts = [onnx.numpy_helper.from_array(np.array(v, "int64"), f"{name}_{i}")
                 for i, v in enumerate([0, n * n, 1])]
        m.graph.initializer.extend(parts)
        node = onnx.helper.make_node(op, [p.name for p in parts], [name])
    m.graph.node.append(node)
    m.graph.output.append(onnx.helper.make_tensor_value_info(name, TensorProto.FLOAT, None))


_SWAPS = [["Add", "Sub", "Mul", "Div", "Max", "Min"],
          ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Erf", "Abs", "Identity", "Sqrt"],
          ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"]]


def plausible_values(m: onnx.ModelProto, rng: random.Random) -> None:
    """A float initializer's values redrawn at another scale (large, tiny, zero, negative):
    the model stays valid, so its result is compared."""
    inits = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT]
    if not inits:
        return
    t = rng.choice(inits)
    array = onnx.numpy_helper.to_array(t)
    scale = rng.choice([0.0, -1.0, 1e-30, 1e-3, 10.0, 1e4, 1e18])
    values = np.random.default_rng(rng.randrange(2**32)).standard_normal(array.shape) * scale
    t.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), t.name))


def plausible_op(m: onnx.ModelProto, rng: random.Random) -> None:
    """An elementwise or reduction node swapped for another of the same arity, or a
    commutative node's inputs swapped."""
    nodes = [n for n in m.graph.node if any(n.op_type in group for group in _SWAPS)]
    if not nodes:
        return
    node = rng.choice(nodes)
    if len(node.input) == 2 and rng.random() < 0.3:
        node.input[0], node.input[1] = node.input[1], node.input[0]
        return
    group = next(g for g in _SWAPS if node.op_type in g)
    node.op_type = rng.choice(group)


def plausible_attribute(m: onnx.ModelProto, rng: random.Random) -> None:
    """An int attribute moved to a small in-range value (axes, keepdims, transB), a float
    one to a moderate value (epsilon, alpha), a perm permuted."""
    attrs = [a for n in m.graph.node for a in n.attribute
             if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT,
                           onnx.AttributeProto.INTS)]
    if not attrs:
        return
    attr = rng.choice(attrs)
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rng.choice([-3, -2, -1, 0, 1, 2, 3])
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice([0.0, 1e-12, 1e-3, 0.5, 2.0, -1.0, 1e4])
    else:
        values = list(attr.ints)
        rng.shuffle(values)
        del attr.ints[:]
        attr.ints.extend(values)


PLAUSIBLE: list[Callable[[onnx.ModelProto, random.Random], None]] = [
    plausible_values, plausible_op, plausible_attribute]
FIELD_MUTATORS: list[Callable[[onnx.ModelProto, random.Random], None]] = [
    change_dim, change_dtype, change_initializer_dims, corrupt_raw_data, huge_numbers,
    change_attribute, change_attribute, rename, rename, restructure, restructure, change_op,
    huge_constant]


def mutate_onnx(seed_model: onnx.ModelProto, rng: random.Random) -> tuple[bytes, str]:
    """The serialized model after one to three field mutations (two in five of them
    :data:`PLAUSIBLE`, which keep it valid) (and, one case in twenty, a
    byte-level one on top), or (one case in ten) after byte-level mutations alone.

    Returns:
        The file's bytes and the mutations' names (for the failure report).
    """
    if rng.random() < 0.1:
        return mutate_bytes(seed_model.SerializeToString(), rng), "bytes"
    m = onnx.ModelProto()
    m.CopyFrom(seed_model)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        mutator = rng.choice(PLAUSIBLE if rng.random() < 0.4 else FIELD_MUTATORS)
        try:
            mutator(m, rng)
        except (ValueError, TypeError, IndexError, KeyError):
            continue  # an earlier mutation left nothing this one can decode
        done.append(mutator.__name__)
    data = m.SerializeToString()
    if rng.random() < 0.05:
        data, done = mutate_bytes(data, rng), done + ["bytes"]
    return data, "+".join(done)
