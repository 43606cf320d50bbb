"""bool as a tensor type: numpy round trips, casts to and from every stored type on the device
(nonzero is True, True is 1) against numpy, odd shapes, outputs poisoned first, and the casts
no kernel runs refused."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder

# Every type bool casts to and from.
PARTNERS = ["float32", "float16", "bfloat16", "int32", "int16", "uint16", "uint32", "uint64",
            "float64", "int8", "uint8"]
SHAPES = [(7,), (4099,), (5, 13), (3, 1, 9)]


def _needs(ctx, dtype: str) -> None:
    caps = ctx.caps
    if not caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (bool is a byte)")
    if dtype == "float64" and not caps.shader_float64:
        pytest.skip("the device has no shaderFloat64")
    if dtype == "uint64" and not caps.shader_int64:
        pytest.skip("the device has no shaderInt64")
    if dtype in ("float16", "bfloat16", "int16", "uint16") and not caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Mostly zeros and small values of ``dtype`` (floats with fractions, NaN, inf, -0.0), as
    numpy holds them (bfloat16 as float32)."""
    if dtype in ("float32", "float16", "bfloat16", "float64"):
        data = rng.choice([0.0, -0.0, 0.25, -1.5, 3.0, np.nan, np.inf, 1e-3], shape)
        return data.astype(np.float64 if dtype == "float64" else
                           np.float16 if dtype == "float16" else np.float32)
    info = np.iinfo(dtype)
    return rng.choice(np.array([0, 0, 1, info.max, info.min or 2], dtype), shape)


def _poisoned(ctx, shape: tuple[int, ...], dtype: str) -> vkumd.Tensor:
    if dtype == "bool":  # the byte 0x5B: neither of bool's, so an unwritten one shows
        return ctx.tensor(np.full(shape, 0x5B, np.uint8).view(np.bool_))
    return ctx.tensor(np.full(shape, 91, np.float32 if dtype == "bfloat16" else dtype),
                      dtype=dtype)


def assert_bools(t: vkumd.Tensor, want: np.ndarray) -> None:
    """``t`` holds ``want``'s bytes exactly: 0 or 1, no poison left."""
    assert t.dtype is dtypes.bool_
    np.testing.assert_array_equal(t.numpy().view(np.uint8), np.asarray(want, np.uint8))


def test_bool_arrays_become_bool_tensors(ctx) -> None:
    data = np.random.default_rng().random((3, 37)) < 0.5
    t = ctx.tensor(data)
    assert t.dtype is dtypes.bool_ is vkumd.bool_ and t.dtype.itemsize == 1
    back = t.numpy()
    assert back.dtype == np.bool_
    np.testing.assert_array_equal(back, data)


def test_asking_for_bool_keeps_nonzero(ctx) -> None:
    data = np.array([0.0, -0.0, 0.5, np.nan, -np.inf, 2.0])
    np.testing.assert_array_equal(ctx.tensor(data, dtype="bool").numpy(), data.astype(bool))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", PARTNERS)
def test_cast_to_bool_is_nonzero(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    _needs(ctx, dtype)
    data = _values(np.random.default_rng(), dtype, shape)
    x = ctx.tensor(data, dtype=dtype)
    out = _poisoned(ctx, shape, "bool")
    got = ops.cast(x, "bool", out=out)
    assert got is out and got.dtype is dtypes.bool_
    assert_bools(got, x.numpy().astype(bool))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", PARTNERS)
def test_cast_from_bool_is_one_and_zero(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    _needs(ctx, dtype)
    data = np.random.default_rng().random(shape) < 0.5
    out = _poisoned(ctx, shape, dtype)
    got = ops.cast(ctx.tensor(data), dtype, out=out)
    assert got is out
    want = data.astype(np.float32 if dtype == "bfloat16" else dtype)
    np.testing.assert_array_equal(got.numpy(), want)


def test_bool_broadcasts_into_out(ctx) -> None:
    _needs(ctx, "float32")
    data = np.random.default_rng().random((1, 9)) < 0.5
    out = _poisoned(ctx, (5, 9), "float32")
    ops.cast(ctx.tensor(data), "float32", out=out)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(data, (5, 9)).astype(np.float32))


@pytest.mark.parametrize(("source", "target"), [("bool", "float8_e4m3fn"),
                                                ("float8_e5m2", "bool")])
def test_casts_no_kernel_runs_are_refused(ctx, source: str, target: str) -> None:
    _needs(ctx, "float32")
    x = ctx.tensor(np.zeros(3, np.float32 if source == "float32" else source))
    with pytest.raises(VkumdTypeError, match=f"cast: {source} to {target} is not supported"):
        ops.cast(x, target)


BITWISE = {"bitwise_and": np.logical_and, "bitwise_or": np.logical_or,
           "bitwise_xor": np.logical_xor}
COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "ge": np.greater_equal}


