"""``qmatmul`` and ``qembedding``: quantized weights (Q8_0, Q4_0, Q4_1 blocks) against
dequantise-then-float64, on random blocks with random scales, both kernel paths, odd and
partial-block shapes, NaN-poisoned outputs, the epilogue, a compiled graph, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises

from vkumd import ops
from vkumd.compiler.kernels.limits import QTYPES
from vkumd.compiler.kernels.qmatmul_plan import choose_path
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.opset.quantized import dequantize

DTYPES = ("float32", "float16")


def random_blocks(rng: np.random.Generator, n: int, k: int, qtype: str) -> np.ndarray:
    """Random raw blocks for ``n`` rows of ``k`` values: random payload bytes (so a partial
    last block holds garbage past ``k``), random finite float16 scales (and minimums)."""
    size = QTYPES[qtype][1]
    blocks = -(-k // 32)
    raw = rng.integers(0, 256, (n, blocks, size), dtype=np.uint8)
    d = (rng.standard_normal((n, blocks, 1)) * rng.uniform(0.01, 0.2)).astype(np.float16)
    raw[..., 0:2] = d.view(np.uint8)
    if qtype == "Q4_1":
        raw[..., 2:4] = (rng.standard_normal((n, blocks, 1)) * 0.1).astype(np.float16
                                                                          ).view(np.uint8)
    return raw.reshape(n, blocks * size)


def stored_x(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """x as the dtype stores it (float16-rounded for float16), for the float64 reference."""
    return rng.standard_normal(shape).astype(dtype)


def reference(x: np.ndarray, w: np.ndarray, qtype: str, k: int, bias=None, residual=None
              ) -> np.ndarray:
    y = x.astype(np.float64) @ dequantize(w, qtype, k).astype(np.float64).T
    if bias is not None:
        y = y + bias.astype(np.float64)
    if residual is not None:
        y = y + residual.astype(np.float64)
    return y


def poisoned(ctx, shape: tuple[int, ...], dtype: str):
    return ctx.tensor(np.full(shape, np.nan, np.float32), dtype=dtype)


def _half(value: float) -> np.ndarray:
    return np.array([value], np.float16).view(np.uint8)


def test_dequantize_decodes_each_format_by_hand() -> None:
    k = 40  # a partial second block
    q8 = np.zeros((1, 68), np.uint8)
    q8[0, 0:2] = _half(0.5)
    q8[0, 2:34] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    q8[0, 34:36] = _half(-2.0)
    q8[0, 36:44] = np.arange(1, 9, dtype=np.uint8)
    want = np.concatenate([0.5 * np.arange(-16, 16), -2.0 * np.arange(1, 9)])
    np.testing.assert_array_equal(dequantize(q8, "Q8_0", k)[0], want)
    q4 = np.zeros((1, 18), np.uint8)
    q4[0, 0:2] = _half(1.0)
    q4[0, 2:18] = np.arange(16, dtype=np.uint8) | (15 - np.arange(16, dtype=np.uint8)) << 4
    want = np.concatenate([np.arange(16) - 8.0, 15 - np.arange(16) - 8.0])
    np.testing.assert_array_equal(dequantize(q4, "Q4_0", 32)[0], want)
    q41 = np.zeros((1, 20), np.uint8)
    q41[0, 0:2] = _half(2.0)
    q41[0, 2:4] = _half(-1.0)
    q41[0, 4:20] = q4[0, 2:18]
    want = np.concatenate([2.0 * np.arange(16) - 1, 2.0 * (15 - np.arange(16)) - 1])
    np.testing.assert_array_equal(dequantize(q41, "Q4_1", 32)[0], want)


@pytest.mark.parametrize("path", ["vec", "gemm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qtype", list(QTYPES))
def test_matches_float64(ctx, qtype: str, dtype: str, path: str) -> None:
    rng = np.random.default_rng()
    m = 3 if path == "vec" else 19
    for n, k in ((13, 96), (9, 70)):  # K = 32 * 3; K past a partial block (garbage there)
        w = random_blocks(rng, n, k, qtype)
        x = stored_x(rng, (m, k), dtype)
        out = poisoned(ctx, (m, n), dtype)
        got = ops.qmatmul(ctx.tensor(x), ctx.tensor(w), qtype=qtype, in_features=k, out=out,
                          path=path)
        assert got is out
        assert_close(got.numpy().astype(np.float64), reference(x, w, qtype, k), dtype,
                     f"{qtype} {dtype} {path} {m}x{n}x{k}")


@pytest.mark.parametrize("m", [1, 2, 5, 8, 16])
def test_every_decode_row_count(ctx, m: int) -> None:
    # 1 and 2-row tiles; 5, 8 and 16 rows loop over tiles of 2 (the weights stay cached).
    rng = np.random.default_rng()
    n, k = 37, 32 * 5
    w = random_blocks(rng, n, k, "Q4_1")
    x = stored_x(rng, (m, k), "float32")
    got = ops.qmatmul(ctx.tensor(x), ctx.tensor(w), qtype="Q4_1", in_features=k,
                      out=poisoned(ctx, (m, n), "float32"), path="vec")
    assert_close(got.numpy().astype(np.float64), reference(x, w, "Q4_1", k), "float32",
                 f"M={m}")
    assert choose_path(ctx.caps, m) == "vec" or m > 1


@pytest.mark.parametrize("qtype", list(QTYPES))
def test_long_rows_read_x_from_memory(ctx, qtype: str) -> None:
    # 73 blocks: more per lane than the kernel keeps in registers, plus a partial block.
    rng = np.random.default_rng()
    n, k = 11, 32 * 73 + 12
    w = random_blocks(rng, n, k, qtype)
    x = stored_x(rng, (2, k), "float32")
    got = ops.qmatmul(ctx.tensor(x), ctx.tensor(w), qtype=qtype, in_features=k,
                      out=poisoned(ctx, (2, n), "float32"), path="vec")
    assert_close(got.numpy().astype(np.float64), reference(x, w, qtype, k), "float32", qtype)


@pytest.mark.parametrize("path", ["vec", "gemm"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_residual_and_batch_dims(ctx, dtype: str, path: str) -> None:
    rng = np.random.default_rng()
    n, k = 21, 96
    batch = (2, 3) if path == "vec" else (3, 7)
    w = random_blocks(rng, n, k, "Q4_1")
    x = stored_x(rng, (*batch, k), dtype)
    bias = stored_x(rng, (n,), dtype)
    residual = stored_x(rng, (*batch, n), dtype)
    got = ops.qmatmul(ctx.tensor(x), ctx.tensor(w), qtype="Q4_1", in_features=k,
                      bias=ctx.tensor(bias), residual=ctx.tensor(residual),
                      out=poisoned(ctx, (*batch, n), dtype), path=path)
    want = reference(x, w, "Q4_1", k, bias, residual)
    assert_close(got.numpy().astype(np.float64), want, dtype, f"{dtype} {path}")


@pytest.mark.parametrize("qtype", list(QTYPES))
def test_qembedding_rows_and_out_of_range_ids(ctx, qtype: str) -> None:
    rng = np.random.default_rng()
    vocab, dim = 23, 70
    table = random_blocks(rng, vocab, dim, qtype)
    ids = np.array([[0, 22, 5], [-1, 23, 7]], np.int32)  # two outside the table
    out = poisoned(ctx, (2, 3, dim), "float32")
    got = ops.qembedding(ctx.tensor(ids), ctx.tensor(table), qtype=qtype, dim=dim, out=out)
    rows = dequantize(table, qtype, dim)
    want = np.where(((ids >= 0) & (ids < vocab))[..., None], rows[np.clip(ids, 0, vocab - 1)],
                    0.0)
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))


def test_inside_a_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    vocab, d, n = 31, 64, 45
    table = random_blocks(rng, vocab, d, "Q8_0")
    w = random_blocks(rng, n, d, "Q4_1")
    b = GraphBuilder("quantized")
    ids = b.input("ids", ("s",), "int32")
    h = b.op("qembedding", ids, b.weight("table", table), qtype="Q8_0", dim=d)
    b.output(b.op("qmatmul", h, b.weight("w", w), qtype="Q4_1", in_features=d))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    try:
        for s in (3, 20):  # decode and prefill paths
            feed = rng.integers(0, vocab, s).astype(np.int32)
            (got,) = compiled(ids=feed)
            want = evaluate(graph, {"ids": feed})[0]
            assert_close(got.numpy().astype(np.float64), want, "float32", f"s={s}")
    finally:
        compiled.release()


def test_bad_inputs_are_refused_clearly(ctx) -> None:
    rng = np.random.default_rng(0)
    k = 70
    w = ctx.tensor(random_blocks(rng, 5, k, "Q4_1"))  # 3 blocks of 20 bytes: 60 wide
    x = ctx.tensor(rng.standard_normal((2, k)).astype(np.float32))
    ids = ctx.tensor(np.array([1, 2], np.int32))

    def qm(**kw):
        args = {"x": x, "w": w, "qtype": "Q4_1", "in_features": k, **kw}
        return lambda: ops.qmatmul(args.pop("x"), args.pop("w"), **args)

    assert_each_raises(ctx, [
        (VkumdValueError, qm(w=ctx.tensor(np.zeros((5, 54), np.uint8)))),  # Q4_0's width
        (VkumdValueError, qm(qtype="Q4_1", in_features=96)),
        (VkumdValueError, qm(qtype="Q5_0")),
        (VkumdValueError, qm(in_features=0)),
        (VkumdTypeError, qm(x=ctx.tensor(np.zeros((2, k), np.int32)))),
        (VkumdTypeError, qm(w=ctx.tensor(np.zeros((5, 60), np.float32)))),
        (VkumdValueError, qm(bias=ctx.tensor(np.zeros(4, np.float32)))),
        (VkumdTypeError, qm(bias=ctx.tensor(np.zeros(5, np.float16)))),
        (VkumdValueError, qm(residual=ctx.tensor(np.zeros((2, 4), np.float32)))),
        (VkumdValueError, qm(out=ctx.tensor(np.zeros((2, 4), np.float32)))),
        (VkumdTypeError, qm(out=ctx.tensor(np.zeros((2, 5), np.float16)))),
        (VkumdValueError, qm(path="tiles")),
        (VkumdTypeError, qm(w=np.zeros((5, 60), np.uint8))),
        (VkumdValueError, lambda: ops.qembedding(ids, w, qtype="Q4_1", dim=100)),
        (VkumdTypeError, lambda: ops.qembedding(x, w, qtype="Q4_1", dim=k)),
        (VkumdValueError, lambda: ops.qembedding(ids, w, qtype="F16", dim=k)),
    ], "q")
    with pytest.raises(VkumdValueError, match=r"must be \[rows, 60\]"):
        ops.qmatmul(x, ctx.tensor(np.zeros((5, 54), np.uint8)), qtype="Q4_1", in_features=k)
    with pytest.raises(VkumdValueError, match="Q5_0.*unknown.*Q8_0, Q4_0, Q4_1"):
        ops.qmatmul(x, w, qtype="Q5_0", in_features=k)


def test_the_planner_picks_the_path_from_m_and_the_device(ctx) -> None:
    import dataclasses

    cpu = dataclasses.replace(ctx.caps, device_type="cpu")
    gpu = dataclasses.replace(ctx.caps, device_type="discrete")
    for caps in (cpu, gpu):
        assert [choose_path(caps, m) for m in (1, 8, 16, 17, 128)] == ["vec"] * 3 + ["gemm"] * 2
