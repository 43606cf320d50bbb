"""The float8 formats: the numpy reference (vkumd/framework/float8.py) against hand-worked
values and ml_dtypes, and the device casts against the reference bit for bit (a float8 value
is compared through its exact float32 widening, sign of zero and NaN included).

Outputs start poisoned so that an element a kernel skipped shows."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes, ops
from vkumd.framework.float8 import FORMATS, float8_bits_to_float32, float32_to_float8_bits

NAMES = list(FORMATS)
ALL_BITS = np.arange(256, dtype=np.uint8)
# Every float16 value (each a float32 one), then values at the formats' edges.
EDGES = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 448, 464, 465, 480, -464, 240,
                  248, 256, 57344, 61440, 61441, 65536, 2.0**-9, 2.0**-10, 1.5 * 2.0**-9,
                  2.0**-17, 2.0**-18, 1e-30, -1e-30, 3e38], np.float32)


def _inputs(rng: np.random.Generator, count: int) -> np.ndarray:
    every_half = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    random_bits = rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([every_half, random_bits.view(np.float32), EDGES])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """The same float32 bits, except that any NaN matches any NaN."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bad = np.nonzero(got.view(np.uint32)[~nan] != want.view(np.uint32)[~nan])[0]
    assert bad.size == 0, f"{bad.size} differ, first got {got[~nan][bad[:4]]}, want " \
                          f"{want[~nan][bad[:4]]}"


@pytest.mark.parametrize(("name", "value", "saturate", "bits"), [
    ("float8_e4m3fn", 448.0, False, 0x7E), ("float8_e4m3fn", 464.0, False, 0x7E),  # tie: even
    ("float8_e4m3fn", 465.0, False, 0x7F), ("float8_e4m3fn", 465.0, True, 0x7E),
    ("float8_e4m3fn", -np.inf, True, 0xFE), ("float8_e4m3fn", np.inf, False, 0x7F),
    ("float8_e4m3fn", 2.0**-9, False, 0x01), ("float8_e4m3fn", 2.0**-10, False, 0x00),
    ("float8_e4m3fn", 1.5 * 2.0**-9, False, 0x02), ("float8_e4m3fn", -0.0, False, 0x80),
    ("float8_e4m3fn", 1.0, True, 0x38), ("float8_e4m3fnuz", -0.0, False, 0x00),
    ("float8_e4m3fnuz", 1.0, True, 0x40), ("float8_e4m3fnuz", np.nan, True, 0x80),
    ("float8_e4m3fnuz", -1e9, False, 0x80), ("float8_e4m3fnuz", -1e9, True, 0xFF),
    ("float8_e5m2", np.inf, True, 0x7B), ("float8_e5m2", np.inf, False, 0x7C),
    ("float8_e5m2", -61440.0, False, 0xFC), ("float8_e5m2", 1.0, True, 0x3C),
    ("float8_e5m2", 2.0**-16, True, 0x01), ("float8_e5m2fnuz", 1.0, True, 0x40),
    ("float8_e5m2fnuz", -2.0**-18, True, 0x00), ("float8_e5m2fnuz", np.inf, False, 0x80),
])
def test_reference_hand_worked(name: str, value: float, saturate: bool, bits: int) -> None:
    fmt = FORMATS[name]
    got = float32_to_float8_bits(np.array([value], np.float32), fmt, saturate)
    assert int(got[0]) == bits
    back = float8_bits_to_float32(got, fmt)[0]
    if not np.isnan(back) and not np.isinf(back) and abs(value) <= fmt.max:
        assert abs(back - value) <= abs(value) * 2.0 ** -fmt.mantissa + 2.0 ** (
            1 - fmt.bias - fmt.mantissa)


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_ml_dtypes(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes cross-checks the reference")
    fmt, ml_type = FORMATS[name], getattr(ml_dtypes, name)
    values = _inputs(np.random.default_rng(), 200_000)
    decoded = float8_bits_to_float32(ALL_BITS, fmt)
    _same(decoded, ALL_BITS.view(ml_type).astype(np.float32))
    info = ml_dtypes.finfo(ml_type)
    assert fmt.max == float(info.max)
    with np.errstate(invalid="ignore", over="ignore"):
        for saturate in (False, True):
            source = np.clip(values, float(info.min), float(info.max)) if saturate else values
            # ONNX's own reference: clip (saturate) then ml_dtypes' round to nearest even.
            want = source.astype(ml_type).view(np.uint8)
            np.testing.assert_array_equal(float32_to_float8_bits(values, fmt, saturate), want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("source", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("saturate", [True, False])
def test_cast_to_float8_on_device(ctx, name: str, source: str, saturate: bool) -> None:
    fmt = FORMATS[name]
    values = _inputs(np.random.default_rng(), 30_001)
    with np.errstate(over="ignore"):  # float16 holds past 65504 as infinity
        x = ctx.tensor(values, dtype=source)
    held = x.numpy().astype(np.float32)  # the source's own rounding of the values
    out = ctx.tensor(np.full(values.shape, -3.0, np.float32), dtype=name)
    ops.cast(x, name, out=out, saturate=saturate)
    want = float8_bits_to_float32(float32_to_float8_bits(held, fmt, saturate), fmt)
    _same(out.numpy(), want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16", *NAMES])
def test_cast_from_float8_on_device(ctx, name: str, target: str) -> None:
    fmt = FORMATS[name]
    values = float8_bits_to_float32(np.tile(ALL_BITS, 3)[:707].reshape(7, 101), fmt)
    x = ctx.tensor(values, dtype=name)
    out = ctx.tensor(np.full(values.shape, -3.0, np.float32), dtype=target)
    ops.cast(x, target, out=out)
    want = dtypes.from_storage(dtypes.to_storage(values, dtypes.dtype(target)),
                               dtypes.dtype(target))
    if dtypes.dtype(target).is_float8 and target != name:  # a cast saturates, the host not
        want = float8_bits_to_float32(float32_to_float8_bits(values, FORMATS[target], True),
                                      FORMATS[target])
    _same(np.asarray(out.numpy(), np.float32), np.asarray(want, np.float32))


def test_cast_float8_broadcasts_into_out(ctx) -> None:
    row = np.linspace(-500, 500, 13, dtype=np.float32)
    out = ctx.tensor(np.full((5, 13), -3.0, np.float32), dtype="float8_e4m3fn")
    ops.cast(ctx.tensor(row), "float8_e4m3fn", out=out)
    fmt = FORMATS["float8_e4m3fn"]
    want = float8_bits_to_float32(float32_to_float8_bits(row, fmt, True), fmt)
    _same(out.numpy(), np.broadcast_to(want, (5, 13)).copy())


def test_float8_tensor_round_trips_host_values(ctx) -> None:
    fmt = FORMATS["float8_e5m2"]
    values = float8_bits_to_float32(ALL_BITS, fmt)
    t = ctx.tensor(values, dtype="float8_e5m2")
    assert t.dtype is dtypes.float8_e5m2 and t.dtype.itemsize == 1
    _same(t.numpy(), values)


def test_float8_with_int32_is_refused(ctx) -> None:
    with pytest.raises(VkumdTypeError, match="float8 formats convert"):
        ops.cast(ctx.tensor(np.ones(3, np.float32), dtype="float8_e4m3fn"), "int32")
    with pytest.raises(VkumdTypeError, match="float8 formats convert"):
        ops.cast(ctx.tensor(np.ones(3, np.int32)), "float8_e5m2")
