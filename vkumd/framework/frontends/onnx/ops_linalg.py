"""Converters of MatMul, Gemm, Einsum, Softmax, LayerNormalization and LpNormalization (the
reductions: ops_reduce.py).

vkumd's row kernels work over the last axis; other axes are permuted (or reshaped) there
first, which is what an exporter's graph would have to do on vkumd anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.errors import VkumdValueError
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value, product
from vkumd.framework.graph.einsum import einsum_graph


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise Unsupported(f"{what} {axis} is out of range for {ndim} dimensions")
    return axis % max(ndim, 1)


def _broadcast_batch(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """numpy's broadcast of two batch shapes (None when a symbolic pair would need it)."""
    out = []
    width = max(len(a), len(b))
    a = (1,) * (width - len(a)) + a
    b = (1,) * (width - len(b)) + b
    for x, y in zip(a, b, strict=True):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def _untranspose(st: State, b: Value) -> tuple[Value, bool]:
    """``b`` in the matmul's ``trans_b`` form when a permute that moves its last axis to
    the rows made it: exporters write ``q @ k^T`` as a Transpose of k (``[B, S, H, D] ->
    [B, H, D, S]``), and the attention fusion, as the native encoder, reads ``matmul(q, k,
    trans_b=True)`` of k in ``[B, H, S, D]``. The old permute is left to DCE."""
    node = b.producer
    if node is not None and node.op == "reshape":
        merged = _merged_transpose(b)
        if merged is not None:
            return merged, True
    if node is None or node.op != "permute" or len(b.shape) < 3:
        return b, False
    perm = list(node.attrs["dims"])
    if perm[-2] != len(perm) - 1:  # src's last axis is not what b's rows run along
        return b, False
    inner = perm[:-2] + [perm[-1], perm[-2]]
    src = node.inputs[0]
    assert src is not None
    if inner == list(range(len(perm))):
        return src, True
    return st.b.permute(src, inner), True


def _merged_transpose(b: Value) -> Value | None:
    """``src`` when ``b`` is ``reshape(permute(reshape(src, [-1, m, n]), [0, 2, 1]),
    [*lead, n, m])`` of ``src`` ``[*lead, m, n]`` (torch's export of ``k.transpose(-2, -1)``
    through a 3-D batch), else None."""
    outer = b.producer
    mid = outer.inputs[0].producer if outer is not None and outer.inputs[0] is not None else None
    if mid is None or mid.op != "permute" or list(mid.attrs["dims"]) != [0, 2, 1]:
        return None
    inner = mid.inputs[0].producer if mid.inputs[0] is not None else None
    if inner is None or inner.op != "reshape" or inner.inputs[0] is None:
        return None
    src = inner.inputs[0]
    lead, m, n = tuple(src.shape[:-2]), src.shape[-2], src.shape[-1]
    if len(src.shape) < 3 or tuple(mid.inputs[0].shape[1:]) != (m, n):
        return None
    return src if tuple(b.shape) == (*lead, n, m) else None


