"""``ops.max_pool2d`` (and ``ops.max_pool2d_indices``), ``ops.avg_pool2d``, ``ops.lp_pool2d``,
``ops.global_avg_pool`` and ``ops.global_max_pool`` against float64 numpy
references written here (one window at a time), on odd shapes, strides, dilation, asymmetric
pads, ceil mode and both average divisors, with poisoned outputs, in float16, NaN inputs,
inside a compiled graph, and bad inputs refused."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate


def out_size(size: int, k: int, s: int, d: int, before: int, after: int, ceil: bool) -> int:
    span = d * (k - 1) + 1
    room = size + before + after - span
    count = -(-room // s) + 1 if ceil else room // s + 1
    return count - 1 if ceil and (count - 1) * s >= size + before else count


def windows(x: np.ndarray, kernel, stride, dilation, pads, ceil: bool, mode: str,
            include_pad: bool = False, p: float = 2.0) -> np.ndarray:
    """Pooling by its definition: every window's taps listed, padding as +-inf / excluded."""
    n, c, h, w = x.shape
    oh = out_size(h, kernel[0], stride[0], dilation[0], pads[0], pads[2], ceil)
    ow = out_size(w, kernel[1], stride[1], dilation[1], pads[1], pads[3], ceil)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            taps, padded = [], 0
            for ky in range(kernel[0]):
                y = i * stride[0] - pads[0] + ky * dilation[0]
                for kx in range(kernel[1]):
                    xx = j * stride[1] - pads[1] + kx * dilation[1]
                    if y >= h + pads[2] or xx >= w + pads[3]:
                        continue
                    padded += 1
                    if 0 <= y < h and 0 <= xx < w:
                        taps.append(x[:, :, y, xx].astype(np.float64))
            stack = np.stack(taps)
            if mode == "max":
                out[:, :, i, j] = stack.max(axis=0)
            elif mode == "lp":
                out[:, :, i, j] = (np.abs(stack) ** p).sum(axis=0) ** (1 / p)
            else:
                out[:, :, i, j] = stack.sum(axis=0) / (padded if include_pad else len(taps))
    return out


# (x shape, kernel, stride, dilation, pads, ceil)
CASES = [
    ((2, 3, 11, 13), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False),
    ((2, 3, 11, 13), (3, 3), (2, 2), (1, 1), (1, 0, 2, 1), True),
    ((2, 3, 11, 13), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), False),     # SPP's 5/9/13 style
    ((2, 3, 11, 13), (2, 3), (2, 1), (2, 1), (0, 2, 1, 0), True),
    ((1, 5, 7, 9), (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), False),
    ((3, 2, 1, 17), (1, 4), (1, 3), (1, 2), (0, 3, 0, 2), True),       # 1-D as height 1
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", ["max", "avg", "avg_pads", "lp2", "lp1", "lp3"])
def test_matches_float64(ctx, mode: str, dtype: str, case) -> None:
    shape, kernel, stride, dilation, pads, ceil = case
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    include = mode == "avg_pads"
    p = float(mode[2:]) if mode.startswith("lp") else 2.0
    want = windows(x, kernel, stride, dilation, pads, ceil,
                   "lp" if mode.startswith("lp") else mode[:3], include, p)
    out = poisoned(ctx, want.shape, dtype)
    kw = {"stride": stride, "dilation": dilation, "pads": pads, "ceil_mode": ceil, "out": out}
    if mode == "max":
        got = ops.max_pool2d(tensor(ctx, x, dtype), kernel, **kw)
    elif mode.startswith("lp"):
        got = ops.lp_pool2d(tensor(ctx, x, dtype), kernel, p=p, **kw)
    else:
        got = ops.avg_pool2d(tensor(ctx, x, dtype), kernel, count_include_pad=include, **kw)
    assert got is out
    assert_close(got.numpy().astype(np.float64), want, dtype, f"{mode} {case}")


