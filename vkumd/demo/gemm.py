"""The GEMM part of ``make demo``: a transformer MLP layer, ``gelu(x @ W + b)``, on the device.

``vkumd.demo`` calls :func:`run` with its open context and random generator.
"""

from __future__ import annotations

import math
import time

import numpy as np

from vkumd.compiler.kernels.gemm_choice import GemmShape, choose_variant
from vkumd.framework import ops
from vkumd.framework.context import Context
from vkumd.timing import median_seconds


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))


def run(ctx: Context, rng: np.random.Generator) -> int:
    """Run one fused GEMM + bias + GELU, check it against numpy and time both.

    Args:
        ctx: an open context on the device to demonstrate.
        rng: the random generator for the inputs.

    Returns:
        The number of failures (0 or 1): results that differ from numpy's float64 result.
    """
    m, k, n = 512, 384, 1536  # 512 tokens through a 384 -> 1536 MLP up-projection
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = (rng.standard_normal((k, n), dtype=np.float32) / math.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    tx, tw, tb = ctx.tensor(x), ctx.tensor(w), ctx.tensor(b)
    out = ctx.empty((m, n))

    def fused() -> None:
        ops.matmul(tx, tw, bias=tb, activation="gelu", out=out)
        ctx.synchronize()

    fused()  # the first call compiles the pipeline
    got = out.numpy()
    want = _gelu(x.astype(np.float64) @ w + b)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    ok = err < 1e-5 and not np.isnan(got).any()

    t_vk = median_seconds(fused)
    # lavapipe's worker threads spin for a moment after their work; give numpy the cores.
    time.sleep(0.3)
    t_np = median_seconds(lambda: _numpy_gelu_f32(x @ w + b))
    gflop = 2.0 * m * n * k / 1e9
    variant = choose_variant(ctx.caps, "float32", GemmShape(m, n, k)).name
    print(f"matmul+bias+gelu [{m}x{k}] @ [{k}x{n}] ({variant}): relative error {err:.1e} "
          f"({'ok' if ok else 'MISMATCH'}); vkumd {t_vk * 1e3:.1f} ms ({gflop / t_vk:.1f} "
          f"GFLOP/s), numpy {t_np * 1e3:.1f} ms ({gflop / t_np:.1f} GFLOP/s; ratio "
          f"{t_np / t_vk:.2f})")
    for t in (tx, tw, tb, out):
        t.release()
    return 0 if ok else 1


def _numpy_gelu_f32(y: np.ndarray) -> np.ndarray:
    # numpy has no erf; the tanh form costs the same and keeps the comparison fair.
    return 0.5 * y * (1.0 + np.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))