@converter("MatMul")
def matmul(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """numpy's matmul: 1-D operands are promoted and squeezed back, a batch of ones shared."""
    a, b = st.value(node.input[0]), st.value(node.input[1])
    if a.shape == () or b.shape == ():
        raise Unsupported("MatMul of a 0-d operand")
    squeeze_a, squeeze_b = len(a.shape) == 1, len(b.shape) == 1
    if squeeze_a:
        a = st.b.reshape(a, (1, a.shape[0]))
    if squeeze_b:
        b = st.b.reshape(b, (b.shape[0], 1))
    batch = _broadcast_batch(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise Unsupported(f"batch dimensions {a.shape[:-2]} and {b.shape[:-2]} do not "
                          "broadcast")
    for side in ("a", "b"):
        v = a if side == "a" else b
        own = v.shape[:-2]
        # vkumd's matmul shares a batch-less operand; a batch of ones is the same thing.
        if own and own != batch and all(d == 1 for d in own):
            v = st.b.reshape(v, v.shape[-2:])
        elif own != batch and len(batch) + 2 == len(v.shape) and all(
                isinstance(d, int) for d in batch):
            # Batch dimensions of 1 against larger ones on the other side: the operand is
            # broadcast to the full batch (an add of zeros of shape (*batch, 1, 1), as
            # Expand), then both batches are equal.
            zeros = st.constant(np.zeros((*batch, 1, 1), np.float32), v.dtype.name)
            v = st.b.add(v, zeros)
        elif own and own != batch:
            raise Unsupported(f"MatMul batch broadcasting {a.shape[:-2]} x {b.shape[:-2]} "
                              "is not supported (use equal batch shapes or a 2-D operand)")
        a, b = (v, b) if side == "a" else (a, v)
    b, trans_b = _untranspose(st, b)
    split = None if squeeze_b or len(b.shape) != 2 else _split_matmul(st, a, node.input[1],
                                                                        None, {})
    y = split if split is not None else st.b.matmul(a, b, trans_b=trans_b)
    want = (*batch, a.shape[-2], b.shape[-2] if trans_b else b.shape[-1])
    if squeeze_a:
        want = want[:-2] + want[-1:]
    if squeeze_b:
        want = want[:-1]
    return [y if tuple(y.shape) == want else st.b.reshape(y, want)]


# Vulkan's guaranteed minimum of maxStorageBufferRange (lavapipe's limit too): a weight
# larger than this cannot be bound as one buffer on every device.
BINDING_FLOOR = 1 << 27


def _weight_blocks(st: State, name: str, trans_b: bool
                   ) -> list[tuple[Value, int, int]] | None:
    """A known 2-D weight past :data:`BINDING_FLOOR` bytes as blocks of whole output columns
    (``(block, first column, end column)``), each within it; None for any other ``name``.
    VGG's and AlexNet's first fully connected weights (151-411 MB) are such."""
    w = st.known(name)
    if w is None or w.ndim != 2 or w.nbytes <= BINDING_FLOOR or w.dtype.kind != "f":
        return None
    n = w.shape[0] if trans_b else w.shape[1]
    per_column = w.nbytes // n
    step = max(1, BINDING_FLOOR // per_column)
    dtype = st.dtype(name)
    blocks = []
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        part = w[lo:hi] if trans_b else w[:, lo:hi]
        blocks.append((st.constant(np.ascontiguousarray(part), dtype), lo, hi))
    return blocks


def _split_matmul(st: State, a: Value, name: str, bias: Value | None, kw: dict[str, Any]
                  ) -> Value | None:
    """``a @ w (+ bias)`` over the column blocks of a known 2-D weight ``name`` past
    :data:`BINDING_FLOOR`, concatenated along the last axis; None when ``name`` is no such
    weight."""
    blocks = _weight_blocks(st, name, kw.get("trans_b", False))
    if blocks is None or len(a.shape) < 2:
        return None
    parts = [st.b.matmul(a, w, bias=None if bias is None else st.b.slice(bias, 0, lo, hi),
                         **kw) for w, lo, hi in blocks]
    return st.b.concat(parts, axis=len(a.shape) - 1)


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB"))
def gemm(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``alpha * op(A) @ op(B) + beta * C``: C of ``[N]`` (or ``[1, N]``) is the bias,
    ``[M, N]`` the residual, anything else broadcast by an add."""
    a, b = st.value(node.input[0]), st.value(node.input[1])
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    kw: dict[str, Any] = {"alpha": alpha, "trans_a": bool(attrs.get("transA", 0)),
                          "trans_b": bool(attrs.get("transB", 0))}
    if not st.present(node, 2) or beta == 0.0:
        split = _split_matmul(st, a, node.input[1], None, kw)
        return [split if split is not None else st.b.matmul(a, b, **kw)]
    known = st.known(node.input[2])
    if beta != 1.0 and known is not None and known.dtype.kind == "f":
        c = st.constant(known * beta, st.dtype(node.input[2]))
    else:
        c = st.value(node.input[2])
        c = c if beta == 1.0 else st.b.scale(c, beta)
    m = a.shape[1] if kw["trans_a"] else a.shape[0]
    n = b.shape[0] if kw["trans_b"] else b.shape[1]
    if tuple(c.shape) in ((n,), (1, n)):
        bias = c if tuple(c.shape) == (n,) else st.b.reshape(c, (n,))
        split = _split_matmul(st, a, node.input[1], bias, kw)
        return [split if split is not None else st.b.matmul(a, b, bias=bias, **kw)]
    if tuple(c.shape) == (m, n):
        return [st.b.matmul(a, b, residual=c, **kw)]
    return [st.b.add(st.b.matmul(a, b, **kw), c)]


def _to_last(st: State, x: Value, axis: int) -> tuple[Value, list[int] | None]:
    """``x`` with ``axis`` moved last, and the permutation that undoes it (None: no move)."""
    ndim = len(x.shape)
    if axis == ndim - 1:
        return x, None
    order = [d for d in range(ndim) if d != axis] + [axis]
    inverse = [order.index(d) for d in range(ndim)]
    return st.b.permute(x, order), inverse


@converter("Softmax", attrs=("axis",))
def softmax(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Softmax over ``axis``; before opset 13 over the flattened trailing axes."""
    x = st.value(node.input[0])
    ndim = len(x.shape)
    if st.opset < 13:
        axis = _axis(attrs.get("axis", 1), ndim)
        if axis == ndim - 1:
            return [st.b.softmax(x)]
        flat = st.b.reshape(x, (product(x.shape[:axis]), product(x.shape[axis:])))
        return [st.b.reshape(st.b.softmax(flat), x.shape)]
    axis = _axis(attrs.get("axis", -1), ndim)
    moved, inverse = _to_last(st, x, axis)
    y = st.b.softmax(moved)
    return [y if inverse is None else st.b.permute(y, inverse)]


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def layer_norm(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Layer normalisation over the axes from ``axis`` on (reshaped into one row); the
    optional Mean and InvStdDev outputs are computed beside it in float32."""
    if attrs.get("stash_type", 1) != 1:
        raise Unsupported(f"stash_type={attrs['stash_type']} (only 1, float32, is supported)")
    x = st.value(node.input[0])
    ndim = len(x.shape)
    axis = _axis(attrs.get("axis", -1), ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    row = product(x.shape[axis:])
    params: list[Value | None] = []
    for i in (1, 2):
        if not st.present(node, i):
            params.append(None)
            continue
        p = st.value(node.input[i])
        if tuple(p.shape) != tuple(x.shape[axis:]):
            raise Unsupported(f"a scale or bias of shape {p.shape} for normalised axes "
                              f"{x.shape[axis:]} (broadcasting is not supported)")
        params.append(p if len(p.shape) == 1 else st.b.reshape(p, (row,)))
    flat = x if axis == ndim - 1 else st.b.reshape(x, (*x.shape[:axis], row))
    y = st.b.layer_norm(flat, params[0], params[1], eps=eps)
    outs: list[Bound | None] = [y if axis == ndim - 1 else st.b.reshape(y, x.shape)]
    if any(name for name in node.output[1:]):
        outs += _moments(st, flat, eps, (*x.shape[:axis], *([1] * (ndim - axis))))
    return outs


def _moments(st: State, flat: Value, eps: float, shape: tuple[Any, ...]) -> list[Bound | None]:
    """LayerNormalization's Mean and InvStdDev (``1 / sqrt(var + eps)``), float32."""
    if flat.dtype.name != "float32":
        flat = st.b.cast(flat, "float32")  # stash_type 1: the statistics are float32
    mean = st.b.mean(flat, keepdims=True)
    centred = st.b.sub(flat, mean)
    var = st.b.mean(st.b.mul(centred, centred), keepdims=True)
    inv = st.b.div(st.constant(np.ones((), np.float32), "float32"),
                   st.b.sqrt(st.b.add(var, eps)))
    return [st.b.reshape(mean, shape), st.b.reshape(inv, shape)]


@converter("LpNormalization", attrs=("axis", "p"))
def lp_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                     ) -> list[Bound | None]:
    """``x / ||x||_p`` along ``axis``. p = 2 as the native encoder writes it: an RMS norm
    (``x / sqrt(mean(x**2) + eps)``) times ``1/sqrt(n)``, one row kernel. ``eps`` is
    ``1e-24 / n`` (F.normalize's clamp of the norm at 1e-12): a zero row gives zeros, as
    ONNX's reference does, and no other row changes in float32. p = 1 divides by the row's
    sum of ``|x|`` (a zero row gives zeros)."""
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise Unsupported(f"LpNormalization with p={p} (ONNX defines p = 1 and 2)")
    x = st.value(node.input[0])
    if x.dtype.name not in ("float32", "float16", "bfloat16"):
        raise Unsupported(f"LpNormalization of {x.dtype.name}")
    moved, inverse = _to_last(st, x, _axis(attrs.get("axis", -1), len(x.shape)))
    if p == 1:
        norm = st.b.sum(st.b.abs(moved), keepdims=True)
        zero = st.constant(np.zeros((), np.float32), x.dtype.name)
        y = st.b.where(st.b.eq(norm, zero), zero, st.b.div(moved, norm))
        return [y if inverse is None else st.b.permute(y, inverse)]
    n = moved.shape[-1]
    if not isinstance(n, int) or n == 0:
        raise Unsupported(f"LpNormalization along an axis of size {n} (a known, non-zero "
                          "size is needed for the norm's 1/sqrt(n))")
    unit = st.constant(np.full(n, n ** -0.5, np.float32), x.dtype.name)
    y = st.b.rms_norm(moved, unit, eps=1e-24 / n)
    return [y if inverse is None else st.b.permute(y, inverse)]


@converter("Einsum", attrs=("equation",))
def einsum(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Einsum lowered to sums, permutes, reshapes and one matmul per pair of operands
    (:mod:`vkumd.framework.graph.einsum`); a diagonal (an index repeated within one
    operand) and size-1 broadcasting are refused."""
    operands = [st.value(name) for name in node.input]
    try:
        return [einsum_graph(st.b, str(attrs["equation"]), operands)]
    except VkumdValueError as exc:
        raise Unsupported(str(exc)) from exc


# The largest matrices Det composes from elementwise products (cofactor expansion).
_DET_MAX = 3


@converter("Det")
def det(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """2x2 and 3x3 determinants (batched over leading axes) as products and differences of
    the sliced entries; larger matrices are refused."""
    x = st.value(node.input[0])
    rank = len(x.shape)
    if rank < 2 or x.shape[-1] != x.shape[-2] or not isinstance(x.shape[-1], int):
        raise Unsupported(f"x has shape {x.shape}; Det takes [..., M, M] with M known")
    m = int(x.shape[-1])
    if not 1 <= m <= _DET_MAX:
        raise Unsupported(f"a {m}x{m} determinant: vkumd composes them up to "
                          f"{_DET_MAX}x{_DET_MAX}")
    lead = tuple(x.shape[:-2])

    def entry(i: int, j: int) -> Value:
        row = st.b.slice(x, axis=rank - 2, start=i, stop=i + 1)
        return st.b.reshape(st.b.slice(row, axis=rank - 1, start=j, stop=j + 1), lead)

    if m == 1:
        return [entry(0, 0)]

    def minor2(r0: int, r1: int, c0: int, c1: int) -> Value:
        return st.b.sub(st.b.mul(entry(r0, c0), entry(r1, c1)),
                        st.b.mul(entry(r0, c1), entry(r1, c0)))

    if m == 2:
        return [minor2(0, 1, 0, 1)]
    terms = [st.b.mul(entry(0, 0), minor2(1, 2, 1, 2)),
             st.b.mul(entry(0, 1), minor2(1, 2, 0, 2)),
             st.b.mul(entry(0, 2), minor2(1, 2, 0, 1))]
    return [st.b.add(st.b.sub(terms[0], terms[1]), terms[2])]
