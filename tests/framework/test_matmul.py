"""``vkumd.ops.matmul`` against float64 numpy: every variant the lane runs, edge shapes, batches,
transposes, the fused epilogue, float16/bfloat16/int8, and every bad input.

Outputs start poisoned (NaN, or a sentinel for int32) so unwritten elements show. Data is fresh
random every run; shapes are in the parameter ids. Tests marked ``coopmat`` run on the
cooperative-matrix lane (``make test-coopmat``) and skip on the main lane.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest
from conftest import require_coopmat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkumd
from vkumd import ops
from vkumd.compiler.kernels.gemm import (
    COOPMAT_TILE_VARIABLE,
    LANES_BODY,
    LANES_KU,
    LANES_TM,
    WORD_ELEMENTS,
    coopmat_shared_bytes,
    coopmat_tiles,
    gemm_type_codes,
    lanes_tile_n,
    lanes_variant,
    parse_coopmat_tile,
    usable_coopmat_shape,
)
from vkumd.compiler.kernels.gemm_choice import (
    GemmShape,
    available_variants,
    choose_variant,
    coopmat_gemm_shapes,
    coopmat_plan,
)
from vkumd.compiler.registry import effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.opset.matmul import _check_dtype
from vkumd.testing.numerics import poisoned, rel_error
from vkumd.testing.numerics import stored_tensor as stored
from vkumd.vk.caps import CoopMatShape, DeviceCaps

# Relative Frobenius error bounds against float64 on the stored (rounded) inputs. float32
# accumulates exactly as numpy's float32 would; float16 and bfloat16 outputs are rounded to
# 11 and 8 significant bits, which dominates their error (about 2e-4 and 1.6e-3).
TOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 4e-3}
FLOATS = ("float32", "float16", "bfloat16")

SHAPES = [  # (M, N, K)
    (1, 1, 1),
    (7, 13, 5),        # primes: every tile is an edge tile
    (8, 16, 4),        # one row per lane, two columns of lanes
    (9, 17, 5),        # one past it in every direction
    (32, 64, 8),       # exactly one float32 lanes tile (32 rows x 64 columns)
    (33, 65, 9),       # one past it in every direction
    (129, 65, 257),    # one past powers of two
    (3, 5, 4099),      # long K with a tail
    (64, 64, 64),      # tile multiples for every variant
    (1, 300, 33),      # a single row
    (70, 1, 19),       # a single column
]
ACTIVATION_NAMES = (None, "relu", "gelu", "gelu_tanh", "silu")


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


def activate(name: str | None, x: np.ndarray) -> np.ndarray:
    """The float64 reference of each activation."""
    if name is None:
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    raise AssertionError(name)


def run_case(ctx: vkumd.Context, m: int, n: int, k: int, *, dtype: str = "float32",
             batch: tuple[int, ...] = (), b_batched: bool = False, trans_a: bool = False,
             trans_b: bool = False, activation: str | None = None, with_bias: bool = False,
             residual: str | None = None, alpha: float = 1.0, beta: float = 0.0,
             variant: str | None = None) -> float:
    """Run one matmul into a poisoned (or, with beta, random) out= and return its error."""
    rng = np.random.default_rng()
    a_shape = (*batch, k, m) if trans_a else (*batch, m, k)
    b_core = (n, k) if trans_b else (k, n)
    b_shape = (*batch, *b_core) if b_batched else b_core
    a, a64 = stored(ctx, rng.standard_normal(a_shape), dtype)
    b, b64 = stored(ctx, rng.standard_normal(b_shape), dtype)
    op_a = np.swapaxes(a64, -1, -2) if trans_a else a64
    op_b = np.swapaxes(b64, -1, -2) if trans_b else b64
    expected = alpha * (op_a @ op_b)
    out_shape = (*batch, m, n)
    kwargs: dict = {}
    if with_bias:
        bias, bias64 = stored(ctx, rng.standard_normal(n), dtype)
        expected = expected + bias64
        kwargs["bias"] = bias
    expected = activate(activation, expected)
    if residual is not None:
        r_shape = out_shape if residual == "full" else (m, n)
        res, res64 = stored(ctx, rng.standard_normal(r_shape), dtype)
        expected = expected + res64
        kwargs["residual"] = res
    if beta != 0.0:
        out, out64 = stored(ctx, rng.standard_normal(out_shape), dtype)
        expected = expected + beta * out64
    else:
        out = poisoned(ctx, out_shape, dtype)
    result = ops.matmul(a, b, activation=activation, alpha=alpha, beta=beta, out=out,
                        trans_a=trans_a, trans_b=trans_b, variant=variant, **kwargs)
    assert result is out
    # GELU's log-slope is about -x in its negative tail, so the product's own rounding is
    # magnified there (x = -10 turns 1e-6 into 1e-5): on a few elements that are all small the
    # relative error can pass 1e-5. Bound the denominator so an absolute error of 1e-6 per
    # element passes there.
    floor = 0.1 * math.sqrt(expected.size) if activation == "gelu" else 0.0
    return rel_error(out.numpy(), expected, floor=floor)


def lane_variants(ctx: vkumd.Context, dtype: str) -> list[str]:
    """The variants this lane runs for ``dtype`` (coopmat has its own marked tests)."""
    return [v for v in available_variants(ctx.caps, dtype) if v != "coopmat"]


# -- correctness -------------------------------------------------------------------------


@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_float64_reference(ctx, dtype: str, m: int, n: int, k: int) -> None:
    for variant in lane_variants(ctx, dtype):
        err = run_case(ctx, m, n, k, dtype=dtype, variant=variant)
        assert err < TOL[dtype], f"{variant} {dtype} {m}x{n}x{k}: rel error {err:.2e}"


def test_default_choice_matches(ctx) -> None:
    assert run_case(ctx, 33, 47, 29, with_bias=True, activation="gelu") < TOL["float32"]


@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, True), (True, False), (True, True)])
def test_transposes(ctx, trans_a: bool, trans_b: bool) -> None:
    for variant in lane_variants(ctx, "float32"):
        for m, n, k in [(7, 13, 5), (40, 24, 37)]:
            err = run_case(ctx, m, n, k, trans_a=trans_a, trans_b=trans_b, variant=variant)
            assert err < TOL["float32"], f"{variant} {m}x{n}x{k}: {err:.2e}"


@pytest.mark.parametrize("activation", ACTIVATION_NAMES)
def test_activation_with_bias(ctx, activation: str | None) -> None:
    for variant in lane_variants(ctx, "float32"):
        err = run_case(ctx, 19, 37, 23, activation=activation, with_bias=True, variant=variant)
        assert err < TOL["float32"], f"{variant} {activation}: {err:.2e}"


@pytest.mark.parametrize("dtype", FLOATS)
def test_full_epilogue(ctx, dtype: str) -> None:
    # act(alpha * A @ B + bias) + residual + beta * out_before, with everything on.
    for variant in lane_variants(ctx, dtype):
        err = run_case(ctx, 21, 34, 17, dtype=dtype, activation="gelu_tanh", with_bias=True,
                       residual="full", alpha=0.5, beta=-1.5, variant=variant)
        assert err < TOL[dtype], f"{variant} {dtype}: {err:.2e}"


def test_residual_added_after_activation(ctx) -> None:
    # relu(A @ B) + r differs from relu(A @ B + r) wherever the product is negative.
    a = ctx.tensor(np.array([[-2.0]], dtype=np.float32))
    b = ctx.tensor(np.array([[1.0]], dtype=np.float32))
    r = ctx.tensor(np.array([[3.0]], dtype=np.float32))
    assert ops.matmul(a, b, activation="relu", residual=r).numpy()[0, 0] == 3.0


@pytest.mark.parametrize("case", ["shared_b", "batch_x_batch", "shared_a", "residual_shared"])
def test_batched(ctx, case: str) -> None:
    for variant in lane_variants(ctx, "float32"):
        if case == "shared_b":
            err = run_case(ctx, 9, 13, 11, batch=(2, 3), variant=variant, with_bias=True,
                           activation="silu")
        elif case == "batch_x_batch":
            err = run_case(ctx, 9, 13, 11, batch=(4,), b_batched=True, trans_b=True,
                           variant=variant)
        elif case == "residual_shared":
            err = run_case(ctx, 5, 7, 3, batch=(3,), residual="shared", variant=variant)
        else:
            rng = np.random.default_rng()
            a, a64 = stored(ctx, rng.standard_normal((6, 5)), "float32")
            b, b64 = stored(ctx, rng.standard_normal((3, 5, 7)), "float32")
            out = poisoned(ctx, (3, 6, 7), "float32")
            ops.matmul(a, b, out=out, variant=variant)
            err = rel_error(out.numpy(), a64 @ b64)
        assert err < TOL["float32"], f"{variant} {case}: {err:.2e}"


@pytest.mark.parametrize("dtype", [*FLOATS, "int8"])
def test_lanes_load_variants(ctx, dtype: str) -> None:
    # Word-wide loads along K for A, along N or K for B, or element by element: every
    # combination is chosen by some layout below, and each matches numpy on edge tiles.
    if dtype == "int8" and not {"int8", "storage8"} <= effective_caps(ctx.caps):
        pytest.skip("no 8-bit storage")
    vw = 8 // dtypes.dtype(dtype).itemsize
    seen = set()
    for trans_a, trans_b, n, k in [
        (False, False, 3 * vw * 8 + vw, 5 * vw),     # wide A, wide B along N
        (False, False, 3 * vw * 8 + 1, 5 * vw),      # wide A only
        (False, False, 2 * vw, 5 * vw + 1),          # wide B along N only
        (False, True, 21, 7 * vw),                   # wide A, wide B along K
        (True, True, 21, 7 * vw),                    # wide B along K only
        (True, True, 21, 7 * vw + 3),                # element loads
    ]:
        m = 13
        plan = choose_variant(ctx.caps, dtype, GemmShape(m, n, k, trans_a, trans_b),
                              force="lanes")
        seen.add((plan.variant["WIDE_A"], plan.variant["WIDE_B"]))
        if dtype == "int8":
            rng = np.random.default_rng()
            a = rng.integers(-128, 128, (k, m) if trans_a else (m, k), dtype=np.int8)
            b = rng.integers(-128, 128, (n, k) if trans_b else (k, n), dtype=np.int8)
            out = ctx.tensor(np.full((m, n), -7, dtype=np.int32))
            ops.matmul(ctx.tensor(a), ctx.tensor(b), out=out, trans_a=trans_a, trans_b=trans_b,
                       variant="lanes")
            expected = ((a.T if trans_a else a).astype(np.int64)
                        @ (b.T if trans_b else b).astype(np.int64))
            np.testing.assert_array_equal(out.numpy(), expected)
        else:
            err = run_case(ctx, m, n, k, dtype=dtype, trans_a=trans_a, trans_b=trans_b,
                           with_bias=True, activation="relu", variant="lanes")
            assert err < TOL[dtype], f"{plan.variant} {m}x{n}x{k}: {err:.2e}"
    assert seen == {(1, 1), (1, 0), (0, 1), (1, 2), (0, 2), (0, 0)}, seen


def test_split_k(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lower the thresholds so that small problems take split-K: float32 partial sums per K
    # slice, then the sum and the whole epilogue in a second pass.
    module = sys.modules["vkumd.compiler.kernels.gemm_plan"]
    monkeypatch.setattr(module, "SPLIT_K_MIN_K", 16)
    monkeypatch.setattr(module, "SPLIT_K_MIN_SLICE", 8)
    monkeypatch.setattr(module, "SPLIT_K_UNDERFILL", 1)
    split_any = False
    for variant in lane_variants(ctx, "float32"):
        for m, n, k in [(3, 5, 4099), (1, 1, 100), (5, 3, 33)]:
            plan = choose_variant(ctx.caps, "float32", GemmShape(m, n, k), force=variant)
            split_any |= module.split_k(ctx.caps, plan, m, n, k, 1, dtypes.float32) > 1
            err = run_case(ctx, m, n, k, activation="silu", with_bias=True, residual="full",
                           alpha=0.5, beta=2.0, variant=variant)
            assert err < TOL["float32"], f"{variant} {m}x{n}x{k}: {err:.2e}"
    assert split_any, "no case took split-K"


def test_batches_past_the_grid_limit(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pretend the device dispatches at most 2 workgroups along z: 5 batch entries then go in
    # 3 launches, each with its operands' addresses moved on.
    caps = dataclasses.replace(ctx.caps, max_workgroup_count=(65535, 65535, 2))
    monkeypatch.setattr(ctx, "caps", caps)
    for variant in lane_variants(ctx, "float32"):
        err = run_case(ctx, 9, 20, 12, batch=(5,), b_batched=True, residual="full",
                       with_bias=True, variant=variant)
        assert err < TOL["float32"], f"{variant}: {err:.2e}"
        err = run_case(ctx, 9, 20, 12, batch=(5,), variant=variant)
        assert err < TOL["float32"], f"{variant} shared B: {err:.2e}"


def test_zero_sized(ctx) -> None:
    a = ctx.tensor(np.zeros((0, 3), dtype=np.float32))
    b = ctx.tensor(np.zeros((3, 4), dtype=np.float32))
    assert ops.matmul(a, b).shape == (0, 4)
    # K = 0: the product is zero, the epilogue still applies.
    a0 = ctx.empty((2, 0))
    b0 = ctx.empty((0, 3))
    bias = ctx.tensor(np.array([1.0, -1.0, 2.0], dtype=np.float32))
    out = ops.matmul(a0, b0, bias=bias, activation="relu").numpy()
    np.testing.assert_array_equal(out, [[1.0, 0.0, 2.0]] * 2)


def test_int8(ctx) -> None:
    if not {"int8", "storage8"} <= effective_caps(ctx.caps):
        with pytest.raises(CapabilityMissing):
            ops.matmul(ctx.tensor(np.ones((2, 2), np.int8)), ctx.tensor(np.ones((2, 2), np.int8)))
        return
    rng = np.random.default_rng()
    for variant in lane_variants(ctx, "int8"):
        for m, n, k in [(1, 1, 1), (7, 13, 300), (17, 9, 4099)]:
            a = rng.integers(-128, 128, (m, k), dtype=np.int8)
            b = rng.integers(-128, 128, (k, n), dtype=np.int8)
            out = ctx.tensor(np.full((m, n), -12345, dtype=np.int32))
            ops.matmul(ctx.tensor(a), ctx.tensor(b), out=out, variant=variant)
            np.testing.assert_array_equal(out.numpy(), a.astype(np.int64) @ b.astype(np.int64),
                                          err_msg=f"{variant} {m}x{n}x{k}")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 90),
       batch=st.sampled_from([(), (2,)]), trans_a=st.booleans(), trans_b=st.booleans(),
       variant=st.sampled_from(["lanes", "lanes_packed", "shared"]), dtype=st.sampled_from(FLOATS))
def test_shape_search(ctx, m: int, n: int, k: int, batch: tuple[int, ...], trans_a: bool,
                      trans_b: bool, variant: str, dtype: str) -> None:
    err = run_case(ctx, m, n, k, dtype=dtype, batch=batch, trans_a=trans_a, trans_b=trans_b,
                   with_bias=True, activation="gelu", variant=variant)
    assert err < TOL[dtype], f"{variant} {dtype} batch={batch} {m}x{n}x{k}: {err:.2e}"


# -- variant choice ----------------------------------------------------------------------


@pytest.fixture
def coopmat_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning tests on stand-in caps ask what a device with coopmat gets, so the lane's
    ``VKUMD_DISABLE_COOPMAT=1`` (which the GPU run sets for its second suite) must not apply."""
    monkeypatch.delenv("VKUMD_DISABLE_COOPMAT", raising=False)


