"""``CompiledGraph(weights=...)``: device tensors the caller already holds stand for graph
weights of the same name (read where they are, never copied, never freed by the graph);
weights not given are uploaded and owned as before."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder

W = np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7)
BIAS = np.arange(7, dtype=np.float32)


def _graph():
    b = GraphBuilder("given")
    x = b.input("x", ("n", 5))
    b.output(b.add(b.matmul(x, b.weight("w", W)), b.weight("bias", BIAS)))
    return b.build()


def test_a_given_tensor_is_the_weight_and_stays_the_callers(ctx) -> None:
    graph = _graph()
    w = ctx.tensor(W)
    used = ctx.memory.used_bytes()
    compiled = CompiledGraph(graph, ctx, weights={"w": w})
    try:
        by_name = {v.name: compiled.weights[v.id] for v in graph.weights}
        assert by_name["w"] is w and by_name["bias"] is not None
        # Only the bias was uploaded.
        assert ctx.memory.used_bytes() - used < W.nbytes
        x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
        (got,) = compiled(x=x)
        np.testing.assert_allclose(got.numpy(), x @ W + BIAS, rtol=1e-5, atol=1e-5)
        # The graph reads the tensor where it is: a later write to it is seen.
        w.write(2 * W)
        (got,) = compiled(x=x)
        np.testing.assert_allclose(got.numpy(), x @ (2 * W) + BIAS, rtol=1e-5, atol=1e-5)
    finally:
        compiled.release()
    assert not w.released and by_name["bias"].released
    np.testing.assert_array_equal(w.numpy(), 2 * W)
    w.release()


@pytest.mark.parametrize(("given", "error", "match"), [
    (lambda ctx: ctx.tensor(W.T.copy()), VkumdValueError, r"weights\['w'\] is float32 \(7, 5\); "
     r"the graph's weight is float32 \(5, 7\)"),
    (lambda ctx: ctx.tensor(W, dtype="float16"), VkumdValueError, "float16"),
    (lambda ctx: W, VkumdTypeError, r"weights\['w'\] is ndarray, not a vkumd Tensor"),
])
def test_a_given_tensor_that_does_not_fit_is_refused(ctx, given, error, match) -> None:
    used = ctx.memory.used_bytes()
    tensor = given(ctx)
    with pytest.raises(error, match=match):
        CompiledGraph(_graph(), ctx, weights={"w": tensor})
    if hasattr(tensor, "release"):
        tensor.release()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == used  # what the failed graph uploaded is freed
