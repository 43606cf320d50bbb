"""Convolution epilogue fusion: the ops after a ``conv2d`` that its kernels apply as they
store the result (:mod:`vkumd.framework.opset.conv_epilogue`).

The convolution computes ``act(conv + bias) + residual``, or ``act(conv + bias + residual)``.
Walking down from a float ``conv2d`` through values with one reader each (no graph outputs),
each op joins while the result stays one of those forms:

* ``add`` of a constant of one value per output channel (``[C_out, 1, 1]`` or
  ``[1, C_out, 1, 1]``) or of one value for all is added to the bias (itself constant or
  absent) while there is no activation or residual yet;
* ``mul`` by such a constant, or ``scale``, multiplies the (constant) weights and the bias
  while there is no activation or residual yet (PP-OCRv4's learnable affine blocks write
  ``conv * a + b`` before each activation);
* an activation of ``EPILOGUE_ACTIVATIONS`` (relu, clip, hardswish, leaky_relu, sigmoid, silu,
  ...), with its attributes as parameters, while there is none yet and no residual after it;
* ``add`` of another value of the output's shape and dtype is the residual while there is
  none: before the activation when one follows, after it when one came before.

Anything else ends the walk. Every joined op keeps the output's shape and dtype, so the fused
``conv2d`` is a drop-in replacement; its launches and its passes over the feature map go.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from vkumd.compiler.kernels.limits import EPILOGUE_ACTIVATIONS
from vkumd.framework.graph.fusion_rewrite import replace_group, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.operands import FLOATS
from vkumd.framework.graph.registry import OPS


@dataclass(frozen=True)
class ConvEpilogue:
    """A convolution's epilogue so far: its sum becomes ``conv * scale + bias * scale +
    bias_add`` (``scale`` None: 1, per output channel), then the activation and residual."""

    scale: np.ndarray | None
    bias_add: np.ndarray | None
    activation: str | None
    params: tuple[float, ...]
    residual: Value | None
    residual_first: bool


def _channel_constant(value: Value, c_out: int) -> np.ndarray | None:
    """The ``[C_out]`` values of a per-channel or one-value float constant, else None."""
    if value.kind is not ValueKind.WEIGHT or value.data is None or not value.dtype.is_float:
        return None
    shape = tuple(value.data.shape)
    data = np.asarray(value.data, np.float64)
    if len(shape) <= 4 and all(d == 1 for d in shape):
        return np.full(c_out, float(data.reshape(-1)[0]))
    if shape not in ((c_out, 1, 1), (1, c_out, 1, 1)):
        return None
    return data.reshape(c_out)


def _scaled(conv: Node, epilogue: ConvEpilogue, factor: np.ndarray) -> ConvEpilogue | None:
    """``epilogue`` with its sum multiplied by ``factor`` (per output channel), or None
    when the weights or the bias are not constants the pass can multiply."""
    w = conv.inputs[1]
    if (w is None or w.kind is not ValueKind.WEIGHT or w.data is None
            or _bias_constant(conv) is None):
        return None
    scale = factor if epilogue.scale is None else epilogue.scale * factor
    bias_add = None if epilogue.bias_add is None else epilogue.bias_add * factor
    return replace(epilogue, scale=scale, bias_add=bias_add)


def _absorb(graph: Graph, conv: Node, epilogue: ConvEpilogue, y: Value, user: Node
            ) -> ConvEpilogue | None:
    """``epilogue`` with ``user`` (the one reader of ``y``) folded in, or None."""
    out = user.outputs[0]
    if out.dtype is not y.dtype or not graph.dims.same_shape(out.shape, y.shape):
        return None
    op = user.op
    if op in EPILOGUE_ACTIVATIONS and epilogue.activation is None:
        attrs = OPS[op].full_attrs(user.attrs)
        params = tuple(float(attrs[name]) for name in EPILOGUE_ACTIVATIONS[op][1])
        return replace(epilogue, activation=op, params=params,
                       residual_first=epilogue.residual is not None)
    untouched = epilogue.activation is None and epilogue.residual is None
    if op == "scale" and untouched:
        alpha = float(OPS[op].full_attrs(user.attrs)["alpha"])
        return _scaled(conv, epilogue, np.full(int(y.shape[1]), alpha))
    if op not in ("add", "mul"):
        return None
    a, b = user.inputs[0], user.inputs[1]
    other = b if a is y else a
    assert other is not None
    if op == "mul":
        factor = _channel_constant(other, int(y.shape[1]))
        return None if factor is None or not untouched else _scaled(conv, epilogue, factor)
    bias = _channel_constant(other, int(y.shape[1]))
    if bias is not None and untouched and _bias_constant(conv) is not None:
        total = bias if epilogue.bias_add is None else epilogue.bias_add + bias
        return replace(epilogue, bias_add=total)
    if (epilogue.residual is None and other is not y and other.dtype is y.dtype
            and graph.dims.same_shape(other.shape, y.shape)):
        return replace(epilogue, residual=other)
    return None


def _bias_constant(conv: Node) -> np.ndarray | None:
    """The convolution's bias as float64 (zeros when absent), or None when not constant."""
    bias = conv.inputs[2]
    if bias is None:
        return np.zeros(int(conv.inputs[1].shape[0]))  # type: ignore[union-attr]
    if bias.kind is not ValueKind.WEIGHT or bias.data is None:
        return None
    return np.asarray(bias.data, np.float64)


def fuse_conv_epilogue(graph: Graph) -> Graph:
    """A copy of ``graph`` where each float ``conv2d`` without an epilogue yet takes the bias
    additions, activation and residual after it (see the module docstring).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for node in list(g.nodes):
        if (node.op != "conv2d" or node.outputs[0].dtype.name not in FLOATS
                or node.attrs.get("activation") is not None
                or (len(node.inputs) > 3 and node.inputs[3] is not None)):
            continue
        epilogue = ConvEpilogue(None, None, None, (), None, False)
        members, last = [node], node
        while True:
            user = sole_user(g, last.outputs[0])
            grown = None if user is None else _absorb(g, node, epilogue, last.outputs[0], user)
            if grown is None:
                break
            epilogue, last = grown, user  # type: ignore[assignment]
            members.append(last)
        if len(members) == 1:
            continue
        weights, bias = node.inputs[1], node.inputs[2]
        assert weights is not None
        base_name = node.name or f"conv{node.id}"
        if epilogue.scale is not None:
            assert weights.data is not None  # checked when the factor joined
            scaled = np.asarray(weights.data, np.float64) * epilogue.scale.reshape(
                (-1,) + (1,) * (weights.data.ndim - 1))
            weights = g.add_weight(g.unique_name(f"{base_name}_w"), scaled, weights.dtype)
        if epilogue.bias_add is not None or epilogue.scale is not None:
            base = _bias_constant(node)
            assert base is not None  # checked when the addition or factor joined
            if epilogue.scale is not None:
                base = base * epilogue.scale
            if epilogue.bias_add is not None:
                base = base + epilogue.bias_add
            bias = g.add_weight(g.unique_name(f"{base_name}_bias"), base, weights.dtype)
        attrs = dict(node.attrs)
        attrs.update(activation=epilogue.activation, activation_params=epilogue.params,
                     residual_first=epilogue.residual_first)
        replace_group(g, last, members, "conv2d",
                      [node.inputs[0], weights, bias, epilogue.residual], attrs)
    return g
