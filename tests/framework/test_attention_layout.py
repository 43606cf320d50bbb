"""``vkumd.ops.attention`` in both layouts: ``"bhsd"`` ([batch, heads, seq, head_dim]) and
``"bshd"`` ([batch, seq, heads, head_dim]), for the inputs and, separately, the output.

Each case draws fresh data in ``[b, h, s, d]``, hands the kernel its ``layout`` form, and
compares with the float64 reference (test_attention.py's) put in ``out_layout``. Outputs are
poisoned with NaN first. Every path a lane runs is covered: tiled (LANE_ROWS = 1), decode
(LANE_ROWS = 0 with the combine step) and, on the cooperative-matrix lane, coopmat.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from conftest import require_coopmat
from test_attention import NP, TOL, reference, rel_error

import vkumd
from vkumd.compiler.kernels.attention import ATTENTION_PUSH
from vkumd.compiler.kernels.attention_plan import LAYOUTS, AttentionProblem, attention_plan
from vkumd.framework.opset.attention import attention, attention_path, choose_path

COMBOS = list(itertools.product(LAYOUTS, LAYOUTS))
COMBO_IDS = [f"{a}-{b}" for a, b in COMBOS]


def put(x: np.ndarray, layout: str) -> np.ndarray:
    """``x`` ([b, h, s, d]) in ``layout``, contiguous."""
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)) if layout == "bshd" else x


def check(ctx, path, dtype, shape, layout, out_layout, *, np_mask=None, **kwargs):
    """Run ``path`` on fresh data of ``shape`` (batch, q_heads, kv_heads, q_len, k_len,
    head_dim) in the given layouts against the reference; returns the result in bhsd."""
    batch, heads, kv_heads, q_len, k_len, dim = shape
    rng = np.random.default_rng()
    cast = NP[dtype]
    q = rng.standard_normal((batch, heads, q_len, dim)).astype(cast)
    k = rng.standard_normal((batch, kv_heads, k_len, dim)).astype(cast)
    v = rng.standard_normal((batch, kv_heads, k_len, dim)).astype(cast)
    out = ctx.tensor(np.full(put(q, out_layout).shape, np.nan, dtype=cast))
    got = attention_path(path, *(ctx.tensor(put(x, layout)) for x in (q, k, v)), out=out,
                         layout=layout, out_layout=out_layout, **kwargs)
    assert got is out
    result = out.numpy()
    assert not np.isnan(result).any(), "unwritten (NaN) elements remain"
    lengths = kwargs.get("key_lengths")
    if isinstance(lengths, vkumd.Tensor):
        lengths = lengths.numpy()
    ref = reference(q, k, v, causal=kwargs.get("causal", False), key_lengths=lengths,
                    mask=np_mask, scale=kwargs.get("scale"))
    error = rel_error(result, put(ref, out_layout))
    assert error < TOL[dtype], f"{path} {dtype} {shape} {layout}->{out_layout}: {error:.3g}"
    return put(result, out_layout) if out_layout == "bhsd" else result.transpose(0, 2, 1, 3)


# (batch, q_heads, kv_heads, q_len, k_len, head_dim); head_dims the other tests compile too.
TILED = [
    (2, 3, 3, 7, 7, 32),      # odd seq and heads
    (2, 8, 2, 19, 23, 64),    # grouped-query heads, q_len < k_len
    (1, 4, 1, 37, 5, 64),     # multi-query, q_len > k_len: causal rows that see nothing
    (1, 2, 2, 129, 129, 32),  # one past a tile
]


@pytest.mark.parametrize(("layout", "out_layout"), COMBOS, ids=COMBO_IDS)
@pytest.mark.parametrize("shape", TILED, ids=["x".join(map(str, s)) for s in TILED])
def test_tiled_float32(ctx, shape, layout, out_layout) -> None:
    check(ctx, "tiled", "float32", shape, layout, out_layout, causal=True)


@pytest.mark.parametrize(("layout", "out_layout"), COMBOS, ids=COMBO_IDS)
def test_tiled_float16_mask_and_lengths(ctx, layout, out_layout) -> None:
    """The mask keeps its [b, h, i, j] meaning whatever the operands' layout."""
    rng = np.random.default_rng()
    mask = rng.standard_normal((2, 4, 1, 41)).astype(np.float32)
    mask[..., 3] = -np.inf
    result = check(ctx, "tiled", "float16", (2, 4, 2, 13, 41, 32), layout, out_layout,
                   causal=True, key_lengths=ctx.tensor(np.array([41, 0], np.int32)),
                   attn_mask=ctx.tensor(mask), np_mask=mask)
    assert not result[1].any()  # key_lengths 0: every row of batch entry 1 is zeros


@pytest.mark.parametrize(("layout", "out_layout"), COMBOS, ids=COMBO_IDS)
def test_tiled_full_mask_float32(ctx, layout, out_layout) -> None:
    rng = np.random.default_rng()
    mask = rng.standard_normal((3, 2, 11, 17)).astype(np.float32)
    check(ctx, "tiled", "float32", (3, 2, 2, 11, 17, 64), layout, out_layout, scale=0.4,
          key_lengths=[17, 9, 1], attn_mask=ctx.tensor(mask), np_mask=mask)


