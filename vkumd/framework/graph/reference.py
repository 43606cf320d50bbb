"""A float64 numpy evaluator of graphs: the oracle of the tests and constant folding's math.

Each op's float64 implementation is its registry record's ``reference``; this module runs
them over a graph and holds the math several of them share.

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
from typing import TYPE_CHECKING

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.registry import OPS

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Graph, Node

_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def round_to(array: np.ndarray, dtype: dtypes.DType) -> np.ndarray:
    """``array`` rounded to what ``dtype`` stores, back in float64."""
    if dtype.is_float:
        if dtype is dtypes.bfloat16:
            array = np.asarray(array, np.float32)  # the bfloat16 rounding starts from float32
        shape = np.shape(array)
        stored = dtypes.from_storage(dtypes.to_storage(array, dtype), dtype)
        return np.asarray(stored, np.float64).reshape(shape)
    if dtype is dtypes.bool_:  # nonzero (NaN included) is True
        return (np.asarray(array, np.float64) != 0).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return np.trunc(np.asarray(array, np.float64)).astype(dtype.numpy).astype(np.float64)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in float64."""
    return np.asarray(_erf(x), np.float64)


def gelu(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)`` with the exact (erf) normal CDF."""
    # Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf cancels every digit in the negative tail.
    # np.asarray: on a 0-d array the ufunc gives a bare float, which has no astype.
    return 0.5 * x * np.asarray(_erfc(-x / math.sqrt(2.0)), np.float64)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``."""
    return x / (1.0 + np.exp(-x))


ACTIVATIONS: dict[str | None, Callable[[np.ndarray], np.ndarray]] = {
    None: lambda x: x, "relu": lambda x: np.maximum(x, 0.0), "gelu": gelu,
    "gelu_tanh": gelu_tanh, "silu": silu}


def quiet(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """``fn(x)`` in float64 without numpy's warnings (NaN and inf are results here, as in the
    float32 kernels)."""
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


def run_node(node: Node, args: Sequence[np.ndarray | None], shapes: list[tuple[int, ...]]
             ) -> list[np.ndarray]:
    """``node``'s outputs from float64 ``args``; ``shapes`` are its outputs' concrete shapes.

    Raises:
        GraphError: the op has no reference, or its result has the wrong shape.
    """
    op = OPS.get(node.op)
    if op is None:
        raise GraphError(f"no reference implementation of {node.op}", node.describe())
    attrs = op.full_attrs(node.attrs)
    outs = [np.asarray(o, np.float64) for o in op.reference(list(args), attrs, shapes)]
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
