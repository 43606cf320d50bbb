"""Pooling over NCHW tensors: ``max_pool2d`` (and its maxima's indices,
``max_pool2d_indices``), ``avg_pool2d``, ``lp_pool2d`` (``shaders/pool2d.comp``),
``global_avg_pool`` and ``global_max_pool`` (a mean or maximum over each plane, on the
row-reduction kernel).

The window geometry is the convolution's (:func:`~vkumd.framework.opset.conv.window_size`):
strides, dilation, four pads and ceil mode, where a last window must start inside the input
or its leading pad (ONNX and torch agree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import POOL_DTYPES
from vkumd.compiler.kernels.pool import POOL_CODES, pool2d_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, real
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.conv import int_tuple, window_size
from vkumd.framework.opset.layout import reshape
from vkumd.framework.opset.reductions import max as row_max
from vkumd.framework.opset.reductions import mean
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}


def _need_nchw(op: str, x: TensorType) -> None:
    if x.dtype.name not in POOL_DTYPES:
        raise VkumdTypeError(f"{op}: x is {x.dtype.name}; {op} takes {', '.join(POOL_DTYPES)} "
                             "(cast() converts)")
    if x.ndim != 4:
        raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; {op} takes "
                              "[N, C, H, W] (reshape 1-D to height 1)")


def _geometry(op: str, attrs: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    kernel = int_tuple(op, attrs["kernel"], "kernel", 2, 1)
    stride = kernel if attrs["stride"] is None else int_tuple(op, attrs["stride"], "stride",
                                                              2, 1)
    dilation = int_tuple(op, attrs["dilation"], "dilation", 2, 1)
    pads = int_tuple(op, attrs["pads"], "pads (top, left, bottom, right)", 4, 0)
    for i, axis in ((0, "height"), (1, "width")):
        span = dilation[i] * (kernel[i] - 1) + 1
        if max(pads[i], pads[i + 2]) >= span:
            raise VkumdValueError(f"{op}: pads={pads} along {axis} reach {span} or more, the "
                                  "kernel's span, so a window would hold padding only; pad "
                                  "less than the kernel")
    flag(op, attrs["ceil_mode"], "ceil_mode")
    return kernel, stride, dilation, pads


def _pool_rule(op: str) -> Any:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = ins[0]
        assert x is not None  # required input
        _need_nchw(op, x)
        kernel, stride, dilation, pads = _geometry(op, attrs)
        if op == "avg_pool2d":
            flag(op, attrs["count_include_pad"], "count_include_pad")
        if op == "lp_pool2d" and real(op, attrs["p"], "p") <= 0:
            raise VkumdValueError(f"{op}: p={attrs['p']!r}; the exponent must be > 0")
        indices = op == "max_pool2d_indices"
        if indices and attrs["storage_order"] not in (0, 1):
            raise VkumdValueError(f"{op}: storage_order={attrs['storage_order']!r}; it is 0 "
                                  "(row-major) or 1 (column-major)")
        ceil = bool(attrs["ceil_mode"])
        oh = window_size(op, dims.resolve(x.shape[2]), kernel[0], stride[0], dilation[0],
                         pads[0], pads[2], "height", ceil)
        ow = window_size(op, dims.resolve(x.shape[3]), kernel[1], stride[1], dilation[1],
                         pads[1], pads[3], "width", ceil)
        return [TensorType((x.shape[0], x.shape[1], oh, ow),
                           dtypes.int32 if indices else x.dtype)]
    return rule


def _pool(op: str, x: Tensor, attrs: dict[str, Any], out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    key = (op, x.shape, x.dtype.name, *(v if not isinstance(v, list) else tuple(v)
                                        for v in attrs.values()))
    out_type = recall(_VERDICTS, key)
    if out_type is None:
        out_type = remember(_VERDICTS, key, concrete_rule(op, (x,), attrs)[0])
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    shape = tuple(int(d) for d in out_type.shape)
    out = output(op, x.context, out, shape, out_type.dtype, (x,))
    if out.size == 0:
        return out
    kernel, stride, dilation, pads = _geometry(op, attrs)
    indices = attrs.get("storage_order") if op == "max_pool2d_indices" else None
    plan = pool2d_plan(x.context.caps, POOL_CODES[x.dtype.name], x.shape[0] * x.shape[1],
                       x.shape[2:], shape[2:], kernel, stride, dilation, pads,
                       "max" if indices is not None else op.removesuffix("_pool2d"),
                       bool(attrs.get("count_include_pad", False)),
                       float(attrs.get("p", 2.0)), indices)
    x.context.run(plan, (x, out))
    return out


def max_pool2d(x: Tensor, kernel: tuple[int, int], *, stride: tuple[int, int] | None = None,
               dilation: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
               ceil_mode: bool = False, out: Tensor | None = None) -> Tensor:
    """The maximum of each window of NCHW ``x`` (NaN when the window holds one); padding
    never wins.

    Args:
        x: ``[N, C, H, W]`` float32 or float16.
        kernel: window (height, width), each >= 1.
        stride: (height, width) steps; None: the kernel (torch's default).
        dilation: spacing of the window's taps.
        pads: (top, left, bottom, right), each >= 0 and below the kernel's span.
        ceil_mode: round the output size up (a last partial window is kept).
        out: optional output of the pooled shape and x's dtype.

    Returns:
        The pooled tensor ``[N, C, H_out, W_out]``.

    Raises:
        VkumdTypeError: an unsupported dtype; attributes of the wrong type.
        VkumdValueError: x not 4-D; sizes, strides or dilation below 1; negative pads or pads
            reaching the kernel's span; a window larger than the padded input; out of another
            shape.
    """
    return _pool("max_pool2d", x, {"kernel": kernel, "stride": stride, "dilation": dilation,
                                   "pads": pads, "ceil_mode": ceil_mode}, out)


def avg_pool2d(x: Tensor, kernel: tuple[int, int], *, stride: tuple[int, int] | None = None,
               dilation: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
               ceil_mode: bool = False, count_include_pad: bool = False,
               out: Tensor | None = None) -> Tensor:
    """The mean of each window of NCHW ``x``.

    Args:
        x: ``[N, C, H, W]`` float32 or float16.
        kernel: window (height, width), each >= 1.
        stride: (height, width) steps; None: the kernel (torch's default).
        dilation: spacing of the window's taps.
        pads: (top, left, bottom, right), each >= 0 and below the kernel's span.
        ceil_mode: round the output size up (a last partial window is kept).
        count_include_pad: divide by the window's taps inside the padded input (pads
            counted, a ceil-mode overhang not) instead of those inside the input. False is
            ONNX's default (torch's is True).
        out: optional output of the pooled shape and x's dtype.

    Returns:
        The pooled tensor ``[N, C, H_out, W_out]``.

    Raises:
        VkumdTypeError: an unsupported dtype; attributes of the wrong type.
        VkumdValueError: as :func:`max_pool2d`.
    """
    return _pool("avg_pool2d", x, {"kernel": kernel, "stride": stride, "dilation": dilation,
                                   "pads": pads, "ceil_mode": ceil_mode,
                                   "count_include_pad": count_include_pad}, out)


def max_pool2d_indices(x: Tensor, kernel: tuple[int, int], *,
                       stride: tuple[int, int] | None = None,
                       dilation: tuple[int, int] = (1, 1),
                       pads: tuple[int, int, int, int] = (0, 0, 0, 0), ceil_mode: bool = False,
                       storage_order: int = 0, out: Tensor | None = None) -> Tensor:
    """Where :func:`max_pool2d`'s maxima are: the flat int32 index into ``x`` of each
    window's first maximum (taps in row-major order), as ONNX MaxPool's ``Indices``.

    Args:
        x: ``[N, C, H, W]`` float32 or float16 with fewer than 2**31 elements.
        kernel, stride, dilation, pads, ceil_mode: as :func:`max_pool2d`.
        storage_order: 0: ``((n * C + c) * H + h) * W + w``; 1 (column-major planes):
            ``(n * C + c) * H * W + w * H + h``.
        out: optional int32 output of the pooled shape.

    Returns:
        The int32 indices ``[N, C, H_out, W_out]``.

    Raises:
        VkumdTypeError: an unsupported dtype; attributes of the wrong type.
        VkumdValueError: as :func:`max_pool2d`; storage_order not 0 or 1; x of 2**31
            elements or more.
    """
    return _pool("max_pool2d_indices", x, {"kernel": kernel, "stride": stride,
                                           "dilation": dilation, "pads": pads,
                                           "ceil_mode": ceil_mode,
                                           "storage_order": storage_order}, out)


def max_indices_reference(x: np.ndarray, kernel: Any, stride: Any, dilation: Any, pads: Any,
                          ceil_mode: bool, storage_order: int) -> np.ndarray:
    """The float64 flat indices of each window's first maximum (row-major taps)."""
    x = np.asarray(x, np.float64)
    stride = kernel if stride is None else stride
    n, c, h, w = x.shape
    sizes = [window_size("max_pool2d_indices", size, kernel[i], stride[i], dilation[i],
                         pads[i], pads[i + 2], "axis", ceil_mode)
             for i, size in ((0, h), (1, w))]
    out = np.empty((n, c, *sizes), np.int64)
    planes = np.arange(n * c).reshape(n, c) * h * w
    for i in range(sizes[0]):
        ys = i * stride[0] - pads[0] + dilation[0] * np.arange(kernel[0])
        ys = ys[(ys >= 0) & (ys < h)]
        for j in range(sizes[1]):
            xs = j * stride[1] - pads[1] + dilation[1] * np.arange(kernel[1])
            xs = xs[(xs >= 0) & (xs < w)]
            yy, xx = (a.reshape(-1) for a in np.meshgrid(ys, xs, indexing="ij"))
            first = x[:, :, yy, xx].argmax(axis=2)
            at = xx[first] * h + yy[first] if storage_order else yy[first] * w + xx[first]
            out[:, :, i, j] = planes + at
    return out


