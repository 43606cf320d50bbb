"""Host weights to device tensors, all or nothing: the one upload the models share."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

W = TypeVar("W", bound="Mappable")


class Mappable(Protocol):
    """A model's weights: ``map(fn)`` gives the same weights with each leaf ``fn(name, leaf)``."""

    def map(self: W, fn: Any) -> W: ...


def upload_leaves(ctx: Any, weights: W, dtype: Any = None) -> W:
    """Copy every host leaf of ``weights`` to a new tensor on ``ctx`` (in ``dtype`` where
    given, else the array's own); when one fails (out of memory), every tensor made so far
    is freed before the error goes on."""
    made: list[Any] = []

    def put(name: str, array: Any) -> Any:
        made.append(ctx.tensor(array, dtype=dtype))
        return made[-1]

    try:
        return weights.map(put)
    except BaseException:
        for t in made:
            t.release()
        raise
