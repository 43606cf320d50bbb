"""The attention part of ``make demo``: one fused attention call checked against numpy, timed
against the unfused path (matmul, softmax, matmul) on the same device."""

from __future__ import annotations

import math

import numpy as np

import vkumd
from vkumd.framework import ops
from vkumd.timing import median_seconds


def run(ctx: vkumd.Context, rng: np.random.Generator) -> int:
    """Run causal grouped-query attention once, check it, time it; return the failure count.

    Args:
        ctx: an open context.
        rng: the demo's random generator.

    Returns:
        1 if the fused result (or the unfused one) disagrees with numpy, else 0.
    """
    from vkumd.framework.opset.attention import choose_path

    batch, heads, kv_heads, seq, dim = 1, 8, 2, 512, 64
    q = rng.standard_normal((batch, heads, seq, dim), dtype=np.float32)
    k = rng.standard_normal((batch, kv_heads, seq, dim), dtype=np.float32)
    v = rng.standard_normal((batch, kv_heads, seq, dim), dtype=np.float32)
    tq, tk, tv = ctx.tensor(q), ctx.tensor(k), ctx.tensor(v)
    out = ctx.empty(q.shape)

    # float64 reference, grouped heads expanded, bottom-right causal mask.
    group = heads // kv_heads
    k64 = np.repeat(k.astype(np.float64), group, axis=1)
    v64 = np.repeat(v.astype(np.float64), group, axis=1)
    scores = q.astype(np.float64) @ k64.transpose(0, 1, 3, 2) / math.sqrt(dim)
    scores += np.triu(np.full((seq, seq), -np.inf), k=1)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    want = (scores / scores.sum(axis=-1, keepdims=True)) @ v64

    def fused() -> None:
        ops.attention(tq, tk, tv, causal=True, out=out)
        ctx.synchronize()

    # Unfused: the K/V heads are expanded on the host (there are no strided views), then
    # Q K^T, softmax with an additive causal mask, P V; the scores are [heads, seq, seq].
    tk_full = ctx.tensor(np.repeat(k, group, axis=1))
    tv_full = ctx.tensor(np.repeat(v, group, axis=1))
    mask = ctx.tensor(np.triu(np.full((seq, seq), -np.inf, np.float32), k=1))
    result: list[vkumd.Tensor] = []

    def unfused() -> None:
        s = ops.matmul(tq, tk_full, trans_b=True, alpha=1.0 / math.sqrt(dim))
        ops.softmax(s, mask=mask, out=s)
        result[:] = [ops.matmul(s, tv_full)]
        s.release()
        ctx.synchronize()

    fused()  # the first calls compile their pipelines
    unfused()
    got = out.numpy().astype(np.float64)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    err_unfused = float(np.linalg.norm(result[0].numpy() - want) / np.linalg.norm(want))
    ok = err < 1e-5 and err_unfused < 1e-5 and not np.isnan(got).any()
    t_fused = median_seconds(fused)
    t_unfused = median_seconds(unfused)
    print(f"attention [{batch}x{heads}x{seq}x{dim}], {kv_heads} kv heads, causal "
          f"({choose_path(tq, tk)} path): relative error {err:.1e} "
          f"({'ok' if ok else 'MISMATCH'}); fused {t_fused * 1e3:.1f} ms, unfused "
          f"{t_unfused * 1e3:.1f} ms (fused {t_unfused / t_fused:.2f}x faster; the unfused "
          f"scores take {heads * seq * seq * 4 / 2**20:.0f} MiB, the fused kernel none)")
    for t in (tq, tk, tv, out, tk_full, tv_full, mask, *result):
        t.release()
    return 0 if ok else 1


if __name__ == "__main__":
    with vkumd.Context() as context:
        raise SystemExit(run(context, np.random.default_rng()))