def lp_pool2d(x: Tensor, kernel: tuple[int, int], *, p: float = 2.0,
              stride: tuple[int, int] | None = None, dilation: tuple[int, int] = (1, 1),
              pads: tuple[int, int, int, int] = (0, 0, 0, 0), ceil_mode: bool = False,
              out: Tensor | None = None) -> Tensor:
    """The Lp norm ``(sum |x|^p)^(1/p)`` of each window of NCHW ``x`` (ONNX LpPool; padding
    adds zeros).

    Args:
        x: ``[N, C, H, W]`` float32 or float16.
        kernel: window (height, width), each >= 1.
        p: the exponent, > 0 (ONNX's default 2).
        stride: (height, width) steps; None: the kernel (torch's default).
        dilation: spacing of the window's taps.
        pads: (top, left, bottom, right), each >= 0 and below the kernel's span.
        ceil_mode: round the output size up (a last partial window is kept).
        out: optional output of the pooled shape and x's dtype.

    Returns:
        The pooled tensor ``[N, C, H_out, W_out]``.

    Raises:
        VkumdTypeError: an unsupported dtype; attributes of the wrong type.
        VkumdValueError: as :func:`max_pool2d`; p <= 0.
    """
    return _pool("lp_pool2d", x, {"kernel": kernel, "p": p, "stride": stride,
                                  "dilation": dilation, "pads": pads,
                                  "ceil_mode": ceil_mode}, out)


