"""The PyTorch-style tensor API: operators, comparisons, shape and copy methods, reductions.

Every value is compared with a float64 numpy reference computed from the stored inputs
(fresh random data each run, odd shapes): elementwise results within one rounding of the
output type, the rest by relative Frobenius error. Bad input must raise a vkumd error that
says what to do.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from test_elementwise import DTYPES, FLOATS, assert_matches, sample, stored

import vkumd
from vkumd.framework import ops
from vkumd.testing.numerics import poisoned, rel_error

PAIRS = [((7, 13), (7, 13)), ((3, 1, 5), (4, 1)), ((5,), (2, 3, 5)), ((), (7,)), ((1, 9), ())]
# Frobenius tolerances for matmul, reductions, norms and activations.
FROB = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def put(ctx, rng, dtype: str, shape: tuple[int, ...], **kw) -> tuple[vkumd.Tensor, np.ndarray]:
    host = sample(rng, dtype, shape, **kw)
    if dtype == "int32" and not kw.get("away_from_zero"):
        host = (host % 2001 - 1000).astype(np.int32)  # no wrapping in the references
    return ctx.tensor(host, dtype=dtype), host.astype(np.float64)


def as_type(values: np.ndarray, dtype: str) -> np.ndarray:
    return values.astype(np.int64) if dtype == "int32" else values


# -- arithmetic --------------------------------------------------------------------------


# int32 has floor division instead of true division (which it refuses; tested below).
OPERATORS = [(dtype, sym) for dtype in DTYPES
             for sym in ("+", "-", "*", "//" if dtype == "int32" else "/")]


@pytest.mark.parametrize(("dtype", "sym"), OPERATORS)
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_tensor_operators_broadcast_like_numpy(ctx, rng, dtype, shapes, sym) -> None:
    a, ha = put(ctx, rng, dtype, shapes[0])
    b, hb = put(ctx, rng, dtype, shapes[1], away_from_zero=sym in "//")
    fn = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "//": operator.floordiv}[sym]
    got = fn(a, b)
    assert isinstance(got, vkumd.Tensor) and got.dtype is a.dtype
    assert_matches(got.numpy(), stored(fn(as_type(ha, dtype), as_type(hb, dtype)), dtype), dtype)


# int32 takes integral numbers only (the others are refused; tested below).
NUMBERS = [(dtype, value) for dtype in DTYPES for value in (3, -1.5, 0.75, 4, 0.25, -7)
           if dtype != "int32" or float(value).is_integer()]


@pytest.mark.parametrize(("dtype", "value"), NUMBERS, ids=str)
def test_numbers_on_either_side(ctx, rng, dtype, value) -> None:
    t, h = put(ctx, rng, dtype, (5, 17), away_from_zero=True)
    h = as_type(h, dtype)
    cases = [(t + value, h + value), (value + t, value + h), (t - value, h - value),
             (value - t, value - h), (t * value, h * value), (value * t, value * h)]
    if dtype == "int32":
        cases += [(t // value, h // value), (value // t, value // h)]
    else:
        # value 4 and 0.25 take the exact-reciprocal scale; the others a filled 0-d tensor.
        cases += [(t / value, h / value), (value / t, value / h)]
    for got, want in cases:
        assert got.shape == t.shape and got.dtype is t.dtype
        assert_matches(got.numpy(), stored(want, dtype), dtype)


def test_numbers_take_the_cheapest_exact_launch(ctx, rng, monkeypatch) -> None:
    t, _ = put(ctx, rng, "float32", (4, 5))
    kernels: list[str] = []
    run = ctx.run

    def counting(plan, operands):
        kernels.append(plan.program.kernel.name)
        run(plan, operands)

    monkeypatch.setattr(ctx, "run", counting)
    expected = {"t * 3": ["elementwise_unary"], "3 * t": ["elementwise_unary"],
                "t / 4": ["elementwise_unary"], "t / 0.25": ["elementwise_unary"],
                "t / 3": ["elementwise_fill", "elementwise_binary"],
                "t + 3": ["elementwise_fill", "elementwise_binary"],
                "1 - t": ["elementwise_fill", "elementwise_binary"],
                "-t": ["elementwise_unary"]}
    for text, launches in expected.items():
        kernels.clear()
        eval(text, {"t": t})  # noqa: S307 - the expressions above
        assert kernels == launches, text


def test_numpy_scalars_stay_on_the_device_and_arrays_are_refused(ctx, rng) -> None:
    t, h = put(ctx, rng, "float32", (3, 4))
    for scalar in (np.float32(2.0), np.int64(2), np.float64(2.0)):
        got = scalar * t
        assert isinstance(got, vkumd.Tensor)
        assert_matches(got.numpy(), stored(2 * h, "float32"), "float32")
    with pytest.raises(vkumd.VkumdTypeError, match="ctx.tensor"):
        _ = np.ones((3, 4), np.float32) + t
    with pytest.raises(vkumd.VkumdTypeError, match="ctx.tensor"):
        _ = t + np.ones((3, 4), np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_negation(ctx, rng, dtype) -> None:
    t, h = put(ctx, rng, dtype, (3, 7, 5))
    assert_matches((-t).numpy(), stored(-as_type(h, dtype), dtype), dtype)
    if dtype == "int32":
        wrapped = -ctx.tensor(np.array([-2**31, 2**31 - 1], np.int32))
        np.testing.assert_array_equal(wrapped.numpy(), [-2**31, -2**31 + 1])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 9), (9, 6)), ((1, 33), (33, 1))],
                         ids=str)
def test_matmul_operator(ctx, rng, dtype, shapes) -> None:
    a, ha = put(ctx, rng, dtype, shapes[0])
    b, hb = put(ctx, rng, dtype, shapes[1])
    assert rel_error((a @ b).numpy(), ha @ hb) < FROB[dtype]


def test_output_poisoned_through_out_with_a_number(ctx, rng) -> None:
    t, h = put(ctx, rng, "float32", (4, 9))
    for fn, want in ((ops.add, h + 2.5), (ops.sub, 2.5 - h), (ops.mul, h * 2.5)):
        out = poisoned(ctx, (4, 9))
        args = (2.5, t) if fn is ops.sub else (t, 2.5)
        assert fn(*args, out=out) is out
        assert_matches(out.numpy(), stored(want, "float32"), "float32")


# -- comparisons -------------------------------------------------------------------------

COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def with_specials(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype != "int32":
        flat = values.reshape(-1)
        flat[: 4] = [np.nan, -0.0, np.inf, -np.inf][: flat.size]
    return values


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_comparisons_give_one_and_zero_in_the_operands_dtype(ctx, rng, dtype, shapes) -> None:
    ha = with_specials(sample(rng, dtype, shapes[0]), dtype)
    hb = sample(rng, dtype, shapes[1])
    if hb.size:
        hb.reshape(-1)[0] = 0  # equal to -0.0 and to a few int32 values, so == is exercised
    if dtype != "int32":
        hb = np.round(hb)  # ties are common
        ha = np.where(np.isfinite(ha) & (np.abs(ha) < 1), np.round(ha), ha)
    a, b = ctx.tensor(ha, dtype=dtype), ctx.tensor(hb, dtype=dtype)
    ha, hb = a.numpy(), b.numpy()  # what the tensors hold
    results = {sym: fn(a, b) for sym, fn in COMPARE.items()}
    results["eq"], results["ne"] = a.eq(b), a.ne(b)
    wants = {sym: fn(ha, hb) for sym, fn in COMPARE.items()}
    wants["eq"], wants["ne"] = ha == hb, ha != hb
    for name, got in results.items():
        assert got.dtype is a.dtype
        np.testing.assert_array_equal(got.numpy(), wants[name].astype(got.numpy().dtype),
                                      err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons_with_numbers_on_either_side(ctx, rng, dtype) -> None:
    t, h = put(ctx, rng, dtype, (6, 11))
    cases = [(t > 0, h > 0), (0 < t, h > 0), (t <= 1, h <= 1), (2 >= t, h <= 2),
             (t.eq(0), h == 0), (ops.ne(3, t), h != 3), (ops.lt(t, -1), h < -1)]
    for got, want in cases:
        np.testing.assert_array_equal(got.numpy(), want.astype(got.numpy().dtype))


def test_a_mask_multiplies_into_arithmetic(ctx, rng) -> None:
    t, h = put(ctx, rng, "float32", (9, 5))
    assert_matches((t * (t > 0)).numpy(), np.maximum(h, 0), "float32")


def test_equality_stays_identity_so_containers_work(ctx) -> None:
    a = ctx.tensor(np.arange(3, dtype=np.float32))
    b = a.copy()
    assert a == a and a != b and not (a == b)
    assert a in [b, a] and [b, a].index(a) == 1
    seen = {a: "a", b: "b"}
    assert seen[a] == "a" and seen[b] == "b" and len({a, b, a}) == 2
    np.testing.assert_array_equal(a.eq(b).numpy(), [1, 1, 1])


# -- shape methods (views) and copies ------------------------------------------------------


def test_reshape_view_flatten_squeeze_unsqueeze(ctx, rng) -> None:
    t, h = put(ctx, rng, "float32", (2, 1, 3, 5))
    cases = {
        "reshape(-1)": (t.reshape(-1), h.reshape(-1)),
        "reshape(5, -1)": (t.reshape(5, -1), h.reshape(5, -1)),
        "reshape((3, 10))": (t.reshape((3, 10)), h.reshape(3, 10)),
        "view(30)": (t.view(30), h.reshape(30)),
        "flatten()": (t.flatten(), h.reshape(-1)),
        "flatten(1)": (t.flatten(1), h.reshape(2, 15)),
        "flatten(1, 2)": (t.flatten(1, 2), h.reshape(2, 3, 5)),
        "flatten(-2)": (t.flatten(-2), h.reshape(2, 1, 15)),
        "squeeze()": (t.squeeze(), h.squeeze()),
        "squeeze(1)": (t.squeeze(1), h.squeeze(1)),
        "squeeze(0)": (t.squeeze(0), h),
        "unsqueeze(0)": (t.unsqueeze(0), h[None]),
        "unsqueeze(-1)": (t.unsqueeze(-1), h[..., None]),
        "unsqueeze(2)": (t.unsqueeze(2), np.expand_dims(h, 2)),
    }
    for name, (got, want) in cases.items():
        assert got.shape == want.shape, name
        assert got.allocation is t.allocation, f"{name} copied"
        np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    scalar = ctx.tensor(np.float32(4.0))
    assert scalar.flatten().shape == (1,) and scalar.reshape(1, 1).shape == (1, 1)
    assert scalar.unsqueeze(0).shape == (1,) and scalar.squeeze().shape == ()


@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_permute_T_are_views(ctx, rng, dtype) -> None:
    t, h = put(ctx, rng, dtype, (3, 5, 7))
    cases = [(t.transpose(0, 2), h.transpose(2, 1, 0)), (t.transpose(-1, 1), h.swapaxes(1, 2)),
             (t.permute(2, 0, 1), h.transpose(2, 0, 1)), (t.permute((1, 2, 0)),
                                                          h.transpose(1, 2, 0)),
             (t.T, h.T), (t[0].T, h[0].T)]
    for got, want in cases:
        assert got.allocation is t.allocation  # a view, as PyTorch's
        assert_matches(got.numpy(), stored(want, dtype), dtype)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_astype_and_to(ctx, rng, src, dst) -> None:
    t, h = put(ctx, rng, src, (3, 11))
    for got in (t.astype(dst), t.to(dst), t.to(getattr(vkumd, dst))):
        assert got.dtype.name == dst
        want = np.trunc(h) if dst == "int32" else h
        assert_matches(got.numpy(), stored(want, dst), dst)


def test_copy_and_clone_are_new_memory(ctx, rng) -> None:
    t, h = put(ctx, rng, "int32", (4, 6))
    for c in (t.copy(), t.clone()):
        assert c.allocation is not t.allocation
        c.write(np.zeros((4, 6), np.int32))
        np.testing.assert_array_equal(t.numpy(), h)


# -- reductions, activations, norms as methods ---------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions(ctx, rng, dtype) -> None:
    t, h = put(ctx, rng, dtype, (3, 5, 37))
    for name, ref in (("sum", h.sum(-1)), ("mean", h.mean(-1)), ("max", h.max(-1))):
        got = getattr(t, name)()
        assert rel_error(got.numpy(), ref) < FROB[dtype], name
        kept = getattr(t, name)(dim=2, keepdim=True)
        assert kept.shape == (3, 5, 1)
        assert rel_error(kept.numpy(), ref[..., None]) < FROB[dtype], name


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations_softmax_and_norms(ctx, rng, dtype) -> None:
    t, h = put(ctx, rng, dtype, (7, 29))
    erf = np.vectorize(math.erf)
    e = np.exp(h - h.max(-1, keepdims=True))
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    w, hw = put(ctx, rng, dtype, (29,))
    b, hb = put(ctx, rng, dtype, (29,))
    cases = {
        "relu": (t.relu(), np.maximum(h, 0)),
        "gelu": (t.gelu(), 0.5 * h * (1 + erf(h / math.sqrt(2)))),
        "gelu tanh": (t.gelu(approximate="tanh"),
                      0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))),
        "silu": (t.silu(), h / (1 + np.exp(-h))),
        "softmax": (t.softmax(), e / e.sum(-1, keepdims=True)),
        "softmax(dim=1)": (t.softmax(dim=1), e / e.sum(-1, keepdims=True)),
        "layer_norm": (t.layer_norm(w, b, eps=1e-5), (h - mean) / np.sqrt(var + 1e-5) * hw + hb),
        "layer_norm()": (t.layer_norm(), (h - mean) / np.sqrt(var + 1e-5)),
        "rms_norm": (t.rms_norm(w), h / np.sqrt((h**2).mean(-1, keepdims=True) + 1e-6) * hw),
    }
    for name, (got, want) in cases.items():
        assert rel_error(got.numpy(), want) < FROB[dtype] * 2, name


@pytest.mark.parametrize("dtype", FLOATS)
def test_numpy_spellings_and_the_registry_ops_as_methods(ctx, rng, dtype) -> None:
    """The methods traced tensors have work eagerly too (one method set for both)."""
    t, h = put(ctx, rng, dtype, (5, 19))
    erf = np.vectorize(math.erf)
    cases = {
        "sum(axis, keepdims)": (t.sum(axis=-1, keepdims=True), h.sum(-1, keepdims=True)),
        "max(axis=1)": (t.max(axis=1), h.max(-1)),
        "softmax(axis=-1)": (t.softmax(axis=-1), np.exp(h) / np.exp(h).sum(-1, keepdims=True)),
        "gelu_tanh": (t.gelu_tanh(),
                      0.5 * h * (1 + np.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))),
        "exp": (t.exp(), np.exp(h)), "tanh": (t.tanh(), np.tanh(h)), "erf": (t.erf(), erf(h)),
        "sigmoid": (t.sigmoid(), 1 / (1 + np.exp(-h))),
        "hardswish": (t.hardswish(), h * np.clip(h + 3, 0, 6) / 6),
        "sqrt": ((t * t).sqrt(), np.sqrt(stored(h * h, dtype))),
        "T": (t.T, h.T), "+t": (+t, h),
    }
    for name, (got, want) in cases.items():
        assert rel_error(got.numpy(), want) < FROB[dtype] * 2, name
    assert +t is t
    with pytest.raises(vkumd.VkumdTypeError, match="no power op"):
        _ = t ** 2
    with pytest.raises(vkumd.VkumdTypeError, match="dim and axis both given"):
        t.sum(0, axis=1)
    with pytest.raises(AttributeError, match="no attribute 'cumsum'"):
        t.cumsum()  # noqa: B018


# -- bad input -------------------------------------------------------------------------------


def test_bad_operands_are_clear_errors(ctx) -> None:
    f = ctx.tensor(np.ones((2, 3), np.float32))
    i = ctx.tensor(np.ones((2, 3), np.int32))
    for bad in ("a", [1, 2, 3], None, True, 1 + 2j):
        with pytest.raises(vkumd.VkumdTypeError, match="Tensor"):
            _ = f + bad
    with pytest.raises(vkumd.VkumdTypeError, match="cast one first"):
        _ = f + i
    with pytest.raises(vkumd.VkumdValueError, match="do not broadcast"):
        _ = f * ctx.tensor(np.ones((4,), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="not an integer"):
        _ = i * 2.5
    with pytest.raises(vkumd.VkumdValueError, match="not an integer"):
        _ = i + 0.5
    with pytest.raises(vkumd.VkumdTypeError, match="rounding='floor'"):
        _ = i / 2
    with pytest.raises(vkumd.VkumdTypeError, match="rounding='floor'"):
        _ = 2 / i
    with pytest.raises(vkumd.VkumdTypeError, match="both operands are numbers"):
        ops.add(2, 3)
    with pytest.raises(vkumd.VkumdValueError, match="does not fit"):
        _ = i > 2**40
    with pytest.raises(vkumd.VkumdTypeError, match="Tensor"):
        _ = f @ np.ones((3, 2), np.float32)
    with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
        _ = ctx.tensor(np.ones(3, np.uint8)) + 1


def test_methods_take_any_dim_and_refuse_bad_ones(ctx) -> None:
    values = np.random.default_rng().standard_normal((2, 3, 5)).astype(np.float32)
    t = ctx.tensor(values)
    wide = values.astype(np.float64)
    shifted = np.exp(wide - wide.max(axis=0, keepdims=True))
    want = {"sum": wide.sum(axis=0), "mean": wide.mean(axis=0), "max": wide.max(axis=0),
            "softmax": shifted / shifted.sum(axis=0, keepdims=True)}
    for name, expected in want.items():
        got = getattr(t, name)(dim=0).numpy().astype(np.float64)
        assert rel_error(got, expected) < 1e-5, name
        with pytest.raises(vkumd.VkumdValueError, match="out of range"):
            getattr(t, name)(dim=3)
    with pytest.raises(vkumd.VkumdTypeError, match="dim must be an int"):
        t.softmax(dim=None)
    with pytest.raises(vkumd.VkumdValueError, match="approximate"):
        t.gelu(approximate="fast")
    with pytest.raises(vkumd.VkumdTypeError, match="keepdims"):
        t.sum(keepdim="yes")
    with pytest.raises(vkumd.VkumdTypeError, match="float"):
        ctx.tensor(np.ones((2, 3), np.int32)).softmax()


def test_bad_shapes_are_clear_errors(ctx) -> None:
    t = ctx.tensor(np.ones((2, 3, 4), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match=r"24 elements.*holds 25"):
        t.reshape(5, 5)
    with pytest.raises(vkumd.VkumdValueError, match="cannot infer"):
        t.reshape(5, -1)
    with pytest.raises(vkumd.VkumdValueError, match="one -1"):
        t.reshape(-1, -1)
    with pytest.raises(vkumd.VkumdTypeError, match="ints"):
        t.reshape(2.0, 12)
    with pytest.raises(vkumd.VkumdTypeError, match="ints"):
        t.view("24")
    with pytest.raises(vkumd.VkumdValueError, match="out of range"):
        t.unsqueeze(4)
    with pytest.raises(vkumd.VkumdValueError, match="out of range"):
        t.squeeze(3)
    with pytest.raises(vkumd.VkumdValueError, match="comes after"):
        t.flatten(2, 1)
    with pytest.raises(vkumd.VkumdValueError, match="permutation"):
        t.permute(0, 0, 1)
    with pytest.raises(vkumd.VkumdValueError, match="out of range"):
        t.transpose(0, 3)
    with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
        t.astype("complex64")  # no tensor type holds it


def test_mixed_contexts_and_released_tensors(ctx) -> None:
    mine = ctx.tensor(np.ones((3, 3), np.float32))
    with vkumd.Context() as other:
        theirs = other.tensor(np.ones((3, 3), np.float32))
        for fn in (operator.add, operator.lt, operator.matmul):
            with pytest.raises(vkumd.VkumdValueError, match="different context"):
                fn(mine, theirs)
        with pytest.raises(vkumd.VkumdValueError, match="different context"):
            ops.concat([mine, theirs])
    gone = ctx.tensor(np.ones(3, np.float32))
    gone.release()
    for call in (lambda: gone + 1, lambda: gone.reshape(3), lambda: gone[0], lambda: -gone):
        with pytest.raises(vkumd.VkumdValueError, match="released"):
            call()
    np.testing.assert_array_equal((mine + mine).numpy(), np.full((3, 3), 2))
