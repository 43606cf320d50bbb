"""``vkumd.ops.einsum`` (eager and traced) against float64 ``numpy.einsum`` on odd sizes in
every float dtype, and each bad input refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (
    FLOATS,
    assert_close,
    assert_each_raises,
    sample,
    stored,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

# (equation, operand shapes): ONNX's node-test equations and the contractions models use.
CASES = [
    ("bij,bjk->bik", [(5, 3, 7), (5, 7, 4)]),
    ("ij,jk", [(9, 5), (5, 3)]),
    ("i,i", [(13,)]),
    ("ij->i", [(3, 11)]),
    ("ij->ji", [(3, 5)]),
    ("->", [()]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (3, 5, 6)]),
    ("i,j->ij", [(5,), (3,)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("abc->ca", [(3, 5, 7)]),
    ("bi,bj", [(4, 3), (4, 5)]),
]


def _operands(shapes: list[tuple[int, ...]], equation: str) -> list[tuple[int, ...]]:
    # "i,i" names two operands of one shape.
    terms = equation.split("->")[0].split(",")
    return shapes if len(shapes) == len(terms) else shapes * len(terms)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[c[0] for c in CASES])
def test_matches_numpy_einsum(ctx, equation: str, shapes: list[tuple[int, ...]],
                              dtype: str) -> None:
    rng = np.random.default_rng()
    xs = [sample(rng, dtype, s) for s in _operands(shapes, equation)]
    got = ops.einsum(equation, *(tensor(ctx, x, dtype) for x in xs))
    want = np.einsum(equation, *xs)
    assert got.dtype.name == dtype
    assert_close(got.numpy().astype(np.float64), stored(want, dtype), dtype, equation)


def test_traced_einsum_is_the_same_ops(ctx) -> None:
    rng = np.random.default_rng()
    q, k = (sample(rng, "float32", (2, 3, 5, 8)) for _ in range(2))
    compiled = vkumd.compile(lambda q, k: ops.einsum("bhqd,bhkd->bhqk", q * 0.5, k),
                             {"q": q.astype(np.float32), "k": k.astype(np.float32)}, ctx=ctx)
    got = compiled(q=q.astype(np.float32), k=k.astype(np.float32))
    got = got if isinstance(got, np.ndarray) else got.numpy()
    assert_close(got, np.einsum("bhqd,bhkd->bhqk", q * 0.5, k), "float32", "traced")


def test_bad_inputs_are_refused(ctx) -> None:
    a = ctx.tensor(np.ones((3, 4), np.float32))
    b = ctx.tensor(np.ones((4, 5), np.float32))
    h = ctx.tensor(np.ones((4, 5), np.float16))
    square = ctx.tensor(np.ones((3, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.einsum(3, a)),
        (VkumdTypeError, lambda: ops.einsum("ij,jk", a, h)),
        (VkumdTypeError, lambda: ops.einsum("ij", np.ones((3, 4)))),
        (VkumdValueError, lambda: ops.einsum("ij,jk->ik", a)),
        (VkumdValueError, lambda: ops.einsum("ijk->i", a)),
        (VkumdValueError, lambda: ops.einsum("ii->i", square)),
        (VkumdValueError, lambda: ops.einsum("ij,kj->ik", a, b)),
        (VkumdValueError, lambda: ops.einsum("ij->iz", a)),
        (VkumdValueError, lambda: ops.einsum("i-j", a)),
    ], "einsum")


def test_onnx_einsum_runs_on_the_device(ctx) -> None:
    """ONNX's Einsum imports as the same lowering (float32 here: ONNX's own node tests use
    float64, which vkumd does not store)."""
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")
    from onnx import TensorProto, helper

    import vkumd.onnx

    rng = np.random.default_rng()
    x, y = (rng.standard_normal(s).astype(np.float32) for s in ((5, 2, 3), (5, 3, 4)))
    node = helper.make_node("Einsum", ["x", "y"], ["z"], equation="bij, bjk -> bik")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape))
                      for n, v in (("x", x), ("y", y))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    assert isinstance(model, onnx.ModelProto)
    got = vkumd.onnx.load(model, ctx=ctx)(x=x, y=y)["z"]
    assert_close(got, np.einsum("bij,bjk->bik", x.astype(np.float64), y), "float32", "onnx")
