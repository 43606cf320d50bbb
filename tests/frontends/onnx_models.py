"""ONNX models built with ``onnx.helper`` for the frontend tests (no files, no exporter)."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

OPSET = 17


class Net:
    """A tiny model builder: nodes, initializers and constants with fresh names."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, array: np.ndarray, base: str = "w") -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, *shape: int, scale: float = 0.3) -> str:
        return self.init((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs: object) -> str | list[str]:
        name = self.name(op_type.lower())
        outs = [f"{name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def model(self, inputs: list[onnx.ValueInfoProto], outputs: list[str],
              out_types: list[int] | None = None) -> onnx.ModelProto:
        types = out_types or [T.FLOAT] * len(outputs)
        outs = [helper.make_tensor_value_info(o, t, None)
                for o, t in zip(outputs, types, strict=True)]
        graph = helper.make_graph(self.nodes, "net", inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return model


def erf_gelu(net: Net, x: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` as torch exports it."""
    e = net.op("Erf", net.op("Div", x, net.init(np.float32(math.sqrt(2.0)), "root2")))
    one = net.op("Add", e, net.init(np.float32(1.0), "one"))
    return net.op("Mul", net.op("Mul", x, one), net.init(np.float32(0.5), "half"))


def reshape_from_shape(net: Net, x: str, like: str, tail: list[int]) -> str:
    """``Reshape(x, [shape(like)[0], shape(like)[1], *tail])`` through Shape/Gather/Concat."""
    s = net.op("Shape", like)
    parts = [net.op("Unsqueeze", net.op("Gather", s, net.init(np.int64(i), "idx")),
                    net.init(np.array([0], np.int64), "axes")) for i in (0, 1)]
    target = net.op("Concat", *parts, net.init(np.array(tail, np.int64), "tail"), axis=0)
    return net.op("Reshape", x, target)


def device_model() -> onnx.ModelProto:
    """Most operators that have device kernels, on ``x [batch, seq, 8]`` and ``ids``."""
    n = Net(1)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", 8])
    ids = helper.make_tensor_value_info("ids", T.INT64, ["batch", "seq"])
    h = n.op("Add", "x", n.op("Gather", n.weight(16, 8), "ids"))
    h = n.op("LayerNormalization", h, n.weight(8), n.weight(8), axis=-1, epsilon=1e-5)
    a = n.op("Add", n.op("MatMul", h, n.weight(8, 8)), n.weight(8))
    a = erf_gelu(n, a)
    heads = n.op("Transpose", reshape_from_shape(n, a, "x", [2, 4]), perm=[0, 2, 1, 3])
    probs = n.op("Softmax", n.op("Mul", heads, n.init(np.float32(0.5), "c")), axis=-1)
    back = reshape_from_shape(n, n.op("Transpose", probs, perm=[0, 2, 1, 3]), "x", [8])
    r = n.op("Relu", n.op("Sub", back, n.op("Neg", a)))
    left, right = n.op("Split", r, n.init(np.array([3, 5], np.int64), "split"), axis=-1,
                       outputs=2)
    joined = n.op("Concat", right, left, axis=-1)
    sliced = n.op("Slice", joined, n.init(np.array([1], np.int64), "s"),
                  n.init(np.array([7], np.int64), "e"), n.init(np.array([2], np.int64), "ax"))
    recip = n.op("Reciprocal", n.op("Add", n.op("Pow", sliced, n.init(np.float32(2.0), "p")),
                                    n.init(np.float32(1.0), "one")))
    mean = n.op("ReduceMean", recip, axes=[-1], keepdims=1)
    total = n.op("ReduceSum", recip, n.init(np.array([-1], np.int64), "rs"), keepdims=0)
    peak = n.op("ReduceMax", n.op("Identity", recip), axes=[2], keepdims=0)
    flat = n.op("Flatten", n.op("Squeeze", n.op("Unsqueeze", mean,
                                                n.init(np.array([0], np.int64), "u")),
                                n.init(np.array([0], np.int64), "q")), axis=2)
    gemm_in = n.op("Reshape", n.op("Cast", recip, to=T.FLOAT),
                   n.init(np.array([-1, 6], np.int64), "shape"))
    g = n.op("Gemm", gemm_in, n.weight(3, 6), n.weight(3), transB=1, alpha=0.5, beta=2.0)
    eq = n.op("Equal", "ids", n.init(np.int64(3), "three"))
    return n.model([x, ids], [flat, total, peak, g, eq],
                   [T.FLOAT, T.FLOAT, T.FLOAT, T.FLOAT, T.BOOL])


def ir_only_model() -> onnx.ModelProto:
    """Operators the IR has that run as generated elementwise kernels (Exp, Sqrt, Tanh,
    Sigmoid, Erf, Where), and Pow 0.5, ConstantOfShape, Expand."""
    n = Net(2)
    x = helper.make_tensor_value_info("x", T.FLOAT, [3, 4])
    pos = n.op("Add", n.op("Mul", "x", "x"), n.init(np.float32(1.0), "one"))
    s = n.op("Add", n.op("Sqrt", pos), n.op("Pow", pos, n.init(np.float32(0.5), "half")))
    t = n.op("Add", n.op("Tanh", "x"), n.op("Sigmoid", "x"))
    e = n.op("Add", n.op("Exp", n.op("Neg", pos)), n.op("Erf", "x"))
    zeros = n.op("ConstantOfShape", n.op("Shape", "x"),
                 value=numpy_helper.from_array(np.zeros(1, np.float32)))
    w = n.op("Where", n.op("Equal", n.op("Relu", "x"), zeros), t, e)
    grown = n.op("Expand", n.weight(4), n.init(np.array([3, 4], np.int64), "shape"))
    return n.model([x], [n.op("Add", n.op("Add", s, w), grown)])
