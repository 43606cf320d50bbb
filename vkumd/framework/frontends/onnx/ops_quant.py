"""Converters of ONNX's quantization operators: QuantizeLinear, DequantizeLinear and
DynamicQuantizeLinear (``opset/qlinear.py``'s kernel), MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv (dequantized to exact integers in float32, multiplied by vkumd's
matmul or convolution, requantized).

Quantized types: uint8, int8, the float8 formats and the packed int4, uint4, int2, uint2 and
float4_e2m1; the scale is converted to float32 first
(the kernel's), and a bfloat16 result is computed in float32 and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.limits import QLINEAR_QUANT_DTYPES
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.ops_vision import conv_of
from vkumd.framework.frontends.onnx.state import Bound, State, converter, ir_dtype
from vkumd.framework.graph import Value

# float32 sums of integer products are exact below 2**24: MatMulInteger's inner dimension is
# kept within what 8-bit operands allow (255 * 255 * 258 < 2**24).
_EXACT_K = 258


def _float32(st: State, name: str) -> Value:
    """Input ``name`` as a float32 graph value (a known array converted on the host)."""
    known = st.known(name)
    if known is not None:
        return st.constant(np.asarray(known, np.float32), "float32")
    value = st.value(name)
    return value if value.dtype.name == "float32" else st.b.cast(value, "float32")


def _qtype(st: State, node: onnx.NodeProto, index: int, default: str) -> str:
    """The quantized type: the zero point's (input ``index``) when given, else ``default``."""
    name = st.dtype(node.input[index]) if st.present(node, index) else default
    if name not in QLINEAR_QUANT_DTYPES:
        raise Unsupported(f"quantized type {name}: vkumd quantizes to "
                          f"{', '.join(QLINEAR_QUANT_DTYPES)}")
    return name


def _zero(st: State, node: onnx.NodeProto, index: int) -> Value | None:
    return st.value(node.input[index]) if st.present(node, index) else None


@converter("QuantizeLinear", attrs=("axis", "saturate", "block_size", "output_dtype",
                                    "precision"))
def quantize_linear(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                    ) -> list[Bound | None]:
    """``saturate(round(x / scale) + zero_point)``; x/scale in float32."""
    if attrs.get("precision", 0) not in (0, onnx.TensorProto.FLOAT):
        raise Unsupported("precision other than FLOAT (vkumd divides in float32)")
    out = attrs.get("output_dtype", 0)
    qtype = _qtype(st, node, 2, ir_dtype(out) if out else "uint8")
    x = st.value(node.input[0])
    if x.dtype.name not in ("float32", "float16"):
        x = st.b.cast(x, "float32")
    return [st.b.quantize_linear(x, _float32(st, node.input[1]), _zero(st, node, 2),
                                 axis=attrs.get("axis", 1),
                                 block_size=attrs.get("block_size", 0), dtype=qtype,
                                 saturate=bool(attrs.get("saturate", 1)))]


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype"))
def dequantize_linear(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                      ) -> list[Bound | None]:
    """``(x - zero_point) * scale`` in the scale's type (or ``output_dtype``)."""
    x = st.value(node.input[0])
    _qtype(st, node, 0, x.dtype.name)  # refuses a type the kernel does not take
    out = attrs.get("output_dtype", 0)
    want = ir_dtype(out) if out else st.dtype(node.input[1])
    ftype = want if want in ("float32", "float16") else "float32"
    y = st.b.dequantize_linear(x, _float32(st, node.input[1]), _zero(st, node, 2),
                               axis=attrs.get("axis", 1), block_size=attrs.get("block_size", 0),
                               dtype=ftype)
    if want != ftype:
        if want != "bfloat16":
            raise Unsupported(f"DequantizeLinear to {want}")
        y = st.b.cast(y, want)
    return [y]


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                            ) -> list[Bound | None]:
    """uint8 quantization over the range of x and 0: ``scale = (max - min) / 255`` (1/255
    when the range is empty), ``zero_point = round(clamp(-min / scale))``, then
    QuantizeLinear; the zero point is itself that quantization of ``-min``."""
    x = st.value(node.input[0])
    if x.dtype.name != "float32":
        raise Unsupported(f"DynamicQuantizeLinear of {x.dtype.name} (float32 only)")
    whole = tuple(range(len(x.shape)))
    high = st.b.maximum(st.b.max(x, dim=whole), st.constant(np.zeros((), np.float32), "float32"))
    low = st.b.minimum(st.b.min(x, dim=whole), st.constant(np.zeros((), np.float32),
                                                           "float32"))
    span = st.b.sub(high, low)
    nothing = st.b.eq(span, st.constant(np.zeros((), np.float32), "float32"))
    span = st.b.where(nothing, st.constant(np.ones((), np.float32), "float32"), span)
    scale = st.b.div(span, st.constant(np.array(255.0, np.float32), "float32"))
    zero = st.b.quantize_linear(st.b.neg(low), scale, None, dtype="uint8")
    y = st.b.quantize_linear(x, scale, zero, dtype="uint8")
    return [y, scale, zero]


def _exact(st: State, node: onnx.NodeProto, index: int, zero_index: int, axis: int
           ) -> Value:
    """Integer input ``index`` minus its zero point (input ``zero_index``: a scalar, or one
    per index of ``axis``), as exact float32 values."""
    x = st.value(node.input[index])
    if x.dtype.name not in ("uint8", "int8"):
        raise Unsupported(f"{node.op_type} of {x.dtype.name} (uint8 and int8)")
    if not st.present(node, zero_index):
        ones = st.constant(np.ones((), np.float32), "float32")
        return st.b.dequantize_linear(x, ones, None, dtype="float32")
    zero = st.value(node.input[zero_index])
    if len(zero.shape) > 1:
        raise Unsupported(f"{node.op_type}: a zero point of shape {zero.shape}")
    ones = st.constant(np.ones(zero.shape, np.float32), "float32")
    return st.b.dequantize_linear(x, ones, zero, axis=axis % max(len(x.shape), 1),
                                  dtype="float32")


