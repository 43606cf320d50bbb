"""layer_norm and rms_norm against float64 numpy: dtypes, affine parameters, odd rows, paths.

Outputs start poisoned (NaN). Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (  # noqa: F401  (row_path is a fixture)
    FLOATS,
    assert_close,
    assert_each_raises,
    assert_usable,
    poisoned,
    row_path,
    sample,
    stored,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

SHAPES = [(7,), (3, 2), (5, 13), (2, 4099), (1, 30000), (2, 3, 64)]


def layer_ref(x, weight=None, bias=None, eps=1e-5):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def rms_ref(x, weight=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if weight is None else y * weight


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=2.0, offset=0.5)
    w = sample(rng, dtype, shape[-1:])
    b = sample(rng, dtype, shape[-1:])
    got = ops.layer_norm(tensor(ctx, x, dtype), tensor(ctx, w, dtype), tensor(ctx, b, dtype),
                         out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, layer_ref(x, w, b), dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    w = sample(rng, dtype, shape[-1:])
    got = ops.rms_norm(tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                       out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, rms_ref(x, w), dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_optional_parameters(ctx, affine: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (4, 37))
    w = sample(rng, "float32", (37,))
    weight = ctx.tensor(w.astype(np.float32)) if affine == "weight" else None
    bias = ctx.tensor(w.astype(np.float32)) if affine == "bias" else None
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32)), weight, bias, eps=1e-3).numpy()
    expected = layer_ref(x, w if weight else None, w if bias else None, eps=1e-3)
    assert_close(got, expected, "float32", affine)
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), weight, eps=0.0).numpy()
    assert_close(got, rms_ref(x, w if weight else None, eps=0.0), "float32", affine)


@pytest.mark.parametrize("shape", [(3, 7), (4, 256), (2, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_reduction_paths(ctx, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape)
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), layer_ref(x), "float32", f"layer {shape}")
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), rms_ref(x), "float32", f"rms {shape}")


def test_large_offset_keeps_its_digits(ctx) -> None:
    # Rows centred far from zero: a naive E[x^2] - E[x]^2 would cancel catastrophically.
    rng = np.random.default_rng()
    x = sample(rng, "float32", (8, 1024), scale=1.0, offset=1000.0)
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32))).numpy()
    assert_close(got, layer_ref(x), "float32", "offset 1000")


def test_constant_rows_give_zeros(ctx) -> None:
    x = np.full((3, 10), 4.25, np.float32)
    got = ops.layer_norm(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got, 0.0)


def test_many_rows_use_a_2d_grid(ctx) -> None:
    rng = np.random.default_rng()
    shape = (ctx.caps.max_workgroup_count[0] + 5, 2)
    x = sample(rng, "float32", shape)
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), rms_ref(x), "float32", str(shape))


def test_empty(ctx) -> None:
    assert ops.layer_norm(ctx.empty((0, 5))).shape == (0, 5)
    assert ops.rms_norm(ctx.empty((3, 0)), ctx.empty((0,))).shape == (3, 0)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((5, 7), np.float32))
    w7 = ctx.tensor(np.ones(7, np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.layer_norm(ctx.tensor(np.ones((5, 7), np.int32)))),
        (VkumdTypeError, lambda: ops.layer_norm(np.ones((5, 7), np.float32))),
        (VkumdValueError, lambda: ops.layer_norm(ctx.tensor(np.float32(1.0)))),
        (VkumdValueError, lambda: ops.layer_norm(x, ctx.zeros((5,)))),
        (VkumdValueError, lambda: ops.layer_norm(x, w7, ctx.zeros((1, 7)))),
        (VkumdTypeError, lambda: ops.layer_norm(x, ctx.zeros((7,), "float16"))),
        (VkumdTypeError, lambda: ops.layer_norm(x, w7, np.ones(7, np.float32))),
        (VkumdValueError, lambda: ops.layer_norm(x, eps=-1.0)),
        (VkumdTypeError, lambda: ops.layer_norm(x, eps="1e-5")),
        (VkumdValueError, lambda: ops.layer_norm(x, out=ctx.empty((5, 6)))),
        (VkumdValueError, lambda: ops.rms_norm(x, ctx.zeros((8,)))),
        (VkumdTypeError, lambda: ops.rms_norm(x, out=ctx.empty((5, 7), "bfloat16"))),
        (VkumdValueError, lambda: ops.rms_norm(x, eps=float("nan"))),
    ]
    assert_each_raises(ctx, cases, "norm")


def test_public_names() -> None:
    assert vkumd.ops.layer_norm is ops.layer_norm
    assert vkumd.ops.rms_norm is ops.rms_norm


# Row lengths for the numerics tests: odd ones run the VEC=1 kernels, multiples of 4 VEC=4;
# the long ones give each lane several units (and the first element is no longer the lane's).
NUMERIC_COLS = [13, 64, 1001, 1024]
# Magnitudes whose squares overflow float32 (and bfloat16, which has its range), and ones
# whose squares underflow it; float16 holds neither, so it gets its own extremes.
HUGE = {"float32": 3e19, "bfloat16": 3e19, "float16": 8e3}
TINY = {"float32": 1e-25, "bfloat16": 1e-25, "float16": 1e-2}


def _norm_case(op: str, x: np.ndarray | None, eps: float) -> tuple:
    """``(run(tensor, out), float64 reference of x or None)`` for ``op``."""
    if op == "layer_norm":
        run = lambda t, out: ops.layer_norm(t, eps=eps, out=out)  # noqa: E731
        return run, None if x is None else layer_ref(x, eps=eps)
    run = lambda t, out: ops.rms_norm(t, eps=eps, out=out)  # noqa: E731
    return run, None if x is None else rms_ref(x, eps=eps)


@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_huge_rows_do_not_overflow(ctx, op: str, dtype: str, cols: int) -> None:
    # |x| near 1e19-1e20: float32 x*x overflows; before the scaled path the rows came back as
    # zeros (rms) or huge values (layer), with no NaN to tell.
    rng = np.random.default_rng()
    shape = (3, cols)
    x = sample(rng, dtype, shape, scale=HUGE[dtype], offset=HUGE[dtype] / 3)
    x[1] = HUGE[dtype] * 2  # a constant huge row: layer norm gives zeros, rms norm ones
    run, expected = _norm_case(op, x, 1e-5)
    got = run(tensor(ctx, x, dtype), poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, expected, dtype, f"{op} {dtype} {shape} |x|~{HUGE[dtype]:g}")


@pytest.mark.parametrize("eps", [0.0, 1e-5], ids=lambda e: f"eps{e:g}")
@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_tiny_rows_do_not_underflow(ctx, op: str, dtype: str, cols: int, eps: float) -> None:
    # |x| near 1e-25: x*x is below float32's smallest normal. With eps=0 the variance came
    # out 0 and the row inf/NaN; with eps=1e-5 the result is tiny but representable, and
    # eps / scale**2 overflows inside the scaled path, which must not turn it into zeros.
    rng = np.random.default_rng()
    shape = (2, cols)
    x = sample(rng, dtype, shape, scale=TINY[dtype], offset=TINY[dtype])
    run, expected = _norm_case(op, x, eps)
    got = run(tensor(ctx, x, dtype), poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, expected, dtype, f"{op} {dtype} {shape} |x|~{TINY[dtype]:g} eps={eps}")


@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_outlier_first_element_keeps_its_digits(ctx, dtype: str, cols: int) -> None:
    # The one-pass variance is taken about the row's first element; when that element is an
    # outlier, E[d^2] - E[d]^2 cancels (measured before the fix: relative error ~1e-4 in
    # float32 at cols=1024 with x[0] = 1e4). Such rows take the two-pass path.
    rng = np.random.default_rng()
    shape = (3, cols)
    x = sample(rng, dtype, shape)
    x[:, 0] = stored(np.array([1e4, -3e3, 500.0]), dtype)
    got = ops.layer_norm(tensor(ctx, x, dtype), out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, layer_ref(x), dtype, f"{dtype} {shape} outlier first")


@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_non_finite_entries_make_the_row_nan(ctx, op: str, dtype: str, cols: int) -> None:
    # Each of NaN, +inf and -inf, first (the layer-norm shift), in the middle and last; a row
    # with any of them has no finite norm and must come out all NaN, never partly finite.
    # The output starts at a finite sentinel here, so a NaN cannot be one left unwritten.
    rng = np.random.default_rng()
    bad = [(v, p) for v in (np.nan, np.inf, -np.inf) for p in (0, cols // 2, cols - 1)]
    x = sample(rng, dtype, (len(bad) + 2, cols))
    for r, (value, pos) in enumerate(bad, start=1):
        x[r, pos] = value
    out = tensor(ctx, np.full(x.shape, 7.0), dtype)
    run, _ = _norm_case(op, None, 1e-5)
    got = run(tensor(ctx, x, dtype), out).numpy()
    for r, (value, pos) in enumerate(bad, start=1):
        assert np.isnan(got[r]).all(), f"{op} {dtype}: row with {value} at {pos} is not all NaN"
    good = [0, len(bad) + 1]
    _, expected = _norm_case(op, x[good], 1e-5)
    assert_close(got[good], expected, dtype, f"{op} {dtype} finite rows")


@pytest.mark.parametrize("shape", [(3, 7), (4, 256), (2, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_scaled_path_on_every_reduction_path(ctx, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape, scale=1e20, offset=-4e19)
    x[0, 0] = np.nan
    for op in ("layer_norm", "rms_norm"):
        run, expected = _norm_case(op, x[1:], 1e-5)
        got = run(ctx.tensor(x.astype(np.float32)), poisoned(ctx, shape, "float32")).numpy()
        assert np.isnan(got[0]).all(), op
        assert_close(got[1:], expected, "float32", f"{op} {shape}")


@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_rows_near_the_float32_limit(ctx, op: str, dtype: str, cols: int) -> None:
    # |x| up to 3.3e38 (bfloat16 rounds 3.4e38 to inf) with both signs: x - x[0] itself
    # overflows, not only its square.
    rng = np.random.default_rng()
    shape = (2, cols)
    x = stored(rng.uniform(1e38, 3.3e38, shape) * rng.choice([-1.0, 1.0], shape), dtype)
    run, expected = _norm_case(op, x, 1e-5)
    got = run(tensor(ctx, x, dtype), poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, expected, dtype, f"{op} {dtype} {shape} |x| near FLT_MAX")


# Constant rows at every magnitude float32 holds, eps zero or not: the variance is 0, every
# centred value is 0, and the output is the bias. From |x| ~ 1e22 the scaled path flushed
# eps / 2^2k to zero and returned 0 * (1 / sqrt(0)) = NaN; with eps = 0 every magnitude did.
CONSTANT_MAGNITUDES = [4.25, 1e20, 1e22, 1e30, 3.4e38, -3.4e38, 1e-30]


@pytest.mark.parametrize("eps", [1e-5, 0.0], ids=lambda e: f"eps{e:g}")
@pytest.mark.parametrize("cols", [8, 13], ids=lambda c: f"cols{c}")
def test_constant_rows_give_the_bias_at_any_magnitude(ctx, cols: int, eps: float) -> None:
    from vkumd.framework.graph import evaluate

    x = np.stack([np.full(cols, m, np.float32) for m in CONSTANT_MAGNITUDES])
    w = np.linspace(0.5, 2.0, cols).astype(np.float32)
    b = np.arange(cols, dtype=np.float32) - 3
    want = np.broadcast_to(b, x.shape)
    tx, tw, tb = ctx.tensor(x), ctx.tensor(w), ctx.tensor(b)
    zeros = ctx.zeros(x.shape)
    np.testing.assert_array_equal(ops.layer_norm(tx, tw, tb, eps=eps).numpy(), want)
    np.testing.assert_array_equal(ops.add_layer_norm(tx, zeros, tw, tb, eps=eps).numpy(), want)

    def block(x, r):  # compiled: residual + norm fuses into add_layer_norm
        return (x + r).layer_norm(tw, tb, eps=eps), x.layer_norm(tw, tb, eps=eps)

    f = vkumd.compile(block, {"x": tx, "r": zeros})
    assert f.executor == "compiled"
    for got in f(tx, zeros):
        np.testing.assert_array_equal(got.numpy(), want)
    reference = evaluate(f.graph, {"x": x, "r": np.zeros_like(x)})
    for got in reference:
        np.testing.assert_array_equal(got, want)