def test_lanes_tiles_keep_the_loop_body(ctx) -> None:
    # A lane's multiply-adds per main-loop iteration stay within LANES_BODY (past it the loop
    # measured slower), so types that step K further (int8: 8 per word) get fewer rows.
    for code in gemm_type_codes(ctx.caps):
        for wide_a in (0, 1):
            for wide_b in (0, 1, 2):
                v = lanes_variant(ctx.caps, code, wide_a, wide_b)
                columns = lanes_tile_n(ctx.caps, v) // ctx.caps.subgroup_size
                assert v["TM"] * columns * v["KU"] <= LANES_BODY, (code, v)
                assert v["TM"] >= ctx.caps.subgroup_size, (code, v)
                k_step = WORD_ELEMENTS[code] if wide_a or wide_b == 2 else 1
                assert v["KU"] % k_step == 0, (code, v)
                if v["KU"] == LANES_KU:
                    assert v["TM"] == LANES_TM, (code, v)


@pytest.mark.usefixtures("coopmat_allowed")
def test_choice_by_device(ctx) -> None:
    caps = ctx.caps
    cpu = dataclasses.replace(caps, device_type="cpu", cooperative_matrix=False)
    assert choose_variant(cpu, "float32").name == "lanes"
    assert choose_variant(cpu, "float32", GemmShape(64, 64, 64)).name == "lanes"
    # Large problems pack B first; aligned layouts read 64-bit words.
    big = choose_variant(cpu, "float32", GemmShape(2048, 2048, 2048))
    assert big.name == "lanes_packed" and big.pack is not None
    assert (big.variant["WIDE_A"], big.variant["WIDE_B"]) == (1, 1)
    gpu = dataclasses.replace(caps, device_type="discrete", cooperative_matrix=False,
                              cooperative_matrix_shapes=())
    assert choose_variant(gpu, "float32").name == "shared"
    assert choose_variant(gpu, "float16").name == "shared"
    shape = CoopMatShape(m=16, n=16, k=16, a_type="float16", b_type="float16",
                         c_type="float32", result_type="float32", scope="subgroup")
    with_coopmat = dataclasses.replace(gpu, cooperative_matrix=True, vulkan_memory_model=True,
                                       cooperative_matrix_shapes=(shape,))
    plan = choose_variant(with_coopmat, "float16")
    assert plan.name == "coopmat"
    assert (plan.variant["CM_M"], plan.variant["CM_N"], plan.variant["CM_K"]) == (16, 16, 16)
    assert choose_variant(with_coopmat, "float32").name == "shared"


