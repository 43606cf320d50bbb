"""The cooperative-matrix GEMM tile kernel (``coopmat_matmul_tile``).

Tests marked ``coopmat`` run on the cooperative-matrix lane (``make test-coopmat``) and skip on
the main lane; the bad-input and capability tests run on both.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import require_coopmat

import vkumd
from vkumd.compiler.kernels import GEMM_COOPMAT_TILE
from vkumd.framework.ops.gemm_tile import coopmat_matmul_tile, coopmat_tile_shapes
from vkumd.vk.caps import CoopMatShape

# float16 inputs, float32 accumulation: the error is the float32 rounding of the sums (the
# inputs are exact in float64), far below this bound even for K = 1000.
REL_TOL = 1e-3

SHAPES = [  # (M, N, K)
    (1, 1, 1),
    (7, 13, 29),      # primes: every tile is an edge tile
    (9, 8, 8),        # one row past a tile
    (8, 9, 17),       # one column and one K step past
    (33, 70, 5),      # K smaller than a tile
    (16, 16, 1000),   # long K
    (64, 64, 64),     # tile multiples: the direct-load path on 8x8x8 and 16x16x16
    (48, 40, 24),
    (3, 200, 11),
]


def _rel_error(result: np.ndarray, reference: np.ndarray) -> float:
    denom = float(np.linalg.norm(reference))
    return float(np.linalg.norm(result.astype(np.float64) - reference)) / max(denom, 1e-300)


def _run(ctx: vkumd.Context, m: int, n: int, k: int, shape: CoopMatShape | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng()  # fresh data every run
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = ctx.tensor(np.full((m, n), np.nan, dtype=np.float32))  # poison: unwritten shows
    result_t = coopmat_matmul_tile(ctx.tensor(a), ctx.tensor(b), out=out, shape=shape)
    assert result_t is out
    reference = a.astype(np.float64) @ b.astype(np.float64)
    return out.numpy(), reference


@pytest.mark.coopmat
@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_matches_float64_reference_for_every_listed_shape(ctx, m: int, n: int, k: int) -> None:
    require_coopmat(ctx)
    shapes = coopmat_tile_shapes(ctx.caps)
    assert shapes, (f"{ctx.caps.name} has cooperative matrices but lists no "
                    "float16*float16+float32 subgroup shape")
    for shape in shapes:  # every variant the lane can run
        result, reference = _run(ctx, m, n, k, shape)
        assert result.shape == (m, n) and result.dtype == np.float32
        assert not np.isnan(result).any(), f"{shape}: unwritten (NaN) elements remain"
        assert np.isfinite(result).all()
        error = _rel_error(result, reference)
        assert error < REL_TOL, f"{shape} at {m}x{n}x{k}: relative Frobenius error {error:.3g}"


@pytest.mark.coopmat
def test_default_out_and_default_shape(ctx) -> None:
    require_coopmat(ctx)
    rng = np.random.default_rng()
    a = rng.standard_normal((10, 21)).astype(np.float16)
    b = rng.standard_normal((21, 6)).astype(np.float16)
    c = coopmat_matmul_tile(ctx.tensor(a), ctx.tensor(b))
    assert c.shape == (10, 6) and c.dtype is vkumd.float32
    result = c.numpy()
    assert not np.isnan(result).any()
    assert _rel_error(result, a.astype(np.float64) @ b.astype(np.float64)) < REL_TOL


@pytest.mark.coopmat
def test_exact_small_integers(ctx) -> None:
    """Small integers are exact in float16 and their sums exact in float32: no tolerance."""
    require_coopmat(ctx)
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, size=(19, 37)).astype(np.float16)
    b = rng.integers(-3, 4, size=(37, 11)).astype(np.float16)
    out = ctx.tensor(np.full((19, 11), np.nan, dtype=np.float32))
    coopmat_matmul_tile(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), (a.astype(np.float64) @ b).astype(np.float32))


# --- bad input and capabilities: not coopmat-marked, so they run on the main lane too ----------

def _f16(ctx: vkumd.Context, shape: tuple[int, ...]) -> vkumd.Tensor:
    return ctx.tensor(np.ones(shape, dtype=np.float16))


def test_mismatched_inner_dimensions(ctx) -> None:
    with pytest.raises(vkumd.VkumdValueError, match="inner dimensions differ"):
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (6, 3)))


@pytest.mark.parametrize(("dtype_a", "dtype_b"), [("float32", "float16"),
                                                  ("float16", "float32"),
                                                  ("int32", "int32")])
def test_wrong_dtypes(ctx, dtype_a: str, dtype_b: str) -> None:
    a = ctx.tensor(np.ones((4, 5), dtype=dtype_a))
    b = ctx.tensor(np.ones((5, 3), dtype=dtype_b))
    with pytest.raises(vkumd.VkumdTypeError, match="float16"):
        coopmat_matmul_tile(a, b)


def test_numpy_operands_are_refused(ctx) -> None:
    with pytest.raises(vkumd.VkumdTypeError, match="vkumd tensors"):
        coopmat_matmul_tile(np.ones((2, 2), np.float16), _f16(ctx, (2, 2)))


@pytest.mark.parametrize("bad_shape", [(4, 4), (3, 4), (12,), (4, 3, 1)])
def test_out_of_the_wrong_shape(ctx, bad_shape: tuple[int, ...]) -> None:
    out = ctx.empty(bad_shape, "float32")
    with pytest.raises(vkumd.VkumdValueError, match=r"out= has shape"):
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (5, 3)), out=out)


def test_out_of_the_wrong_dtype(ctx) -> None:
    with pytest.raises(vkumd.VkumdTypeError, match="out= must be float32"):
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (5, 3)), out=ctx.empty((4, 3), "float16"))


@pytest.mark.parametrize(("shape_a", "shape_b"), [((5,), (5, 3)), ((2, 4, 5), (5, 3)),
                                                  ((0, 5), (5, 3))])
def test_not_two_dimensional_or_empty(ctx, shape_a, shape_b) -> None:
    with pytest.raises(vkumd.VkumdValueError):
        coopmat_matmul_tile(_f16(ctx, shape_a), _f16(ctx, shape_b))


def test_device_without_coopmat_raises_capability_missing(ctx, monkeypatch) -> None:
    """On the main lane the device really lacks it; elsewhere the caps are faked to lack it."""
    if ctx.caps.cooperative_matrix:
        monkeypatch.setattr(ctx, "caps", dataclasses.replace(
            ctx.caps, cooperative_matrix=False, cooperative_matrix_shapes=()))
    with pytest.raises(vkumd.CapabilityMissing, match="VK_KHR_cooperative_matrix") as info:
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (5, 3)))
    assert ctx.caps.name in str(info.value) and "coopmat-lane" in str(info.value)


def test_no_float16_float32_shape_raises_capability_missing(ctx, monkeypatch) -> None:
    int_only = CoopMatShape(8, 8, 8, "int8", "int8", "int32", "int32", "subgroup")
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(
        ctx.caps, cooperative_matrix=True, cooperative_matrix_shapes=(int_only,)))
    monkeypatch.delenv("VKUMD_DISABLE_COOPMAT", raising=False)
    with pytest.raises(vkumd.CapabilityMissing, match="lists no float16"):
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (5, 3)))


def test_disable_coopmat_is_honoured(ctx, monkeypatch) -> None:
    shape = CoopMatShape(8, 8, 8, "float16", "float16", "float32", "float32", "subgroup")
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(
        ctx.caps, cooperative_matrix=True, cooperative_matrix_shapes=(shape,)))
    monkeypatch.setenv("VKUMD_DISABLE_COOPMAT", "1")
    with pytest.raises(vkumd.CapabilityMissing, match="VKUMD_DISABLE_COOPMAT"):
        coopmat_matmul_tile(_f16(ctx, (4, 5)), _f16(ctx, (5, 3)))


def test_variants_follow_the_listed_shapes_not_a_constant(ctx) -> None:
    listed = (
        CoopMatShape(16, 16, 16, "float16", "float16", "float32", "float32", "subgroup"),
        CoopMatShape(16, 8, 16, "float16", "float16", "float32", "float32", "subgroup"),
        CoopMatShape(16, 16, 16, "float16", "float16", "float16", "float16", "subgroup"),
        CoopMatShape(32, 32, 16, "float16", "float16", "float32", "float32", "workgroup"),
        CoopMatShape(8, 8, 32, "int8", "int8", "int32", "int32", "subgroup"),
    )
    caps = dataclasses.replace(ctx.caps, cooperative_matrix=True,
                               cooperative_matrix_shapes=listed, subgroup_size=32)
    variants = GEMM_COOPMAT_TILE.variants(caps)
    assert [(v["TM"], v["TN"], v["TK"]) for v in variants] == [(16, 16, 16), (16, 8, 16)]
    assert all(v["WORKGROUP_SIZE"] == 32 for v in variants)
    assert GEMM_COOPMAT_TILE.requires == frozenset({"coopmat", "storage16", "float16"})
    assert set(GEMM_COOPMAT_TILE.spec_constants) == {"WORKGROUP_SIZE", "TM", "TN", "TK"}
    assert GEMM_COOPMAT_TILE.variants(dataclasses.replace(
        caps, cooperative_matrix_shapes=listed[2:])) == []
