"""The packed types (int4, uint4, int2, uint2, float4_e2m1, float8_e8m0): the numpy reference
(vkumd/framework/packed.py) against ml_dtypes and ONNX's to_float8e8m0 on every code and on
random float32 bits, the bit layout, host round trips at odd element counts, and the device
casts against the reference bit for bit (the packed bytes compared whole, padding included).

Outputs start poisoned (every byte 0xFF, the padding bits too) so that an element or a bit a
kernel skipped shows."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.packed import (
    E8M0_ROUND_MODES,
    FORMATS,
    codes_to_values,
    floats_to_codes,
    ints_to_codes,
    pack,
    to_codes,
    unpack,
)

NAMES = list(FORMATS)
INT_NAMES = [n for n in NAMES if FORMATS[n].is_int]
ML_NAMES = {"int4": "int4", "uint4": "uint4", "int2": "int2", "uint2": "uint2",
            "float4_e2m1": "float4_e2m1fn", "float8_e8m0": "float8_e8m0fnu"}
EDGES = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.25, 0.75, 1.25, 1.75, 2.5,
                  3.5, 5.0, -5.0, 6.0, 6.5, -8.0, -8.5, 7.99, 8.0, 15.5, 16.0, -2.01, 2.0,
                  1e-40, -1e-40, 2.0**127, 1.5 * 2.0**127, 3e38, 2.0**-127], np.float32)


def _floats(rng: np.random.Generator, count: int) -> np.ndarray:
    random_bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    small = (rng.standard_normal(count) * 10).astype(np.float32)
    halves = (np.arange(-80, 80) / 4).astype(np.float32)  # ties of every type
    return np.concatenate([random_bits.view(np.float32), small, halves, EDGES])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal values with the same float32 bits (any NaN matches any NaN)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


def _raw(t) -> np.ndarray:
    """The tensor's stored bytes (packed, padding included)."""
    raw = np.empty(t.nbytes, np.uint8)
    t.context.before_host_access(t, "test")
    t.context.transfers.download(t.allocation, memoryview(raw))
    return raw


def _poisoned(ctx, shape: tuple[int, ...], name: str):
    out = ctx.empty(shape, name)
    ctx.transfers.upload(out.allocation, memoryview(np.full(out.nbytes, 0xFF, np.uint8)))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_ml_dtypes(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes cross-checks the reference")
    fmt, ml_type = FORMATS[name], getattr(ml_dtypes, ML_NAMES[name])
    every = np.arange(1 << fmt.bits, dtype=np.uint8)
    _same(codes_to_values(every, fmt), every.view(ml_type).astype(np.float32))
    if name == "float8_e8m0":
        return  # its rounding is ONNX's, checked below
    values = _floats(np.random.default_rng(), 50_000)
    mask = (1 << fmt.bits) - 1
    with np.errstate(invalid="ignore", over="ignore"):
        want = values.astype(ml_type).view(np.uint8) & mask
    np.testing.assert_array_equal(floats_to_codes(values, fmt), want)
    if fmt.is_int:
        ints = np.random.default_rng().integers(-1000, 1000, 5000).astype(np.int32)
        np.testing.assert_array_equal(ints_to_codes(ints, fmt),
                                      ints.astype(ml_type).view(np.uint8) & mask)


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("round_mode", E8M0_ROUND_MODES)
def test_e8m0_reference_matches_onnx(saturate: bool, round_mode: str) -> None:
    numpy_helper = pytest.importorskip("onnx.numpy_helper", reason="ONNX's own reference")
    values = _floats(np.random.default_rng(), 50_000)
    want = numpy_helper.to_float8e8m0(values, saturate, round_mode).view(np.uint8)
    np.testing.assert_array_equal(
        floats_to_codes(values, FORMATS["float8_e8m0"], saturate, round_mode), want)


def test_bit_layout_is_low_bits_first() -> None:
    # ONNX's layout: element 0 in the low nibble; the last byte's spare bits zero.
    np.testing.assert_array_equal(pack(np.array([1, 2, 3]), 4), [0x21, 0x03])
    np.testing.assert_array_equal(pack(np.array([1, 2, 3, 0, 1]), 2), [0x39, 0x01])
    np.testing.assert_array_equal(unpack(np.array([0x21, 0x03], np.uint8), 4, 3), [1, 2, 3])
    np.testing.assert_array_equal(codes_to_values(np.array([0xF, 0x8, 0x7]), FORMATS["int4"]),
                                  [-1, -8, 7])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 3)])
