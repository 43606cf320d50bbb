"""Layout, matrix and attention aten ops (handlers as in :mod:`.aten_map`)."""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx

from vkumd.framework.frontends.torch.aten_map import aten, meta, on
from vkumd.framework.frontends.torch.dims import is_static, shape_of
from vkumd.framework.graph.ir import Value

# -- views -----------------------------------------------------------------------------------


@on(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(cv: Any, node: fx.Node, x: Value, shape: Any) -> Value:
    return cv.b.reshape(x, list(shape))


@on(aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.flatten.using_ints,
    aten.squeeze.default)
def _reshaped(cv: Any, node: fx.Node, x: Value, *args: Any) -> Value:
    # Each of these only renames the shape: the result's own (fake) shape says which.
    return cv.b.reshape(x, list(shape_of(meta(node).shape)))


@on(aten.permute.default)
def _permute(cv: Any, node: fx.Node, x: Value, dims: Any) -> Value:
    return cv.b.permute(x, [int(d) for d in dims])


@on(aten.transpose.int)
def _transpose(cv: Any, node: fx.Node, x: Value, dim0: int, dim1: int) -> Value:
    return cv.b.transpose(x, dim0, dim1)


@on(aten.t.default)
def _t(cv: Any, node: fx.Node, x: Value) -> Value:
    return x if len(x.shape) < 2 else cv.b.transpose(x, 0, 1)


def _expand_check(node: fx.Node) -> str | None:
    source = meta(node.args[0])
    out = meta(node)
    if source is None or out is None:
        return "no shapes recorded"
    if tuple(source.shape) == tuple(out.shape) or is_static(out.shape):
        return None
    return "broadcasts to a symbolic shape"


@on(aten.expand.default, check=_expand_check)
def _expand(cv: Any, node: fx.Node, x: Value, sizes: Any, **kwargs: Any) -> Value:
    target = shape_of(meta(node).shape)
    if cv.b.graph.dims.same_shape(tuple(x.shape), target):
        return x
    # vkumd has no broadcast copy; adding zeros of the target shape is one (static shapes
    # only, checked above). Usually the consumer broadcasts anyway and this is rare.
    import numpy as np

    zeros = cv.b.constant(np.zeros([int(d) for d in target]), x.dtype, name="expand")
    return cv.b.add(x, zeros)


# -- lookups ---------------------------------------------------------------------------------

@on(aten.embedding.default)
def _embedding(cv: Any, node: fx.Node, table: Value, ids: Value, *args: Any) -> Value:
    # padding_idx only changes the gradient; the forward is a plain lookup.
    return cv.b.embedding(cv.cast_to_ir(ids, "int32"), table)


# -- matrices --------------------------------------------------------------------------------

def _split_transpose(cv: Any, b: Value) -> tuple[Value, bool]:
    """``b`` as (source, trans_b): a transpose of the last two axes folds into the matmul
    (``x @ W.t()`` reads W as stored; dead-code elimination drops the transpose)."""
    node = b.producer
    ndim = len(b.shape)
    if node is not None and node.op == "transpose" and ndim >= 2:
        dims = {node.attrs.get("dim0", 0) % ndim, node.attrs.get("dim1", 0) % ndim}
        if dims == {ndim - 2, ndim - 1}:
            return node.inputs[0], True
    return b, False


def _matmul_check(node: fx.Node) -> str | None:
    a, b = meta(node.args[0]), meta(node.args[1])
    if a is None or b is None:
        return "no shapes recorded"
    if not a.dtype.is_floating_point:
        return "multiplies non-float tensors"
    if b.dim() == 1 or a.dim() == 0:
        return "multiplies by a vector"
    if a.dim() > 2 and b.dim() > 2 and tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        return "broadcasts batch dimensions"
    if a.dim() == 2 and b.dim() > 2:
        return "multiplies a matrix by a batch"
    return None


def matmul(cv: Any, a: Value, b: Value, *, bias: Value | None = None, trans_b: bool = False,
           alpha: float = 1.0) -> Value:
    """``alpha * a @ op(b) + bias``, with ``a`` of one dimension handled as a row."""
    if not trans_b:
        b, trans_b = _split_transpose(cv, b)
    if len(a.shape) == 1:
        y = cv.b.matmul(cv.b.reshape(a, [1, a.shape[0]]), b, bias=bias, trans_b=trans_b,
                        alpha=alpha)
        return cv.b.reshape(y, list(y.shape[1:]))
    return cv.b.matmul(a, b, bias=bias, trans_b=trans_b, alpha=alpha)


@on(aten.mm.default, aten.bmm.default, aten.matmul.default, check=_matmul_check)
def _mm(cv: Any, node: fx.Node, a: Value, b: Value) -> Value:
    return matmul(cv, a, b)


def _linear_check(node: fx.Node) -> str | None:
    x = meta(node.args[0])
    if x is None or not x.dtype.is_floating_point:
        return "needs a float input"
    return None


@on(aten.linear.default, check=_linear_check)
def _linear(cv: Any, node: fx.Node, x: Value, w: Value, bias: Value | None = None) -> Value:
    return matmul(cv, x, w, bias=bias, trans_b=True)


def _addmm_check(node: fx.Node) -> str | None:
    if node.kwargs.get("beta", 1) != 1:
        return "beta != 1"
    return None


@on(aten.addmm.default, check=_addmm_check)
def _addmm(cv: Any, node: fx.Node, bias: Value, a: Value, b: Value, *, beta: Any = 1,
           alpha: Any = 1) -> Value:
    n = b.shape[-1]
    if len(bias.shape) == 1 and cv.b.graph.dims.same(bias.shape[0], n):
        return matmul(cv, a, b, bias=bias, alpha=float(alpha))
    return cv.b.add(matmul(cv, a, b, alpha=float(alpha)), bias)


# -- attention -------------------------------------------------------------------------------

def _attention_check(node: fx.Node) -> str | None:
    q = meta(node.args[0])
    if q is None or q.dim() != 4:
        return "attention over other than [batch, heads, seq, head_dim]"
    if q.dtype not in (torch.float32, torch.float16):
        return f"attention in {q.dtype}"
    mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
    if node.target == aten._scaled_dot_product_flash_attention_for_cpu.default:
        mask = node.kwargs.get("attn_mask")
        dropout = node.args[3] if len(node.args) > 3 else node.kwargs.get("dropout_p", 0.0)
    else:
        dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get("dropout_p", 0.0)
    if dropout:
        return "attention with dropout"
    mask_val = meta(mask)
    if mask_val is not None and not mask_val.dtype.is_floating_point:
        return "attention with a boolean mask"
    if node.kwargs.get("enable_gqa"):
        return "grouped-query attention flag"
    head_dim = q.shape[-1]
    if not is_static([head_dim]) or int(head_dim) % 4:
        return "head_dim not a static multiple of 4 (the attention kernel's limit)"
    return None


@on(aten.scaled_dot_product_attention.default, check=_attention_check)
def _sdpa(cv: Any, node: fx.Node, q: Value, k: Value, v: Value, attn_mask: Value | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
          **kwargs: Any) -> Value:
    if attn_mask is not None:
        attn_mask = cv.cast_to_ir(attn_mask, q.dtype.name)
    return cv.b.attention(q, k, v, causal=bool(is_causal), attn_mask=attn_mask, scale=scale)


@on(aten._scaled_dot_product_flash_attention_for_cpu.default, check=_attention_check,
    outputs=frozenset({0}))
def _sdpa_cpu(cv: Any, node: fx.Node, q: Value, k: Value, v: Value, dropout_p: float = 0.0,
              is_causal: bool = False, *, attn_mask: Value | None = None,
              scale: float | None = None) -> tuple[Any, ...]:
    return (_sdpa(cv, node, q, k, v, attn_mask, 0.0, is_causal, scale), None)


VIEW_TARGETS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints,
    aten.t.default, aten.clone.default, aten.alias.default, aten.detach.default,
    aten.contiguous.default, aten.lift_fresh_copy.default, aten.sym_size.int,
    operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv})
"""Targets that move or rename data without computing: a partition of only these stays in
torch (running it on vkumd would cost a copy in and out for nothing)."""
