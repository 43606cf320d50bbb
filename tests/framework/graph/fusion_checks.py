"""Helpers the fusion-pass tests share: a graph's op list, random feeds for its inputs, and
the check that a pass left the float64 reference unchanged."""

from __future__ import annotations

import numpy as np

from vkumd.framework.graph import Graph, evaluate


def ops_of(g: Graph) -> list[str]:
    """The ops of ``g``'s nodes, in order."""
    return [n.op for n in g.nodes]


def feeds_for(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 values for every input of ``g`` (symbolic dimensions bound to 3)."""
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d if isinstance(d, int) else 3 for d in v.shape])
            .astype(np.float32) for v in g.inputs}


def same_reference(before: Graph, after: Graph) -> None:
    """``after`` is a valid graph whose float64 reference equals ``before``'s (to rounding:
    a pass may fold a scale into alpha)."""
    after.check()
    feeds = feeds_for(before)
    for want, got in zip(evaluate(before, feeds), evaluate(after, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def close_reference(before: Graph, after: Graph) -> None:
    """As ``same_reference``, to float32's rounding of weights or a bias the pass computed
    and stored in the weights' dtype."""
    after.check()
    feeds = feeds_for(before)
    for want, got in zip(evaluate(before, feeds), evaluate(after, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
