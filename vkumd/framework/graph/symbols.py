"""DimTable: which symbolic dims of a graph are the same size, and binding them to ints.

Different symbols are different sizes unless the table is told otherwise
(:meth:`DimTable.equate`), which is how a caller says "``kv_seq`` is ``seq``" or
"``hidden`` is 384". Every shape comparison of shape inference goes through
:meth:`DimTable.same`, and broadcasting through :meth:`DimTable.broadcast`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework.graph.dims import Dim, Shape, as_dim, format_shape, linear, solve, sym


class DimTable:
    """Which symbols a graph treats as the same size (and which are known ints).

    A union-find over symbol names; a class's representative is an int when one was equated
    to it, else the symbol the others were declared equal to (``equate("kv", "seq")`` writes
    ``kv`` as ``seq``). Shapes are compared after :meth:`resolve`.
    """

    def __init__(self) -> None:
        self._parent: dict[str, str] = {}
        self._value: dict[str, int] = {}

    def copy(self) -> DimTable:
        """An independent table with the same equalities."""
        other = DimTable()
        other._parent = dict(self._parent)
        other._value = dict(self._value)
        return other

    def _root(self, name: str) -> str:
        while self._parent.get(name, name) != name:
            name = self._parent[name]
        return name

    def equate(self, a: str | int, b: str | int) -> None:
        """Declare symbol ``a`` the same size as ``b`` (another symbol, or an int); shapes
        then write ``a`` as ``b``.

        Raises:
            VkumdValueError: both sides are ints, or the classes already hold different ints.
        """
        if isinstance(a, int) and isinstance(b, int):
            raise VkumdValueError(f"equate({a}, {b}): at least one side must be a symbol")
        if isinstance(a, int):
            a, b = b, a
        sym(a)  # validates the name
        ra = self._root(a)
        self._parent.setdefault(ra, ra)
        if isinstance(b, int):
            known = self._value.get(ra)
            if known is not None and known != b:
                raise VkumdValueError(f"symbol {a} is already {known}; it cannot also be {b}")
            self._value[ra] = int(as_dim(b))
            return
        sym(b)
        rb = self._root(b)
        self._parent.setdefault(rb, rb)
        if ra == rb:
            return
        va, vb = self._value.get(ra), self._value.get(rb)
        if va is not None and vb is not None and va != vb:
            raise VkumdValueError(f"symbols {a} ({va}) and {b} ({vb}) cannot be equal")
        # ``a`` is the newcomer described in terms of ``b``: ``b``'s class keeps its name.
        self._parent[ra] = rb
        if va is not None:
            self._value[rb] = va

    def pairs(self) -> list[tuple[str, str | int]]:
        """Every declared equality as ``(symbol, representative)``, for printing."""
        out: list[tuple[str, str | int]] = []
        for name in sorted(self._parent):
            root = self._root(name)
            rep: str | int = self._value.get(root, root)
            if rep != name:
                out.append((name, rep))
        return out

    def resolve(self, d: int | Dim) -> int | Dim:
        """``d`` with every symbol replaced by its class's representative."""
        if isinstance(d, int) or not self._parent:
            return d
        mapping: dict[str, int | Dim] = {}
        for s in d.symbols:
            root = self._root(s)
            mapping[s] = self._value[root] if root in self._value else sym(root)
        return d.subs(mapping)

    def same(self, a: int | Dim, b: int | Dim) -> bool:
        """Whether ``a`` and ``b`` are the same size under the declared equalities."""
        return self.resolve(a) == self.resolve(b)

    def same_shape(self, a: Shape, b: Shape) -> bool:
        """Whether two shapes have the same rank and the same dimensions."""
        return len(a) == len(b) and all(self.same(x, y) for x, y in zip(a, b, strict=True))

    def broadcast(self, *shapes: Shape) -> Shape:
        """numpy broadcasting of ``shapes``: a dimension broadcasts with 1 or with itself.

        Raises:
            VkumdValueError: two dimensions of one axis differ and neither is 1; the message
                names the axis and, for symbols, how to declare them equal.
        """
        rank = max((len(s) for s in shapes), default=0)
        out: list[int | Dim] = []
        for axis in range(rank):
            acc: int | Dim = 1
            for shape in shapes:
                pos = axis - (rank - len(shape))
                if pos < 0:
                    continue
                d = self.resolve(shape[pos])
                if d == 1 or d == acc:
                    continue
                if acc == 1:
                    acc = d
                    continue
                hint = ""
                if isinstance(d, Dim) or isinstance(acc, Dim):
                    a, b = (d, acc) if isinstance(d, Dim) else (acc, d)
                    other = f"'{b}'" if isinstance(b, Dim) else str(b)
                    hint = ("; symbols are distinct sizes unless declared equal (e.g. "
                            f"GraphBuilder.assume_equal('{a}', {other}))")
                listed = ", ".join(format_shape(s) for s in shapes)
                raise VkumdValueError(f"shapes {listed} do not broadcast: axis {axis - rank} has "
                                      f"{acc} and {d}{hint}")
            out.append(acc)
        return tuple(out)

    def normalize_env(self, env: Mapping[str, int]) -> dict[str, int]:
        """``env`` keyed by class representatives (any symbol of a class may name it).

        Raises:
            VkumdValueError: two equated symbols are given different sizes, or a symbol
                declared equal to an int is given another.
        """
        out: dict[str, int] = {}
        for name, size in env.items():
            root = self._root(name)
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
                raise VkumdValueError(f"symbol {name} is bound to {size!r}; sizes are ints >= 0")
            for known in (out.get(root), self._value.get(root)):
                if known is not None and known != int(size):
                    raise VkumdValueError(f"symbol {name} is bound to {size}, but its class "
                                          f"({root}) is {known}")
            out[root] = int(size)
        return out

    def bind(self, shape: Shape, env: Mapping[str, int]) -> tuple[int, ...]:
        """``shape`` in ints, given sizes for its symbols (keyed by any name of a class).

        Raises:
            VkumdValueError: a symbol without a size.
        """
        roots = self.normalize_env(env)
        out = []
        for d in shape:
            r = self.resolve(d)
            out.append(r if isinstance(r, int) else r.bind(roots))
        return tuple(out)

    def unify(self, shape: Shape, actual: Iterable[int], env: dict[str, int], what: str,
              strict: bool = True) -> None:
        """Bind the symbols of ``shape`` so it matches the concrete ``actual``, into ``env``
        (keyed by class representatives).

        A dim that is one symbol, or a multiple of one plus a constant (``32*h``), binds it
        (solving ``32*h = size``); other symbolic dims (``batch*seq``) are checked only when
        ``strict`` (call every shape once non-strict first, so a product can use symbols that
        another shape binds).

        Raises:
            VkumdValueError: ranks or sizes that disagree (the message names ``what``); a size
                that is no whole multiple its dim declares (``100`` for ``32*h``).
        """
        actual = tuple(int(a) for a in actual)
        if len(actual) != len(shape):
            raise VkumdValueError(f"{what} has shape {actual}; expected {format_shape(shape)}")
        later, multiples = [], []
        for axis, (d, size) in enumerate(zip(shape, actual, strict=True)):
            r = self.resolve(d)
            if isinstance(r, Dim) and len(r.symbols) == 1 and r == sym(next(iter(r.symbols))):
                name = next(iter(r.symbols))
                if env.setdefault(name, size) != size:
                    raise VkumdValueError(f"{what} has shape {actual}: {name} is {size} here "
                                          f"but {env[name]} elsewhere")
            elif isinstance(r, Dim) and linear(r) is not None:
                multiples.append((axis, r, size))
            else:
                later.append((r, size))
        for axis, r, size in multiples:
            if next(iter(r.symbols)) in env:
                later.append((r, size))  # bound already: checked with the products
                continue
            name, value = solve(r, size, f"{what} axis {axis}")
            env[name] = value
        for r, size in later if strict else ():
            got = r if isinstance(r, int) else r.bind(env)
            if got != size:
                raise VkumdValueError(f"{what} has shape {actual}; expected "
                                      f"{format_shape(shape)} ({r} = {got})")