# -- cooperative-matrix planning (any lane: the device's caps are stand-ins) --------------


def _cm(m: int, n: int, k: int) -> CoopMatShape:
    return CoopMatShape(m=m, n=n, k=k, a_type="float16", b_type="float16", c_type="float32",
                        result_type="float32", scope="subgroup")


def h200_like(ctx: vkumd.Context, **changes: object) -> DeviceCaps:
    """This device's caps dressed as NVIDIA's Vulkan driver on an H200 (what the host sees)."""
    fields: dict = dict(device_type="discrete", subgroup_size=32, min_subgroup_size=32,
                        max_subgroup_size=32, shared_memory_size=49152,
                        max_workgroup_invocations=1024, max_workgroup_size=(1024, 1024, 64),
                        cooperative_matrix=True, vulkan_memory_model=True,
                        storage_16bit=True,
                        cooperative_matrix_shapes=(_cm(16, 8, 16), _cm(16, 16, 16),
                                                   _cm(16, 8, 8)))
    fields.update(changes)
    return dataclasses.replace(ctx.caps, **fields)


def _tile(plan) -> str:
    v = plan.variant
    return f"{v['BM']}x{v['BN']}x{v['BK']}:{v['WG_M']}x{v['WG_N']}:{v['GROUP_M']}"