def _integer_matmul(st: State, node: onnx.NodeProto, a_index: int, b_index: int,
                    a_zero: int, b_zero: int) -> Value:
    """``(a - a_zero) @ (b - b_zero)`` of operands of one rank (at least 2) and one batch
    shape, exact in float32 (a's zero point one per row, b's one per column)."""
    a_shape, b_shape = st.shape(node.input[a_index]), st.shape(node.input[b_index])
    rank = len(a_shape)
    if rank < 2 or len(b_shape) != rank or a_shape[:-2] != b_shape[:-2]:
        raise Unsupported(f"{node.op_type} of operands of shapes {list(a_shape)} and "
                          f"{list(b_shape)} (one rank of at least 2 and one batch shape)")
    if not isinstance(a_shape[-1], int) or a_shape[-1] > _EXACT_K:
        raise Unsupported(f"{node.op_type} over {a_shape[-1]} products: float32 sums are "
                          f"exact over at most {_EXACT_K}")
    a = _exact(st, node, a_index, a_zero, rank - 2)
    b = _exact(st, node, b_index, b_zero, rank - 1)
    return st.b.matmul(a, b)


@converter("MatMulInteger")
def matmul_integer(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """``(a - a_zero_point) @ (b - b_zero_point)`` in int32 (exact: computed in float32 over
    at most 258 products of 8-bit values)."""
    return [st.b.cast(_integer_matmul(st, node, 0, 1, 2, 3), "int32")]


@converter("QLinearMatMul")
def qlinear_matmul(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """``saturate(round(((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale / y_scale)) + y_zp)``
    as ONNX's reference: the integer product exact in float32, the multiplier in float32."""
    product = _integer_matmul(st, node, 0, 3, 2, 5)
    for i in (1, 4, 6):
        if len(st.shape(node.input[i])) > 1:
            raise Unsupported(f"QLinearMatMul: a scale of shape {st.shape(node.input[i])}")
    a_scale, b_scale, y_scale = (_float32(st, node.input[i]) for i in (1, 4, 6))
    if len(a_scale.shape) == 1:
        a_scale = st.b.reshape(a_scale, (a_scale.shape[0], 1))  # per row of a
    multiplier = st.b.div(st.b.mul(a_scale, b_scale), y_scale)
    qtype = _qtype(st, node, 7, st.value(node.input[0]).dtype.name)
    ones = st.constant(np.ones((), np.float32), "float32")
    zero = st.value(node.input[7])
    if len(zero.shape) != 0 and zero.shape != (1,):
        raise Unsupported("QLinearMatMul: a y_zero_point of more than one value")
    return [st.b.quantize_linear(st.b.mul(product, multiplier), ones,
                                 st.b.reshape(zero, ()), dtype=qtype)]


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _integer_conv(st: State, node: onnx.NodeProto, x_index: int, w_index: int, x_zero: int,
                  w_zero: int, bias: Value | None, attrs: dict[str, Any]) -> Value:
    """``conv(x - x_zero, w - w_zero) (+ bias)``, exact in float32 (x's zero point one value,
    w's one or one per output channel)."""
    w_shape = st.shape(node.input[w_index])
    products = 1
    for d in w_shape[1:]:
        products = products * d if isinstance(d, int) else _EXACT_K + 1
    if products > _EXACT_K:
        raise Unsupported(f"{node.op_type} over {products} products per output: float32 "
                          f"sums are exact over at most {_EXACT_K}")
    x = _exact(st, node, x_index, x_zero, 1)
    w = _exact(st, node, w_index, w_zero, 0)
    return conv_of(st, x, w, bias, attrs)


@converter("ConvInteger", attrs=_CONV_ATTRS)
def conv_integer(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``conv(x - x_zero_point, w - w_zero_point)`` in int32 (exact: float32 sums of at most
    258 products of 8-bit values)."""
    return [st.b.cast(_integer_conv(st, node, 0, 1, 2, 3, None, attrs), "int32")]


@converter("QLinearConv", attrs=_CONV_ATTRS)
def qlinear_conv(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``saturate(round((conv(x - x_zp, w - w_zp) + B) * (x_scale * w_scale / y_scale)) +
    y_zp)`` as ONNX's reference (w_scale one or one per output channel)."""
    bias = _float32(st, node.input[8]) if st.present(node, 8) else None
    conv = _integer_conv(st, node, 0, 3, 2, 5, bias, attrs)
    x_scale, w_scale, y_scale = (_float32(st, node.input[i]) for i in (1, 4, 6))
    if len(w_scale.shape) == 1 and w_scale.shape != (1,):
        w_scale = st.b.reshape(w_scale, (w_scale.shape[0], *([1] * (len(conv.shape) - 2))))
    multiplier = st.b.div(st.b.mul(x_scale, w_scale), y_scale)
    qtype = _qtype(st, node, 7, st.value(node.input[0]).dtype.name)
    ones = st.constant(np.ones((), np.float32), "float32")
    zero = _zero(st, node, 7)
    if zero is not None:
        if len(zero.shape) != 0 and zero.shape != (1,):
            raise Unsupported("QLinearConv: a y_zero_point of more than one value")
        zero = st.b.reshape(zero, ())
    return [st.b.quantize_linear(st.b.mul(conv, multiplier), ones, zero, dtype=qtype)]
