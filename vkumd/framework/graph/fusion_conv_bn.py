"""Batch normalisation folded into the convolution before it.

At inference ``batch_norm(conv2d(x, w, b))`` is one affine map per output channel applied to
the convolution, so it is the convolution with rescaled weights and a shifted bias:
``w' = w * s`` and ``b' = (b - mean) * s + beta`` with ``s = gamma / sqrt(var + eps)``. The
pass computes ``w'`` and ``b'`` once, in float64, rounded once to the weights' dtype, and the
normalisation's launch and its pass over the feature map go (ONNX Runtime and ncnn fold the
same way when they load a model).

It folds when the convolution's result is read by the normalisation alone (and is no graph
output), the weights, the bias and every statistic are constants, and every ``s`` is finite:
a zero ``var + eps`` leaves the pair alone, so the unfused kernels give what they give.
"""

from __future__ import annotations

import numpy as np

from vkumd.framework.graph.fusion_rewrite import replace_group, sole_user
from vkumd.framework.graph.ir import Graph, Value, ValueKind
from vkumd.framework.graph.registry import OPS


def _constant(value: Value | None) -> np.ndarray | None:
    if value is None or value.kind is not ValueKind.WEIGHT or value.data is None:
        return None
    return np.asarray(value.data, np.float64)


def fold_batch_norm_into_conv(graph: Graph) -> Graph:
    """A copy of ``graph`` with each ``batch_norm`` of a one-reader constant-weight
    ``conv2d`` folded into the convolution's weights and bias.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for norm in list(g.nodes):
        if norm.op != "batch_norm":
            continue
        conv = norm.inputs[0].producer
        if conv is None or conv.op != "conv2d" or sole_user(g, conv.outputs[0]) is not norm:
            continue
        # An epilogue (activation, residual) comes after the affine map: not foldable.
        if conv.attrs.get("activation") is not None or conv.inputs[3] is not None:
            continue
        w, bias = _constant(conv.inputs[1]), conv.inputs[2]
        params = [_constant(v) for v in norm.inputs[1:]]
        if w is None or any(p is None for p in params):
            continue
        b = np.zeros(w.shape[0]) if bias is None else _constant(bias)
        if b is None:
            continue
        gamma, beta, mean, var = params
        eps = OPS["batch_norm"].full_attrs(norm.attrs)["eps"]
        with np.errstate(divide="ignore", invalid="ignore"):
            s = gamma / np.sqrt(var + eps)
        if not np.isfinite(s).all():
            continue
        dtype = conv.inputs[1].dtype
        base = conv.name or norm.name or f"conv{conv.id}"
        folded_w = g.add_weight(g.unique_name(f"{base}_w_bn"), w * s[:, None, None, None],
                                dtype)
        folded_b = g.add_weight(g.unique_name(f"{base}_b_bn"), (b - mean) * s + beta, dtype)
        replace_group(g, norm, [conv, norm], "conv2d", [conv.inputs[0], folded_w, folded_b],
                      conv.attrs)
    return g
