"""The demo's order of parts, and its elementwise part; ``main`` is what ``make demo`` runs."""

from __future__ import annotations

import time

import numpy as np

import vkumd
from vkumd import ops
from vkumd.demo import attention as demo_attention
from vkumd.demo import compiled as demo_compiled
from vkumd.demo import embed as demo_embed
from vkumd.demo import gemm as demo_gemm
from vkumd.timing import median_seconds


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    want64 = want.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - want64) / np.linalg.norm(want64))


def main() -> int:
    """Run the demo; return a process exit code (1 if a result disagrees with numpy)."""
    rng = np.random.default_rng()
    failures = 0
    with vkumd.Context() as ctx:
        caps = ctx.caps
        print(f"device: {caps.name} ({caps.device_type}, {caps.driver_info})")

        n = 1 << 22
        x = rng.standard_normal(n, dtype=np.float32)
        start = time.perf_counter()
        tx = ctx.tensor(x)
        upload = time.perf_counter() - start
        start = time.perf_counter()
        back = tx.numpy()
        download = time.perf_counter() - start
        exact = np.array_equal(back, x)
        failures += not exact
        mib = x.nbytes / 2**20
        print(f"transfer {mib:.0f} MiB: upload {mib / upload:,.0f} MiB/s, read-back "
              f"{mib / download:,.0f} MiB/s, round trip exact: {exact}")

        # Broadcast add: a [rows, cols] matrix plus a [cols] bias row.
        rows, cols = 2048, 1024
        a = rng.standard_normal((rows, cols), dtype=np.float32)
        bias = rng.standard_normal(cols, dtype=np.float32)
        ta, tbias = ctx.tensor(a), ctx.tensor(bias)
        out = ctx.empty((rows, cols))
        ops.add(ta, tbias, out=out)  # first call compiles the pipeline
        got = out.numpy()
        want = a.astype(np.float64) + bias
        err = _relative_error(got, want)
        ok = err < 1e-6 and not np.isnan(got).any()
        failures += not ok
        # Ops are asynchronous: time them through the wait for their result.
        t_vk = median_seconds(lambda: (ops.add(ta, tbias, out=out), ctx.synchronize()))
        t_np = median_seconds(lambda: np.add(a, bias))
        print(f"add [{rows}x{cols}] + [{cols}]: relative error {err:.1e} "
              f"({'ok' if ok else 'MISMATCH'}); vkumd {t_vk * 1e3:.2f} ms, numpy "
              f"{t_np * 1e3:.2f} ms (ratio {t_np / t_vk:.2f} of numpy's speed)")

        failures += demo_gemm.run(ctx, rng)
        failures += demo_attention.run(ctx, rng)
        failures += demo_compiled.run(ctx, rng)
        failures += demo_embed.run(ctx)

        used = ctx.memory.used_bytes() / 2**20
        held = ctx.memory.total_bytes() / 2**20
        print(f"memory pool: {used:.1f} MiB in use, {held:.1f} MiB held")
    print("demo: all results match numpy" if not failures else "demo: MISMATCH against numpy")
    return 1 if failures else 0