def pool2d_reference(x: np.ndarray, op: str, kernel: Any, stride: Any, dilation: Any,
                     pads: Any, ceil_mode: bool, count_include_pad: bool = False,
                     p: float = 2.0) -> np.ndarray:
    """The float64 pooling, one output element's window at a time."""
    x = np.asarray(x, np.float64)
    stride = kernel if stride is None else stride
    n, c, h, w = x.shape
    sizes = []
    for i, size in ((0, h), (1, w)):
        sizes.append(window_size(op, size, kernel[i], stride[i], dilation[i], pads[i],
                                 pads[i + 2], "axis", ceil_mode))
    out = np.empty((n, c, *sizes))
    for i in range(sizes[0]):
        ys = i * stride[0] - pads[0] + dilation[0] * np.arange(kernel[0])
        ys = ys[ys < h + pads[2]]
        for j in range(sizes[1]):
            xs = j * stride[1] - pads[1] + dilation[1] * np.arange(kernel[1])
            xs = xs[xs < w + pads[3]]
            yi, xi = ys[(ys >= 0) & (ys < h)], xs[(xs >= 0) & (xs < w)]
            window = x[:, :, yi][:, :, :, xi].reshape(n, c, -1)
            if op == "max_pool2d":
                out[:, :, i, j] = window.max(axis=2)
            elif op == "lp_pool2d":
                out[:, :, i, j] = (np.abs(window) ** p).sum(axis=2) ** (1.0 / p)
            else:
                count = len(ys) * len(xs) if count_include_pad else window.shape[2]
                out[:, :, i, j] = window.sum(axis=2) / count
    return out


def _lower(op: str) -> Any:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        at = dict(attrs_of(node))
        _pool(op, ins[0], at, outs[0])
    return lower


_WINDOW = {"kernel": REQUIRED, "stride": None, "dilation": (1, 1), "pads": (0, 0, 0, 0),
           "ceil_mode": False}
