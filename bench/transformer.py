"""Transformer kernels (softmax, norms, activations, reductions, gather, permute) vs numpy.

Usage: python bench/transformer.py [--repeats N] [--json PATH] [--tokens T] [--hidden H]

Each row times one vkumd op (writing into a preallocated ``out=``, then waiting for the
device) and the same computation in float32 numpy, in the same run; the table shows medians
and the ratio numpy_time / vkumd_time (above 1: vkumd is faster). On lavapipe each dispatch
costs 50-170 us of submission overhead, which dominates the small rows.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import numpy as np

import vkumd
from vkumd import ops
from vkumd.timing import median_seconds


def _softmax(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    v = x * np.float32(0.125) + mask
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + np.float32(1e-5)) * w + b


def _rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(1e-6)) * w


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x**3)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args()
    rng = np.random.default_rng()
    t, h, heads = args.tokens, args.hidden, args.heads
    seq = min(t, 256)

    rows = []
    with vkumd.Context(validation=False) as ctx:
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info}); float32; "
              f"median of {args.repeats}")
        x = rng.standard_normal((t, h)).astype(np.float32)
        w = rng.standard_normal(h).astype(np.float32)
        b = rng.standard_normal(h).astype(np.float32)
        scores = rng.standard_normal((heads, seq, seq)).astype(np.float32)
        mask = np.triu(np.full((seq, seq), -np.inf, np.float32), k=1)
        table = rng.standard_normal((args.vocab, h)).astype(np.float32)
        ids = rng.integers(0, args.vocab, t).astype(np.int32)
        qkv = rng.standard_normal((seq, heads, h // heads)).astype(np.float32)
        dx, dw, db = ctx.tensor(x), ctx.tensor(w), ctx.tensor(b)
        dscores, dmask = ctx.tensor(scores), ctx.tensor(mask)
        dtable, dids, dqkv = ctx.tensor(table), ctx.tensor(ids), ctx.tensor(qkv)
        out_x = ctx.empty(x.shape)
        out_rows = ctx.empty((t,))
        out_scores = ctx.empty(scores.shape)
        out_qkv = ctx.empty((heads, seq, h // heads))
        cases: list[tuple[str, str, Callable[[], object], Callable[[], object]]] = [
            ("softmax+mask", str(scores.shape),
             lambda: ops.softmax(dscores, scale=0.125, mask=dmask, out=out_scores),
             lambda: _softmax(scores, mask)),
            ("layer_norm", str(x.shape), lambda: ops.layer_norm(dx, dw, db, out=out_x),
             lambda: _layer_norm(x, w, b)),
            ("rms_norm", str(x.shape), lambda: ops.rms_norm(dx, dw, out=out_x),
             lambda: _rms_norm(x, w)),
            ("gelu_tanh", str(x.shape), lambda: ops.gelu_tanh(dx, out=out_x),
             lambda: _gelu_tanh(x)),
            ("silu", str(x.shape), lambda: ops.silu(dx, out=out_x), lambda: _silu(x)),
            ("sum", str(x.shape), lambda: ops.sum(dx, out=out_rows), lambda: x.sum(-1)),
            ("max", str(x.shape), lambda: ops.max(dx, out=out_rows), lambda: x.max(-1)),
            ("embedding", f"{t} ids of {table.shape}",
             lambda: ops.embedding(dids, dtable, out=out_x), lambda: table[ids]),
            ("permute(1,0,2)", str(qkv.shape),
             lambda: ops.permute(dqkv, (1, 0, 2), out=out_qkv),
             lambda: np.ascontiguousarray(qkv.transpose(1, 0, 2))),
        ]
        header = f"{'op':<16} {'shape':<26} {'vkumd ms':>9} {'numpy ms':>9} {'numpy/vkumd':>12}"
        print(header)
        print("-" * len(header))
        for name, shape, run, peer in cases:
            def device(run: Callable[[], object] = run) -> None:
                run()
                ctx.synchronize()

            device()  # compile and warm up
            t_dev = median_seconds(device, args.repeats)
            t_np = median_seconds(peer, args.repeats)
            row = {"op": name, "shape": shape, "vkumd_ms": t_dev * 1e3, "numpy_ms": t_np * 1e3,
                   "ratio": t_np / t_dev}
            rows.append(row)
            print(f"{name:<16} {shape:<26} {row['vkumd_ms']:>9.3f} {row['numpy_ms']:>9.3f} "
                  f"{row['ratio']:>12.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": ctx.caps.name, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