@pytest.mark.usefixtures("coopmat_allowed")
def test_coopmat_plan_on_a_gpu(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COOPMAT_TILE_VARIABLE, raising=False)
    caps = h200_like(ctx)
    cm = usable_coopmat_shape(coopmat_gemm_shapes(caps))
    assert cm is not None and (cm.m, cm.n, cm.k) == (16, 16, 16)  # preferred where listed
    assert [str(t) for t in coopmat_tiles(caps, cm)] == [
        "128x128x32:2x2:8", "64x64x32:2x2:8", "32x32x32:1x1:8"]
    for tile in coopmat_tiles(caps, cm):
        for a_t in (0, 1):
            for b_t in (0, 1):
                assert coopmat_shared_bytes(cm, tile, a_t, b_t) <= 48 * 1024
    expected = {  # (M, N, K, batch) -> block config
        (4096, 4096, 4096, 1): "128x128x32:2x2:8",
        (8192, 8192, 8192, 1): "128x128x32:2x2:8",
        (2048, 3072, 768, 1): "128x128x32:2x2:8",    # 384 large blocks
        (2048, 768, 768, 1): "64x64x32:2x2:8",       # 96 large blocks would idle SMs
        (2048, 1024, 1024, 1): "128x128x32:2x2:8",   # exactly 128 large blocks
        (1024, 1024, 1024, 1): "64x64x32:2x2:8",
        (512, 64, 64, 4): "32x32x32:1x1:8",          # 128 one-subgroup blocks
        (256, 256, 64, 1): "64x64x32:2x2:8",         # as many busy subgroups as 32x32
        (1, 4096, 4096, 1): "32x32x32:1x1:8",
        (1, 1, 1, 1): "128x128x32:2x2:8",            # nothing to gain from smaller blocks
    }
    for (m, n, k, batch), tile in expected.items():
        plan = choose_variant(caps, "float16", GemmShape(m, n, k, batch=batch))
        assert plan.name == "coopmat" and _tile(plan) == tile, (m, n, k, batch, _tile(plan))
        assert plan.variant["WORKGROUP_SIZE"] == plan.variant["WG_M"] * plan.variant["WG_N"] * 32
        assert plan.variant["SG"] == 32
        assert (plan.tile_m, plan.tile_n) == (plan.variant["BM"], plan.variant["BN"])
    # 16-byte loads where the contiguous dimension is a multiple of 8 and the base aligned.
    loads = {
        GemmShape(64, 64, 64): (0, 0, 1, 1),
        GemmShape(64, 64, 60): (0, 0, 0, 1),
        GemmShape(64, 60, 64): (0, 0, 1, 0),
        GemmShape(60, 64, 64, trans_a=True): (1, 0, 0, 1),
        GemmShape(64, 60, 64, trans_b=True): (0, 1, 1, 1),
        GemmShape(64, 64, 64, aligned16_a=False): (0, 0, 0, 1),
        GemmShape(64, 64, 64, trans_b=True, aligned16_b=False): (0, 1, 1, 0),
    }
    for shape, flags in loads.items():
        v = coopmat_plan(caps, shape).variant
        assert (v["A_T"], v["B_T"], v["A_VEC"], v["B_VEC"]) == flags, shape
    v = coopmat_plan(caps).variant  # no shape: element loads, the largest block
    assert (v["A_VEC"], v["B_VEC"], v["BM"]) == (0, 0, 128)
    # Less shared memory drops the large block.
    small = h200_like(ctx, shared_memory_size=32768)
    assert [str(t) for t in coopmat_tiles(small, cm)] == ["64x64x32:2x2:8", "32x32x32:1x1:8"]
    # Only shapes of multiples of 8 serve; float16 -> float16 shapes never do.
    odd = h200_like(ctx, cooperative_matrix_shapes=(_cm(4, 4, 4),))
    assert "coopmat" not in available_variants(odd, "float16")
    assert choose_variant(odd, "float16").name == "shared"
    assert "coopmat" not in available_variants(caps, "float32")  # no silent f32 -> f16


