"""Hard-swish rewriting alone: each written-out form becomes one ``hardswish`` node with the
original's float64 reference; near-misses (another constant, another function, a value read
twice) stay; and the pipeline then folds it into the convolution before it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from fusion_checks import feeds_for, ops_of

from vkumd.framework.graph import GraphBuilder, Value, evaluate, run_passes
from vkumd.framework.graph.hardswish_rewrite import rewrite_hardswish
from vkumd.framework.graph.passes import PIPELINE

SHAPE = (2, 5, 7, 3)

Form = Callable[[GraphBuilder, Value], Value]


def _clip6(b: GraphBuilder, x: Value) -> Value:
    return b.op("clip", b.add(x, 3.0), min=0.0, max=6.0)


FORMS: dict[str, Form] = {
    "mul_then_div": lambda b, x: b.div(b.mul(x, _clip6(b, x)), 6.0),
    "mul_then_scale": lambda b, x: b.scale(b.mul(_clip6(b, x), x), 1.0 / 6.0),
    "sixth_then_mul": lambda b, x: b.mul(x, b.mul(_clip6(b, x), np.float32(1.0 / 6.0))),
    "div_then_mul": lambda b, x: b.mul(b.div(_clip6(b, x), 6.0), x),
    "three_first": lambda b, x: b.div(b.mul(x, b.op("clip", b.add(3.0, x), min=0.0,
                                                         max=6.0)), 6.0),
    "hard_sigmoid": lambda b, x: b.mul(x, b.op("hard_sigmoid", x, alpha=1.0 / 6.0,
                                               beta=0.5)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_becomes_hardswish(form: str) -> None:
    b = GraphBuilder("hs")
    x = b.input("x", SHAPE)
    b.output(FORMS[form](b, x))
    g = b.build()
    done = rewrite_hardswish(g)
    assert ops_of(done) == ["hardswish"]
    assert done.nodes[0].inputs[0] is done.inputs[0]
    # A 1/6 held in float32 differs from 1/6 by 3e-8 relative.
    feeds = feeds_for(g)
    for want, got in zip(evaluate(g, feeds), evaluate(done, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7)


def test_near_misses_stay() -> None:
    """ONNX's default hard sigmoid (alpha 0.2), a clip to [0, 5], a shift of 2, a product
    with another value, and an intermediate read twice are not hard swish."""
    cases: list[Form] = [
        lambda b, x: b.mul(x, b.op("hard_sigmoid", x)),
        lambda b, x: b.div(b.mul(x, b.op("clip", b.add(x, 3.0), min=0.0, max=5.0)), 6.0),
        lambda b, x: b.div(b.mul(x, b.op("clip", b.add(x, 2.0), min=0.0, max=6.0)), 6.0),
        lambda b, x: b.div(b.mul(b.relu(x), _clip6(b, x)), 6.0),
        lambda b, x: b.div(b.mul(x, _clip6(b, x)), 5.0),
    ]
    for make in cases:
        b = GraphBuilder("miss")
        x = b.input("x", SHAPE)
        b.output(make(b, x))
        g = b.build()
        assert ops_of(rewrite_hardswish(g)) == ops_of(g)
    b = GraphBuilder("twice")
    x = b.input("x", SHAPE)
    gate = _clip6(b, x)
    b.output(b.div(b.mul(x, gate), 6.0), gate)
    g = b.build()
    assert "hardswish" not in ops_of(rewrite_hardswish(g))


def test_conv_takes_the_rewritten_hardswish() -> None:
    """The pipeline: conv -> written-out hard swish becomes one conv2d with the activation;
    with the rewrite switched off the convolution's output is read twice and stays apart."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv_hs")
    x = b.input("x", (1, 3, 9, 11))
    w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = b.op("conv2d", x, w, None, pads=(1, 1, 1, 1))
    b.output(FORMS["mul_then_div"](b, y))
    g = b.build()
    assert PIPELINE.index("hardswish_rewrite") < PIPELINE.index("conv_epilogue_fusion")
    fused = run_passes(g)
    assert ops_of(fused) == ["conv2d"]
    assert fused.nodes[0].attrs["activation"] == "hardswish"
    assert "conv2d" in ops_of(run_passes(g, disable=["hardswish_rewrite"]))
    assert len(run_passes(g, disable=["hardswish_rewrite"]).nodes) > 1
