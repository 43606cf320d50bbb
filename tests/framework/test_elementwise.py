"""Elementwise ops against numpy: every op and dtype, broadcasting, big grids and bad input.

Float results are compared with a float64 reference computed from the stored inputs, by
relative error within one rounding of the output type; int32, fill, copy and cast are exact.
Outputs passed with ``out=`` start poisoned (NaN, or a sentinel for int32) so an element the
kernel skipped shows up.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

import vkumd
from vkumd.framework import dtypes, ops
from vkumd.testing.numerics import SENTINEL, poisoned  # noqa: F401 (shared here)

DTYPES = ["float32", "float16", "bfloat16", "int32"]
FLOATS = ["float32", "float16", "bfloat16"]
# Relative tolerance: float32 arithmetic (division may be off by a few ulp), then one
# rounding to the stored type. atol covers float16 results in the subnormal range.
RTOL = {"float32": 2e-6, "float16": 2.0**-10, "bfloat16": 2.0**-7}
ATOL = {"float32": 0.0, "float16": 2.0**-23, "bfloat16": 0.0}
SHAPES = [(), (1,), (7,), (13,), (7, 13), (2, 3, 5)]
BROADCASTS = [((), ()), ((1,), (1,)), ((7,), (7,)), ((13, 7), (13, 7)), ((3, 1, 5), (4, 1)),
              ((5,), (2, 3, 5)), ((7,), ()), ((0, 3), (3,)), ((2, 0), (1,))]
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
LARGE = 65535 * 64 + 1000  # past one row of workgroups: the 2-D grid


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """What a tensor of ``dtype`` holds (as .numpy() returns it) for float64/int ``values``."""
    values = np.asarray(values)
    if dtype == "bfloat16":
        bits = dtypes.float32_to_bfloat16_bits(values.astype(np.float32))
        return dtypes.bfloat16_bits_to_float32(bits).reshape(values.shape)
    with np.errstate(over="ignore"):
        return values.astype(dtype)


def sample(rng: np.random.Generator, dtype: str, shape: tuple[int, ...], *,
           away_from_zero: bool = False) -> np.ndarray:
    """Random values exactly representable in ``dtype`` (full range for int32)."""
    if dtype == "int32":
        values = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64)
        if away_from_zero:
            values = rng.integers(1, 1000, size=shape) * rng.choice([-1, 1], size=shape)
        return values.astype(np.int32)
    values = rng.standard_normal(shape)
    if away_from_zero:
        values = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return stored(values, dtype)


def assert_matches(got: np.ndarray, expected: np.ndarray, dtype: str) -> None:
    """Exact for int32; otherwise within one rounding of ``dtype`` of the float64 value."""
    assert got.shape == expected.shape
    if dtype == "int32":
        np.testing.assert_array_equal(got, expected)
        return
    assert not np.isnan(got).any(), "an output element was not written"
    np.testing.assert_allclose(got, expected, rtol=RTOL[dtype], atol=ATOL[dtype])


def assert_usable(ctx) -> None:
    t = ctx.tensor(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(ops.add(t, t).numpy(), [0, 2, 4, 6])


# -- binary --------------------------------------------------------------------------------


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_matches_numpy(ctx, op: str, dtype: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((op, dtype, shapes)).encode()))
    a = sample(rng, dtype, shapes[0])
    b = sample(rng, dtype, shapes[1], away_from_zero=op == "div")
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    out = poisoned(ctx, out_shape, dtype)
    kwargs = {"rounding": "floor"} if dtype == "int32" and op == "div" else {}
    result = getattr(ops, op)(ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype), out=out,
                              **kwargs)
    assert result is out and result.dtype.name == dtype
    if dtype == "int32":
        with np.errstate(over="ignore"):
            fn = np.floor_divide if op == "div" else BINARY[op]
            expected = fn(a, b)
    else:
        expected = BINARY[op](a.astype(np.float64), b.astype(np.float64))
    assert_matches(result.numpy(), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_allocates_its_output(ctx, dtype: str) -> None:
    rng = np.random.default_rng(1)
    a, b = sample(rng, dtype, (4, 1)), sample(rng, dtype, (3,))
    result = ops.sub(ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype))
    assert result.shape == (4, 3) and result.dtype.name == dtype
    with np.errstate(over="ignore"):
        expected = a - b if dtype == "int32" else a.astype(np.float64) - b
    assert_matches(result.numpy(), expected, dtype)


@pytest.mark.parametrize("rounding", ["floor", "trunc"])
def test_int32_division_rounds_as_asked(ctx, rounding: str) -> None:
    a = np.array([7, -7, 7, -7, 6, 0, 5, -2**31, -2**31, 2**31 - 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 4, 0, -1, 1, -1], np.int32)
    got = ops.div(ctx.tensor(a), ctx.tensor(b), rounding=rounding).numpy()
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if rounding == "floor":
            expected = np.floor_divide(a, b)
        else:
            expected = np.trunc(a.astype(np.float64) / b).astype(np.int64)
            expected = np.where(b == 0, 0, expected)
            expected = np.where((a == -2**31) & (b == -1), -2**31, expected).astype(np.int32)
    np.testing.assert_array_equal(got, [3, -4, -4, 3, 2, 0, 0, -2**31, -2**31, -2**31 + 1]
                                  if rounding == "floor" else expected)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("rounding", ["floor", "trunc"])
def test_float_division_with_rounding(ctx, dtype: str, rounding: str) -> None:
    rng = np.random.default_rng(2)
    a = stored(rng.uniform(-20, 20, 257), dtype)
    b = sample(rng, dtype, (257,), away_from_zero=True)
    got = ops.div(ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype),
                  rounding=rounding).numpy()
    quotient = a.astype(np.float32) / b.astype(np.float32)
    expected = stored(np.floor(quotient) if rounding == "floor" else np.trunc(quotient), dtype)
    np.testing.assert_array_equal(got, expected)


def test_in_place_output(ctx) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ctx.tensor(a)
    assert ops.mul(t, ctx.tensor(np.float32([2, 3, 4, 5])), out=t) is t
    np.testing.assert_array_equal(t.numpy(), a * [2, 3, 4, 5])


def test_one_pipeline_serves_every_shape(ctx) -> None:
    """One pipeline per variant: the scalar kernel, and the vector one per broadcast mask
    (tests/framework/test_binary_vector.py); each serves every shape it is chosen for."""
    rng = np.random.default_rng(3)
    warm = [((5,), (5,)), ((3, 1, 5), (4, 1)), ((), (9, 9))]
    shapes = [((7,), (7,)), ((2, 1, 5), (3, 1)), ((2, 3, 4, 5, 6, 1), (7,)), ((), (13,)),
              ((4, 1), (4, 3))]
    for a_shape, b_shape in warm:
        ops.add(ctx.tensor(sample(rng, "float32", a_shape)),
                ctx.tensor(sample(rng, "float32", b_shape)))
    before = len(ctx.kernels)
    for a_shape, b_shape in shapes:
        a, b = sample(rng, "float32", a_shape), sample(rng, "float32", b_shape)
        got = ops.add(ctx.tensor(a), ctx.tensor(b)).numpy()
        np.testing.assert_array_equal(got, a + b)
    assert len(ctx.kernels) == before


# -- fill, copy, cast, scale -----------------------------------------------------------------


@pytest.mark.parametrize("shape", [*SHAPES, (0,), (4, 0)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_is_exact(ctx, dtype: str, shape) -> None:
    values = [-7, 2**31 - 1] if dtype == "int32" else [3.7, -1e6, 1e-30, -0.0, np.inf]
    t = poisoned(ctx, shape, dtype)
    for value in values:
        assert ops.fill(t, value) is t
        with np.errstate(over="ignore"):
            expected = stored(np.full(shape, value, np.float64 if dtype != "int32" else np.int64),
                              dtype)
        got = t.numpy()
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


def test_fill_accepts_numpy_scalars_and_integral_floats(ctx) -> None:
    t = ctx.empty((3,), "int32")
    np.testing.assert_array_equal(ops.fill(t, np.int64(5)).numpy(), [5, 5, 5])
    np.testing.assert_array_equal(ops.fill(t, 6.0).numpy(), [6, 6, 6])
    f = ctx.empty((2,), "float16")
    np.testing.assert_array_equal(ops.fill(f, np.float32(0.1)).numpy(), np.float16([0.1, 0.1]))


@pytest.mark.parametrize("shape", [*SHAPES, (0,)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_is_bit_exact(ctx, dtype: str, shape) -> None:
    rng = np.random.default_rng(4)
    host = sample(rng, dtype, shape)
    if dtype != "int32" and host.size >= 5:
        flat = host.reshape(-1)
        flat[:5] = [np.nan, -0.0, np.inf, -np.inf, 1e-40 if dtype != "float16" else 1e-7]
        host = stored(host, dtype)
    src = ctx.tensor(host, dtype=dtype)
    out = poisoned(ctx, shape, dtype)
    assert ops.copy(src, out) is out
    assert ops.copy(src).shape == shape
    got = out.numpy()
    np.testing.assert_array_equal(got, host)
    if dtype != "int32":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(host))


def test_same_shape_copy_is_a_transfer_and_overlap_takes_the_kernel(ctx) -> None:
    rng = np.random.default_rng()
    host = rng.standard_normal(1001).astype(np.float32)
    src, out = ctx.tensor(host), poisoned(ctx, (1001,), "float32")
    stream = ctx.current_stream()
    before = stream.dispatches
    ops.copy(src, out=out)
    assert stream.dispatches == before  # a transfer command, no kernel
    np.testing.assert_array_equal(out.numpy(), host)
    # Overlapping bytes (here a tensor onto itself) cannot be a transfer: the kernel copies.
    ops.copy(out, out=out)
    assert stream.dispatches == before + 1
    np.testing.assert_array_equal(out.numpy(), host)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 1), (2, 3, 4)), ((), (5,)), ((5,), (2, 3, 5)),
                                    ((1, 7), (1, 7))], ids=str)
def test_copy_broadcasts_into_out(ctx, dtype: str, shapes) -> None:
    rng = np.random.default_rng(5)
    host = sample(rng, dtype, shapes[0])
    out = poisoned(ctx, shapes[1], dtype)
    ops.copy(ctx.tensor(host, dtype=dtype), out=out)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(host, shapes[1]))


def cast_source(rng: np.random.Generator, src: str, dst: str, shape) -> np.ndarray:
    if src == "int32":  # exact in float32, so one rounding to the target
        values = rng.integers(-2**24, 2**24, size=shape)
        if dst == "float16":
            values = rng.integers(-70000, 70000, size=shape)  # some overflow to inf
        return values.astype(np.int32)
    if dst == "int32":  # in range, both signs, with fractions that truncate
        return stored(rng.uniform(-1000.0, 1000.0, size=shape), src)
    values = stored(rng.standard_normal(shape) * 10.0 ** rng.integers(-9, 9, size=shape), src)
    if values.size >= 4:
        values.reshape(-1)[:4] = [np.inf, -np.inf, -0.0, 0.0]
    return values


@pytest.mark.parametrize("shape", [(), (1,), (13,), (3, 7), (0,)], ids=str)
@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_cast_matches_numpy_astype(ctx, src: str, dst: str, shape) -> None:
    rng = np.random.default_rng(6)
    host = cast_source(rng, src, dst, shape)
    out = poisoned(ctx, shape, dst)
    assert ops.cast(ctx.tensor(host, dtype=src), dst, out=out) is out
    with np.errstate(over="ignore"):
        expected = stored(host.astype(np.float32) if dst == "bfloat16" else host, dst)
        if dst == "int32":
            expected = np.trunc(host.astype(np.float64)).astype(np.int32)
    got = out.numpy()
    np.testing.assert_array_equal(got, expected)
    if dst != "int32":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
    assert ops.cast(ctx.tensor(host, dtype=src), dtypes.dtype(dst)).shape == shape


@pytest.mark.parametrize("dtype", FLOATS)
def test_cast_keeps_nan(ctx, dtype: str) -> None:
    host = np.float32([np.nan, 1.0])
    for target in FLOATS:
        got = ops.cast(ctx.tensor(host, dtype=dtype), target).numpy()
        assert np.isnan(got[0]) and got[1] == 1.0


def test_cast_to_bfloat16_rounds_to_nearest_even(ctx) -> None:
    values = np.float32([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38, 3.4e38, 1e-40])
    got = ops.cast(ctx.tensor(values), "bfloat16").numpy()
    np.testing.assert_array_equal(got, stored(values, "bfloat16"))


@pytest.mark.parametrize("shape", [*SHAPES, (0,)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_matches_numpy(ctx, dtype: str, shape) -> None:
    rng = np.random.default_rng(7)
    host = sample(rng, dtype, shape)
    alpha = -3 if dtype == "int32" else 2.5
    out = poisoned(ctx, shape, dtype)
    assert ops.scale(ctx.tensor(host, dtype=dtype), alpha, out) is out
    with np.errstate(over="ignore"):
        expected = host * np.int32(alpha) if dtype == "int32" else host.astype(np.float64) * alpha
    assert_matches(out.numpy(), expected, dtype)
    assert_matches(ops.scale(ctx.tensor(host, dtype=dtype), alpha).numpy(), expected, dtype)


# -- the 2-D grid ----------------------------------------------------------------------------


def test_large_tensors_use_the_two_dimensional_grid(ctx) -> None:
    rng = np.random.default_rng(8)
    a = rng.standard_normal(LARGE).astype(np.float32)
    b = rng.standard_normal(LARGE).astype(np.float32)
    out = poisoned(ctx, (LARGE,), "float32")
    ops.add(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), a + b)
    ops.add(ctx.tensor(a), ctx.tensor(np.float32(1.5)), out=out)  # broadcast a scalar
    np.testing.assert_array_equal(out.numpy(), a + np.float32(1.5))
    ops.scale(ctx.tensor(a), 2.0, out)
    np.testing.assert_array_equal(out.numpy(), a * 2)

    ints = poisoned(ctx, (LARGE,), "int32")
    np.testing.assert_array_equal(ops.fill(ints, 42).numpy(), np.full(LARGE, 42))
    halves = ops.cast(ctx.tensor(a), "bfloat16")
    np.testing.assert_array_equal(halves.numpy(), stored(a, "bfloat16"))
    back = poisoned(ctx, (LARGE,), "float32")
    np.testing.assert_array_equal(ops.copy(ctx.tensor(a), back).numpy(), a)


# -- bad input -------------------------------------------------------------------------------


def test_dtype_mismatch_is_refused(ctx) -> None:
    a, b = ctx.tensor(np.ones(3, np.float32)), ctx.tensor(np.ones(3, np.float16))
    with pytest.raises(vkumd.VkumdTypeError, match="cast one first"):
        ops.add(a, b)
    with pytest.raises(vkumd.VkumdTypeError, match="use cast"):
        ops.copy(a, b)
    assert_usable(ctx)


def test_non_broadcastable_shapes_are_refused(ctx) -> None:
    with pytest.raises(vkumd.VkumdValueError, match="do not broadcast"):
        ops.mul(ctx.empty((3,)), ctx.empty((4,)))
    with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
        ops.copy(ctx.empty((2, 3)), ctx.empty((3,)))
    with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
        ops.copy(ctx.empty((4,)), ctx.empty((2, 3)))
    with pytest.raises(vkumd.VkumdValueError, match="at most 6"):
        ops.add(ctx.empty((1,) * 7), ctx.empty((1,)))
    assert_usable(ctx)


@pytest.mark.parametrize("op", ["add", "cast", "scale", "copy"])
def test_out_with_the_wrong_shape_or_dtype_is_refused(ctx, op: str) -> None:
    src = ctx.tensor(np.ones((2, 3), np.float32))
    calls = {
        "add": lambda out: ops.add(src, src, out=out),
        "cast": lambda out: ops.cast(src, "float16", out=out),
        "scale": lambda out: ops.scale(src, 2.0, out=out),
        "copy": lambda out: ops.copy(src, out=out),
    }
    right = "float16" if op == "cast" else "float32"
    with pytest.raises(vkumd.VkumdValueError, match="shape"):
        calls[op](ctx.empty((3, 2), right))
    wrong = "int32" if op != "copy" else "float16"
    with pytest.raises((vkumd.VkumdValueError, vkumd.VkumdTypeError), match="dtype|cast"):
        calls[op](ctx.empty((2, 3), wrong))
    with pytest.raises(vkumd.VkumdTypeError, match="Tensor"):
        calls[op](np.ones((2, 3), np.float32))
    assert_usable(ctx)


@pytest.mark.parametrize("bad", ["complex64", "nonsense", object])
def test_cast_to_an_unsupported_dtype_is_refused(ctx, bad) -> None:
    with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
        ops.cast(ctx.empty((2,)), bad)
    assert_usable(ctx)


def test_unsupported_element_types_are_refused(ctx) -> None:
    t = ctx.tensor(np.ones(3, np.int8))
    # (int8 with int8 runs in the binary kernel; a number beside it is not filled in 8 bits.
    # copy and cast take int8: tests/framework/test_integer_select.py.)
    for call in (lambda: ops.add(t, 1), lambda: ops.fill(t, 1), lambda: ops.scale(t, 2)):
        with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
            call()
    assert_usable(ctx)


def test_bad_scalars_and_rounding_are_refused(ctx) -> None:
    ints = ctx.tensor(np.arange(3, dtype=np.int32))
    with pytest.raises(vkumd.VkumdTypeError, match="rounding='floor'"):
        ops.div(ints, ints)
    with pytest.raises(vkumd.VkumdValueError, match="rounding"):
        ops.div(ints, ints, rounding="nearest")
    with pytest.raises(vkumd.VkumdValueError, match="not an integer"):
        ops.fill(ints, 2.5)
    with pytest.raises(vkumd.VkumdValueError, match="not an integer"):
        ops.scale(ints, 0.5)
    with pytest.raises(vkumd.VkumdValueError, match="does not fit"):
        ops.fill(ints, 2**31)
    for bad in ("1", None, 1 + 2j, True):
        with pytest.raises(vkumd.VkumdTypeError, match="real number"):
            ops.fill(ctx.empty((2,)), bad)
    with pytest.raises(vkumd.VkumdTypeError, match="Tensor"):
        ops.add(ints, [1, 2, 3])
    assert_usable(ctx)


def test_tensors_from_two_contexts_are_refused(ctx) -> None:
    mine = ctx.tensor(np.ones(3, np.float32))
    with vkumd.Context() as other:
        theirs = other.tensor(np.ones(3, np.float32))
        with pytest.raises(vkumd.VkumdValueError, match="different context"):
            ops.add(mine, theirs)
        with pytest.raises(vkumd.VkumdValueError, match="different context"):
            ops.add(mine, mine, out=theirs)
        with pytest.raises(vkumd.VkumdValueError, match="different context"):
            ops.copy(mine, theirs)
        np.testing.assert_array_equal(ops.add(theirs, theirs).numpy(), [2, 2, 2])
    assert_usable(ctx)


def test_released_tensors_are_refused(ctx) -> None:
    t = ctx.tensor(np.ones(3, np.float32))
    t.release()
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        ops.scale(t, 2.0)
    assert_usable(ctx)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sixteen_bit_types_need_16bit_storage(ctx, monkeypatch, dtype: str) -> None:
    t16 = ctx.tensor(np.ones(3, np.float32), dtype=dtype)
    t32 = ctx.tensor(np.ones(3, np.float32))
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(ctx.caps, storage_16bit=False))
    for call in (lambda: ops.add(t16, t16), lambda: ops.fill(t16, 1.0),
                 lambda: ops.cast(t32, dtype), lambda: ops.copy(t16)):
        with pytest.raises(vkumd.CapabilityMissing, match="16-bit storage"):
            call()
    monkeypatch.undo()
    assert_usable(ctx)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((3001, 7), (7,)), ((7, 3001), (7, 1)),
                                                  ((5, 997, 3), (997, 1)), ((4099,), (1,))])
def test_broadcasts_longer_than_one_pass_of_the_grid(ctx, a_shape, b_shape) -> None:
    # More elements than invocations, so every invocation carries its (row, column) across
    # several loop steps; column counts that do not divide the step.
    rng = np.random.default_rng()
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    shape = np.broadcast_shapes(a_shape, b_shape)
    out = poisoned(ctx, shape, "float32")
    ops.mul(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), a * b)
    cast_out = poisoned(ctx, shape, "float16")
    ops.cast(ctx.tensor(b), "float16", out=cast_out)
    np.testing.assert_array_equal(cast_out.numpy(),
                                  np.broadcast_to(b.astype(np.float16), shape).astype(np.float32))
