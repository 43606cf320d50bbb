"""A float64 numpy evaluator of graphs: the oracle of the tests and constant folding's math.

Every op computes in float64 from float64 arguments. Integer values stay integral (int32
fits a float64 exactly); comparisons give 0.0/1.0. Rounding happens only where the IR says a
value changes type: graph inputs are first rounded to their declared dtype (what a device
would hold) and ``cast`` rounds to its target. The semantics are vkumd's kernels': softmax
rows whose every entry is ``-inf`` are zeros, attention rows with every key masked are zeros,
integer division by zero and out-of-range embedding ids give zeros.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.rules_fused import STEP_ARITY
from vkumd.framework.graph.rules_tensor import attention_layouts
from vkumd.framework.graph.shapes import OPS

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Graph, Node

Arrays = list[np.ndarray | None]
RefFn = Callable[[Arrays, dict[str, Any], list[tuple[int, ...]]], list[np.ndarray]]
REFERENCES: dict[str, RefFn] = {}

_erf = np.frompyfunc(math.erf, 1, 1)


def _ref(*names: str) -> Callable[[RefFn], RefFn]:
    def wrap(fn: RefFn) -> RefFn:
        for name in names:
            REFERENCES[name] = fn
        return fn
    return wrap


def round_to(array: np.ndarray, dtype: dtypes.DType) -> np.ndarray:
    """``array`` rounded to what ``dtype`` stores, back in float64."""
    if dtype.is_float:
        if dtype is dtypes.bfloat16:
            array = np.asarray(array, np.float32)  # the bfloat16 rounding starts from float32
        shape = np.shape(array)
        stored = dtypes.from_storage(dtypes.to_storage(array, dtype), dtype)
        return np.asarray(stored, np.float64).reshape(shape)
    with np.errstate(invalid="ignore"):
        return np.trunc(np.asarray(array, np.float64)).astype(dtype.numpy).astype(np.float64)


def gelu(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)`` with the exact (erf) normal CDF."""
    # np.asarray: on a 0-d array the ufunc gives a bare float, which has no astype.
    return 0.5 * x * (1.0 + np.asarray(_erf(x / math.sqrt(2.0)), np.float64))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``."""
    return x / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str | None, Callable[[np.ndarray], np.ndarray]] = {
    None: lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "gelu": gelu,
    "gelu_tanh": gelu_tanh, "silu": silu}


def _quiet(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return np.asarray(fn(x), np.float64)


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; an all ``-inf`` row gives zeros, not NaN."""
    top = np.max(x, axis=-1, keepdims=True)
    dead = np.isneginf(top)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.where(dead, 0.0, top))
    total = np.sum(e, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = e / total
    return np.where(dead, 0.0, out)


REFERENCES["add"] = lambda a, attrs, s: [a[0] + a[1]]
REFERENCES["sub"] = lambda a, attrs, s: [a[0] - a[1]]
REFERENCES["mul"] = lambda a, attrs, s: [a[0] * a[1]]
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
for _name, _fn in _COMPARE.items():
    REFERENCES[_name] = (lambda f: lambda a, attrs, s: [f(a[0], a[1]).astype(np.float64)])(_fn)


@_ref("div")
def _div(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
         ) -> list[np.ndarray]:
    a, b = args
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a / b
    rounding = attrs["rounding"]
    if rounding is None:
        return [q]
    q = np.floor(q) if rounding == "floor" else np.trunc(q)
    # Integer division by zero gives 0, as the kernel (and numpy's floor_divide) does.
    return [np.where(np.broadcast_to(b, q.shape) == 0, 0.0, q)]


@_ref("where")
def _where(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
           ) -> list[np.ndarray]:
    return [np.where(args[0] != 0, args[1], args[2]).astype(np.float64)]


@_ref("scale")
def _scale(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
           ) -> list[np.ndarray]:
    return [args[0] * float(attrs["alpha"])]


@_ref("cast")
def _cast(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
          ) -> list[np.ndarray]:
    return [round_to(args[0], dtypes.dtype(attrs["dtype"]))]


for _name in ("relu", "gelu", "gelu_tanh", "silu"):
    REFERENCES[_name] = (lambda f: lambda a, attrs, s: [f(a[0])])(ACTIVATIONS[_name])

_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh,
    "erf": lambda x: _erf(x).astype(np.float64), "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
for _name, _fn in _MATH.items():
    # errstate: sqrt of a negative is NaN and exp overflows to inf, as in float32 kernels.
    REFERENCES[_name] = (lambda f: lambda a, attrs, s: [_quiet(f, a[0])])(_fn)


@_ref("softmax")
def _softmax(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
             ) -> list[np.ndarray]:
    x, mask = args
    scale = 1.0 if attrs["scale"] is None else float(attrs["scale"])
    z = x * scale
    if mask is not None:
        z = z + mask
    return [softmax_rows(z)]


@_ref("layer_norm")
def _layer_norm(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
                ) -> list[np.ndarray]:
    x, w, b = args
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + float(attrs["eps"]))
    y = y * w if w is not None else y
    return [y + b if b is not None else y]


