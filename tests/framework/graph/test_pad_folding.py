"""Pad folding: a constant ``pad`` of height and width becomes the padding of the
convolution or pooling reading it, where the two agree (value 0 for conv2d and
count-including average pooling, -inf for max pooling, no ceil mode), and the graph's float64
reference and its compiled results stay the same."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fusion_checks import feeds_for, ops_of, same_reference

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, run_passes
from vkumd.framework.graph.pad_folding import fold_pads
from vkumd.framework.graph.passes import CLEANUP
from vkumd.testing.numerics import rel_error

SHAPE = (2, 3, 9, 11)
PADS = (0, 0, 1, 2, 0, 0, 3, 0)  # top 1, left 2, bottom 3, right 0


def padded(value: float = 0.0, pads=PADS, mode: str = "constant"):
    b = GraphBuilder("pad_window")
    x = b.input("x", SHAPE)
    return b, b.op("pad", x, pads=pads, mode=mode, value=value)


def conv_weight(b: GraphBuilder):
    rng = np.random.default_rng(0)
    return b.constant(rng.standard_normal((4, SHAPE[1], 3, 2)).astype(np.float32))


def test_into_a_convolution() -> None:
    b, p = padded()
    b.output(b.op("conv2d", p, conv_weight(b), None, pads=(1, 0, 0, 1), stride=(2, 1)))
    g = b.build()
    folded = run_passes(g, ["pad_folding", "dce"])
    assert ops_of(folded) == ["conv2d"]
    assert tuple(folded.nodes[0].attrs["pads"]) == (2, 2, 3, 1)
    same_reference(g, folded)


@pytest.mark.parametrize("op, value, attrs", [
    ("max_pool2d", -math.inf, {"kernel": (5, 4), "stride": (1, 2), "pads": (1, 0, 0, 1)}),
    ("avg_pool2d", 0.0, {"kernel": (5, 3), "count_include_pad": True}),
])
def test_into_a_pooling(op: str, value: float, attrs: dict) -> None:
    b, p = padded(value)
    b.output(b.op(op, p, **attrs))
    g = b.build()
    folded = fold_pads(g)
    assert ops_of(folded) == ["pad", op] and folded.nodes[1].inputs[0] is folded.inputs[0]
    same_reference(g, folded)


@pytest.mark.parametrize("op, value, attrs, pads, mode", [
    ("conv2d", 1.0, {}, PADS, "constant"),                          # not zeros
    ("conv2d", 0.0, {}, PADS, "reflect"),                           # not constant
    ("conv2d", 0.0, {}, (1, 0, 1, 0, 0, 0, 0, 0), "constant"),      # pads the batch
    ("conv2d", 0.0, {}, (0, 0, -1, 0, 0, 0, 1, 0), "constant"),     # crops
    ("avg_pool2d", 0.0, {"kernel": (3, 3)}, PADS, "constant"),      # pads not counted
    ("max_pool2d", 0.0, {"kernel": (3, 3)}, PADS, "constant"),      # zeros could win
    ("max_pool2d", -math.inf, {"kernel": (3, 3), "ceil_mode": True}, PADS, "constant"),
    ("max_pool2d", -math.inf, {"kernel": (2, 2)}, PADS, "constant"),  # pads reach the window
])
def test_what_stays(op: str, value: float, attrs: dict, pads, mode: str) -> None:
    b, p = padded(value, pads, mode)
    if op == "conv2d":
        b.output(b.op(op, p, conv_weight(b), None))
    else:
        b.output(b.op(op, p, **attrs))
    g = b.build()
    assert ops_of(fold_pads(g)) == ops_of(g)


def test_a_pad_read_elsewhere_stays_for_its_other_reader() -> None:
    b, p = padded()
    b.output(b.op("conv2d", p, conv_weight(b), None), b.relu(p))
    g = b.build()
    folded = run_passes(g, ["pad_folding", "dce"])
    assert ops_of(folded) == ["pad", "conv2d", "relu"]
    assert folded.nodes[1].inputs[0] is folded.inputs[0]
    same_reference(g, folded)


def test_in_the_pipeline() -> None:
    assert CLEANUP.index("constant_folding") < CLEANUP.index("pad_folding")


def test_compiled_with_and_without_the_pass(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    b, p = padded()
    y = b.op("conv2d", p, conv_weight(b), None, pads=(0, 1, 1, 0))
    q = b.op("pad", y, pads=(0, 0, 1, 1, 0, 0, 1, 1), value=-math.inf)
    b.output(b.op("max_pool2d", q, kernel=(3, 3), stride=(2, 2)))
    g = b.build()
    feeds = feeds_for(g, seed=2)
    folded = run_passes(g)
    assert "pad" not in ops_of(folded)
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", "pad_folding")
    plain = run_passes(g)
    assert ops_of(plain).count("pad") == 2
    monkeypatch.delenv("VKUMD_DISABLE_PASSES")
    got = CompiledGraph(folded, ctx)(**feeds)[0].numpy().astype(np.float64)
    want = CompiledGraph(plain, ctx)(**feeds)[0].numpy().astype(np.float64)
    assert not np.isnan(got).any() and rel_error(got, want) < 1e-6
