"""Fused attention (``vkumd.ops.attention``) against a float64 numpy reference.

Every path a lane can run is checked: ``tiled`` and ``decode`` on the main lane, ``coopmat``
(float16 on cooperative matrices) on the cooperative-matrix lane, where the tests marked
``coopmat`` run. Outputs are poisoned with NaN first, so an unwritten element fails.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import require_coopmat

import vkumd
from vkumd.compiler.kernels.attention import (
    ATTENTION_COOPMAT,
    COOPMAT_BLOCK_VARIABLE,
    CoopmatBlockRequest,
    coopmat_blocks,
    coopmat_shapes,
    coopmat_shared_bytes,
    default_coopmat_block,
    parse_coopmat_block,
)
from vkumd.framework.opset.attention import attention_path, choose_path
from vkumd.testing.numerics import rel_error
from vkumd.vk.caps import CoopMatShape

TOL = {"float32": 1e-5, "float16": 1e-3}
NP = {"float32": np.float32, "float16": np.float16}


def reference(q, k, v, *, causal=False, key_lengths=None, mask=None, scale=None):
    """softmax(Q K^T * scale + mask) V in float64; fully masked rows give zeros."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, heads, q_len, dim = q.shape
    k_len = k.shape[2]
    group = heads // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if mask is not None:
        s = s + np.asarray(mask, dtype=np.float64)
    j = np.arange(k_len)
    if causal:
        s = np.where(j[None, :] <= np.arange(q_len)[:, None] + k_len - q_len, s, -np.inf)
    if key_lengths is not None:
        lengths = np.asarray(key_lengths)[:, None, None, None]
        s = np.where(j[None, None, None, :] < lengths, s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return p @ v


def make(rng, shape_q, shape_kv, dtype):
    cast = NP[dtype]
    return (rng.standard_normal(shape_q).astype(cast), rng.standard_normal(shape_kv).astype(cast),
            rng.standard_normal(shape_kv).astype(cast))


def run(ctx, path, q, k, v, **kwargs):
    """Run ``path`` with a NaN-poisoned out= and return the result as numpy."""
    out = ctx.tensor(np.full(q.shape, np.nan, dtype=q.dtype))
    got = attention_path(path, ctx.tensor(q), ctx.tensor(k), ctx.tensor(v), out=out, **kwargs)
    assert got is out
    result = out.numpy()
    assert not np.isnan(result).any(), "unwritten (NaN) elements remain"
    return result


def check(ctx, path, dtype, shape, causal=False, **kwargs):
    batch, heads, kv_heads, q_len, k_len, dim = shape
    rng = np.random.default_rng()
    q, k, v = make(rng, (batch, heads, q_len, dim), (batch, kv_heads, k_len, dim), dtype)
    np_mask = kwargs.pop("np_mask", None)
    result = run(ctx, path, q, k, v, causal=causal, **kwargs)
    ref_kwargs = {name: kwargs[name] for name in ("key_lengths", "scale") if name in kwargs}
    if isinstance(ref_kwargs.get("key_lengths"), vkumd.Tensor):
        ref_kwargs["key_lengths"] = ref_kwargs["key_lengths"].numpy()
    ref_kwargs["mask"] = np_mask
    ref = reference(q, k, v, causal=causal, **ref_kwargs)
    error = rel_error(result, ref)
    assert error < TOL[dtype], f"{path} {dtype} {shape} causal={causal}: rel error {error:.3g}"
    return result


# (batch, q_heads, kv_heads, q_len, k_len, head_dim)
SHAPES = [
    (1, 2, 2, 1, 1, 64),        # one token
    (2, 3, 3, 7, 7, 32),        # seq 7, odd heads
    (1, 2, 2, 129, 129, 80),    # one past a tile
    (1, 1, 1, 1031, 1031, 64),  # long (> 1000, prime)
    (1, 2, 2, 5, 37, 96),       # q_len < k_len: bottom-right causal
    (1, 2, 2, 37, 5, 64),       # q_len > k_len: the first 32 queries see nothing when causal
    (2, 8, 2, 19, 23, 128),     # grouped-query heads
    (1, 4, 1, 9, 50, 64),       # multi-query
]
IDS = ["x".join(map(str, s)) for s in SHAPES]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_tiled_float32(ctx, shape, causal) -> None:
    check(ctx, "tiled", "float32", shape, causal)


# float16 at head_dim 32 and 64 only: each head_dim is a pipeline that lavapipe takes seconds
# to compile cold; the decode tests cover float16 at 80, 96 and 128.
F16_SHAPES = [SHAPES[1], SHAPES[5], SHAPES[7], (2, 4, 2, 70, 131, 32)]


@pytest.mark.parametrize("shape", F16_SHAPES, ids=["x".join(map(str, s)) for s in F16_SHAPES])
def test_tiled_float16(ctx, shape) -> None:
    check(ctx, "tiled", "float16", shape, causal=True)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_default_path_and_scale(ctx, dtype) -> None:
    check(ctx, "auto", dtype, (2, 4, 2, 33, 40, 64), causal=True, scale=0.3)


@pytest.mark.parametrize("as_tensor", [False, True], ids=["list", "tensor"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_lengths(ctx, as_tensor, causal) -> None:
    lengths = [40, 0, 17, 1]  # 0: every key of batch entry 1 is masked -> zeros
    arg = ctx.tensor(np.array(lengths, dtype=np.int32)) if as_tensor else lengths
    result = check(ctx, "tiled", "float32", (4, 2, 2, 9, 40, 32), causal, key_lengths=arg)
    assert not result[1].any()


@pytest.mark.parametrize("mask_shape", [(13, 21), (2, 1, 13, 21), (1, 3, 1, 21), (21,)],
                         ids=["2d", "per-batch", "per-head", "keys"])
def test_additive_mask(ctx, mask_shape) -> None:
    rng = np.random.default_rng()
    mask = rng.standard_normal(mask_shape).astype(np.float32)
    mask[..., 3] = -np.inf
    check(ctx, "tiled", "float32", (2, 3, 3, 13, 21, 64), attn_mask=ctx.tensor(mask),
          np_mask=mask)


def test_float16_mask_with_causal_and_lengths(ctx) -> None:
    rng = np.random.default_rng()
    mask = rng.standard_normal((1, 1, 6, 30)).astype(np.float16)
    check(ctx, "tiled", "float16", (2, 2, 1, 6, 30, 64), causal=True, key_lengths=[30, 11],
          attn_mask=ctx.tensor(mask), np_mask=mask.astype(np.float64))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tiled_rows_cross_heads_small_head_dim(ctx, causal) -> None:
    # Group 3 x q_len 11: a workgroup's rows (lanes x rows per lane) span query heads, which the
    # causal key range must allow for; head_dim 12 has fewer vec4 chunks than lanes.
    check(ctx, "tiled", "float32", (2, 3, 1, 11, 45, 12), causal)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_tiled_odd_chunk_count(ctx, dtype) -> None:
    # K and V are read as 64-bit words: head_dim 20 is five chunks per row (float16 rows of
    # 40 bytes, not a multiple of 16), with keys cut short and a causal edge in one launch.
    result = check(ctx, "tiled", dtype, (2, 3, 1, 11, 45, 20), causal=True, key_lengths=[45, 0])
    assert not result[1].any()


def check_keys_past_lengths(ctx, path: str, dtype: str, tolerance: float) -> None:
    """A padded key/value cache: what lies past each length (here NaN) must not leak in."""
    rng = np.random.default_rng()
    q, k, v = make(rng, (2, 2, 7, 64), (2, 2, 30, 64), dtype)
    lengths = [30, 13]
    k_bad, v_bad = k.copy(), v.copy()
    k_bad[1, :, 13:] = np.nan
    v_bad[1, :, 13:] = np.nan
    result = run(ctx, path, q, k_bad, v_bad, key_lengths=lengths)
    assert rel_error(result, reference(q, k, v, key_lengths=lengths)) < tolerance


def test_keys_past_key_lengths_are_never_read(ctx) -> None:
    check_keys_past_lengths(ctx, "tiled", "float32", 1e-5)


def test_fully_masked_rows_are_zero_not_nan(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = make(rng, (1, 2, 6, 32), (1, 2, 6, 32), "float32")
    mask = np.zeros((6, 6), dtype=np.float32)
    mask[2, :] = -np.inf  # row 2 sees nothing
    result = run(ctx, "tiled", q, k, v, attn_mask=ctx.tensor(mask))
    assert not result[:, :, 2].any()
    assert rel_error(result, reference(q, k, v, mask=mask)) < 1e-5
    # causal with more queries than keys: the first q_len - k_len rows are masked
    q2, k2, v2 = make(rng, (1, 1, 10, 32), (1, 1, 4, 32), "float32")
    result = run(ctx, "auto", q2, k2, v2, causal=True)
    assert not result[0, 0, :6].any() and result[0, 0, 6:].any()


def test_no_keys_gives_zeros(ctx) -> None:
    q = np.ones((1, 1, 3, 32), np.float32)
    kv = np.ones((1, 1, 0, 32), np.float32)
    assert not run(ctx, "auto", q, kv, kv).any()


# --- flash-decoding ------------------------------------------------------------------------

DECODE = [  # (batch, q_heads, kv_heads, q_len, k_len, head_dim), splits
    ((1, 2, 2, 1, 1000, 64), 4),
    ((2, 8, 2, 1, 300, 128), 3),   # grouped heads share the split's K/V reads
    ((1, 2, 2, 3, 77, 80), 7),     # splits shorter than a tile; some splits empty
    ((3, 2, 1, 2, 257, 96), 2),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(("shape", "splits"), DECODE,
                         ids=["x".join(map(str, s)) for s, _ in DECODE])
def test_decode_path(ctx, shape, splits, dtype) -> None:
    lengths = [shape[4] - 5 * b for b in range(shape[0])]
    check(ctx, "decode", dtype, shape, causal=True, splits=splits, key_lengths=lengths)


def test_decode_path_is_chosen_for_one_token_and_long_keys(ctx) -> None:
    q = ctx.empty((1, 4, 1, 64))
    k = ctx.empty((1, 4, 4096, 64))
    assert choose_path(q, k) == "decode"
    assert choose_path(q, ctx.empty((1, 4, 100, 64))) == "tiled"  # too short to split
    assert choose_path(ctx.empty((1, 4, 64, 64)), k) == "tiled"  # a prefill
    check(ctx, "auto", "float32", (1, 4, 2, 1, 2100, 64), key_lengths=[1500])


def test_decode_fully_masked(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = make(rng, (2, 2, 2, 64), (2, 2, 600, 64), "float32")
    result = run(ctx, "decode", q, k, v, key_lengths=[0, 600], splits=3)
    assert not result[0].any()
    assert rel_error(result, reference(q, k, v, key_lengths=[0, 600])) < 1e-5


# --- memory ----------------------------------------------------------------------------------


def _peak_during(ctx, fn) -> tuple[int, int]:
    """(largest single allocation, peak used_bytes above the start) while ``fn`` runs."""
    pool = ctx.memory
    start = pool.used_bytes()
    largest, peak = 0, 0
    original = pool.allocate

    def tracking(size, *args, **kwargs):
        nonlocal largest, peak
        allocation = original(size, *args, **kwargs)
        largest = max(largest, size)
        peak = max(peak, pool.used_bytes() - start)
        return allocation

    pool.allocate = tracking
    try:
        fn()
    finally:
        del pool.allocate
    return largest, peak


@pytest.mark.parametrize("path", ["tiled", "decode"])
def test_memory_is_linear_in_sequence(ctx, path) -> None:
    """Up to seq 4096 nothing of size seq x seq is allocated; the peak grows linearly."""
    peaks = {}
    for seq in (1024, 2048, 4096):
        q_len = seq if path == "tiled" else 2
        q = ctx.empty((1, 1, q_len, 64))
        k, v = ctx.zeros((1, 1, seq, 64)), ctx.zeros((1, 1, seq, 64))
        ctx.synchronize()
        outs: list[vkumd.Tensor] = []
        largest, peak = _peak_during(ctx, lambda q=q, k=k, v=v, outs=outs: outs.append(
            attention_path(path, q, k, v, causal=True)))
        outs[0].numpy()
        # tiled: the output (seq x 64 floats) is all it allocates, 16 to 64 times less than
        # seq x seq floats. decode: the output and a scratch of a few KiB (splits x rows).
        assert largest <= max(q.nbytes, 64 * 1024) < seq * seq * 4 // 8, \
            f"seq {seq}: a {largest}-byte allocation"
        assert peak <= q.nbytes + 64 * 1024, f"seq {seq}: peak {peak} bytes"
        peaks[seq] = peak
        for t in (q, k, v, outs[0]):
            t.release()
    if path == "tiled":  # the output is the whole cost: exactly linear
        assert peaks[4096] == 2 * peaks[2048] == 4 * peaks[1024]
    else:  # the scratch grows with the number of splits, at most linearly
        assert peaks[4096] <= 4 * peaks[1024]


# --- bad input ------------------------------------------------------------------------------


def _inputs(ctx, q_shape=(1, 4, 8, 32), kv_shape=(1, 2, 8, 32), dtype="float32"):
    return (ctx.zeros(q_shape, dtype), ctx.zeros(kv_shape, dtype), ctx.zeros(kv_shape, dtype))


BAD = [
    ("not a tensor", lambda c: (np.zeros((1, 1, 2, 32), np.float32),) + _inputs(c)[1:], {},
     vkumd.VkumdTypeError, "vkumd Tensor"),
    ("3-D", lambda c: _inputs(c, (4, 8, 32)), {}, vkumd.VkumdValueError, "4-D"),
    ("head_dim mismatch", lambda c: _inputs(c, (1, 4, 8, 64)), {}, vkumd.VkumdValueError,
     "head_dim"),
    ("dtype mismatch", lambda c: (c.zeros((1, 4, 8, 32), "float16"),) + _inputs(c)[1:], {},
     vkumd.VkumdTypeError, "share a dtype"),
    ("int32", lambda c: _inputs(c, dtype="int32"), {}, vkumd.VkumdTypeError, "float32 or"),
    ("heads not divisible", lambda c: _inputs(c, (1, 3, 8, 32)), {}, vkumd.VkumdValueError,
     "multiple of"),
    ("batch mismatch", lambda c: _inputs(c, (2, 4, 8, 32)), {}, vkumd.VkumdValueError,
     "batch"),
    ("k/v shapes", lambda c: _inputs(c)[:2] + (c.zeros((1, 2, 9, 32)),), {},
     vkumd.VkumdValueError, "same shape"),
    ("head_dim 30", lambda c: _inputs(c, (1, 4, 8, 30), (1, 2, 8, 30)), {},
     vkumd.VkumdValueError, "head_dim 30 is not supported"),
    ("head_dim 512", lambda c: _inputs(c, (1, 1, 2, 512), (1, 1, 2, 512)), {},
     vkumd.VkumdValueError, "not supported"),
    ("key_lengths length", _inputs, {"key_lengths": [8, 8]}, vkumd.VkumdValueError,
     "2 entries"),
    ("key_lengths value", _inputs, {"key_lengths": [9]}, vkumd.VkumdValueError, "outside"),
    ("key_lengths float", _inputs, {"key_lengths": [2.5]}, vkumd.VkumdTypeError, "not an int"),
    ("key_lengths type", _inputs, {"key_lengths": 8}, vkumd.VkumdTypeError, "list of ints"),
    ("key_lengths tensor dtype", _inputs, {"key_lengths": "float-tensor"}, vkumd.VkumdTypeError,
     "int32"),
    ("key_lengths tensor shape", _inputs, {"key_lengths": "long-tensor"},
     vkumd.VkumdValueError, "expected"),
    ("mask shape", _inputs, {"attn_mask": (8, 9)}, vkumd.VkumdValueError, "does not broadcast"),
    ("mask 5-D", _inputs, {"attn_mask": (1, 1, 1, 8, 8)}, vkumd.VkumdValueError, "broadcast"),
    ("mask dtype", _inputs, {"attn_mask": "int-mask"}, vkumd.VkumdTypeError, "additive"),
    ("mask numpy", _inputs, {"attn_mask": np.zeros((8, 8), np.float32)}, vkumd.VkumdTypeError,
     "vkumd Tensor"),
    ("scale", _inputs, {"scale": "big"}, vkumd.VkumdTypeError, "scale"),
    ("scale inf", _inputs, {"scale": float("inf")}, vkumd.VkumdValueError, "finite"),
    ("causal", _inputs, {"causal": "yes"}, vkumd.VkumdTypeError, "bool"),
    ("out shape", _inputs, {"out": (1, 4, 8, 16)}, vkumd.VkumdValueError, "out="),
    ("out dtype", _inputs, {"out": "f16-out"}, vkumd.VkumdTypeError, "out="),
]


def _materialise(ctx, kwargs):
    special = {
        "float-tensor": lambda: ctx.zeros((1,), "float32"),
        "long-tensor": lambda: ctx.zeros((2,), "int32"),
        "int-mask": lambda: ctx.zeros((8, 8), "int32"),
        "f16-out": lambda: ctx.zeros((1, 4, 8, 32), "float16"),
    }
    result = {}
    for name, value in kwargs.items():
        if isinstance(value, str) and value in special:
            value = special[value]()
        elif name in ("attn_mask", "out") and isinstance(value, tuple):
            value = ctx.zeros(value, "float32")
        result[name] = value
    return result


@pytest.mark.parametrize(("make_inputs", "kwargs", "error", "match"),
                         [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(ctx, make_inputs, kwargs, error, match) -> None:
    q, k, v = make_inputs(ctx)
    with pytest.raises(error, match=match):
        vkumd.ops.attention(q, k, v, **_materialise(ctx, kwargs))
    check(ctx, "auto", "float32", (1, 1, 1, 3, 3, 32))  # the context still works


def test_unknown_path_and_bad_splits(ctx) -> None:
    q, k, v = _inputs(ctx)
    with pytest.raises(vkumd.VkumdValueError, match="unknown path"):
        attention_path("fast", q, k, v)
    with pytest.raises(vkumd.VkumdValueError, match="splits"):
        attention_path("decode", q, k, v, splits=0)


def test_other_context_refused(ctx) -> None:
    with vkumd.Context() as other:
        q = other.zeros((1, 1, 2, 32))
        _, k, v = _inputs(ctx, kv_shape=(1, 1, 2, 32))
        with pytest.raises(vkumd.VkumdValueError, match="different contexts"):
            vkumd.ops.attention(q, k, v)


def test_coopmat_path_without_coopmat_raises(ctx, monkeypatch) -> None:
    if ctx.caps.cooperative_matrix:
        monkeypatch.setattr(ctx, "caps", dataclasses.replace(
            ctx.caps, cooperative_matrix=False, cooperative_matrix_shapes=()))
    q, k, v = _inputs(ctx, dtype="float16")
    with pytest.raises(vkumd.CapabilityMissing, match="cooperative"):
        attention_path("coopmat", q, k, v)
    assert choose_path(q, k) == "tiled"


def _fake_gpu_caps(ctx, monkeypatch, shapes=((16, 8, 16),)):
    """Make ``ctx`` look like a GPU listing these float16 x float16 + float32 shapes (host-side
    planning only: nothing may be dispatched on it)."""
    listed = tuple(CoopMatShape(m, n, k, "float16", "float16", "float32", "float32", "subgroup")
                   for m, n, k in shapes)
    listed += (CoopMatShape(8, 8, 32, "int8", "int8", "int32", "int32", "subgroup"),)
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(
        ctx.caps, cooperative_matrix=True, cooperative_matrix_shapes=listed,
        vulkan_memory_model=True, shader_float16=True, device_type="discrete"))
    monkeypatch.delenv("VKUMD_DISABLE_COOPMAT", raising=False)
    monkeypatch.delenv(COOPMAT_BLOCK_VARIABLE, raising=False)


def test_coopmat_is_chosen_from_listed_shapes(ctx, monkeypatch) -> None:
    _fake_gpu_caps(ctx, monkeypatch)
    q, k, v = _inputs(ctx, dtype="float16")
    assert choose_path(q, k) == "coopmat"
    assert choose_path(*_inputs(ctx)[:2]) == "tiled"  # float32 never takes it
    variants = ATTENTION_COOPMAT.variants(ctx.caps)
    assert {(v["TM"], v["TN"], v["TK"]) for v in variants} == {(16, 8, 16)}
    for variant in variants:  # every default block: whole multiples of the shape, fits
        assert variant["BC"] % 16 == 0 and variant["HDP"] % 16 == 0
        assert variant["WORKGROUP_SIZE"] == variant["NSG"] * ctx.caps.subgroup_size
    monkeypatch.setenv("VKUMD_DISABLE_COOPMAT", "1")
    assert choose_path(q, k) == "tiled"


def test_coopmat_is_not_chosen_on_cpu_drivers(ctx, monkeypatch) -> None:
    # lavapipe emulates cooperative matrices lane by lane: its tiled kernel is faster.
    _fake_gpu_caps(ctx, monkeypatch)
    q, k, _ = _inputs(ctx, dtype="float16")
    monkeypatch.setattr(ctx, "caps", dataclasses.replace(ctx.caps, device_type="cpu"))
    assert choose_path(q, k) == "tiled"


def test_coopmat_default_blocks_fit(ctx, monkeypatch) -> None:
    """The host's pick fits the shared memory and prefers 4 subgroups; few rows use fewer."""
    _fake_gpu_caps(ctx, monkeypatch, shapes=((16, 8, 8), (16, 16, 16)))
    caps = dataclasses.replace(ctx.caps, subgroup_size=32, min_subgroup_size=32,
                               max_subgroup_size=32, shared_memory_size=48 * 1024,
                               max_workgroup_invocations=1024)
    shape = coopmat_shapes(caps)[0]
    assert (shape.m, shape.n, shape.k) == (16, 16, 16)  # preferred over the driver's order
    for head_dim in (4, 64, 68, 128, 256):
        block = default_coopmat_block(caps, shape, head_dim)
        assert block is not None and block.subgroups == 4, (head_dim, block)
        assert coopmat_shared_bytes(block, 32, head_dim) <= 48 * 1024
        assert block in coopmat_blocks(caps, shape, head_dim)
    assert default_coopmat_block(caps, shape, 64, rows=7).subgroups == 1
    assert default_coopmat_block(caps, shape, 64, rows=17).subgroups == 2
    tiny = dataclasses.replace(caps, shared_memory_size=4096)
    assert default_coopmat_block(tiny, shape, 256) is None


BAD_BLOCKS = [
    ("4by64", "is not a block config"),
    ("3x64", "subgroups per workgroup must be one of"),
    ("4x64x3", "row blocks per subgroup must be one of"),
    ("4x0", "keys per tile"),
    ("4x24", "multiple of 16"),
    ("1x256x4", "shared memory"),
    ("4x64:32x32x32", "lists no usable"),
]


@pytest.mark.parametrize(("value", "match"), BAD_BLOCKS, ids=[b[0] for b in BAD_BLOCKS])
def test_coopmat_block_variable_refuses_bad_values(ctx, monkeypatch, value, match) -> None:
    _fake_gpu_caps(ctx, monkeypatch)
    q, k, _ = _inputs(ctx, (1, 2, 8, 128), (1, 2, 8, 128), dtype="float16")
    monkeypatch.setenv(COOPMAT_BLOCK_VARIABLE, value)
    with pytest.raises(vkumd.VkumdValueError, match=match):
        choose_path(q, k)
    monkeypatch.setenv(COOPMAT_BLOCK_VARIABLE, "2x16x2:16x8x16")
    assert choose_path(q, k) == "coopmat"
    monkeypatch.undo()
    check(ctx, "auto", "float32", (1, 1, 1, 3, 3, 32))  # the context still works


def test_parse_coopmat_block() -> None:
    assert parse_coopmat_block(" 4x64 ") == CoopmatBlockRequest(4, 64)
    assert parse_coopmat_block("2x32x2:16x8x16") == CoopmatBlockRequest(2, 32, 2, (16, 8, 16))


# --- cooperative-matrix lane -------------------------------------------------------------------

# (batch, q_heads, kv_heads, q_len, k_len, head_dim), causal: the host's default block each.
# lavapipe takes 5-30 s to compile each variant cold, so the cases share head_dims (and so
# pipelines): head_dim 64 at 1 subgroup (<= 8 rows) and at 4 (> 16 rows).
COOPMAT_CASES = [
    ((1, 2, 2, 1, 1, 64), False),       # seq 1
    ((2, 3, 3, 7, 7, 64), True),        # seq 7
    ((1, 2, 2, 129, 129, 64), True),    # one past a 4-subgroup workgroup's rows
    ((1, 1, 1, 1031, 1031, 64), True),  # long, prime: no block divides it
    ((1, 2, 2, 20, 61, 64), True),      # q_len < k_len: bottom-right causal
    ((1, 2, 2, 37, 5, 64), True),       # q_len > k_len: the first 32 queries see nothing
    ((2, 8, 2, 19, 23, 128), False),    # grouped-query heads
    ((1, 4, 1, 9, 50, 4), True),        # head_dim 4 (padded to the matrix K), multi-query
    ((1, 2, 1, 21, 45, 68), False),     # head_dim 68: 8-byte loads, padded
    ((1, 1, 1, 17, 33, 256), True),     # head_dim 256: the largest, smallest key tile
]


@pytest.mark.coopmat
@pytest.mark.parametrize(("shape", "causal"), COOPMAT_CASES,
                         ids=["x".join(map(str, s)) for s, _ in COOPMAT_CASES])
def test_coopmat(ctx, shape, causal) -> None:
    require_coopmat(ctx)
    q = ctx.empty((shape[0], shape[1], shape[3], shape[5]), "float16")
    k = ctx.empty((shape[0], shape[2], shape[4], shape[5]), "float16")
    if ctx.caps.device_type == "cpu" and shape[3] > 8:  # CPU drivers prefer the tiled kernel
        assert choose_path(q, k) == "tiled"
    check(ctx, "coopmat", "float16", shape, causal)


# Every block the host can pick on the lane (1, 2 or 4 subgroups; the default key tiles and
# the smallest legal one), and knob-only ones: row blocks, 8 subgroups.
LANE_BLOCKS = [f"{s}x{k}" for s in (1, 2, 4) for k in (8, 16, 32, 64)] + [
    "2x16x2", "4x16x2", "1x8x4", "8x8"]


@pytest.mark.coopmat
@pytest.mark.parametrize("block", LANE_BLOCKS)
def test_coopmat_blocks(ctx, monkeypatch, block) -> None:
    """Each block config forced through the knob: causal, GQA, key_lengths and an additive
    mask on a shape no block divides (head_dim 12: two matrix columns, 8-byte loads)."""
    require_coopmat(ctx)
    monkeypatch.setenv(COOPMAT_BLOCK_VARIABLE, block)
    rng = np.random.default_rng()
    mask = rng.standard_normal((2, 1, 1, 45)).astype(np.float32)
    mask[..., 5] = -np.inf
    check(ctx, "coopmat", "float16", (2, 2, 1, 37, 45, 12), causal=True,
          key_lengths=[45, 29], attn_mask=ctx.tensor(mask), np_mask=mask)


@pytest.mark.coopmat
def test_coopmat_lane_blocks_cover_the_host_picks(ctx) -> None:
    require_coopmat(ctx)
    shape = coopmat_shapes(ctx.caps)[0]
    picks = {str(default_coopmat_block(ctx.caps, shape, hd, rows)).split(":")[0]
             for hd in range(4, 257, 4) for rows in (1, 9, 17, 100)}
    assert picks <= {f"{b}x1" if b.count("x") == 1 else b for b in LANE_BLOCKS}, picks


@pytest.mark.coopmat
def test_coopmat_masks_and_lengths(ctx) -> None:
    require_coopmat(ctx)
    rng = np.random.default_rng()
    mask = rng.standard_normal((1, 3, 1, 45)).astype(np.float32)
    mask[..., 7] = -np.inf
    result = check(ctx, "coopmat", "float16", (3, 3, 3, 20, 45, 64), causal=True,
                   key_lengths=ctx.tensor(np.array([45, 0, 20], np.int32)),
                   attn_mask=ctx.tensor(mask), np_mask=mask)
    assert not result[1].any()


@pytest.mark.coopmat
def test_coopmat_keys_past_key_lengths_are_never_read(ctx) -> None:
    require_coopmat(ctx)
    check_keys_past_lengths(ctx, "coopmat", "float16", 1e-3)


@pytest.mark.coopmat
def test_coopmat_fully_masked_rows(ctx) -> None:
    require_coopmat(ctx)
    rng = np.random.default_rng()
    q, k, v = make(rng, (1, 1, 20, 64), (1, 1, 4, 64), "float16")
    result = run(ctx, "coopmat", q, k, v, causal=True)
    assert not result[0, 0, :16].any()
    assert rel_error(result, reference(q, k, v, causal=True)) < 1e-3
    mask = np.zeros((20, 4), dtype=np.float32)
    mask[3, :] = -np.inf  # a row masked by the additive mask alone
    result = run(ctx, "coopmat", q, k, v, attn_mask=ctx.tensor(mask), scale=0.7)
    assert not result[0, 0, 3].any()
    assert rel_error(result, reference(q, k, v, mask=mask, scale=0.7)) < 1e-3


@pytest.mark.coopmat
def test_decode_on_the_coopmat_lane(ctx) -> None:
    require_coopmat(ctx)
    check(ctx, "auto", "float16", (2, 4, 2, 1, 1500, 64), key_lengths=[1500, 700])
