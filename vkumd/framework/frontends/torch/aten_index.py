"""Index aten ops onto vkumd's index ops (handlers as in :mod:`.aten_map`): ``gather``
(``gather_elements``), ``scatter``, ``scatter_add`` and ``scatter_reduce``
(``scatter_elements``), ``triu`` and ``tril`` (``trilu``). int64 indices run as int32, as
every int64 does here (:mod:`.dims`).

torch refuses indices out of range; vkumd's kernels cannot see device-resident indices, so
such an index gives 0 in a gather and drops its update in a scatter instead (never a read or
write outside a tensor). Duplicate scatter indices are applied in order.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from vkumd.framework.frontends.torch.aten_map import arg, aten, on
from vkumd.framework.graph.ir import Value

# torch's scatter_reduce names and ONNX's (vkumd's) reductions; "mean" has none.
_REDUCTIONS = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


@on(aten.gather.default)
def _gather(cv: Any, node: fx.Node, x: Value, dim: int, index: Value, *args: Any,
            **kwargs: Any) -> Value:
    # sparse_grad only changes the gradient.
    return cv.b.gather_elements(x, cv.cast_to_ir(index, "int32"), axis=int(dim))


@on(aten.scatter.src)
def _scatter(cv: Any, node: fx.Node, x: Value, dim: int, index: Value, src: Value) -> Value:
    return cv.b.scatter_elements(x, cv.cast_to_ir(index, "int32"), src, axis=int(dim))


@on(aten.scatter_add.default)
def _scatter_add(cv: Any, node: fx.Node, x: Value, dim: int, index: Value, src: Value
                 ) -> Value:
    return cv.b.scatter_elements(x, cv.cast_to_ir(index, "int32"), src, axis=int(dim),
                                 reduction="add")


def _reduce_check(node: fx.Node) -> str | None:
    reduce = arg(node, 4, "reduce")
    if reduce not in _REDUCTIONS:
        return f"reduce={reduce!r} (vkumd takes {', '.join(_REDUCTIONS)})"
    if not arg(node, 5, "include_self", True):
        return "include_self=False"
    return None


@on(aten.scatter_reduce.two, check=_reduce_check)
def _scatter_reduce(cv: Any, node: fx.Node, x: Value, dim: int, index: Value, src: Value,
                    reduce: str, **kwargs: Any) -> Value:
    return cv.b.scatter_elements(x, cv.cast_to_ir(index, "int32"), src, axis=int(dim),
                                 reduction=_REDUCTIONS[reduce])


@on(aten.triu.default)
def _triu(cv: Any, node: fx.Node, x: Value, diagonal: int = 0) -> Value:
    return cv.b.trilu(x, k=int(diagonal), upper=True)


@on(aten.tril.default)
def _tril(cv: Any, node: fx.Node, x: Value, diagonal: int = 0) -> Value:
    return cv.b.trilu(x, k=int(diagonal), upper=False)