@pytest.mark.parametrize(("text", "message"), [
    ("128x128", "is not a block config"),
    ("128x128x32", "is not a block config"),
    ("128x128x32:2", "is not a block config"),
    ("big", "is not a block config"),
    ("128x128x32:2x2:8:1", "is not a block config"),
    ("0x128x32:2x2", "at least 1"),
    ("128x128x32:2x2:0", "at least 1"),
    ("128x128x32:3x2", "warp tiles"),
    ("128x120x32:2x2", "warp tiles"),
    ("128x128x24:2x2", "multiple of the matrix shape's K=16"),
    ("256x256x16:1x1", "accumulator matrices"),
    ("1024x1024x16:8x8", "invocations"),
    ("256x256x64:2x2", "shared memory"),
])
@pytest.mark.usefixtures("coopmat_allowed")
def test_coopmat_tile_knob_errors(ctx, monkeypatch: pytest.MonkeyPatch, text: str,
                                  message: str) -> None:
    monkeypatch.setenv(COOPMAT_TILE_VARIABLE, text)
    with pytest.raises(VkumdValueError, match=message) as info:
        choose_variant(h200_like(ctx), "float16", GemmShape(256, 256, 256))
    assert COOPMAT_TILE_VARIABLE in str(info.value)


@pytest.mark.usefixtures("coopmat_allowed")
def test_coopmat_tile_knob(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    caps = h200_like(ctx)
    for text, tile in [("64x128x32:2x4", "64x128x32:2x4:8"), (" 256x128x16:4x2:4 ", None),
                       ("128x256x16:2x4:1", "128x256x16:2x4:1")]:
        parsed = parse_coopmat_tile(text)
        monkeypatch.setenv(COOPMAT_TILE_VARIABLE, text)
        plan = choose_variant(caps, "float16", GemmShape(4096, 4096, 4096))
        assert _tile(plan) == (tile or str(parsed))
        assert plan.variant["WORKGROUP_SIZE"] == parsed.wg_m * parsed.wg_n * 32
    # The knob does not touch the other variants.
    assert choose_variant(caps, "float32", GemmShape(64, 64, 64)).name == "shared"


@pytest.mark.usefixtures("coopmat_allowed")
def test_coopmat_workgroups_pin_their_subgroup_size(ctx) -> None:
    # Warp tiles are handed out by gl_SubgroupID, so a workgroup of several subgroups needs
    # the subgroup size it was planned for: the registry pins SG (not the workgroup width).
    from vkumd.compiler.kernels.gemm import GEMM

    caps = dataclasses.replace(ctx.caps, cooperative_matrix=True, vulkan_memory_model=True,
                               cooperative_matrix_shapes=(_cm(8, 8, 8),))
    v = coopmat_plan(caps).variant  # the largest block: 2x2 subgroups
    assert v["WG_M"] * v["WG_N"] > 1 and v["SG"] == caps.subgroup_size
    assert v["WORKGROUP_SIZE"] == v["WG_M"] * v["WG_N"] * caps.subgroup_size
    expected = caps.subgroup_size if caps.subgroup_size_control else None
    assert ctx.kernels._pinned_subgroup(GEMM, v) == expected


# -- the cooperative-matrix lane ---------------------------------------------------------


def lane_tiles(ctx: vkumd.Context) -> list[str]:
    """Every block config the host picks on this lane, plus forced ones of other forms: 8
    subgroups, 3 subgroups (slices that do not split evenly over the invocations), BK of
    several matrix steps, and launch-order groups of 1 and 3 block rows."""
    cm = usable_coopmat_shape(coopmat_gemm_shapes(ctx.caps))
    assert cm is not None, "the lane lists no usable float16 -> float32 shape"
    picked = [str(t) for t in coopmat_tiles(ctx.caps, cm)]
    m, n, k = cm.m, cm.n, cm.k
    forced = [f"{4 * m}x{4 * n}x{2 * k}:2x4", f"{3 * m}x{n}x{k}:3x1:3",
              f"{2 * m}x{4 * n}x{4 * k}:1x2:1"]
    return picked + forced


@pytest.mark.coopmat
@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_coopmat_variant_is_chosen_and_matches(ctx, monkeypatch: pytest.MonkeyPatch, m: int,
                                               n: int, k: int) -> None:
    require_coopmat(ctx)
    monkeypatch.delenv(COOPMAT_TILE_VARIABLE, raising=False)
    assert coopmat_gemm_shapes(ctx.caps), "the lane lists no float16 -> float32 shape"
    # lavapipe is a CPU driver, where the lanes path is the default (coopmat is emulated and
    # slower there); a GPU with the same shapes would choose coopmat, and so does this lane
    # with COOPMAT_ON_CPU.
    gpu = dataclasses.replace(ctx.caps, device_type="discrete")
    assert choose_variant(gpu, "float16", GemmShape(m, n, k)).name == "coopmat"
    monkeypatch.setattr(sys.modules["vkumd.compiler.kernels.gemm_choice"], "COOPMAT_ON_CPU", True)
    assert choose_variant(ctx.caps, "float16", GemmShape(m, n, k)).name == "coopmat"
    err = run_case(ctx, m, n, k, dtype="float16")  # the default choice, now coopmat
    assert err < TOL["float16"], f"coopmat {m}x{n}x{k}: {err:.2e}"


@pytest.mark.coopmat
def test_coopmat_every_block_config(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each config on: primes (every block an edge, element loads), 16-byte loads with edge
    # blocks in M and N, M and N smaller than one warp tile, more block rows than a launch
    # group (the last one partial), and a batch over a shared B.
    require_coopmat(ctx)
    for tile in lane_tiles(ctx):
        monkeypatch.setenv(COOPMAT_TILE_VARIABLE, tile)
        for m, n, k, batch in [(67, 131, 61, ()), (40, 56, 64, ()), (3, 5, 41, ()),
                               (150, 24, 16, ()), (19, 24, 48, (3,))]:
            err = run_case(ctx, m, n, k, dtype="float16", batch=batch, variant="coopmat")
            assert err < TOL["float16"], f"{tile} {m}x{n}x{k} batch={batch}: {err:.2e}"


@pytest.mark.coopmat
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, True), (True, False), (True, True)])
def test_coopmat_transposes(ctx, monkeypatch: pytest.MonkeyPatch, trans_a: bool,
                            trans_b: bool) -> None:
    # Transposed operands are staged column-major: 16-byte loads along M or K when those are
    # multiples of 8, element loads otherwise; two configs (one and several subgroups).
    require_coopmat(ctx)
    several, one = lane_tiles(ctx)[1:3]
    for tile, (m, n, k) in [(several, (40, 48, 32)), (several, (29, 37, 23)),
                            (one, (40, 48, 32))]:
        monkeypatch.setenv(COOPMAT_TILE_VARIABLE, tile)
        err = run_case(ctx, m, n, k, dtype="float16", trans_a=trans_a, trans_b=trans_b,
                       variant="coopmat")
        assert err < TOL["float16"], f"{tile} {m}x{n}x{k}: {err:.2e}"


