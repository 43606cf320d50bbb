"""The ONNX converters of CastLike, Size, Range, Mod, Pow, integer Max/Min/Clip, the bitwise ops,
Swish, Shrink and EyeLike (shape-side ops folded at import where their inputs are known) on
small models against float64 numpy, and their bad nodes refused with the node named. ONNX's
own node tests of these operators run in test_onnx_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402


def model(nodes: list, inputs: dict[str, tuple[int, list]], out_type: int,
          inits: dict[str, np.ndarray] | None = None, opset: int = 21) -> onnx.ModelProto:
    """A model of ``nodes`` with typed inputs ``name: (elem_type, shape)`` and output ``y``."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(ctx, m: onnx.ModelProto, **feed: np.ndarray) -> np.ndarray:
    return np.asarray(vkumd.onnx.load(m, ctx=ctx)(**feed)["y"])


def refused(ctx, m: onnx.ModelProto, reason: str) -> None:
    with pytest.raises(VkumdError, match="the_node") as info:
        vkumd.onnx.load(m, ctx=ctx)
    assert reason in str(info.value)


@pytest.mark.parametrize(("target", "np_type"), [(T.FLOAT16, np.float16), (T.INT32, np.int32),
                                                   (T.FLOAT, np.float32)])
def test_cast_like_takes_a_run_time_targets_type(ctx, target: int, np_type: type) -> None:
    shape = [3, 7, 5]
    m = model([helper.make_node("CastLike", ["x", "like"], ["y"])],
              {"x": (T.FLOAT, shape), "like": (target, [1])}, target)
    x = (np.random.default_rng().standard_normal(shape) * 100).astype(np.float32)
    got = run(ctx, m, x=x, like=np.zeros(1, np_type))
    # float64 reference: numpy's astype truncates toward zero as ONNX's Cast does
    want = x.astype(np.float64).astype(np_type)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_cast_like_of_a_constant_folds_to_the_tensors_type(ctx) -> None:
    """The expanded function bodies' idiom: CastLike(constant, x) then arithmetic with x."""
    m = model([helper.make_node("CastLike", ["alpha", "x"], ["a"]),
               helper.make_node("Mul", ["x", "a"], ["y"])],
              {"x": (T.FLOAT16, [4, 9])}, T.FLOAT16, {"alpha": np.array(1.5, np.float64)})
    x = np.random.default_rng().standard_normal((4, 9)).astype(np.float16)
    got = run(ctx, m, x=x)
    want = x.astype(np.float64) * 1.5
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3)


def test_cast_like_to_int64_of_an_int32_tensor_is_its_storage(ctx) -> None:
    m = model([helper.make_node("CastLike", ["x", "like"], ["y"])],
              {"x": (T.INT32, [6])}, T.INT64, {"like": np.zeros(1, np.int64)})
    x = np.arange(-3, 3, dtype=np.int32) * 1000003
    np.testing.assert_array_equal(run(ctx, m, x=x), x.astype(np.int64))


@pytest.mark.parametrize("like", [T.BOOL, T.UINT8], ids=["bool", "uint8"])
def test_cast_like_a_run_time_byte_tensor_keeps_its_type(ctx, like: int) -> None:
    """BOOL and UINT8 are told apart: CastLike to a run-time bool tensor gives bool (nonzero,
    NaN included), and from bool to a uint8 one gives 1/0."""
    source = T.FLOAT if like == T.BOOL else T.BOOL
    m = model([helper.make_node("CastLike", ["x", "like"], ["y"])],
              {"x": (source, [3, 5]), "like": (like, [1])}, like)
    rng = np.random.default_rng()
    if source == T.FLOAT:
        x = rng.choice(np.array([0.0, -0.0, 0.5, np.nan, -np.inf, 3.0], np.float32), (3, 5))
    else:
        x = rng.random((3, 5)) < 0.5
    like_value = np.ones(1, np.bool_ if like == T.BOOL else np.uint8)
    got = run(ctx, m, x=x, like=like_value)
    want = x.astype(np.bool_) if like == T.BOOL else x.astype(np.uint8)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_bad_cast_like_nodes_are_refused(ctx) -> None:
    to_complex = model([helper.make_node("CastLike", ["x", "like"], ["y"], name="the_node")],
                       {"x": (T.FLOAT, [4])}, T.FLOAT, {"like": np.zeros(1, np.complex64)})
    refused(ctx, to_complex, "COMPLEX64 tensors are not supported")
    rounding = model([helper.make_node("CastLike", ["x", "like"], ["y"], name="the_node",
                                       round_mode="down")],
                     {"x": (T.FLOAT, [4]), "like": (T.FLOAT16, [1])}, T.FLOAT16, opset=25)
    refused(ctx, rounding, "round_mode")


