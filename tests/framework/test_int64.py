"""int64 tensors: numpy round trips, the binary kernel's ops and every cast against numpy's
int64, exactly, with values far past int32's range (a narrowing bug cannot pass), odd and
broadcast shapes, outputs poisoned first -- on both of DeviceCaps.int64_arithmetic's paths:
``native`` (int64_t, shaderInt64) and ``emulated`` (two 32-bit words), the latter forced on
any device by a copy of its caps without shaderInt64."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.compiler.glslang import compile_glsl
from vkumd.compiler.kernels.elementwise import (
    ELEMENTWISE_BINARY,
    ELEMENTWISE_UNARY,
    INT64_EMULATED_OPS,
)
from vkumd.errors import CapabilityMissing, VkumdValueError
from vkumd.framework import dtypes

SHAPES = [((7,), (7,)), ((4099,), (4099,)), ((5, 13), (13,)), ((3, 1, 9), (4, 1)), ((11,), ())]
PATHS = ["native", "emulated"]
# int64's bits as SPIR-V declares them: OpCapability Int64 (11).
_OP_CAPABILITY, _INT64 = 17, 11


@pytest.fixture(params=PATHS)
def path(request, ctx, monkeypatch) -> str:
    """Run the test on each int64 path: the emulated one by giving ops a copy of the caps
    without shaderInt64 (the planners read ``ctx.caps``)."""
    if request.param == "native":
        if not ctx.caps.shader_int64:
            pytest.skip("the device has no shaderInt64 (int64 is emulated there)")
    else:
        monkeypatch.setattr(ctx, "caps", dataclasses.replace(ctx.caps, shader_int64=False))
    assert ctx.caps.int64_arithmetic == request.param
    return request.param


def _wide(rng: np.random.Generator, shape: tuple[int, ...], bits: int = 62) -> np.ndarray:
    """int64 values spread over ``bits`` bits, most far outside int32, with odd low words."""
    values = rng.integers(-2**bits, 2**bits, shape, dtype=np.int64)
    return values | 1 if values.size > 1 else values


def _poisoned(ctx, shape: tuple[int, ...], dtype: str = "int64") -> vkumd.Tensor:
    value = 0x5B5B5B5B5B if np.dtype(dtype).itemsize == 8 else 0x5B  # fits every type
    return ctx.tensor(np.full(shape, value, dtype), dtype=dtype)


def test_int64_arrays_become_int64_tensors(ctx) -> None:
    """As torch.tensor(np.arange(5)): numpy's default integer is stored as int64, bit for bit."""
    data = np.array([2**40 + 3, -2**40 - 5, np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0])
    t = ctx.tensor(data)
    assert t.dtype is dtypes.int64 and t.dtype.itemsize == 8 and t.dtype.code == "I64"
    back = t.numpy()
    assert back.dtype == np.int64
    np.testing.assert_array_equal(back, data)
    assert ctx.tensor(np.arange(5)).dtype is dtypes.int64
    assert ctx.tensor([1, 2]).dtype is dtypes.int64


def test_values_outside_int64_are_refused(ctx) -> None:
    with pytest.raises(VkumdValueError, match="do not fit in int64"):
        ctx.tensor(np.array([2**63], np.uint64), dtype="int64")
    with pytest.raises(VkumdValueError, match="whole numbers"):
        ctx.tensor(np.array([1.5]), dtype="int64")


_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum,
        "minimum": np.minimum, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
        "bitwise_xor": np.bitwise_xor}


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("op", list(_OPS))
def test_ops_match_numpy(ctx, path: str, op: str, shapes) -> None:
    """Wrapping arithmetic, exactly as numpy's int64 (products of 62-bit values wrap)."""
    rng = np.random.default_rng()
    a, b = _wide(rng, shapes[0]), _wide(rng, shapes[1])
    out = _poisoned(ctx, np.broadcast_shapes(a.shape, b.shape))
    getattr(ops, op)(ctx.tensor(a), ctx.tensor(b), out=out)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out.numpy(), _OPS[op](a, b))


