"""Layout ops, their records and eager functions: transpose, permute, reshape (a view:
``-1`` and symbolic dims) and embedding (rows of a table gathered by int32 ids; out-of-range
ids give zero rows).

Transpose and permute are views sharing x's memory (no launch), as PyTorch's; with ``out=``
(the graph's lowering) they copy stored bits unchanged (NaN payloads and -0.0 included) into
a contiguous row-major output, as embedding writes its rows; element types float32, float16,
bfloat16 and int32. Reshape is a view over the same allocation (no launch, no copy) of
contiguous data and a copy of a strided view, as :mod:`vkumd.framework.ops.shape`'s flatten.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.gather import gather_plan
from vkumd.compiler.kernels.permute import permute_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Dim, Shape, as_dim, divide_exact, format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import FLOATS, Types, axis_of, only
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_dtype, check_tensor, output
from vkumd.framework.opset.common import attrs_of, binary
from vkumd.framework.opset.unary import fill
from vkumd.framework.strided import copy_into
from vkumd.framework.tensor import Tensor


def embedding(ids: Tensor, table: Tensor, *, out: Tensor | None = None) -> Tensor:
    """Rows of ``table`` picked by ``ids``: ``out[..., :] = table[ids[...], :]``.

    Out-of-range ids (negative, or ``>= table.shape[0]``) are not an error, because the
    host cannot see device-resident ids without waiting for them: their output rows are
    written as zeros (all-zero bits). Check ids on the host first if that must fail.

    Args:
        ids: int32 tensor of any shape (0-d included).
        table: ``(vocab, dim)`` tensor of float32, float16, bfloat16 or int32.
        out: optional output of shape ``ids.shape + (dim,)`` and table's dtype.

    Returns:
        ``ids.shape + (dim,)``, table's dtype.

    Raises:
        VkumdTypeError: ids not int32; table of an unsupported dtype; out of another dtype.
        VkumdValueError: table not 2-D; tensors of different contexts; out of the wrong shape.
    """
    op = "embedding"
    ids = check_tensor(op, ids, "ids")
    table = check_tensor(op, table, "table")
    if ids.dtype is not dtypes.int32:
        raise VkumdTypeError(f"embedding: ids are {ids.dtype.name}; they must be int32 "
                             "(cast() converts)")
    check_context(op, ids, table, "table")
    check_dtype(op, table, "table", ELEMENTWISE_CODES)
    if table.ndim != 2:
        raise VkumdValueError(f"embedding: table has shape {table.shape}; it must be 2-D "
                              "(vocab, dim)")
    vocab, dim = table.shape
    out = output(op, table.context, out, ids.shape + (dim,), table.dtype, (ids, table))
    if out.size == 0:
        return out
    if vocab == 0:
        return fill(out, 0)  # every id is out of range
    plan = gather_plan(table.context.caps, 8 * table.dtype.itemsize, dim, ids.size, vocab)
    table.context.run(plan, (ids, table, out))
    return out


def _normalize_dims(op: str, dims: Any, ndim: int) -> list[int]:
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise VkumdTypeError(f"{op}: dims must be a sequence of ints, not {type(dims).__name__}")
    result = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise VkumdTypeError(f"{op}: dims must be ints, got {d!r}")
        if not -ndim <= d < ndim:
            raise VkumdValueError(f"{op}: dimension {d} is out of range for a {ndim}-d tensor")
        result.append(d % ndim)
    if sorted(result) != list(range(ndim)):
        raise VkumdValueError(f"{op}: dims {tuple(dims)} are not a permutation of the "
                              f"{ndim} dimensions")
    return result


def permute(x: Tensor, dims: Sequence[int], *, out: Tensor | None = None) -> Tensor:
    """``x`` with its dimensions reordered (numpy's ``transpose(x, dims)``): a view sharing
    x's memory (no launch), as ``torch.permute``; with ``out=``, a copy into ``out``.

    Args:
        x: a float32, float16, bfloat16, int32 or float64 tensor (float64 moves through the
            strided copy).
        dims: a permutation of ``range(x.ndim)``; negative entries count from the end.
        out: optional output of the permuted shape and x's dtype.

    Returns:
        The view (or ``out``) of shape ``[x.shape[d] for d in dims]``.

    Raises:
        VkumdTypeError: x of an unsupported dtype; dims not ints; out of another dtype.
        VkumdValueError: dims not a permutation; more than 6 dimensions that cannot be
            merged; out of the wrong shape.
    """
    op = "permute"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", MOVED_DTYPES)
    order = _normalize_dims(op, dims, x.ndim)
    return _permute(op, x, order, out)


def transpose(x: Tensor, dim0: int, dim1: int, *, out: Tensor | None = None) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped: a view sharing x's memory, as
    ``torch.transpose``; with ``out=``, a copy into ``out``.

    Args:
        x: a float32, float16, bfloat16, int32 or float64 tensor, at least 1-D.
        dim0: a dimension (negative counts from the end).
        dim1: another (or the same: a copy).
        out: optional output of the transposed shape and x's dtype.

    Returns:
        The view (or ``out``).

    Raises:
        As :func:`permute`.
    """
    op = "transpose"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", MOVED_DTYPES)
    if x.ndim == 0:
        raise VkumdValueError("transpose: x is 0-d and has no dimensions to swap")
    order = list(range(x.ndim))
    for d in (dim0, dim1):
        if isinstance(d, bool) or not isinstance(d, int):
            raise VkumdTypeError(f"transpose: dimensions must be ints, got {d!r}")
        if not -x.ndim <= d < x.ndim:
            raise VkumdValueError(f"transpose: dimension {d} is out of range for a "
                                  f"{x.ndim}-d tensor")
    i, j = dim0 % x.ndim, dim1 % x.ndim
    order[i], order[j] = order[j], order[i]
    return _permute(op, x, order, out)


# The types permute and transpose move: the permute kernel's (32- and 16-bit bits), and
# float64, which the strided copy moves (as two 32-bit words).
MOVED_DTYPES = (*ELEMENTWISE_CODES, "float64")


def permuted_view(x: Tensor, order: Sequence[int]) -> Tensor:
    """``x`` with its dimensions in ``order`` (a checked permutation), as a view sharing its
    memory (no launch, any dtype: a kernel binding it copies it first)."""
    strides = x.element_strides
    return x.as_strided(tuple(x.shape[d] for d in order), tuple(strides[d] for d in order),
                        x.element_offset)


def _permute(op: str, x: Tensor, order: list[int], out: Tensor | None) -> Tensor:
    shape = tuple(x.shape[d] for d in order)
    if out is None:  # a view sharing x's memory, as torch.permute (no launch)
        return permuted_view(x, order)
    out = output(op, x.context, out, shape, x.dtype, (x,))
    if out.size == 0:
        return out
    if x.binding is None or x.dtype.itemsize == 8:  # one strided copy of the permuted view
        strides = x.element_strides
        copy_into(op, out, x.as_strided(shape, tuple(strides[d] for d in order),
                                        x.element_offset))
        return out
    plan = permute_plan(x.context.caps, op, 8 * x.dtype.itemsize, x.shape, tuple(order))
    x.context.run(plan, (x, out))
    return out


def _target(op: str, x: Tensor, shape: Any) -> tuple[int, ...]:
    """``shape`` with its one ``-1`` worked out from ``x``'s element count."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise VkumdTypeError(f"{op}: shape must be a sequence of ints, not {shape!r}")
    for d in shape:
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)):
            raise VkumdTypeError(f"{op}: shape {tuple(shape)!r} must hold ints")
    dims = [int(d) for d in shape]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise VkumdValueError(f"{op}: shape {tuple(dims)} may hold one -1 and no other "
                              "negative size")
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or x.size % known:
            raise VkumdValueError(f"{op}: cannot infer the -1 of shape {tuple(dims)} for a "
                                  f"tensor of shape {x.shape} ({x.size} elements)")
        dims[dims.index(-1)] = x.size // known
    elif known != x.size:
        raise VkumdValueError(f"{op}: a tensor of shape {x.shape} has {x.size} elements; "
                              f"shape {tuple(dims)} holds {known}. Give a shape with "
                              f"{x.size} elements (one -1 is inferred)")
    return tuple(dims)


def reshape(x: Tensor, shape: Sequence[int] | int) -> Tensor:
    """``x`` seen with another shape of the same element count: a view, never a copy.

    Args:
        x: any tensor.
        shape: the new shape; one entry may be ``-1``, inferred from the others.

    Returns:
        A tensor sharing ``x``'s memory.

    Raises:
        VkumdTypeError: ``x`` not a tensor, or ``shape`` not ints.
        VkumdValueError: the element counts differ, or ``-1`` cannot be inferred.
    """
    x = check_tensor("reshape", x, "x")
    return x.alias(_target("reshape", x, shape))


def _permutation(op: str, order: Any, ndim: int) -> list[int]:
    if not isinstance(order, (tuple, list)):
        raise VkumdTypeError(f"{op}: dims must be a tuple of ints, not {order!r}")
    norm = [axis_of(op, d, ndim) for d in order]
    if sorted(norm) != list(range(ndim)):
        raise VkumdValueError(f"{op}: dims {tuple(order)} are not a permutation of "
                              f"{ndim} dimensions")
    return norm


def _permute_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    order = _permutation("permute", attrs["dims"], x.ndim)
    return [TensorType(tuple(x.shape[d] for d in order), x.dtype)]


def _transpose_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    if x.ndim == 0:
        raise VkumdValueError("transpose: x is 0-d and has no dimensions to swap")
    i = axis_of("transpose", attrs["dim0"], x.ndim)
    j = axis_of("transpose", attrs["dim1"], x.ndim)
    shape = list(x.shape)
    shape[i], shape[j] = shape[j], shape[i]
    return [TensorType(tuple(shape), x.dtype)]


def _transpose_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    transpose(ins[0], at["dim0"], at["dim1"], out=outs[0])


def _permute_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    permute(ins[0], attrs_of(node)["dims"], out=outs[0])


def _moved_dtypes(node: Node) -> str | None:
    """Why the permute kernel cannot move ``node``'s input: a type it does not take (found
    at import, not when the graph is lowered)."""
    x = node.inputs[0]
    if x is not None and x.dtype.name not in MOVED_DTYPES:
        return (f"{node.op} has no device kernel for {x.dtype.name} (its kernels take "
                f"{', '.join(MOVED_DTYPES)})")
    return None


define("transpose", ("x",), {"dim0": REQUIRED, "dim1": REQUIRED}, rule=_transpose_rule,
       reference=lambda a, attrs, s: [np.swapaxes(a[0], attrs["dim0"], attrs["dim1"])],
       lower=_transpose_lower, refuse=_moved_dtypes, eager=transpose)
define("permute", ("x",), {"dims": REQUIRED}, rule=_permute_rule,
       reference=lambda a, attrs, s: [np.transpose(a[0], attrs["dims"])],
       lower=_permute_lower, refuse=_moved_dtypes, eager=permute)


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
    x = only(ins)
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
       lower=binary(embedding), eager=embedding)
