"""Quantized-weight kernels (``vkumd.ops.qmatmul``) beside numpy, in the same run.

Usage: python bench/qmatmul.py [--repeats N] [--quick]

Decode: SmolLM2-135M's step, every matrix-vector product at M = 1 and M = 8 (30 layers x
q 576x576, k and v 192x576, o 576x576, gate and up 1536x576, down 576x1536, all Q4_1, and the
49152x576 Q8_0 output head). Each shape runs over 30 distinct weight copies (the model's 30
layers), so the weights come from memory, not a warm cache, as in a real step; a round is one
submission of the 30 calls ended by ``ctx.synchronize()``, so each call's time includes its
share of lavapipe's per-dispatch cost. Per shape: ms per call, GB/s of weight bytes read,
and numpy on the same blocks: dequantise + matvec, and a float32 matvec on weights already
dequantised (numpy's best case, at 4.6x the bytes). The step estimate is the sum over the
211 products.

Prefill: ``qmatmul`` at M x 1536 x 576 (the gate/up projection, Q4_1) in float32 and float16
against ``matmul`` on the same float16 weights (trans_b) and numpy's float32 matmul; GFLOP/s
(2 M N K per product). Medians over --repeats rounds, with [min-max]; the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import vkumd
from vkumd import ops
from vkumd.compiler.kernels.limits import QTYPES
from vkumd.framework.opset.quantized import dequantize

LAYERS = 30
DECODE = [  # (name, N, K, qtype, products per step)
    ("q, o", 576, 576, "Q4_1", 60), ("k, v", 192, 576, "Q4_1", 60),
    ("gate, up", 1536, 576, "Q4_1", 60), ("down", 576, 1536, "Q4_1", 30),
    ("head", 49152, 576, "Q8_0", 1),
]


def blocks(rng: np.random.Generator, n: int, k: int, qtype: str) -> np.ndarray:
    size = QTYPES[qtype][1]
    nb = -(-k // 32)
    raw = rng.integers(0, 256, (n, nb, size), dtype=np.uint8)
    raw[..., 0:2] = (rng.standard_normal((n, nb, 1)) * 0.02).astype(np.float16).view(np.uint8)
    if qtype == "Q4_1":
        raw[..., 2:4] = (rng.standard_normal((n, nb, 1)) * 0.02).astype(np.float16
                                                                          ).view(np.uint8)
    return raw.reshape(n, nb * size)


def timed(fn, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) seconds of ``fn`` over ``repeats`` runs after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), max(times)


def fmt(t: tuple[float, float, float], scale: float = 1e3) -> str:
    return f"{t[0] * scale:8.3f} [{t[1] * scale:.3f}-{t[2] * scale:.3f}]"


def _decode_shape(ctx, rng, m: int, n: int, k: int, qtype: str, copies: int, repeats: int
                  ) -> tuple[tuple[float, ...], float, float, float]:
    """(vkumd's per-call times, GB/s, numpy dequantise + matvec s, numpy float32 matvec s)."""
    raw = [blocks(rng, n, k, qtype) for _ in range(copies)]
    ws = [ctx.tensor(r) for r in raw]
    x_host = rng.standard_normal((m, k)).astype(np.float32)
    x = ctx.tensor(x_host)
    out = ctx.empty((m, n), "float32")

    def run() -> None:
        for w in ws:
            ops.qmatmul(x, w, qtype=qtype, in_features=k, out=out)
        ctx.synchronize()

    per = tuple(v / copies for v in timed(run, repeats))
    gbs = raw[0].nbytes / per[0] / 1e9
    few = raw[:3]
    deq = timed(lambda: [x_host @ dequantize(r, qtype, k).T for r in few], 3)[0] / len(few)
    dense = [dequantize(r, qtype, k) for r in raw]
    mv = timed(lambda: [x_host @ d.T for d in dense], repeats)[0] / copies
    for w in ws:
        w.release()
    return per, gbs, deq, mv


def decode(ctx, rng, m: int, repeats: int) -> None:
    print(f"\ndecode, M = {m}: ms per call (median [range]), GB/s of weights")
    print(f"{'shape':>22} {'vkumd ms':>26} {'GB/s':>6} {'numpy deq+mv ms':>18} "
          f"{'numpy f32 mv ms':>16}")
    step, step_np = 0.0, 0.0
    for name, n, k, qtype, count in DECODE:
        copies = LAYERS if count > 1 else 1
        per, gbs, deq, mv = _decode_shape(ctx, rng, m, n, k, qtype, copies, repeats)
        step += per[0] * count
        step_np += mv * count
        print(f"{name + f' {n}x{k} {qtype}':>22} {fmt(per):>26} {gbs:6.2f} "
              f"{deq * 1e3:18.3f} {mv * 1e3:16.3f}")
    print(f"step estimate ({sum(c for *_, c in DECODE)} products): vkumd {step * 1e3:.1f} ms, "
          f"numpy float32 matvec on dequantised weights {step_np * 1e3:.1f} ms")


def _gflops(flops: int, t: tuple[float, float, float]) -> str:
    return f"{flops / t[0] / 1e9:7.2f} [{flops / t[2] / 1e9:.2f}-{flops / t[1] / 1e9:.2f}]"


def _prefill_dtype(ctx, x_host: np.ndarray, w, dense: np.ndarray, dtype: str, repeats: int
                   ) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(qmatmul's times, matmul's on float weights of ``dtype``)."""
    m, k = x_host.shape
    x = ctx.tensor(x_host, dtype=dtype)
    out = ctx.empty((m, dense.shape[0]), dtype)
    wf = ctx.tensor(dense, dtype=dtype)

    def q() -> None:
        ops.qmatmul(x, w, qtype="Q4_1", in_features=k, out=out)
        ctx.synchronize()

    def f() -> None:
        ops.matmul(x, wf, trans_b=True, out=out)
        ctx.synchronize()

    result = timed(q, repeats), timed(f, repeats)
    wf.release()
    return result


def prefill(ctx, rng, m: int, repeats: int) -> None:
    n, k = 1536, 576
    raw = blocks(rng, n, k, "Q4_1")
    w = ctx.tensor(raw)
    dense = dequantize(raw, "Q4_1", k)
    flops = 2 * m * n * k
    print(f"\nprefill {m}x{n}x{k} Q4_1: GFLOP/s median [range]")
    x_host = rng.standard_normal((m, k)).astype(np.float32)
    for dtype in ("float32", "float16"):
        tq, tf = _prefill_dtype(ctx, x_host, w, dense, dtype, repeats)
        print(f"  {dtype}: qmatmul {_gflops(flops, tq)}   matmul on {dtype} weights "
              f"{_gflops(flops, tf)}")
    tn = timed(lambda: x_host @ dense.T, repeats)
    td = timed(lambda: x_host @ dequantize(raw, "Q4_1", k).T, 3)
    print(f"  numpy float32 matmul {_gflops(flops, tn)}   numpy dequantise + matmul "
          f"{_gflops(flops, td)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="decode at M = 1 only, one prefill")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ctx = vkumd.Context()
    print(f"device: {ctx.caps.name}, subgroup {ctx.caps.subgroup_size}")
    for m in (1,) if args.quick else (1, 8):
        decode(ctx, rng, m, args.repeats)
    for m in (128,) if args.quick else (16, 128):
        prefill(ctx, rng, m, args.repeats)


if __name__ == "__main__":
    main()