def test_carries_cross_the_words(ctx, path: str) -> None:
    """The cases a two-word emulation gets wrong first: carries and borrows between the
    words, the sign in the high word, equal high words."""
    edges = np.array([2**32 - 1, 2**32, -2**32, -1, 2**31, -2**31 - 1, 2**63 - 1, -2**63,
                      2**40 + 1, 2**40 + 3], np.int64)
    a = np.repeat(edges, edges.size)
    b = np.tile(edges, edges.size)
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    with np.errstate(over="ignore"):
        for op in ("add", "sub", "mul", "maximum", "minimum"):
            np.testing.assert_array_equal(getattr(ops, op)(ta, tb).numpy(), _OPS[op](a, b),
                                          err_msg=op)
    for op, fn in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
        np.testing.assert_array_equal(getattr(ops, op)(ta, tb).numpy(), fn(a, b), err_msg=op)


def test_comparisons_match_numpy(ctx, path: str) -> None:
    rng = np.random.default_rng()
    a = _wide(rng, (6, 19))
    b = a[2].copy()
    b[::3] = _wide(rng, b[::3].shape)
    b[1::3] = b[1::3] ^ 1  # the same high word, another low one
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    for op, fn in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)):
        out = _poisoned(ctx, a.shape)
        getattr(ops, op)(ta, tb, out=out)
        np.testing.assert_array_equal(out.numpy(), fn(a, b), err_msg=op)
        if ctx.caps.storage_8bit:  # a graph's bool mask
            mask = _poisoned(ctx, a.shape, "uint8")
            getattr(ops, op)(ta, tb, out=mask)
            np.testing.assert_array_equal(mask.numpy(), fn(a, b), err_msg=f"{op} as uint8")


def test_shifts_match_numpy(ctx, path: str) -> None:
    """Arithmetic right shifts; a count outside [0, 64) gives 0 (or -1 shifting a negative
    value right), as the 32-bit kernels do outside [0, 32)."""
    rng = np.random.default_rng()
    a = _wide(rng, (5, 23))
    counts = rng.integers(-3, 70, (23,), dtype=np.int64)
    counts[:4] = [0, 31, 32, 63]
    inside = (counts >= 0) & (counts < 64)
    safe = np.where(inside, counts, 0)
    left, right = _poisoned(ctx, a.shape), _poisoned(ctx, a.shape)
    ops.bitwise_left_shift(ctx.tensor(a), ctx.tensor(counts), out=left)
    ops.bitwise_right_shift(ctx.tensor(a), ctx.tensor(counts), out=right)
    np.testing.assert_array_equal(left.numpy(), np.where(inside, np.left_shift(a, safe), 0))
    np.testing.assert_array_equal(right.numpy(), np.where(inside, np.right_shift(a, safe),
                                                          np.where(a < 0, -1, 0)))


def test_division_and_remainder(ctx) -> None:
    """Native only: floored and truncated quotients and remainders as torch's; a zero
    divisor gives 0, INT64_MIN // -1 wraps to itself."""
    if not ctx.caps.shader_int64:
        pytest.skip("the device has no shaderInt64 (the emulated int64 refuses division)")
    rng = np.random.default_rng()
    a = _wide(rng, (9, 31))
    b = _wide(rng, (31,), bits=34)
    b[:4] = [0, 1, -1, 3]
    a[0, 2] = np.iinfo(np.int64).min
    nonzero = b != 0
    divisor = np.where(nonzero, b, 1)
    with np.errstate(over="ignore"):
        floor = np.where(nonzero, np.floor_divide(a, divisor), 0)
        rem = np.where(nonzero & (b != -1), np.remainder(a, divisor), 0)
        fmod = np.where(nonzero & (b != -1), np.fmod(a, divisor), 0)
        trunc = np.where(nonzero, (a - np.fmod(a, divisor)) // divisor, 0)
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    for name, got, want in (("floor", ops.div(ta, tb, rounding="floor"), floor),
                            ("trunc", ops.div(ta, tb, rounding="trunc"), trunc),
                            ("remainder", ops.remainder(ta, tb), rem),
                            ("fmod", ops.fmod(ta, tb), fmod)):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)


def test_power(ctx) -> None:
    if not ctx.caps.shader_int64:
        pytest.skip("the device has no shaderInt64 (the emulated int64 refuses pow)")
    rng = np.random.default_rng()
    a = rng.integers(-2**20, 2**20, (4, 17), dtype=np.int64) * 1001
    b = rng.integers(0, 5, (17,), dtype=np.int64)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(ops.pow(ctx.tensor(a), ctx.tensor(b)).numpy(), a ** b)


