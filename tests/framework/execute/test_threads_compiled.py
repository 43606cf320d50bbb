"""One ``vkumd.compile`` function called from many threads at once: every caller gets its own
results, and evicting a bucket never frees what another call is using.

Eight threads call one compiled function, each with its own random inputs and batch sizes
that fall in six buckets, while the executor keeps only two buckets: buckets are evicted and
recorded again under calls in flight. Each result is read at once and compared with float64
numpy. Validation (with synchronization checks) is on, so a freed command pool or command
buffer handed to the driver fails the test too (conftest).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from thread_runner import run_threads

import vkumd
from vkumd import ops
from vkumd.framework import compile as compile_module
from vkumd.framework.execute import CompiledGraph

THREADS = 8
CALLS = 32  # per thread
WIDTH = 16
BATCHES = (1, 2, 3, 4, 6, 8, 11, 16, 20, 32)  # buckets 1, 2, 4, 8, 16, 32
TOL = 1e-4
JOIN_TIMEOUT_S = 120.0
_erf = np.vectorize(math.erf)


def block(x: Any, w: Any, b: Any) -> Any:
    h = ops.matmul(x, w, bias=b, activation="gelu")
    return (h + x).layer_norm()


def block_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    h = x64 @ w + b
    h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
    r = h + x64
    mean = r.mean(-1, keepdims=True)
    var = ((r - mean) ** 2).mean(-1, keepdims=True)
    return (r - mean) / np.sqrt(var + 1e-5)


def _wrong(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why ``got`` is not ``want`` (another caller's rows, unwritten memory), or None."""
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    if not np.isfinite(got).all():
        return "non-finite elements"
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    return None if err < TOL else f"relative error {err:.3g}"


@pytest.fixture
def racy() -> Iterator[None]:
    """Switch threads every 10 us instead of 5 ms, so races show up within seconds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("streams", ["default stream", "a stream per thread"])
def test_threads_sharing_one_compiled_function_get_their_own_results(
        ctx, racy, monkeypatch, streams) -> None:
    rng = np.random.default_rng(31)
    w = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
    b = rng.standard_normal(WIDTH).astype(np.float32)
    tw, tb = ctx.tensor(w), ctx.tensor(b)
    # Two buckets held for six in use: every few calls evict a bucket another thread calls.
    monkeypatch.setattr(compile_module, "compiled_graph_class",
                        lambda: functools.partial(CompiledGraph, max_recordings=2,
                                                  sizes_per_bucket=2))
    example = ctx.tensor(rng.standard_normal((4, WIDTH)).astype(np.float32))
    f = vkumd.compile(block, {"x": example, "w": tw, "b": tb}, ctx=ctx,
                      dynamic={"x": {0: "batch"}})
    assert f.executor == "compiled"
    own = [ctx.stream(name=f"caller {i}") for i in range(THREADS)]
    wrong: list[str] = []
    start = threading.Barrier(THREADS)

    def caller(index: int) -> None:
        local = np.random.default_rng(1000 + index)
        start.wait()
        for call in range(CALLS):
            batch = int(local.choice(BATCHES))
            x = local.standard_normal((batch, WIDTH)).astype(np.float32)
            # Arrays (copied into the bucket) and fresh tensors (read in place once repeated)
            # alternate; the weights are the same tensors every call.
            given = x if call % 2 else ctx.tensor(x)
            try:
                if streams == "default stream":
                    got = f(given, tw, tb).numpy()
                else:
                    with own[index]:
                        got = f(given, tw, tb).numpy()
            except Exception as exc:  # noqa: BLE001 - counted with the wrong results
                why: str | None = f"raised {type(exc).__name__}: {exc}"
            else:
                why = _wrong(got, block_numpy(x, w, b))
            if why is not None:
                wrong.append(f"thread {index} call {call} (batch {batch}): {why}")

    run_threads([functools.partial(caller, i) for i in range(THREADS)], JOIN_TIMEOUT_S)
    ctx.synchronize()
    total = THREADS * CALLS
    assert not wrong, f"{len(wrong)} of {total} calls wrong:\n" + "\n".join(wrong[:10])
    compiled = f._compiled
    assert compiled.calls == total
    assert compiled.evicted > 0, "no bucket was evicted: the test did not force eviction"
    compiled.release()
    for stream in own:
        stream.release()


class _HeldArray:
    """An array-like whose conversion waits for ``go``: holds a call between taking its
    bucket and writing the inputs."""

    def __init__(self, array: np.ndarray, entered: threading.Event,
                 go: threading.Event) -> None:
        self.array, self.shape, self.dtype = array, array.shape, array.dtype
        self._entered, self._go = entered, go

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self._entered.set()
        assert self._go.wait(30.0), "never released"
        return self.array if dtype is None else self.array.astype(dtype)


def test_a_bucket_evicted_under_a_call_is_freed_as_that_call_ends(ctx) -> None:
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((WIDTH, WIDTH)) / math.sqrt(WIDTH)).astype(np.float32)
    b = rng.standard_normal(WIDTH).astype(np.float32)
    example = ctx.tensor(rng.standard_normal((4, WIDTH)).astype(np.float32))
    f = vkumd.compile(block, {"x": example, "w": ctx.tensor(w), "b": ctx.tensor(b)},
                      ctx=ctx, dynamic={"x": {0: "batch"}})
    compiled = CompiledGraph(f.graph, ctx, max_recordings=1)
    x = rng.standard_normal((3, WIDTH)).astype(np.float32)
    entered, go = threading.Event(), threading.Event()
    got: list[np.ndarray] = []
    held = threading.Thread(target=lambda: got.append(compiled(
        x=_HeldArray(x, entered, go), w=w, b=b)[0].numpy()), daemon=True)
    held.start()
    try:
        assert entered.wait(30.0)
        (inside,) = compiled.bucket_memory()
        other = rng.standard_normal((16, WIDTH)).astype(np.float32)  # another bucket: evicts
        (mine,) = compiled(x=other, w=w, b=b)
        assert _wrong(mine.numpy(), block_numpy(other, w, b)) is None
        assert compiled.evicted == 1 and not inside.arenas[0].base.released
    finally:
        go.set()
        held.join(30.0)
    assert not held.is_alive() and got, "the held call failed"
    assert _wrong(got[0], block_numpy(x, w, b)) is None
    assert inside.arenas[0].base.released  # freed by the call that was using it, as it ended
    compiled.release()
