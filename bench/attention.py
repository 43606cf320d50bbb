"""Fused attention against the unfused vkumd path and numpy, in the same run.

Usage: python bench/attention.py [--repeats N] [--seqs 128 256 ...] [--heads 12]
                                 [--head-dim 64] [--batch 1] [--dtype float32]
                                 [--paths auto tiled auto:bshd ...] [--no-ceiling] [--json PATH]

Three ways to compute ``softmax(Q K^T / sqrt(d) [+ causal mask]) V`` on
``[batch, heads, seq, head_dim]``:

* fused: ``vkumd.ops.attention`` (one kernel; scores never leave the workgroup), through each
  of ``--paths`` (``auto``: the planner's choice; or forced, e.g. ``tiled decode``), each in
  ``[batch, heads, seq, head_dim]`` or, written ``PATH:bshd``, on ``[batch, seq, heads,
  head_dim]`` copies of the same data (``layout="bshd"`` in and out);
* unfused: ``vkumd.ops.matmul`` (Q K^T, ``trans_b``, scaled), ``vkumd.ops.softmax`` (in place,
  with a ``[seq, seq]`` additive ``-inf`` mask when causal), ``vkumd.ops.matmul`` (P V). Its
  scores are ``batch * heads * seq^2`` floats; when they would pass the device's
  ``maxStorageBufferRange`` the heads go in chunks (separate tensors prepared beforehand);
* numpy, float32, the same three steps.

Times are medians of ``--repeats`` runs, each waiting for the device (``ctx.synchronize()``):
process CPU seconds with ``LP_NUM_THREADS=0`` (lavapipe on one thread, numpy on one BLAS
thread), else wall time (``bench/ceiling.py``'s clock). GFLOP/s count the useful work of the two
products, ``4 * batch * heads * pairs * head_dim`` with ``pairs`` the visible (query, key)
pairs: ``seq^2``, or ``seq * (seq + 1) / 2`` when causal (for every path, the unfused one
computing all of them), printed as a fraction of the driver's multiply-add ceiling, measured at
the start of the same run with ``bench/ceiling.py``'s :func:`measure` (``--no-ceiling`` skips
it). Peak memory is the most pool bytes in use above what was live before the call
(``MemoryPool.used_bytes()``, sampled at every allocation), so it counts the output, the scores
and any scratch, not the inputs. The causal mask of the unfused path is made once, outside the
timing, and counted in its memory. On a shared machine the numbers are noisy: compare ratios,
and rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

import ceiling  # first: it cleans OpenBLAS's environment before numpy loads
import numpy as np

import vkumd
from vkumd.framework.opset.attention import attention_path

median_seconds = ceiling.median_time

MiB = 1 << 20


def peak_bytes(ctx: vkumd.Context, run: Callable[[], object]) -> int:
    """Most pool bytes in use above the starting point while ``run`` executes."""
    pool = ctx.memory
    start = pool.used_bytes()
    peak = 0
    original = pool.allocate

    def tracking(size: int, *args: object, **kwargs: object) -> object:
        nonlocal peak
        allocation = original(size, *args, **kwargs)
        peak = max(peak, pool.used_bytes() - start)
        return allocation

    pool.allocate = tracking  # type: ignore[method-assign]
    try:
        run()
        ctx.synchronize()
    finally:
        del pool.allocate
    return peak


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    mask: np.ndarray | None) -> np.ndarray:
    """The unfused reference in numpy float32."""
    s = np.matmul(q, k.transpose(0, 1, 3, 2)) * np.float32(1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s += mask
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


class Unfused:
    """matmul -> softmax -> matmul through vkumd, heads chunked to fit one buffer."""

    def __init__(self, ctx: vkumd.Context, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                 dtype: str, causal: bool) -> None:
        batch, heads, seq, dim = q.shape
        itemsize = np.dtype(dtype).itemsize
        per_head = batch * seq * seq * itemsize
        step = max(1, min(heads, ctx.caps.max_storage_buffer_range // per_head))
        self.chunks = [(ctx.tensor(q[:, h:h + step], dtype), ctx.tensor(k[:, h:h + step], dtype),
                        ctx.tensor(v[:, h:h + step], dtype)) for h in range(0, heads, step)]
        self.scale = 1.0 / math.sqrt(dim)
        self.mask = None
        if causal:
            host = np.triu(np.full((seq, seq), -np.inf, dtype=np.float32), k=1)
            self.mask = ctx.tensor(host, dtype)
        self.outs: list[vkumd.Tensor] = []

    def __call__(self) -> None:
        for t in self.outs:
            t.release()
        self.outs = []
        for q, k, v in self.chunks:
            scores = vkumd.ops.matmul(q, k, trans_b=True, alpha=self.scale)
            vkumd.ops.softmax(scores, mask=self.mask, out=scores)
            self.outs.append(vkumd.ops.matmul(scores, v))
            scores.release()

    def result(self) -> np.ndarray:
        """The last call's output, heads concatenated, as float64."""
        return np.concatenate([t.numpy() for t in self.outs], axis=1).astype(np.float64)

    def release(self) -> None:
        """Free every tensor this path holds."""
        for t in self.outs + [t for chunk in self.chunks for t in chunk]:
            t.release()
        if self.mask is not None:
            self.mask.release()


