"""Shape rules of matmul, attention and the layout ops.

matmul and attention follow vkumd's ops (matmul's batch rule, fused epilogue attributes;
attention over ``[batch, heads, seq, head_dim]``). Kernel limits (attention's head_dim
multiple of 4, push-constant ranks) are the lowering's to check, not the IR's.
Layout ops: transpose, permute, reshape (``-1`` and symbolic dims), embedding, concat, split
and slice along one axis.
"""

from __future__ import annotations

from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import (
    Dim,
    Shape,
    as_dim,
    divide_exact,
    format_shape,
    product,
)
from vkumd.framework.graph.registry import REQUIRED, TensorType, register
from vkumd.framework.graph.rules_elementwise import (
    ACTIVATIONS,
    FLOATS,
    Types,
    flag,
    real,
    same_dtype,
)
from vkumd.framework.graph.symbols import DimTable

MATMUL_DTYPES = ("float32", "float16", "bfloat16", "int8")
ATTENTION_DTYPES = ("float32", "float16")
# Mirrors vkumd.compiler.kernels.attention_plan.LAYOUTS: "bhsd" is [batch, heads, seq,
# head_dim], "bshd" [batch, seq, heads, head_dim].
ATTENTION_LAYOUTS = ("bhsd", "bshd")


def swap_heads_seq(shape: tuple[Any, ...], layout: str) -> tuple[Any, ...]:
    """An attention operand's ``shape`` in ``layout`` as [batch, heads, seq, head_dim], or
    a [b, h, s, d] shape as ``layout`` has it (the swap is its own inverse)."""
    if layout == "bshd":
        return (shape[0], shape[2], shape[1], shape[3])
    return tuple(shape)


def attention_layouts(attrs: dict[str, Any]) -> tuple[str, str]:
    """An attention node's input and output layouts (``out_layout`` None: the input's).

    Raises:
        VkumdValueError: a layout not in :data:`ATTENTION_LAYOUTS`.
    """
    layout, out_layout = attrs.get("layout", "bhsd"), attrs.get("out_layout")
    out_layout = layout if out_layout is None else out_layout
    for name, value in (("layout", layout), ("out_layout", out_layout)):
        if not isinstance(value, str) or value not in ATTENTION_LAYOUTS:
            raise VkumdValueError(f"attention: unknown {name} {value!r}; choose one of "
                                  f"{list(ATTENTION_LAYOUTS)}")
    return layout, out_layout


