"""Tensor views against copies: what a view costs, and what reading one costs an op.

Usage: python bench/views.py [--repeats N] [--size N]

Table 1 -- each view op (transpose, permute, .T, expand, stepped slices, narrow, diagonal,
unsqueeze/squeeze, view): the launches it records (counted where every op's launches pass,
``ctx.run``) and its host time. A view is bookkeeping: 0 launches.

Table 2 -- the same elementwise ``add`` at the same sizes (an ``N x N`` float32 operand and
a contiguous one), each timed to completion (``ctx.synchronize()``), median and range:

- contiguous: both operands contiguous (the floor);
- a.T read in place: the first operand a transposed view, which the binary kernel reads
  through its strides (:func:`vkumd.framework.strided.reads_views_in_place`: CPU drivers);
- a.T through a copy: the same view made contiguous first (``a.T.contiguous()``, one copy
  launch, what every other kernel's operands get and what GPUs take);
- copy alone (as ops do): making that view contiguous as an op does (the permute kernel for a
  view from its allocation's start); the strided-copy kernel alone (what views with an
  offset or negative steps take); the permute kernel through ``ops.transpose(out=)``;
- stepped and reversed reads (``big[:, ::2]``, ``big[:, ::-2]`` of an ``N x 2N`` tensor), in
  place and through a copy.

Read in place against through a copy, per size, is the choice
:func:`~vkumd.framework.strided.reads_views_in_place` makes per device class.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import vkumd
from vkumd.compiler.kernels.strided import strided_copy_plan
from vkumd.framework import ops
from vkumd.framework.strided import WholeAllocation


def sample(run: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """Median, fastest and slowest wall time of ``run`` in microseconds (one warm-up)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times), min(times), max(times)


def fmt(stats: tuple[float, float, float]) -> str:
    median, low, high = stats
    return f"{median:10.1f} [{low:8.1f}-{high:8.1f}]"


def view_table(ctx: vkumd.Context, repeats: int) -> None:
    t = ctx.tensor(np.random.default_rng().standard_normal((33, 65, 17), dtype=np.float32))
    views: dict[str, Callable[[], object]] = {
        "t.transpose(0, 2)": lambda: t.transpose(0, 2),
        "t.permute(2, 0, 1)": lambda: t.permute(2, 0, 1),
        "t.T": lambda: t.T,
        "t[:, :1].expand(33, 65, 17)": lambda: t[:, :1].expand(33, 65, 17),
        "t[::2, 1::3, ::-1]": lambda: t[::2, 1::3, ::-1],
        "t.narrow(1, 5, 20)": lambda: t.narrow(1, 5, 20),
        "t.diagonal(0, 1, 2)": lambda: t.diagonal(0, 1, 2),
        "t.unsqueeze(1).squeeze(1)": lambda: t.unsqueeze(1).squeeze(1),
        "t.view(33, -1)": lambda: t.view(33, -1),
        "t.T.contiguous() (a copy)": lambda: t.T.contiguous(),
    }
    launches: list[object] = []
    run = ctx.run

    def counting(plan: object, operands: object) -> None:
        launches.append(plan)
        run(plan, operands)

    print(f"\n1. view ops on a (33, 65, 17) float32 tensor: launches and host time (us), "
          f"median [range] of {repeats}")
    print(f"{'op':<30} {'launches':>8} {'host us':>10} {'range':>19}")
    for name, make in views.items():
        ctx.run = counting
        launches.clear()
        make()
        count = len(launches)
        ctx.run = run
        print(f"{name:<30} {count:>8} {fmt(sample(make, repeats))}")
    ctx.synchronize()


def read_table(ctx: vkumd.Context, sizes: list[int], repeats: int) -> None:
    print(f"\n2. add(a, b) with a contiguous or a strided view, N x N float32, completed "
          f"(synchronize), us, median [range] of {repeats}")
    header = (f"{'N':>5} {'case':<28} {'us':>10} {'range':>19} {'launches':>8}")
    print(header)
    rng = np.random.default_rng()
    for n in sizes:
        a = ctx.tensor(rng.standard_normal((n, n), dtype=np.float32))
        b = ctx.tensor(rng.standard_normal((n, n), dtype=np.float32))
        big = ctx.tensor(rng.standard_normal((n, 2 * n), dtype=np.float32))
        out = ctx.empty((n, n))
        moved = ctx.empty((n, n))
        at = a.T
        stepped = big[:, ::2]
        reversed_ = big[:, ::-2]
        np.testing.assert_array_equal(ops.add(at, b).numpy(), a.numpy().T + b.numpy())
        np.testing.assert_array_equal(ops.add(reversed_, b).numpy(),
                                      big.numpy()[:, ::-2] + b.numpy())
        cases: dict[str, Callable[[], object]] = {
            "contiguous": lambda a=a, b=b, out=out: ops.add(a, b, out=out),
            "a.T read in place": lambda at=at, b=b, out=out: ops.add(at, b, out=out),
            "a.T through a copy": lambda at=at, b=b, out=out: ops.add(at.contiguous(), b,
                                                                      out=out),
            "copy alone (as ops do)": lambda at=at, moved=moved: ops.copy(at, out=moved),
            "strided-copy kernel alone": lambda at=at, moved=moved: ctx.run(
                strided_copy_plan(ctx.caps, 32, at.shape, 0, at.element_strides, 0,
                                  moved.element_strides),
                (WholeAllocation(at), WholeAllocation(moved))),
            "permute copy alone": lambda a=a, moved=moved: ops.transpose(a, 0, 1, out=moved),
            "big[:, ::2] in place": lambda s=stepped, b=b, out=out: ops.add(s, b, out=out),
            "big[:, ::2] through a copy": lambda s=stepped, b=b, out=out: ops.add(
                s.contiguous(), b, out=out),
            "big[:, ::-2] in place": lambda r=reversed_, b=b, out=out: ops.add(r, b, out=out),
            "big[:, ::-2] through a copy": lambda r=reversed_, b=b, out=out: ops.add(
                r.contiguous(), b, out=out),
        }
        run = ctx.run
        for name, call in cases.items():
            count: list[object] = []
            ctx.run = lambda plan, operands, count=count, run=run: (count.append(plan),
                                                                    run(plan, operands))
            call()
            ctx.run = run

            def timed(call: Callable[[], object] = call) -> None:
                call()
                ctx.synchronize()

            print(f"{n:>5} {name:<28} {fmt(sample(timed, repeats))} {len(count):>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--size", type=int, action="append",
                        help="N of the N x N operands (repeatable; default 257 and 1023)")
    args = parser.parse_args()
    with vkumd.Context(validation=False) as ctx:
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info})")
        view_table(ctx, args.repeats)
        read_table(ctx, args.size or [257, 1023], args.repeats)


if __name__ == "__main__":
    main()
