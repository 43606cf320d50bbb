"""aten handlers of 2-D convolution, pooling and inference batch norm (``nn.Conv2d``,
``nn.MaxPool2d``, ``nn.AvgPool2d``, ``nn.AdaptiveAvgPool2d(1)``, ``nn.BatchNorm2d`` in
``eval()``), both as ``torch.export`` keeps them (``aten.conv2d``, ``aten.batch_norm``) and
as its decompositions leave them (``aten.convolution`` is in :mod:`aten_vision`). Each
appends one IR node.
"""

from __future__ import annotations

import operator
from typing import Any

from torch import fx

from vkumd.framework.frontends.torch.aten_map import arg, aten, meta, on
from vkumd.framework.graph.ir import Value


def _float_4d_input(node: fx.Node) -> str | None:
    x = meta(node.args[0]) if node.args else None
    if x is None or not x.dtype.is_floating_point or x.dim() != 4:
        return "needs a 4-D floating-point input"
    return None


def _pair(value: Any, default: Any = None) -> tuple[int, int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        value = default
    if isinstance(value, int):
        return (value, value)
    return (int(value[0]), int(value[-1]))


def _window(kernel: Any, stride: Any, padding: Any) -> dict[str, Any]:
    k = _pair(kernel)
    p = _pair(padding, 0)
    return {"kernel": k, "stride": _pair(stride, k), "pads": (p[0], p[1], p[0], p[1])}


def _max_check(node: fx.Node) -> str | None:
    if any(u.target is operator.getitem and u.args[1] == 1 for u in node.users):
        return "reads the indices output (vkumd's max_pool2d returns values only)"
    return _float_4d_input(node)


def _max_pool(cv: Any, node: fx.Node, x: Value, kernel: Any, stride: Any = None,
              padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Value:
    return cv.b.max_pool2d(x, **_window(kernel, stride, padding), dilation=_pair(dilation),
                           ceil_mode=bool(ceil_mode))


on(aten.max_pool2d.default, check=_float_4d_input)(_max_pool)


@on(aten.max_pool2d_with_indices.default, check=_max_check, outputs=frozenset({0}))
def _max_pool_indices(cv: Any, node: fx.Node, x: Value, *args: Any) -> tuple[Any, ...]:
    return (_max_pool(cv, node, x, *args), None)


def _avg_check(node: fx.Node) -> str | None:
    if arg(node, 6, "divisor_override") is not None:
        return "divisor_override (vkumd divides by the window or its part inside the input)"
    return _float_4d_input(node)


@on(aten.avg_pool2d.default, check=_avg_check)
def _avg_pool(cv: Any, node: fx.Node, x: Value, kernel: Any, stride: Any = None,
              padding: Any = 0, ceil_mode: bool = False, count_include_pad: bool = True,
              divisor_override: Any = None) -> Value:
    return cv.b.avg_pool2d(x, **_window(kernel, stride, padding), ceil_mode=bool(ceil_mode),
                           count_include_pad=bool(count_include_pad))


def _global_check(node: fx.Node) -> str | None:
    if tuple(arg(node, 1, "output_size", ())) != (1, 1):
        return "output size other than 1 x 1 (vkumd maps the global average)"
    return _float_4d_input(node)


@on(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default,
    check=_global_check)
def _global_avg(cv: Any, node: fx.Node, x: Value, output_size: Any) -> Value:
    return cv.b.global_avg_pool(x)


def _bn_check(node: fx.Node) -> str | None:
    if any(arg(node, i, n) is None for i, n in ((1, "weight"), (2, "bias"),
                                                   (3, "running_mean"), (4, "running_var"))):
        return "needs weight, bias and running statistics"
    return _float_4d_input(node)


@on(aten._native_batch_norm_legit_no_training.default, check=_bn_check,
    outputs=frozenset({0}))
def _batch_norm(cv: Any, node: fx.Node, x: Value, weight: Value, bias: Value, mean: Value,
                var: Value, momentum: float, eps: float) -> tuple[Any, ...]:
    return (cv.b.batch_norm(x, weight, bias, mean, var, eps=float(eps)), None, None)


def _bn_eval_check(node: fx.Node) -> str | None:
    if arg(node, 5, "training", False):
        return "training mode (vkumd normalises with the running statistics)"
    return _bn_check(node)


@on(aten.batch_norm.default, check=_bn_eval_check)
def _batch_norm_eval(cv: Any, node: fx.Node, x: Value, weight: Value, bias: Value,
                     mean: Value, var: Value, training: bool, momentum: float, eps: float,
                     *rest: Any) -> Value:
    return cv.b.batch_norm(x, weight, bias, mean, var, eps=float(eps))


def _conv_check(node: fx.Node) -> str | None:
    if isinstance(arg(node, 4, "padding", 0), str):
        return "padding given as a string (vkumd takes explicit pads)"
    return _float_4d_input(node)


@on(aten.conv2d.default, check=_conv_check)
def _conv2d(cv: Any, node: fx.Node, x: Value, w: Value, bias: Value | None = None,
            stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Value:
    p = _pair(padding, 0)
    return cv.b.conv2d(x, w, bias, stride=_pair(stride), dilation=_pair(dilation),
                       pads=(p[0], p[1], p[0], p[1]), groups=int(groups))
