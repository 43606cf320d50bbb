"""bitcast (opset/bitcast.py): a tensor's bits read as another type of the same width, as
numpy's ``view``: a view of the same memory, eager, in a compiled graph and in the packed
types; widths that differ are refused."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.errors import VkumdTypeError
from vkumd.framework import ops
from vkumd.framework.dtypes import dtype
from vkumd.framework.opset.bitcast import reinterpret

PAIRS = [("float32", "int32"), ("int32", "float32"), ("uint32", "int32"),
         ("float16", "int16"), ("uint16", "float16"), ("int8", "uint8"),
         ("uint8", "float8_e4m3fn"), ("float8_e8m0", "uint8")]


def _random_bits(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Values of ``name`` from random bits (the float types' NaN payloads kept out: numpy
    may quiet them on the way)."""
    storage = dtype(name).storage
    bits = rng.integers(0, 2**(8 * storage.itemsize), shape, dtype=np.uint64).astype(storage)
    values = np.asarray(reinterpret(bits.view(dtype(f"uint{8 * storage.itemsize}").numpy),
                                    dtype(f"uint{8 * storage.itemsize}"), dtype(name)))
    if values.dtype.kind == "f":
        values = np.where(np.isnan(values), 1.0, values).astype(values.dtype)
    return values


@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_bitcast_reads_the_same_bits(ctx, source: str, target: str) -> None:
    values = _random_bits(np.random.default_rng(), (5, 13), source)
    t = ctx.tensor(values, dtype=source)
    got = ops.bitcast(t, target)
    assert got.dtype is dtype(target) and got.shape == t.shape
    want = reinterpret(t.numpy(), dtype(source), dtype(target))
    np.testing.assert_array_equal(got.numpy(), want)


def test_bitcast_is_a_view(ctx) -> None:
    t = ctx.tensor(np.zeros(7, np.float32))
    as_ints = ops.bitcast(t, "int32")
    as_ints.write(np.full(7, 0x3F800000, np.int32))  # the bits of 1.0
    np.testing.assert_array_equal(t.numpy(), np.ones(7, np.float32))


def test_bitcast_between_packed_types(ctx) -> None:
    codes = np.arange(16, dtype=np.uint8)[:15]  # an odd count
    t = ctx.tensor(codes, dtype="uint4")
    np.testing.assert_array_equal(ops.bitcast(t, "int4").numpy(),
                                  np.where(codes > 7, codes.astype(np.int16) - 16, codes))
    fp4 = ops.bitcast(t, "float4_e2m1").numpy()
    np.testing.assert_array_equal(fp4[:8], [0, 0.5, 1, 1.5, 2, 3, 4, 6])


def test_bitcast_in_a_compiled_graph(ctx) -> None:
    x = np.random.default_rng().standard_normal((3, 11)).astype(np.float32)

    def bits_plus_one(a):
        return ops.bitcast(a * 2.0, "int32") + 1

    compiled = vkumd.compile(bits_plus_one, (x,), ctx=ctx)
    got = np.asarray(compiled(x))
    np.testing.assert_array_equal(got, (x * np.float32(2)).view(np.int32) + 1)


def test_bitcast_of_other_widths_is_refused(ctx) -> None:
    with pytest.raises(VkumdTypeError, match=r"float32 \(32 bits\) to int8 \(8 bits\)"):
        ops.bitcast(ctx.tensor(np.ones(3, np.float32)), "int8")
    with pytest.raises(VkumdTypeError, match=r"int4 \(4 bits\) to int2 \(2 bits\)"):
        ops.bitcast(ctx.tensor(np.ones(3, np.int8), dtype="int4"), "int2")
