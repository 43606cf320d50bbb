"""where() of integers (exact through the binary and conversion kernels) and the conversion
kernel's 8-bit integers (int8, uint8 to and from every type it takes), against numpy on odd
and broadcast shapes, outputs poisoned first."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd import ops
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

BYTES = ["int8", "uint8"]
OTHERS = ["float32", "float16", "int32", "int16", "uint16", "uint32"]


def _needs(ctx, *names: str) -> None:
    if any(np.dtype(n).itemsize == 1 for n in names) and not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage")
    if any(np.dtype(n).itemsize == 2 for n in names) and not ctx.caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 60).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _poisoned(ctx, shape: tuple[int, ...], dtype: str):
    return ctx.tensor(np.full(shape, 0x5B, dtype), dtype=dtype)


@pytest.mark.parametrize("other", OTHERS)
@pytest.mark.parametrize("byte", BYTES)
def test_byte_casts_match_numpy(ctx, byte: str, other: str) -> None:
    """Integers wrap as astype; floats truncate toward zero (kept within the byte's range)."""
    _needs(ctx, byte, other)
    rng = np.random.default_rng()
    for src, dst in ((byte, other), (other, byte)):
        data = _values(rng, src, (5, 131))
        if src.startswith("float"):
            data = np.clip(data, -128 if dst == "int8" else 0, 127 if dst == "int8" else 255)
            want = np.trunc(data.astype(np.float64)).astype(dst)
        else:
            want = data.astype(dst)
        out = _poisoned(ctx, data.shape, dst)
        ops.cast(ctx.tensor(data, dtype=src), dst, out=out)
        np.testing.assert_array_equal(out.numpy(), want, err_msg=f"{src} -> {dst}")


def test_byte_casts_between_bytes_and_broadcast(ctx) -> None:
    _needs(ctx, "int8")
    rng = np.random.default_rng()
    data = _values(rng, "int8", (7, 1))
    out = _poisoned(ctx, (7, 9), "uint8")
    ops.cast(ctx.tensor(data, dtype="int8"), "uint8", out=out)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(data.astype(np.uint8), (7, 9)))


@pytest.mark.parametrize("value, cond_type", [("int32", "uint8"), ("int32", "int32"),
                                              ("int8", "uint8"), ("uint8", "int8"),
                                              ("int16", "uint8")])
def test_where_of_integers_is_exact(ctx, value: str, cond_type: str) -> None:
    """A select of integers in a compiled graph keeps every value bit for bit (past 2**24
    too) and broadcasts cond, a and b."""
    _needs(ctx, value, cond_type)
    rng = np.random.default_rng()
    shapes = {"cond": (3, 1, 13), "a": (5, 13), "b": (3, 5, 1)}
    data = {"a": _values(rng, value, shapes["a"]), "b": _values(rng, value, shapes["b"]),
            "cond": rng.integers(-3 if cond_type != "uint8" else 0, 4, shapes["cond"])
            .astype(cond_type)}
    if value == "int32":
        data["a"][0, :3] = [2**31 - 1, -2**31, 2**24 + 1]
    b = GraphBuilder("where_ints")
    ins = {n: b.input(n, s, data[n].dtype.name) for n, s in shapes.items()}
    b.output(b.op("where", ins["cond"], ins["a"], ins["b"]))
    graph = b.build()
    want = np.where(data["cond"] != 0, data["a"], data["b"])
    np.testing.assert_array_equal(evaluate(graph, data)[0], want)
    got = CompiledGraph(graph, ctx)(**data)[0].numpy()
    assert got.dtype == np.dtype(value)
    np.testing.assert_array_equal(got, want)