def _rel(result: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(result.astype(np.float64) - expected)
                 / np.linalg.norm(expected))


def measure(ctx: vkumd.Context, host: tuple[np.ndarray, ...], tensors: tuple[vkumd.Tensor, ...],
            out: vkumd.Tensor, causal: bool, args: argparse.Namespace) -> dict:
    """One table row: times, ratios, peak memory and errors for one sequence length."""
    from vkumd.framework.opset.attention import choose_path

    q, k, v = host
    tq, tk, tv = tensors
    seq = q.shape[2]
    swapped: dict[str, vkumd.Tensor] = {}
    if any(p.endswith(":bshd") for p in args.paths):
        for name, x in (("q", q), ("k", k), ("v", v)):
            swapped[name] = ctx.tensor(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), args.dtype)
        swapped["out"] = ctx.empty(tuple(swapped["q"].shape), args.dtype)

    def timed(spec: str) -> Callable[[], None]:
        path, _, layout = spec.partition(":")
        if layout == "bshd":
            a, b, c, o = swapped["q"], swapped["k"], swapped["v"], swapped["out"]
        else:
            a, b, c, o = tq, tk, tv, out

        def run() -> None:
            attention_path(path, a, b, c, causal=causal, out=o, layout=layout or "bhsd")
            ctx.synchronize()
        return run

    def result(spec: str) -> np.ndarray:
        if spec.endswith(":bshd"):
            return swapped["out"].numpy().transpose(0, 2, 1, 3)
        return out.numpy()

    unfused = Unfused(ctx, q, k, v, args.dtype, causal)

    def timed_unfused() -> None:
        unfused()
        ctx.synchronize()

    mask = np.triu(np.full((seq, seq), -np.inf, np.float32), k=1) if causal else None
    pairs = seq * (seq + 1) / 2 if causal else seq * seq  # (query, key) pairs that count
    flops = 4.0 * q.shape[0] * q.shape[1] * pairs * q.shape[3]
    try:
        expected = numpy_attention(q, k, v, mask)
        row: dict = {"seq": seq, "causal": causal, "path": choose_path(tq, tk), "fused": {}}
        for path in args.paths:
            timed(path)()  # compile and warm up before timing
            row["fused"][path] = {"rel_error": _rel(result(path), expected)}
        timed_unfused()
        row["unfused_rel_error"] = _rel(unfused.result(), expected)
        # Interleaved, so that a change in the other tenants' load hits every side alike.
        samples: dict[str, list[float]] = {p: [] for p in [*args.paths, "unfused", "numpy"]}
        with ceiling.blas_limits():
            for _ in range(args.repeats):
                for path in args.paths:
                    samples[path].append(median_seconds(timed(path), 1))
                samples["unfused"].append(median_seconds(timed_unfused, 1))
                samples["numpy"].append(
                    median_seconds(lambda: numpy_attention(q, k, v, mask), 1))
        t = {name: float(np.median(x)) for name, x in samples.items()}
        for path in args.paths:
            row["fused"][path].update(
                ms=t[path] * 1e3, range_ms=[min(samples[path]) * 1e3, max(samples[path]) * 1e3],
                gflops=flops / t[path] / 1e9, unfused_over_fused=t["unfused"] / t[path])
        row.update(unfused_ms=t["unfused"] * 1e3, numpy_ms=t["numpy"] * 1e3,
                   unfused_gflops=flops / t["unfused"] / 1e9,
                   numpy_gflops=flops / t["numpy"] / 1e9)
        # Without out=, so that the fused peak counts its output as the unfused one does.
        row["fused_peak_bytes"] = peak_bytes(
            ctx, lambda: vkumd.ops.attention(tq, tk, tv, causal=causal).release())
        row["unfused_peak_bytes"] = peak_bytes(ctx, unfused) + (
            unfused.mask.nbytes if unfused.mask is not None else 0)
    finally:
        unfused.release()
        for t in swapped.values():
            t.release()
    return row