@pytest.mark.parametrize(("a_shape", "b_shape"), [((7,), (7,)), ((4099,), (4099,)),
                                                  ((5, 13), (13,)), ((3, 1, 9), (4, 1))],
                         ids=str)
@pytest.mark.parametrize("op", [*BITWISE, *COMPARE])
def test_logic_and_comparisons_of_bool(ctx, op: str, a_shape: tuple, b_shape: tuple) -> None:
    """and, or, xor of bool are logical (as PyTorch's); comparisons of bool order False
    before True; every result bool, into a poisoned out."""
    _needs(ctx, "float32")
    rng = np.random.default_rng()
    a, b = rng.random(a_shape) < 0.5, rng.random(b_shape) < 0.5
    want = {**BITWISE, **COMPARE}[op](a, b)
    out = _poisoned(ctx, want.shape, "bool")
    got = getattr(ops, op)(ctx.tensor(a), ctx.tensor(b), out=out)
    assert got is out
    assert_bools(got, want)


def test_a_float_comparison_into_a_bool_out(ctx) -> None:
    _needs(ctx, "float32")
    rng = np.random.default_rng()
    x, y = rng.standard_normal((5, 13)).astype(np.float32), rng.standard_normal(13)
    y = y.astype(np.float32)
    x[0, :3] = [np.nan, y[1], -0.0]
    out = _poisoned(ctx, (5, 13), "bool")
    got = ops.le(ctx.tensor(x), ctx.tensor(y), out=out)
    assert_bools(got, x <= y)


def test_graph_comparisons_give_bool_and_where_takes_it(ctx) -> None:
    """In a graph a comparison is bool; ``where`` selects with it (and still with a uint8
    condition); a bool output comes back as numpy bool."""
    _needs(ctx, "float32")
    b = GraphBuilder()
    x = b.input("x", (5, 11))
    y = b.input("y", (5, 11))
    byte_mask = b.input("m", (5, 11), "uint8")
    mask = b.gt(x, y)
    assert mask.dtype is dtypes.bool_
    b.output(b.where(mask, x, y), b.where(byte_mask, x, 0.0), mask,
             b.cast(mask, "float32"))
    compiled = CompiledGraph(b.build(), ctx)
    rng = np.random.default_rng()
    xs = rng.standard_normal((5, 11)).astype(np.float32)
    ys = rng.standard_normal((5, 11)).astype(np.float32)
    ms = rng.integers(0, 3, (5, 11)).astype(np.uint8)
    picked, masked, got_mask, as_float = compiled(x=ctx.tensor(xs), y=ctx.tensor(ys),
                                                  m=ms)
    np.testing.assert_array_equal(picked.numpy(), np.maximum(xs, ys))
    np.testing.assert_array_equal(masked.numpy(), np.where(ms != 0, xs, 0.0))
    assert_bools(got_mask, xs > ys)
    np.testing.assert_array_equal(as_float.numpy(), (xs > ys).astype(np.float32))


def test_torch_bool_tensors_cross_dlpack_both_ways(ctx) -> None:
    torch = pytest.importorskip("torch")
    _needs(ctx, "float32")
    t = torch.rand(3, 7) < 0.5
    v = vkumd.from_dlpack(t, ctx)
    assert v.dtype is dtypes.bool_
    np.testing.assert_array_equal(v.numpy(), t.numpy())
    back = torch.from_dlpack(v) if v.__dlpack_device__()[0] == 1 else torch.from_numpy(v.numpy())
    assert back.dtype == torch.bool and torch.equal(back, t)