@pytest.mark.parametrize("shape", [[3, 7, 5], [4], [], [2, 0, 3]], ids=str)
def test_size_of_a_static_shape_is_a_constant(ctx, shape: list) -> None:
    m = model([helper.make_node("Size", ["x"], ["s"]),
               helper.make_node("Add", ["s", "one"], ["y"])],
              {"x": (T.FLOAT, shape)}, T.INT64, {"one": np.array(1, np.int64)})
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    got = run(ctx, m, x=x)
    assert got.dtype == np.int64 and got.shape == ()
    assert int(got) == int(np.prod(shape, dtype=np.int64)) + 1


@pytest.mark.parametrize("rows", [1, 5, 13])
def test_size_of_a_symbolic_shape_follows_the_call(ctx, rows: int) -> None:
    """Size of ``[n, 6]`` scales a tensor: the count is computed from the call's sizes."""
    m = model([helper.make_node("Size", ["x"], ["s"]),
               helper.make_node("Cast", ["s"], ["f"], to=T.FLOAT),
               helper.make_node("Mul", ["x", "f"], ["y"])],
              {"x": (T.FLOAT, ["n", 6])}, T.FLOAT)
    x = np.random.default_rng().standard_normal((rows, 6)).astype(np.float32)
    got = run(ctx, m, x=x)
    np.testing.assert_allclose(got, x.astype(np.float64) * rows * 6, rtol=1e-6)


def _range64(start: float, limit: float, delta: float) -> np.ndarray:
    """ONNX's definition, in float64: ``start + i * delta`` for ``i < max(ceil((limit -
    start) / delta), 0)``."""
    count = max(int(np.ceil((limit - start) / delta)), 0)
    return start + np.arange(count, dtype=np.float64) * delta


@pytest.mark.parametrize(("start", "limit", "delta", "np_type"), [
    (1.5, 9.25, 0.75, np.float32), (10, -7, -3, np.int64), (2, 11, 1, np.int32),
    (5.0, 5.0, 1.0, np.float32), (3, 0, 1, np.int64)], ids=str)
def test_range_of_constants_folds(ctx, start, limit, delta, np_type) -> None:
    """Range of known scalars, added to a run-time tensor of its length (device work)."""
    want = _range64(start, limit, delta)
    out_type = helper.np_dtype_to_tensor_dtype(np.dtype(np_type))
    out_type = T.INT32 if out_type == T.INT64 else out_type
    m = model([helper.make_node("Range", ["s", "l", "d"], ["r"]),
               helper.make_node("Cast", ["r"], ["rc"], to=out_type),
               helper.make_node("Add", ["x", "rc"], ["y"])],
              {"x": (out_type, [len(want)])}, out_type,
              {k: np.array(v, np_type) for k, v in zip("sld", (start, limit, delta),
                                                       strict=True)})
    x = np.arange(len(want)).astype(np_type)
    got = run(ctx, m, x=x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), x.astype(np.float64) + want, rtol=1e-6)


def test_range_over_a_static_shape_folds(ctx) -> None:
    """The expanded RMSNormalization idiom: Range(axis, rank) of the input's shape."""
    m = model([helper.make_node("Shape", ["x"], ["shape"]),
               helper.make_node("Size", ["shape"], ["rank"]),
               helper.make_node("Range", ["one", "rank", "one"], ["axes"]),
               helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
              {"x": (T.FLOAT, [3, 4, 5])}, T.FLOAT, {"one": np.array(1, np.int64)})
    x = np.random.default_rng().standard_normal((3, 4, 5)).astype(np.float32)
    got = run(ctx, m, x=x)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-5)


def test_bad_range_nodes_are_refused(ctx) -> None:
    scalars = {k: (T.FLOAT, []) for k in "sld"}
    run_time = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="the_node")],
                     scalars, T.FLOAT)
    refused(ctx, run_time, "must be known at import time")
    zero = model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="the_node")], {},
                 T.FLOAT, {k: np.array(v, np.float32) for k, v in zip("sld", (0, 4, 0),
                                                                      strict=True)})
    refused(ctx, zero, "delta is 0")


