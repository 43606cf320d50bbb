"""Lanes-path GEMM tile configurations against each other, interleaved in one process.

Usage: python bench/gemm_tiles.py [--shapes MxNxK,...] [--dtypes float32,float16]
                                  [--rounds N] [--trans-b] CONFIG [CONFIG ...]

Each CONFIG is JSON: overrides of the lanes variant's tile (``TM``, ``NJ``, ``KU``; see
``lanes_variant`` in vkumd/compiler/kernels/gemm.py) and, under a leading underscore, module
tunables of vkumd/compiler/kernels/gemm_choice.py, e.g. ``'{}'`` (the shipped choice),
``'{"TM": 16, "KU": 8}'`` (the previous tile) or ``'{"_PACK_MIN_TILES_M": 32}'`` (pack B from
fewer row tiles). For every shape and dtype the configurations run in turn, ``--rounds``
times, each round timing enough calls for about 0.15 s; the table gives each one's median,
range and ratio to the first. On a shared machine this is far steadier than separate runs of
bench/gemm.py: whatever the other tenants do falls on every configuration alike. Every
configuration's result is checked against the first one's. Times are process CPU seconds
(run with ``LP_NUM_THREADS=0`` for one-core figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

import vkumd
from vkumd import ops
from vkumd.compiler.kernels import gemm, gemm_choice, gemm_plan

_overrides: dict[str, Any] = {}
_shipped = gemm.lanes_variant


def _lanes_variant(caps: Any, dtype: str, wide_a: int = 0, wide_b: int = 0) -> dict:
    return {**_shipped(caps, dtype, wide_a, wide_b), **_overrides}


def _apply(config: dict[str, Any]) -> None:
    """Make ``config`` the tile matmul plans with (plans are cached: the cache is emptied)."""
    _overrides.clear()
    _overrides.update({k: v for k, v in config.items() if not k.startswith("_")})
    for key, value in config.items():
        if key.startswith("_"):
            setattr(gemm_choice, key[1:], value)
    gemm_plan._gemm_plan.cache_clear()


def bench_shape(ctx: vkumd.Context, m: int, n: int, k: int, dtype: str, trans_b: bool,
                configs: list[dict[str, Any]], rounds: int) -> list[list[float]]:
    """GFLOP/s samples per configuration for one problem."""
    rng = np.random.default_rng()
    if dtype == "int8":
        a = ctx.tensor(rng.integers(-128, 128, (m, k), dtype=np.int8))
        b = ctx.tensor(rng.integers(-128, 128, (n, k) if trans_b else (k, n), dtype=np.int8))
        out = ctx.empty((m, n), "int32")
    else:
        a = ctx.tensor(rng.standard_normal((m, k), dtype=np.float32), dtype=dtype)
        b = ctx.tensor(rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32),
                       dtype=dtype)
        out = ctx.empty((m, n), dtype)

    def run(index: int) -> None:
        _apply(configs[index])
        ops.matmul(a, b, out=out, trans_b=trans_b)
        ctx.synchronize()

    first = None
    for index, config in enumerate(configs):  # compile each, and check it against the first
        run(index)
        result = out.numpy().astype(np.float64)
        first = result if first is None else first
        err = np.linalg.norm(result - first) / max(np.linalg.norm(first), 1e-30)
        if err > 1e-2:
            raise SystemExit(f"{config} differs from {configs[0]}: relative error {err:.2e}")
    calls = max(1, int(0.15 / (2 * m * n * k / 25e9)))
    samples: list[list[float]] = [[] for _ in configs]
    for _ in range(rounds):
        for index in range(len(configs)):
            run(index)
            start = time.process_time()
            for _ in range(calls):
                run(index)
            samples[index].append(2 * m * n * k * calls / (time.process_time() - start) / 1e9)
    for t in (a, b, out):
        t.release()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1024x1024x1024", help="M x N x K, comma-separated")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trans-b", action="store_true", help="B stored as N x K")
    parser.add_argument("configs", nargs="+", help="JSON overrides, the first the reference")
    args = parser.parse_args()
    configs = [json.loads(text) for text in args.configs]
    gemm.lanes_variant = _lanes_variant  # pack_variant reads the tile through this name
    gemm_choice.lanes_variant = _lanes_variant
    print(f"{'shape':>16} {'dtype':>8}  {'config':<40} {'median':>7} {'range':>13}  ratio")
    with vkumd.Context(validation=False) as ctx:
        for shape in args.shapes.split(","):
            m, n, k = (int(x) for x in shape.split("x"))
            for dtype in args.dtypes.split(","):
                samples = bench_shape(ctx, m, n, k, dtype, args.trans_b, configs, args.rounds)
                base = statistics.median(samples[0])
                for config, values in zip(configs, samples, strict=True):
                    med = statistics.median(values)
                    print(f"{shape:>16} {dtype:>8}  {json.dumps(config):<40} {med:7.1f} "
                          f"{min(values):6.1f}-{max(values):<6.1f} {med / base:6.3f}")


if __name__ == "__main__":
    main()
