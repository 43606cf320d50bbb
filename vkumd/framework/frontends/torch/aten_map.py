"""The aten ops vkumd runs, each as a handler that appends IR nodes through ``GraphBuilder``.

A handler is ``fn(cv, node, *args, **kwargs)``: ``cv`` the :class:`Converter` (its builder is
``cv.b``), ``node`` the FX node, and its arguments already converted (IR values for tensors,
ints or Dims for sizes, Python numbers as given). It returns the node's value (an IR value,
a size, or a tuple for ops with several results). A check ``fn(node) -> reason | None`` runs
before any conversion, on the node's fake-tensor metadata alone, so the partitioner can tell
which nodes vkumd takes without running anything. Layout and matrix ops are in
:mod:`.aten_layout`; both register into :data:`HANDLERS`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import fx

from vkumd.framework.graph.ir import Value

aten = torch.ops.aten

Handler = Callable[..., Any]
Check = Callable[[fx.Node], "str | None"]

HANDLERS: dict[Any, Handler] = {}
"""FX call target (an aten overload or a Python operator) -> handler."""
CHECKS: dict[Any, Check] = {}
"""Target -> extra condition (returns why the node is refused, or None)."""
MULTI_OUTPUT: dict[Any, frozenset[int]] = {}
"""Targets returning tuples -> the result indices vkumd computes (layer norm's mean and
rstd, attention's logsumexp are not: a graph that reads them runs that op in torch)."""


def on(*targets: Any, check: Check | None = None, outputs: frozenset[int] | None = None
       ) -> Callable[[Handler], Handler]:
    """Decorator: register the handler for each target (and its check)."""

    def wrap(fn: Handler) -> Handler:
        for t in targets:
            HANDLERS[t] = fn
            if check is not None:
                CHECKS[t] = check
            if outputs is not None:
                MULTI_OUTPUT[t] = outputs
        return fn

    return wrap


def meta(node: Any) -> Any:
    """The fake tensor (or SymInt) FX recorded for a node, or None."""
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    """A node's argument by position or keyword (FX keeps either)."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _float_meta(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not val.dtype.is_floating_point:
        return "needs a floating-point result"
    return None


# -- sizes -----------------------------------------------------------------------------------

@on(aten.sym_size.int)
def _sym_size(cv: Any, node: fx.Node, x: Value, dim: int) -> Any:
    return x.shape[dim]


@on(operator.mul)
def _size_mul(cv: Any, node: fx.Node, a: Any, b: Any) -> Any:
    return a * b


@on(operator.add)
def _size_add(cv: Any, node: fx.Node, a: Any, b: Any) -> Any:
    return a + b


@on(operator.sub)
def _size_sub(cv: Any, node: fx.Node, a: Any, b: Any) -> Any:
    return a - b


@on(operator.floordiv)
def _size_floordiv(cv: Any, node: fx.Node, a: Any, b: Any) -> Any:
    return a // b


def _arange_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or val.dtype not in (torch.int64, torch.int32):
        return "only integer aranges (positions) run on vkumd"
    step = node.args[2] if node.target is aten.arange.start_step else 1
    return None if isinstance(step, int) and step == 1 else "only a step of 1"


@on(aten.arange.default, aten.arange.start, aten.arange.start_step, check=_arange_check)
def _arange(cv: Any, node: fx.Node, *args: Any, **kwargs: Any) -> Any:
    """``arange(start, end)`` of symbolic sizes: an IR input the runner fills on each call
    (the values depend on the sizes only), so position ids need no torch fallback."""
    start, end = (0, args[0]) if node.target is aten.arange.default else args[:2]
    name = cv.b.graph.unique_name("arange")
    value = cv.b.input(name, (end - start,), "int32")
    cv.ranges[name] = (start, end, 1)
    return value


@on(operator.getitem)
def _getitem(cv: Any, node: fx.Node, items: Any, index: int) -> Any:
    return items[index]


# -- elementwise -----------------------------------------------------------------------------

def _binary(method: str) -> Handler:
    def handle(cv: Any, node: fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> Value:
        # Torch promotes (an int mask times a float); the IR wants one dtype, so both sides
        # are cast to the result's type first.
        a, b = cv.promote(node, a), cv.promote(node, b)
        if alpha != 1:
            b = cv.b.scale(b, alpha) if isinstance(b, Value) else b * alpha
        return getattr(cv.b, method)(a, b)
    return handle


on(aten.add.Tensor, aten.add.Scalar)(_binary("add"))
on(aten.sub.Tensor, aten.sub.Scalar)(_binary("sub"))
on(aten.mul.Tensor, aten.mul.Scalar)(_binary("mul"))
on(aten.maximum.default, check=_float_meta)(_binary("maximum"))
on(aten.minimum.default, check=_float_meta)(_binary("minimum"))


def _with_constant(method: str) -> Handler:
    """A binary op whose IR op takes two values: a number becomes a 0-d constant of the
    other side's dtype (the builder's add, sub and mul take numbers themselves)."""
    def handle(cv: Any, node: fx.Node, a: Any, b: Any) -> Value:
        a, b = cv.promote(node, a), cv.promote(node, b)
        like = a if isinstance(a, Value) else b
        a, b = (v if isinstance(v, Value) else cv.b.constant(np.asarray(v), like.dtype.name)
                for v in (a, b))
        return getattr(cv.b, method)(a, b)
    return handle


on(aten.remainder.Tensor, aten.remainder.Scalar)(_with_constant("remainder"))
on(aten.fmod.Tensor, aten.fmod.Scalar)(_with_constant("fmod"))
on(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar)(_with_constant("pow"))
on(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)(_with_constant("bitwise_and"))
on(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)(_with_constant("bitwise_or"))
on(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)(_with_constant("bitwise_xor"))


def _plain_div(node: fx.Node) -> str | None:
    if node.kwargs.get("rounding_mode") is not None:
        return "rounding_mode is not supported"
    return _float_meta(node)


@on(aten.div.Tensor, aten.div.Scalar, check=_plain_div)
def _div(cv: Any, node: fx.Node, a: Any, b: Any) -> Value:
    return cv.b.div(cv.promote(node, a), cv.promote(node, b))


@on(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(cv: Any, node: fx.Node, a: Any, b: Any, *, alpha: Any = 1) -> Value:
    a, b = cv.promote(node, a), cv.promote(node, b)
    if alpha != 1:
        a = cv.b.scale(a, alpha)
    return cv.b.sub(b, a)


@on(aten.neg.default)
def _neg(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.scale(x, -1.0)


def _gelu_check(node: fx.Node) -> str | None:
    if node.kwargs.get("approximate", "none") not in ("none", "tanh"):
        return "approximate must be 'none' or 'tanh'"
    return _float_meta(node)


@on(aten.gelu.default, check=_gelu_check)
def _gelu(cv: Any, node: fx.Node, x: Value, *, approximate: str = "none") -> Value:
    return cv.b.gelu_tanh(x) if approximate == "tanh" else cv.b.gelu(x)


@on(aten.relu.default)
def _relu(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.relu(x)


@on(aten.silu.default, check=_float_meta)
def _silu(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.silu(x)


@on(aten.hardswish.default, check=_float_meta)
def _hardswish(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.op("hardswish", x)


def _to_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None:
        return "no type recorded"
    from vkumd.framework.frontends.torch.dims import IR_DTYPES

    return None if val.dtype in IR_DTYPES else f"casts to {val.dtype}"


@on(aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, check=_to_check)
def _to(cv: Any, node: fx.Node, x: Value, *args: Any, **kwargs: Any) -> Value:
    # Device and layout arguments do not matter here: the result lives where vkumd puts it.
    target = meta(node).dtype
    source = meta(node.args[0])
    if source is not None and source.dtype == torch.bool and target != torch.bool:
        # A mask as numbers: a choice, which joins a generated kernel (a cast would not).
        from vkumd.framework.frontends.torch.dims import ir_dtype

        one = cv.b.constant(np.ones(()), ir_dtype(target), name="one")
        return cv.b.where(x, one, cv.b.constant(np.zeros(()), ir_dtype(target), name="zero"))
    return cv.cast_to(x, target)


@on(aten.clone.default, aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
    aten.contiguous.default, aten.dropout.default)
def _identity(cv: Any, node: fx.Node, x: Value, *args: Any, **kwargs: Any) -> Value:
    # Copies and aliases are the same value to a graph without mutation; dropout only ever
    # reaches here in eval mode (training dropout traces to native_dropout, which is refused).
    return x


# -- row-wise --------------------------------------------------------------------------------

def last_axis(cv: Any, x: Value, dim: int, fn: Callable[[Value], Value], *,
              restore: bool) -> Value:
    """``fn`` over axis ``dim`` of ``x``, which vkumd's row kernels take only last: the axis
    is permuted to the end (and back, when ``restore``)."""
    ndim = len(x.shape)
    dim %= ndim
    if dim == ndim - 1:
        return fn(x)
    order = [d for d in range(ndim) if d != dim] + [dim]
    y = fn(cv.b.permute(x, order))
    if not restore:
        return y
    back = [order.index(d) for d in range(ndim)]
    return cv.b.permute(y, back)


@on(aten._softmax.default, aten.softmax.int, check=_float_meta)
def _softmax(cv: Any, node: fx.Node, x: Value, dim: int, *rest: Any, **kwargs: Any) -> Value:
    x = cv.cast_to(x, meta(node).dtype)
    return last_axis(cv, x, dim, cv.b.softmax, restore=True)


def _norm_check(node: fx.Node) -> str | None:
    shape = arg(node, 1, "normalized_shape")
    if shape is None or len(shape) != 1:
        return "normalizes over more than the last axis"
    return _float_meta(node) if not isinstance(meta(node), tuple) else None


@on(aten.layer_norm.default, check=_norm_check)
def _layer_norm(cv: Any, node: fx.Node, x: Value, shape: Any, weight: Value | None = None,
                bias: Value | None = None, eps: float = 1e-5, *rest: Any) -> Value:
    return cv.b.layer_norm(x, weight, bias, eps=eps)


@on(aten.native_layer_norm.default, check=_norm_check, outputs=frozenset({0}))
def _native_layer_norm(cv: Any, node: fx.Node, x: Value, shape: Any, weight: Value | None,
                       bias: Value | None, eps: float) -> tuple[Any, ...]:
    return (cv.b.layer_norm(x, weight, bias, eps=eps), None, None)