@_ref("add_layer_norm")
def _add_layer_norm(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
                    ) -> list[np.ndarray]:
    x, residual, w, b = args
    return _layer_norm([x + residual, w, b], attrs, shapes)


@_ref("rms_norm")
def _rms_norm(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
              ) -> list[np.ndarray]:
    x, w = args
    y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + float(attrs["eps"]))
    return [y * w if w is not None else y]


_REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max}
for _name, _fn in _REDUCE.items():
    REFERENCES[_name] = (lambda f: lambda a, attrs, s: [
        np.asarray(f(a[0], axis=-1, keepdims=attrs["keepdims"]), np.float64)])(_fn)


@_ref("matmul")
def _matmul(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
            ) -> list[np.ndarray]:
    a, b, bias, residual = args
    if attrs["trans_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["trans_b"]:
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b) * float(attrs["alpha"])
    if bias is not None:
        y = y + bias
    y = ACTIVATIONS[attrs["activation"]](y)
    if residual is not None:
        y = y + residual
    return [np.broadcast_to(y, shapes[0]).copy()]


@_ref("attention")
def _attention(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
               ) -> list[np.ndarray]:
    q, k, v, lengths, mask = args
    layout, out_layout = attention_layouts(attrs)
    if layout == "bshd":
        q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    _, heads, q_len, dim = q.shape
    group = heads // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(dim) if attrs["scale"] is None else float(attrs["scale"])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    k_len = k.shape[2]
    cols = np.arange(k_len)
    if attrs["causal"]:
        rows = np.arange(q_len)[:, None]
        scores = np.where(cols[None, :] > rows + (k_len - q_len), -np.inf, scores)
    if lengths is not None:
        limit = np.clip(lengths, 0, k_len)[:, None, None, None]
        scores = np.where(cols[None, None, None, :] >= limit, -np.inf, scores)
    if mask is not None:
        scores = scores + mask
    out = np.matmul(softmax_rows(scores), v)
    return [np.ascontiguousarray(np.swapaxes(out, 1, 2)) if out_layout == "bshd" else out]


@_ref("fused_elementwise")
def _fused_elementwise(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
                       ) -> list[np.ndarray]:
    # Each step runs the reference of the op it names, so a fused group evaluates exactly as
    # the nodes it replaced (same float64 operations in the same order).
    values: list[np.ndarray] = [a for a in args if a is not None]
    for step in attrs["program"]:
        op, rest = step[0], step[1:]
        arity = STEP_ARITY[op]
        operands = [np.float64(a[1]) if isinstance(a, tuple) else values[a]
                    for a in rest[:arity]]
        params = rest[arity:]
        if op == "cast":
            step_attrs = {"dtype": params[0]}
        else:
            step_attrs = OPS[op].full_attrs({"rounding": params[0]} if params else {})
        values.append(np.asarray(REFERENCES[op](operands, step_attrs, shapes)[0], np.float64))
    return [np.broadcast_to(values[-1], shapes[0]).copy()]


