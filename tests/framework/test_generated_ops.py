"""The float ops that run as generated kernels (exp, sqrt, tanh, erf, sigmoid, hardswish, and
any op declared the same way), against float64 numpy through their public ``vkumd.ops``
functions, a compiled graph and the ONNX importer.

The op list is the registry's: every one-input op with an elementwise trait whose lowering is
the one-step generated kernel. Outputs start poisoned (NaN); sizes that are and are not
multiples of 4 take the vector and scalar paths.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (
    FLOATS,
    assert_close,
    assert_each_raises,
    poisoned,
    sample,
    stored,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import OPS, GraphBuilder, evaluate
from vkumd.framework.opset.common import one_step

GENERATED = sorted(name for name, op in OPS.items()
                   if op.lower is one_step and op.elementwise is not None
                   and op.elementwise.arity == 1 and op.eager is not None)
# Two-input ops declared the same way (swiglu): broadcast pairs of shapes.
GENERATED_BINARY = sorted(name for name, op in OPS.items()
                          if op.lower is one_step and op.elementwise is not None
                          and op.elementwise.arity == 2 and op.eager is not None)
SHAPES = [(1,), (7,), (3, 5), (2, 3, 8), (33, 17)]
PAIRS = [((7,), (7,)), ((3, 5), (3, 5)), ((2, 3, 8), (3, 8)), ((33, 17), (33, 1)),
         ((1, 4), (6, 4))]


# Each op's inputs within its domain, and where float16 holds the result (e**11.1 and
# sinh(11.1) overflow it): a scale of the normal sample, then a map onto the domain.
_SCALES = {"exp": 1.5, "sinh": 1.5, "cosh": 1.5, "asin": 0.4, "acos": 0.4, "atanh": 0.4}
_DOMAINS = {"sqrt": np.abs, "log": lambda x: np.abs(x) + 0.01,
            "acosh": lambda x: np.abs(x) + 1.0, "asin": lambda x: np.clip(x, -1.0, 1.0),
            "acos": lambda x: np.clip(x, -1.0, 1.0), "atanh": lambda x: np.clip(x, -0.99, 0.99)}


def _inputs(rng: np.random.Generator, op: str, dtype: str, shape: tuple[int, ...]
            ) -> np.ndarray:
    x = sample(rng, dtype, shape, scale=_SCALES.get(op, 3.0))
    domain = _DOMAINS.get(op)
    # The mapped values are rounded to the type again (|x| + 1 may not be representable).
    return x if domain is None else stored(domain(x), dtype)


def _reference(op: str, x: np.ndarray) -> np.ndarray:
    # The record's float64 reference on the stored values; then one rounding to the type.
    return OPS[op].reference([x], OPS[op].full_attrs({}), [x.shape])[0]


def test_the_registry_lists_them() -> None:
    assert {"exp", "sqrt", "tanh", "erf", "sigmoid", "hardswish"} <= set(GENERATED)
    assert all(callable(getattr(ops, name)) for name in GENERATED)
    assert {"swiglu", "prelu"} <= set(GENERATED_BINARY)
    assert all(callable(getattr(ops, name)) for name in GENERATED_BINARY)


def _binary_reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(a.shape, b.shape)
    return OPS[op].reference([a, b], OPS[op].full_attrs({}), [shape])[0]


# prelu's slope broadcasts to x's shape, never past it.
BINARY_CASES = [(op, shapes) for op in GENERATED_BINARY for shapes in PAIRS
                if op != "prelu" or np.broadcast_shapes(*shapes) == shapes[0]]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("op", "shapes"), BINARY_CASES, ids=str)
def test_binary_eager_matches_float64(ctx, op: str, dtype: str,
                                      shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    rng = np.random.default_rng()
    a, b = (sample(rng, dtype, s, scale=3.0) for s in shapes)
    shape = np.broadcast_shapes(*shapes)
    out = poisoned(ctx, shape, dtype)
    got = getattr(ops, op)(tensor(ctx, a, dtype), tensor(ctx, b, dtype), out=out)
    assert got is out and got.dtype.name == dtype
    assert_close(got.numpy().astype(np.float64), _binary_reference(op, a, b), dtype,
                 f"{op} {dtype}")


@pytest.mark.parametrize("op", GENERATED_BINARY)
def test_binary_fuses_in_a_compiled_graph(ctx, op: str) -> None:
    """Between two other elementwise steps the op runs inside one generated kernel."""
    rng = np.random.default_rng()
    b = GraphBuilder(op)
    x = b.input("x", ("n", 19))
    y = b.input("y", ("n", 19))
    b.output(b.mul(b.op(op, b.mul(x, 0.5), y), 2.0))
    graph = b.build()
    compiled = vkumd.compile(lambda x, y: getattr(ops, op)(x * 0.5, y) * 2.0,
                             {"x": np.ones((6, 19), np.float32),
                              "y": np.ones((6, 19), np.float32)},
                             ctx=ctx, dynamic={"x": {0: "n"}, "y": {0: "n"}})
    assert compiled.executor == "compiled"
    fused = vkumd.framework.graph.run_passes(graph)
    assert [n.op for n in fused.nodes] == ["fused_elementwise"]
    for rows in (6, 3):
        data = {k: rng.standard_normal((rows, 19)).astype(np.float32) * 3 for k in "xy"}
        want = evaluate(graph, data)[0]
        assert_close(compiled(**data).numpy().astype(np.float64), want, "float32", op)


def test_swiglu_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.swiglu(x, ctx.tensor(np.ones((2, 3), np.float16)))),
        (VkumdTypeError, lambda: ops.swiglu(ctx.tensor(np.ones((2, 3), np.int32)),
                                            ctx.tensor(np.ones((2, 3), np.int32)))),
        (VkumdValueError, lambda: ops.swiglu(x, ctx.tensor(np.ones((2, 4), np.float32)))),
        (VkumdValueError, lambda: ops.swiglu(x, x, out=ctx.empty((3, 2), "float32"))),
        (VkumdTypeError, lambda: ops.swiglu(x, np.ones((2, 3), np.float32))),
    ], "swiglu")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", GENERATED)
def test_eager_matches_float64(ctx, op: str, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = _inputs(rng, op, dtype, shape)
    out = poisoned(ctx, shape, dtype)
    got = getattr(ops, op)(tensor(ctx, x, dtype), out=out)
    assert got is out and got.dtype.name == dtype
    assert_close(got.numpy().astype(np.float64), _reference(op, x), dtype, f"{op} {dtype}")


def test_hardswish_pieces(ctx) -> None:
    """Each piece of x * clip(x/6 + 1/2, 0, 1): zero below -3, x above 3, the curve between."""
    x = np.array([-7.0, -3.0, -1.5, 0.0, 0.75, 2.9, 3.0, 12.5], np.float32)
    got = ops.hardswish(ctx.tensor(x)).numpy()
    want = x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert got[0] == 0.0 and got[-1] == 12.5


@pytest.mark.parametrize("op", GENERATED)
def test_compiled_graph_matches_float64(ctx, op: str) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder(op)
    x = b.input("x", ("n", 19))
    b.output(b.op(op, b.mul(x, 0.5)))  # two nodes: fused into one generated kernel
    graph = b.build()
    # Twice the op's inputs (exact in float32), so that x * 0.5 is within its domain.
    data = {"x": (2.0 * _inputs(rng, op, "float32", (6, 19))).astype(np.float32)}

    def f(x):
        return getattr(ops, op)(x * 0.5)

    compiled = vkumd.compile(f, {"x": data["x"]}, ctx=ctx, dynamic={"x": {0: "n"}})
    assert compiled.executor == "compiled"
    for rows in (6, 3):
        feed = data["x"][:rows]
        want = evaluate(graph, {"x": feed})[0]
        assert_close(compiled(x=feed).numpy().astype(np.float64), want, "float32", op)


def test_hardswish_from_onnx_and_its_bad_inputs(ctx) -> None:
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper

    import vkumd.onnx

    graph = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"])], "hs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 9])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    x = np.random.default_rng().standard_normal((5, 9)).astype(np.float32) * 4
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)
    got = got[next(iter(got))] if isinstance(got, dict) else got
    np.testing.assert_allclose(np.asarray(got), x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6,
                               atol=1e-7)
    ints = ctx.tensor(np.arange(4, dtype=np.int32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.hardswish(ints)),
        (VkumdTypeError, lambda: ops.hardswish("x")),
        (VkumdValueError, lambda: ops.hardswish(ctx.tensor(np.ones(3, np.float32)),
                                                out=ctx.empty((4,), "float32"))),
    ], "hardswish")
