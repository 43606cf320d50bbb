"""Helpers for the executor tests: relative errors against the float64 reference, poison."""

from __future__ import annotations

import numpy as np

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import Graph, evaluate
from vkumd.testing.numerics import poison as poison_tensor
from vkumd.testing.numerics import rel_error as rel

TOL = 1e-5


def poison(compiled: CompiledGraph) -> None:
    """Fill every bucket's arena and outputs with NaN bits, so an unwritten element (or a
    value read before it is written) shows up in the results."""
    compiled.context.synchronize()  # the arena's own key never saw the replays' work
    for bucket in compiled.bucket_memory():
        for arena in bucket.arenas:
            arena.base.write(np.full(arena.base.shape, 0xFF, np.uint8))
        for target in [*bucket.owned.values(), *bucket.returned.values()]:
            poison_tensor(target)


def check_against_reference(graph: Graph, compiled: CompiledGraph, feeds: dict,
                            tol: float = TOL) -> list[np.ndarray]:
    """Run ``compiled`` on ``feeds`` (poisoned first when already recorded) and compare every
    output with :func:`evaluate`; return the outputs as numpy arrays."""
    poison(compiled)
    outs = compiled(**feeds)
    want = evaluate(graph, {k: getattr(v, "numpy", lambda v=v: v)() for k, v in feeds.items()})
    got = [o.numpy() for o in outs]
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        err = rel(g, w)
        assert err < tol, f"output {i}: relative error {err:.3g}"
    return got


def random(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Standard normal float32 data."""
    return rng.standard_normal(shape).astype(np.float32)
