"""Convolution over NCHW tensors: ``conv2d`` (1-D convolution is a height-1 2-D one).

The geometry (strides, dilation, the four pads, groups) is checked once, in the rule, which
the eager function and every frontend share. The planner
(:func:`vkumd.compiler.kernels.conv_route.conv_route`) picks the path: the GEMM for a
pointwise convolution, the depthwise kernel ``shaders/conv2d_depthwise.comp`` for 3x3 and 5x5
depthwise ones at strides of 1 and 2, the direct kernel ``shaders/conv2d.comp``
for groups too narrow for the GEMM's tiles, and the implicit GEMM (or im2col + GEMM) for the
rest. Each path applies the epilogue
(:mod:`vkumd.framework.opset.conv_epilogue`: bias, activation, residual) in its store.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.conv import (
    CONV_CODES,
    conv2d_plan,
    depthwise_plan,
    im2col_plan,
)
from vkumd.compiler.kernels.conv_gemm import ConvGemmProblem, conv_gemm_plan
from vkumd.compiler.kernels.conv_route import conv_route
from vkumd.compiler.kernels.limits import CONV_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, constant_part, divide_exact, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, same_dtype
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.conv_epilogue import (
    activation_params as checked_params,
)
from vkumd.framework.opset.conv_epilogue import (
    apply_epilogue,
    conv_gemm,
    epilogue_codes,
    epilogue_reference,
    residual_order,
)
from vkumd.framework.opset.layout import reshape
from vkumd.framework.opset.matmul import matmul
from vkumd.framework.opset.windows import concat
from vkumd.framework.opset.windows import slice as slice_
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}


def int_tuple(op: str, value: Any, what: str, length: int, low: int) -> tuple[int, ...]:
    """``value`` as ``length`` ints each at least ``low``.

    Raises:
        VkumdTypeError: not a sequence of ints.
        VkumdValueError: of another length, or an entry below ``low``.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise VkumdTypeError(f"{op}: {what} must be a tuple of {length} ints, not {value!r}")
    if len(value) != length:
        raise VkumdValueError(f"{op}: {what}={tuple(value)!r} has {len(value)} entries; "
                              f"it takes {length}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise VkumdTypeError(f"{op}: {what} must hold ints, got {v!r}")
        if v < low:
            raise VkumdValueError(f"{op}: {what}={tuple(value)!r}; each entry must be >= {low}")
        out.append(int(v))
    return tuple(out)


def group_count(op: str, groups: Any) -> int:
    """``groups`` checked: an int >= 1.

    Raises:
        VkumdValueError: anything else.
    """
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise VkumdValueError(f"{op}: groups={groups!r}; it must be an int >= 1")
    return int(groups)


def window_size(op: str, size: Any, kernel: int, stride: int, dilation: int, before: int,
                after: int, axis: str, ceil: bool = False) -> Any:
    """Output length of a sliding window along one axis.

    A symbolic size is exact when every coefficient of its symbols is a multiple of the
    stride (any size at stride 1; ``32*h`` at strides up to 32 that divide 32), see
    :func:`_symbolic_windows`.

    Raises:
        VkumdValueError: the dilated kernel is larger than the padded input; a symbolic size
            the stride does not divide for every value of its symbols.
    """
    span = dilation * (kernel - 1) + 1
    if isinstance(size, Dim):
        return _symbolic_windows(op, size, span, stride, before, after, axis, ceil)
    room = size + before + after - span
    if room < 0:
        raise VkumdValueError(f"{op}: the kernel spans {span} along {axis} (dilation included) "
                              f"but the padded input has {size + before + after}; shrink the "
                              "kernel or pad more")
    count = (room + stride - 1) // stride + 1 if ceil else room // stride + 1
    # ceil mode: a last window must start inside the input or the leading pad (ONNX, torch).
    if ceil and (count - 1) * stride >= size + before:
        count -= 1
    return count


def _symbolic_windows(op: str, size: Dim, span: int, stride: int, before: int, after: int,
                      axis: str, ceil: bool) -> Any:
    """:func:`window_size` of a symbolic ``size``: the concrete rule's result for every
    value of the symbols at which the concrete rule accepts the size.

    Why it is exact: write ``size = v + c`` with ``c`` its constant term and ``v`` the rest,
    and ``room = size + before + after - span = v + r`` (``r`` a constant). When the stride
    ``s`` divides every coefficient of ``v``, it divides the integer ``v`` takes for every
    value of the symbols, so ``v/s`` is an integer ``q`` and, since ``floor(q + x) = q +
    floor(x)`` for an integer ``q``, ``room // s = q + r // s`` and ``ceil(room / s) = q +
    ceil(r / s)``: the concrete formula with ``r`` for ``room``, plus ``q``. Python's ``//``
    floors negative ``r`` too (``32*h`` under a 3-tap window at pads 1/1, stride 2: ``r =
    -1``, ``r // 2 = -1``, so ``16*h``, as 32 -> 16 and 64 -> 32 concretely). Ceil mode's
    drop of a last window starting past the input and leading pad compares
    ``ceil(room/s)*s = v + ceil(r/s)*s`` with ``size + before = v + c + before``: ``v``
    cancels, so the test is on constants and holds for all values alike. If some coefficient
    is not a multiple of ``s`` (``h`` at stride 2), the rounding depends on the value and no
    polynomial gives it: refused. Values at which the padded input is shorter than the
    kernel (``room < 0``, small symbols) give a size the concrete rule would refuse; that
    refusal comes when the graph runs, since every op checks its true sizes then.
    """
    room = size + (before + after - span)
    r = constant_part(room)
    quotient = divide_exact(room - r, stride)
    if quotient is None:
        raise VkumdValueError(f"{op}: {axis} is symbolic ({size}) and the stride {stride} does "
                              f"not divide it for every value; declare the size a multiple of "
                              f"the stride (dynamic= {{axis: '32*h'}}, a multiple of every "
                              f"stride on the way) or bind the size")
    steps = -(-r // stride) if ceil else r // stride
    if ceil and steps * stride >= constant_part(size) + before:
        steps -= 1
    return quotient + steps + 1


def _conv_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, w, bias, residual = ins
    assert x is not None and w is not None  # required inputs
    dt = same_dtype("conv2d", ("x", x), ("w", w), ("bias", bias), ("residual", residual))
    checked_params("conv2d", attrs["activation"], attrs["activation_params"])
    residual_order("conv2d", attrs["residual_first"])
    if dt.name not in CONV_DTYPES:
        raise VkumdTypeError(f"conv2d: x is {dt.name}; conv2d takes {', '.join(CONV_DTYPES)} "
                             "(cast() converts)")
    if x.ndim != 4 or w.ndim != 4:
        raise VkumdValueError(f"conv2d: x {format_shape(x.shape)} and w "
                              f"{format_shape(w.shape)} must both be 4-D: x [N, C, H, W], "
                              "w [C_out, C / groups, kH, kW] (reshape 1-D to height 1)")
    stride = int_tuple("conv2d", attrs["stride"], "stride", 2, 1)
    dilation = int_tuple("conv2d", attrs["dilation"], "dilation", 2, 1)
    pads = int_tuple("conv2d", attrs["pads"], "pads (top, left, bottom, right)", 4, 0)
    groups = group_count("conv2d", attrs["groups"])
    c_in, c_out = dims.resolve(x.shape[1]), dims.resolve(w.shape[0])
    kh, kw = dims.resolve(w.shape[2]), dims.resolve(w.shape[3])
    if not all(isinstance(d, int) for d in (c_in, c_out, kh, kw)):
        raise VkumdValueError("conv2d: channels and kernel sizes must be fixed numbers, got "
                              f"x {format_shape(x.shape)}, w {format_shape(w.shape)}")
    if c_in % groups or c_out % groups:
        raise VkumdValueError(f"conv2d: groups={groups} does not divide the {c_in} input "
                              f"and {c_out} output channels")
    if not dims.same(w.shape[1] * groups, c_in):
        raise VkumdValueError(f"conv2d: w {format_shape(w.shape)} takes {w.shape[1]} channels "
                              f"per group x {groups} groups, but x {format_shape(x.shape)} "
                              f"has {c_in}")
    if bias is not None and (bias.ndim != 1 or not dims.same(bias.shape[0], c_out)):
        raise VkumdValueError(f"conv2d: bias has shape {format_shape(bias.shape)}; expected "
                              f"[{c_out}], one per output channel")
    oh = window_size("conv2d", dims.resolve(x.shape[2]), kh, stride[0], dilation[0], pads[0],
                     pads[2], "height")
    ow = window_size("conv2d", dims.resolve(x.shape[3]), kw, stride[1], dilation[1], pads[1],
                     pads[3], "width")
    shape = (x.shape[0], c_out, oh, ow)
    if residual is not None and not dims.same_shape(residual.shape, shape):
        raise VkumdValueError(f"conv2d: residual has shape {format_shape(residual.shape)}; "
                              f"it must be the output's {format_shape(shape)}")
    return [TensorType(shape, dt)]


def conv2d(x: Tensor, w: Tensor, bias: Tensor | None = None,
           residual: Tensor | None = None, *,
           stride: tuple[int, int] = (1, 1), dilation: tuple[int, int] = (1, 1),
           pads: tuple[int, int, int, int] = (0, 0, 0, 0), groups: int = 1,
           activation: str | None = None, activation_params: Sequence[float] = (),
           residual_first: bool = False, out: Tensor | None = None) -> Tensor:
    """2-D convolution (cross-correlation, as ONNX and torch define it) of NCHW ``x``.

    ``out[n, o, i, j] = bias[o] + sum x[n, g*C/groups + c, i*sy - top + ky*dy,
    j*sx - left + kx*dx] * w[o, c, ky, kx]`` over the group ``g`` of output channel ``o``,
    with zeros outside the input, accumulated in float32; then the epilogue, applied as
    the result is stored: ``act(sum) + residual`` (``act(sum + residual)`` with
    ``residual_first``).

    Args:
        x: ``[N, C, H, W]`` float32 or float16.
        w: ``[C_out, C / groups, kH, kW]`` of x's dtype.
        bias: optional ``[C_out]`` of x's dtype.
        residual: optional tensor of the output's shape and x's dtype, added to the result.
        stride: (height, width) steps, each >= 1.
        dilation: (height, width) spacing of the kernel taps, each >= 1.
        pads: zero padding (top, left, bottom, right), each >= 0 (ONNX's order is
            (top, left, bottom, right) too).
        groups: channel groups (C for depthwise); must divide C and C_out.
        activation: None or an activation the epilogue applies (``relu``, ``gelu``,
            ``gelu_tanh``, ``silu``, ``sigmoid``, ``hardswish``, ``clip``, ``leaky_relu``,
            ``hard_sigmoid``).
        activation_params: the activation's parameters, in its op's order (clip's
            ``(min, max)``, leaky_relu's ``(alpha,)``, hard_sigmoid's ``(alpha, beta)``);
            empty for the op's defaults.
        residual_first: add the residual before the activation (ResNet's blocks) rather
            than after it (MobileNet's).
        out: optional ``[N, C_out, H_out, W_out]`` output of x's dtype.

    Returns:
        The convolved tensor.

    Raises:
        VkumdTypeError: mixed or unsupported dtypes; attributes of the wrong type.
        VkumdValueError: wrong ranks; a channel count that does not match w's; groups that do
            not divide the channels; negative pads; strides or dilation below 1; a kernel
            larger than the padded input; a bias not ``[C_out]``; a residual not of the
            output's shape; an activation the epilogue does not apply, or the wrong number
            of parameters; out of another shape; tensors of other contexts.
    """
    x = check_tensor("conv2d", x, "x")
    w = check_tensor("conv2d", w, "w")
    check_context("conv2d", x, w, "w")
    if bias is not None:
        bias = check_tensor("conv2d", bias, "bias")
        check_context("conv2d", x, bias, "bias")
    if residual is not None:
        residual = check_tensor("conv2d", residual, "residual")
        check_context("conv2d", x, residual, "residual")
    params = checked_params("conv2d", activation, activation_params)
    attrs = {"stride": stride, "dilation": dilation, "pads": pads, "groups": groups,
             "activation": activation, "activation_params": params,
             "residual_first": residual_order("conv2d", residual_first)}
    key = (x.shape, w.shape, None if bias is None else bias.shape, x.dtype.name, w.dtype.name,
           None if bias is None else bias.dtype.name,
           None if residual is None else (residual.shape, residual.dtype.name), stride,
           dilation, pads, groups)
    out_type = recall(_VERDICTS, key)
    if out_type is None:
        out_type = remember(_VERDICTS, key,
                            concrete_rule("conv2d", (x, w, bias, residual), attrs)[0])
    epilogue = epilogue_codes(activation, params, residual is not None, bool(residual_first))
    if x.dtype.itemsize < 4:
        check_storage("conv2d", x.dtype, x.context)
    shape = tuple(int(d) for d in out_type.shape)
    out = output("conv2d", x.context, out, shape, x.dtype, (x, w, bias, residual))
    if out.size == 0:
        return out
    if x.size == 0 or w.size == 0:
        raise VkumdValueError(f"conv2d: x {format_shape(x.shape)} or w "
                              f"{format_shape(w.shape)} is empty but the output "
                              f"{format_shape(shape)} is not (padding alone); give at least "
                              "one input element and one kernel tap")
    route = conv_route(x.context.caps, x.dtype.name, x.shape, w.shape, shape[2:],
                       tuple(stride), tuple(dilation), tuple(pads), int(groups))
    if route.path == "gemm":
        _group_gemm(w, reshape(x, (x.shape[0], x.shape[1], x.shape[2] * x.shape[3])), bias,
                    residual, out, int(groups), epilogue)
        return out
    if route.path == "implicit":
        problem = ConvGemmProblem(x.dtype.name, x.shape, w.shape, shape[2:], tuple(stride),
                                  tuple(dilation), (pads[0], pads[1]), int(groups),
                                  bias is not None, epilogue, w.address % 16 == 0)
        x.context.run(conv_gemm_plan(x.context.caps, problem), (x, w, bias, out, residual))
        return out
    if route.path == "im2col":
        blocks = route.blocks
        assert blocks is not None
        # Blocks accumulate, so their epilogue comes after the last; an activation then
        # reads the sums from a scratch tensor (the ops do not overwrite their input).
        sums = out if len(blocks) == 1 or activation is None else x.context.empty(
            out.shape, out.dtype)
        _im2col_gemm(x, w, bias, residual, sums, blocks, tuple(stride), tuple(dilation),
                     (pads[0], pads[1]), int(groups), epilogue)
        if len(blocks) > 1:
            apply_epilogue(sums, out, bias, residual, activation, params,
                           bool(residual_first))
        return out
    if route.path == "depthwise":
        plan = depthwise_plan(x.context.caps, CONV_CODES[x.dtype.name], x.shape, w.shape[2],
                              shape[2:], tuple(stride), (pads[0], pads[1]), bias is not None,
                              epilogue=epilogue)
        x.context.run(plan, (x, w, bias, out, residual))
        return out
    plan = conv2d_plan(x.context.caps, CONV_CODES[x.dtype.name], x.shape, w.shape,
                       shape[2:], tuple(stride), tuple(dilation), (pads[0], pads[1]),
                       int(groups), bias is not None, epilogue=epilogue)
    x.context.run(plan, (x, w, bias, out, residual))
    return out


def _im2col_gemm(x: Tensor, w: Tensor, bias: Tensor | None, residual: Tensor | None,
                 out: Tensor, blocks: list[tuple[int, int]], stride: tuple[int, int],
                 dilation: tuple[int, int], pads: tuple[int, int], groups: int,
                 epilogue: tuple[int, float, float, int]) -> None:
    """The convolution as columns then GEMMs: all columns at once (the GEMM applies the
    epilogue), or (one image, one group) a block of input channels' rows at a time, each
    block's GEMM with its slice of the weights accumulating into the output (the caller
    applies the epilogue after the last)."""
    n, c_out = out.shape[:2]
    pixels = out.shape[2] * out.shape[3]
    code = CONV_CODES[x.dtype.name]
    if len(blocks) == 1:
        cols = x.context.empty((n, blocks[0][1] // n, pixels), x.dtype)
        x.context.run(im2col_plan(x.context.caps, code, x.shape, w.shape, out.shape[2:],
                                  stride, dilation, pads), (x, cols))
        _group_gemm(w, cols, bias, residual, out, groups, epilogue)
        return
    weights = reshape(w, (c_out, w.shape[1] * w.shape[2] * w.shape[3]))
    result = reshape(out, (c_out, pixels))
    for i, (start, stop) in enumerate(blocks):
        cols = x.context.empty((stop - start, pixels), x.dtype)
        x.context.run(im2col_plan(x.context.caps, code, x.shape, w.shape, out.shape[2:],
                                  stride, dilation, pads, rows=(start, stop)), (x, cols))
        matmul(slice_(weights, (start,), (stop,), (1,)), cols, out=result,
               beta=0.0 if i == 0 else 1.0)


def _group_gemm(w: Tensor, cols: Tensor, bias: Tensor | None, residual: Tensor | None,
                out: Tensor, groups: int, epilogue: tuple[int, float, float, int]) -> None:
    """The convolution as GEMMs over its columns ``cols[n, C*kh*kw, pixels]`` (the input
    itself for a pointwise one): group ``g``'s outputs are ``w_g[C_out/groups, K] @`` the
    ``g``-th block of ``K`` column rows, one batched GEMM over the groups (and the images:
    the weights, and the bias with them, are repeated per image, as the GEMM shares only
    one operand for the whole batch), the epilogue applied in its store (a bias per row)."""
    n, c_out = out.shape[:2]
    pixels = cols.shape[2]
    k = cols.shape[1] // groups
    if groups == 1:
        conv_gemm(reshape(w, (c_out, k)), cols, out, bias, residual, epilogue, True)
        return
    per_group = reshape(w, (1, groups, c_out // groups, k))
    if n > 1:
        per_group = concat([per_group] * n, axis=0)
        bias = None if bias is None else concat([bias] * n, axis=0)
    conv_gemm(per_group, reshape(cols, (n, groups, k, pixels)), out, bias, residual,
              epilogue, False)


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                     stride: Sequence[int], dilation: Sequence[int], pads: Sequence[int],
                     groups: int, residual: np.ndarray | None = None,
                     activation: str | None = None, activation_params: Sequence[float] = (),
                     residual_first: bool = False) -> np.ndarray:
    """The float64 convolution, one kernel tap at a time, then its epilogue."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    n, c, h, wd = x.shape
    c_out, cg, kh, kw = w.shape
    sy, sx = stride
    dy, dx = dilation
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dy * (kh - 1) - 1) // sy + 1
    ow = (wd + pads[1] + pads[3] - dx * (kw - 1) - 1) // sx + 1
    out = np.zeros((n, c_out, oh, ow))
    og = c_out // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs[:, :, ky * dy:ky * dy + sy * (oh - 1) + 1:sy,
                           kx * dx:kx * dx + sx * (ow - 1) + 1:sx]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, ky, kx])
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :, None, None]
    params = activation_params_of(activation, activation_params)
    return epilogue_reference(out, residual, activation, params, residual_first)


def activation_params_of(activation: str | None, params: Sequence[float]) -> tuple[float, ...]:
    """The activation's parameters, its op's defaults when ``params`` is empty."""
    return checked_params("conv2d", activation, tuple(params))


def _conv_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    conv2d(ins[0], ins[1], ins[2], ins[3], stride=tuple(at["stride"]),
           dilation=tuple(at["dilation"]), pads=tuple(at["pads"]), groups=at["groups"],
           activation=at["activation"], activation_params=tuple(at["activation_params"]),
           residual_first=at["residual_first"], out=outs[0])


define("conv2d", ("x", "w", "bias?", "residual?"),
       {"stride": (1, 1), "dilation": (1, 1), "pads": (0, 0, 0, 0), "groups": 1,
        "activation": None, "activation_params": (), "residual_first": False},
       rule=_conv_rule,
       reference=lambda a, at, s: [conv2d_reference(
           a[0], a[1], a[2], at["stride"], at["dilation"], at["pads"], at["groups"], a[3],
           at["activation"], at["activation_params"], at["residual_first"])],
       lower=_conv_lower, eager=conv2d)
