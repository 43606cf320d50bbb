"""The aten activations with parameters and the unary math set, each one IR op (a generated
elementwise kernel) on floating-point tensors; integer tensors stay with torch (the checks
refuse them). Registered into :data:`~.aten_map.HANDLERS` on import.
"""

from __future__ import annotations

import math
from typing import Any

from torch import fx

from vkumd.framework.frontends.torch.aten_map import aten, meta, on
from vkumd.framework.graph.ir import Value

_MATH = {aten.abs.default: "abs", aten.ceil.default: "ceil", aten.floor.default: "floor",
         aten.round.default: "round", aten.sign.default: "sign", aten.log.default: "log",
         aten.sin.default: "sin", aten.cos.default: "cos", aten.tan.default: "tan",
         aten.asin.default: "asin", aten.acos.default: "acos", aten.atan.default: "atan",
         aten.sinh.default: "sinh", aten.cosh.default: "cosh", aten.asinh.default: "asinh",
         aten.acosh.default: "acosh", aten.atanh.default: "atanh",
         aten.reciprocal.default: "reciprocal", aten.mish.default: "mish",
         aten.selu.default: "selu", aten.exp.default: "exp", aten.sqrt.default: "sqrt",
         aten.tanh.default: "tanh", aten.sigmoid.default: "sigmoid", aten.erf.default: "erf"}


def _floats(node: fx.Node) -> str | None:
    """Refuse a node whose input or result is not floating point (torch keeps it)."""
    first = node.args[0] if node.args else None
    for val in (meta(node), meta(first)):
        if val is None or not val.dtype.is_floating_point:
            return "needs floating-point tensors"
    return None


def _math(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.op(_MATH[node.target], x)


for _target in _MATH:
    on(_target, check=_floats)(_math)


@on(aten.hardsigmoid.default, check=_floats)
def _hardsigmoid(cv: Any, node: fx.Node, x: Value) -> Value:
    # torch's relu6(x + 3) / 6.
    return cv.b.op("hard_sigmoid", x, alpha=1.0 / 6.0, beta=0.5)


@on(aten.leaky_relu.default, check=_floats)
def _leaky_relu(cv: Any, node: fx.Node, x: Value, negative_slope: float = 0.01) -> Value:
    return cv.b.op("leaky_relu", x, alpha=float(negative_slope))


def _elu_check(node: fx.Node) -> str | None:
    input_scale = node.args[3] if len(node.args) > 3 else node.kwargs.get("input_scale", 1)
    return "input_scale other than 1" if input_scale != 1 else _floats(node)


@on(aten.elu.default, check=_elu_check)
def _elu(cv: Any, node: fx.Node, x: Value, alpha: float = 1.0, scale: float = 1.0,
         input_scale: float = 1.0) -> Value:
    if scale == 1:
        return cv.b.op("elu", x, alpha=float(alpha))
    return cv.b.op("selu", x, alpha=float(alpha), gamma=float(scale))


@on(aten.celu.default, check=_floats)
def _celu(cv: Any, node: fx.Node, x: Value, alpha: float = 1.0) -> Value:
    return cv.b.op("celu", x, alpha=float(alpha))


@on(aten.softplus.default, check=_floats)
def _softplus(cv: Any, node: fx.Node, x: Value, beta: float = 1.0,
              threshold: float = 20.0) -> Value:
    # Past torch's threshold softplus(x) and x differ by under e^-20 relative: the same
    # float32, so the threshold changes nothing but where the formula switches.
    if beta == 1:
        return cv.b.op("softplus", x)
    return cv.b.scale(cv.b.op("softplus", cv.b.scale(x, float(beta))), 1.0 / float(beta))


def _clamp_check(node: fx.Node) -> str | None:
    bounds = list(node.args[1:3]) + [node.kwargs.get(k) for k in ("min", "max")]
    if any(b is not None and not isinstance(b, (int, float)) for b in bounds):
        return "bounds must be numbers"
    return _floats(node)


@on(aten.clamp.default, aten.clip.default, check=_clamp_check)
def _clamp(cv: Any, node: fx.Node, x: Value, min: float | None = None,
           max: float | None = None) -> Value:
    lo = -math.inf if min is None else float(min)
    hi = math.inf if max is None else float(max)
    return cv.b.op("clip", x, min=lo, max=hi)


@on(aten.rsqrt.default, check=_floats)
def _rsqrt(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.op("reciprocal", cv.b.op("sqrt", x))


@on(aten.clamp_min.default, check=_clamp_check)
def _clamp_min(cv: Any, node: fx.Node, x: Value, min: float) -> Value:
    return cv.b.op("clip", x, min=float(min), max=math.inf)


@on(aten.clamp_max.default, check=_clamp_check)
def _clamp_max(cv: Any, node: fx.Node, x: Value, max: float) -> Value:
    return cv.b.op("clip", x, min=-math.inf, max=float(max))


@on(aten.hardtanh.default, check=_clamp_check)
def _hardtanh(cv: Any, node: fx.Node, x: Value, min_val: float = -1.0,
              max_val: float = 1.0) -> Value:
    return cv.b.op("clip", x, min=float(min_val), max=float(max_val))


@on(aten.relu6.default, check=_floats)
def _relu6(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.op("clip", x, min=0.0, max=6.0)


def _threshold_check(node: fx.Node) -> str | None:
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value")
    return "a replacement value other than 0" if value != 0 else _floats(node)


@on(aten.threshold.default, check=_threshold_check)
def _threshold(cv: Any, node: fx.Node, x: Value, threshold: float, value: float) -> Value:
    return cv.b.op("thresholded_relu", x, alpha=float(threshold))


def _prelu_check(node: fx.Node) -> str | None:
    weight = meta(node.args[1]) if len(node.args) > 1 else None
    if weight is None or weight.dim() != 1:
        return "weight must be 1-D"
    return _floats(node)


@on(aten.prelu.default, check=_prelu_check)
def _prelu(cv: Any, node: fx.Node, x: Value, weight: Value) -> Value:
    # torch's weight is per channel, dimension 1 (no channel dimension below 2-D).
    if len(x.shape) >= 2:
        weight = cv.b.reshape(weight, (weight.shape[0],) + (1,) * (len(x.shape) - 2))
    return cv.b.op("prelu", x, weight)


@on(aten._prelu_kernel.default, check=_floats)
def _prelu_kernel(cv: Any, node: fx.Node, x: Value, weight: Value) -> Value:
    return cv.b.op("prelu", x, weight)  # the weight is already shaped to broadcast
