"""``matmul``: batched GEMM with a fused epilogue, on ``shaders/gemm.comp``: the op's record
(rule, float64 reference, lowering) and its eager function.

The function computed, for every batch entry (one kernel launch, C written once)::

    out = act(alpha * (op(a) @ op(b)) + bias) + residual + beta * out_before

``op(x)`` is ``x`` or, with ``trans_a``/``trans_b``, its transpose (of the last two
dimensions); ``act`` is ``None``, ``"relu"``, ``"gelu"`` (erf form), ``"gelu_tanh"`` or
``"silu"``; ``bias`` has length N and is added to every row; ``residual`` is added after the
activation (the transformer block's ``x + mlp(x)``); ``beta`` scales the prior contents of
``out=`` as in BLAS ``C = alpha*A@B + beta*C`` (and needs ``out=``). Products accumulate in
float32 (int32 for int8) and the result is rounded once to the output type.

Kernel variants (``variant=`` forces one; by default
:func:`~vkumd.compiler.kernels.gemm_plan.choose_variant` picks):

- ``"lanes"``: no shared memory; each workgroup is one subgroup, A values are handed between
  lanes with ``subgroupBroadcast``; 64-bit word loads where the layout allows, element
  loads otherwise. The path for lavapipe and other CPU drivers.
- ``"lanes_packed"``: the same, after copying B into contiguous column panels (one extra
  pass over B, a temporary of B's size); chosen when enough row tiles reuse each panel.
- ``"shared"``: shared-memory tiles, for GPUs.
- ``"coopmat"``: cooperative matrices at a shape the driver lists; float16 only. A workgroup
  of several subgroups computes a block of C (a config from the device's shared memory,
  subgroup size and the problem's size, or ``VKUMD_GEMM_COOPMAT_TILE``; see
  :func:`~vkumd.compiler.kernels.gemm_plan.coopmat_plan`).

Split-K for long K and few output tiles, and B packing, are the planner's too
(:mod:`vkumd.compiler.kernels.gemm_plan`). The shapes, dtypes and attributes are checked by
the ``matmul`` op record's rule (declared here), the one the graph applies; the eager
function also checks what the graph op has no word for (``beta``, ``out=``,
``variant``, contexts, the device's capabilities) and runs the plan.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from vkumd.compiler.kernels import ACTIVATIONS
from vkumd.compiler.kernels.double import (
    A_REPEATS,
    B_REPEATS,
    HAS_BIAS,
    HAS_RESIDUAL,
    R_REPEATS,
    TRANS_A,
    TRANS_B,
    matmul_double_plan,
)
from vkumd.compiler.kernels.gemm_choice import GemmShape
from vkumd.compiler.kernels.gemm_plan import GemmProblem, gemm_plan
from vkumd.compiler.kernels.limits import GEMM_DTYPES
from vkumd.compiler.registry import effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.execute.arena import view
from vkumd.framework.graph.dims import Shape, format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, real
from vkumd.framework.graph.reference import ACTIVATIONS as REFERENCE_ACTIVATIONS
from vkumd.framework.graph.registry import OPS, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_pair, check_real, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, live_with, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

_MAX_INDEX = 2**32 - 1  # element offsets travel as uint32


def _check_dtype(context: Any, dt: dtypes.DType) -> None:
    """Refuse a dtype (one the rule accepted) that ``context``'s device cannot run GEMM on."""
    if dt is dtypes.float64:  # the double kernel: shaderFloat64, no buffer addresses
        check_storage("matmul", dt, context)
        return
    have = effective_caps(context.caps)
    if dt.itemsize == 2 and "storage16" not in have:
        raise CapabilityMissing(f"matmul: {dt.name} needs 16-bit storage "
                                f"(storageBuffer16BitAccess), which {context.caps.name} lacks; "
                                "use float32")
    if dt is dtypes.int8 and not {"int8", "storage8"} <= have:
        raise CapabilityMissing(f"matmul: int8 needs shaderInt8 and 8-bit storage, which "
                                f"{context.caps.name} lacks; cast to float32 first")
    if not context.caps.buffer_device_address:
        raise CapabilityMissing(f"matmul: the GEMM kernel reads through buffer device "
                                f"addresses, which {context.caps.name} lacks")