def first_maxima(x: np.ndarray, kernel, stride, dilation, pads, ceil: bool, order: int
                 ) -> np.ndarray:
    """Each window's first maximum's flat index (taps row by row, a later tap wins only when
    strictly greater), row-major or column-major planes."""
    n, c, h, w = x.shape
    oh = out_size(h, kernel[0], stride[0], dilation[0], pads[0], pads[2], ceil)
    ow = out_size(w, kernel[1], stride[1], dilation[1], pads[1], pads[3], ceil)
    out = np.zeros((n, c, oh, ow), np.int64)
    for b, ch, i, j in np.ndindex(n, c, oh, ow):
        best, where = -np.inf, None
        for ky in range(kernel[0]):
            y = i * stride[0] - pads[0] + ky * dilation[0]
            for kx in range(kernel[1]):
                xx = j * stride[1] - pads[1] + kx * dilation[1]
                if 0 <= y < h and 0 <= xx < w and (where is None or x[b, ch, y, xx] > best):
                    best, where = x[b, ch, y, xx], (y, xx)
        assert where is not None
        y, xx = where
        out[b, ch, i, j] = (b * c + ch) * h * w + (xx * h + y if order else y * w + xx)
    return out


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_max_indices(ctx, dtype: str, case) -> None:
    shape, kernel, stride, dilation, pads, ceil = case
    rng = np.random.default_rng()
    # Few distinct values: windows hold ties, which the first tap must win.
    x = rng.integers(-3, 4, shape).astype(dtype)
    for order in (0, 1):
        want = first_maxima(x, kernel, stride, dilation, pads, ceil, order)
        out = poisoned(ctx, want.shape, "int32")
        got = ops.max_pool2d_indices(tensor(ctx, x, dtype), kernel, stride=stride,
                                     dilation=dilation, pads=pads, ceil_mode=ceil,
                                     storage_order=order, out=out)
        assert got is out and got.dtype.name == "int32"
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"order {order} {case}")
        # The indices point at the maxima max_pool2d computes.
        values = ops.max_pool2d(tensor(ctx, x, dtype), kernel, stride=stride,
                                dilation=dilation, pads=pads, ceil_mode=ceil).numpy()
        flat = x.transpose(0, 1, 3, 2).reshape(-1) if order else x.reshape(-1)
        np.testing.assert_array_equal(flat[want], values)


def test_max_propagates_nan_and_ignores_padding(ctx) -> None:
    x = -np.ones((1, 1, 4, 4), np.float32) * 5.0
    x[0, 0, 1, 1] = np.nan
    got = ops.max_pool2d(ctx.tensor(x), (2, 2), stride=(2, 2), pads=(1, 1, 1, 1)).numpy()
    assert got.shape == (1, 1, 3, 3) and np.isnan(got[0, 0, 1, 1])
    assert np.isnan(got).sum() == 1  # only the window (rows 1-2, columns 1-2) holding it
    assert (got[~np.isnan(got)] == -5.0).all()  # padding (zero) never wins over -5


def test_stride_defaults_to_kernel(ctx) -> None:
    x = np.random.default_rng().standard_normal((2, 3, 8, 6)).astype(np.float32)
    got = ops.avg_pool2d(ctx.tensor(x), (2, 3)).numpy()
    assert_close(got.astype(np.float64), x.reshape(2, 3, 4, 2, 2, 3).mean(axis=(3, 5)),
                 "float32")


