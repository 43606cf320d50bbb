"""Converters of the vision operators: Conv (and, as they land, pooling and normalisation).

ONNX writes 1-D and 2-D convolutions alike over ``[N, C, *spatial]``; vkumd's kernels take
2-D, so a 1-D node runs as a height-1 2-D one (reshapes around it, free in a graph).
``auto_pad`` is resolved here into explicit pads (top, left, bottom, right).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Dim, Value
from vkumd.framework.graph.dims import constant_part, divide_exact

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _spatial(op: str, x: Value) -> int:
    rank = len(x.shape)
    if rank not in (3, 4):
        raise Unsupported(f"{op} of a rank-{rank} input: vkumd takes 1-D and 2-D "
                          "([N, C, L] or [N, C, H, W])")
    return rank - 2


def _ints(attrs: dict[str, Any], name: str, count: int, default: int) -> list[int]:
    values = [int(v) for v in attrs.get(name, [default] * count)]
    if len(values) != count:
        raise Unsupported(f"{name}={values} has {len(values)} entries for {count} spatial "
                          "dimension(s)")
    return values


def explicit_pads(attrs: dict[str, Any], sizes: tuple[Any, ...], kernel: list[int],
                  strides: list[int], dilations: list[int]) -> list[int]:
    """ONNX's pads ``[begin..., end...]`` after resolving ``auto_pad``.

    Raises:
        Unsupported: an unknown auto_pad; SAME padding of a symbolic size at a stride > 1.
    """
    n = len(kernel)
    mode = attrs.get("auto_pad", "NOTSET")
    if mode not in AUTO_PADS:
        raise Unsupported(f"auto_pad={mode!r}; ONNX defines {', '.join(AUTO_PADS)}")
    if mode == "VALID":
        return [0] * (2 * n)
    if mode == "NOTSET":
        pads = _ints(attrs, "pads", 2 * n, 0)
        if any(p < 0 for p in pads):
            raise Unsupported(f"pads={pads}: negative pads are not supported")
        return pads
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        span = (k - 1) * d + 1
        if isinstance(size, Dim):
            # SAME pads ceil(size/s)*s - s + span - size in all; with size = v + c and s
            # dividing v's coefficients, v cancels (window_size's argument), leaving c's.
            c = constant_part(size)
            if divide_exact(size - c, s) is None:
                raise Unsupported(f"auto_pad={mode} of the symbolic size {size} at stride {s} "
                                  "(declare the size a multiple of the stride, e.g. "
                                  "dynamic={input: {axis: '32*h'}}, or bind it)")
            total = max(0, (-(-c // s) - 1) * s + span - c)
        else:
            total = max(0, (-(-size // s) - 1) * s + span - size)
        small = total // 2
        begin.append(small if mode == "SAME_UPPER" else total - small)
        end.append(total - small if mode == "SAME_UPPER" else small)
    return begin + end


def _as_2d(st: State, v: Value, one_d: bool) -> Value:
    if not one_d:
        return v
    return st.b.reshape(v, (*v.shape[:2], 1, v.shape[2]))


def _pads_2d(pads: list[int], one_d: bool) -> tuple[int, int, int, int]:
    if one_d:
        return (0, pads[0], 0, pads[1])
    return (pads[0], pads[1], pads[2], pads[3])


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def conv(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Convolution with optional bias, 1-D or 2-D, groups included."""
    x, w = st.value(node.input[0]), st.value(node.input[1])
    bias = st.value(node.input[2]) if st.present(node, 2) else None
    return [conv_of(st, x, w, bias, attrs)]


def conv_of(st: State, x: Value, w: Value, bias: Value | None, attrs: dict[str, Any]
            ) -> Value:
    """Conv's body on graph values (ConvInteger and QLinearConv reuse it)."""
    n = _spatial("Conv", x)
    if len(w.shape) != n + 2:
        raise Unsupported(f"Conv weight of shape {tuple(w.shape)} for a {n}-D convolution")
    kernel = [int(k) for k in w.shape[2:]]
    if "kernel_shape" in attrs and [int(k) for k in attrs["kernel_shape"]] != kernel:
        raise Unsupported(f"kernel_shape={list(attrs['kernel_shape'])} differs from the "
                          f"weight's {kernel}")
    strides = _ints(attrs, "strides", n, 1)
    dilations = _ints(attrs, "dilations", n, 1)
    pads = explicit_pads(attrs, tuple(x.shape[2:]), kernel, strides, dilations)
    one_d = n == 1
    stride2 = (1, strides[0]) if one_d else (strides[0], strides[1])
    dilation2 = (1, dilations[0]) if one_d else (dilations[0], dilations[1])
    y = st.b.conv2d(_as_2d(st, x, one_d), _as_2d(st, w, one_d), bias, stride=stride2,
                    dilation=dilation2, pads=_pads_2d(pads, one_d),
                    groups=int(attrs.get("group", 1)))
    if one_d:
        y = st.b.reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return y