def test_range_to_a_run_time_limit_is_specialized_per_value(ctx) -> None:
    """Range(0, n, 1) + x[:n]: n a run-time int64 input, so the model is imported again for
    each value of n (OnnxModel's specialization) and the length follows the call."""
    m = model([helper.make_node("Range", ["zero", "n", "one"], ["r"]),
               helper.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
               helper.make_node("Add", ["rf", "x"], ["y"])],
              {"n": (T.INT64, []), "x": (T.FLOAT, [1])}, T.FLOAT,
              {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    loaded = vkumd.onnx.load(m, ctx=ctx)
    x = np.random.default_rng().standard_normal(1).astype(np.float32)
    for n in (5, 9, 5):
        got = np.asarray(loaded(n=np.array(n, np.int64), x=x)["y"])
        np.testing.assert_allclose(got, np.arange(n, dtype=np.float32) + x, rtol=1e-6)
    assert loaded.specialized_on == ["n"]


@pytest.mark.parametrize("n", [4, 7])
def test_range_over_a_symbolic_size_follows_the_call(ctx, n: int) -> None:
    """Range(0, n) of a symbolic n is computed from each call's sizes (a derived input)."""
    m = model([helper.make_node("Shape", ["x"], ["shape"]),
               helper.make_node("Squeeze", ["shape"], ["n"]),
               helper.make_node("Range", ["zero", "n", "one"], ["r"]),
               helper.make_node("Cast", ["r"], ["c"], to=T.FLOAT),
               helper.make_node("Add", ["x", "c"], ["y"])],
              {"x": (T.FLOAT, ["n"])}, T.FLOAT,
              {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    got = run(ctx, m, x=x)
    np.testing.assert_allclose(got, x.astype(np.float64) + _range64(0, n, 1), rtol=1e-6)


@pytest.mark.parametrize(("elem", "np_type", "fmod"), [
    (T.INT32, np.int32, 0), (T.INT64, np.int64, 1), (T.FLOAT, np.float32, 0),
    (T.FLOAT, np.float32, 1), (T.FLOAT16, np.float16, 1)], ids=str)
def test_mod_matches_float64(ctx, elem: int, np_type: type, fmod: int) -> None:
    m = model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              {"a": (elem, [3, 11]), "b": (elem, [11])}, elem, opset=13)
    rng = np.random.default_rng()
    a = (rng.standard_normal((3, 11)) * 50).astype(np_type)
    b = (rng.uniform(1, 9, 11) * rng.choice([-1, 1], 11)).astype(np_type)
    got = run(ctx, m, a=a, b=b)
    want = (np.fmod if fmod else np.mod)(a.astype(np.float64), b.astype(np.float64))
    assert got.dtype == np_type
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3 if elem == T.FLOAT16
                               else 1e-6, atol=1e-6)


def test_mod_of_constants_folds_and_a_bad_fmod_is_refused(ctx) -> None:
    folded = model([helper.make_node("Mod", ["c", "d"], ["m"]),
                    helper.make_node("Add", ["x", "m"], ["y"])], {"x": (T.INT32, [4])},
                   T.INT32, {"c": np.array([7, -7, 7, -7], np.int32),
                             "d": np.array([3, 3, -3, -3], np.int32)})
    np.testing.assert_array_equal(run(ctx, folded, x=np.zeros(4, np.int32)), [1, 2, -2, -1])
    bad = model([helper.make_node("Mod", ["a", "b"], ["y"], fmod=2, name="the_node")],
                {"a": (T.INT32, [4]), "b": (T.INT32, [4])}, T.INT32)
    refused(ctx, bad, "0 or 1")


@pytest.mark.parametrize(("x_type", "y_type"), [(T.FLOAT, T.FLOAT), (T.FLOAT, T.INT64),
                                                (T.FLOAT16, T.INT32), (T.INT64, T.INT64)],
                         ids=str)
def test_pow_of_a_run_time_exponent(ctx, x_type: int, y_type: int) -> None:
    m = model([helper.make_node("Pow", ["x", "e"], ["y"])],
              {"x": (x_type, [4, 13]), "e": (y_type, [13])}, x_type, opset=15)
    rng = np.random.default_rng()
    x_np, e_np = (helper.tensor_dtype_to_np_dtype(t) for t in (x_type, y_type))
    floats = x_np.kind == "f"
    x = (rng.uniform(0.2, 3, (4, 13)) if floats else rng.integers(-6, 7, (4, 13))).astype(x_np)
    e = (rng.uniform(-3, 3, 13) if e_np.kind == "f" else rng.integers(0, 7, 13)).astype(e_np)
    got = run(ctx, m, x=x, e=e)
    want = np.power(x.astype(np.float64), e.astype(np.float64))
    assert got.dtype == x_np
    np.testing.assert_allclose(got.astype(np.float64), want,
                               rtol=1e-3 if x_type == T.FLOAT16 else 2e-6)


def test_pow_of_a_constant_exponent_and_refusals(ctx) -> None:
    cube = model([helper.make_node("Pow", ["x", "three"], ["y"])], {"x": (T.FLOAT, [9])},
                 T.FLOAT, {"three": np.array(3.0, np.float32)})
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    np.testing.assert_allclose(run(ctx, cube, x=x), x.astype(np.float64) ** 3, rtol=1e-6)
    mixed = model([helper.make_node("Pow", ["x", "e"], ["y"], name="the_node")],
                  {"x": (T.INT32, [3]), "e": (T.FLOAT, [3])}, T.INT32)
    refused(ctx, mixed, "the base is int32 and the exponent float32")
    root = model([helper.make_node("Pow", ["x", "half"], ["y"], name="the_node")],
                 {"x": (T.INT32, [3])}, T.INT32, {"half": np.array(0.5, np.float32)})
    refused(ctx, root, "non-integer exponent")


@pytest.mark.parametrize("elem", [T.INT32, T.INT64, T.INT8, T.UINT8], ids=str)
def test_integer_max_min_and_clip(ctx, elem: int) -> None:
    """Max of three, Min of two and Clip with a constant and a run-time bound, exactly."""
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    info = np.iinfo(np_type)
    lo_high = (max(info.min, -1000), min(info.max, 1000))
    m = model([helper.make_node("Max", ["a", "b", "c"], ["mx"]),
               helper.make_node("Min", ["mx", "b"], ["mn"]),
               helper.make_node("Clip", ["mn", "lo", "hi"], ["y"])],
              {"a": (elem, [3, 7]), "b": (elem, [7]), "c": (elem, [3, 1]), "hi": (elem, [])},
              elem, {"lo": np.array(lo_high[0] // 4, np_type)}, opset=13)
    rng = np.random.default_rng()
    a, b, c = (rng.integers(*lo_high, s).astype(np_type) for s in ((3, 7), (7,), (3, 1)))
    hi = np.array(lo_high[1] // 3, np_type)
    if elem in (T.INT8, T.UINT8) and not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")
    got = run(ctx, m, a=a, b=b, c=c, hi=hi)
    wide = [v.astype(np.int64) for v in (a, b, c, hi)]
    want = np.clip(np.minimum(np.maximum(np.maximum(wide[0], wide[1]), wide[2]), wide[1]),
                   lo_high[0] // 4, wide[3])
    assert got.dtype == np_type
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("elem", [T.INT32, T.INT64, T.UINT8, T.INT8], ids=str)
def test_bitwise_nodes(ctx, elem: int) -> None:
    """BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot in one model, exactly."""
    np_type = helper.tensor_dtype_to_np_dtype(elem)
    if np.dtype(np_type).itemsize == 1 and not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")
    m = model([helper.make_node("BitwiseAnd", ["a", "b"], ["n"]),
               helper.make_node("BitwiseOr", ["n", "c"], ["o"]),
               helper.make_node("BitwiseXor", ["o", "b"], ["x"]),
               helper.make_node("BitwiseNot", ["x"], ["y"])],
              {"a": (elem, [3, 8]), "b": (elem, [8]), "c": (elem, [3, 1])}, elem, opset=18)
    info = np.iinfo(np_type) if elem != T.INT64 else np.iinfo(np.int32)
    rng = np.random.default_rng()
    a, b, c = (rng.integers(info.min, info.max, s, endpoint=True).astype(np_type)
               for s in ((3, 8), (8,), (3, 1)))
    got = run(ctx, m, a=a, b=b, c=c)
    assert got.dtype == np_type
    np.testing.assert_array_equal(got, ~(((a & b) | c) ^ b))


def test_bit_shift_of_uint8_and_a_bad_direction(ctx) -> None:
    if not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses uint8 there)")
    m = model([helper.make_node("BitShift", ["x", "s"], ["l"], direction="LEFT"),
               helper.make_node("BitShift", ["l", "s"], ["y"], direction="RIGHT")],
              {"x": (T.UINT8, [11]), "s": (T.UINT8, [11])}, T.UINT8, opset=11)
    rng = np.random.default_rng()
    x = rng.integers(0, 256, 11).astype(np.uint8)
    s = rng.integers(0, 8, 11).astype(np.uint8)
    np.testing.assert_array_equal(run(ctx, m, x=x, s=s), (x << s) >> s)  # wraps in uint8
    bad = model([helper.make_node("BitShift", ["x", "s"], ["y"], direction="UP",
                                  name="the_node")],
                {"x": (T.UINT8, [3]), "s": (T.UINT8, [3])}, T.UINT8, opset=11)
    refused(ctx, bad, "direction")


@pytest.mark.parametrize(("node", "want"), [
    (helper.make_node("Swish", ["x"], ["y"], alpha=0.75),
     lambda x: x / (1.0 + np.exp(-0.75 * x))),
    (helper.make_node("Shrink", ["x"], ["y"], lambd=1.25, bias=0.5),
     lambda x: np.where(x < -1.25, x + 0.5, np.where(x > 1.25, x - 0.5, 0.0))),
    (helper.make_node("Shrink", ["x"], ["y"]),
     lambda x: np.where(np.abs(x) > 0.5, x, 0.0))], ids=["swish", "shrink", "shrink_hard"])
def test_swish_and_shrink(ctx, node, want) -> None:
    m = model([node], {"x": (T.FLOAT, [5, 17])}, T.FLOAT, opset=24)
    x = (np.random.default_rng().standard_normal((5, 17)) * 3).astype(np.float32)
    np.testing.assert_allclose(run(ctx, m, x=x), want(x.astype(np.float64)), rtol=2e-6,
                               atol=1e-7)


@pytest.mark.parametrize(("shape", "k", "dtype"), [((4, 6), 1, None), ((5, 3), -2, T.INT32),
                                                   ((3, 3), 0, T.FLOAT16)], ids=str)
def test_eye_like_is_a_constant(ctx, shape, k, dtype) -> None:
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    out_type = T.FLOAT if dtype is None else dtype
    m = model([helper.make_node("EyeLike", ["x"], ["e"], **attrs),
               helper.make_node("Add", ["e", "z"], ["y"])],
              {"x": (T.FLOAT, list(shape)), "z": (out_type, list(shape))}, out_type)
    np_type = helper.tensor_dtype_to_np_dtype(out_type)
    z = np.arange(np.prod(shape)).reshape(shape).astype(np_type)
    got = run(ctx, m, x=np.zeros(shape, np.float32), z=z)
    np.testing.assert_array_equal(got, np.eye(*shape, k=k) + z)
    symbolic = model([helper.make_node("EyeLike", ["x"], ["y"], name="the_node")],
                     {"x": (T.FLOAT, ["n", 3])}, T.FLOAT)
    refused(ctx, symbolic, "static shape")


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("target", [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2,
                                    T.FLOAT8E5M2FNUZ])
def test_cast_to_float8_and_back_on_the_device(ctx, target: int, saturate: int) -> None:
    """Cast float32 -> float8 (saturating or not) -> float16: both casts run as kernels; the
    result is what vkumd's float8 reference gives (itself checked against ml_dtypes)."""
    from vkumd.framework.float8 import FORMATS, float8_bits_to_float32, float32_to_float8_bits
    from vkumd.framework.frontends.onnx.state import FLOAT8_IR_DTYPES

    m = model([helper.make_node("Cast", ["x"], ["q"], to=target, saturate=saturate),
               helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT16)],
              {"x": (T.FLOAT, [5, 37])}, T.FLOAT16)
    rng = np.random.default_rng()
    x = (rng.standard_normal((5, 37)) * rng.choice([1e-4, 1.0, 1e3, 1e5], (5, 37)))
    x = x.astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    fmt = FORMATS[FLOAT8_IR_DTYPES[target]]
    want = float8_bits_to_float32(float32_to_float8_bits(x, fmt, bool(saturate)), fmt)
    got = run(ctx, m, x=x)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_cast_float8_to_int32_is_refused(ctx) -> None:
    m = model([helper.make_node("Cast", ["x"], ["y"], to=T.INT32, name="the_node")],
              {"x": (T.FLOAT8E5M2, [3])}, T.INT32)
    refused(ctx, m, "float8 formats convert to and from the float types only")


@pytest.mark.parametrize("target", [T.INT4, T.UINT4, T.INT2, T.UINT2, T.FLOAT4E2M1])
def test_cast_to_packed_and_back_on_the_device(ctx, target: int) -> None:
    """Cast float32 -> a packed type -> float32, at an odd element count: both casts run as
    kernels; the result is vkumd's packed reference (itself checked against ml_dtypes)."""
    from vkumd.framework.frontends.onnx.state import PACKED_IR_DTYPES
    from vkumd.framework.packed import FORMATS, codes_to_values, floats_to_codes

    m = model([helper.make_node("Cast", ["x"], ["q"], to=target),
               helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT)],
              {"x": (T.FLOAT, [3, 7])}, T.FLOAT)
    x = (np.random.default_rng().standard_normal((3, 7)) * 6).astype(np.float32)
    fmt = FORMATS[PACKED_IR_DTYPES[target]]
    want = codes_to_values(floats_to_codes(x, fmt), fmt).astype(np.float32)
    np.testing.assert_array_equal(run(ctx, m, x=x), want)


def test_cast_e8m0_round_mode_on_the_device(ctx) -> None:
    from onnx.numpy_helper import to_float8e8m0

    m = model([helper.make_node("Cast", ["x"], ["q"], to=T.FLOAT8E8M0, round_mode="nearest",
                                saturate=0),
               helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT)],
              {"x": (T.FLOAT, [11])}, T.FLOAT, opset=24)
    x = np.abs(np.random.default_rng().standard_normal(11) * 100).astype(np.float32)
    want = to_float8e8m0(x, False, "nearest").astype(np.float32)
    np.testing.assert_array_equal(run(ctx, m, x=x), want)


def test_cast_float4_to_int32_is_refused(ctx) -> None:
    m = model([helper.make_node("Cast", ["x"], ["y"], to=T.INT32, name="the_node")],
              {"x": (T.FLOAT4E2M1, [3])}, T.INT32)
    refused(ctx, m, "float4_e2m1 converts to and from")


def test_bitcast_is_a_view_of_the_bits(ctx) -> None:
    m = model([helper.make_node("BitCast", ["x"], ["y"], to=T.INT32)],
              {"x": (T.FLOAT, [3, 5])}, T.INT32, opset=26)
    x = np.random.default_rng().standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(ctx, m, x=x), x.view(np.int32))


def test_bitcast_of_other_widths_is_refused(ctx) -> None:
    m = model([helper.make_node("BitCast", ["x"], ["y"], to=T.INT8, name="the_node")],
              {"x": (T.FLOAT16, [3])}, T.INT8, opset=26)
    refused(ctx, m, "same width")
def test_bool_values_are_bool_end_to_end(ctx) -> None:
    """A BOOL input, a BOOL initializer, Cast to BOOL, And/Not/Equal on them, Where taking the
    result and a BOOL output: bool all the way, against numpy."""
    nodes = [helper.make_node("Cast", ["x"], ["nz"], to=T.BOOL),
             helper.make_node("And", ["nz", "mask"], ["both"]),
             helper.make_node("Not", ["both"], ["none"]),
             helper.make_node("Equal", ["none", "keep"], ["same"]),
             helper.make_node("Where", ["same", "x", "zero"], ["picked"]),
             helper.make_node("Cast", ["picked"], ["y"], to=T.BOOL)]
    rng = np.random.default_rng()
    keep = rng.random((3, 7)) < 0.5
    m = model(nodes, {"x": (T.FLOAT, [3, 7]), "mask": (T.BOOL, [3, 7])}, T.BOOL,
              {"keep": keep, "zero": np.zeros((), np.float32)})
    x = rng.choice(np.array([0.0, 1.5, -2.0, np.nan], np.float32), (3, 7))
    mask = rng.random((3, 7)) < 0.5
    got = run(ctx, m, x=x, mask=mask)
    same = ~((x != 0) & mask) == keep
    want = np.where(same, x, 0.0) != 0
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, want)
    with pytest.raises(VkumdError, match="the graph takes bool"):
        vkumd.onnx.load(m, ctx=ctx)(x=x, mask=mask.astype(np.uint8))