def _batch_strides(a_batch: tuple[int, ...], b_batch: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], bool, bool]:
    """The output's batch shape, and whether A and B repeat across it (batch shapes the
    rule accepted)."""
    if not b_batch or math.prod(b_batch) == 1 and len(b_batch) <= len(a_batch):
        return a_batch, False, True
    if not a_batch or math.prod(a_batch) == 1 and len(a_batch) <= len(b_batch):
        return b_batch, True, False
    return a_batch, False, False


class _Verdict(NamedTuple):
    """What the rule and the device checks made of one call signature."""

    caps: Any  # the device's caps, kept so a recycled id() cannot match
    out_shape: tuple[int, ...]
    out_dtype: dtypes.DType
    m: int
    n: int
    k: int
    count: int  # batch entries
    a_repeats: bool
    b_repeats: bool
    r_repeats: bool
    alpha: float
    trans_a: bool
    trans_b: bool


# Verdicts by (id of the device caps, shapes and dtype names of a, b, bias and residual,
# activation, then alpha, trans_a and trans_b each with its type, since True == 1 == 1.0
# hash alike and the rule takes only some of them).
_VERDICTS: Verdicts = {}


def _judge(context: Any, a: Tensor, b: Tensor, bias: Tensor | None, residual: Tensor | None,
           activation: Any, alpha: Any, trans_a: Any, trans_b: Any) -> _Verdict:
    """Check a call with the op's rule and the device's capabilities; raises as they do."""
    (out,) = concrete_rule("matmul", (a, b, bias, residual),
                           {"activation": activation, "alpha": alpha, "trans_a": trans_a,
                            "trans_b": trans_b})
    _check_dtype(context, a.dtype)
    trans_a, trans_b = bool(trans_a), bool(trans_b)
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    n = b.shape[-2] if trans_b else b.shape[-1]
    batch, a_repeats, b_repeats = _batch_strides(a.shape[:-2], b.shape[:-2])
    r_repeats = residual is not None and bool(batch) and residual.shape == (m, n)
    return _Verdict(context.caps, out.shape, out.dtype, m, n, k, math.prod(batch), a_repeats,
                    b_repeats, r_repeats, float(alpha), trans_a, trans_b)


