"""Shape buckets: which bucket's memory serves a call, from the sizes its inputs give the
symbols.

A compiled graph allocates its memory once per bucket: every symbolic dimension (``batch``,
``seq``) is rounded up to a bucket size, powers of two by default or the smallest of a list
the caller gives per symbol. The launches themselves are recorded at the true sizes over
that memory (see :mod:`vkumd.framework.execute.bucket`), so one bucket serves every size up
to it and no padding is computed.

That is what makes buckets safe for spatial symbols (an image's ``32*h`` rows): padding a
page would change a convolution's results at the borders, but a bucket never pads: the
``h = 3`` call of an ``h = 4`` bucket convolves its true 96 rows in memory sized for 128.
So spatial symbols take the same default buckets; give ``{"h": None}`` for memory sized
exactly per page (one bucket per size) where the few-fold memory of a power of two is too
much.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, format_shape, linear, solve, sym
from vkumd.framework.graph.ir import Graph

BucketSpec = Mapping[str, Sequence[int] | None]
"""Per symbol: a list of bucket sizes, or None for exact sizes (one bucket per size).
Symbols not named get powers of two."""


class BucketPolicy:
    """Rounds each symbol's size up to its bucket.

    Args:
        graph: the graph (symbols are keyed by their class representative, so any name of an
            equated class may be given).
        buckets: see :data:`BucketSpec`; None: powers of two for every symbol.

    Raises:
        VkumdValueError: a symbol the graph's inputs do not have (a misspelt name would
            otherwise be ignored: its symbol would get powers of two), naming the known ones;
            a bucket list that is empty or holds sizes < 1.
        VkumdTypeError: ``buckets`` not a mapping, or sizes not a list of ints (or None).
    """

    def __init__(self, graph: Graph, buckets: BucketSpec | None = None) -> None:
        self._lists: dict[str, tuple[int, ...] | None] = {}
        if buckets is not None and not isinstance(buckets, Mapping):
            raise VkumdTypeError(f"buckets={buckets!r}: give a dict of symbol -> list of sizes "
                                 "(or None for exact sizes), e.g. {'seq': [64, 128, 256]}")
        known = _symbols(graph)
        for name, sizes in (buckets or {}).items():
            root = _root(graph, name) if isinstance(name, str) else None
            if root not in known:
                listed_names = ", ".join(map(repr, sorted(known))) or "none (all sizes fixed)"
                raise VkumdValueError(f"buckets names symbol {name!r}, which no input of "
                                      f"{graph.name} has; its symbols: {listed_names}")
            if sizes is None:
                self._lists[root] = None
                continue
            if (isinstance(sizes, (str, bytes, Mapping)) or not isinstance(sizes, Iterable)
                    or any(isinstance(s, bool) or not isinstance(s, Integral) for s in sizes)):
                raise VkumdTypeError(f"buckets[{name!r}] = {sizes!r}: give a list of int sizes, "
                                     "or None for exact sizes")
            listed = tuple(sorted({int(s) for s in sizes}))
            if not listed or listed[0] < 1:
                raise VkumdValueError(f"buckets[{name!r}] = {list(sizes)}: give one or more "
                                      "sizes >= 1, or None for exact sizes")
            self._lists[root] = listed

    def bucket(self, symbol: str, size: int) -> int:
        """The bucket for ``size`` of ``symbol`` (a class representative).

        Raises:
            VkumdValueError: ``size`` is past the largest listed bucket.
        """
        if symbol not in self._lists:
            return 1 << max(size - 1, 0).bit_length() if size > 1 else size
        listed = self._lists[symbol]
        if listed is None:
            return size
        for b in listed:
            if b >= size:
                return b
        raise VkumdValueError(f"symbol {symbol} is {size}, past its largest bucket "
                              f"{listed[-1]}; add a larger bucket (buckets={{{symbol!r}: "
                              f"[..., {size}]}}) or use None for exact sizes")

    def apply(self, env: Mapping[str, int]) -> dict[str, int]:
        """Every symbol of ``env`` rounded to its bucket."""
        return {name: self.bucket(name, size) for name, size in env.items()}


def _symbols(graph: Graph) -> set[str]:
    """The class representatives of every symbol in the graph inputs' shapes."""
    found = set()
    for v in graph.inputs:
        for d in v.shape:
            if isinstance(d, Dim):
                found |= {_root(graph, name) for name in d.symbols}
    return found


def _root(graph: Graph, name: str) -> str:
    resolved = graph.dims.resolve(sym(name))
    if isinstance(resolved, int):
        return name
    return next(iter(resolved.symbols))


def bind_symbols(graph: Graph, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    """The size of every symbol (by class representative) from the inputs' shapes.

    Args:
        graph: the graph.
        shapes: a concrete shape per input name.

    Returns:
        Symbol sizes.

    Raises:
        VkumdValueError: a missing or unknown input, a rank or fixed size that differs, two
            inputs that give one symbol different sizes (both named), or a size that is no
            whole multiple its axis declares (``100`` for ``32*h``: pad to a multiple of 32).
    """
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in shapes]
    extra = sorted(set(shapes) - set(names))
    if missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unknown {', '.join(map(repr, extra))}"] if extra else [])
        raise VkumdValueError(f"inputs: {'; '.join(parts)}; the graph takes "
                              f"{', '.join(map(repr, names))}")
    env: dict[str, int] = {}
    source: dict[str, str] = {}
    later: list[tuple[str, int | Dim, int, tuple[int, ...]]] = []
    multiples: list[tuple[str, int, Dim, int, tuple[int, ...]]] = []
    for v in graph.inputs:
        actual = tuple(int(d) for d in shapes[v.name])
        if len(actual) != len(v.shape):
            raise VkumdValueError(f"input {v.name!r} has shape {actual} of rank {len(actual)}; "
                                  f"the graph declares {format_shape(v.shape)}, of rank "
                                  f"{len(v.shape)}")
        for axis, (d, size) in enumerate(zip(v.shape, actual, strict=True)):
            r = graph.dims.resolve(d)
            if isinstance(r, Dim) and len(r.symbols) == 1 and r == sym(next(iter(r.symbols))):
                name = next(iter(r.symbols))
                if name in env and env[name] != size:
                    raise VkumdValueError(
                        f"inputs {source[name]!r} and {v.name!r} must agree on {name}: "
                        f"{source[name]!r} gives {env[name]}, {v.name!r} gives {size} "
                        f"(axis {axis} of shape {actual})")
                env.setdefault(name, size)
                source.setdefault(name, v.name)
            elif isinstance(r, Dim) and linear(r) is not None:
                multiples.append((v.name, axis, r, size, actual))
            else:
                later.append((v.name, r, size, actual))
    # A multiple of a symbol (32*h) binds it when no input gives it plainly; solved after
    # the plain ones so that a graph with both keeps the plain one's message.
    for name, axis, r, size, actual in multiples:
        if next(iter(r.symbols)) in env:
            later.append((name, r, size, actual))
            continue
        symbol, value = solve(r, size, f"input {name!r} axis {axis} (shape {actual})")
        env[symbol] = value
        source[symbol] = name
    for name, r, size, actual in later:
        got = r if isinstance(r, int) else r.bind(env)
        if got != size:
            raise VkumdValueError(f"input {name!r} has shape {actual}; a dimension declared "
                                  f"{r} is {got} with {env}, not {size}")
    return env
