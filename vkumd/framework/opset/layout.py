"""Layout ops: transpose, permute, reshape (a view: ``-1`` and symbolic dims) and embedding
(rows of a table gathered by int32 ids; out-of-range ids give zero rows)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Dim, Shape, as_dim, divide_exact, format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import FLOATS, Types, axis_of
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops import layout as ops
from vkumd.framework.ops.shape import reshape
from vkumd.framework.opset.common import attrs_of, binary
from vkumd.framework.tensor import Tensor


def _permutation(op: str, order: Any, ndim: int) -> list[int]:
    if not isinstance(order, (tuple, list)):
        raise VkumdTypeError(f"{op}: dims must be a tuple of ints, not {order!r}")
    norm = [axis_of(op, d, ndim) for d in order]
    if sorted(norm) != list(range(ndim)):
        raise VkumdValueError(f"{op}: dims {tuple(order)} are not a permutation of "
                              f"{ndim} dimensions")
    return norm


def _permute_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    order = _permutation("permute", attrs["dims"], x.ndim)
    return [TensorType(tuple(x.shape[d] for d in order), x.dtype)]


def _transpose_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    if x.ndim == 0:
        raise VkumdValueError("transpose: x is 0-d and has no dimensions to swap")
    i = axis_of("transpose", attrs["dim0"], x.ndim)
    j = axis_of("transpose", attrs["dim1"], x.ndim)
    shape = list(x.shape)
    shape[i], shape[j] = shape[j], shape[i]
    return [TensorType(tuple(shape), x.dtype)]


def _transpose_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    ops.transpose(ins[0], at["dim0"], at["dim1"], out=outs[0])


def _permute_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.permute(ins[0], attrs_of(node)["dims"], out=outs[0])


define("transpose", ("x",), {"dim0": REQUIRED, "dim1": REQUIRED}, rule=_transpose_rule,
       reference=lambda a, attrs, s: [np.swapaxes(a[0], attrs["dim0"], attrs["dim1"])],
       lower=_transpose_lower, eager=ops.transpose)
define("permute", ("x",), {"dims": REQUIRED}, rule=_permute_rule,
       reference=lambda a, attrs, s: [np.transpose(a[0], attrs["dims"])],
       lower=_permute_lower, eager=ops.permute)


def reshape_target(x: Shape, target: Any, dims: DimTable) -> Shape:
    """The shape ``target`` names for ``x``'s elements, with its one ``-1`` solved.

    Raises:
        VkumdValueError: more than one ``-1``, an unsolvable ``-1``, or element counts that
            differ.
    """
    if not isinstance(target, (tuple, list)):
        raise VkumdTypeError(f"reshape: shape must be a tuple, not {target!r}")
    holes = [i for i, d in enumerate(target) if d == -1 and not isinstance(d, Dim)]
    if len(holes) > 1:
        raise VkumdValueError(f"reshape: shape {tuple(target)} has more than one -1")
    known = [dims.resolve(as_dim(d)) for i, d in enumerate(target) if i not in holes]
    total = dims.resolve(product(x))
    if holes:
        missing = divide_exact(total, product(known))
        if missing is None:
            raise VkumdValueError(f"reshape: cannot solve -1 in {tuple(str(d) for d in target)}"
                                  f": {total} elements are not a known multiple of "
                                  f"{product(known)}")
        known.insert(holes[0], missing)
    out = tuple(known)
    if dims.resolve(product(out)) != total:
        raise VkumdValueError(f"reshape: {format_shape(x)} has {total} elements and "
                              f"{format_shape(out)} has {product(out)}")
    return out


def _reshape_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    return [TensorType(reshape_target(x.shape, attrs["shape"], dims), x.dtype)]


def _reshape_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Any:
    return xs[0].reshape(shapes[0])


define("reshape", ("x",), {"shape": REQUIRED}, inplace=True, rule=_reshape_rule,
       reference=lambda a, attrs, s: [np.reshape(a[0], s[0])], view=True,
       host=_reshape_host, eager=reshape)


def _embedding_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    ids, table = ins
    assert ids is not None and table is not None
    if ids.dtype is not dtypes.int32:
        raise VkumdTypeError(f"embedding: ids are {ids.dtype.name}; they must be int32")
    if table.ndim != 2:
        raise VkumdValueError(f"embedding: table has shape {format_shape(table.shape)}; it "
                              "must be 2-D [vocab, dim]")
    if table.dtype.name not in (*FLOATS, "int32"):
        raise VkumdTypeError(f"embedding: table is {table.dtype.name}")
    return [TensorType(ids.shape + (table.shape[1],), table.dtype)]


def _embedding_reference(args: list[Any], attrs: dict[str, Any], shapes: Any
                         ) -> list[np.ndarray]:
    ids, table = args
    ids = ids.astype(np.int64)
    inside = (ids >= 0) & (ids < table.shape[0])
    rows = table[np.where(inside, ids, 0)] if table.shape[0] else np.zeros(shapes[0])
    return [np.where(inside[..., None], rows, 0.0)]


define("embedding", ("ids", "table"), rule=_embedding_rule, reference=_embedding_reference,
       lower=binary(ops.embedding), eager=ops.embedding)