@pytest.mark.parametrize(("layout", "out_layout"), COMBOS, ids=COMBO_IDS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_decode(ctx, dtype, layout, out_layout) -> None:
    """The split kernel and the combine step, which writes the output through its strides."""
    check(ctx, "decode", dtype, (2, 6, 2, 1, 700, 64), layout, out_layout, splits=3,
          key_lengths=[700, 300])
    check(ctx, "decode", dtype, (3, 4, 4, 3, 260, 32), layout, out_layout, splits=2,
          causal=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_default_path_and_shapes(ctx, layout) -> None:
    """attention() itself: the output takes the layout's shape, out_layout defaults to it."""
    rng = np.random.default_rng()
    q = rng.standard_normal((2, 9, 3, 32)).astype(np.float32)  # bshd: seq 9, 3 heads
    k = rng.standard_normal((2, 12, 3, 32)).astype(np.float32)
    v = rng.standard_normal((2, 12, 3, 32)).astype(np.float32)
    if layout == "bhsd":
        q, k, v = (x.transpose(0, 2, 1, 3).copy() for x in (q, k, v))
    got = attention(ctx.tensor(q), ctx.tensor(k), ctx.tensor(v), layout=layout)
    assert got.shape == q.shape
    bhsd = [x if layout == "bhsd" else x.transpose(0, 2, 1, 3) for x in (q, k, v)]
    ref = put(reference(*bhsd), layout)
    assert rel_error(got.numpy(), ref) < 1e-5
    assert choose_path(ctx.tensor(q), ctx.tensor(k), layout=layout) == "tiled"


def test_strides_of_the_two_layouts() -> None:
    p = AttentionProblem(2, 6, 3, 5, 7, 8, "float32", "bshd", "bhsd")
    # q [2, 5, 6, 8], k/v [2, 7, 3, 8], out [2, 6, 5, 8]
    assert p.strides() == (240, 8, 48, 168, 8, 24, 240, 40, 8)


def test_the_push_block_fits_every_device_and_is_checked(ctx) -> None:
    assert ATTENTION_PUSH.size <= 128  # the least maxPushConstantsSize Vulkan allows
    p = AttentionProblem(1, 2, 2, 3, 3, 8, "float32", "bshd", "bshd")
    small = dataclasses.replace(ctx.caps, max_push_constants_size=ATTENTION_PUSH.size - 4)
    with pytest.raises(vkumd.CapabilityMissing, match="bytes of push constants"):
        attention_plan(small, p, scale=1.0, flags=0, mask_strides=(0, 0, 0, 0))
    assert attention_plan(ctx.caps, p, scale=1.0, flags=0, mask_strides=(0, 0, 0, 0))


def test_bad_layouts(ctx) -> None:
    q = ctx.tensor(np.zeros((1, 4, 2, 8), np.float32))
    k = ctx.tensor(np.zeros((1, 6, 2, 8), np.float32))
    for kwargs, what in (({"layout": "bsdh"}, "layout"), ({"layout": None}, "layout"),
                         ({"layout": "bshd", "out_layout": "BHSD"}, "out_layout")):
        with pytest.raises(vkumd.VkumdValueError, match=f"unknown {what}.*'bhsd', 'bshd'"):
            attention(q, k, k, **kwargs)
    with pytest.raises(vkumd.VkumdValueError, match="unknown layout"):
        choose_path(q, k, layout="sbhd")
    # bhsd reads these as batch 1 with 4 and 6 heads: 6 does not divide 4.
    with pytest.raises(vkumd.VkumdValueError, match="not a multiple"):
        attention(q, k, k)
    # out= must have the out layout's shape.
    wrong = ctx.tensor(np.zeros((1, 4, 2, 8), np.float32))
    with pytest.raises(vkumd.VkumdValueError):
        attention(q, k, k, layout="bshd", out_layout="bhsd", out=wrong)
    with pytest.raises(vkumd.VkumdValueError, match=r"\[batch, seq, heads, head_dim\]"):
        attention(ctx.tensor(np.zeros((4, 2, 8), np.float32)), k, k, layout="bshd")
    # The context still works.
    got = attention(q, k, k, layout="bshd", out_layout="bhsd")
    assert got.shape == (1, 2, 4, 8)
    assert not np.isnan(got.numpy()).any()


COOPMAT_CASES = [
    (2, 4, 2, 37, 45, 64),   # rows cross heads inside a 16-row block: Q and O staged in bshd
    (1, 2, 2, 64, 70, 64),   # q_len a multiple of every listed M: direct loads in both
    (2, 2, 1, 21, 33, 12),   # head_dim padded: always staged
]


@pytest.mark.coopmat
@pytest.mark.parametrize(("layout", "out_layout"), COMBOS, ids=COMBO_IDS)
@pytest.mark.parametrize("shape", COOPMAT_CASES, ids=["x".join(map(str, s)) for s in COOPMAT_CASES])
def test_coopmat(ctx, shape, layout, out_layout) -> None:
    require_coopmat(ctx)
    rng = np.random.default_rng()
    mask = rng.standard_normal((shape[0], 1, 1, shape[4])).astype(np.float32)
    check(ctx, "coopmat", "float16", shape, layout, out_layout, causal=True,
          key_lengths=[shape[4]] + [shape[4] // 2] * (shape[0] - 1),
          attn_mask=ctx.tensor(mask), np_mask=mask)