@pytest.mark.parametrize("op", ["div", "remainder", "fmod", "pow"])
def test_emulated_path_refuses_what_it_cannot_do(ctx, monkeypatch, op: str) -> None:
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(ctx.caps, shader_int64=False))
    a = ctx.tensor(np.array([2**40 + 1, 7]))
    kwargs = {"rounding": "floor"} if op == "div" else {}
    with pytest.raises(CapabilityMissing, match="shaderInt64"):
        getattr(ops, op)(a, a, **kwargs)


CAST_TYPES = ["float32", "float16", "int32", "int16", "uint16", "uint32", "uint64", "float64"]


def _needs(ctx, dtype: str) -> None:
    caps = ctx.caps
    if dtype == "float64" and not caps.shader_float64:
        pytest.skip("the device has no shaderFloat64")
    if dtype == "uint64" and not caps.shader_int64:
        pytest.skip("uint64 needs shaderInt64 (it has no emulated path)")
    if np.dtype(dtype).itemsize == 2 and not caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")


@pytest.mark.parametrize("dst", CAST_TYPES)
def test_casts_from_int64(ctx, path: str, dst: str) -> None:
    """Integers wrap (astype); floats round once to nearest even from the 64-bit value."""
    _needs(ctx, dst)
    rng = np.random.default_rng()
    data = _wide(rng, (7, 13))
    data[0, :6] = [2**53 + 1, -(2**53 + 1), 2**24 + 1, (2**40 + 1) * 2**20, -2**63, 2**63 - 1]
    if dst == "float16":
        data[1] = rng.integers(-65504, 65504, 13)  # in range: the rounding shows
    out = _poisoned(ctx, data.shape, dst)
    ops.cast(ctx.tensor(data), dst, out=out)
    with np.errstate(over="ignore"):
        want = data.astype(dst)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("src", CAST_TYPES)
def test_casts_to_int64(ctx, path: str, src: str) -> None:
    """Integers widen by their sign; floats truncate toward zero."""
    _needs(ctx, src)
    rng = np.random.default_rng()
    if src.startswith("float"):
        limit = 6e4 if src == "float16" else 4e18
        data = (rng.standard_normal((7, 13)) * 10.0 ** rng.integers(0, 19, (7, 13)))
        data = np.clip(data, -limit, limit).astype(src)
        want = np.trunc(data.astype(np.float64)).astype(np.int64)
    else:
        info = np.iinfo(src)
        data = rng.integers(info.min, info.max, (7, 13), dtype=src, endpoint=True)
        want = data.astype(np.int64)
    out = _poisoned(ctx, data.shape)
    ops.cast(ctx.tensor(data, dtype=src), "int64", out=out)
    np.testing.assert_array_equal(out.numpy(), want)


def test_emulated_variants_need_no_int64(ctx) -> None:
    """The emulated kernels declare no Int64 capability: they run without shaderInt64."""
    caps = dataclasses.replace(ctx.caps, shader_int64=False)
    binary = [v for v in ELEMENTWISE_BINARY.variants(caps) if v.get("EMU64")]
    unary = [v for v in ELEMENTWISE_UNARY.variants(caps) if v.get("EMU64")]
    ops_offered = {v["OP"] for v in binary}
    assert len(ops_offered) == len(INT64_EMULATED_OPS)
    assert {v["SRC"] for v in unary} >= {"I64", "F32", "I32"}
    for kernel, variant in ((ELEMENTWISE_BINARY, binary[0]), (ELEMENTWISE_BINARY, binary[-1]),
                            (ELEMENTWISE_UNARY, next(v for v in unary if v["SRC"] == "I64")),
                            (ELEMENTWISE_UNARY, next(v for v in unary if v["DST"] == "I64"))):
        defines = {k: v for k, v in variant.items() if k in kernel.defines}
        words = np.frombuffer(compile_glsl(kernel.source_text(), name=kernel.name,
                                           defines=defines), np.uint32)
        assert not _declares(words, _INT64), variant
    if ctx.caps.shader_int64:  # the check sees Int64 where it is declared
        native = {"DTYPE": "I64"}
        words = np.frombuffer(compile_glsl(ELEMENTWISE_BINARY.source_text(), name="native",
                                           defines=native), np.uint32)
        assert _declares(words, _INT64)


def _declares(words: np.ndarray, capability: int) -> bool:
    """Whether SPIR-V ``words`` declare ``OpCapability capability``."""
    i = 5  # past the header
    while i < len(words):
        count, opcode = int(words[i]) >> 16, int(words[i]) & 0xFFFF
        if opcode == _OP_CAPABILITY and int(words[i + 1]) == capability:
            return True
        i += max(count, 1)
    return False