@pytest.mark.parametrize("op", ["global_avg_pool", "global_max_pool"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_global_pools(ctx, op: str, dtype: str) -> None:
    rng = np.random.default_rng()
    reduce = np.mean if op == "global_avg_pool" else np.max
    for shape in ((2, 5, 11, 13), (1, 3, 1, 1), (3, 2, 37, 29)):
        x = sample(rng, dtype, shape)
        out = poisoned(ctx, (*shape[:2], 1, 1), dtype)
        got = getattr(ops, op)(tensor(ctx, x, dtype), out=out)
        assert got is out
        assert_close(got.numpy().astype(np.float64),
                     reduce(x.astype(np.float64), axis=(2, 3), keepdims=True), dtype,
                     f"{op} {shape}")


def test_global_max_pool_of_negative_planes(ctx) -> None:
    # Every value below zero: a maximum that started from 0 (or read padding) would show.
    x = -1.0 - np.random.default_rng().random((2, 3, 5, 7)).astype(np.float32)
    got = ops.global_max_pool(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got, x.max(axis=(2, 3), keepdims=True))


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("pools")
    x = b.input("x", (2, 3, 11, 13))
    m = b.max_pool2d(x, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1), ceil_mode=True)
    a = b.avg_pool2d(m, kernel=(2, 2), stride=(1, 1), pads=(0, 0, 1, 1))
    b.output(a, b.global_avg_pool(a))
    graph = b.build()
    data = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    mid = windows(data, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True, "max")
    want = windows(mid, (2, 2), (1, 1), (1, 1), (0, 0, 1, 1), False, "avg")
    ref = evaluate(graph, {"x": data})
    assert_close(ref[0], want, "float32", "reference")
    got = CompiledGraph(graph, ctx)(x=data)
    assert_close(got[0].numpy().astype(np.float64), want, "float32", "compiled")
    assert_close(got[1].numpy().astype(np.float64), want.mean(axis=(2, 3), keepdims=True),
                 "float32", "global")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 6, 6), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.max_pool2d(ctx.tensor(np.ones((3, 6, 6), np.float32)),
                                                 (2, 2))),
        (VkumdValueError, lambda: ops.max_pool2d(x, (7, 2))),
        (VkumdValueError, lambda: ops.max_pool2d(x, (2, 2), pads=(-1, 0, 0, 0))),
        (VkumdValueError, lambda: ops.max_pool2d(x, (2, 2), pads=(2, 0, 0, 0))),  # >= kernel
        (VkumdValueError, lambda: ops.avg_pool2d(x, (0, 2))),
        (VkumdValueError, lambda: ops.avg_pool2d(x, (2, 2), stride=(0, 1))),
        (VkumdValueError, lambda: ops.avg_pool2d(x, (2, 2, 2))),
        (VkumdTypeError, lambda: ops.avg_pool2d(x, (2, 2), count_include_pad=1)),
        (VkumdTypeError, lambda: ops.max_pool2d(x, (2.0, 2))),
        (VkumdTypeError, lambda: ops.max_pool2d(ctx.tensor(np.ones((1, 1, 4, 4), np.int32)),
                                                (2, 2))),
        (VkumdValueError, lambda: ops.max_pool2d(x, (2, 2), out=ctx.empty((2, 3, 2, 2)))),
    ], "pool2d")
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.global_avg_pool(ctx.tensor(np.ones((2, 3), np.float32)))),
        (VkumdValueError, lambda: ops.global_avg_pool(ctx.empty((2, 3, 0, 4)))),
        (VkumdTypeError, lambda: ops.global_avg_pool(ctx.tensor(np.ones((1, 1, 2, 2),
                                                                        np.int32)))),
    ], "global_avg_pool")
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.global_max_pool(ctx.tensor(np.ones((2, 3), np.float32)))),
        (VkumdValueError, lambda: ops.global_max_pool(ctx.empty((2, 3, 4, 0)))),
        (VkumdTypeError, lambda: ops.global_max_pool(ctx.tensor(np.ones((1, 1, 2, 2),
                                                                        np.int32)))),
        (VkumdValueError, lambda: ops.global_max_pool(x, out=ctx.empty((2, 3, 1, 2)))),
    ], "global_max_pool")
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.lp_pool2d(x, (2, 2), p=0.0)),
        (VkumdValueError, lambda: ops.lp_pool2d(x, (2, 2), p=-1)),
        (VkumdTypeError, lambda: ops.lp_pool2d(x, (2, 2), p="2")),
        (VkumdValueError, lambda: ops.lp_pool2d(x, (7, 2))),
    ], "lp_pool2d")
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.max_pool2d_indices(x, (2, 2), storage_order=2)),
        (VkumdTypeError, lambda: ops.max_pool2d_indices(x, (2, 2),
                                                        out=ctx.empty((2, 3, 3, 3)))),
        (VkumdValueError, lambda: ops.max_pool2d_indices(
            x, (2, 2), out=ctx.tensor(np.zeros((2, 3, 3, 2), np.int32)))),
        (VkumdTypeError, lambda: ops.max_pool2d_indices(x, (2, 2), ceil_mode=1)),
    ], "max_pool2d_indices")