def axis_of(op: str, axis: Any, ndim: int) -> int:
    """``axis`` (negative counts from the end) as an index into ``ndim`` dimensions."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise VkumdTypeError(f"{op}: axis must be an int, not {axis!r}")
    if not -ndim <= axis < ndim:
        raise VkumdValueError(f"{op}: axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def _matmul_batch(a: Shape, b: Shape, dims: DimTable) -> Shape:
    # As vkumd's matmul: a 2-D (or single-entry) side is shared by the other side's batch;
    # otherwise the batch shapes must be equal (no general broadcasting).
    if not b or (product(b) == 1 and len(b) <= len(a)):
        return a
    if not a or (product(a) == 1 and len(a) <= len(b)):
        return b
    if not dims.same_shape(a, b):
        raise VkumdValueError(f"matmul: batch dimensions {format_shape(a)} and "
                              f"{format_shape(b)} differ; use equal batch shapes or a 2-D "
                              "operand shared by the batch")
    return a


@register("matmul", ("a", "b", "bias?", "residual?"),
          {"trans_a": False, "trans_b": False, "activation": None, "alpha": 1.0},
          inplace=("residual",))
def _matmul(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    a, b, bias, residual = ins
    assert a is not None and b is not None
    dt = same_dtype("matmul", ("a", a), ("b", b), ("bias", bias), ("residual", residual))
    if dt.name not in MATMUL_DTYPES:
        raise VkumdTypeError(f"matmul: {dt.name} operands; matmul takes "
                             f"{', '.join(MATMUL_DTYPES)}")
    if attrs["activation"] not in ACTIVATIONS:
        raise VkumdValueError(f"matmul: activation={attrs['activation']!r} is unknown; use one "
                              f"of {', '.join(repr(x) for x in ACTIVATIONS)}")
    trans_a = flag("matmul", attrs["trans_a"], "trans_a")
    trans_b = flag("matmul", attrs["trans_b"], "trans_b")
    alpha = real("matmul", attrs["alpha"], "alpha")
    if a.ndim < 2 or b.ndim < 2:
        raise VkumdValueError(f"matmul: a and b need at least 2 dimensions, got "
                              f"{format_shape(a.shape)} and {format_shape(b.shape)}")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if not dims.same(k, k2):
        raise VkumdValueError(f"matmul: inner dimensions differ: op(a) is {m} x {k} and op(b) "
                              f"is {k2} x {n} (trans_a={trans_a}, trans_b={trans_b})")
    out = (*_matmul_batch(a.shape[:-2], b.shape[:-2], dims), m, n)
    if dt is dtypes.int8:
        if (bias is not None or residual is not None or attrs["activation"] is not None
                or alpha != 1.0):
            raise VkumdValueError("matmul: int8 inputs give the exact int32 product only; "
                                  "bias, activation, residual and alpha need float inputs")
        return [TensorType(out, dtypes.int32)]
    if bias is not None and (bias.ndim != 1 or not dims.same(bias.shape[0], n)):
        raise VkumdValueError(f"matmul: bias has shape {format_shape(bias.shape)}; it must be "
                              f"[{n}], one value per output column")
    if residual is not None and not (
            dims.same_shape(residual.shape, out)
            or (len(out) > 2 and dims.same_shape(residual.shape, (m, n)))):
        raise VkumdValueError(f"matmul: residual has shape {format_shape(residual.shape)}; it "
                              f"must be the output's {format_shape(out)} or [{m}, {n}]")
    return [TensorType(out, dt)]


@register("attention", ("q", "k", "v", "key_lengths?", "attn_mask?"),
          {"causal": False, "scale": None, "layout": "bhsd", "out_layout": None})
def _attention(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    q, k, v, key_lengths, mask = ins
    assert q is not None and k is not None and v is not None
    layout, out_layout = attention_layouts(attrs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise VkumdValueError(f"attention: {name} must be 4-D (layout {layout!r}), got "
                                  f"{format_shape(t.shape)}")
    dt = same_dtype("attention", ("q", q), ("k", k), ("v", v))
    if dt.name not in ATTENTION_DTYPES:
        raise VkumdTypeError(f"attention: q is {dt.name}; attention takes "
                             f"{', '.join(ATTENTION_DTYPES)}")
    flag("attention", attrs["causal"], "causal")
    if attrs["scale"] is not None:
        real("attention", attrs["scale"], "scale")
    if not dims.same_shape(k.shape, v.shape):
        raise VkumdValueError(f"attention: k and v must have the same shape, got "
                              f"{format_shape(k.shape)} and {format_shape(v.shape)}")
    q_shape, k_shape = swap_heads_seq(q.shape, layout), swap_heads_seq(k.shape, layout)
    batch, q_heads, q_len, head_dim = q_shape
    if not dims.same(k.shape[0], batch):
        raise VkumdValueError(f"attention: q has batch {batch} and k/v have {k.shape[0]}")
    if not dims.same(k_shape[3], head_dim):
        raise VkumdValueError(f"attention: q has head_dim {head_dim} and k/v have "
                              f"{k_shape[3]}; they must match")
    kv_heads = dims.resolve(k_shape[1])
    heads = dims.resolve(q_heads)
    if isinstance(kv_heads, int) and isinstance(heads, int):
        if kv_heads < 1 or heads % kv_heads:
            raise VkumdValueError(f"attention: {heads} query heads are not a multiple of "
                                  f"{kv_heads} key/value heads")
    elif heads != kv_heads and divide_exact(heads, kv_heads) is None:
        raise VkumdValueError(f"attention: {heads} query heads are not a known multiple of "
                              f"{kv_heads} key/value heads")
    if key_lengths is not None and (key_lengths.dtype is not dtypes.int32
                                    or key_lengths.ndim != 1
                                    or not dims.same(key_lengths.shape[0], batch)):
        raise VkumdValueError(f"attention: key_lengths must be int32 [{batch}], got "
                              f"{key_lengths}")
    if mask is not None:
        if mask.dtype.name not in ATTENTION_DTYPES:
            raise VkumdTypeError(f"attention: attn_mask is {mask.dtype.name}; it must be "
                                 "float32 or float16")
        scores = (batch, q_heads, q_len, k_shape[2])
        if not dims.same_shape(dims.broadcast(mask.shape, scores), scores):
            raise VkumdValueError(f"attention: attn_mask {format_shape(mask.shape)} does not "
                                  f"broadcast to the scores' {format_shape(scores)}")
    return [TensorType(swap_heads_seq(q_shape, out_layout), q.dtype)]


def _permutation(op: str, order: Any, ndim: int) -> list[int]:
    if not isinstance(order, (tuple, list)):
        raise VkumdTypeError(f"{op}: dims must be a tuple of ints, not {order!r}")
    norm = [axis_of(op, d, ndim) for d in order]
    if sorted(norm) != list(range(ndim)):
        raise VkumdValueError(f"{op}: dims {tuple(order)} are not a permutation of "
                              f"{ndim} dimensions")
    return norm


@register("permute", ("x",), {"dims": REQUIRED})
def _permute(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    order = _permutation("permute", attrs["dims"], x.ndim)
    return [TensorType(tuple(x.shape[d] for d in order), x.dtype)]


@register("transpose", ("x",), {"dim0": REQUIRED, "dim1": REQUIRED})
def _transpose(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    if x.ndim == 0:
        raise VkumdValueError("transpose: x is 0-d and has no dimensions to swap")
    i = axis_of("transpose", attrs["dim0"], x.ndim)
    j = axis_of("transpose", attrs["dim1"], x.ndim)
    shape = list(x.shape)
    shape[i], shape[j] = shape[j], shape[i]
    return [TensorType(tuple(shape), x.dtype)]


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


@register("reshape", ("x",), {"shape": REQUIRED}, inplace=True)
def _reshape(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    return [TensorType(reshape_target(x.shape, attrs["shape"], dims), x.dtype)]


@register("embedding", ("ids", "table"))
def _embedding(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
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


@register("concat", ("xs*",), {"axis": REQUIRED})
def _concat(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    xs = [t for t in ins if t is not None]
    first = xs[0]
    dt = same_dtype("concat", *((f"xs[{i}]", t) for i, t in enumerate(xs)))
    axis = axis_of("concat", attrs["axis"], first.ndim)
    total: int | Dim = 0
    for i, t in enumerate(xs):
        rest_t = t.shape[:axis] + t.shape[axis + 1:]
        rest_0 = first.shape[:axis] + first.shape[axis + 1:]
        if t.ndim != first.ndim or not dims.same_shape(rest_t, rest_0):
            raise VkumdValueError(f"concat: xs[{i}] has shape {format_shape(t.shape)}, which "
                                  f"differs from xs[0]'s {format_shape(first.shape)} off "
                                  f"axis {attrs['axis']}")
        total = total + t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), dt)]


@register("split", ("x",), {"axis": REQUIRED, "sizes": REQUIRED})
def _split(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    axis = axis_of("split", attrs["axis"], x.ndim)
    sizes = attrs["sizes"]
    if not isinstance(sizes, (tuple, list)) or not sizes:
        raise VkumdTypeError(f"split: sizes must be a non-empty tuple, not {sizes!r}")
    parts = [as_dim(s) for s in sizes]
    if not dims.same(sum(parts[1:], parts[0]), x.shape[axis]):
        raise VkumdValueError(f"split: sizes {tuple(str(p) for p in parts)} do not add up to "
                              f"axis {attrs['axis']}'s {x.shape[axis]}")
    out = []
    for p in parts:
        shape = list(x.shape)
        shape[axis] = p
        out.append(TensorType(tuple(shape), x.dtype))
    return out


@register("slice", ("x",), {"axis": REQUIRED, "start": 0, "stop": None, "step": 1})
def _slice(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    axis = axis_of("slice", attrs["axis"], x.ndim)
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    start = 0 if start is None else start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise VkumdTypeError(f"slice: {what} must be an int or None, not {v!r}")
    if step is None or step < 1:
        raise VkumdValueError(f"slice: step must be >= 1, got {step}")
    size = dims.resolve(x.shape[axis])
    if isinstance(size, int):
        length: int | Dim = len(range(*slice(start, stop, step).indices(size)))
    else:
        # A symbolic axis cannot be clamped: the slice is taken to lie inside it.
        if step != 1:
            raise VkumdValueError(f"slice: step {step} along symbolic axis {size} is not "
                                  "supported")
        lo = start if start >= 0 else size + start
        hi = size if stop is None else (stop if stop >= 0 else size + stop)
        length = hi - lo
        if isinstance(length, int) and length < 0:
            raise VkumdValueError(f"slice: [{start}:{stop}] is empty or reversed")
    shape = list(x.shape)
    shape[axis] = length
    return [TensorType(tuple(shape), x.dtype)]
