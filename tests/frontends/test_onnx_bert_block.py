"""A BERT encoder layer written as torch exports it (``onnx.helper``, opset 17) imports to the
graph a native model builder writes by hand, and runs on the device.

Once the fusion passes land (GEMM epilogue, attention, residual + norm), both graphs go
through the same pipeline, so comparing the graphs after passes keeps checking that the
import fuses as the native build does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_models import Net, erf_gelu, reshape_from_shape  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.graph import GraphBuilder, run_passes  # noqa: E402
from vkumd.framework.graph.ir import Graph  # noqa: E402

HIDDEN, HEADS, FFN, EPS = 16, 2, 32, 1e-12
HEAD_DIM = HIDDEN // HEADS


def _weights(seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"wq": (HIDDEN, HIDDEN), "wk": (HIDDEN, HIDDEN), "wv": (HIDDEN, HIDDEN),
              "wo": (HIDDEN, HIDDEN), "w1": (HIDDEN, FFN), "w2": (FFN, HIDDEN)}
    out = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in shapes.items()}
    for k, n in (("bq", HIDDEN), ("bk", HIDDEN), ("bv", HIDDEN), ("bo", HIDDEN), ("b1", FFN),
                 ("b2", HIDDEN), ("g1", HIDDEN), ("c1", HIDDEN), ("g2", HIDDEN),
                 ("c2", HIDDEN)):
        out[k] = (rng.standard_normal(n) * 0.1 + (1.0 if k[0] == "g" else 0.0)
                  ).astype(np.float32)
    return out


def onnx_block(w: dict[str, np.ndarray]) -> onnx.ModelProto:
    n = Net()
    names = {k: n.init(v, k) for k, v in w.items()}

    def linear(x: str, wk: str, bk: str) -> str:
        return n.op("Add", n.op("MatMul", x, names[wk]), names[bk])

    def heads(x: str, perm: list[int]) -> str:
        return n.op("Transpose", reshape_from_shape(n, x, "x", [HEADS, HEAD_DIM]), perm=perm)

    q = heads(linear("x", "wq", "bq"), [0, 2, 1, 3])
    k = heads(linear("x", "wk", "bk"), [0, 2, 3, 1])
    v = heads(linear("x", "wv", "bv"), [0, 2, 1, 3])
    scores = n.op("Div", n.op("MatMul", q, k), n.init(np.float32(math.sqrt(HEAD_DIM)), "d"))
    probs = n.op("Softmax", n.op("Add", scores, "mask"), axis=-1)
    ctx = n.op("Transpose", n.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    ctx = reshape_from_shape(n, ctx, "x", [HIDDEN])
    h = n.op("LayerNormalization", n.op("Add", linear(ctx, "wo", "bo"), "x"), names["g1"],
             names["c1"], axis=-1, epsilon=EPS)
    f = linear(erf_gelu(n, linear(h, "w1", "b1")), "w2", "b2")
    out = n.op("LayerNormalization", n.op("Add", f, h), names["g2"], names["c2"], axis=-1,
               epsilon=EPS)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", HIDDEN])
    mask = helper.make_tensor_value_info("mask", T.FLOAT, ["batch", 1, 1, "seq"])
    return n.model([x, mask], [out])


def native_block(w: dict[str, np.ndarray]) -> Graph:
    """The same layer as a model builder writes it with :class:`GraphBuilder`."""
    b = GraphBuilder("block")
    x = b.input("x", ("batch", "seq", HIDDEN))
    mask = b.input("mask", ("batch", 1, 1, "seq"))
    p = {k: b.weight(k, v) for k, v in w.items()}

    def linear(t: object, wk: str, bk: str) -> object:
        return b.add(b.matmul(t, p[wk]), p[bk])

    def split(t: object) -> object:
        return b.reshape(t, ("batch", "seq", HEADS, HEAD_DIM))

    q = b.permute(split(linear(x, "wq", "bq")), (0, 2, 1, 3))
    k = split(linear(x, "wk", "bk"))
    v = b.permute(split(linear(x, "wv", "bv")), (0, 2, 1, 3))
    # k^T as the native encoder writes it, trans_b of k in [batch, heads, seq, head_dim]
    # (the ONNX model's Transpose to [.., head_dim, seq] imports as this, so both fuse).
    k = b.permute(k, (0, 2, 1, 3))
    # The ONNX model divides by sqrt(head_dim) stored as float32; the import multiplies by
    # its reciprocal, which is what a builder writing the same constant gets.
    scores = b.scale(b.matmul(q, k, trans_b=True), 1.0 / float(np.float32(math.sqrt(HEAD_DIM))))
    probs = b.softmax(b.add(scores, mask))
    ctx = b.reshape(b.permute(b.matmul(probs, v), (0, 2, 1, 3)), ("batch", "seq", HIDDEN))
    h = b.layer_norm(b.add(linear(ctx, "wo", "bo"), x), p["g1"], p["c1"], eps=EPS)
    f = linear(b.gelu(linear(h, "w1", "b1")), "w2", "b2")
    b.output(b.layer_norm(b.add(f, h), p["g2"], p["c2"], eps=EPS))
    return b.build()


def _ops(graph: Graph) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(n.op, sorted((k, str(v)) for k, v in n.attrs.items())) for n in graph.nodes]


def test_imported_block_is_the_native_graph() -> None:
    w = _weights()
    imported = vkumd.onnx.load(onnx_block(w)).graph
    native = run_passes(native_block(w))
    assert _ops(imported) == _ops(native)
    assert [n.op for n in imported.nodes].count("attention") == 1
    assert [str(v.type) for v in imported.outputs] == [str(v.type) for v in native.outputs]


def test_imported_block_runs_on_the_device(ctx: object) -> None:
    w = _weights()
    model = onnx_block(w)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 5), np.float32)
    mask[1, ..., 3:] = -1e4  # the second sentence is two tokens shorter
    want = ReferenceEvaluator(model).run(None, {"x": x, "mask": mask})[0]
    loaded = vkumd.onnx.load(model, ctx=ctx)
    got = loaded(x=x, mask=mask)[loaded.output_names[0]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
