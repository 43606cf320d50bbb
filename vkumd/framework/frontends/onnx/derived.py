"""Tensors computed from the symbolic sizes alone, on the host, when the model is called.

Exporters compute position ids, index grids and masks from the input's shape:
``Range(0, seq)``, ``position_ids[:, 0:seq]``, ``Expand`` to ``[batch, 1, 1, seq]``. Their
values depend on ``batch`` and ``seq`` only, so they are neither constants nor device work.
Such a node becomes a :class:`Derived`: the importer records how to compute it (ONNX's own
reference implementation of the node, run on the inputs with every symbol bound) and, when a
device node reads it, it becomes a graph input that :class:`~.model.OnnxModel` fills before
each call. Its shape is found by *probing*: computing it at two sets of sizes and naming each
axis after the symbol whose sizes it followed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from vkumd.framework.frontends.onnx.errors import TooBig, Unsupported
from vkumd.framework.frontends.onnx.sizes import over_limit, result_bytes
from vkumd.framework.graph import Dim, sym
from vkumd.settings import fold_limit

Bindings = Mapping[str, int]
# Two sets of sizes: odd primes far from the small sizes models hard-code (1, 2, 3, 64...),
# so an axis that follows a symbol cannot be mistaken for a constant one.
_PRIMES = (101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157)


@dataclass
class Derived:
    """A tensor whose value depends only on the symbol sizes.

    Attributes:
        fn: the computation, from the inputs' concrete values.
        inputs: the ONNX names it reads (known arrays, possibly symbolic, or other Derived).
        what: the node it came from, for error messages.
        shape: its shape, ints and symbols (set by :func:`probe_shape`).
        dtype: its numpy dtype at the probes.
        size_of: its bytes from the inputs' values, asked before ``fn`` runs while its shape
            is not known yet (at the probes); None when nothing can tell.
        probed: whether ``shape`` and ``dtype`` are set (then they give the size).
    """

    fn: Callable[[list[np.ndarray]], np.ndarray]
    inputs: list[str]
    what: str
    shape: tuple[int | Dim, ...] = ()
    dtype: np.dtype = field(default_factory=lambda: np.dtype(np.int64))
    size_of: Callable[[list[np.ndarray]], int | None] | None = None
    probed: bool = False

    def nbytes(self, bindings: Bindings, args: list[np.ndarray]) -> int | None:
        """Its bytes at ``bindings`` (computed from ``args``), known before it is computed."""
        if self.probed:
            dims = [d.bind(bindings) if isinstance(d, Dim) else d for d in self.shape]
            return math.prod(dims) * self.dtype.itemsize
        return self.size_of(args) if self.size_of is not None else None


def node_fn(node: onnx.NodeProto) -> Callable[[list[np.ndarray]], np.ndarray]:
    """The node's first output as a function of its inputs (ONNX's reference evaluator)."""
    evaluator = ReferenceEvaluator(node)
    names = list(node.input)

    def run(arrays: list[np.ndarray]) -> np.ndarray:
        feeds = {n: a for n, a in zip(names, arrays, strict=True) if n}
        return np.asarray(evaluator.run(None, feeds)[0])

    return run


def node_size(node: onnx.NodeProto) -> Callable[[list[np.ndarray]], int | None]:
    """The bytes of the node's results as a function of its inputs, from ONNX's shape
    inference (None when it cannot tell): asked before :func:`node_fn` runs at the probes."""
    names = list(node.input)

    def size(arrays: list[np.ndarray]) -> int | None:
        return result_bytes(node, dict(zip(names, arrays, strict=True)), None)

    return size


def concrete(array: np.ndarray, bindings: Bindings) -> np.ndarray:
    """A known array with each symbolic dimension replaced by its size (object -> int64)."""
    if array.dtype != object:
        return array
    flat = [v.bind(bindings) if isinstance(v, Dim) else int(v) for v in array.reshape(-1)]
    return np.asarray(flat, np.int64).reshape(array.shape)


def evaluate(name: str, env: Mapping[str, object], bindings: Bindings,
             cache: dict[str, np.ndarray]) -> np.ndarray:
    """The value of ``name`` at ``bindings`` (``cache`` holds what is computed already).

    Raises:
        Unsupported: the computation fails at these sizes; :class:`TooBig` when its result
            would pass the fold limit (``VKUMD_FOLD_LIMIT``), before it is computed.
    """
    if name in cache:
        return cache[name]
    bound = env[name]
    if isinstance(bound, np.ndarray):
        return concrete(bound, bindings)
    assert isinstance(bound, Derived)
    args = [evaluate(n, env, bindings, cache) if n else np.empty(0) for n in bound.inputs]
    size, limit = bound.nbytes(bindings, args), fold_limit()
    if size is not None and size > limit:
        # The sizes, at a probe or a call, may make the value arbitrarily large.
        raise TooBig(f"{bound.what} at the sizes {dict(bindings)}: {over_limit(size, limit)}")
    try:
        out = bound.fn(args)
    except Exception as exc:  # noqa: BLE001 -- onnx.reference raises anything
        raise Unsupported(f"{bound.what} cannot be computed from the sizes "
                          f"{dict(bindings)}: {exc}") from exc
    cache[name] = out
    return out


def symbols_of(name: str, env: Mapping[str, object]) -> list[str]:
    """The symbols the value of ``name`` depends on, sorted."""
    found: set[str] = set()
    todo, seen = [name], set()
    while todo:
        n = todo.pop()
        if not n or n in seen:
            continue
        seen.add(n)
        bound = env[n]
        if isinstance(bound, Derived):
            todo.extend(bound.inputs)
        elif isinstance(bound, np.ndarray) and bound.dtype == object:
            for v in bound.reshape(-1):
                if isinstance(v, Dim):
                    found |= v.symbols
    return sorted(found)


def probes(symbols: Sequence[str]) -> tuple[dict[str, int], dict[str, int]]:
    """The two sets of sizes a derived value is computed at to find its shape."""
    if 2 * len(symbols) > len(_PRIMES):
        raise Unsupported(f"a value computed from {len(symbols)} symbolic sizes (at most "
                          f"{len(_PRIMES) // 2} are supported)")
    first = dict(zip(symbols, _PRIMES, strict=False))
    second = dict(zip(symbols, _PRIMES[len(symbols):], strict=False))
    return first, second


def probe_shape(name: str, env: Mapping[str, object]) -> None:
    """Set the shape and dtype of the :class:`Derived` bound to ``name``.

    Raises:
        Unsupported: the value cannot be computed, or an axis follows the sizes in a way no
            single symbol names (``seq - 1``, ``batch * seq``).
    """
    derived = env[name]
    assert isinstance(derived, Derived)
    symbols = symbols_of(name, env)
    first, second = probes(symbols)
    a = evaluate(name, env, first, {})
    b = evaluate(name, env, second, {})
    if a.ndim != b.ndim:
        raise Unsupported(f"{derived.what}: its rank changes with the sizes")
    shape: list[int | Dim] = []
    for x, y in zip(a.shape, b.shape, strict=True):
        if x == y:
            shape.append(int(x))
            continue
        named = [s for s in symbols if first[s] == x and second[s] == y]
        if not named:
            raise Unsupported(f"{derived.what}: an axis of {x} at sizes {first} and {y} at "
                              f"{second} is not one symbol (only plain symbols are supported)")
        shape.append(sym(named[0]))
    derived.shape, derived.dtype, derived.probed = tuple(shape), a.dtype, True