def test_tensor_round_trips_host_values(ctx, name: str, shape: tuple[int, ...]) -> None:
    fmt = FORMATS[name]
    rng = np.random.default_rng()
    if fmt.is_int:
        values = rng.integers(fmt.low, fmt.high + 1, shape)
        want = values.astype(fmt.numpy)
    else:
        values = rng.standard_normal(shape).astype(np.float32) * 4
        want = codes_to_values(to_codes(values, fmt), fmt)  # float8_e8m0: to nearest
    t = ctx.tensor(values, dtype=name)
    assert t.dtype is dtypes.dtype(name) and t.nbytes == -(-t.size * fmt.bits // 8)
    got = t.numpy()
    assert got.shape == shape and got.dtype == fmt.numpy
    _same(got, want)
    _same(t.reshape(-1).numpy(), want.reshape(-1))


def test_e8m0_uploads_every_value_exactly(ctx) -> None:
    fmt = FORMATS["float8_e8m0"]
    values = codes_to_values(np.arange(256, dtype=np.uint8), fmt)
    _same(ctx.tensor(values, dtype="float8_e8m0").numpy(), values)


def test_ml_dtypes_arrays_upload_as_their_type(ctx) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes arrays")
    t = ctx.tensor(np.array([-8, 0, 7], dtype=ml_dtypes.int4))
    assert t.dtype is dtypes.dtype("int4")
    np.testing.assert_array_equal(t.numpy(), [-8, 0, 7])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("source", ["float32", "float16", "bfloat16"])
def test_cast_floats_to_packed_on_device(ctx, name: str, source: str) -> None:
    fmt = FORMATS[name]
    values = _floats(np.random.default_rng(), 4_001)  # an odd count: a half-filled last byte
    with np.errstate(over="ignore"):
        x = ctx.tensor(values, dtype=source)
    held = np.asarray(x.numpy(), np.float32)
    out = _poisoned(ctx, values.shape, name)
    ops.cast(x, name, out=out)
    np.testing.assert_array_equal(_raw(out), pack(floats_to_codes(held, fmt), fmt.bits))


@pytest.mark.parametrize("name", INT_NAMES)
@pytest.mark.parametrize("source", ["int32", "int8", "uint8"])
def test_cast_ints_to_packed_wraps(ctx, name: str, source: str) -> None:
    fmt = FORMATS[name]
    info = np.iinfo(source)
    values = np.random.default_rng().integers(max(info.min, -5000), min(info.max, 5000) + 1,
                                              (3, 337)).astype(source)
    out = _poisoned(ctx, values.shape, name)
    ops.cast(ctx.tensor(values), name, out=out)
    np.testing.assert_array_equal(_raw(out), pack(ints_to_codes(values, fmt), fmt.bits))


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("round_mode", E8M0_ROUND_MODES)
def test_cast_to_e8m0_rounding_modes(ctx, saturate: bool, round_mode: str) -> None:
    fmt = FORMATS["float8_e8m0"]
    values = _floats(np.random.default_rng(), 2_001)
    out = _poisoned(ctx, values.shape, "float8_e8m0")
    ops.cast(ctx.tensor(values), "float8_e8m0", out=out, saturate=saturate,
             round_mode=round_mode)
    np.testing.assert_array_equal(_raw(out), floats_to_codes(values, fmt, saturate, round_mode))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16", "int32", "int8",
                                    "uint8"])
def test_cast_from_packed_on_device(ctx, name: str, target: str) -> None:
    fmt = FORMATS[name]
    if not fmt.is_int and target.startswith(("int", "uint")):
        pytest.skip("the packed float types convert to the float types alone")
    codes = np.resize(np.arange(1 << fmt.bits, dtype=np.uint8), 7 * 37)  # every code, odd
    values = codes_to_values(codes, fmt).reshape(7, 37)
    x = ctx.empty(values.shape, name)
    ctx.transfers.upload(x.allocation, memoryview(pack(codes, fmt.bits)))
    out = ctx.tensor(np.full(values.shape, 99, np.int8), dtype=target)
    ops.cast(x, target, out=out)
    with np.errstate(over="ignore"):  # 2**127 is infinity in float16
        want = dtypes.from_storage(dtypes.to_storage(values, dtypes.dtype(target)),
                                   dtypes.dtype(target))
    _same(out.numpy(), want)


def test_packed_refusals(ctx) -> None:
    four = ctx.tensor(np.ones((2, 3), np.float32), dtype="float4_e2m1")
    with pytest.raises(VkumdTypeError, match="float4_e2m1 converts to and from"):
        ops.cast(four, "int32")
    with pytest.raises(VkumdTypeError, match="int4 converts to and from"):
        ops.cast(ctx.tensor(np.ones(3, np.int8), dtype="int4"), "float8_e4m3fn")
    with pytest.raises(VkumdValueError, match="round_mode"):
        ops.cast(ctx.tensor(np.ones(3, np.float32)), "float8_e8m0", round_mode="even")
    with pytest.raises(VkumdTypeError, match="only whole, row-major views"):
        four[1]
    with pytest.raises(VkumdValueError, match="do not fit in int2"):
        ctx.tensor(np.array([2]), dtype="int2")
