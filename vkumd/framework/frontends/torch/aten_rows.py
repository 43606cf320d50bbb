"""The row aten ops along a dimension: log_softmax, cumsum, cumprod (handlers as in
:mod:`.aten_map`; the vkumd ops take any dimension themselves). Registered into
:data:`~.aten_map.HANDLERS` on import."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from vkumd.framework.frontends.torch.aten_map import aten, meta, on
from vkumd.framework.graph.ir import Value


def _float_result(node: fx.Node) -> str | None:
    """Refuse a node whose result is not floating point (torch keeps it)."""
    val = meta(node)
    if val is None or not val.dtype.is_floating_point:
        return "needs a floating-point result"
    return None


@on(aten._log_softmax.default, aten.log_softmax.int, check=_float_result)
def _log_softmax(cv: Any, node: fx.Node, x: Value, dim: int, *rest: Any,
                 **kwargs: Any) -> Value:
    x = cv.cast_to(x, meta(node).dtype)
    return cv.b.log_softmax(x, axis=dim)


def _scan_check(node: fx.Node) -> str | None:
    """Refuse a scan whose input and result differ in dtype (torch's integer cumsum gives
    int64) or whose dtype the scan kernel does not take."""
    first = node.args[0] if node.args else None
    val, src = meta(node), meta(first)
    if val is None or src is None or val.dtype != src.dtype:
        return "changes the dtype (an integer cumsum gives int64)"
    if not (val.dtype.is_floating_point or val.dtype == torch.int32):
        return "needs float or int32 tensors"
    return None


@on(aten.cumsum.default, check=_scan_check)
def _cumsum(cv: Any, node: fx.Node, x: Value, dim: int, *rest: Any, **kwargs: Any) -> Value:
    return cv.b.cumsum(x, axis=dim)


@on(aten.cumprod.default, check=_scan_check)
def _cumprod(cv: Any, node: fx.Node, x: Value, dim: int, *rest: Any, **kwargs: Any) -> Value:
    return cv.b.cumprod(x, axis=dim)