def matmul(a: Tensor, b: Tensor, *, bias: Tensor | None = None, activation: str | None = None,
           residual: Tensor | None = None, alpha: float = 1.0, beta: float = 0.0,
           out: Tensor | None = None, trans_a: bool = False, trans_b: bool = False,
           variant: str | None = None) -> Tensor:
    """``act(alpha * op(a) @ op(b) + bias) + residual + beta * out``, batched, in one kernel.

    Args:
        a: ``(..., M, K)``, or ``(..., K, M)`` with ``trans_a``.
        b: ``(K, N)`` (``(N, K)`` with ``trans_b``), shared by every batch entry of ``a``
            (weights); or with batch dimensions equal to ``a``'s. Either side may also be
            2-D while the other is batched.
        bias: ``(N,)``, added to every row before the activation.
        activation: ``None``, ``"relu"``, ``"gelu"`` (erf), ``"gelu_tanh"`` or ``"silu"``.
        residual: the output's shape, or ``(M, N)`` shared by the batch; added after the
            activation.
        alpha: scales the product.
        beta: scales the prior contents of ``out`` (which must then be given).
        out: the result tensor to write; a new one when None.
        trans_a: use the transpose of ``a``'s last two dimensions.
        trans_b: use the transpose of ``b``'s last two dimensions (``x @ W.T`` for ``W`` of
            shape ``(N, K)``).
        variant: force a kernel variant (``"lanes"``, ``"lanes_packed"``, ``"shared"``,
            ``"coopmat"``) instead of the device's choice; for tests and benchmarks.

    All tensors share one dtype: float32, float16 or bfloat16 (accumulated in float32), or
    int8, whose result is int32 and which takes no epilogue (no bias, activation, residual,
    alpha or beta), or float64 (with shaderFloat64), computed in double by a plain kernel
    (no activation or beta).

    Returns:
        ``out``, of shape ``batch + (M, N)`` and ``a``'s dtype (int32 for int8).

    Raises:
        VkumdTypeError: a non-tensor argument, dtypes that differ, an unsupported dtype, an
            ``out`` of the wrong dtype, a non-numeric alpha/beta.
        VkumdValueError: fewer than 2 dimensions, inner dimensions that differ, batch shapes
            that differ, a bias or residual of the wrong shape, an unknown activation or
            variant, ``beta`` without ``out``, ``out`` of the wrong shape or overlapping an
            input, tensors of different contexts.
        CapabilityMissing: 16-bit or 8-bit types on a device without that storage; float64
            without shaderFloat64.
    """
    context = check_pair("matmul", a, b, "a", "b")
    live_with("matmul", a, ((bias, "bias?"), (residual, "residual?")))
    caps = context.caps
    key = (id(caps), a.shape, a.dtype.name, b.shape, b.dtype.name,
           None if bias is None else (bias.shape, bias.dtype.name),
           None if residual is None else (residual.shape, residual.dtype.name),
           activation, alpha, type(alpha), trans_a, type(trans_a), trans_b, type(trans_b))
    known = recall(_VERDICTS, key)
    if known is None or known.caps is not caps:
        known = remember(_VERDICTS, key, _judge(context, a, b, bias, residual, activation,
                                                alpha, trans_a, trans_b))
    (_, out_shape, out_dtype, m, n, k, count, a_repeats, b_repeats, r_repeats, alpha,
     trans_a, trans_b) = known
    dt = a.dtype
    # beta, the prior contents of out=, is the eager function's own: the graph op has none.
    beta = check_real("matmul", beta, "beta", finite=True)
    if beta != 0.0 and dt is dtypes.int8:
        raise VkumdValueError("matmul: int8 inputs give the exact int32 product only; beta "
                              "needs float inputs")
    if beta != 0.0 and out is None:
        raise VkumdValueError("matmul: beta scales the prior contents of out=, so beta != 0 "
                              "needs out=")
    if out is not None:
        check_tensor("matmul", out, "out=")
        if out.dtype is not out_dtype:
            raise VkumdTypeError(f"matmul: out= is {out.dtype.name}; the result is "
                                 f"{out_dtype.name}")
        output("matmul", context, out, out_shape, out_dtype, (a, b, bias))
    if dt is dtypes.float64:
        return _matmul_double(context, a, b, bias, residual, out, known, beta)
    # Every batch entry starts m*k (or k*n) elements after the last: aligned when the first
    # is and the entry size keeps it so.
    aligned_a = a.address % 8 == 0 and (a_repeats or m * k * dt.itemsize % 8 == 0)
    aligned_b = b.address % 8 == 0 and (b_repeats or k * n * dt.itemsize % 8 == 0)
    shape = GemmShape(m, n, k, trans_a, trans_b, aligned_a, aligned_b,
                      a.address % 16 == 0, b.address % 16 == 0, count)
    problem = GemmProblem(shape, dt.name, out_dtype.itemsize, a_repeats, b_repeats, r_repeats,
                          bias is not None, residual is not None, alpha, beta,
                          ACTIVATIONS[activation])
    plan = gemm_plan(context.caps, problem, force=variant)
    result = out if out is not None else context.empty(out_shape, out_dtype)
    if m == 0 or n == 0 or count == 0:
        return result
    for t in (a, b, result, residual):
        if t is not None and t.size > _MAX_INDEX:
            raise VkumdValueError(f"matmul: a tensor of {t.size} elements is past the "
                                  "kernel's 32-bit indexing; split the batch")
    context.run(plan, (a, b, result, bias, residual))
    return result