@pytest.mark.coopmat
def test_coopmat_epilogue(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every epilogue option through the accumulator scratch, on a multi-subgroup workgroup.
    require_coopmat(ctx)
    monkeypatch.setenv(COOPMAT_TILE_VARIABLE, lane_tiles(ctx)[1])
    cases = [dict(activation=a, with_bias=True) for a in ACTIVATION_NAMES]
    cases += [dict(residual="full"), dict(alpha=0.5, beta=-1.5),
              dict(activation="gelu_tanh", with_bias=True, residual="full", alpha=0.5,
                   beta=2.0),
              dict(batch=(3,), residual="shared", with_bias=True, activation="relu")]
    for case in cases:
        err = run_case(ctx, 37, 45, 40, dtype="float16", variant="coopmat", **case)
        assert err < TOL["float16"], f"{case}: {err:.2e}"


@pytest.mark.coopmat
def test_coopmat_long_k_and_batches(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    require_coopmat(ctx)
    monkeypatch.delenv(COOPMAT_TILE_VARIABLE, raising=False)
    for m, n, k in [(5, 9, 2053), (9, 16, 2048)]:  # element and 16-byte loads, long K
        err = run_case(ctx, m, n, k, dtype="float16", with_bias=True, variant="coopmat")
        assert err < TOL["float16"], f"{m}x{n}x{k}: {err:.2e}"
    for batch, b_batched, trans_b in [((2, 3), False, False), ((4,), True, True),
                                      ((3,), True, False)]:
        err = run_case(ctx, 9, 13, 11, dtype="float16", batch=batch, b_batched=b_batched,
                       trans_b=trans_b, activation="silu", with_bias=True, variant="coopmat")
        assert err < TOL["float16"], f"batch={batch} b_batched={b_batched}: {err:.2e}"
    # K = 0: no slices, the epilogue alone.
    bias = ctx.tensor(np.array([1.0, -1.0, 2.0], dtype=np.float16))
    out = ops.matmul(ctx.empty((2, 0), "float16"), ctx.empty((0, 3), "float16"), bias=bias,
                     activation="relu", variant="coopmat")
    np.testing.assert_array_equal(out.numpy(), [[1.0, 0.0, 2.0]] * 2)
    # A shared A against a batch of B.
    rng = np.random.default_rng()
    a, a64 = stored(ctx, rng.standard_normal((6, 16)), "float16")
    b, b64 = stored(ctx, rng.standard_normal((3, 16, 24)), "float16")
    out = poisoned(ctx, (3, 6, 24), "float16")
    ops.matmul(a, b, out=out, variant="coopmat")
    assert rel_error(out.numpy(), a64 @ b64) < TOL["float16"]


@pytest.mark.coopmat
def test_coopmat_bad_knob_leaves_the_context_usable(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    require_coopmat(ctx)
    monkeypatch.setenv(COOPMAT_TILE_VARIABLE, "8x8")
    with pytest.raises(VkumdValueError, match="is not a block config"):
        run_case(ctx, 8, 8, 8, dtype="float16", variant="coopmat")
    monkeypatch.setenv(COOPMAT_TILE_VARIABLE, "4096x4096x8:1x1")
    with pytest.raises(VkumdValueError, match="accumulator matrices"):
        run_case(ctx, 8, 8, 8, dtype="float16", variant="coopmat")
    monkeypatch.delenv(COOPMAT_TILE_VARIABLE)
    assert run_case(ctx, 8, 8, 8, dtype="float16", variant="coopmat") < TOL["float16"]


@pytest.mark.coopmat
def test_lane_variants_on_the_coopmat_lane(ctx) -> None:
    # The other variants keep working on Mesa 26 (its newer LLVM compiles them afresh).
    require_coopmat(ctx)
    for variant in ("lanes", "shared"):
        err = run_case(ctx, 37, 29, 41, dtype="float16", with_bias=True, activation="silu",
                       variant=variant)
        assert err < TOL["float16"], f"{variant}: {err:.2e}"


# -- bad input ---------------------------------------------------------------------------


def _f32(ctx: vkumd.Context, *shape: int) -> vkumd.Tensor:
    return ctx.tensor(np.ones(shape, dtype=np.float32))


BAD_CASES = {
    "inner dims": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 5, 6)), VkumdValueError,
                   "inner dimensions differ"),
    "trans inner dims": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 3, 6), trans_b=True),
                         VkumdValueError, "inner dimensions differ"),
    "dtype mismatch": (lambda c: dict(a=_f32(c, 3, 4), b=c.tensor(np.ones((4, 2), np.float16))),
                       VkumdTypeError, "cast one"),
    "unsupported dtype": (lambda c: dict(a=c.tensor(np.ones((2, 2), np.int32)),
                                         b=c.tensor(np.ones((2, 2), np.int32))),
                          VkumdTypeError, "not supported"),
    "unknown activation": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), activation="tanh"),
                           VkumdValueError, "activation='tanh' is unknown"),
    "bias length": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), bias=_f32(c, 3)),
                    VkumdValueError, "one value per output column"),
    "bias 2-D": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), bias=_f32(c, 1, 2)),
                 VkumdValueError, "bias has shape"),
    "bias dtype": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2),
                                  bias=c.tensor(np.ones(2, np.float16))),
                   VkumdTypeError, "bias is float16"),
    "residual shape": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), residual=_f32(c, 2, 3)),
                       VkumdValueError, "residual has shape"),
    "out shape": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), out=_f32(c, 2, 3)),
                  VkumdValueError, "out= has shape"),
    "out dtype": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2),
                                 out=c.tensor(np.ones((3, 2), np.float16))),
                  VkumdTypeError, "out= is float16"),
    "out is a": (lambda c: (lambda t: dict(a=t, b=_f32(c, 4, 4), out=t))(_f32(c, 4, 4)),
                 VkumdValueError, "same tensor as a"),
    "beta without out": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), beta=1.0),
                         VkumdValueError, "needs out="),
    "alpha not a number": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), alpha="2"),
                           VkumdTypeError, "alpha must be a real number"),
    "1-D operand": (lambda c: dict(a=_f32(c, 4), b=_f32(c, 4, 2)), VkumdValueError,
                    "at least 2 dimensions"),
    "batch mismatch": (lambda c: dict(a=_f32(c, 2, 3, 4), b=_f32(c, 3, 4, 2)), VkumdValueError,
                       "batch dimensions"),
    "not a tensor": (lambda c: dict(a=np.ones((3, 4), np.float32), b=_f32(c, 4, 2)),
                     VkumdTypeError, "must be a vkumd Tensor"),
    "unknown variant": (lambda c: dict(a=_f32(c, 3, 4), b=_f32(c, 4, 2), variant="fast"),
                        VkumdValueError, "variant='fast' is unknown"),
    "int8 epilogue": (lambda c: dict(a=c.tensor(np.ones((2, 2), np.int8)),
                                     b=c.tensor(np.ones((2, 2), np.int8)), activation="relu"),
                      (VkumdValueError, CapabilityMissing), "int8"),
}