_POOL_ATTRS = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


_POOL_OPS = {"MaxPool": "max_pool2d", "AveragePool": "avg_pool2d", "LpPool": "lp_pool2d"}


# MaxPool's integer types taken through float32 (exact for every value they hold).
_POOLED_AS_FLOAT = ("uint8", "int8")


@converter("MaxPool", "AveragePool", "LpPool",
           attrs=(*_POOL_ATTRS, "storage_order", "count_include_pad", "p"))
def pool(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Max, average and Lp pooling, 1-D, 2-D or 3-D (ONNX's strides default to 1, not the
    kernel). 3-D pooling is two 2-D poolings, over (H, W) then over D: each of these
    reductions is separable (a window is a product of per-axis tap sets, so its maximum,
    its counts and its sum of ``|x|^p`` factor), and the 2-D kernel serves both."""
    indices = len(node.output) > 1 and bool(node.output[1])
    if node.op_type != "AveragePool" and "count_include_pad" in attrs:
        raise Unsupported("count_include_pad is an AveragePool attribute")
    if node.op_type != "LpPool" and "p" in attrs:
        raise Unsupported("p is an LpPool attribute")
    x = st.value(node.input[0])
    stored = x.dtype.name
    if node.op_type == "MaxPool" and stored in _POOLED_AS_FLOAT:
        # 8-bit integers pool as float32, which holds each exactly: the maximum converts
        # back unchanged.
        x = st.b.cast(x, "float32")
    if len(x.shape) not in (3, 4, 5):
        raise Unsupported(f"{node.op_type} of a rank-{len(x.shape)} input: vkumd takes 1-D, "
                          "2-D and 3-D ([N, C, L], [N, C, H, W] or [N, C, D, H, W])")
    n = len(x.shape) - 2
    if "kernel_shape" not in attrs:
        raise Unsupported("kernel_shape is required")
    kernel = _ints(attrs, "kernel_shape", n, 1)
    strides = _ints(attrs, "strides", n, 1)
    dilations = _ints(attrs, "dilations", n, 1)
    pads = explicit_pads(attrs, tuple(x.shape[2:]), kernel, strides, dilations)
    extra: dict[str, Any] = {}
    if node.op_type == "AveragePool":
        extra["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
    elif node.op_type == "LpPool":
        extra["p"] = float(attrs.get("p", 2))
    if n == 3:
        if indices:
            raise Unsupported("MaxPool's Indices output of a 3-D pooling is not supported")
        y3 = _pool3d(st, x, _POOL_OPS[node.op_type], kernel, strides, dilations, pads,
                     bool(attrs.get("ceil_mode", 0)), extra)
        return [y3 if stored == y3.dtype.name else st.b.cast(y3, stored)]
    one_d = n == 1
    kw: dict[str, Any] = {
        "stride": (1, strides[0]) if one_d else tuple(strides),
        "dilation": (1, dilations[0]) if one_d else tuple(dilations),
        "pads": _pads_2d(pads, one_d), "ceil_mode": bool(attrs.get("ceil_mode", 0))}
    kernel2 = (1, kernel[0]) if one_d else tuple(kernel)
    x2 = _as_2d(st, x, one_d)
    y = st.b.op(_POOL_OPS[node.op_type], x2, kernel=kernel2, **kw, **extra)
    outs = [y]
    if indices:
        order = int(attrs.get("storage_order", 0))
        if order not in (0, 1):
            raise Unsupported(f"storage_order={order}; ONNX defines 0 and 1")
        # A 1-D input's indices are those of its [N, C, 1, L] view in either order.
        outs.append(st.b.max_pool2d_indices(x2, kernel=kernel2, storage_order=order, **kw))
    if one_d:
        outs = [st.b.reshape(v, (v.shape[0], v.shape[1], v.shape[3])) for v in outs]
    if outs[0].dtype.name != stored:
        outs[0] = st.b.cast(outs[0], stored)
    return outs


def _pool3d(st: State, x: Value, op: str, kernel: list[int], strides: list[int],
            dilations: list[int], pads: list[int], ceil_mode: bool, extra: dict[str, Any]
            ) -> Value:
    """3-D pooling of ``x[N, C, D, H, W]`` as a 2-D pooling of every depth slice, then a
    ``(kd, 1)`` pooling of ``[N * C, 1, D, OH * OW]``."""
    if any(isinstance(d, Dim) for d in x.shape):
        raise Unsupported(f"3-D pooling of symbolic sizes {tuple(x.shape)} (bind the sizes)")
    n, c, d, h, w = (int(v) for v in x.shape)
    planes = st.b.reshape(x, (n * c * d, 1, h, w))
    y = st.b.op(op, planes, kernel=(kernel[1], kernel[2]), stride=(strides[1], strides[2]),
                dilation=(dilations[1], dilations[2]),
                pads=(pads[1], pads[2], pads[4], pads[5]), ceil_mode=ceil_mode, **extra)
    oh, ow = int(y.shape[2]), int(y.shape[3])
    depth = st.b.reshape(y, (n * c, 1, d, oh * ow))
    y = st.b.op(op, depth, kernel=(kernel[0], 1), stride=(strides[0], 1),
                dilation=(dilations[0], 1), pads=(pads[0], 0, pads[3], 0),
                ceil_mode=ceil_mode, **extra)
    return st.b.reshape(y, (n, c, int(y.shape[2]), oh, ow))


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The mean or maximum of every channel's plane, kept with size-1 spatial dimensions."""
    x = st.value(node.input[0])
    n = _spatial(node.op_type, x)
    pool = st.b.global_avg_pool if node.op_type == "GlobalAveragePool" else st.b.global_max_pool
    y = pool(_as_2d(st, x, n == 1))
    return [st.b.reshape(y, (y.shape[0], y.shape[1], 1)) if n == 1 else y]


@converter("BatchNormalization", attrs=("epsilon", "momentum", "training_mode", "spatial"))
def batch_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                        ) -> list[Bound | None]:
    """Inference batch normalisation with the running statistics (momentum only matters in
    training, which vkumd refuses)."""
    if int(attrs.get("training_mode", 0)) or any(node.output[1:]):
        raise Unsupported("training_mode (and its running-statistics outputs) is not "
                          "supported; vkumd runs inference")
    if int(attrs.get("spatial", 1)) != 1:
        raise Unsupported("spatial=0 (per-element statistics, opset < 9) is not supported")
    x = st.value(node.input[0])
    scale, bias, mean, var = (st.value(node.input[i]) for i in range(1, 5))
    return [st.b.batch_norm(x, scale, bias, mean, var,
                            eps=float(attrs.get("epsilon", 1e-5)))]