def _matmul_double(context: Any, a: Tensor, b: Tensor, bias: Tensor | None,
                   residual: Tensor | None, out: Tensor | None, known: _Verdict,
                   beta: float) -> Tensor:
    """The float64 product in double (``matmul_double.comp``), for a call already judged."""
    if beta != 0.0:
        raise VkumdValueError("matmul: beta is not supported for float64 (the double kernel "
                              "writes out=); add beta * out afterwards")
    result = out if out is not None else context.empty(known.out_shape, known.out_dtype)
    if known.m == 0 or known.n == 0 or known.count == 0:
        return result
    if known.k == 0:  # no product to sum: alpha * 0 + bias + residual
        a = b = result  # bound, never read
    flags = ((TRANS_A if known.trans_a else 0) | (TRANS_B if known.trans_b else 0)
             | (A_REPEATS if known.a_repeats else 0) | (B_REPEATS if known.b_repeats else 0)
             | (R_REPEATS if known.r_repeats else 0) | (HAS_BIAS if bias is not None else 0)
             | (HAS_RESIDUAL if residual is not None else 0))
    plan = matmul_double_plan(context.caps, known.m, known.n, known.k, known.count, flags,
                              known.alpha)
    context.run(plan, (a, b, result, bias, residual))
    return result


# GEMM's types, and float64 in double (matmul_double.comp: no activation).
MATMUL_DTYPES = (*GEMM_DTYPES, "float64")


def epilogue_activations() -> tuple[str | None, ...]:
    """The activations a matmul's epilogue applies: None and every op declared one."""
    return (None, *(name for name, op in OPS.items() if op.epilogue))


def _matmul_batch(a: Shape, b: Shape, dims: DimTable) -> Shape:
    # As vkumd's matmul: a 2-D (or single-entry) side is shared by the other side's batch;
    # otherwise the batch shapes must be equal (no general broadcasting).
    if not b or (product(b) == 1 and len(b) <= len(a)):
        return a
    if not a or (product(a) == 1 and len(a) <= len(b)):
        return b
    if not dims.same_shape(a, b):
        raise VkumdValueError(f"matmul: batch dimensions {format_shape(a)} and "
                              f"{format_shape(b)} differ; use equal batch shapes or a 2-D "
                              "operand shared by the batch")
    return a


def _matmul_dtype(a: TensorType, b: TensorType, bias: TensorType | None,
                  residual: TensorType | None) -> dtypes.DType:
    """The operands' one dtype, refusing ones that differ or that GEMM does not take."""
    dt = a.dtype
    if b.dtype is not dt:
        raise VkumdTypeError(f"matmul: operands must share a dtype, got a {dt.name}, b "
                             f"{b.dtype.name}; cast one so both have the same dtype")
    if dt.name not in MATMUL_DTYPES:
        raise VkumdTypeError(f"matmul: {dt.name} is not supported; matmul takes "
                             f"{', '.join(MATMUL_DTYPES)} (int8 products are int32)")
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None and t.dtype is not dt:
            raise VkumdTypeError(f"matmul: {name} is {t.dtype.name}; it must be {dt.name} "
                                 "like a and b")
    return dt


