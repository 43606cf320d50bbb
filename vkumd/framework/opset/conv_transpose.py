"""Transposed convolution over NCHW tensors: ``conv_transpose2d`` (ONNX ConvTranspose,
torch's ``conv_transpose2d``), the gradient of ``conv2d`` with respect to its input.

One launch of ``shaders/conv_transpose2d.comp``: each output element gathers the input
pixels whose kernel footprint covers it, so there is no column buffer and no atomic add.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import RESAMPLE_DTYPES
from vkumd.compiler.kernels.resample import RESAMPLE_CODES
from vkumd.compiler.kernels.resample_plan import conv_transpose2d_plan, conv_transpose_is_gemm
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, same_dtype
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.arith import add
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.conv import group_count, int_tuple
from vkumd.framework.opset.layout import permute, reshape
from vkumd.framework.opset.matmul import matmul
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}


def _length(size: Any, kernel: int, stride: int, dilation: int, before: int, after: int,
            extra: int, axis: str) -> Any:
    span = dilation * (kernel - 1) + 1
    if isinstance(size, Dim):
        return size * stride + (span + extra - stride - before - after)
    length = (size - 1) * stride + span + extra - before - after
    if length < 1:
        raise VkumdValueError(f"conv_transpose2d: the pads along {axis} ({before} + {after}) "
                              f"remove the whole {length + before + after}-pixel output; "
                              "pad less")
    return length


def _geometry(attrs: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    op = "conv_transpose2d"
    stride = int_tuple(op, attrs["stride"], "stride", 2, 1)
    dilation = int_tuple(op, attrs["dilation"], "dilation", 2, 1)
    pads = int_tuple(op, attrs["pads"], "pads (top, left, bottom, right)", 4, 0)
    extra = int_tuple(op, attrs["output_padding"], "output_padding", 2, 0)
    for i, axis in ((0, "height"), (1, "width")):
        if extra[i] >= max(stride[i], dilation[i]):
            raise VkumdValueError(f"{op}: output_padding={extra} along {axis} must be below "
                                  f"the stride or the dilation ({max(stride[i], dilation[i])})")
    return stride, dilation, pads, extra


def _rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, w, bias = ins
    assert x is not None and w is not None  # required inputs
    op = "conv_transpose2d"
    dt = same_dtype(op, ("x", x), ("w", w), ("bias", bias))
    if dt.name not in RESAMPLE_DTYPES:
        raise VkumdTypeError(f"{op}: x is {dt.name}; {op} takes {', '.join(RESAMPLE_DTYPES)} "
                             "(cast() converts)")
    if x.ndim != 4 or w.ndim != 4:
        raise VkumdValueError(f"{op}: x {format_shape(x.shape)} and w {format_shape(w.shape)}"
                              " must both be 4-D: x [N, C, H, W], w [C, C_out / groups, kH, "
                              "kW]")
    stride, dilation, pads, extra = _geometry(attrs)
    groups = group_count(op, attrs["groups"])
    c_in, per_group = dims.resolve(x.shape[1]), dims.resolve(w.shape[1])
    kh, kw = dims.resolve(w.shape[2]), dims.resolve(w.shape[3])
    if not all(isinstance(d, int) for d in (c_in, per_group, kh, kw)):
        raise VkumdValueError(f"{op}: channels and kernel sizes must be fixed numbers, got "
                              f"x {format_shape(x.shape)}, w {format_shape(w.shape)}")
    if c_in % groups:
        raise VkumdValueError(f"{op}: groups={groups} does not divide the {c_in} input "
                              "channels")
    if not dims.same(w.shape[0], c_in):
        raise VkumdValueError(f"{op}: w {format_shape(w.shape)} is for {w.shape[0]} input "
                              f"channels but x {format_shape(x.shape)} has {c_in}")
    c_out = per_group * groups
    if bias is not None and (bias.ndim != 1 or not dims.same(bias.shape[0], c_out)):
        raise VkumdValueError(f"{op}: bias has shape {format_shape(bias.shape)}; expected "
                              f"[{c_out}], one per output channel")
    oh = _length(dims.resolve(x.shape[2]), kh, stride[0], dilation[0], pads[0], pads[2],
                 extra[0], "height")
    ow = _length(dims.resolve(x.shape[3]), kw, stride[1], dilation[1], pads[1], pads[3],
                 extra[1], "width")
    return [TensorType((x.shape[0], c_out, oh, ow), dt)]


def conv_transpose2d(x: Tensor, w: Tensor, bias: Tensor | None = None, *,
                     stride: tuple[int, int] = (1, 1), dilation: tuple[int, int] = (1, 1),
                     pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                     output_padding: tuple[int, int] = (0, 0), groups: int = 1,
                     out: Tensor | None = None) -> Tensor:
    """Transposed 2-D convolution of NCHW ``x`` (ONNX ConvTranspose).

    Each input pixel ``x[n, c, i, j]`` adds ``x * w[c, o, ky, kx]`` to the output at
    ``(i*sy + ky*dy - top, j*sx + kx*dx - left)`` for the output channels ``o`` of its group;
    the output is ``(H - 1)*sy + dy*(kH - 1) + 1 + output_padding - top - bottom`` high (and
    likewise wide). Accumulated in float32.

    Args:
        x: ``[N, C, H, W]`` float32 or float16.
        w: ``[C, C_out / groups, kH, kW]`` of x's dtype.
        bias: optional ``[C_out]`` of x's dtype.
        stride: (height, width) steps, each >= 1.
        dilation: (height, width) spacing of the kernel taps, each >= 1.
        pads: (top, left, bottom, right) removed from the full output, each >= 0.
        output_padding: (height, width) added at the bottom and right, each below the
            stride or the dilation along that axis.
        groups: channel groups; must divide C.
        out: optional output of the transposed shape and x's dtype.

    Returns:
        ``[N, C_out, H_out, W_out]``.

    Raises:
        VkumdTypeError: mixed or unsupported dtypes; attributes of the wrong type.
        VkumdValueError: wrong ranks; w not for x's channels; groups not dividing them;
            strides or dilation below 1; negative pads; output_padding too large; pads that
            remove the whole output; a bias not ``[C_out]``; out of another shape; tensors of
            other contexts.
    """
    op = "conv_transpose2d"
    x = check_tensor(op, x, "x")
    w = check_tensor(op, w, "w")
    check_context(op, x, w, "w")
    if bias is not None:
        bias = check_tensor(op, bias, "bias")
        check_context(op, x, bias, "bias")
    attrs = {"stride": stride, "dilation": dilation, "pads": pads,
             "output_padding": output_padding, "groups": groups}
    key = (x.shape, w.shape, None if bias is None else bias.shape, x.dtype.name, w.dtype.name,
           None if bias is None else bias.dtype.name, *(tuple(v) if isinstance(v, list)
                                                        else v for v in attrs.values()))
    out_type = recall(_VERDICTS, key)
    if out_type is None:
        out_type = remember(_VERDICTS, key, concrete_rule(op, (x, w, bias), attrs)[0])
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    shape = tuple(int(d) for d in out_type.shape)
    out = output(op, x.context, out, shape, x.dtype, (x, w, bias))
    if out.size == 0:
        return out
    if x.size == 0 or w.size == 0:
        raise VkumdValueError(f"{op}: x {format_shape(x.shape)} or w {format_shape(w.shape)} "
                              f"is empty but the output {format_shape(shape)} is not")
    if conv_transpose_is_gemm(w.shape[2:], tuple(stride), tuple(dilation), tuple(pads),
                              tuple(output_padding), int(groups)):
        _gemm(x, w, bias, out)
        return out
    plan = conv_transpose2d_plan(x.context.caps, RESAMPLE_CODES[x.dtype.name], x.shape,
                                 w.shape, shape, tuple(stride), tuple(dilation),
                                 (pads[0], pads[1]), int(groups), bias is not None)
    x.context.run(plan, (x, w, w if bias is None else bias, out))
    return out


def _gemm(x: Tensor, w: Tensor, bias: Tensor | None, out: Tensor) -> None:
    """Non-overlapping taps: ``cols[n, (o, ky, kx), (i, j)] = w^T @ x``, then each tap's
    plane interleaved into the output by one permute."""
    n, c, h, wd = x.shape
    _, o, kh, kw = w.shape
    cols = x.context.empty((n, o * kh * kw, h * wd), x.dtype)
    matmul(reshape(w, (c, o * kh * kw)), reshape(x, (n, c, h * wd)), trans_a=True, out=cols)
    permute(reshape(cols, (n, o, kh, kw, h, wd)), (0, 1, 4, 2, 5, 3),
            out=reshape(out, (n, o, h, kh, wd, kw)))
    if bias is not None:
        add(out, reshape(bias, (o, 1, 1)), out=out)


def conv_transpose2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                               stride: Sequence[int], dilation: Sequence[int],
                               pads: Sequence[int], output_padding: Sequence[int],
                               groups: int) -> np.ndarray:
    """The float64 transposed convolution: every tap scattered into the full output, which
    is then cropped by the pads."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    sy, sx = stride
    dy, dx = dilation
    full_h = (h - 1) * sy + dy * (kh - 1) + 1 + output_padding[0]
    full_w = (wd - 1) * sx + dx * (kw - 1) + 1 + output_padding[1]
    full = np.zeros((n, og * groups, full_h, full_w))
    cg = c // groups
    for g in range(groups):
        xs = x[:, g * cg:(g + 1) * cg]
        ws = w[g * cg:(g + 1) * cg]
        for ky in range(kh):
            for kx in range(kw):
                full[:, g * og:(g + 1) * og, ky * dy:ky * dy + sy * (h - 1) + 1:sy,
                     kx * dx:kx * dx + sx * (wd - 1) + 1:sx] += np.einsum(
                         "nchw,co->nohw", xs, ws[:, :, ky, kx])
    out = full[:, :, pads[0]:full_h - pads[2], pads[1]:full_w - pads[3]]
    if bias is not None:
        out = out + np.asarray(bias, np.float64)[None, :, None, None]
    return out


def _lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    conv_transpose2d(ins[0], ins[1], ins[2], stride=tuple(at["stride"]),
                     dilation=tuple(at["dilation"]), pads=tuple(at["pads"]),
                     output_padding=tuple(at["output_padding"]), groups=at["groups"],
                     out=outs[0])


define("conv_transpose2d", ("x", "w", "bias?"),
       {"stride": (1, 1), "dilation": (1, 1), "pads": (0, 0, 0, 0), "output_padding": (0, 0),
        "groups": 1},
       rule=_rule,
       reference=lambda a, at, s: [conv_transpose2d_reference(
           a[0], a[1], a[2], at["stride"], at["dilation"], at["pads"], at["output_padding"],
           at["groups"])],
       lower=_lower, eager=conv_transpose2d)