@converter("LRN", attrs=("size", "alpha", "beta", "bias"))
def local_response_norm(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                        ) -> list[Bound | None]:
    """Local response normalisation across channels (``size`` is required)."""
    if "size" not in attrs:
        raise Unsupported("size is required")
    return [st.b.lrn(st.value(node.input[0]), size=int(attrs["size"]),
                     alpha=float(attrs.get("alpha", 1e-4)),
                     beta=float(attrs.get("beta", 0.75)), bias=float(attrs.get("bias", 1.0)))]


@converter("Dropout", attrs=("ratio", "seed", "is_test"))
def dropout(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Inference dropout: the input itself, and the optional mask of ones (bool from opset 10,
    x's type before). That is exact when training_mode is false or the ratio is 0; a
    training_mode or ratio given at run time specializes the model on its values (imported
    again per distinct value); a true training_mode with a nonzero ratio, which draws a random
    mask, is refused."""
    if st.present(node, 2):
        training = st.known(node.input[2])
        ratio_name = node.input[1] if st.present(node, 1) else None
        ratio = st.known(ratio_name) if ratio_name else np.float32(0.5)
        if training is None:
            names = (node.input[2], *((ratio_name,) if ratio_name and ratio is None else ()))
            raise NeedsConstant("training_mode is computed at run time; vkumd needs its value "
                                "(and the ratio's) at import", names)
        if bool(np.asarray(training).reshape(-1)[0]):
            if ratio is None:
                raise NeedsConstant("the ratio is computed at run time with training_mode "
                                    "true; vkumd needs its value at import", str(ratio_name))
            if float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
                raise Unsupported(
                    f"training_mode is true with ratio {float(np.asarray(ratio).reshape(-1)[0])}"
                    ": a random mask, which vkumd does not draw (it runs inference; ONNX's "
                    "seeded mask comes from numpy's generator). Export the model in eval mode, "
                    "or set training_mode to false or the ratio to 0")
    if st.opset < 7 and not int(attrs.get("is_test", 0)):
        raise Unsupported("is_test is 0 (before opset 7 its default), which asks for "
                          "training; vkumd runs inference only (set is_test=1)")
    x = st.env[node.input[0]]
    if len(node.output) < 2 or not node.output[1]:
        return [x]
    shape = st.shape(node.input[0])
    if any(isinstance(d, Dim) for d in shape):
        raise Unsupported(f"the mask output of an input of symbolic shape {shape} (vkumd "
                          "builds the mask of ones at import time; bind the sizes or drop "
                          "the mask output)")
    if st.opset >= 10:
        return [x, np.ones(shape, np.bool_)]
    # Before opset 10 the mask has x's type.
    return [x, st.constant(np.ones(shape, np.float32), st.dtype(node.input[0]))]


@converter("Col2Im", attrs=("dilations", "pads", "strides"))
def col2im(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """2-D Col2Im as a transposed convolution of one-hot weights (each block position's
    channel scattered to its tap, overlaps summed), grouped per image channel."""
    x = st.value(node.input[0])
    image = st.ints(node.input[1], "image_shape")
    block = st.ints(node.input[2], "block_shape")
    if len(image) != 2 or len(block) != 2:
        raise Unsupported(f"a {len(image)}-D image: vkumd folds 2-D images")
    strides = _ints(attrs, "strides", 2, 1)
    dilations = _ints(attrs, "dilations", 2, 1)
    pads = _ints(attrs, "pads", 4, 0)
    n, ck, blocks = x.shape
    taps = block[0] * block[1]
    if isinstance(ck, Dim) or int(ck) % taps:
        raise Unsupported(f"input channels {ck} are not a multiple of the block {block}")
    counts, extra = [], []
    for i in range(2):
        span = dilations[i] * (block[i] - 1) + 1
        count = (image[i] + pads[i] + pads[2 + i] - span) // strides[i] + 1
        counts.append(count)
        extra.append(image[i] + pads[i] + pads[2 + i] - (strides[i] * (count - 1) + span))
    if not isinstance(blocks, Dim) and counts[0] * counts[1] != int(blocks):
        raise Unsupported(f"{blocks} blocks do not tile image {image} by block {block}")
    channels = int(ck) // taps
    w = np.zeros((channels * taps, 1, *block), np.float32)
    for c in range(channels):
        for k in range(taps):
            w[c * taps + k, 0, k // block[1], k % block[1]] = 1.0
    y = st.b.reshape(x, (n, ck, counts[0], counts[1]))
    return [st.b.conv_transpose2d(y, st.constant(w, x.dtype.name), None,
                                  stride=tuple(strides), dilation=tuple(dilations),
                                  pads=tuple(pads), output_padding=tuple(extra),
                                  groups=channels)]


@converter("MaxUnpool", attrs=("kernel_shape", "pads", "strides"))
def max_unpool(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A ``scatter_elements`` of x's values, at their flat indices, into zeros of the output
    shape (``output_shape`` when given, else the pooling's inverse)."""
    x = st.value(node.input[0])
    indices = st.value(node.input[1])
    if any(isinstance(d, Dim) for d in x.shape):
        raise Unsupported(f"x has symbolic dimensions {x.shape}; bind them")
    spatial = len(x.shape) - 2
    if "kernel_shape" not in attrs:
        raise Unsupported("kernel_shape is required")
    kernel = _ints(attrs, "kernel_shape", spatial, 1)
    strides = _ints(attrs, "strides", spatial, 1)
    pads = _ints(attrs, "pads", 2 * spatial, 0)
    # The indices address the pooling's inverse shape; a larger output_shape pads its end
    # (ONNX's reference; onnxruntime reads them in output_shape instead).
    shape = [*map(int, x.shape[:2])] + [
        (int(x.shape[2 + i]) - 1) * strides[i] - pads[i] - pads[spatial + i] + kernel[i]
        for i in range(spatial)]
    wanted = st.ints(node.input[2], "output_shape") if st.present(node, 2) else shape
    if len(wanted) != len(shape) or wanted[:2] != shape[:2] or \
            any(w < s for w, s in zip(wanted, shape, strict=True)):
        raise Unsupported(f"output_shape={wanted} for x of shape {x.shape}: it takes at "
                          f"least {shape}")
    total = int(np.prod(shape))
    count = int(np.prod([int(d) for d in x.shape]))
    zeros = st.constant(np.zeros(total, np.float32), x.dtype.name)
    flat = st.b.scatter_elements(zeros, st.b.reshape(indices, (count,)),
                                 st.b.reshape(x, (count,)), axis=0)
    y = st.b.reshape(flat, tuple(shape))
    if wanted == shape:
        return [y]
    ends = tuple(w - s for w, s in zip(wanted, shape, strict=True))
    return [st.b.pad(y, pads=(0,) * len(shape) + ends, mode="constant", value=0.0)]
