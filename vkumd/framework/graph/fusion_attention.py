"""Attention fusion: ``matmul(q, k^T) -> scale -> + mask -> softmax -> matmul(., v)`` becomes
one ``attention`` node, whose kernel never writes the scores to memory (ONNX Runtime's
Attention fusion, on the IR's ops).

The pattern, each value read only by the next op and none a graph output:

1. ``matmul(q, k, trans_b=True)`` without epilogue but any ``alpha``, q and k 4-D
   ``[batch, heads, seq, head_dim]`` (``q @ k.transpose(-2, -1)`` reaches this form through
   transpose folding); q or k may be scaled first (``(q * s) @ k^T``, a ``scale``, ``mul``
   or ``div`` by a number read only by this matmul): the factor joins the scale;
2. any number of ``scale``, ``mul`` by a one-element constant or ``div`` by one (their
   factors multiply into the attention's ``scale``);
3. optionally ``add`` of a mask that does not widen the scores (it becomes ``attn_mask``);
4. ``softmax`` over the last axis; its own ``scale`` multiplies in and its ``mask`` is the
   ``attn_mask``, unless step 3 gave one already (softmax scales the masked scores, so a mask
   added before a softmax scale is not the attention's form, and two masks would need an
   extra node: both cases stay unfused);
5. ``matmul(p, v)`` without transposes or epilogue, v of k's shape.

The attention kernel's limits (:mod:`vkumd.compiler.kernels.limits`) are checked too, so a
fused graph never asks for what the kernel cannot run: float32 or float16, head_dim a
multiple of 4 up to 256.
"""

from __future__ import annotations

from vkumd.compiler.kernels.limits import (
    ATTENTION_DTYPES,
    ATTENTION_HEAD_DIM_MULTIPLE,
    ATTENTION_MAX_HEAD_DIM,
)
from vkumd.framework.graph.fusion_rewrite import replace_group, scalar_weight, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value


def _plain_matmul(node: Node, trans_b: bool) -> bool:
    attrs = node.attrs
    return (node.op == "matmul" and node.inputs[2] is None and node.inputs[3] is None
            and attrs.get("activation") is None and not attrs.get("trans_a", False)
            and attrs.get("trans_b", False) is trans_b)


def _factor(graph: Graph, node: Node, y: Value) -> float | None:
    """The number ``node`` multiplies ``y`` (its one operand read once) by, if it scales it
    without changing its shape."""
    out = node.outputs[0]
    if out.dtype is not y.dtype or not graph.dims.same_shape(out.shape, y.shape):
        return None
    if node.op == "scale":
        return float(node.attrs.get("alpha", 1.0))
    if node.op == "mul":
        return scalar_weight(node.inputs[1] if node.inputs[0] is y else node.inputs[0])
    if node.op == "div" and node.inputs[0] is y and node.attrs.get("rounding") is None:
        number = scalar_weight(node.inputs[1])
        return None if not number else 1.0 / number
    return None


def _prescaled(graph: Graph, qk: Node, x: Value) -> tuple[Value, float, Node | None]:
    """``x`` unscaled: the value its producer scales by a number, the factor and the
    producer, when that producer is read only by ``qk``; else ``x``, 1 and None."""
    producer = x.producer
    if producer is None or sole_user(graph, x) is not qk:
        return x, 1.0, None
    tensors = [v for v in producer.inputs if v is not None and scalar_weight(v) is None]
    if len(tensors) != 1:
        return x, 1.0, None
    factor = _factor(graph, producer, tensors[0])
    if factor is None:
        return x, 1.0, None
    return tensors[0], factor, producer


def _head_dim_ok(graph: Graph, q: Value) -> bool:
    head_dim = graph.dims.resolve(q.shape[3])
    step = ATTENTION_HEAD_DIM_MULTIPLE
    return (isinstance(head_dim, int) and head_dim % step == 0
            and step <= head_dim <= ATTENTION_MAX_HEAD_DIM)


def _match(graph: Graph, qk: Node) -> tuple[list[Node], list[Value | None], float] | None:
    """The members, the attention's inputs and its scale, if ``qk`` starts the pattern."""
    if not _plain_matmul(qk, trans_b=True):
        return None
    q, k = qk.inputs[0], qk.inputs[1]
    assert q is not None and k is not None
    if q.type.ndim != 4 or k.type.ndim != 4 or q.dtype.name not in ATTENTION_DTYPES:
        return None
    if not _head_dim_ok(graph, q):
        return None
    members, scale, mask = [qk], float(qk.attrs.get("alpha", 1.0)), None
    q, q_factor, q_scaler = _prescaled(graph, qk, q)
    k, k_factor, k_scaler = _prescaled(graph, qk, k)
    scale *= q_factor * k_factor
    members += [n for n in (q_scaler, k_scaler) if n is not None]
    y, user = qk.outputs[0], sole_user(graph, qk.outputs[0])
    while user is not None and (factor := _factor(graph, user, y)) is not None:
        scale *= factor
        members.append(user)
        y, user = user.outputs[0], sole_user(graph, user.outputs[0])
    if user is not None and user.op == "add":
        other = user.inputs[1] if user.inputs[0] is y else user.inputs[0]
        if other is not y and graph.dims.same_shape(user.outputs[0].shape, y.shape):
            mask = other
            members.append(user)
            y, user = user.outputs[0], sole_user(graph, user.outputs[0])
    if user is None or user.op != "softmax" or user.inputs[0] is not y:
        return None
    if user.attrs.get("axis", -1) not in (-1, y.type.ndim - 1):
        return None  # a softmax over another axis than the keys' is no attention
    soft_scale, soft_mask = user.attrs.get("scale"), user.inputs[1]
    if mask is not None and (soft_mask is not None or soft_scale not in (None, 1.0)):
        return None
    scale *= 1.0 if soft_scale is None else float(soft_scale)
    mask = mask if mask is not None else soft_mask
    members.append(user)
    pv = sole_user(graph, user.outputs[0])
    if pv is None or not _plain_matmul(pv, trans_b=False) or pv.inputs[0] is not user.outputs[0]:
        return None
    if float(pv.attrs.get("alpha", 1.0)) != 1.0:
        return None
    v = pv.inputs[1]
    assert v is not None
    if v.type.ndim != 4 or not graph.dims.same_shape(v.shape, k.shape):
        return None
    members.append(pv)
    return members, [q, k, v, None, mask], scale


def fuse_attention(graph: Graph) -> Graph:
    """A copy of ``graph`` with each attention pattern (see the module docstring) replaced by
    one ``attention`` node with an explicit ``scale``.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    gone: set[int] = set()
    for node in list(g.nodes):
        if node.id in gone:
            continue
        found = _match(g, node)
        if found is None:
            continue
        members, inputs, scale = found
        replace_group(g, members[-1], members, "attention", inputs, {"scale": scale})
        gone.update(m.id for m in members)
    return g
