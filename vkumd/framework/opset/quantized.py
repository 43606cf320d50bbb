"""Quantized-weight ops, their records and eager functions: ``qmatmul`` (a linear layer
whose weight stays in GGUF's Q8_0, Q4_0 or Q4_1 blocks on the device) and ``qembedding``
(rows of such a table, as float32).

A quantized weight is a uint8 tensor of its raw blocks, ``[N, ceil(K / 32) * block_bytes]``
(the layout of a GGUF tensor whose ``ne[0]`` is K); the formats, 32 values per block,
little-endian::

    Q8_0: f16 d, 32 x int8 q           (34 bytes)   value = d * q
    Q4_0: f16 d, 16 bytes of nibbles   (18 bytes)   value = d * (nibble - 8)
    Q4_1: f16 d, f16 m, 16 bytes       (20 bytes)   value = d * nibble + m

where nibble byte j holds value j (low nibble) and value j + 16 (high nibble). When K is not
a multiple of 32 the last block of each row is partly used; its values past K are ignored.
:func:`dequantize` is the numpy decoder (the references', and the GGUF reader's).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import QMATMUL_DTYPES, QTYPES
from vkumd.compiler.kernels.qmatmul_plan import (
    QMatmulProblem,
    qembedding_plan,
    qmatmul_plan,
    row_bytes,
)
from vkumd.compiler.registry import effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_tensor, output
from vkumd.framework.ops.contract import (
    Verdicts,
    concrete_rule,
    live_with,
    recall,
    remember,
    signature,
)
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.unary import fill
from vkumd.framework.tensor import Tensor


def dequantize(raw: np.ndarray, qtype: str, k: int) -> np.ndarray:
    """The values of quantized rows: float32 ``[rows, k]`` from uint8 ``[rows, row_bytes]``.

    Args:
        raw: the blocks, one row of ``ceil(k / 32)`` blocks per row (any leading shape).
        qtype: ``"Q8_0"``, ``"Q4_0"`` or ``"Q4_1"``.
        k: values per row (the last block's values past ``k`` are dropped).

    Returns:
        ``raw.shape[:-1] + (k,)`` float32, each value computed in float32 as GGUF does.

    Raises:
        VkumdValueError: an unknown qtype, or rows of another width than ``k`` needs.
    """
    if qtype not in QTYPES:
        raise VkumdValueError(f"dequantize: qtype {qtype!r} is unknown; use one of "
                              f"{', '.join(QTYPES)}")
    values, size = QTYPES[qtype]
    blocks = -(-k // values)
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.shape[-1] != blocks * size:
        raise VkumdValueError(f"dequantize: rows of {k} {qtype} values take {blocks * size} "
                              f"bytes; got {raw.shape[-1]}")
    b = raw.reshape(*raw.shape[:-1], blocks, size)
    d = b[..., 0:2].copy().view(np.float16).astype(np.float32)  # [..., blocks, 1]
    if qtype == "Q8_0":
        x = d * b[..., 2:].view(np.int8).astype(np.float32)
    else:
        nib = b[..., 4:] if qtype == "Q4_1" else b[..., 2:]
        q = np.concatenate([nib & 0x0F, nib >> 4], axis=-1).astype(np.float32)
        if qtype == "Q4_1":
            x = d * q + b[..., 2:4].copy().view(np.float16).astype(np.float32)
        else:
            x = d * (q - 8.0)
    return x.reshape(*raw.shape[:-1], blocks * values)[..., :k]


def _qtype(op: str, qtype: Any) -> str:
    if not isinstance(qtype, str) or qtype not in QTYPES:
        raise VkumdValueError(f"{op}: qtype={qtype!r} is unknown; use one of "
                              f"{', '.join(QTYPES)}")
    return qtype


def _size(op: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise VkumdValueError(f"{op}: {what}={value!r} must be a positive int")
    return int(value)


def _blocks_table(op: str, w: TensorType, qtype: str, k: int, what: str) -> None:
    """Refuse a block table that is not uint8 ``[rows, row_bytes(qtype, k)]``."""
    if w.dtype is not dtypes.uint8:
        raise VkumdTypeError(f"{op}: {what} is {w.dtype.name}; quantized blocks are uint8 "
                             "(the raw bytes of the GGUF tensor)")
    need = row_bytes(qtype, k)
    if w.ndim != 2 or w.shape[1] != need:
        raise VkumdValueError(f"{op}: {what} has shape {format_shape(w.shape)}; {k} {qtype} "
                              f"values per row take {-(-k // 32)} blocks of "
                              f"{QTYPES[qtype][1]} bytes, so it must be [rows, {need}]")


def _qmatmul_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, w, bias, residual = ins
    assert x is not None and w is not None
    qtype = _qtype("qmatmul", attrs["qtype"])
    k = _size("qmatmul", attrs["in_features"], "in_features")
    if x.dtype.name not in QMATMUL_DTYPES:
        raise VkumdTypeError(f"qmatmul: x is {x.dtype.name}; it takes "
                             f"{', '.join(QMATMUL_DTYPES)} (cast() converts)")
    if x.ndim < 1 or not dims.same(x.shape[-1], k):
        raise VkumdValueError(f"qmatmul: x has shape {format_shape(x.shape)}; its last "
                              f"dimension must be in_features={k}")
    _blocks_table("qmatmul", w, qtype, k, "w")
    n = w.shape[0]
    out = (*x.shape[:-1], n)
    for name, t, shape in (("bias", bias, (n,)), ("residual", residual, out)):
        if t is None:
            continue
        if t.dtype is not x.dtype:
            raise VkumdTypeError(f"qmatmul: {name} is {t.dtype.name}; it must be "
                                 f"{x.dtype.name} like x")
        if not dims.same_shape(t.shape, shape):
            raise VkumdValueError(f"qmatmul: {name} has shape {format_shape(t.shape)}; it "
                                  f"must be {format_shape(shape)}")
    return [TensorType(out, x.dtype)]


def _qmatmul_reference(args: list[Any], attrs: dict[str, Any], shapes: Any
                       ) -> list[np.ndarray]:
    x, w, bias, residual = args
    k = attrs["in_features"]
    weight = dequantize(w.astype(np.uint8), attrs["qtype"], k).astype(np.float64)
    y = np.asarray(x, np.float64) @ weight.T
    if bias is not None:
        y = y + bias
    if residual is not None:
        y = y + residual
    return [y.reshape(shapes[0])]


_VERDICTS: Verdicts = {}


def _judge(x: Tensor, w: Tensor, bias: Tensor | None, residual: Tensor | None, qtype: Any,
           in_features: Any) -> TensorType:
    (out,) = concrete_rule("qmatmul", (x, w, bias, residual),
                           {"qtype": qtype, "in_features": in_features})
    have = effective_caps(x.context.caps)
    if not {"storage16", "subgroup_arithmetic"} <= have:
        raise CapabilityMissing(f"qmatmul: the kernels need 16-bit storage and subgroup "
                                f"arithmetic, which {x.context.caps.name} lacks; dequantise "
                                "on the host and use matmul")
    return out


def qmatmul(x: Tensor, w: Tensor, *, qtype: str, in_features: int,
            bias: Tensor | None = None, residual: Tensor | None = None,
            out: Tensor | None = None, path: str | None = None) -> Tensor:
    """``x @ dequant(w)^T (+ bias) (+ residual)``: a linear layer on quantized weights.

    The weight's blocks are read and dequantised in registers (decode: a matrix-vector
    kernel that reads them once for every row of x), or dequantised into scratch for the
    float GEMM (prefill); products accumulate in float32.

    Args:
        x: float32 or float16, ``[..., K]``.
        w: uint8 ``[N, ceil(K / 32) * block_bytes]``: the weight's raw blocks.
        qtype: ``"Q8_0"``, ``"Q4_0"`` or ``"Q4_1"``.
        in_features: K.
        bias: ``[N]`` in x's dtype, added to every row.
        residual: the output's shape and dtype, added last.
        out: the result tensor to write; a new one when None.
        path: force ``"vec"`` or ``"gemm"`` instead of the planner's choice (tests, benches).

    Returns:
        ``x.shape[:-1] + (N,)`` in x's dtype.

    Raises:
        VkumdTypeError: a non-tensor argument, x not float32/float16, w not uint8, a bias or
            residual of another dtype than x, ``out`` of the wrong dtype.
        VkumdValueError: an unknown qtype or path, in_features not a positive int or not x's
            last dimension, w's width not what K values of qtype take, a bias or residual
            of the wrong shape, ``out`` of the wrong shape or overlapping an input, tensors
            of different contexts.
        CapabilityMissing: a device without 16-bit storage or subgroup arithmetic.
    """
    x = check_tensor("qmatmul", x, "x")
    w = check_tensor("qmatmul", w, "w")
    check_context("qmatmul", x, w, "w")
    live_with("qmatmul", x, ((bias, "bias?"), (residual, "residual?")))
    caps = x.context.caps
    key = (id(caps), signature(x), signature(w), signature(bias), signature(residual), qtype,
           in_features, type(in_features))
    known = recall(_VERDICTS, key)
    if known is None or known[0] is not caps:
        known = remember(_VERDICTS, key, (caps, _judge(x, w, bias, residual, qtype,
                                                       in_features)))
    out_type = known[1]
    result = output("qmatmul", x.context, out, out_type.shape, x.dtype, (x, w, bias, residual))
    k, n = int(in_features), w.shape[0]
    m = x.size // k
    if m == 0 or n == 0:
        return result
    problem = QMatmulProblem(qtype, x.dtype.name, m, n, k, bias is not None,
                             residual is not None, x.address % 16 == 0)
    x.context.run(qmatmul_plan(caps, problem, force=path), (x, w, result, bias, residual))
    return result


def _qmatmul_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    x, w, bias, residual = ins
    qmatmul(x, w, qtype=at["qtype"], in_features=at["in_features"], bias=bias,
            residual=residual, out=outs[0])


define("qmatmul", ("x", "w", "bias?", "residual?"), {"qtype": REQUIRED, "in_features": REQUIRED},
       inplace=("residual",), rule=_qmatmul_rule, reference=_qmatmul_reference,
       lower=_qmatmul_lower, eager=qmatmul)


def _qembedding_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    ids, table = ins
    assert ids is not None and table is not None
    qtype = _qtype("qembedding", attrs["qtype"])
    dim = _size("qembedding", attrs["dim"], "dim")
    if ids.dtype is not dtypes.int32:
        raise VkumdTypeError(f"qembedding: ids are {ids.dtype.name}; they must be int32 "
                             "(cast() converts)")
    _blocks_table("qembedding", table, qtype, dim, "table")
    return [TensorType((*ids.shape, dim), dtypes.float32)]


def _qembedding_reference(args: list[Any], attrs: dict[str, Any], shapes: Any
                          ) -> list[np.ndarray]:
    ids, table = args
    rows = dequantize(table.astype(np.uint8), attrs["qtype"], attrs["dim"]).astype(np.float64)
    ids = np.asarray(ids).astype(np.int64)
    inside = (ids >= 0) & (ids < rows.shape[0])
    picked = rows[np.where(inside, ids, 0)] if rows.shape[0] else np.zeros(shapes[0])
    return [np.where(inside[..., None], picked, 0.0)]


def qembedding(ids: Tensor, table: Tensor, *, qtype: str, dim: int,
               out: Tensor | None = None) -> Tensor:
    """Rows of a quantized table picked by ``ids``, dequantised to float32.

    As :func:`~vkumd.framework.opset.layout.embedding`, an id outside ``[0, vocab)`` is not
    an error (the host cannot see device-resident ids without waiting): its row is zeros,
    and nothing outside the table is read.

    Args:
        ids: int32 tensor of any shape.
        table: uint8 ``[vocab, ceil(dim / 32) * block_bytes]``: the table's raw blocks.
        qtype: ``"Q8_0"``, ``"Q4_0"`` or ``"Q4_1"``.
        dim: values per row.
        out: optional float32 output of shape ``ids.shape + (dim,)``.

    Returns:
        ``ids.shape + (dim,)`` float32.

    Raises:
        VkumdTypeError: a non-tensor argument, ids not int32, table not uint8, ``out`` not
            float32.
        VkumdValueError: an unknown qtype, dim not a positive int, a table of the wrong
            width for dim, tensors of different contexts, ``out`` of the wrong shape.
        CapabilityMissing: a device without 16-bit storage.
    """
    ids = check_tensor("qembedding", ids, "ids")
    table = check_tensor("qembedding", table, "table")
    check_context("qembedding", ids, table, "table")
    (out_type,) = concrete_rule("qembedding", (ids, table), {"qtype": qtype, "dim": dim})
    if "storage16" not in effective_caps(ids.context.caps):
        raise CapabilityMissing(f"qembedding: the kernel needs 16-bit storage, which "
                                f"{ids.context.caps.name} lacks")
    result = output("qembedding", ids.context, out, out_type.shape, dtypes.float32,
                    (ids, table))
    if result.size == 0:
        return result
    vocab = table.shape[0]
    if vocab == 0:
        return fill(result, 0)
    plan = qembedding_plan(ids.context.caps, qtype, int(dim), math.prod(ids.shape), vocab)
    ids.context.run(plan, (ids, table, result))
    return result


def _qembedding_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    qembedding(ins[0], ins[1], qtype=at["qtype"], dim=at["dim"], out=outs[0])


define("qembedding", ("ids", "table"), {"qtype": REQUIRED, "dim": REQUIRED},
       rule=_qembedding_rule, reference=_qembedding_reference, lower=_qembedding_lower,
       eager=qembedding)