REFERENCES["transpose"] = lambda a, attrs, s: [np.swapaxes(a[0], attrs["dim0"], attrs["dim1"])]
REFERENCES["permute"] = lambda a, attrs, s: [np.transpose(a[0], attrs["dims"])]
REFERENCES["reshape"] = lambda a, attrs, s: [np.reshape(a[0], s[0])]
REFERENCES["concat"] = lambda a, attrs, s: [np.concatenate(a, axis=attrs["axis"])]


@_ref("embedding")
def _embedding(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
               ) -> list[np.ndarray]:
    ids, table = args
    ids = ids.astype(np.int64)
    inside = (ids >= 0) & (ids < table.shape[0])
    rows = table[np.where(inside, ids, 0)] if table.shape[0] else np.zeros(shapes[0])
    return [np.where(inside[..., None], rows, 0.0)]


@_ref("split")
def _split(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
           ) -> list[np.ndarray]:
    axis = attrs["axis"]
    bounds = np.cumsum([s[axis] for s in shapes])[:-1]
    return list(np.split(args[0], bounds, axis=axis))


@_ref("slice")
def _slice(args: Arrays, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
           ) -> list[np.ndarray]:
    x = args[0]
    index = [slice(None)] * x.ndim
    index[attrs["axis"]] = slice(attrs["start"], attrs["stop"], attrs["step"])
    return [x[tuple(index)]]


def run_node(node: Node, args: Sequence[np.ndarray | None], shapes: list[tuple[int, ...]]
             ) -> list[np.ndarray]:
    """``node``'s outputs from float64 ``args``; ``shapes`` are its outputs' concrete shapes.

    Raises:
        GraphError: the op has no reference, or its result has the wrong shape.
    """
    fn = REFERENCES.get(node.op)
    if fn is None:
        raise GraphError(f"no reference implementation of {node.op}", node.describe())
    attrs = OPS[node.op].full_attrs(node.attrs)
    outs = [np.asarray(o, np.float64) for o in fn(list(args), attrs, shapes)]
    for out, want in zip(outs, shapes, strict=True):
        if out.shape != want:
            raise GraphError(f"reference gave shape {out.shape}, expected {want}",
                             node.describe())
    return outs


def bindings_for(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The size of every symbol, from the concrete shapes of the named inputs.

    Raises:
        VkumdValueError: a missing input, or shapes that disagree with the declared ones.
    """
    env: dict[str, int] = {}
    for strict in (False, True):
        for v in graph.inputs:
            if v.name not in shapes:
                raise VkumdValueError(f"input {v.name!r} is missing; the graph takes "
                                      f"{', '.join(repr(i.name) for i in graph.inputs)}")
            graph.dims.unify(v.shape, shapes[v.name], env, f"input {v.name!r}", strict)
    return env


def evaluate(graph: Graph, inputs: Mapping[str, object], *, keep: bool = False
             ) -> list[np.ndarray] | dict[int, np.ndarray]:
    """Run ``graph`` in float64 numpy.

    Args:
        graph: the graph.
        inputs: an array per input name (rounded to the input's dtype first).
        keep: return every value by id instead of only the outputs.

    Returns:
        The outputs in order (float64 arrays), or with ``keep`` a dict of every value.

    Raises:
        VkumdValueError: a missing input or one whose shape contradicts the graph.
        GraphError: a node without a reference implementation.
    """
    arrays = {name: np.asarray(a) for name, a in inputs.items()}
    env = bindings_for(graph, {name: a.shape for name, a in arrays.items()})
    values: dict[int, np.ndarray] = {}
    for v in graph.inputs:
        values[v.id] = round_to(np.asarray(arrays[v.name], np.float64), v.dtype)
    for v in graph.weights:
        values[v.id] = np.asarray(v.data, np.float64)
    for node in graph.nodes:
        args = [values[v.id] if v is not None else None for v in node.inputs]
        shapes = [graph.dims.bind(o.shape, env) for o in node.outputs]
        for out, result in zip(node.outputs, run_node(node, args, shapes), strict=True):
            values[out.id] = result
    if keep:
        return values
    return [values[v.id] for v in graph.outputs]
