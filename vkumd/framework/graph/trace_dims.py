"""SymbolicDim: a symbolic dimension as a traced tensor's ``.shape`` shows it.

A traced function may compute with sizes (``x.reshape(b * s, -1)``), but a symbolic size has
no value while tracing: using one as an int, a float or a truth value would bake the
example's size into a graph meant for every size, so it raises
:class:`~vkumd.framework.graph.trace_errors.SymbolicDimError`, naming the user's line.
"""

from __future__ import annotations

from typing import Any

from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.trace_errors import SymbolicDimError, at_site


class SymbolicDim(Dim):
    """A symbolic dimension as a traced tensor's ``.shape`` shows it.

    It is a :class:`Dim` (reshape targets and the IR take it as one), but it refuses to
    become an int or a float: its size is known only when the compiled function runs.
    Arithmetic with ints gives SymbolicDims again, so ``x.shape[0] * 2`` keeps the check.
    """

    __slots__ = ()

    @classmethod
    def of(cls, d: int | Dim) -> int | SymbolicDim:
        """``d`` itself when an int, else the same polynomial as a SymbolicDim."""
        if isinstance(d, Dim) and not isinstance(d, SymbolicDim):
            return cls(d._terms)  # a subclass reads its base's canonical form
        return d

    def plain(self) -> int | Dim:
        """The same dimension as an ordinary :class:`Dim` (what the IR stores)."""
        return self.subs({})

    def _refuse(self, what: str) -> SymbolicDimError:
        return SymbolicDimError(
            f"symbolic dimension {self} is used as {what}{at_site()}; its size is known only "
            "when the compiled function runs. Use it in reshape/view shapes, or make the "
            "dimension static (leave it out of dynamic=)")

    def __index__(self) -> int:
        raise self._refuse("an int")

    def __int__(self) -> int:
        raise self._refuse("an int")

    def __float__(self) -> float:
        raise self._refuse("a float")

    def __truediv__(self, other: object) -> Any:
        raise self._refuse("a number in a division")

    def __rtruediv__(self, other: object) -> Any:
        raise self._refuse("a number in a division")

    def __pow__(self, other: object) -> Any:
        raise self._refuse("a number in a power")

    # An `if` on a size would bake one example's answer into the graph for every input.
    def __bool__(self) -> bool:
        raise self._refuse("a truth value")

    def __lt__(self, other: object) -> bool:
        raise self._refuse("a number in a comparison")

    def __le__(self, other: object) -> bool:
        raise self._refuse("a number in a comparison")

    def __gt__(self, other: object) -> bool:
        raise self._refuse("a number in a comparison")

    def __ge__(self, other: object) -> bool:
        raise self._refuse("a number in a comparison")

    def _rewrap(self, result: Any, other: object) -> Any:
        if result is NotImplemented:
            raise self._refuse(f"a number next to {type(other).__name__} {other!r}")
        return SymbolicDim.of(result)

    def __add__(self, other: object) -> Any:
        return self._rewrap(super().__add__(other), other)

    def __radd__(self, other: object) -> Any:
        return self._rewrap(super().__radd__(other), other)

    def __sub__(self, other: object) -> Any:
        return self._rewrap(super().__sub__(other), other)

    def __rsub__(self, other: object) -> Any:
        return self._rewrap(super().__rsub__(other), other)

    def __mul__(self, other: object) -> Any:
        return self._rewrap(super().__mul__(other), other)

    def __rmul__(self, other: object) -> Any:
        return self._rewrap(super().__rmul__(other), other)

    def __floordiv__(self, other: object) -> Any:
        return SymbolicDim.of(super().__floordiv__(other))


def plain_dim(d: Any) -> Any:
    """``d`` with a SymbolicDim turned into an ordinary Dim (anything else unchanged)."""
    return d.plain() if isinstance(d, SymbolicDim) else d