@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_input_raises_clearly(ctx, case: str) -> None:
    build, error, text = BAD_CASES[case]
    kwargs = build(ctx)
    a = kwargs.pop("a")
    b = kwargs.pop("b")
    with pytest.raises(error, match=text):
        ops.matmul(a, b, **kwargs)
    # The context stays usable.
    assert run_case(ctx, 3, 5, 7) < TOL["float32"]


def test_coopmat_variant_refused_without_coopmat(ctx) -> None:
    if coopmat_gemm_shapes(ctx.caps):
        pytest.skip("this device has cooperative matrices")
    with pytest.raises(VkumdValueError, match="not available"):
        ops.matmul(_f32(ctx, 2, 2), _f32(ctx, 2, 2), variant="coopmat")


def test_int8_without_capability(ctx) -> None:
    caps = dataclasses.replace(ctx.caps, shader_int8=False, storage_8bit=False)

    class NoInt8:
        """A context stand-in whose caps lack 8-bit support (the check reads only caps)."""

        def __init__(self) -> None:
            self.caps = caps

    with pytest.raises(CapabilityMissing, match="int8 needs"):
        _check_dtype(NoInt8(), dtypes.int8)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("m, n, k", [(37, 53, 29), (4, 9, 6000), (130, 70, 260)])
def test_out_may_be_the_residual(ctx, m: int, n: int, k: int, dtype: str) -> None:
    # The memory planner writes a matmul over its dying residual; every variant (and the
    # split-K combine at 4x9x6000) must read each residual element before writing it.
    if dtype == "float16" and not ctx.caps.storage_16bit:
        pytest.skip("float16 needs 16-bit storage, which this device lacks")
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    r = rng.standard_normal((m, n)).astype(dtype)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0) + r
    # Every path ends in gemm.comp's finish(), coopmat included (run where the device has it).
    for variant in available_variants(ctx.caps, dtype):
        res = ctx.tensor(r)
        got = ops.matmul(ctx.tensor(a), ctx.tensor(b), bias=ctx.tensor(bias),
                         activation="relu", residual=res, out=res, variant=variant)
        assert got is res
        err = np.abs(got.numpy().astype(np.float64) - ref).max() / np.abs(ref).max()
        assert err < (2e-6 if dtype == "float32" else 2e-3), (variant, err)