def _print_row(row: dict, peak: float | None) -> None:
    for path, f in row["fused"].items():
        ceil = f"{f['gflops'] / peak:>6.3f}" if peak else f"{'-':>6}"
        print(f"{row['seq']:>5} {str(row['causal']):>6} {path:>10} {f['ms']:>9.2f} "
              f"{f['range_ms'][0]:>7.1f}-{f['range_ms'][1]:<7.1f} {f['gflops']:>7.2f} {ceil} "
              f"{row['unfused_ms']:>10.2f} {row['unfused_gflops']:>7.2f} "
              f"{f['unfused_over_fused']:>9.2f} {row['numpy_ms']:>9.2f} "
              f"{row['fused_peak_bytes'] / MiB:>8.2f} {row['unfused_peak_bytes'] / MiB:>8.2f} "
              f"{f['rel_error']:>8.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seqs", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--paths", nargs="+", default=["auto"],
                        help="fused paths to time: auto (the planner's) or forced ones; "
                             "PATH:bshd runs it on [batch, seq, heads, head_dim] operands")
    parser.add_argument("--no-ceiling", action="store_true",
                        help="skip measuring the driver's multiply-add ceiling")
    parser.add_argument("--json", help="write the rows as JSON here")
    args = parser.parse_args()

    rng = np.random.default_rng()
    rows = []
    with vkumd.Context(validation=False) as ctx:
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info}); batch {args.batch}, "
              f"{args.heads} heads, head_dim {args.head_dim}, {args.dtype}; median of "
              f"{args.repeats} ({ceiling.clock_name()} time, interleaved); unfused = "
              "matmul(trans_b) + softmax + matmul")
        peak = None if args.no_ceiling else ceiling.measure(ctx, args.repeats)
        if peak is not None:
            print(f"ceiling (loads-free mul+add loop, bench/ceiling.py): {peak['gflops']:.1f} "
                  "GFLOP/s")
        header = (f"{'seq':>5} {'causal':>6} {'path':>10} {'fused ms':>9} {'range ms':>15} "
                  f"{'GFLOP/s':>7} {'/ceil':>6} {'unfused ms':>10} {'GFLOP/s':>7} "
                  f"{'unf/fused':>9} {'numpy ms':>9} {'fusedMiB':>8} {'unf MiB':>8} "
                  f"{'rel err':>8}")
        print(header)
        print("-" * len(header))
        for seq in args.seqs:
            shape = (args.batch, args.heads, seq, args.head_dim)
            q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
            tq, tk, tv = (ctx.tensor(x, args.dtype) for x in (q, k, v))
            if args.dtype == "float16":  # every path sees the same rounded inputs
                q, k, v = (x.astype(np.float16).astype(np.float32) for x in (q, k, v))
            out = ctx.empty(shape, args.dtype)
            for causal in (False, True):
                row = measure(ctx, (q, k, v), (tq, tk, tv), out, causal, args)
                if peak is not None:
                    for f in row["fused"].values():
                        f["of_ceiling"] = f["gflops"] / peak["gflops"]
                rows.append(row)
                _print_row(row, peak["gflops"] if peak else None)
            for t in (tq, tk, tv, out):
                t.release()
        device = ctx.caps.name
    print("GFLOP/s: 4 * batch * heads * visible (query, key) pairs * head_dim / time; /ceil: of "
          "the ceiling; unf/fused: unfused time / fused time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "batch": args.batch, "heads": args.heads,
                       "head_dim": args.head_dim, "dtype": args.dtype, "repeats": args.repeats,
                       "clock": ceiling.clock_name(), "ceiling": peak, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