def _matmul_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    a, b, bias, residual = ins
    assert a is not None and b is not None
    dt = _matmul_dtype(a, b, bias, residual)
    activations = epilogue_activations()
    if attrs["activation"] not in activations:
        raise VkumdValueError(f"matmul: activation={attrs['activation']!r} is unknown; use one "
                              f"of {', '.join(repr(x) for x in activations)}")
    alpha = real("matmul", attrs["alpha"], "alpha")
    trans_a = flag("matmul", attrs["trans_a"], "trans_a")
    trans_b = flag("matmul", attrs["trans_b"], "trans_b")
    if a.ndim < 2 or b.ndim < 2:
        raise VkumdValueError(f"matmul: a and b need at least 2 dimensions, got "
                              f"{format_shape(a.shape)} and {format_shape(b.shape)}; reshape "
                              "vectors to [1, K] or [K, 1]")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if not dims.same(k, k2):
        raise VkumdValueError(f"matmul: inner dimensions differ: op(a) is {m} x {k} and op(b) "
                              f"is {k2} x {n} (a {format_shape(a.shape)}"
                              f"{' transposed' if trans_a else ''}, b {format_shape(b.shape)}"
                              f"{' transposed' if trans_b else ''})")
    out = (*_matmul_batch(a.shape[:-2], b.shape[:-2], dims), m, n)
    if dt is dtypes.float64 and attrs["activation"] is not None:
        raise VkumdValueError(f"matmul: activation={attrs['activation']!r} with float64; the "
                              "double kernel applies alpha, bias and residual only (apply the "
                              "activation after)")
    if dt is dtypes.int8:
        if (bias is not None or residual is not None or attrs["activation"] is not None
                or alpha != 1.0):
            raise VkumdValueError("matmul: int8 inputs give the exact int32 product only; "
                                  "bias, activation, residual and alpha need float inputs")
        return [TensorType(out, dtypes.int32)]
    if bias is not None and (bias.ndim != 1 or not dims.same(bias.shape[0], n)):
        raise VkumdValueError(f"matmul: bias has shape {format_shape(bias.shape)}; it must be "
                              f"[{n}], one value per output column")
    if residual is not None and not (
            dims.same_shape(residual.shape, out)
            or (len(out) > 2 and dims.same_shape(residual.shape, (m, n)))):
        raise VkumdValueError(f"matmul: residual has shape {format_shape(residual.shape)}; it "
                              f"must be the output's {format_shape(out)} or [{m}, {n}]")
    return [TensorType(out, dt)]


def _matmul_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    a, b, bias, residual = args
    if attrs["trans_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["trans_b"]:
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b) * float(attrs["alpha"])
    if bias is not None:
        y = y + bias
    y = REFERENCE_ACTIVATIONS[attrs["activation"]](y)
    if residual is not None:
        y = y + residual
    return [np.broadcast_to(y, shapes[0]).copy()]


def _rows(a: Tensor, b: Tensor, residual: Tensor | None, out: Tensor, trans_a: bool) -> bool:
    """Whether ``a``'s batch can join its rows: a batched ``a`` (not transposed) times one
    2-D matrix shared by the batch is a single GEMM of ``batch * M`` rows."""
    return (a.ndim > 2 and b.ndim == 2 and not trans_a
            and (residual is None or residual.shape == out.shape))


def _matmul_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    a, b, bias, residual = ins
    at = attrs_of(node)
    out = outs[0]
    if _rows(a, b, residual, out, at["trans_a"]):
        # One GEMM, not batch entries of M rows each: short entries leave row tiles part
        # empty (batch entries measured 1.5x slower for short sentences on lavapipe).
        a = view(a, (a.size // a.shape[-1], a.shape[-1]))
        out = view(out, (out.size // out.shape[-1], out.shape[-1]))
        if residual is not None:
            residual = view(residual, out.shape)
    matmul(a, b, bias=bias, activation=at["activation"], residual=residual,
               alpha=at["alpha"], trans_a=at["trans_a"], trans_b=at["trans_b"], out=out)


define("matmul", ("a", "b", "bias?", "residual?"),
       {"trans_a": False, "trans_b": False, "activation": None, "alpha": 1.0},
       inplace=("residual",), rule=_matmul_rule, reference=_matmul_reference,
       lower=_matmul_lower, eager=matmul)