define("max_pool2d", ("x",), _WINDOW, rule=_pool_rule("max_pool2d"),
       reference=lambda a, at, s: [pool2d_reference(a[0], "max_pool2d", at["kernel"],
                                                    at["stride"], at["dilation"], at["pads"],
                                                    at["ceil_mode"])],
       lower=_lower("max_pool2d"), eager=max_pool2d)
define("avg_pool2d", ("x",), {**_WINDOW, "count_include_pad": False},
       rule=_pool_rule("avg_pool2d"),
       reference=lambda a, at, s: [pool2d_reference(a[0], "avg_pool2d", at["kernel"],
                                                    at["stride"], at["dilation"], at["pads"],
                                                    at["ceil_mode"],
                                                    at["count_include_pad"])],
       lower=_lower("avg_pool2d"), eager=avg_pool2d)
define("max_pool2d_indices", ("x",), {**_WINDOW, "storage_order": 0},
       rule=_pool_rule("max_pool2d_indices"),
       reference=lambda a, at, s: [max_indices_reference(
           a[0], at["kernel"], at["stride"], at["dilation"], at["pads"], at["ceil_mode"],
           at["storage_order"])],
       lower=_lower("max_pool2d_indices"), eager=max_pool2d_indices)
define("lp_pool2d", ("x",), {**_WINDOW, "p": 2.0},
       rule=_pool_rule("lp_pool2d"),
       reference=lambda a, at, s: [pool2d_reference(a[0], "lp_pool2d", at["kernel"],
                                                    at["stride"], at["dilation"], at["pads"],
                                                    at["ceil_mode"], p=at["p"])],
       lower=_lower("lp_pool2d"), eager=lp_pool2d)


def _global(op: str, x: Tensor, out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    key = (op, x.shape, x.dtype.name)
    if recall(_VERDICTS, key) is None:
        remember(_VERDICTS, key, concrete_rule(op, (x,), {})[0])
    n, c, h, w = x.shape
    out = output(op, x.context, out, (n, c, 1, 1), x.dtype, (x,))
    if out.size == 0:
        return out
    reduce = mean if op == "global_avg_pool" else row_max
    reduce(reshape(x, (n, c, h * w)), keepdims=True, out=reshape(out, (n, c, 1)))
    return out


def global_avg_pool(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """The mean of each ``[H, W]`` plane of NCHW ``x``, kept as ``[N, C, 1, 1]``: the row
    mean over a view of ``x`` as ``[N, C, H * W]``.

    Args:
        x: ``[N, C, H, W]`` float32 or float16 with ``H * W >= 1``.
        out: optional ``[N, C, 1, 1]`` output of x's dtype.

    Returns:
        The plane means ``[N, C, 1, 1]``.

    Raises:
        VkumdTypeError: an unsupported dtype.
        VkumdValueError: x not 4-D or with empty planes; out of another shape.
    """
    return _global("global_avg_pool", x, out)


def global_max_pool(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """The maximum of each ``[H, W]`` plane of NCHW ``x``, kept as ``[N, C, 1, 1]``: the row
    maximum over a view of ``x`` as ``[N, C, H * W]`` (ONNX GlobalMaxPool).

    Args:
        x: ``[N, C, H, W]`` float32 or float16 with ``H * W >= 1``.
        out: optional ``[N, C, 1, 1]`` output of x's dtype.

    Returns:
        The plane maxima ``[N, C, 1, 1]``.

    Raises:
        VkumdTypeError: an unsupported dtype.
        VkumdValueError: x not 4-D or with empty planes; out of another shape.
    """
    return _global("global_max_pool", x, out)


def _global_rule(op: str) -> Any:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = ins[0]
        assert x is not None  # required input
        _need_nchw(op, x)
        for d in x.shape[2:]:
            if dims.resolve(d) == 0:
                raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; an empty "
                                      "plane has no mean or maximum")
        return [TensorType((x.shape[0], x.shape[1], 1, 1), x.dtype)]
    return rule


define("global_avg_pool", ("x",), rule=_global_rule("global_avg_pool"),
       reference=lambda a, at, s: [np.asarray(a[0], np.float64).mean(axis=(2, 3),
                                                                       keepdims=True)],
       lower=lambda node, ins, outs: global_avg_pool(ins[0], out=outs[0]),
       eager=global_avg_pool)
define("global_max_pool", ("x",), rule=_global_rule("global_max_pool"),
       reference=lambda a, at, s: [np.asarray(a[0], np.float64).max(axis=(2, 3),
                                                                      keepdims=True)],
       lower=lambda node, ins, outs: global_max_pool(ins[0], out=outs[0]),
       eager=global_max_pool)
